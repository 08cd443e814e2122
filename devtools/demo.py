"""The demo, `make demo` (``python -m elrwatch.devtools.demo``): everything on one machine, on embedded defaults.

Developer tooling, like the rest of ``devtools/``: the product's command line does not carry it. Default (a real
cluster), from the jars ``make kafka-jars`` fetches:

1. the **watched cluster**: a real Apache Kafka KRaft cluster of one controller and three brokers on loopback
   ports, ELR on, ``min.insync.replicas=2``, topics with RF 3 and RF 2 (so that ELR and leaderless partitions
   appear);
2. the **event-topic broker**: a 1-broker cluster of its own holding the event topic (in production the monitor's
   pipeline must not go down with the cluster it watches; here the injector kills the watched brokers);
3. ``elrwatch bridge --source metadata-log`` on the controller's ``__cluster_metadata-0``: Kafka's exact records
   with their real offsets and CreateTimes, every transition (an admin poll sees only the net change between two
   polls and no broker or partition epochs);
4. the REST API (`elrwatch api`) over the status store, in a subprocess;
5. the streaming job in the foreground (Spark local mode), then the **fault injector**
   (``devtools/fault_injector.py``) killing and restarting the watched brokers on a schedule.

``simulated``: the event-topic broker only, and a producer thread publishing simulator records with faults
(`elrwatch simulate --faults`, or the built-in generator) at ``rate`` events/s, each stamped with the time it is
published (the simulator's own clock starts in 2024, which the status page would show as "last event 700 d ago").

Prints where to look; Ctrl-C (or ``duration``) stops everything (the JVMs included) and removes the work dir.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Annotated, Any

import orjson
import typer

from elrwatch.devtools.fault_injector import FaultInjector
from elrwatch.devtools.kafka_cluster import KAFKA_VERSION, ClusterError, KafkaCluster, free_port, port_is_free
from elrwatch.devtools.processes import elrwatch_command, end
from elrwatch.kafkaio.config import KafkaSettings
from elrwatch.kafkaio.produce import produce_lines
from elrwatch.options import fail
from elrwatch.options import option as _opt
from elrwatch.state.eventgen import simulated_lines
from elrwatch.streaming.config import JobConfig, MetricsEndpoint, StoreSettings

TOPIC = "elrwatch-metadata"
#: The watched cluster's topics: (name, create_topic keyword arguments). The cluster default min ISR is 2.
WATCHED_TOPICS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("orders", {"partitions": 6, "replication_factor": 3}),  # RF 3, min ISR 2: ELR when two replicas go
    ("payments", {"replica_assignment": {0: [1, 2], 1: [2, 3], 2: [3, 1]}}),  # RF 2: leaderless when both go
    ("clicks", {"partitions": 3, "replication_factor": 3, "configs": {"min.insync.replicas": "1"}}),  # min ISR 1
)


#: ``--kafka``: the watched cluster's Kafka release.
DEMO_KAFKA = {"4.4": "4.4.0", "3.9": "3.9.1"}


class DemoError(RuntimeError):
    """Why the demo could not run (one line)."""


def _say(message: str) -> None:
    sys.stderr.write(f"elrwatch demo: {message}\n")
    sys.stderr.flush()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _simulated(workdir: str, records: int) -> Iterator[bytes]:
    out = os.path.join(workdir, "simulated.jsonl")
    done = subprocess.run(
        elrwatch_command(
            "simulate", faults=0.3, records=records, topics=5, partitions=40, brokers=6, seed=42, output=out
        ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode == 0 and os.path.exists(out):
        with open(out, "rb") as fh:
            yield from fh
        return

    yield from simulated_lines(5, 40, 6, steps=10, churn=200, seed=42, loop=True)


def stamped_now(lines: Iterable[bytes], clock: Callable[[], float] = time.time) -> Iterator[bytes]:
    """Each event envelope with its ``timestamp`` set to the time it is taken (ms, never decreasing); lines that
    are not JSON objects with a ``timestamp`` pass unchanged."""
    last_ms = 0
    for line in lines:
        try:
            envelope = orjson.loads(line)
        except orjson.JSONDecodeError:
            yield line
            continue
        if not isinstance(envelope, dict) or "timestamp" not in envelope:
            yield line
            continue
        last_ms = max(last_ms, int(clock() * 1000))
        envelope["timestamp"] = last_ms
        yield orjson.dumps(envelope)


def _wait_http(url: str, timeout: float, alive: Callable[[], bool] = lambda: True) -> bool:
    """Poll ``url`` until it answers (True), ``timeout`` passes or ``alive()`` turns false (False)."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        try:
            with urllib.request.urlopen(url, timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def _spawn(command: list[str], log_path: str) -> subprocess.Popen:
    """An ``elrwatch`` command (`elrwatch_command`) in a session of its own (the terminal's Ctrl-C reaches the demo
    only, which stops it), its output in ``log_path``."""
    with open(log_path, "w") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _last_line(path: str) -> str:
    try:
        with open(path, errors="replace") as fh:
            lines = [line.strip() for line in fh if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def run_demo(
    duration: float = 0.0,
    workdir: str | None = None,
    metrics_port: int = 9464,
    api_port: int = 8080,
    rate: float = 200.0,
    keep: bool = False,
    simulated: bool = False,
    faults: bool = True,
    seed: int = 7,
    kafka_version: str = "4.4",
) -> dict[str, str]:
    """Run the demo until Ctrl-C or ``duration`` seconds after the job started; returns where things were.

    ``simulated``: simulator events instead of a real 3-broker cluster; ``faults``: run the fault injector on the
    real cluster (``seed`` picks its brokers); ``kafka_version``: the watched cluster's Kafka, ``"4.4"`` (KRaft,
    ELR on, the metadata-log bridge) or ``"3.9"`` (3.9.1 in ZooKeeper mode, no ELR, the admin bridge: the
    fault injector's double kills leave partitions with their last replica standing). A work dir the demo created
    itself (no ``workdir``) is removed at the end unless ``keep``."""
    from elrwatch.streaming import query  # pyspark: loaded once the demo starts the job, not for --help

    if kafka_version not in DEMO_KAFKA:
        raise DemoError(f"--kafka {kafka_version}: the demo runs Kafka {' or '.join(DEMO_KAFKA)}")
    legacy = kafka_version != "4.4"
    for port, option in ((api_port, "--api-port"), (metrics_port, "--metrics-port")):
        if port and not port_is_free(port):
            raise DemoError(f"port {port} ({option}) is taken: pick another with {option} PORT")

    own_dir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="elrwatch-demo-")
    os.makedirs(workdir, exist_ok=True)
    store = f"sqlite:///{os.path.join(workdir, 'elrwatch.db')}"
    checkpoint = os.path.join(workdir, "checkpoint")
    for stale in ("checkpoint", "kafka", "watched"):  # a previous run's (its clusters had other ids)
        shutil.rmtree(os.path.join(workdir, stale), ignore_errors=True)
    for stale in ("elrwatch.db", "bridge.json"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(workdir, stale))
    stop = threading.Event()
    kafka: KafkaCluster | None = None
    watched: KafkaCluster | None = None
    injector: FaultInjector | None = None
    api: subprocess.Popen | None = None
    bridge: subprocess.Popen | None = None
    producer_thread = None
    failed = False
    where = {"store": store, "metrics": f"http://127.0.0.1:{metrics_port}/metrics", "workdir": workdir}
    try:
        kafka = _start_cluster(
            lambda: KafkaCluster(brokers=1, base_dir=os.path.join(workdir, "kafka")),
            f"the event-topic broker (Apache Kafka {KAFKA_VERSION}, KRaft: one controller, one broker)",
            ClusterError,
        )
        try:
            kafka.create_topic(TOPIC, partitions=1)
        except ClusterError as exc:
            raise DemoError(f"cannot create the event topic {TOPIC}: {_first_line(exc)}") from None
        where["kafka"] = kafka.bootstrap
        options = {"bootstrap.servers": kafka.bootstrap, "topic": TOPIC}
        _say(f"Apache Kafka {KAFKA_VERSION} on {kafka.bootstrap} (logs: {kafka.base_dir}), topic {TOPIC}")

        if not simulated:
            watched = _start_cluster(
                lambda: KafkaCluster(
                    brokers=3,
                    base_dir=os.path.join(workdir, "watched"),
                    min_insync_replicas=2,
                    elr=True,
                    **({"version": DEMO_KAFKA[kafka_version], "mode": "zookeeper"} if legacy else {}),
                ),
                (
                    f"the watched cluster (Apache Kafka {DEMO_KAFKA[kafka_version]}, ZooKeeper mode: one ZooKeeper "
                    "node, three brokers, no ELR, min.insync.replicas=2)"
                )
                if legacy
                else (
                    f"the watched cluster (Apache Kafka {KAFKA_VERSION}, KRaft: one controller, three brokers, ELR on, "
                    "min.insync.replicas=2)"
                ),
                ClusterError,
            )
            try:
                if legacy:  # the admin bridge sees dynamic configs, not a broker's server.properties
                    watched.set_cluster_config("min.insync.replicas", "2")
                for name, kwargs in WATCHED_TOPICS:
                    watched.create_topic(name, **kwargs)
            except ClusterError as exc:
                raise DemoError(f"cannot create the watched cluster's topics: {_first_line(exc)}") from None
            where["watched"] = watched.bootstrap
            _say(
                f"watched cluster on {watched.bootstrap} ({watched.controller.role} "
                f"127.0.0.1:{watched.controller.port}, logs: "
                f"{watched.base_dir}), topics " + ", ".join(f"{n} (RF {_rf(k)})" for n, k in WATCHED_TOPICS)
            )
            log_dir = str(watched.controller.metadata_dir)
            bridge_port = free_port()
            bridge_log = os.path.join(workdir, "bridge.log")
            source = (
                ["--source", "admin", "--admin-bootstrap-servers", watched.bootstrap]
                if legacy
                else ["--source", "metadata-log", "--log-dir", log_dir]
            )
            bridge = _spawn(
                elrwatch_command(
                    "bridge",
                    *source,
                    bootstrap_servers=kafka.bootstrap,
                    topic=TOPIC,
                    interval=0.5,
                    state_file=os.path.join(workdir, "bridge.json"),
                    metrics_port=bridge_port,
                ),
                bridge_log,
            )
            where["bridge_metrics"] = f"http://127.0.0.1:{bridge_port}/metrics"
            bridge_proc = bridge
            if not _wait_http(where["bridge_metrics"], 60, alive=lambda: bridge_proc.poll() is None):
                raise DemoError(
                    f"the bridge did not start (exit {bridge.poll()}): "
                    f"{_last_line(bridge_log) or 'no output'} (log: {bridge_log})"
                )
            if legacy:
                _say(
                    "elrwatch bridge --source admin on the watched cluster (ZooKeeper mode has no metadata log): "
                    "Metadata and DescribeCluster polled every 0.5 s; a broker that drops out is shown "
                    "unregistered. Without ELR a partition whose ISR is down to one broker with min ISR 2 has its "
                    "last replica standing: gauge elrwatch_last_replica_standing_partitions, and each such "
                    "partition's outlook on the status page"
                )
            else:
                _say(
                    f"elrwatch bridge --source metadata-log on the controller's {log_dir}: Kafka's exact records "
                    "with their real offsets and CreateTimes, every transition (an admin poll would see only the "
                    "net change between two polls, and no broker or partition epochs)"
                )

        if api_port:
            api = _spawn(elrwatch_command("api", store=store, port=api_port), os.path.join(workdir, "api.log"))
            where["api"] = f"http://127.0.0.1:{api_port}/"

        if simulated:

            def produce() -> None:
                records = int(max(5000, rate * duration * 1.2)) if duration else 50_000
                lines = stamped_now(_simulated(workdir, records))
                gated = (line for line in lines if not stop.is_set())
                try:
                    produce_lines(options, TOPIC, gated, rate=rate, progress_every=30.0)
                except Exception as exc:  # the demo goes on without new events
                    _say(f"producer stopped: {type(exc).__name__}: {exc}")

            producer_thread = threading.Thread(target=produce, name="demo-producer", daemon=True)
            producer_thread.start()

        def started(_query: object) -> None:
            nonlocal injector
            _say("streaming job running. Look at:")
            if "api" in where:
                alive = (lambda: api.poll() is None) if api is not None else (lambda: False)
                ready = _wait_http(where["api"] + "healthz", 30, alive=alive)
                _say(
                    f"  status page  : {where['api']}{'' if ready else '  (not answering yet, see api.log)'}"
                    f"   (REST: {where['api']}v1/partitions, {where['api']}v1/summary)"
                )
                where["api_metrics"] = where["api"] + "metrics"
                _say(f"  API metrics  : {where['api_metrics']}")
            where["metrics"] = f"http://127.0.0.1:{config.bound_metrics_port}/metrics"
            _say(f"  job metrics  : {where['metrics']}")
            if "bridge_metrics" in where:
                _say(f"  bridge metrics: {where['bridge_metrics']}")
            _say(f"  status store : {store}   (elrwatch status --store {store})")
            _say(f"  workdir      : {workdir}   (logs: api.log, bridge.log, kafka/, watched/)")
            if watched is not None and faults:
                injector = FaultInjector(watched, _say, seed=seed).start()
                _say(
                    f"fault injector: kills and restarts brokers of the watched cluster every ~"
                    f"{injector.pause + 2 * injector.hold:g}s (first in {injector.first_delay:g}s); "
                    "one line per action below"
                )
            _say("Ctrl-C stops everything." if not duration else f"stopping in {duration:g}s.")
            if duration:
                timer = threading.Timer(duration, stop.set)
                timer.daemon = True
                timer.start()

        config = JobConfig(  # the default source (kafka-native: `make demo` fetched its jars)
            kafka=KafkaSettings(kafka.bootstrap),
            topic=TOPIC,
            store=StoreSettings(store),
            checkpoint=checkpoint,
            metrics=MetricsEndpoint(metrics_port),
            trigger="1s",
            buckets=2,
        )
        try:
            query.run(
                config,
                stop_event=stop,
                on_started=started,
                handle_signals=threading.current_thread() is threading.main_thread(),
            )
        except query.JobError as exc:
            raise DemoError(_first_line(exc)) from None
        _say("stopped.")
        return where
    except KeyboardInterrupt:
        _say("interrupted: stopping.")
        return where
    except DemoError as exc:
        failed = workdir in str(exc)  # its message names logs in the work dir: kept
        raise
    finally:
        stop.set()
        if injector is not None:
            injector.stop()
        if producer_thread is not None:
            producer_thread.join(15)
        end(bridge)
        end(api)
        for cluster in (watched, kafka):
            if cluster is not None:
                cluster.stop()
        if own_dir and not keep and not failed:
            shutil.rmtree(workdir, ignore_errors=True)
            _say(f"removed {workdir} (--keep keeps it)")


def _rf(kwargs: dict[str, Any]) -> int:
    assignment = kwargs.get("replica_assignment")
    return len(next(iter(assignment.values()))) if assignment else int(kwargs["replication_factor"])


def _start_cluster(make: Callable[[], Any], what: str, cluster_error: type[Exception]) -> Any:
    """Build and start a KafkaCluster; a failure is a one-line :class:`DemoError` naming the logs."""
    _say(f"starting {what} ...")
    cluster = None
    try:
        cluster = make()
        return cluster.start()
    except cluster_error as exc:
        logs = f" (logs: {cluster.base_dir})" if cluster is not None else ""
        raise DemoError(f"cannot start {what.split(' (')[0]}: {_first_line(exc)}{logs}") from None


app = typer.Typer(
    name="elrwatch-demo",
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command()
def demo(
    duration: Annotated[float, _opt("--duration", "Stop after this many seconds (0 = until Ctrl-C).", min=0)] = 0.0,
    workdir: Annotated[str | None, _opt("--workdir", "Where store and checkpoint go (default: a temp dir).")] = None,
    metrics_port: Annotated[int, _opt("--metrics-port", "Prometheus port of the job.", min=0)] = 9464,
    api_port: Annotated[int, _opt("--api-port", "Port of the REST API (0 = no API).", min=0)] = 8080,
    rate: Annotated[float, _opt("--rate", "--simulated: simulated events per second.", min=1)] = 200.0,
    keep: Annotated[
        bool, _opt("--keep/--no-keep", "Keep the temporary work dir (store, checkpoint, logs) after stopping.")
    ] = False,
    simulated: Annotated[
        bool,
        typer.Option(
            "--simulated/--real",
            envvar="ELRWATCH_DEMO_SIMULATED",
            help="Simulator events (with faults) instead of a real 3-broker cluster.",
        ),
    ] = False,
    faults: Annotated[
        bool,
        typer.Option(
            "--faults/--no-faults",
            envvar="ELRWATCH_DEMO_FAULTS",
            help="Real cluster: kill and restart brokers on a schedule (devtools/fault_injector.py).",
        ),
    ] = True,
    seed: Annotated[
        int,
        typer.Option(
            "--seed", envvar="ELRWATCH_DEMO_SEED", help="Real cluster: seed of the fault injector's choice of brokers."
        ),
    ] = 7,
    kafka: Annotated[
        str,
        typer.Option(
            "--kafka",
            envvar="ELRWATCH_DEMO_KAFKA",
            help="Real cluster: 4.4 (KRaft, ELR on, the metadata-log bridge) or 3.9 (ZooKeeper mode, "
            "no ELR, the admin bridge; shows last-replica-standing exposure).",
        ),
    ] = "4.4",
) -> None:
    """Local demo (Apache Kafka's jars: make kafka-jars). Default: a real KRaft cluster (one controller, three
    brokers, ELR on, min.insync.replicas=2), `elrwatch bridge --source metadata-log` on the controller's
    __cluster_metadata-0, a fault injector killing and restarting brokers, the job and the API, the event topic on a
    1-broker cluster of its own. --simulated: the simulator's events with faults instead of the 3-broker cluster.
    Prints where to look; Ctrl-C stops everything."""
    try:
        run_demo(
            duration=duration,
            workdir=workdir,
            metrics_port=metrics_port,
            api_port=api_port,
            rate=rate,
            keep=keep,
            simulated=simulated,
            faults=faults,
            seed=seed,
            kafka_version=kafka,
        )
    except DemoError as exc:
        fail(str(exc), code=1)


if __name__ == "__main__":
    app()
