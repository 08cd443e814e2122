"""The `elrwatch` command line: one subcommand per job an operator runs.

Every option can also be set from the environment as ``ELRWATCH_<OPTION>`` (e.g. ``ELRWATCH_STORE``).
The commands are thin: they parse options and call the library (``elrwatch.state``, ``elrwatch.streaming``,
``elrwatch.api``), where the behaviour and its tests live.

This module imports only what the options are declared with (typer, ``options``, the settings objects): each
command imports the library it calls when it runs, so that ``--help`` and the sidecars (`bridge`, `agent`,
`produce`) start without loading the core's replay, the stream's Spark, pandas, numpy or pyarrow, or the API's
FastAPI and SQLAlchemy (``tests/test_cli_imports.py``).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from elrwatch.help_layout import HelpCommand
from elrwatch.kafkaio.config import KafkaSettings, SourceError
from elrwatch.options import (
    JOB_OPTIONS,
    KAFKA,
    METRICS,
    STORE,
    DefaultMinIsr,
    EventTopic,
    StorePasswordFile,
    command_option,
    grouped,
)
from elrwatch.options import fail as _fail
from elrwatch.options import option as _opt
from elrwatch.store.urls import DEFAULT_URL
from elrwatch.streaming.config import JobConfig, MetricsEndpoint, StoreSettings

#: The options of one command each (env vars ELRWATCH_<COMMAND>_<OPTION>).
_whatif_opt, _sim_opt = command_option("whatif"), command_option("simulate")
_bridge_opt, _agent_opt = command_option("bridge"), command_option("agent")
_recover_opt = command_option("recover")

#: The panels of `elrwatch --help`.
LIVE = "Monitoring a cluster"
STORE_PANEL = "Reading the status store"
FILES = "Event files (offline)"


class _Typer(typer.Typer):
    """typer.Typer whose commands' ``--help`` crops no option name (:class:`HelpCommand`)."""

    def command(self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Callable[..., Any]:
        """typer's ``command`` decorator, with :class:`HelpCommand` as the default command class."""
        return super().command(*args, cls=cls or HelpCommand, **kwargs)


app = _Typer(
    name="elrwatch",
    help="Real-time ISR / ELR safety monitor for Apache Kafka (KRaft) partitions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "ELRWATCH"},
)


InputFile = Annotated[
    str,
    typer.Argument(help="Event file (envelope JSON lines and/or kafka-dump-log output); '-' for stdin."),
]


InputFiles = Annotated[
    list[str] | None,
    typer.Argument(
        help="Event files, replayed in order as one input (e.g. a snapshot's DumpLogSegments output, then its "
        "segments'); '-' or none for stdin.",
        show_default=False,
    ),
]


@app.command(rich_help_panel=FILES)
def replay(
    files: InputFiles = None,
    default_min_isr: DefaultMinIsr = None,
    pretty: Annotated[bool, _opt("--pretty/--compact", "Indent the JSON output.", command="replay")] = True,
    advice: Annotated[
        bool, _opt("--advice/--no-advice", "Include each partition's outlook and recommendation.", command="replay")
    ] = True,
) -> None:
    """Replay metadata events in order and print the resulting state as one JSON document."""
    from elrwatch.state.replay import ReplayInputError, replay_to_document
    from elrwatch.state.report import dumps_document

    try:
        document = replay_to_document(files or ["-"], default_min_isr=default_min_isr, advice=advice)
    except ReplayInputError as exc:
        _fail(str(exc))
    if "partial" in document:
        typer.echo(f"elrwatch: warning: {document['partial']['message']}", err=True)
    sys.stdout.write(dumps_document(document, pretty=pretty))
    sys.stdout.write("\n")


@app.command(rich_help_panel=FILES)
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


@app.command(rich_help_panel=FILES)
def advise(
    topic: Annotated[str, typer.Argument(help="Topic name (or id).")],
    partition: Annotated[int, typer.Argument(help="Partition id.", min=0)],
    file: InputFile = "-",
    strategy: Annotated[
        str | None,
        _opt(
            "--strategy",
            "Aggressive, Balanced or None (default: from unclean.leader.election.enable).",
            command="advise",
        ),
    ] = None,
    default_min_isr: DefaultMinIsr = None,
) -> None:
    """Replay FILE and print one partition's outlook (what Kafka will do) and recommendation (what to do)."""
    import json

    from elrwatch.state.advice import STRATEGIES
    from elrwatch.state.advice import advise as advise_partition
    from elrwatch.state.replay import ReplayInputError, replay_file

    if strategy is not None and strategy not in STRATEGIES:
        _fail(f"unknown strategy {strategy!r} (Aggressive, Balanced or None)")
    try:
        cluster = replay_file(file, default_min_isr).cluster
    except ReplayInputError as exc:
        _fail(str(exc))
    try:
        document = advise_partition(cluster, topic, partition, strategy)
    except KeyError as exc:
        _fail(str(exc.args[0]))
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


@app.command(rich_help_panel=FILES)
def whatif(
    down: Annotated[str, _whatif_opt("--down", "Brokers to take down, comma-separated (e.g. 1,2).")],
    file: InputFile = "-",
    unclean: Annotated[
        bool, _whatif_opt("--unclean/--fenced", "Re-register them after an unclean shutdown instead of fencing.")
    ] = False,
    limit: Annotated[int, _whatif_opt("--limit", "At most this many partitions per list.", min=0)] = 1000,
    default_min_isr: DefaultMinIsr = None,
) -> None:
    """Replay FILE and take brokers down through the controller model: what would end under min ISR or leaderless.

    Prints the partitions that end under min ISR, leaderless, or needing an unclean election, with counts (JSON)."""
    import json

    from elrwatch.state.replay import ReplayInputError, replay_file
    from elrwatch.state.whatif import what_if

    try:
        brokers = [int(part) for part in down.split(",") if part.strip()]
    except ValueError:
        _fail(f"--down must be broker ids separated by commas, got {down!r}")
    try:
        cluster = replay_file(file, default_min_isr).cluster
    except ReplayInputError as exc:
        _fail(str(exc))
    result = what_if(cluster, brokers, unclean=unclean, limit=limit)
    sys.stdout.write(json.dumps(result, indent=2) + "\n")


@app.command(rich_help_panel=FILES)
def simulate(
    brokers: Annotated[int, _sim_opt("--brokers", "Number of brokers.", min=1)] = 6,
    topics: Annotated[int, _sim_opt("--topics", "Number of topics.", min=0)] = 3,
    partitions: Annotated[int, _sim_opt("--partitions", "Partitions per topic.", min=1)] = 10,
    replication_factor: Annotated[int, _sim_opt("--replication-factor", min=1)] = 3,
    min_isr: Annotated[int, _sim_opt("--min-isr", "Cluster min.insync.replicas.", min=1)] = 2,
    scenario: Annotated[str | None, _sim_opt("--scenario", "kip966-walkthrough, last-replica-standing-elr, … ")] = None,
    faults: Annotated[
        float | None, _sim_opt("--faults", "Random events; chance each is a fault.", min=0.0, max=1.0)
    ] = None,
    seed: Annotated[int, _sim_opt("--seed", "RNG seed: the same seed writes the same records.")] = 1,
    records: Annotated[
        int | None, _sim_opt("--records", "With --faults: records to write (default 10000).", min=1)
    ] = None,
    output: Annotated[str, _sim_opt("--output", "Output file; '-' for stdout.", short="-o")] = "-",
) -> None:
    """Simulate a cluster through the controller model and write the metadata records Kafka would write."""
    from elrwatch.state.simulator import simulate as run_simulation

    if (scenario is None) == (faults is None):
        _fail("give exactly one of --scenario NAME or --faults RATE")
    try:
        if output == "-":
            run_simulation(
                sys.stdout.buffer, brokers=brokers, topics=topics, partitions=partitions,
                replication_factor=replication_factor, min_isr=min_isr, seed=seed, scenario=scenario,
                faults=faults, records=records,
            )  # fmt: skip
            sys.stdout.buffer.flush()
        else:
            with open(output, "wb") as handle:
                run_simulation(
                    handle, brokers=brokers, topics=topics, partitions=partitions,
                    replication_factor=replication_factor, min_isr=min_isr, seed=seed, scenario=scenario,
                    faults=faults, records=records,
                )  # fmt: skip
    except ValueError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot write {output}: {exc.strerror or exc}")


def _open_store(store: str, store_password_file: str | Path | None, must_exist: bool = True):  # -> StatusStore
    """Open a status store (an existing one if ``must_exist``) or fail with a one-line error (password masked)."""
    from sqlalchemy.engine import make_url

    from elrwatch.store import StatusStore, mask_url  # loads SQLAlchemy: only for the commands that read a store

    try:
        url = make_url(store)
    except Exception:
        _fail("--store is not a database URL (e.g. sqlite:///var/elrwatch.db)")
    if must_exist and url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        # a path, or SQLite's URI form (sqlite:///file:/path/store.db?mode=ro&uri=true)
        path = url.database.removeprefix("file:").split("?", 1)[0] if url.database.startswith("file:") else url.database
        if not Path(path).exists():
            _fail(f"no status store at {mask_url(url)}")
    try:
        return StatusStore(store, password_file=store_password_file)
    except OSError as exc:
        _fail(f"cannot read --store-password-file: {exc.strerror}")
    except Exception as exc:
        _fail(f"cannot open status store {mask_url(url)}: {type(exc).__name__}")


@app.command(rich_help_panel=STORE_PANEL)
@grouped
def status(
    store: StoreSettings = STORE,
    pretty: Annotated[bool, _opt("--pretty/--compact", "Indent the JSON output.", command="status")] = True,
) -> None:
    """Print the status store's content as one JSON document, in the same shape as `elrwatch replay`."""
    import json

    from sqlalchemy.exc import SQLAlchemyError

    status_store = _open_store(store.url, store.password_file)
    try:
        document = status_store.read_document()
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", exc) or type(exc).__name__).splitlines()[0]
        _fail(f"cannot read status store {status_store.masked_url}: {reason}")
    finally:
        status_store.dispose()
    sys.stdout.write(json.dumps(document, indent=2 if pretty else None, ensure_ascii=False))
    sys.stdout.write("\n")


@app.command("restart-check", rich_help_panel=STORE_PANEL)
def restart_check(
    broker: Annotated[int, typer.Argument(help="Broker id.", min=0)],
    file: Annotated[
        str | None, typer.Argument(help="Event file to replay instead of reading a store; '-' for stdin.")
    ] = None,
    store: Annotated[
        str | None, _opt("--store", f"Status store URL (default without FILE: {DEFAULT_URL}).", show_default=False)
    ] = None,
    store_password_file: StorePasswordFile = None,
    limit: Annotated[
        int, _opt("--limit", "At most this many partitions per list.", command="restart-check", min=1, max=1000)
    ] = 100,
    default_min_isr: DefaultMinIsr = None,
) -> None:
    """Is it safe to stop BROKER now? From the status store, or by replaying FILE.

    Prints the verdict, the reason and the partitions that stopping it would leave under min ISR or without an
    electable leader (JSON, as GET /v1/brokers/{id}/restart-check). Exit code 0: safe, 1: not safe, 2: usage error
    (unknown broker, unreadable input)."""
    import json

    if file is not None and store is not None:
        _fail("give --store URL or FILE, not both")
    if file is not None:
        from elrwatch.state.cluster import REFERENCE_STORE  # a light command: the store that needs no numpy
        from elrwatch.state.replay import ReplayInputError, replay_file
        from elrwatch.state.report import restart_check as check_cluster

        try:
            cluster = replay_file(file, default_min_isr, store=REFERENCE_STORE).cluster
        except ReplayInputError as exc:
            _fail(str(exc))
        try:
            result = check_cluster(cluster, broker, limit=limit)
        except KeyError as exc:
            _fail(str(exc.args[0]))
    else:
        from sqlalchemy.exc import SQLAlchemyError

        status_store = _open_store(store or DEFAULT_URL, store_password_file)
        try:
            found = status_store.restart_check(broker, limit=limit)
        except SQLAlchemyError as exc:
            reason = str(getattr(exc, "orig", exc) or type(exc).__name__).splitlines()[0]
            _fail(f"cannot read status store {status_store.masked_url}: {reason}")
        finally:
            status_store.dispose()
        if found is None:
            _fail(f"unknown broker {broker}")
        result = found

    from elrwatch.api.cursor import encode_cursor

    for kind in ("blocking", "offline"):  # the cursor of the API's next page (GET /v1/brokers/{id}/restart-check)
        nxt = result[kind]["nextCursor"]
        result[kind]["nextCursor"] = encode_cursor(tuple(nxt)) if nxt else None
    sys.stdout.write(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    if not result["safe"]:
        raise typer.Exit(1)


@app.command(rich_help_panel=STORE_PANEL)
@grouped
def api(
    store: StoreSettings = STORE,
    host: Annotated[str, _opt("--host", "Listen address.")] = "127.0.0.1",
    port: Annotated[int, _opt("--port", "Port.", min=1, max=65535)] = 8080,
    api_token_file: Annotated[
        Path | None,
        _opt(
            "--api-token-file",
            "File with the bearer token every endpoint but /healthz requires (or env ELRWATCH_API_TOKEN).",
        ),
    ] = None,
    ready_max_age_seconds: Annotated[
        float,
        _opt(
            "--ready-max-age-seconds",
            "/readyz fails when the store was last written longer ago than this (0 = no limit).",
            min=0,
        ),
    ] = 900.0,
    ready_max_store_behind_batches: Annotated[
        int,
        _opt(
            "--ready-max-store-behind-batches",
            "/readyz fails when the streaming job's last store write was this many micro-batches behind its "
            "gauges (the job writes the store behind its batches; 0 = no limit).",
            min=0,
        ),
    ] = 10,
    heavy_query_slots: Annotated[
        int,
        _opt(
            "--heavy-query-slots",
            "What-if queries (their cost grows with the store) that may run at once; one more gets 503 with "
            "Retry-After.",
            min=1,
        ),
    ] = 2,
    heavy_query_timeout_seconds: Annotated[
        float,
        _opt(
            "--heavy-query-timeout-seconds", "A what-if still running after this long ends with a 503 problem.", min=0.1
        ),
    ] = 30.0,
    log_level: Annotated[str, _opt("--log-level", "uvicorn log level.")] = "info",
) -> None:
    """Serve the REST API and the status page over a status store (uvicorn, one worker)."""
    import uvicorn

    from elrwatch.api.app import create_app  # FastAPI and uvicorn: only for `elrwatch api`
    from elrwatch.api.settings import Settings

    status_store = _open_store(store.url, store.password_file, must_exist=False)  # /readyz waits for the job
    try:
        settings = Settings(
            store=store.url,
            store_password_file=store.password_file,
            api_token_file=api_token_file,
            host=host,
            port=port,
            ready_max_age_seconds=ready_max_age_seconds,
            ready_max_store_behind_batches=ready_max_store_behind_batches,
            heavy_query_slots=heavy_query_slots,
            heavy_query_timeout_seconds=heavy_query_timeout_seconds,
        )
        application = create_app(settings, store=status_store)
    except (OSError, ValueError) as exc:
        _fail(f"invalid API settings: {exc}")
    access = (
        "a bearer token is required on every endpoint but /healthz"
        if settings.token() is not None
        else "no token required: anyone who reaches the port reads it (--api-token-file or ELRWATCH_API_TOKEN sets one)"
    )
    typer.echo(f"elrwatch api: store {status_store.masked_url}, serving http://{host}:{port}/; {access}", err=True)
    import sys

    # A what-if thread holds the GIL in Python loops: the event loop serving lookups gets it back within 1 ms
    # (Python's default, 5 ms, queues a lookup behind each slice of a heavy query)
    sys.setswitchinterval(0.001)
    uvicorn.run(application, host=host, port=port, workers=1, log_level=log_level, access_log=False)


# --- Kafka and the streaming job: produce, stream, bridge, agent --------------------------------------------------


#: The panel of `elrwatch produce --help` with the options of --simulate.
SIM = "Generated events (--simulate)"


#: --duration of `produce`, `bridge` and `agent`.
Duration = Annotated[float, _opt("--duration", "Stop after this many seconds (0 = no limit).", min=0)]


def _kafka_options(kafka: KafkaSettings, topic: str | None) -> dict[str, str]:
    """The event topic's client options (`produce`, `bridge`, `agent`: servers and topic required)."""
    if not kafka.bootstrap_servers or not topic:
        _fail("--bootstrap-servers and --topic are required")
    return kafka.options(topic)


def _run_sidecar(name: str, run: Callable[[], object], usage_errors: tuple[type[Exception], ...]) -> None:
    """Run a sidecar (`bridge`, `agent`) logging to stderr: its refusals (``usage_errors``) are one-line usage
    errors (exit 2), any other failure at start one line without a traceback (exit 1)."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # the sidecar logs and counts connection failures itself
    try:
        run()
    except usage_errors as exc:
        _fail(str(exc))
    except Exception as exc:  # kafka-python errors at start
        _fail(f"{name} failed: {type(exc).__name__}: {exc}", code=1)


@app.command(rich_help_panel=LIVE)
@grouped
def produce(
    file: Annotated[
        str | None, typer.Argument(help="Event file (envelope lines / dump-log output); '-' for stdin.")
    ] = None,
    kafka: KafkaSettings = KAFKA,
    topic: EventTopic = None,
    simulate: Annotated[bool, _opt("--simulate", "Publish generated events instead of a file.")] = False,
    sim_topics: Annotated[int, _opt("--sim-topics", "--simulate: topics.", min=1, rich_help_panel=SIM)] = 3,
    sim_partitions: Annotated[
        int, _opt("--sim-partitions", "--simulate: partitions per topic.", min=1, rich_help_panel=SIM)
    ] = 10,
    sim_brokers: Annotated[int, _opt("--sim-brokers", "--simulate: brokers.", min=2, rich_help_panel=SIM)] = 4,
    sim_steps: Annotated[
        int, _opt("--sim-steps", "--simulate: broker failures/recoveries per round.", min=0, rich_help_panel=SIM)
    ] = 20,
    sim_churn: Annotated[
        int, _opt("--sim-churn", "--simulate: leader moves per round.", min=0, rich_help_panel=SIM)
    ] = 100,
    sim_loop: Annotated[
        bool, _opt("--sim-loop", "--simulate: repeat rounds until --duration.", rich_help_panel=SIM)
    ] = False,
    seed: Annotated[int, _opt("--seed", "--simulate: RNG seed.", rich_help_panel=SIM)] = 7,
    rate: Annotated[float, _opt("--rate", "Events per second (0 = as fast as possible).", min=0)] = 0.0,
    duration: Duration = 0.0,
    create_topic: Annotated[bool, _opt("--create-topic", "Create the topic if it does not exist.")] = False,
    partitions: Annotated[int, _opt("--partitions", "Partitions of a topic created by --create-topic.", min=1)] = 1,
) -> None:
    """Publish metadata events to Kafka, keyed so each partition's and each broker's records keep their order."""
    import itertools
    import time

    from elrwatch.kafkaio import clients
    from elrwatch.kafkaio import produce as producing
    from elrwatch.state.eventgen import simulated_lines

    opts = _kafka_options(kafka, topic)
    if simulate == (file is not None):
        _fail("give either FILE or --simulate")
    handle = None
    try:
        if create_topic and clients.create_topic(opts, topic, partitions):
            typer.echo(f"elrwatch produce: created topic {topic} ({partitions} partitions)", err=True)
        if simulate:
            lines = simulated_lines(sim_topics, sim_partitions, sim_brokers, sim_steps, sim_churn, seed, loop=sim_loop)
        elif file == "-":
            lines = iter(sys.stdin.buffer)
        else:
            handle = open(file, "rb")  # noqa: SIM115 - closed below
            lines = iter(handle)
        if duration > 0:
            deadline = time.monotonic() + duration
            lines = itertools.takewhile(lambda _line: time.monotonic() < deadline, lines)
        producing.produce_lines(opts, topic, lines, rate=rate)
    except OSError as exc:
        _fail(f"cannot read {file}: {exc.strerror or exc}")
    except SourceError as exc:
        _fail(str(exc))
    except Exception as exc:  # kafka-python errors: one line, no traceback
        _fail(f"cannot publish to {kafka.bootstrap_servers}: {type(exc).__name__}: {exc}")
    finally:
        if handle is not None:
            handle.close()


@app.command(rich_help_panel=LIVE)
@grouped
def stream(config: JobConfig = JOB_OPTIONS) -> None:
    """Run the streaming job: events → Spark (bucketed state) → status store + Prometheus gauges."""
    import logging
    import threading

    from elrwatch.streaming import session

    # elrwatch's own lines at INFO; libraries at WARNING (py4j logs a lost JVM's traceback at INFO on the root logger)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("elrwatch").setLevel(logging.INFO)
    try:
        # Spark's JVM starts while the job's heavier modules (the store, the sink, the buckets) are imported
        early = session.EarlySpark.start(config)
        from elrwatch.streaming import query  # pyspark: only for `elrwatch stream`

        query.run(config, stop_event=threading.Event(), handle_signals=True, early=early)
    except session.SparkGone as exc:  # threads blocked on the dead JVM would hold the exit: leave at once
        import os
        import sys

        sys.stdout.flush()
        print(f"elrwatch: error: {exc}", file=sys.stderr, flush=True)
        os._exit(1)
    except (session.JobError, ValueError) as exc:
        _fail(str(exc), code=1)


@app.command(rich_help_panel=LIVE)
@grouped
def bridge(
    source: Annotated[
        str,
        _bridge_opt("--source", "admin (poll a cluster's admin API) or metadata-log (follow a node's metadata log)."),
    ] = "admin",
    kafka: KafkaSettings = KAFKA,
    topic: EventTopic = None,
    log_dir: Annotated[
        str | None, _bridge_opt("--log-dir", "--source metadata-log: the node's __cluster_metadata-0 directory.")
    ] = None,
    admin_bootstrap_servers: Annotated[
        str | None,
        _bridge_opt(
            "--admin-bootstrap-servers",
            "--source admin: the cluster to poll (default: --bootstrap-servers; same TLS/SASL).",
        ),
    ] = None,
    interval: Annotated[
        float, _bridge_opt("--interval", "Seconds between two polls (admin) or reads (metadata log).", min=0.05)
    ] = 2.0,
    page_size: Annotated[
        int, _bridge_opt("--page-size", "--source admin: partitions per DescribeTopicPartitions page.", min=1)
    ] = 2000,
    server_properties: Annotated[
        str | None,
        _bridge_opt(
            "--server-properties",
            "--source metadata-log: the node's server.properties; its static min.insync.replicas and "
            "unclean.leader.election.enable are published (the log lacks them when ELR is off).",
        ),
    ] = None,
    state_file: Annotated[
        str | None,
        _bridge_opt(
            "--state-file", "What was published (restart without duplicates or losses); default: none (in memory)."
        ),
    ] = None,
    metrics: MetricsEndpoint = METRICS,
    duration: Duration = 0.0,
) -> None:
    """Publish a live cluster's metadata to the event topic.

    Polled from its admin API, or read from a node's metadata log (exact records and offsets)."""
    from elrwatch.bridge.runner import SidecarSettings, run_bridge

    opts = _kafka_options(kafka, topic)
    if source not in ("admin", "metadata-log"):
        _fail("--source must be admin or metadata-log")
    admin_opts = kafka.with_servers(admin_bootstrap_servers).options(topic)
    settings = SidecarSettings(opts, topic, state_file, interval, metrics.port, metrics.host, duration)
    run = functools.partial(
        run_bridge,
        settings,
        source=source,
        admin_options=admin_opts,
        log_dir=log_dir,
        page_size=page_size,
        server_properties=server_properties,
    )
    _run_sidecar("bridge", run, (ValueError, SourceError))


@app.command(rich_help_panel=LIVE)
@grouped
def agent(
    log_dirs: Annotated[
        str | None, _agent_opt("--log-dirs", "The broker's log.dirs, comma-separated (mounted read-only: only read).")
    ] = None,
    metadata_log_dir: Annotated[
        str | None,
        _agent_opt("--metadata-log-dir", "The broker's metadata.log.dir (or its __cluster_metadata-0 directory)."),
    ] = None,
    kafka: KafkaSettings = KAFKA,
    topic: EventTopic = None,
    interval: Annotated[
        float, _agent_opt("--interval", "Seconds between two reads of the metadata log and the replicas.", min=0.05)
    ] = 2.0,
    max_rate: Annotated[
        float,
        _agent_opt(
            "--max-rate", "At most this many records published a second (the rest waits, oldest first).", min=0.1
        ),
    ] = 20.0,
    state_file: Annotated[
        str | None,
        _agent_opt(
            "--state-file", "What was published (a restart publishes nothing twice); default: none (in memory)."
        ),
    ] = None,
    metrics: MetricsEndpoint = METRICS,
    duration: Duration = 0.0,
) -> None:
    """Beside one broker: publish its stranded replicas' log end offsets, for the advice on unclean elections.

    Publishes the log end offset and last leader epoch (REPLICA_LOG_INFO_RECORD) of its replicas of the partitions
    that have no leader or an empty ISR, so that the advice names the replica an unclean election should pick, and
    what its log dirs' .kafka_cleanshutdown files say (CLEAN_SHUTDOWN_RECORD), so that elrwatch knows whether its
    next start will be clean. Reads the node's metadata log, its partitions' batch headers and those files, never
    record payloads."""
    from elrwatch.bridge.agent import AgentError, run_agent
    from elrwatch.bridge.runner import SidecarSettings

    opts = _kafka_options(kafka, topic)
    dirs = [d.strip() for d in (log_dirs or "").split(",") if d.strip()]
    if not dirs or not metadata_log_dir:
        _fail("--log-dirs and --metadata-log-dir are required")
    settings = SidecarSettings(opts, topic, state_file, interval, metrics.port, metrics.host, duration)
    run = functools.partial(run_agent, settings, log_dirs=dirs, metadata_log_dir=metadata_log_dir, max_rate=max_rate)
    _run_sidecar("agent", run, (AgentError, ValueError, SourceError))


def _broker_list(text: str | None) -> list[int] | None:
    """``--restore-order 1,2,3``: broker ids."""
    if text is None:
        return None
    try:
        order = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        _fail(f"--restore-order takes broker ids like 1,2,3, got {text!r}")
    if not order or len(set(order)) != len(order):
        _fail(f"--restore-order takes distinct broker ids like 1,2,3, got {text!r}")
    return order


@app.command(rich_help_panel=LIVE)
@grouped
def recover(
    topic_name: Annotated[str, typer.Argument(metavar="TOPIC", help="The leaderless partition's topic.")],
    partition: Annotated[int, typer.Argument(metavar="PARTITION", help="Its partition id.", min=0)],
    execute: Annotated[
        bool, _recover_opt("--execute", "Carry the plan out (without it: print the plan, change nothing).")
    ] = False,
    candidate: Annotated[
        int | None,
        _recover_opt("--candidate", "Elect this replica instead of the recommendation's candidate.", min=0),
    ] = None,
    accept_unknown_log: Annotated[
        bool,
        _recover_opt(
            "--accept-unknown-log", "With --candidate: elect it even though its log end offset is not reported."
        ),
    ] = False,
    max_store_age: Annotated[
        float,
        _recover_opt(
            "--max-store-age", "Refuse when the status store was last written longer ago than this (seconds).", min=0
        ),
    ] = 300.0,
    timeout: Annotated[
        float, _recover_opt("--timeout", "Seconds to wait for Kafka to report each step's result.", min=1)
    ] = 60.0,
    restore_order: Annotated[
        str | None,
        _recover_opt(
            "--restore-order",
            "Only put this replica order back (e.g. 1,2,3), after a run that could not: same replica set.",
        ),
    ] = None,
    kafka: KafkaSettings = KAFKA,
    topic: Annotated[
        str | None, _opt("--topic", "Kafka topic of the metadata events: each step is published there.")
    ] = None,
    admin_bootstrap_servers: Annotated[
        str | None,
        _recover_opt(
            "--admin-bootstrap-servers",
            "The cluster of the partition (default: --bootstrap-servers; same TLS/SASL).",
        ),
    ] = None,
    store: StoreSettings = STORE,
) -> None:
    """Recover a leaderless partition uncleanly, electing the replica with the longest log.

    Prints the plan (the candidate and why, the records each other replica loses, the steps); with --execute
    carries it out through the Admin API, even with a replica's broker down: the candidate first in the replica
    order, an unclean election, a check that Kafka elected it with its reported log end offset, the original order
    back. Refuses, naming the reason, a partition that has a leader or a non-empty ISR or ELR, a candidate that is
    not alive, a status store older than --max-store-age and a candidate whose log is not reported. Each step is
    published to the event topic. Exit code 0: recovered (or the plan printed), 1: refused, 2: error."""
    from elrwatch.bridge.recover import ERROR, KafkaPartitionAdmin, Recovery, store_view
    from elrwatch.kafkaio import clients

    order = _broker_list(restore_order)
    if accept_unknown_log and candidate is None:
        _fail("--accept-unknown-log needs --candidate N: the replica to elect with an unknown log")
    if execute and not topic and order is None:
        _fail("--execute needs --topic (and --bootstrap-servers): each step is published to the event topic")
    admin_kafka = kafka.with_servers(admin_bootstrap_servers)
    if not admin_kafka.bootstrap_servers:
        _fail("--bootstrap-servers (or --admin-bootstrap-servers) is required")
    publisher = None
    try:
        admin = clients.make_admin(admin_kafka.options())
    except SourceError as exc:
        _fail(str(exc))
    try:
        if execute and topic:
            from elrwatch.bridge.runner import KafkaPublisher

            try:
                publisher = KafkaPublisher(_kafka_options(kafka, topic), topic)
            except SourceError as exc:
                _fail(str(exc))
        run = Recovery(
            KafkaPartitionAdmin(admin),
            echo=typer.echo,
            publish=None if publisher is None else _publish_to(publisher),
            timeout_s=timeout,
        )
        if order is not None:
            raise typer.Exit(run.restore_order(topic_name, partition, order))
        status_store = _open_store(store.url, store.password_file)
        try:
            view = store_view(status_store, topic_name, partition)
        except Exception as exc:
            typer.echo(f"error: cannot read status store {status_store.masked_url}: {type(exc).__name__}")
            raise typer.Exit(ERROR) from None
        finally:
            status_store.dispose()
        code = run.run(
            topic_name,
            partition,
            view,
            max_store_age_s=max_store_age,
            execute=execute,
            candidate=candidate,
            accept_unknown_log=accept_unknown_log,
        )
        raise typer.Exit(code)
    finally:
        if publisher is not None:
            publisher.close()
        admin.close()


def _publish_to(publisher: Any) -> Callable[[dict[str, Any]], None]:
    """Publish one envelope (with the wall time) to the event topic."""
    import time

    import orjson

    def publish(envelope: dict[str, Any]) -> None:
        publisher.publish([orjson.dumps({**envelope, "timestamp": int(time.time() * 1000)})])

    return publish


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
