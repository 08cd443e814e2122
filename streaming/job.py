"""The streaming job: events → Spark Structured Streaming (applyInPandasWithState) → status store + gauges.

Pipeline (one micro-batch):

1. **source** (`sources.py`): rows ``value, topic, partition, offset, timestamp``.
2. **parse + route** (``route.py``, stateless, once per input event; in the Python sources' read task, a
   ``mapInArrow`` after Spark's JVM Kafka source): each line is parsed and validated by
   ``state.records.parse_line`` with position ``<topic>/<partition>@<offset>`` (``<file>:<line>`` for files).
   A valid record is pickled and sent to ``state.routing.targets`` (its partition's bucket, or every bucket for
   partition 0 and non-partition records: DESIGN §4). Malformed lines, well-formed records of unused types and
   non-event lines go to bucket 0 only, which counts and quarantines them (once, with the reason).
3. **state** (``groupBy("bucket").applyInPandasWithState``): one group per bucket holds a whole
   ``ClusterState(bucket=(i, n))`` in one binary state column (``to_bytes()``: pickled + zlib; pyspark 4.3
   cannot keep ``array<int>`` in a state schema). The rows are applied per source in (source, seq) order, the
   sources merged by metadata offset; the core's positions skip anything already applied (re-run batch,
   restart, duplicates in the topic). Pipeline counts (events by type, duplicates, quarantine, ...) are kept
   in the same state, by the bucket that reports the record (its partition's owner; bucket 0 for broadcasts),
   so they are exactly-once too. The group emits one row: changed partition documents, removed partitions,
   status transitions, quarantined records, violations of the changed partitions, topic documents whose
   owned partition count changed, and the bucket's gauge contributions and counts (absolute values).
4. **sink** (``foreachBatch`` on the driver): :class:`Aggregator` merges the buckets' rows (partition gauges
   summed, broker/cluster gauges and documents from bucket 0, topic partition counts summed) and writes them
   with ``StatusStore.write_batch(batch_id, ...)`` (a re-run batch id is a no-op); the Prometheus exporter
   serves the aggregate. The aggregator's per-bucket values are saved next to Spark's checkpoint, so a
   restarted driver still sums buckets that have no new data.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import json
import logging
import marshal
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from elrwatch.streaming.memory import ARROW_POOL_ENV, TRIM_AFTER_ROWS, release_memory
from elrwatch.streaming.route import (  # noqa: F401 - re-exported: the job's stages in one namespace
    KIND_ERROR,
    KIND_IGNORED,
    KIND_RECORD,
    KIND_SKIPPED,
    ROUTED_SCHEMA,
    decode_record,
    encode_record,
    group_keys,
    route_batches,
)

if TYPE_CHECKING:
    from elrwatch.state.gauges import Gauges

log = logging.getLogger("elrwatch.stream")

STATE_SCHEMA = "token string, blob binary"
OUTPUT_SCHEMA = "bucket int, payload binary"
DRIVER_FILE = "elrwatch-driver.json"
STATE_KEYS_FILE = "elrwatch-state-keys.json"  # the group key of each bucket, fixed for the checkpoint's life
STATE_MODES = ("snapshot", "blob")
DEFAULT_SNAPSHOT_SUBDIR = "bucket-snapshots"
LAST_ROW_PREFIX = "lane-bucket-"  # state servers' restart hints in the snapshot directory (state_service.py)
# Snapshot mode: when a bucket's delta (records applied since its snapshot) exceeds either bound, the worker
# writes a new snapshot. Rows bound the replay on a worker-cache miss (~10 µs per record); bytes bound what every
# micro-batch ships through Arrow into the state store (~15 B per compressed PartitionChangeRecord).
DELTA_MAX_RECORDS = 100_000
DELTA_MAX_BYTES = 4 << 20
SNAPSHOTS_KEPT = 3  # per bucket, besides the one the loaded (committed) state references
SNAPSHOT_SUFFIX = ".snap"
STATE_POOL_ENV = "ELRWATCH_PYTHON_POOL"


@dataclass
class JobConfig:
    """Everything `elrwatch stream` needs (the CLI fills it from options / env)."""

    source: str = "kafka"
    bootstrap_servers: str | None = None
    topic: str | None = None
    path: str | None = None
    store: str = "sqlite:///var/elrwatch.db"
    store_password_file: str | None = None
    checkpoint: str = "var/checkpoint"
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    trigger: str = "1s"
    buckets: int = 2
    max_records_per_batch: int | None = None
    starting_offsets: str = "earliest"
    available_now: bool = False
    default_min_isr: int = 1
    security_protocol: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password_file: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password_file: str | None = None
    source_timeout_ms: int = 15000
    spark_master: str | None = None  # None: spark-submit's master when launched by it, else local[2]
    spark_conf: dict[str, str] = field(default_factory=dict)
    spark_driver_memory: str = "2g"  # spark.driver.memory (local mode: the whole JVM's heap)
    spark_jars_packages: str | None = None  # spark.jars.packages, e.g. the Kafka connector for kafka-native
    spark_log_level: str | None = None  # None: FATAL, the job reports a failing batch itself as one line
    changelog_checkpointing: bool = True
    state_cache: bool = True
    keep_workers_warm: bool = True  # warm.py: keep Python workers alive through idle periods
    jvm_quick_start: bool = True  # the driver JVM compiles with C1 only (driver_java_options)
    jvm_class_archive: bool = True  # jvm_archive.py: local mode maps (or writes) an archive of Spark's classes
    jvm_class_archive_dir: str | None = None  # None: jvm_archive.default_archive_dir()
    state_mode: str = "snapshot"  # snapshot: snapshot files + delta in the state row; blob: whole state in the row
    state_dir: str | None = None  # snapshot files; default <checkpoint>/bucket-snapshots for a local checkpoint
    state_delta_max_records: int = DELTA_MAX_RECORDS
    state_tasks: int | None = None  # parallel state tasks (spark.sql.shuffle.partitions); None: see state_tasks()
    state_service: bool | None = None  # buckets kept in the driver's state servers; None: on in local mode
    bound_metrics_port: int | None = None  # set by run(): the port actually serving (for --metrics-port 0)

    def snapshot_dir(self) -> str | None:
        """The absolute bucket snapshot directory; ValueError when snapshot mode has none.

        Blob mode writes no snapshots but still reads the snapshot rows a checkpoint may hold from an earlier
        snapshot-mode run: its directory is returned when known (None otherwise)."""
        if self.state_mode not in STATE_MODES:
            raise ValueError(f"--state-mode must be one of {', '.join(STATE_MODES)}, got {self.state_mode!r}")
        if self.state_dir:
            return os.path.abspath(self.state_dir)
        checkpoint = self.checkpoint.removeprefix("file://").removeprefix("file:")
        if "://" in checkpoint:
            if self.state_mode != "snapshot":
                return None
            raise ValueError(
                f"--checkpoint {self.checkpoint} is not a local path: give --state-dir (a filesystem shared "
                "by the driver and every executor) or use --state-mode blob"
            )
        return os.path.abspath(os.path.join(checkpoint, DEFAULT_SNAPSHOT_SUBDIR))

    def source_options(self) -> dict[str, str]:
        """Options for `sources.read_stream` (secrets by reference only: env var names or files)."""
        from elrwatch.streaming.sources import security_options

        opts: dict[str, str] = {"timeout.ms": str(self.source_timeout_ms)}
        if self.source == "files":
            if not self.path:
                raise ValueError("--path is required with --source files")
            opts["path"] = self.path
        else:
            if not self.bootstrap_servers or not self.topic:
                raise ValueError(f"--bootstrap-servers and --topic are required with --source {self.source}")
            opts.update(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    "topic": self.topic,
                    "startingOffsets": self.starting_offsets,
                }
            )
            opts.update(
                security_options(
                    self.security_protocol,
                    self.ssl_cafile,
                    self.ssl_certfile,
                    self.ssl_keyfile,
                    self.ssl_password_file,
                    self.sasl_mechanism,
                    self.sasl_username,
                    self.sasl_password_file,
                )
            )
        if self.max_records_per_batch:
            opts["maxOffsetsPerTrigger"] = str(self.max_records_per_batch)
        return opts


# ---------------------------------------------------------------------------------------------- stage 3: state


class SnapshotError(RuntimeError):
    """A bucket's snapshot file cannot be read (missing, corrupt): one line, raised in the Python worker."""


class SnapshotDir:
    """A directory of immutable bucket snapshots (``ClusterState.to_bytes()``), shared by every executor.

    Names are ``<run>-b<bucket>-<time_ns>-<token>.snap``: unique per write (a retried batch writes another
    file, never over one a committed state row may reference), sortable by age within a bucket. ``run`` is
    drawn when the bucket's state is created, so two jobs sharing a directory never touch each other's files.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    @staticmethod
    def name(run: str, bucket: int, token: str) -> str:
        return f"{run}-b{bucket:04d}-{time.time_ns():020d}-{token}{SNAPSHOT_SUFFIX}"

    def write(self, name: str, data: bytes) -> None:
        """tmp file + fsync + atomic rename (+ directory fsync): a reader sees the whole file or none."""
        os.makedirs(self.path, exist_ok=True)
        final = os.path.join(self.path, name)
        tmp = os.path.join(self.path, f".{name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        dir_fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def read(self, bucket: int, name: str) -> Any:
        """The ClusterState of a snapshot, or a one-line SnapshotError."""
        from elrwatch.state.cluster import ClusterState

        path = os.path.join(self.path, name)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            raise SnapshotError(
                f"bucket {bucket}: snapshot {path} referenced by the checkpoint is missing (--state-dir must be "
                "the same directory, shared by every executor, for the life of the checkpoint)"
            ) from None
        except OSError as exc:
            raise SnapshotError(f"bucket {bucket}: cannot read snapshot {path}: {exc.strerror or exc}") from None
        try:
            return ClusterState.from_bytes(data)
        except Exception as exc:
            raise SnapshotError(
                f"bucket {bucket}: snapshot {path} is corrupt ({type(exc).__name__}: {str(exc)[:80]})"
            ) from None

    def rotate(self, run: str, bucket: int, keep: set[str]) -> None:
        """Delete the bucket's snapshots except ``keep`` and the newest SNAPSHOTS_KEPT (a retried or zombie
        attempt of the current batch may still commit a row referencing one of those)."""
        prefix = f"{run}-b{bucket:04d}-"
        try:
            names = sorted(n for n in os.listdir(self.path) if n.startswith(prefix) and n.endswith(SNAPSHOT_SUFFIX))
        except FileNotFoundError:
            return
        for name in names[:-SNAPSHOTS_KEPT]:
            if name not in keep:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.path, name))


class BucketState:
    """What one bucket keeps between micro-batches.

    Blob mode: the whole state, pickled + zlib'd, in the state row (``to_blob``). Snapshot mode: the state row
    holds ``run``, the ``snapshot`` file name (None: the empty initial state) and the ``delta``: the encoded
    records applied since that snapshot, in apply order, as zlib'd chunks (one per micro-batch), plus counts.
    """

    __slots__ = (
        "cluster",
        "counts",
        "emitted_topic_counts",
        "run",
        "snapshot",
        "delta",
        "delta_rows",
        "delta_bytes",
        "journal",
        "must_snapshot",
        "caught_up",
    )

    def __init__(self, cluster: Any, counts: Any, emitted_topic_counts: dict[str, int]) -> None:
        self.cluster = cluster
        self.counts = counts
        self.emitted_topic_counts = emitted_topic_counts
        self.run = uuid.uuid4().hex[:12]
        self.snapshot: str | None = None
        self.delta: list[bytes] = []
        self.delta_rows = 0
        self.delta_bytes = 0
        self.journal: list[bytes] = []  # this micro-batch's records, as applied (snapshot mode)
        self.must_snapshot = False  # the state does not derive from (snapshot, delta): e.g. read from a blob
        self.caught_up = False  # loaded by catching up a stale cached state (see from_row)

    def to_blob(self) -> bytes:
        body = pickle.dumps(
            (self.cluster.to_bytes(compress=False), self.counts, self.emitted_topic_counts),
            protocol=pickle.HIGHEST_PROTOCOL,
        )
        return zlib.compress(body, 1)

    @classmethod
    def from_blob(cls, blob: bytes) -> BucketState:
        from elrwatch.state.cluster import ClusterState

        cluster_bytes, counts, emitted = pickle.loads(zlib.decompress(blob))
        bs = cls(ClusterState.from_bytes(cluster_bytes), counts, emitted)
        bs.must_snapshot = True
        return bs

    def to_row(
        self,
        snapshots: SnapshotDir,
        bucket: int,
        token: str,
        max_records: int = DELTA_MAX_RECORDS,
        max_bytes: int = DELTA_MAX_BYTES,
    ) -> bytes:
        """Snapshot mode: append this batch's records to the delta, or write a new snapshot when it is big."""
        journal, self.journal = self.journal, []
        if journal:
            chunk = zlib.compress(marshal.dumps(journal), 1)
            self.delta.append(chunk)
            self.delta_rows += len(journal)
            self.delta_bytes += len(chunk)
        if self.must_snapshot or self.delta_rows > max_records or self.delta_bytes > max_bytes:
            name = SnapshotDir.name(self.run, bucket, token)
            snapshots.write(name, self.cluster.to_bytes())
            snapshots.rotate(self.run, bucket, keep={name, self.snapshot or ""})
            self.snapshot, self.delta, self.delta_rows, self.delta_bytes = name, [], 0, 0
            self.must_snapshot = False
        return b"S" + pickle.dumps(
            {
                "run": self.run,
                "snapshot": self.snapshot,
                "minIsr": self.cluster.default_min_isr,
                "delta": self.delta,
                "deltaRows": self.delta_rows,
                "deltaBytes": self.delta_bytes,
                "counts": self.counts,
                "emitted": self.emitted_topic_counts,
            },
            protocol=pickle.HIGHEST_PROTOCOL,
        )

    @classmethod
    def from_row(
        cls,
        row: bytes,
        snapshots: SnapshotDir | None,
        bucket: int,
        buckets: int,
        stale: BucketState | None = None,
    ) -> BucketState:
        """Either format: a snapshot-mode row (snapshot file + delta replayed) or a whole blob (blob mode).

        ``stale``: this worker's cached state of an older row. When the row's delta extends the delta it was
        built from (same run and snapshot, same first chunks), only the newer chunks are applied to it: the
        batches another worker processed since (a cache "catch-up" instead of a snapshot read).
        """
        if row[:1] != b"S":
            return cls.from_blob(row)
        from elrwatch.state.cluster import ClusterState

        data = pickle.loads(row[1:])
        name = data["snapshot"]
        delta = data["delta"]
        if stale is not None and stale.catches_up_to(data):
            cluster = stale.cluster
            chunks = delta[len(stale.delta) :]
        else:
            stale = None
            if name is None:
                cluster = ClusterState(default_min_isr=data["minIsr"], bucket=(bucket, buckets))
            elif snapshots is None:
                raise SnapshotError(
                    f"bucket {bucket}: the checkpoint's state is in snapshot files: --state-dir is needed"
                )
            else:
                cluster = snapshots.read(bucket, name)
            chunks = delta
        apply = cluster.apply
        tracking, cluster.track_changes = cluster.track_changes, False  # changes were emitted when first applied
        try:
            for chunk in chunks:
                for rec in marshal.loads(zlib.decompress(chunk)):
                    apply(decode_record(rec))
        finally:
            cluster.track_changes = tracking
        cluster.drain_changes()
        bs = cls(cluster, data["counts"], data["emitted"])
        bs.run, bs.snapshot, bs.delta = data["run"], name, delta
        bs.delta_rows, bs.delta_bytes = data["deltaRows"], data["deltaBytes"]
        bs.caught_up = stale is not None
        return bs

    def catches_up_to(self, data: dict[str, Any]) -> bool:
        """Whether this state (snapshot + its delta) is a prefix of the row ``data`` (snapshot + delta)."""
        k = len(self.delta)
        return (
            not self.must_snapshot
            and self.run == data["run"]
            and self.snapshot == data["snapshot"]
            and k <= len(data["delta"])
            and data["delta"][:k] == self.delta
        )


# Per Python worker: bucket → (token, BucketState), at most every bucket. Spark reuses Python workers, so the state
# a worker wrote last time is usually still in memory: when the state row's token matches, nothing is read or
# replayed (see build_query and state_tasks for how the job makes the same worker see the same buckets).
_CACHE: dict[int, tuple[str, BucketState]] = {}


def _remember(
    bucket: int, token: str, bs: BucketState, limit: int, cache: dict[int, tuple[str, BucketState]] | None = None
) -> None:
    """Cache the bucket's state in this process (``cache``: this worker's module-level `_CACHE` by default).

    Module-level on purpose: the state function is a closure that cloudpickle ships *by value* with a copy of
    the globals it names, so a ``_CACHE`` written from inside it would be a per-task copy, never seen again.
    """
    cache = _CACHE if cache is None else cache
    while len(cache) >= limit:
        cache.pop(next(iter(cache)))
    cache[bucket] = (token, bs)


def _load_bucket(
    bucket: int,
    buckets: int,
    row: tuple[str, bytes] | None,
    default_min_isr: int,
    use_cache: bool,
    snapshots: SnapshotDir | None,
    cache: dict[int, tuple[str, BucketState]],
) -> tuple[BucketState, str]:
    """(the bucket's state, how it was loaded: "hit" from this process's cache, "catch-up" of a stale cached
    state, "miss": from the row alone). ``row``: the (token, blob) of the bucket's Spark state, None if none."""
    from elrwatch.state.cluster import ClusterState
    from elrwatch.state.gauges import PipelineCounts

    if row is not None:
        token, blob = row
        cached = cache.pop(bucket, None) if use_cache else None
        if cached is not None and cached[0] == token:
            return cached[1], "hit"
        stale = cached[1] if cached is not None else None
        del cached
        gc.disable()  # unpickling millions of objects would trigger many full collections for nothing
        try:
            bs = BucketState.from_row(blob, snapshots, bucket, buckets, stale)
        finally:
            gc.enable()
        gc.freeze()  # long-lived: keep the state out of the cyclic GC's scans
        return bs, "catch-up" if bs.caught_up else "miss"
    cache.pop(bucket, None)
    cluster = ClusterState(default_min_isr=default_min_isr, bucket=(bucket, buckets))
    return BucketState(cluster, PipelineCounts(), {}), "miss"


def _ordered_rows(pdf: Any) -> Iterator[tuple[str, int, bytes | None]]:
    """Rows per source in seq order; sources merged by metadata offset (best global order available)."""
    if len(pdf) == 0:
        return iter(())
    pdf = pdf.sort_values(["src", "seq"], kind="stable")
    srcs = pdf["src"].to_numpy()
    moffs = pdf["moff"].to_numpy().tolist()
    kinds = pdf["kind"].to_numpy().tolist()
    recs = pdf["rec"].to_numpy().tolist()
    rows = list(zip(moffs, kinds, recs, strict=True))
    if srcs[0] == srcs[-1]:  # one source (the common case: sorted, so first == last means all equal)
        return ((k, 0, r) for _, k, r in rows)
    streams = []
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or srcs[i] != srcs[start]:
            streams.append(rows[start:i])
            start = i
    merged = heapq.merge(*streams, key=lambda row: row[0])
    return ((k, 0, r) for _, k, r in merged)


def process_bucket(
    bucket: int, buckets: int, rows: Iterator[tuple[str, int, bytes | None]], bs: BucketState
) -> dict[str, Any]:
    """Apply one micro-batch's rows to a bucket and return its output payload (plain JSON-able dict; the changed
    partitions as domain rows, ``state.partition_row``: no documents, the store rebuilds those on read)."""
    from elrwatch.state import report
    from elrwatch.state.cluster import PARTITION_TYPES, Outcome
    from elrwatch.state.gauges import encode_gauges, partition_gauges, shared_gauges
    from elrwatch.state.partition_row import partition_row
    from elrwatch.state.routing import bucket_of

    cluster, counts = bs.cluster, bs.counts
    quarantined: list[dict[str, Any]] = []
    loads = pickle.loads
    journal = bs.journal.append
    for kind, _unused, rec in rows:
        if kind == KIND_RECORD:
            journal(rec)
            record = decode_record(rec)
            if record.type in PARTITION_TYPES:
                reports = bucket_of(record.data["topicId"], record.data["partitionId"], buckets) == bucket
            else:
                reports = bucket == 0
            outcome = cluster.apply(record)
            if not reports:
                continue
            counts.events_by_type[record.type] += 1
            if record.timestamp_ms is not None and (
                counts.last_event_ms is None or record.timestamp_ms > counts.last_event_ms
            ):
                counts.last_event_ms = record.timestamp_ms
            if outcome is Outcome.APPLIED:
                counts.applied += 1
            elif outcome is Outcome.DUPLICATE:
                counts.duplicates += 1
            elif outcome is Outcome.QUARANTINED:
                error = cluster.last_error
                if error is not None:
                    if not error.raw:
                        import orjson

                        error.raw = orjson.dumps(record.envelope()).decode()
                    counts.quarantined_by_reason[error.reason] += 1
                    quarantined.append(error.to_dict())
        elif kind == KIND_ERROR:
            error = loads(rec)
            counts.events_by_type[error.type or "invalid"] += 1
            counts.quarantined_by_reason[error.reason] += 1
            quarantined.append(error.to_dict())
        elif kind == KIND_SKIPPED:
            type_name = rec.decode()
            counts.events_by_type[type_name] += 1
            counts.skipped_by_type[type_name] += 1
        else:
            counts.ignored_lines += 1
    changes = cluster.drain_changes()
    rows_out = []
    violations = []
    stored_partition, min_isr_of = report.stored_partition, cluster.effective_min_isr
    for topic, partition in changes.partitions:
        stored = stored_partition(cluster, topic, partition)
        rows_out.append(partition_row(topic.name, partition, min_isr_of(topic), stored))
        for v in cluster.partition_violations(topic.topic_id, partition.partition_id):
            violations.append(
                {"topic": topic.name, "topicId": topic.topic_id, "partitionId": partition.partition_id, **v.to_dict()}
            )
    topics: dict[str, dict[str, Any]] = {}
    dirty = {t.topic_id for t in changes.topics}
    for topic in cluster.topics.values():
        n = len(topic.partitions)
        if topic.topic_id in dirty or bs.emitted_topic_counts.get(topic.topic_id) != n:
            topics[topic.topic_id] = report.topic_doc(cluster, topic)
            bs.emitted_topic_counts[topic.topic_id] = n
    removed_topics = [tid for tid, _name in changes.removed_topics]
    for tid in removed_topics:
        bs.emitted_topic_counts.pop(tid, None)
    payload: dict[str, Any] = {
        "bucket": bucket,
        "partitions": rows_out,
        "removed": [[tid, pid] for tid, pid, _name in changes.removed],
        "transitions": [t.to_dict() for t in changes.transitions],
        "quarantined": quarantined,
        "violations": violations,
        "topics": topics,
        "removedTopics": removed_topics,
        "gauges": encode_gauges(partition_gauges(cluster)),
        "counts": {
            "eventsByType": dict(counts.events_by_type),
            "quarantinedByReason": dict(counts.quarantined_by_reason),
            "duplicates": counts.duplicates,
            "skippedByType": dict(counts.skipped_by_type),
            "ignoredLines": counts.ignored_lines,
            "applied": counts.applied,
            "lastEventMs": counts.last_event_ms,
        },
    }
    if bucket == 0:
        payload["shared"] = encode_gauges(shared_gauges(cluster))
        payload["brokers"] = [report.broker_doc(b) for b in changes.brokers]
        payload["cluster"] = report.cluster_doc(cluster)
    return payload


PAYLOAD_HEAD, PAYLOAD_ROWS = b"H", b"P"
ROWS_PER_CHUNK = 5_000


def encode_payload(payload: dict[str, Any]) -> list[bytes]:
    """A bucket's output as rows: the head (everything but the partition rows, ``partitionCount``) and the
    changed partitions' rows (``state.partition_row``) in chunks. The driver merges the heads
    and streams the chunks into the store one at a time: it never holds all the rows (1M in the initial load)."""
    import orjson

    rows = payload.pop("partitions")
    payload["partitionCount"] = len(rows)
    out = [PAYLOAD_HEAD + zlib.compress(orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS), 1)]
    for i in range(0, len(rows), ROWS_PER_CHUNK):
        out.append(PAYLOAD_ROWS + zlib.compress(orjson.dumps(rows[i : i + ROWS_PER_CHUNK]), 1))
    return out


def decode_payloads(bodies: list[bytes]) -> tuple[list[dict[str, Any]], list[bytes]]:
    """(bucket heads, compressed partition-row chunks) of a batch's output rows."""
    import orjson

    heads = [orjson.loads(zlib.decompress(b[1:])) for b in bodies if b[:1] == PAYLOAD_HEAD]
    return heads, [b for b in bodies if b[:1] == PAYLOAD_ROWS]


def iter_partition_rows(chunks: list[bytes]) -> Iterator[list[Any]]:
    """The partition rows of the chunks, one chunk decoded at a time (each chunk is dropped once read)."""
    import orjson

    while chunks:
        yield from orjson.loads(zlib.decompress(chunks.pop()[1:]))


@dataclass(frozen=True)
class StateSettings:
    """What the state stage needs to apply a bucket's micro-batch (the same in a Spark worker or a state server)."""

    buckets: int
    default_min_isr: int = 1
    use_cache: bool = True
    state_mode: str = "blob"
    state_dir: str | None = None
    delta_max_records: int = DELTA_MAX_RECORDS

    def snapshots(self) -> SnapshotDir | None:
        return SnapshotDir(self.state_dir) if self.state_dir else None


def run_bucket(
    bucket: int,
    settings: StateSettings,
    row: tuple[str, bytes] | None,
    rows: Iterator[tuple[str, int, bytes | None]],
    n_rows: int,
    cache: dict[int, tuple[str, BucketState]] | None = None,
) -> tuple[str, bytes, list[bytes]]:
    """Apply one micro-batch's ordered rows to a bucket: (new token, new state row, output bodies).

    ``row`` is the bucket's committed (token, blob), None for a new bucket; ``cache`` the process's cached
    states (default: this worker's `_CACHE`). The caller stores (token, row) as the bucket's new Spark state.
    """
    cache = _CACHE if cache is None else cache
    snapshots = settings.snapshots()
    started = time.perf_counter()
    bs, how = _load_bucket(
        bucket, settings.buckets, row, settings.default_min_isr, settings.use_cache, snapshots, cache
    )
    loaded = time.perf_counter()
    # Paused for the batch's work: a storm's 25k documents per bucket allocate ~1M young objects, and the
    # collections they trigger cost 45% of the apply + documents time (measured); none of it makes cycles
    # worth collecting before the full collection below.
    gc.disable()
    try:
        payload = process_bucket(bucket, settings.buckets, rows, bs)
        del rows
        processed = time.perf_counter()
        token = uuid.uuid4().hex
        snapshot_before = bs.snapshot
        if settings.state_mode == "snapshot":
            blob = bs.to_row(snapshots, bucket, token, settings.delta_max_records)  # type: ignore[arg-type]
        else:
            bs.journal = []
            blob = bs.to_blob()
        if settings.use_cache:
            _remember(bucket, token, bs, settings.buckets, cache)
        saved = time.perf_counter()
        payload["timing"] = {
            "load": round(loaded - started, 3),
            "cache": how,
            "process": round(processed - loaded, 3),
            "save": round(saved - processed, 3),
            "snapshot": bs.snapshot != snapshot_before,
            "deltaRows": bs.delta_rows,
            "pid": os.getpid(),
        }
        bodies = encode_payload(payload)
        del payload
    finally:
        gc.enable()
    gc.collect()  # this batch's garbage cycles (only young objects are scanned: the state is frozen) ...
    gc.freeze()  # ... then what survived (the state's new objects) leaves the GC's scans too
    if n_rows >= TRIM_AFTER_ROWS:
        release_memory()
    return token, blob, bodies


def make_state_function(settings: StateSettings, service: Any = None, keys: list[int] | None = None):
    """The applyInPandasWithState function (closure over the job's settings).

    ``service``: a `state_service.ServiceClient` when the buckets live in the job's state servers (local mode):
    the function then only forwards each group to its bucket's server and stores the state row it returns.
    ``keys``: the group key of each bucket (`route.group_keys`); None: the bucket number is the key.
    """
    bucket_of_key = {key: bucket for bucket, key in enumerate(keys)} if keys is not None else None
    if settings.state_mode == "snapshot" and settings.snapshots() is None:
        raise ValueError("snapshot state mode needs a state directory")

    def update(key: tuple, pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        group_key = int(key[0])
        bucket = bucket_of_key[group_key] if bucket_of_key is not None else group_key
        row = (state.get[0], bytes(state.get[1])) if state.exists else None
        frames = [pdf for pdf in pdfs if len(pdf)]
        pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True) if frames else None
        del frames
        rows = _ordered_rows(pdf) if pdf is not None else iter(())
        n_rows = len(pdf) if pdf is not None else 0
        if service is not None:
            rows_list = list(rows)
            del pdf, rows
            token, blob, bodies = service.call(bucket, group_key, row, rows_list)
            del rows_list
            if n_rows >= TRIM_AFTER_ROWS:  # a big batch's rows and request: give the heap back (memory.py)
                gc.collect()
                release_memory()
        else:
            del pdf
            token, blob, bodies = run_bucket(bucket, settings, row, rows, n_rows)
        state.update((token, blob))
        yield pd.DataFrame({"bucket": [bucket] * len(bodies), "payload": bodies})

    return update


# ---------------------------------------------------------------------------------------------- stage 4: driver


class Aggregator:
    """Driver-side merge of the buckets' outputs; its per-bucket values survive restarts in a side file."""

    def __init__(self, buckets: int, path: str | None = None) -> None:
        self.buckets = buckets
        self.path = path
        self.bucket_gauges: dict[int, Gauges] = {}
        self.bucket_counts: dict[int, dict[str, Any]] = {}
        self.shared: Gauges = {}
        self.topic_docs: dict[int, dict[str, dict[str, Any]]] = {}
        self.cluster: dict[str, Any] | None = None
        if path and os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                saved = json.load(fh)
            if saved.get("buckets") == buckets:

                self.bucket_gauges = {int(k): _saved_gauges(v) for k, v in saved["bucketGauges"].items()}
                self.bucket_counts = {int(k): v for k, v in saved["bucketCounts"].items()}
                self.shared = _saved_gauges(saved["shared"])
                self.topic_docs = {int(k): v for k, v in saved["topicDocs"].items()}
                self.cluster = saved.get("cluster")

    def save(self, batch_id: int) -> None:
        from elrwatch.state.gauges import encode_gauges

        if not self.path:
            return
        data = {
            "batchId": batch_id,
            "buckets": self.buckets,
            "bucketGauges": {b: encode_gauges(g) for b, g in self.bucket_gauges.items()},
            "bucketCounts": self.bucket_counts,
            "shared": encode_gauges(self.shared),
            "topicDocs": self.topic_docs,
            "cluster": self.cluster,
        }
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".driver-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, self.path)

    def absorb(self, payloads: list[dict[str, Any]]) -> dict[str, Any]:
        """Merge one micro-batch's bucket payloads; return the `StatusStore.write_batch` arguments."""
        from elrwatch.state.gauges import as_samples, decode_gauges

        partitions: list[dict[str, Any]] = []
        removed: list[list[Any]] = []
        transitions: list[dict[str, Any]] = []
        quarantined: list[dict[str, Any]] = []
        violations: list[dict[str, Any]] = []
        brokers: list[dict[str, Any]] = []
        removed_topics: set[str] = set()
        touched_topics: set[str] = set()
        for p in sorted(payloads, key=lambda p: p["bucket"]):
            b = p["bucket"]
            partitions.extend(p.get("partitions", ()))
            removed.extend(p["removed"])
            transitions.extend(p["transitions"])
            quarantined.extend(p["quarantined"])
            violations.extend(p["violations"])
            self.bucket_gauges[b] = decode_gauges(p["gauges"])
            self.bucket_counts[b] = p["counts"]
            docs = self.topic_docs.setdefault(b, {})
            docs.update(p["topics"])
            touched_topics.update(p["topics"])
            for tid in p["removedTopics"]:
                removed_topics.add(tid)
            if b == 0:
                self.shared = decode_gauges(p["shared"])
                brokers.extend(p["brokers"])
                self.cluster = p["cluster"]
        for tid in removed_topics:
            for docs in self.topic_docs.values():
                docs.pop(tid, None)
        topics = [self.topic_doc(tid) for tid in sorted(touched_topics - removed_topics)]
        return {
            "partitions": partitions,
            "removed": [tuple(r) for r in removed],
            "brokers": brokers,
            "topics": [t for t in topics if t is not None],
            "removed_topics": sorted(removed_topics),
            "transitions": transitions,
            "quarantined": quarantined,
            "violations": violations,
            "gauges": as_samples(self.gauges()),
            "meta": self.meta(),
        }

    def topic_doc(self, topic_id: str) -> dict[str, Any] | None:
        """The topic's document (from the lowest bucket that has it) with the partition count summed."""
        base = None
        total = 0
        for b in sorted(self.topic_docs):
            doc = self.topic_docs[b].get(topic_id)
            if doc is None:
                continue
            base = base or doc
            total += int(doc.get("partitionCount", 0))
        if base is None:
            return None
        return {**base, "partitionCount": total}

    def counts(self) -> Any:
        from elrwatch.state.gauges import PipelineCounts

        total = PipelineCounts()
        for c in self.bucket_counts.values():
            total.events_by_type.update(c["eventsByType"])
            total.quarantined_by_reason.update(c["quarantinedByReason"])
            total.skipped_by_type.update(c["skippedByType"])
            total.duplicates += c["duplicates"]
            total.ignored_lines += c["ignoredLines"]
            total.applied += c["applied"]
            if c.get("lastEventMs") is not None:
                total.last_event_ms = max(total.last_event_ms or 0, c["lastEventMs"])
        return total

    def gauges(self) -> Gauges:
        """The cluster's gauges: partition gauges summed over buckets, shared ones from bucket 0, pipeline."""
        from elrwatch.state.gauges import pipeline_gauges, sum_gauges

        out = sum_gauges(self.bucket_gauges.values())
        out.update(self.shared)
        out.update(pipeline_gauges(self.counts()))
        return dict(sorted(out.items()))

    def meta(self) -> dict[str, Any]:
        from elrwatch.state.report import counts_doc

        counts = self.counts()
        meta: dict[str, Any] = {"counts": counts_doc(counts)}
        if counts.last_event_ms is not None:
            meta["lastEventTimeMs"] = counts.last_event_ms
        if self.cluster is not None:
            meta["cluster"] = self.cluster
        return meta


def _saved_gauges(saved: Any) -> Gauges:
    """Gauges of the driver file: ``encode_gauges`` rows, or (a file written before gauges were keyed by
    (name, labels)) a map of sample names, whose labels hold no ``,`` or ``"``."""
    from elrwatch.state.gauges import decode_gauges, key

    if not isinstance(saved, dict):
        return decode_gauges(saved)
    out: Gauges = {}
    for name, value in saved.items():
        metric, _, inner = name.partition("{")
        pairs = (pair.split("=", 1) for pair in inner.rstrip("}").split(",")) if inner else ()
        out[key(metric, **{label: text.strip('"') for label, text in pairs})] = value
    return out


# ---------------------------------------------------------------------------------------------- the job


def spark_master(config: JobConfig) -> str | None:
    """The master to set: ``--spark-master`` if given; none when spark-submit launched us (the Spark operator's
    driver, `spark-submit --master k8s://…`), so its master and executors are used; else local mode on 2 cores."""
    if config.spark_master:
        return config.spark_master
    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # set by spark-submit's PythonRunner for the driver process
        return None
    return "local[2]"


def local_worker_python(config: JobConfig, master: str | None) -> str | None:
    """The interpreter for Spark's Python workers and planner processes to set (``PYSPARK_PYTHON``): in local
    mode this process's own, unless ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` says otherwise.

    Spark's default is whatever ``python3`` the PATH finds first: another installation without elrwatch, or a
    version manager's shim that costs 0.1-0.4 s per process (a query's start and a restart's first batch spawn
    about ten). On a cluster the executors' interpreter is the cluster's to choose (None)."""
    if master is None or not master.startswith("local"):
        return None
    if os.environ.get("PYSPARK_PYTHON") or "spark.pyspark.python" in config.spark_conf:
        return None
    return sys.executable


# G1 returns unused heap to the OS when idle (after the initial load the heap is mostly garbage; without this the
# JVM kept ~2.7 GB resident at 1M partitions).
G1_RETURN_HEAP_OPTIONS = "-XX:G1PeriodicGCInterval=15000 -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"
# C1 only: HotSpot's optimising compiler (C2) is most of the JVM's CPU while Spark starts.
QUICK_START_OPTIONS = "-XX:TieredStopAtLevel=1"


def driver_java_options(config: JobConfig, archive_options: str = "") -> str:
    """``spark.driver.extraJavaOptions`` of the job: G1 returning idle heap, C1-only compilation with
    ``--jvm-quick-start``, then the user's own value from ``--spark-conf`` (later flags win in HotSpot).

    C1 only: a restart's JVM used 13.5 instead of 25.4 s of CPU before its first batch, on 2 cores the
    difference between a 22 s and a 27 s restart (20k partitions), for a few per cent of sustained throughput
    (the job's hot code is Python; docs/PERFORMANCE.md, session 10). In local mode the driver JVM is the whole of Spark.
    ``archive_options``: the class archive's (`class_archive_for`)."""
    parts = [G1_RETURN_HEAP_OPTIONS]
    if config.jvm_quick_start:
        parts.append(QUICK_START_OPTIONS)
    if archive_options:  # jvm_archive.ClassArchive.java_options
        parts.append(archive_options)
    own = config.spark_conf.get("spark.driver.extraJavaOptions")
    if own:
        parts.append(own)
    return " ".join(parts)


def state_tasks(config: JobConfig, master: str) -> int:
    """Parallel state tasks (``spark.sql.shuffle.partitions``; a checkpoint keeps the value it started with).

    Local mode: one task by default. With the state servers (one per task, state_service.py) ``--state-tasks 2``
    applies two buckets at a time: a storm's or the initial load's state work takes half as long, but every
    micro-batch pays a second task and state store (at 1k events/s: freshness p50 0.70 → 1.35 s, p99 1.74 →
    2.71 s measured) and two buckets' documents are built at once (a higher transient RSS peak). Without the
    servers one task lets one Python worker keep (and hit) every bucket. A cluster: one task per bucket, each
    executor keeping the buckets Spark's state-store locality sends it.
    """
    if config.state_tasks:
        return config.state_tasks
    return 1 if master.startswith("local") else config.buckets


def use_state_service(config: JobConfig) -> bool:
    """Whether the buckets live in the driver's state servers: ``--state-service``, default on in local mode."""
    master = spark_master(config)
    local = master is not None and master.startswith("local")
    if config.state_service is None:
        return local
    if config.state_service and not local:
        raise ValueError("--state-service needs a local Spark master (the servers run next to the driver)")
    return config.state_service


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


def class_archive_for(config: JobConfig) -> Any:
    """The JVM class archive (`jvm_archive.ClassArchive`) of the JVM `build_spark` is about to start, or None:
    turned off, not local mode, or a JVM already running in this process (its options are set)."""
    master = spark_master(config)
    if not config.jvm_class_archive or master is None or not master.startswith("local"):
        return None
    from pyspark import SparkContext

    if SparkContext._gateway is not None:
        return None
    from elrwatch.streaming import jvm_archive

    directory = config.jvm_class_archive_dir or jvm_archive.default_archive_dir()
    return jvm_archive.prepare(directory, jvm_archive.spark_jars_dir())


def launched_jvm() -> Any:
    """The JVM process PySpark started for this process (its ``Popen``), or None."""
    from pyspark import SparkContext

    return getattr(SparkContext._gateway, "proc", None)


def build_spark(config: JobConfig, archive: Any = None) -> Any:
    """A local Spark session tuned for the job (RocksDB state store, few shuffle partitions, Arrow); ``archive``:
    the JVM class archive to map or write (`class_archive_for`)."""
    from pyspark.sql import SparkSession

    # Python workers (children of the JVM in local mode) import the installed elrwatch, the driver's, never an
    # `elrwatch` folder in the working directory (a compiled core and a source checkout must not mix)
    os.environ.setdefault("PYTHONSAFEPATH", "1")
    builder = SparkSession.builder.appName("elrwatch-stream")
    master = spark_master(config)
    if master is not None:
        builder = builder.master(master)
    python = local_worker_python(config, master)
    if python is not None:  # before the JVM starts: its planner processes read the environment too
        os.environ["PYSPARK_PYTHON"] = python
    builder = (
        builder.config("spark.sql.shuffle.partitions", str(config.buckets))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config(
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
            "true" if config.changelog_checkpointing else "false",
        )
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100000")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.driver.memory", config.spark_driver_memory)
        .config(
            "spark.driver.extraJavaOptions",
            driver_java_options(config, archive.java_options() if archive is not None else ""),
        )
        .config("spark.redaction.regex", "(?i)secret|password|token|access[.]?key|jaas")
    )
    if config.spark_jars_packages:  # e.g. the Kafka connector for --source kafka-native
        builder = builder.config("spark.jars.packages", config.spark_jars_packages)
    for key, value in {**ARROW_POOL_ENV, "PYTHONSAFEPATH": "1"}.items():  # executors' Python workers (cluster mode)
        builder = builder.config(f"spark.executorEnv.{key}", value)
    for key, value in config.spark_conf.items():
        if key != "spark.driver.extraJavaOptions":  # appended to the job's own (driver_java_options)
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.environment.update(ARROW_POOL_ENV)  # Python workers of the functions defined from now on
    spark.conf.set("spark.sql.shuffle.partitions", str(state_tasks(config, spark.sparkContext.master)))
    # Spark's own ERROR lines repeat what the job reports as one line; --spark-log-level WARN shows them.
    spark.sparkContext.setLogLevel(config.spark_log_level or "FATAL")
    return spark


def build_query(
    spark: Any, config: JobConfig, sink: Any, service: Any = None, keys: list[int] | None = None
) -> Any:
    """Wire source → route → state → foreachBatch(sink) and start the query (``service``: a state_service
    client when the buckets live in the driver's state servers; ``keys``: each bucket's group key)."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    from elrwatch.streaming.sources import ROUTE_BUCKETS_OPTION, ROUTING_SOURCES, read_stream

    buckets = config.buckets
    options = config.source_options()
    if config.source in ROUTING_SOURCES:  # the Python sources parse + route in their read task (route.py)
        routed = read_stream(spark, config.source, {**options, ROUTE_BUCKETS_OPTION: str(buckets)})
    else:
        events = read_stream(spark, config.source, options)
        routed = events.mapInArrow(lambda it: route_batches(it, buckets), ROUTED_SCHEMA)
    # each bucket under its group key, so that the buckets spread evenly over the state tasks (route.group_keys)
    if keys is not None and keys != list(range(buckets)):
        routed = routed.withColumn("bucket", F.element_at(F.array(*[F.lit(k) for k in keys]), F.col("bucket") + 1))
    # Spark keeps one pool of Python workers per (python, modules, environment) and hands a task any idle worker
    # of its pool. Alone in its own pool (an extra environment variable), the state function runs in few workers
    # (one per concurrent state task) that see the same buckets again: their cache hits. Sharing the pool with
    # the source and route stages, the state landed on a random one of ~11 workers: always a miss, and stale
    # copies of every bucket in many processes.
    # With the state servers the state function holds no state, but its own pool still keeps a big batch's
    # transient buffers out of the source's workers (and tells the processes apart in the bench's breakdown).
    env = spark.sparkContext.environment
    env[STATE_POOL_ENV] = "state"
    try:
        updates = routed.groupBy("bucket").applyInPandasWithState(
            make_state_function(state_settings(config), service, keys),
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


_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def parse_trigger(text: str) -> str:
    """``1s`` / ``500ms`` / ``2m`` / ``1.5s`` → Spark's ``"<n> milliseconds"``; Spark's own forms pass through."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)\s*", text)
    if match:
        millis = round(float(match.group(1)) * _UNITS[match.group(2)])
        return f"{max(millis, 0)} milliseconds"
    return text


class Sink:
    """foreachBatch: merge the buckets' payloads, serve their gauges, write the store (idempotent per batch),
    then the batch's health metrics (batches, duration, input events)."""

    def __init__(self, store: Any, aggregator: Aggregator, health: Any) -> None:
        self.store = store
        self.aggregator = aggregator
        self.health = health

    def __call__(self, batch_df: Any, batch_id: int) -> None:

        started = time.monotonic()
        rows = batch_df.collect()  # runs the batch: source, route, state (the sink is lazy until here)
        collected = time.monotonic()
        gc.disable()  # decoding and writing allocate a young object per value and make no cycles (see update)
        try:
            payloads, chunks = decode_payloads([r["payload"] for r in rows])
            del rows
            n_buckets = len(payloads)
            events_before = sum(self.aggregator.counts().events_by_type.values())
            args = self.aggregator.absorb(payloads)
            events_total = args["meta"]["counts"]["events"]
            n_quarantined = len(args["quarantined"])
            changed = len(args["partitions"]) + sum(p.get("partitionCount", 0) for p in payloads)
            args["partition_rows"] = iter_partition_rows(chunks)
            gauges = self.aggregator.gauges()
            if self.health is not None:
                self.health.gauges_ready(gauges)  # /metrics (alerts) before the store write (REST), not after
            absorbed = time.monotonic()
            written = self.store.write_batch(batch_id, **args)
            stored = time.monotonic()
            timing = _timing_summary(payloads, collected - started, absorbed - collected, stored - absorbed)
            del payloads, chunks, args  # before trimming: a load's transitions alone are ~1M dicts
        finally:
            gc.enable()
        if changed >= TRIM_AFTER_ROWS:
            gc.collect()
            release_memory()
        self.aggregator.save(batch_id)
        if self.health is not None:
            duration = time.monotonic() - started
            self.health.batch_written(batch_id, gauges, duration, input_events=events_total - events_before)
        log.info(
            "batch %s: %d buckets, %d partitions changed, %d quarantined, events=%d, sink %.2fs (%s)%s",
            batch_id,
            n_buckets,
            changed,
            n_quarantined,
            events_total,
            time.monotonic() - started,
            timing,
            "" if written else " (already committed: store unchanged)",
        )


def _timing_summary(payloads: list[dict[str, Any]], run_s: float, merge_s: float, store_s: float) -> str:
    """Where the batch's time went: Spark running the batch (source, route, state: per bucket its load with
    cache hit/miss, apply + documents, state save), merging the payloads on the driver, the store write."""
    parts = [f"run {run_s:.2f}"]
    for p in sorted(payloads, key=lambda p: p["bucket"]):
        t = p.get("timing")
        if t:
            parts.append(
                f"b{p['bucket']} {t['cache']} load {t['load']:.2f} process {t['process']:.2f} "
                f"save {t['save']:.2f}{' snapshot' if t['snapshot'] else ''}"
            )
    parts.append(f"merge {merge_s:.2f}; store {store_s:.2f}")
    return "; ".join(parts)


def _checkpoint_has_batches(checkpoint: str) -> bool:
    """Whether Spark planned a batch in this checkpoint (offsets log), committed or not: then it is a restart."""
    offsets = os.path.join(checkpoint, "offsets")
    return os.path.isdir(offsets) and any(not f.startswith(".") for f in os.listdir(offsets))


class JobError(RuntimeError):
    """A one-line reason the job cannot start or stopped."""


def run(
    config: JobConfig,
    stop_event: threading.Event | None = None,
    on_started: Any = None,
    handle_signals: bool = False,
) -> int:
    """Run the streaming job until stopped (or, with ``available_now``, until the source is drained)."""
    from elrwatch.store import StatusStore
    from elrwatch.streaming.metrics import Health, start_exporter

    began = time.monotonic()
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if config.spark_log_level is None:
        # a failing batch (e.g. a missing snapshot) is reported once, as one line, by the query's exception below;
        # py4j would also log the foreachBatch callback's whole Python + Java traceback
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    if config.buckets < 1:
        raise JobError("--buckets must be >= 1")
    config.source_options()  # validates required options early
    snapshot_dir = config.snapshot_dir()
    store = StatusStore(config.store, password_file=config.store_password_file)
    store.create_schema()
    fresh = not _checkpoint_has_batches(config.checkpoint)
    driver_file = os.path.join(config.checkpoint, DRIVER_FILE)
    if fresh:
        if store.last_batch_id() is not None:
            raise JobError(
                f"status store {store.masked_url} already holds batches of another run but checkpoint "
                f"{config.checkpoint} is new: use a fresh store with a fresh checkpoint"
            )
        with contextlib.suppress(FileNotFoundError):
            os.remove(driver_file)
        if snapshot_dir and config.state_dir and os.path.isdir(snapshot_dir):
            # a shared --state-dir keeps other runs' snapshots, but the state servers' restart hints of an
            # earlier checkpoint would only be preloaded for nothing
            for name in os.listdir(snapshot_dir):
                if name.startswith(LAST_ROW_PREFIX):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(os.path.join(snapshot_dir, name))
        if snapshot_dir and not config.state_dir and os.path.isdir(snapshot_dir):
            # the default directory belongs to this checkpoint: a new checkpoint starts without old snapshots
            for name in os.listdir(snapshot_dir):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(snapshot_dir, name))
    os.makedirs(config.checkpoint, exist_ok=True)
    aggregator = Aggregator(config.buckets, driver_file)
    health = Health(aggregator)
    exporter = None
    if config.metrics_port is not None:
        exporter = start_exporter(health, config.metrics_port, config.metrics_host)
        config.bound_metrics_port = exporter.port
    service = None
    try:
        with_service = use_state_service(config)
        master = spark_master(config)
        partitions = checkpoint_shuffle_partitions(config.checkpoint)
        if partitions is None and master is not None:
            partitions = state_tasks(config, master)
        keys = state_keys(config.checkpoint, fresh, config.buckets, partitions)
        if with_service:
            from elrwatch.streaming.state_service import StateService

            service = StateService(state_settings(config), partitions or 1, keys)
            service.start()  # before Spark: a restart's servers preload their buckets while the JVM starts
        return _run_query(
            config, store, aggregator, health, service, keys, began, stop_event, on_started, handle_signals
        )
    finally:
        if service is not None:
            service.stop()
        store.dispose()
        if exporter is not None:
            exporter.shutdown()


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


def state_settings(config: JobConfig) -> StateSettings:
    """The state stage's settings of a job."""
    return StateSettings(
        config.buckets,
        config.default_min_isr,
        config.state_cache,
        config.state_mode,
        config.snapshot_dir(),
        config.state_delta_max_records,
    )


def _run_query(
    config: JobConfig,
    store: Any,
    aggregator: Aggregator,
    health: Any,
    service: Any,
    keys: list[int] | None,
    began: float,
    stop_event: threading.Event | None,
    on_started: Any,
    handle_signals: bool,
) -> int:
    """Start Spark and the query, wait until stopped or drained; stop the query and Spark in any case."""
    from elrwatch.state import core_build
    from elrwatch.streaming.sources import SourceError

    log.info("starting Spark (store %s, checkpoint %s, core %s)", store.masked_url, config.checkpoint, core_build())
    archive = class_archive_for(config)
    if archive is not None:
        doing = "to write at the stop (after a batch)" if archive.writing else "mapping"
        log.info("JVM class archive: %s %s", doing, archive.path)
    spark = build_spark(config, archive)
    master = spark.sparkContext.master
    log.info("Spark ready after %.1fs (master %s); starting the query", time.monotonic() - began, master)
    stop_event = stop_event or threading.Event()
    if handle_signals:  # after Spark: SparkContext installs its own SIGINT handler
        install_signal_handlers(stop_event)
    query = None
    try:
        try:
            client = service.client() if service is not None else None
            query = build_query(spark, config, Sink(store, aggregator, health), client, keys)
        except SourceError as exc:
            raise JobError(str(exc)) from None
        health.up = 1
        log.info(
            "elrwatch stream started after %.1fs (the first batch follows): %s",
            time.monotonic() - began,
            dict(options_summary(config)),
        )
        if on_started is not None:
            on_started(query)
        from pyspark.errors import StreamingQueryException

        warmer = None
        if config.keep_workers_warm and not config.available_now:
            from elrwatch.streaming.warm import SOURCE_MODULES, STATE_MODULES, WorkerWarmer

            pools = {"source": ({}, SOURCE_MODULES), "state": ({STATE_POOL_ENV: "state"}, STATE_MODULES)}
            warmer = WorkerWarmer(spark, pools)

        try:
            while query.isActive and not stop_event.is_set():
                query.awaitTermination(0.5)
                if service is not None:
                    service.check()
                # Polled, not a StreamingQueryListener: PySpark converts each listener event field by field over
                # py4j (~60 ms of driver CPU per batch, measured); lastProgress is one call returning JSON.
                health.progress_of(query)
                if warmer is not None:
                    warmer.tick(health.batches)
        except KeyboardInterrupt:
            stop_event.set()
        except StreamingQueryException as exc:
            raise JobError(_one_line(str(exc))) from None
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
        if query is not None and query.isActive:
            query.stop()
        jvm = launched_jvm()
        spark.stop()
        if archive is not None:
            archive.finish(jvm, write=health.batches > 0)


def _one_line(message: str) -> str:
    """The most useful line of a (Python/Java) error: an elrwatch SourceError if present."""
    for marker in ("SourceError:", "SnapshotError:"):
        for line in message.splitlines():
            if marker in line:
                return line.split(marker, 1)[1].strip()
    for line in message.splitlines():
        if line.strip():
            return line.strip()[:500]
    return message[:500]


STOP_GRACE_S = 20.0  # within Kubernetes' default 30 s termination grace period


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


def options_summary(config: JobConfig) -> Mapping[str, Any]:
    """The configuration without secrets (for the startup log line)."""
    skip = {"ssl_password_file", "sasl_password_file", "store_password_file"}
    data = {k: v for k, v in config.__dict__.items() if k not in skip}
    data["store"] = _mask(config.store)
    with contextlib.suppress(ValueError):
        data["state_dir"] = config.snapshot_dir()
    return data


def _mask(url: str) -> str:
    try:
        from elrwatch.store import mask_url

        return mask_url(url)
    except Exception:
        return "<store url>"


__all__ = [
    "Aggregator",
    "BucketState",
    "JobConfig",
    "JobError",
    "Sink",
    "SnapshotDir",
    "SnapshotError",
    "build_query",
    "build_spark",
    "process_bucket",
    "route_batches",
    "run",
]
