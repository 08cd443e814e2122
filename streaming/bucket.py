"""The state stage: apply one micro-batch's rows to a bucket (load its state, apply, save it, emit its output).

Each bucket holds a whole ``ClusterState(bucket=(i, n))`` with the columnar store. The rows are applied per source
in (source, seq) order, the sources merged by metadata offset (`ordered_rows`); the core's positions skip anything
already applied (re-run batch, restart, duplicates in the topic). Pipeline counts (events by type, duplicates,
quarantine, ...) are kept in the same state, by the bucket that reports the record (its partition's owner; bucket
0 for broadcasts), so they are exactly-once too (`bucket_input`). The bucket emits one payload (`bucket_payload`):
changed partitions as Arrow rows (their stored form, `report.stored_partition`'s), removed partitions, status
transitions, quarantined records, violations of the changed partitions, topic documents whose owned partition count
changed, and its gauge contributions and counts (absolute values). With the job's rows directory, the store lists
go to a rows file named by the bucket's new state token (`payload.write_rows_file`) and Spark's output carries only
the rest (the head).

`run_bucket` runs in a Spark Python worker (`make_state_function`). No Spark import.
"""

from __future__ import annotations

import heapq
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from elrwatch.state import report
from elrwatch.state.gauges import encode_gauges
from elrwatch.state.partitions.columnar import output
from elrwatch.streaming.bucket_input import OrderedRows, Row, apply_rows
from elrwatch.streaming.config import StateSettings
from elrwatch.streaming.memory import gc_paused, keep_out_of_gc, trim_after_big_batch
from elrwatch.streaming.payload import encode_payload, shared_parts, write_rows_file
from elrwatch.streaming.snapshots import BucketState, SnapshotDir

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


def _load_bucket(
    bucket: int,
    buckets: int,
    row: tuple[str, bytes] | None,
    default_min_isr: int | None,
    use_cache: bool,
    snapshots: SnapshotDir | None,
    cache: dict[int, tuple[str, BucketState]],
) -> tuple[BucketState, str]:
    """(the bucket's state, how it was loaded: "hit" from this process's cache, "catch-up" of a stale cached
    state, "miss": from the row alone). ``row``: the (token, blob) of the bucket's Spark state, None if none."""
    if row is not None:
        token, blob = row
        cached = cache.pop(bucket, None) if use_cache else None
        if cached is not None and cached[0] == token:
            return cached[1], "hit"
        stale = cached[1] if cached is not None else None
        del cached
        with gc_paused():  # a load makes many objects, none in cycles
            bs = BucketState.from_row(blob, snapshots, bucket, buckets, stale, token)
        keep_out_of_gc()  # long-lived
        return bs, "catch-up" if bs.caught_up else "miss"
    cache.pop(bucket, None)
    return BucketState.new(bucket, buckets, default_min_isr), "miss"


def ordered_rows(pdf: Any) -> OrderedRows:
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


def bucket_payload(bucket: int, bs: BucketState, quarantined: list[Any]) -> dict[str, Any]:
    """The bucket's output after a batch: what changed since the last drain (partition rows, removals,
    transitions, violations, topic documents whose owned partition count changed), its gauges and counts; bucket
    0 adds the shared gauges, the changed brokers and the cluster document."""
    cluster = bs.cluster
    store = cluster.partitions
    own = store.violations.of

    def kinds(topic_id: str, partition_id: int) -> list[str]:
        return [v.kind for v in own(topic_id, partition_id)]

    audited = bool(store.violations.by_partition)  # no partition breaks an invariant (the usual case): no lookups
    out = output.drain(store, kinds if audited else None)  # type: ignore[arg-type]
    violations = []
    if audited and out.partitions is not None:
        changed = out.partitions
        for topic_id, pid, name in zip(
            changed.column("topicId").to_pylist(),
            changed.column("partitionId").to_pylist(),
            changed.column("topic").to_pylist(),
            strict=True,
        ):
            for v in own(topic_id, pid):
                violations.append(report.violation_doc(name, topic_id, pid, v))
    result: dict[str, Any] = {
        "bucket": bucket,
        "partitions": out.partitions,
        "removed": out.removed,
        "transitions": out.transitions,  # an Arrow table (or None): the rows file keeps it as one
        "quarantined": quarantined,
        "violations": violations,
        "topics": output.topic_documents(store, out, bs.emitted_topic_counts),  # type: ignore[arg-type]
        "removedTopics": out.removed_topics,
        "gauges": encode_gauges(store.gauges()),
        "counts": bs.counts.to_payload(),
    }
    if bucket == 0:
        result.update(shared_parts(cluster, out.brokers))
    return result


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
        bucket, settings.buckets, row, settings.default_min_isr, settings.use_cache, snapshots, cache
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
    bs.must_snapshot = True  # its snapshot and delta no longer say what it holds: a snapshot-mode save starts anew
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

    def update(key: tuple, pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        group_key = int(key[0])
        bucket = bucket_of_key[group_key] if bucket_of_key is not None else group_key
        row = (state.get[0], bytes(state.get[1])) if state.exists else None
        frames = [pdf for pdf in pdfs if len(pdf)]
        pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True) if frames else None
        del frames
        rows = ordered_rows(pdf) if pdf is not None else iter(())
        n_rows = len(pdf) if pdf is not None else 0
        del pdf
        token, blob, bodies = run_bucket(bucket, settings, row, rows, n_rows)
        state.update((token, blob))
        yield pd.DataFrame({"bucket": [bucket] * len(bodies), "payload": bodies})

    return update
