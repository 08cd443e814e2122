"""The `elrwatch` command line: one subcommand per job an operator runs.

Every option can also be set from the environment as ``ELRWATCH_<OPTION>`` (e.g. ``ELRWATCH_STORE``).
The commands are thin: they parse options and call the library (``elrwatch.state``, ``elrwatch.streaming``,
``elrwatch.api``), where the behaviour and its tests live.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    name="elrwatch",
    help="Real-time ISR / ELR safety monitor for Apache Kafka (KRaft) partitions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "ELRWATCH"},
)


def _fail(message: str, code: int = 2) -> None:
    """Print a one-line error to stderr and exit non-zero."""
    typer.echo(f"elrwatch: error: {message}", err=True)
    raise typer.Exit(code)


InputFile = Annotated[
    str,
    typer.Argument(help="Event file (envelope JSON lines and/or kafka-dump-log output); '-' for stdin."),
]
DefaultMinIsr = Annotated[
    int,
    typer.Option(
        "--default-min-isr",
        envvar="ELRWATCH_DEFAULT_MIN_ISR",
        min=1,
        help="min.insync.replicas when neither the topic nor the cluster sets it (Kafka's default is 1).",
    ),
]


@app.command()
def replay(
    file: InputFile = "-",
    default_min_isr: DefaultMinIsr = 1,
    pretty: Annotated[bool, typer.Option("--pretty/--compact", help="Indent the JSON output.")] = True,
    advice: Annotated[
        bool, typer.Option("--advice/--no-advice", help="Include each partition's outlook and recommendation.")
    ] = True,
) -> None:
    """Replay metadata events in order and print the resulting state as one JSON document."""
    from elrwatch.state.replay import ReplayInputError, replay_to_document
    from elrwatch.state.report import dumps_document

    try:
        document = replay_to_document(file, default_min_isr=default_min_isr, advice=advice)
    except ReplayInputError as exc:
        _fail(str(exc))
    sys.stdout.write(dumps_document(document, pretty=pretty))
    sys.stdout.write("\n")


@app.command()
def conformance(
    file: Annotated[str, typer.Argument(help="Conformance cases (JSON lines, conformance/README.md format).")],
) -> None:
    """Replay controller conformance cases through the controller model: PASS/FAIL per case, a summary."""
    from elrwatch.state.conformance import CaseFileError, run_file

    try:
        _, failed = run_file(file, sys.stdout)
    except CaseFileError as exc:
        _fail(str(exc))
    if failed:
        raise typer.Exit(1)


StoreUrl = Annotated[
    str,
    typer.Option(
        "--store",
        envvar="ELRWATCH_STORE",
        help="Status store URL: sqlite:///PATH (default) or postgresql+psycopg://USER@HOST/DB.",
    ),
]
StorePasswordFile = Annotated[
    Path | None,
    typer.Option(
        "--store-password-file",
        envvar="ELRWATCH_STORE_PASSWORD_FILE",
        help="File whose first line is the store's database password (keeps it out of the URL).",
    ),
]


def _open_store(store: str, store_password_file: Path | None):  # -> StatusStore
    """Open an existing status store or fail with a one-line error (password masked)."""
    from sqlalchemy.engine import make_url

    from elrwatch.streaming.store import StatusStore, mask_url

    try:
        url = make_url(store)
    except Exception:
        _fail("--store is not a database URL (e.g. sqlite:///var/elrwatch.db)")
    if url.get_backend_name() == "sqlite" and url.database and not Path(url.database).exists():
        _fail(f"no status store at {mask_url(url)}")
    try:
        return StatusStore(store, password_file=store_password_file)
    except OSError as exc:
        _fail(f"cannot read --store-password-file: {exc.strerror}")
    except Exception as exc:
        _fail(f"cannot open status store {mask_url(url)}: {type(exc).__name__}")


@app.command()
def status(
    store: StoreUrl = "sqlite:///var/elrwatch.db",
    store_password_file: StorePasswordFile = None,
    pretty: Annotated[bool, typer.Option("--pretty/--compact", help="Indent the JSON output.")] = True,
) -> None:
    """Print the status store's content as one JSON document, in the same shape as `elrwatch replay`."""
    import json

    from sqlalchemy.exc import SQLAlchemyError

    status_store = _open_store(store, store_password_file)
    try:
        document = status_store.read_document()
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", exc) or type(exc).__name__).splitlines()[0]
        _fail(f"cannot read status store {status_store.masked_url}: {reason}")
    finally:
        status_store.dispose()
    sys.stdout.write(json.dumps(document, indent=2 if pretty else None, ensure_ascii=False))
    sys.stdout.write("\n")


@app.command()
def api(
    store: StoreUrl = "sqlite:///var/elrwatch.db",
    store_password_file: StorePasswordFile = None,
    host: Annotated[str, typer.Option("--host", envvar="ELRWATCH_HOST", help="Listen address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", envvar="ELRWATCH_PORT", min=1, max=65535, help="Port.")] = 8080,
    api_token_file: Annotated[
        Path | None,
        typer.Option(
            "--api-token-file",
            envvar="ELRWATCH_API_TOKEN_FILE",
            help="File with the bearer token every endpoint but /healthz requires (or env ELRWATCH_API_TOKEN).",
        ),
    ] = None,
    ready_max_age_seconds: Annotated[
        float,
        typer.Option(
            "--ready-max-age-seconds",
            envvar="ELRWATCH_READY_MAX_AGE_SECONDS",
            min=0,
            help="/readyz fails when the store was last written longer ago than this (0 = no limit).",
        ),
    ] = 900.0,
    log_level: Annotated[str, typer.Option("--log-level", envvar="ELRWATCH_LOG_LEVEL", help="uvicorn log level.")]
    = "info",
) -> None:
    """Serve the REST API and the status page over a status store (uvicorn, one worker)."""
    import uvicorn

    from elrwatch.api.app import create_app
    from elrwatch.api.settings import Settings

    status_store = _open_store(store, store_password_file)
    try:
        settings = Settings(store=store, store_password_file=store_password_file, api_token_file=api_token_file,
                            host=host, port=port, ready_max_age_seconds=ready_max_age_seconds)
        application = create_app(settings, store=status_store)
    except (OSError, ValueError) as exc:
        _fail(f"invalid API settings: {exc}")
    typer.echo(f"elrwatch api: store {status_store.masked_url}, serving http://{host}:{port}/", err=True)
    uvicorn.run(application, host=host, port=port, workers=1, log_level=log_level, access_log=False)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
