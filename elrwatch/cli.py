"""The `elrwatch` command line: one subcommand per job an operator runs.

Every option can also be set from the environment as ``ELRWATCH_<OPTION>`` (e.g. ``ELRWATCH_STORE``).
The commands are thin: they parse options and call the library (``elrwatch.state``, ``elrwatch.streaming``,
``elrwatch.api``), where the behaviour and its tests live.
"""

from __future__ import annotations

import sys
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


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
