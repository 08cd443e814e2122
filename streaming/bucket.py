"""The state stage: apply one micro-batch's rows to a bucket (load its state, apply, save it, emit its output).

Each bucket holds a whole ``ClusterState(bucket=(i, n))``. The rows are applied per source in (source, seq)
order, the sources merged by metadata offset; the core's positions skip anything already applied (re-run batch,
restart, duplicates in the topic). Pipeline counts (events by type, duplicates, quarantine, ...) are kept in the
same state, by the bucket that reports the record (its partition's owner; bucket 0 for broadcasts), so they are
exactly-once too. The bucket emits one payload: changed partitions as domain rows (``state.partition_row``),
removed partitions, status transitions, quarantined records, violations of the changed partitions, topic
documents whose owned partition count changed, and its gauge contributions and counts (absolute values). With the
job's rows directory, the store lists go to a rows file named by the bucket's new state token
(`payload.write_rows_file`) and Spark's output carries only the rest (the head).

`run_bucket` runs in a Spark Python worker (`make_state_function`). No Spark import.
"""

from __future__ import annotations

import heapq
import os
import pickle
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import orjson
import pandas as pd

from elrwatch.state import report
from elrwatch.state.cluster import ClusterState, Outcome
from elrwatch.state.gauges import PipelineCounts, encode_gauges, partition_gauges
from elrwatch.state.partition_row import partition_row
from elrwatch.state.record_types import PARTITION_ROUTED
from elrwatch.state.records import Ignored, Record, RecordError, parse_line
from elrwatch.state.routing import ALL_BUCKETS, reporter, targets
from elrwatch.streaming import columnar_bucket
from elrwatch.streaming.columnar_bucket import ROW_TAG, ColumnarBucketState
from elrwatch.streaming.config import DEFAULT_ENGINE, StateSettings, check_engine
from elrwatch.streaming.memory import gc_paused, keep_out_of_gc, trim_after_big_batch
from elrwatch.streaming.payload import encode_payload, shared_parts, write_rows_file
from elrwatch.streaming.route import (
    KIND_ERROR,
    KIND_RAW,
    KIND_RAW_BROADCAST,
    KIND_RECORD,
    KIND_SKIPPED,
    decode_record,
    encode_record,
)
from elrwatch.streaming.snapshots import BucketState, SnapshotDir, SnapshotError

#: The environment variable that puts the state function's Python workers in a pool of their own (see
#: `query.build_query`); the warm-ups (``warm.py``) keep that pool alive too.
STATE_POOL_ENV = "ELRWATCH_PYTHON_POOL"


# Per Python worker: bucket → (token, BucketState), at most every bucket. Spark reuses Python workers, so the state
# a worker wrote last time is usually still in memory: when the state row's token matches, nothing is read or
# replayed (see build_query and state_tasks for how the job makes the same worker see the same buckets).
_CACHE: dict[int, tuple[str, BucketState]] = {}
#: The snapshot directory of the cached buckets (`on_idle` writes there).
_CACHE_SNAPSHOTS: list[SnapshotDir] = []


def on_idle() -> int:
    """Run by the warm-ups (`local.warm.warm_worker`) in a state worker while the job is idle: each cached bucket
    whose delta is long writes its state as a snapshot (`BucketState.compact`), so that a restart or a cache miss
    reads it instead of replaying the delta. The buckets compacted; never raises (the warm-up goes on)."""
    if not _CACHE_SNAPSHOTS:
        return 0
    done = 0
    for bucket, (token, bs) in list(_CACHE.items()):
        try:
            done += bs.compact(_CACHE_SNAPSHOTS[0], bucket, token)
        except Exception:  # a full disk, say: the next batch's own rules still snapshot
            continue
    return done


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


def load_row(
    blob: bytes,
    snapshots: SnapshotDir | None,
    bucket: int,
    buckets: int,
    engine: str = DEFAULT_ENGINE,
    stale: BucketState | None = None,
    token: str | None = None,
) -> BucketState:
    """The bucket's state from its state row (of ``token``) with ``engine`` (`BucketState.from_row` or the
    columnar one); the other engine's row is a one-line `SnapshotError`."""
    if engine == "columnar":
        return ColumnarBucketState.from_row(blob, snapshots, bucket, buckets, stale, token)
    if blob[:1] == ROW_TAG:
        raise SnapshotError(
            f"bucket {bucket}: the checkpoint's state was written by --state-engine columnar, not objects: "
            "run it with --state-engine columnar"
        )
    with gc_paused():  # unpickling millions of objects would trigger many full collections for nothing
        bs = BucketState.from_row(blob, snapshots, bucket, buckets, stale, token)
    keep_out_of_gc()  # long-lived
    return bs


def index_kept_state(bs: BucketState) -> None:
    """Prepare a state kept for the next batches: its first broker change must not scan it all (object core)."""
    if not isinstance(bs, ColumnarBucketState):
        bs.cluster.index_brokers()


def _load_bucket(
    bucket: int,
    buckets: int,
    row: tuple[str, bytes] | None,
    default_min_isr: int,
    use_cache: bool,
    snapshots: SnapshotDir | None,
    cache: dict[int, tuple[str, BucketState]],
    engine: str = DEFAULT_ENGINE,
) -> tuple[BucketState, str]:
    """(the bucket's state, how it was loaded: "hit" from this process's cache, "catch-up" of a stale cached
    state, "miss": from the row alone). ``row``: the (token, blob) of the bucket's Spark state, None if none."""
    columnar = engine == "columnar"
    if row is not None:
        token, blob = row
        cached = cache.pop(bucket, None) if use_cache else None
        if cached is not None and cached[0] == token:
            return cached[1], "hit"
        stale = cached[1] if cached is not None else None
        del cached
        bs = load_row(blob, snapshots, bucket, buckets, engine, stale, token)
        return bs, "catch-up" if bs.caught_up else "miss"
    cache.pop(bucket, None)
    if columnar:
        return ColumnarBucketState.new(bucket, buckets, default_min_isr), "miss"
    cluster = ClusterState(default_min_isr=default_min_isr, bucket=(bucket, buckets))
    return BucketState(cluster, PipelineCounts(), {}), "miss"


#: One routed row as the state stage applies it: (kind, source, seq, payload); ``route.ROUTED_SCHEMA``.
Row = tuple[int, str, int, bytes | None]


class OrderedRows:
    """A bucket's rows in apply order as columns (`_ordered_rows`); iterates as `Row` tuples."""

    __slots__ = ("kinds", "recs", "seqs", "srcs")

    def __init__(self, kinds: np.ndarray, srcs: list[str], seqs: list[int], recs: list[bytes | None]) -> None:
        self.kinds, self.srcs, self.seqs, self.recs = kinds, srcs, seqs, recs

    @classmethod
    def of(cls, rows: Iterable[Row]) -> OrderedRows:
        """Rows given as tuples, as columns."""
        listed = list(rows)
        if not listed:
            return cls(np.zeros(0, dtype=np.int8), [], [], [])
        kinds, srcs, seqs, recs = (list(column) for column in zip(*listed, strict=True))
        return cls(np.array(kinds, dtype=np.int8), srcs, seqs, recs)

    def __len__(self) -> int:
        return len(self.srcs)

    def __iter__(self) -> Iterator[Row]:
        return zip(self.kinds.tolist(), self.srcs, self.seqs, self.recs, strict=True)

    def slice(self, lo: int, hi: int) -> Iterator[Row]:
        """Rows ``lo`` .. ``hi`` as tuples."""
        return zip(self.kinds[lo:hi].tolist(), self.srcs[lo:hi], self.seqs[lo:hi], self.recs[lo:hi], strict=True)


def _ordered_rows(pdf: Any) -> OrderedRows:
    """Rows per source in seq order; sources merged by metadata offset (best global order available).

    Vectors when each source's metadata offsets rise with its sequence (the normal case): a stable sort by offset
    of the rows sorted by (source, seq) is then exactly the merge of the sources. Otherwise the merge itself."""
    if len(pdf) == 0:
        return OrderedRows.of(())
    codes, _ = pd.factorize(pdf["src"].to_numpy(), sort=True)
    order = np.lexsort((pdf["seq"].to_numpy(), codes))  # stable: by source, then seq
    moffs = pdf["moff"].to_numpy()[order]
    if codes[order[0]] != codes[order[-1]]:  # several sources (sorted: first == last means one)
        in_source = codes[order][1:] == codes[order][:-1]
        if not (moffs[1:][in_source] >= moffs[:-1][in_source]).all():
            return OrderedRows.of(_merged_rows(pdf.iloc[order]))
        order = order[np.argsort(moffs, kind="stable")]
    return OrderedRows(
        pdf["kind"].to_numpy()[order].astype(np.int8),
        pdf["src"].to_numpy()[order].tolist(),
        pdf["seq"].to_numpy()[order].tolist(),
        pdf["rec"].to_numpy()[order].tolist(),
    )


def _merged_rows(pdf: Any) -> Iterator[Row]:
    """`_ordered_rows` of rows sorted by (source, seq) whose offsets fall somewhere within a source: each source's
    rows in seq order, the sources merged by offset as they come (`heapq.merge`)."""
    srcs = pdf["src"].to_numpy().tolist()
    rows = list(
        zip(
            pdf["moff"].to_numpy().tolist(),
            pdf["kind"].to_numpy().tolist(),
            srcs,
            pdf["seq"].to_numpy().tolist(),
            pdf["rec"].to_numpy().tolist(),
            strict=True,
        )
    )
    streams = []
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or srcs[i] != srcs[start]:
            streams.append(rows[start:i])
            start = i
    merged = heapq.merge(*streams, key=lambda row: row[0])
    return ((k, src, seq, r) for _, k, src, seq, r in merged)


def process_bucket(bucket: int, buckets: int, rows: Iterable[Row], bs: BucketState) -> dict[str, Any]:
    """Apply one micro-batch's rows to a bucket and return its output payload (plain JSON-able dict; the changed
    partitions as domain rows, ``state.partition_row``: no documents, the store rebuilds those on read)."""
    quarantined = apply_rows(bucket, buckets, rows, bs)
    return bucket_payload(bucket, bs, quarantined)


def apply_rows(bucket: int, buckets: int, rows: Iterable[Row], bs: BucketState) -> list[Any]:
    """Apply the rows in order to the bucket's state, journal its records, count what this bucket reports (its
    partitions' records; bucket 0: every other record, bad lines and skipped types); the quarantined records.

    Raw lines routed in the JVM (``route.route_in_jvm``) are parsed here. A line sent to every bucket
    (`KIND_RAW_BROADCAST`) is applied by each bucket only as far as it owns it (a partition record of another bucket
    is passed over), and what is not a record is reported by bucket 0; a line placed in this bucket (`KIND_RAW`) is
    reported here.
    """
    quarantined: list[dict[str, Any]] = []
    if isinstance(bs, ColumnarBucketState):
        columnar_bucket.apply_records(_items(bucket, buckets, rows, bs.counts, quarantined), bs, quarantined)
        return quarantined
    records = _records(bucket, buckets, rows, bs.counts, quarantined)
    cluster, counts = bs.cluster, bs.counts
    journal = bs.journal.append
    for rec, record, reports in records:
        journal(rec)
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
                    error.raw = orjson.dumps(record.envelope()).decode()
                counts.quarantined_by_reason[error.reason] += 1
                quarantined.append(error.to_dict())
    return quarantined


def _items(
    bucket: int, buckets: int, rows: Iterable[Row], counts: PipelineCounts, quarantined: list[Any]
) -> Iterator[Any]:
    """`_records` for the columnar engine: a stretch of lines the JVM placed here (`KIND_RAW`; the event topic's
    partitions interleaved in metadata-offset order) is parsed as columns (`columnar_bucket.line_blocks`), its
    certain partition records of this bucket given as `LineBlock`s; every other row goes through `_records`, in
    log order."""
    cols = rows if isinstance(rows, OrderedRows) else OrderedRows.of(rows)
    if not len(cols):
        return
    placed = cols.kinds == KIND_RAW
    for lo, hi in columnar_bucket.stretches(placed):
        if not placed[lo] or hi - lo < columnar_bucket.MIN_BLOCK:
            yield from _records(bucket, buckets, cols.slice(lo, hi), counts, quarantined)
            continue
        for start in range(lo, hi, columnar_bucket.MAX_STRETCH):  # bounded: a load's stretch is 250k lines
            end = min(hi, start + columnar_bucket.MAX_STRETCH)
            lines = cols.recs[start:end]
            if None in lines:  # a record without a value
                lines = [rec or b"" for rec in lines]
            blocks = columnar_bucket.line_blocks(cols.srcs[start:end], cols.seqs[start:end], lines, bucket, buckets)
            for block_lo, block_hi, block in blocks:
                if block is None:
                    yield from _records(
                        bucket, buckets, cols.slice(start + block_lo, start + block_hi), counts, quarantined
                    )
                else:
                    yield block


def _records(
    bucket: int, buckets: int, rows: Iterable[Row], counts: PipelineCounts, quarantined: list[Any]
) -> Iterator[tuple[bytes, Record, bool]]:
    """The records of ``rows`` this bucket applies, in order, as (encoded, record, whether this bucket reports it:
    `routing.reporter`); what is not one (bad lines, skipped types, errors, records of another bucket) is counted
    and quarantined here as `apply_rows` says. Every partition record it gives is this bucket's or partition 0's."""
    loads = pickle.loads

    def report_error(error: Any) -> None:
        counts.events_by_type[error.type or "invalid"] += 1
        counts.quarantined_by_reason[error.reason] += 1
        quarantined.append(error.to_dict())

    for kind, src, seq, rec in rows:
        if kind == KIND_RECORD:  # routed by the Python source to its `targets`
            record = decode_record(rec)
            reports = reporter(record.type, record.data, buckets) == bucket
        elif kind in (KIND_RAW, KIND_RAW_BROADCAST):
            parsed = parse_line(rec or b"", src, seq, f"{src}@{seq}")
            if parsed.__class__ is not Record:
                if kind == KIND_RAW or bucket == 0:
                    if isinstance(parsed, RecordError):
                        if not parsed.raw:
                            parsed.raw = (rec or b"").decode("utf-8", "replace")
                        report_error(parsed)
                    elif isinstance(parsed, Ignored):
                        counts.ignored_lines += 1
                    else:  # Skipped
                        counts.events_by_type[parsed.type] += 1
                        counts.skipped_by_type[parsed.type] += 1
                continue
            record = parsed
            owner = targets(record.type, record.data, buckets)
            if owner != ALL_BUCKETS and owner != bucket:
                if kind == KIND_RAW:  # the JVM placed it here, its owner never sees it: say so, loudly
                    message = (
                        f"routed to bucket {bucket}, owned by bucket {owner}: the JVM's and the core's parse "
                        "of this line disagree"
                    )
                    raw = (rec or b"").decode("utf-8", "replace")
                    error = RecordError(record.position, "conflict", "topicId", message, raw, record.type)
                    report_error(error)
                continue
            # the owner reports its partition's records; of the rest (every bucket's), bucket 0, or partition 0's owner
            reports = owner == bucket or (
                bucket == 0
                if record.type not in PARTITION_ROUTED
                else reporter(record.type, record.data, buckets) == bucket
            )
            rec = encode_record(record)
        elif kind == KIND_ERROR:
            report_error(loads(rec))
            continue
        elif kind == KIND_SKIPPED:
            type_name = rec.decode()
            counts.events_by_type[type_name] += 1
            counts.skipped_by_type[type_name] += 1
            continue
        else:
            counts.ignored_lines += 1
            continue
        yield rec, record, reports


def bucket_payload(bucket: int, bs: BucketState, quarantined: list[Any]) -> dict[str, Any]:
    """The bucket's output after a batch: what changed since the last drain (partition rows, removals,
    transitions, violations, topic documents whose owned partition count changed), its gauges and counts; bucket
    0 adds the shared gauges, the changed brokers and the cluster document."""
    if isinstance(bs, ColumnarBucketState):
        return columnar_bucket.payload(bucket, bs, quarantined)
    cluster = bs.cluster
    changes = cluster.drain_changes()
    rows_out = []
    violations = []
    stored_partition, min_isr_of = report.stored_partition, cluster.effective_min_isr
    for topic, partition in changes.partitions:
        stored = stored_partition(cluster, topic, partition)
        rows_out.append(partition_row(topic.name, partition, min_isr_of(topic), stored))
        for v in cluster.partition_violations(topic.topic_id, partition.partition_id):
            violations.append(report.violation_doc(topic.name, topic.topic_id, partition.partition_id, v))
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
        "counts": bs.counts.to_payload(),
    }
    if bucket == 0:
        payload.update(shared_parts(cluster, changes.brokers))
    return payload


def run_bucket(
    bucket: int,
    settings: StateSettings,
    row: tuple[str, bytes] | None,
    rows: Iterable[Row],
    n_rows: int,
    cache: dict[int, tuple[str, BucketState]] | None = None,
) -> tuple[str, bytes, list[bytes]]:
    """Apply one micro-batch's ordered rows to a bucket: (new token, new state row, output bodies).

    With ``settings.rows_dir`` the store lists go to the bucket's rows file of the new token (fsynced here,
    before the state row is returned) and the bodies are only the head (`payload.write_rows_file`). ``row`` is
    the bucket's committed (token, blob), None for a new bucket; ``cache`` the process's cached states (default:
    this worker's `_CACHE`). The caller stores (token, row) as the bucket's new Spark state.
    """
    cache = _CACHE if cache is None else cache
    snapshots = SnapshotDir(settings.state_dir) if settings.state_dir else None
    started = time.perf_counter()
    bs, how = _load_bucket(
        bucket, settings.buckets, row, settings.default_min_isr, settings.use_cache, snapshots, cache, settings.engine
    )
    loaded = time.perf_counter()
    with gc_paused():  # a storm's 25k documents per bucket allocate ~1M young objects, none in cycles
        payload = process_bucket(bucket, settings.buckets, rows, bs)
        del rows
        processed = time.perf_counter()
        token = uuid.uuid4().hex
        snapshot_before = bs.snapshot
        blob = save_bucket(bs, settings, snapshots, bucket, token, quiet_allowed=how == "hit")
        if settings.use_cache:
            _remember(bucket, token, bs, settings.buckets, cache)
            if snapshots is not None and cache is _CACHE:
                _CACHE_SNAPSHOTS[:] = [snapshots]
        saved = time.perf_counter()
        if settings.rows_dir:  # durable before the state row naming the token goes back to Spark
            write_rows_file(settings.rows_dir, payload, token)
        rows_written = time.perf_counter()
        payload["timing"] = {
            "load": round(loaded - started, 3),
            "cache": how,
            "process": round(processed - loaded, 3),
            "save": round(saved - processed, 3),
            "rows": round(rows_written - saved, 3),
            "snapshot": bs.snapshot != snapshot_before,
            "deltaRows": bs.delta_rows,
            "pid": os.getpid(),
        }
        bodies = encode_payload(payload)
        del payload
        if settings.use_cache:
            index_kept_state(bs)
    keep_out_of_gc(collect_first=True)  # the batch's cycles (young objects only: the state is frozen), then freeze
    trim_after_big_batch(n_rows, collect_first=False)
    return token, blob, bodies


def save_bucket(
    bs: BucketState,
    settings: StateSettings,
    snapshots: SnapshotDir | None,
    bucket: int,
    token: str,
    quiet_allowed: bool = True,
) -> bytes:
    """The bucket's new Spark state row: the delta (and a new snapshot when due) in snapshot mode, else the blob.
    ``quiet_allowed``: a quiet batch may write a snapshot (`BucketState.to_row`); False when this batch loaded the
    bucket (the first batch after a restart has paid for loads already)."""
    if settings.state_mode == "snapshot":
        assert snapshots is not None  # make_state_function checks it
        return bs.to_row(snapshots, bucket, token, settings.delta_max_records, quiet_allowed=quiet_allowed)
    bs.journal = []
    return bs.to_blob()


def make_state_function(
    settings: StateSettings, keys: list[int] | None = None
) -> Callable[[tuple, Iterator[Any], Any], Iterator[Any]]:
    """The applyInPandasWithState function (closure over the job's settings): `run_bucket` in the Spark Python
    worker, with the worker's cache (`_CACHE`).

    ``keys``: the group key of each bucket (`route.group_keys`); None: the bucket number is the key.
    """
    bucket_of_key = {key: bucket for bucket, key in enumerate(keys)} if keys is not None else None
    if settings.state_mode == "snapshot" and not settings.state_dir:
        raise ValueError("snapshot state mode needs a state directory")
    check_engine(settings.engine, settings.state_mode)

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
        del pdf
        token, blob, bodies = run_bucket(bucket, settings, row, rows, n_rows)
        state.update((token, blob))
        yield pd.DataFrame({"bucket": [bucket] * len(bodies), "payload": bodies})

    return update
