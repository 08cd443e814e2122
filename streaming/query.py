"""The wiring of the streaming query: Spark's session, source → route → state → sink, and the run around it.

Pipeline (one micro-batch):

1. **source** (``sources.py``): rows ``value, topic, partition, offset, timestamp``.
2. **parse + route** (``route.py``, stateless, once per input event). In the Python sources' read task each line
   is parsed and validated by ``state.records.parse_line`` with position ``<topic>/<partition>@<offset>``
   (``<file>:<line>`` for files) and sent to ``state.routing.targets`` (its partition's bucket, or every bucket for
   partition 0 and non-partition records: DESIGN §4); malformed lines, well-formed records of unused types and
   non-event lines go to bucket 0 only, which counts and quarantines them (once, with the reason). Spark's JVM
   Kafka source is routed in Spark SQL (``route.route_in_jvm``) and each line parsed once in its bucket.
3. **state** (``groupBy("bucket").applyInPandasWithState``, ``bucket.py``): one group per bucket holds a whole
   ``ClusterState`` (``snapshots.py``: a snapshot file + delta, or a blob, in one binary state column); its
   payload goes to the driver (``payload.py``).
4. **sink** (``foreachBatch`` on the driver, ``sink.py``): merge the buckets' payloads, serve the gauges
   (``metrics.py``), hand the batch to the store writer (``store_writer.py``: durable in its write-ahead list,
   written to the status store behind the batches).

`run` starts the store, the exporter and Spark, waits until stopped or drained, and stops everything. The
local-mode accelerators (``accelerators.py``) are asked at fixed points through one `Accelerators` object.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Any

from elrwatch.kafkaio.config import SourceError
from elrwatch.store import StatusStore
from elrwatch.streaming.accelerators import Accelerators, launched_jvm
from elrwatch.streaming.bucket import make_state_function
from elrwatch.streaming.config import JobConfig, options_summary, parse_trigger
from elrwatch.streaming.memory import JvmHeapTrim
from elrwatch.streaming.metrics import Health, start_exporter
from elrwatch.streaming.route import group_keys, route_in_jvm
from elrwatch.streaming.session import (  # noqa: F401 - build_spark, kafka_connector, REDACTION_REGEX: the API
    REDACTION_REGEX,
    EarlySpark,
    JobError,
    SparkGone,
    build_spark,
    kafka_connector,
    state_tasks,
)
from elrwatch.streaming.sink import DRIVER_FILE, Aggregator, Sink
from elrwatch.streaming.store_writer import WAL_DIR, StoreWriteError, StoreWriter
from elrwatch.streaming.warm import STATE_POOL_ENV

log = logging.getLogger("elrwatch.stream")

STATE_SCHEMA = "token string, blob binary"
OUTPUT_SCHEMA = "bucket int, payload binary"
STATE_KEYS_FILE = "elrwatch-state-keys.json"  # the group key of each bucket, fixed for the checkpoint's life
STOP_GRACE_S = 20.0  # within Kubernetes' default 30 s termination grace period
DRAINED_STORE_WAIT_S = 900.0  # a drained (--available-now) job waits this long for its store writes


def run(
    config: JobConfig,
    stop_event: threading.Event | None = None,
    on_started: Any = None,
    handle_signals: bool = False,
    early: EarlySpark | None = None,
) -> int:
    """Run the streaming job until stopped (or, with ``available_now``, until the source is drained). ``early``:
    Spark's session already being built (`session.EarlySpark`, started before this module's imports); else it is
    started here, and built while the store and the sink are prepared."""
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if config.spark_log_level is None:
        # a failing batch (e.g. a missing snapshot) is reported once, as one line, by the query's exception below;
        # py4j would also log the foreachBatch callback's whole Python + Java traceback
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    early = early or EarlySpark.start(config)
    handed = False  # once _run_query has the session, it stops it
    try:
        snapshot_dir = config.snapshot_dir()
        store = StatusStore(config.store.url, password_file=config.store.password_file)
        store.create_schema()
        fresh = not _checkpoint_has_batches(config.checkpoint)
        driver_file = os.path.join(config.checkpoint, DRIVER_FILE)
        if fresh:
            start_fresh(config, store, driver_file, snapshot_dir)
        os.makedirs(config.checkpoint, exist_ok=True)
        aggregator = Aggregator(config.buckets, driver_file)
        health = Health(aggregator)
        # the store is written behind the batches; an earlier run's unwritten batches go first
        writer = StoreWriter(store, os.path.join(config.checkpoint, WAL_DIR), rows_dir=config.rows_dir())
        health.store_behind = writer.behind
        try:
            writer.recover()
        except StoreWriteError as exc:
            writer.close(0)
            store.dispose()
            raise JobError(str(exc)) from None
        stop_event = stop_event or threading.Event()
        exporter = None
        if config.metrics.port is not None:
            exporter = start_exporter(health, config.metrics.port, config.metrics.host)
            config.bound_metrics_port = exporter.port
        accelerators = early.accelerators
        try:
            master = accelerators.master
            partitions = checkpoint_shuffle_partitions(config.checkpoint)
            if partitions is None and master is not None:
                partitions = state_tasks(config, master)
            accelerators.state_tasks = partitions
            keys = state_keys(config.checkpoint, fresh, config.buckets, partitions)
            handed = True
            code = _run_query(config, early, writer, aggregator, health, keys, stop_event, on_started, handle_signals)
            committed = last_committed_batch(config.checkpoint)
            if committed is not None:  # the last batch's rows files go once the store has it, not at the next start
                writer.spark_committed(committed)
            if not writer.close(STOP_GRACE_S if stop_event.is_set() else DRAINED_STORE_WAIT_S):
                try:
                    writer.raise_error()
                except StoreWriteError as exc:
                    raise JobError(str(exc)) from None
            return code
        finally:
            writer.close(STOP_GRACE_S)  # after a failure: what is not written in time stays in the write-ahead list
            store.dispose()
            if exporter is not None:
                exporter.shutdown()
    finally:
        if not handed:  # the job ended before its query: the session built meanwhile goes too
            early.discard()


def start_fresh(config: JobConfig, store: Any, driver_file: str, snapshot_dir: str | None) -> None:
    """A new checkpoint: the store must be new too; the driver file and this checkpoint's old snapshots go."""
    if store.last_batch_id() is not None:
        raise JobError(
            f"status store {store.masked_url} already holds batches of another run but checkpoint "
            f"{config.checkpoint} is new: use a fresh store with a fresh checkpoint"
        )
    with contextlib.suppress(FileNotFoundError):
        os.remove(driver_file)
    if snapshot_dir and not config.state_dir and os.path.isdir(snapshot_dir):
        # the default directory belongs to this checkpoint: a new checkpoint starts without old snapshots
        for name in os.listdir(snapshot_dir):
            path = os.path.join(snapshot_dir, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
    rows_dir = config.rows_dir()
    if rows_dir and os.path.isdir(rows_dir):  # an earlier checkpoint at the same place: none of its rows is pending
        shutil.rmtree(rows_dir, ignore_errors=True)


def state_keys(checkpoint: str, fresh: bool, buckets: int, partitions: int | None) -> list[int] | None:
    """Each bucket's group key, fixed when the checkpoint starts (`route.group_keys` for its state tasks).

    A checkpoint written before the file existed groups by the bucket number (None). ``partitions`` None (a
    cluster master chosen by spark-submit): Spark's default spread, the bucket number.
    """
    path = os.path.join(checkpoint, STATE_KEYS_FILE)
    if not fresh:
        try:
            with open(path, encoding="utf-8") as fh:
                saved = json.load(fh)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise JobError(f"cannot read {path}: {exc}") from None
        if saved.get("buckets") != buckets:
            raise JobError(
                f"checkpoint {checkpoint} was started with --buckets {saved.get('buckets')}, not {buckets}: "
                "a checkpoint keeps its buckets (use a fresh checkpoint and store to change them)"
            )
        return [int(k) for k in saved["keys"]]
    if partitions is None:
        return None
    keys = group_keys(buckets, partitions)
    os.makedirs(checkpoint, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=checkpoint, prefix=".state-keys-")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"buckets": buckets, "partitions": partitions, "keys": keys}, fh)
    os.replace(tmp, path)
    return keys


def checkpoint_shuffle_partitions(checkpoint: str) -> int | None:
    """The shuffle partitions an existing checkpoint runs with (Spark restores them over the session's)."""
    offsets = os.path.join(checkpoint.removeprefix("file://").removeprefix("file:"), "offsets")
    try:
        batches = sorted((int(n) for n in os.listdir(offsets) if n.isdigit()), reverse=True)
    except OSError:
        return None
    for batch in batches:
        try:
            with open(os.path.join(offsets, str(batch))) as fh:
                fh.readline()
                meta = json.loads(fh.readline())
            return int(meta["conf"]["spark.sql.shuffle.partitions"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def last_committed_batch(checkpoint: str) -> int | None:
    """The newest batch id in the checkpoint's commit log (a local checkpoint; None otherwise or if none)."""
    commits = os.path.join(checkpoint.removeprefix("file://").removeprefix("file:"), "commits")
    try:
        return max((int(n) for n in os.listdir(commits) if n.isdigit()), default=None)
    except OSError:
        return None


def _checkpoint_has_batches(checkpoint: str) -> bool:
    """Whether Spark planned a batch in this checkpoint (offsets log), committed or not: then it is a restart."""
    offsets = os.path.join(checkpoint, "offsets")
    return os.path.isdir(offsets) and any(not f.startswith(".") for f in os.listdir(offsets))


def build_query(spark: Any, config: JobConfig, sink: Any, keys: list[int] | None = None) -> Any:
    """Wire source → route → state → foreachBatch(sink) and start the query (``keys``: each bucket's group
    key)."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    # streaming.sources imports pyspark: like pyspark above, only once the query is built
    from elrwatch.streaming.sources import ROUTE_BUCKETS_OPTION, ROUTING_SOURCES, read_stream

    buckets = config.buckets
    options = config.source_options()
    if config.source in ROUTING_SOURCES:  # the Python sources parse + route in their read task (route.py)
        routed = read_stream(spark, config.source, {**options, ROUTE_BUCKETS_OPTION: str(buckets)})
    else:  # Spark's Kafka source: routed in the JVM, parsed in the bucket (route.route_in_jvm)
        routed = route_in_jvm(read_stream(spark, config.source, options), buckets)
    # each bucket under its group key, so that the buckets spread evenly over the state tasks (route.group_keys)
    if keys is not None and keys != list(range(buckets)):
        routed = routed.withColumn("bucket", F.element_at(F.array(*[F.lit(k) for k in keys]), F.col("bucket") + 1))
    # Spark keeps one pool of Python workers per (python, modules, environment) and hands a task any idle worker
    # of its pool. Alone in its own pool (an extra environment variable), the state function runs in few workers
    # (one per concurrent state task) that see the same buckets again: their cache hits. Sharing the pool with
    # the source and route stages, the state landed on a random one of ~11 workers: always a miss, and stale
    # copies of every bucket in many processes.
    env = spark.sparkContext.environment
    env[STATE_POOL_ENV] = "state"
    try:
        updates = routed.groupBy("bucket").applyInPandasWithState(
            make_state_function(config.state_settings(), keys),
            OUTPUT_SCHEMA,
            STATE_SCHEMA,
            "append",
            GroupStateTimeout.NoTimeout,
        )
    finally:
        env.pop(STATE_POOL_ENV, None)
    writer = updates.writeStream.foreachBatch(sink).option("checkpointLocation", config.checkpoint)
    if config.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=parse_trigger(config.trigger))
    return writer.queryName("elrwatch").start()


def _run_query(
    config: JobConfig,
    early: EarlySpark,
    writer: StoreWriter,
    aggregator: Aggregator,
    health: Any,
    keys: list[int] | None,
    stop_event: threading.Event,
    on_started: Any,
    handle_signals: bool,
) -> int:
    """Take Spark's session, start the query, wait until stopped or drained; stop the query and Spark in any
    case."""
    accelerators: Accelerators = early.accelerators
    spark = early.result()
    quiet_accumulator_server(spark)
    if handle_signals:  # after Spark: SparkContext installs its own SIGINT handler
        install_signal_handlers(stop_event)
    query = None
    try:
        try:
            query = build_query(spark, config, Sink(writer, aggregator, health), keys)
        except SourceError as exc:
            raise JobError(str(exc)) from None
        health.up = 1
        log.info(
            "elrwatch stream started after %.1fs (the first batch follows): %s",
            time.monotonic() - early.began,
            dict(options_summary(config)),
        )
        if on_started is not None:
            on_started(query)
        from pyspark.errors import StreamingQueryException

        heap_trim = JvmHeapTrim(lambda: spark._jvm.java.lang.System.gc())

        accelerators.start_warming(spark)
        jvm_gone = jvm_lost_errors()
        try:
            while query.isActive and not stop_event.is_set():
                query.awaitTermination(0.5)
                # Polled, not a StreamingQueryListener: PySpark converts each listener event field by field over
                # py4j (~60 ms of driver CPU per batch, measured); lastProgress is one call returning JSON.
                health.progress_of(query)
                # Spark's batches, not the store's: a store catching up after a big batch is no Python work, and
                # Spark stops Python workers idle for 60 s (with the buckets cached in them)
                accelerators.tick(health.batches_run)
                heap_trim.tick()
        except KeyboardInterrupt:
            stop_event.set()
        except StreamingQueryException as exc:
            raise JobError(_one_line(str(exc))) from None
        except jvm_gone as exc:
            raise SparkGone(jvm_exit_line(exc)) from None
        if stop_event.is_set() or (not query.isActive and query.exception() is None):
            log.info("stopping: %s", "signal" if stop_event.is_set() else "source drained")
            if stop_event.is_set():
                wait_for_batch_end(query, STOP_GRACE_S)
            query.stop()
            return 0
        exc = query.exception()
        if exc is not None:
            raise JobError(_one_line(str(exc)))
        return 0
    finally:
        health.up = 0
        jvm = launched_jvm()
        if jvm is not None and jvm.poll() is not None:  # Spark's JVM is gone: nothing to stop, say nothing more
            log.debug("Spark's JVM exited with %s: the query and Spark are not stopped", jvm.returncode)
        else:
            with contextlib.suppress(*jvm_lost_errors()):
                if query is not None and query.isActive:
                    query.stop()
                spark.stop()
            accelerators.after_spark_stop(jvm, health.batches)


def quiet_accumulator_server(spark: Any) -> None:
    """PySpark's accumulator server prints a traceback for a connection the JVM drops (its JVM killed): one line at
    debug level instead (the job reports the JVM's end itself)."""
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda _request, address: log.debug("accumulator connection from %s lost", address)


def jvm_lost_errors() -> tuple[type[BaseException], ...]:
    """The errors a py4j call raises once Spark's JVM has gone (killed, out of memory, crashed)."""
    from py4j.protocol import Py4JNetworkError

    return (Py4JNetworkError, ConnectionError, EOFError)


def jvm_exit_line(exc: BaseException) -> str:
    """One line for a job whose Spark JVM went away: its exit status when known, and the py4j error."""
    jvm = launched_jvm()
    status = None
    if jvm is not None:  # its sockets close a moment before the kernel reports its exit: wait for that, briefly
        with contextlib.suppress(subprocess.TimeoutExpired):
            status = jvm.wait(timeout=5)
    how = (
        f"killed by signal {-status}" if status is not None and status < 0
        else f"exit status {status}" if status is not None
        else "killed?"
    )  # fmt: skip
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    return f"Spark's JVM exited ({how}): {first[:300]} (the checkpoint is intact: restart the job)"


#: Error lines that name a cause better said in plain words: (what the line holds, what the job says first).
_CAUSES = (
    ("No space left on device", "the disk is full"),
    ("TimeoutException", "the event topic's Kafka cluster did not answer"),
    ("UnknownTopicOrPartitionException", "the event topic does not exist (or is not visible with these credentials)"),
    ("SaslAuthenticationException", "Kafka refused the credentials"),
    ("SSLHandshakeException", "the TLS handshake with Kafka failed"),
)


def _one_line(message: str) -> str:
    """The most useful line of a (Python/Java) error: an elrwatch SourceError if present."""
    for marker in ("SourceError:", "SnapshotError:", "StoreWriteError:"):
        for line in message.splitlines():
            if marker in line:
                return line.split(marker, 1)[1].strip()
    for needle, cause in _CAUSES:
        for line in message.splitlines():
            if needle in line:
                return f"{cause}: {line.strip()[:400]}"
    for line in message.splitlines():
        if line.strip():
            return line.strip()[:500]
    return message[:500]


def wait_for_batch_end(query: Any, timeout_s: float) -> bool:
    """Let a running micro-batch finish before the query is stopped (bounded): stop() interrupts a batch mid-way,
    which kills its Python workers (harmless, the batch re-runs on restart, but noisy). True if none is running."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if not query.isActive or not query.status.get("isTriggerActive"):
                return True
        except Exception:  # the query ended meanwhile
            return True
        if time.monotonic() >= deadline:
            log.warning("the batch still runs after %.0fs: stopping it (it re-runs on restart)", timeout_s)
            return False
        time.sleep(0.1)


def install_signal_handlers(stop_event: threading.Event) -> None:
    """SIGINT / SIGTERM stop the query (an interrupted batch is re-run on restart: the checkpoint stays valid)."""

    def handler(signum: int, _frame: Any) -> None:
        log.warning("signal %s: stopping after the current batch", signum)
        stop_event.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
