"""`elrwatch demo` / `make demo`: everything on one machine, on embedded defaults.

1. a real Apache Kafka KRaft cluster (one controller, one broker) on free loopback ports, from the jars that
   ``make kafka-jars`` fetches: developer tooling (``elrwatch.devtools.kafka_cluster``), imported only here;
2. the event topic;
3. the REST API (`elrwatch api`) over the status store, in a subprocess;
4. a producer thread publishing simulator records with faults (`elrwatch simulate --faults`, or the built-in
   generator if the simulator is missing) at ``rate`` events/s, each stamped with the time it is published (the
   simulator's own clock starts in 2024, which the status page would show as "last event 700 d ago");
5. the streaming job in the foreground (Spark local mode).
Prints where to look; Ctrl-C (or ``duration``) stops everything and cleans up.
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

import orjson

TOPIC = "elrwatch-metadata"


class DemoError(RuntimeError):
    """Why the demo could not run (one line)."""


def _say(message: str) -> None:
    sys.stderr.write(f"elrwatch demo: {message}\n")
    sys.stderr.flush()


def _simulated(workdir: str, records: int) -> Iterator[bytes]:
    out = os.path.join(workdir, "simulated.jsonl")
    done = subprocess.run(
        [sys.executable, "-P", "-m", "elrwatch.cli", "simulate", "--faults", "0.3", "--records", str(records),
         "--topics", "5", "--partitions", "40", "--brokers", "6", "--seed", "42", "-o", out],
        capture_output=True, text=True, timeout=300, check=False,
    )
    if done.returncode == 0 and os.path.exists(out):
        with open(out, "rb") as fh:
            yield from fh
        return
    from elrwatch.devtools.eventgen import simulated_lines

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


def _wait_http(url: str, timeout: float) -> bool:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def run_demo(
    duration: float = 0.0,
    workdir: str | None = None,
    metrics_port: int = 9464,
    api_port: int = 8080,
    rate: float = 200.0,
    keep: bool = False,
) -> dict[str, str]:
    """Run the demo until Ctrl-C or ``duration`` seconds after the job started; returns where things were.

    A work dir the demo created itself (no ``workdir``) is removed at the end unless ``keep``."""
    from elrwatch.streaming import query
    from elrwatch.streaming.config import JobConfig
    from elrwatch.streaming.produce import produce_lines

    try:  # developer tooling, not the product's runtime path
        from elrwatch.devtools.kafka_cluster import KAFKA_VERSION, ClusterError, KafkaCluster
    except ImportError as exc:
        raise DemoError(f"the demo needs elrwatch's developer tools (a source checkout): {exc}") from None

    own_dir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="elrwatch-demo-")
    os.makedirs(workdir, exist_ok=True)
    store = f"sqlite:///{os.path.join(workdir, 'elrwatch.db')}"
    checkpoint = os.path.join(workdir, "checkpoint")
    shutil.rmtree(checkpoint, ignore_errors=True)
    shutil.rmtree(os.path.join(workdir, "kafka"), ignore_errors=True)  # a previous run's cluster (its own ids)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(workdir, "elrwatch.db"))
    stop = threading.Event()
    kafka: KafkaCluster | None = None
    api = None
    producer_thread = None
    where = {"store": store, "metrics": f"http://127.0.0.1:{metrics_port}/metrics", "workdir": workdir}
    try:
        _say(f"starting Apache Kafka {KAFKA_VERSION} (KRaft: one controller, one broker) ...")
        try:
            kafka = KafkaCluster(brokers=1, base_dir=os.path.join(workdir, "kafka"))
            kafka.start()
            kafka.create_topic(TOPIC, partitions=1)
        except ClusterError as exc:
            raise DemoError(f"cannot start Kafka: {exc}") from None
        where["kafka"] = kafka.bootstrap
        options = {"bootstrap.servers": kafka.bootstrap, "topic": TOPIC}
        _say(f"Apache Kafka {KAFKA_VERSION} on {kafka.bootstrap} (logs: {kafka.base_dir}), topic {TOPIC}")
        if api_port:
            api_log = open(os.path.join(workdir, "api.log"), "w")  # noqa: SIM115 - closed with the process
            api = subprocess.Popen(
                [sys.executable, "-P", "-m", "elrwatch.cli", "api", "--store", store, "--port", str(api_port)],
                stdout=api_log, stderr=subprocess.STDOUT, start_new_session=True,
            )
            api_log.close()
            where["api"] = f"http://127.0.0.1:{api_port}/"

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
            _say("streaming job running. Look at:")
            _say(f"  status store : {store}   (elrwatch status --store {store})")
            where["metrics"] = f"http://127.0.0.1:{config.bound_metrics_port}/metrics"
            _say(f"  metrics      : {where['metrics']}")
            if "api" in where:
                ready = _wait_http(where["api"] + "healthz", 30) if api is not None else False
                _say(f"  API + page   : {where['api']}{'' if ready else '  (not answering yet, see api.log)'}")
            _say(f"  workdir      : {workdir}")
            _say("Ctrl-C stops everything." if not duration else f"stopping in {duration:g}s.")
            if duration:
                timer = threading.Timer(duration, stop.set)
                timer.daemon = True
                timer.start()

        config = JobConfig(
            source="kafka", bootstrap_servers=kafka.bootstrap, topic=TOPIC, store=store, checkpoint=checkpoint,
            metrics_port=metrics_port, trigger="1s", buckets=2,
        )
        try:
            query.run(config, stop_event=stop, on_started=started,
                    handle_signals=threading.current_thread() is threading.main_thread())
        except query.JobError as exc:
            raise DemoError(str(exc)) from None
        _say("stopped.")
        return where
    finally:
        stop.set()
        if producer_thread is not None:
            producer_thread.join(15)
        if api is not None:
            api.terminate()
            try:
                api.wait(15)
            except subprocess.TimeoutExpired:
                api.kill()
        if kafka is not None:
            kafka.stop()
        if own_dir and not keep:
            shutil.rmtree(workdir, ignore_errors=True)
            _say(f"removed {workdir} (--keep keeps it)")
