"""The state stage with the columnar engine (``--state-engine columnar``, the default): a bucket holds an
`AuditedColumnarState` instead of a ``ClusterState``.

`apply_records` applies the records `bucket.apply_rows` gathers (same parsing, ownership and conflict rules) with
``apply_batch``, in log order, and counts the pipeline counts from the outcomes with the same reporting rule;
`payload` builds the same payload as `bucket.bucket_payload` from `columnar_output`. `ColumnarBucketState` keeps
the engine between batches in snapshot mode: an Arrow IPC snapshot (`columnar_snapshot`, memory-mapped on load)
named by the state token in the `SnapshotDir`, plus the delta of records applied since, in the state row. Blob
mode is refused (it keeps the object engine, ``--state-engine objects``).

No Spark import.
"""

from __future__ import annotations

import marshal
import os
import zlib
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from elrwatch.state import columnar_output, columnar_snapshot, report
from elrwatch.state.cluster import Outcome
from elrwatch.state.columnar_audit import AuditedColumnarState
from elrwatch.state.columnar_lines import LineBlock, line_record
from elrwatch.state.gauges import PipelineCounts, encode_gauges
from elrwatch.state.partition_lines import parse_partition_lines
from elrwatch.state.records import PARTITION_CHANGE_RECORD, PARTITION_RECORD
from elrwatch.state.routing import bucket_of
from elrwatch.streaming.config import BLOB_REFUSED
from elrwatch.streaming.payload import shared_parts
from elrwatch.streaming.route import decode_record
from elrwatch.streaming.snapshots import BucketState, SnapshotDir, SnapshotError

#: A columnar state row starts with this byte (an object engine's snapshot row with ``S``, a blob otherwise).
ROW_TAG = b"C"
#: Records per ``apply_batch`` call (log order kept across calls): bounds the per-call lists.
CHUNK = 1 << 18


class ColumnarBucketState(BucketState):
    """A bucket's `AuditedColumnarState` (in ``cluster``), its counts and emitted topic counts (snapshot mode)."""

    __slots__ = ()
    ROW_TAG = ROW_TAG
    #: A 250k-partition bucket's Arrow snapshot takes ~0.1 s to write and 0.04 s to load, its delta ~8 µs a
    #: record to replay: past 20k records, the next quiet batch snapshots (a load then takes ≤ ~0.2 s).
    QUIET_DELTA = 20_000

    def to_blob(self) -> bytes:
        raise ValueError(BLOB_REFUSED)

    def _write_snapshot(self, snapshots: SnapshotDir, name: str) -> None:
        """An Arrow IPC snapshot (`columnar_snapshot.save`), memory-mapped when loaded."""
        os.makedirs(snapshots.path, exist_ok=True)
        columnar_snapshot.save(self.cluster, os.path.join(snapshots.path, name))

    def _default_min_isr(self) -> int:
        return self.cluster.core.default_min_isr

    @classmethod
    def new(cls, bucket: int, buckets: int, default_min_isr: int) -> ColumnarBucketState:
        """An empty bucket."""
        return cls(
            AuditedColumnarState(default_min_isr=default_min_isr, bucket=(bucket, buckets)), PipelineCounts(), {}
        )

    @classmethod
    def _from_other_row(cls, row: bytes, bucket: int) -> BucketState:
        raise SnapshotError(
            f"bucket {bucket}: the checkpoint's state was written by --state-engine objects, not columnar: "
            "run it with --state-engine objects"
        )

    @staticmethod
    def _empty_state(default_min_isr: int, bucket: int, buckets: int) -> Any:
        return AuditedColumnarState(default_min_isr=default_min_isr, bucket=(bucket, buckets))

    @staticmethod
    def _read_snapshot(snapshots: SnapshotDir, bucket: int, name: str) -> Any:
        """The Arrow snapshot, memory-mapped (`columnar_snapshot.load`), or a one-line SnapshotError."""
        path = snapshots.existing(bucket, name)
        try:
            return columnar_snapshot.load(path, AuditedColumnarState)
        except columnar_snapshot.SnapshotError as exc:
            raise SnapshotError(f"bucket {bucket}: {exc}") from None

    @staticmethod
    def _replay(cluster: Any, chunks: list[bytes]) -> None:
        """Apply delta chunks with ``apply_batch`` (bounded lists) and forget what they changed."""
        entries: list[Any] = []
        for chunk in chunks:
            entries.extend(marshal.loads(zlib.decompress(chunk)))
            if len(entries) >= CHUNK:
                cluster.apply_batch(journal_items(entries), owned=True)  # journalled by `apply_records`: owned
                entries = []
        if entries:
            cluster.apply_batch(journal_items(entries), owned=True)
        cluster.forget_changes()
        cluster.quarantined = []


#: A stretch of JVM-placed lines shorter than this is parsed line by line (Arrow's reader costs ~0.1 ms a call).
MIN_BLOCK = 32
#: Lines parsed as columns at once: the parse's byte-wise vectors take ≈ 3 bytes a byte of text for a moment
#: (≈ 0.25 GB for a 1M load's 250k-line stretch of ≈ 82 MB); 32k lines take ≈ 30 MB.
MAX_STRETCH = 1 << 15


def line_blocks(
    sources: list[str], seqs: list[int], lines: list[bytes], bucket: int, buckets: int
) -> list[tuple[int, int, LineBlock | None]]:
    """A stretch of lines (in log order; ``sources`` and ``seqs``: one per line) as (start, end, block): a
    `LineBlock` for each run of certain partition-record lines (`partition_lines`) of this bucket's partitions other
    than 0, None for the lines between (parsed one by one: `bucket._records`)."""
    parsed = parse_partition_lines(lines)
    certain = parsed.certain
    if certain.any():
        pids = parsed.column("partitionId").fill_null(0).to_numpy(zero_copy_only=False)
        topics = parsed.column("topicId").fill_null("").to_pylist()
        for i in np.flatnonzero(certain & (pids != 0)).tolist():
            if bucket_of(topics[i], int(pids[i]), buckets) != bucket:  # the JVM's and this parse disagree
                certain[i] = False
        certain &= pids != 0
    out: list[tuple[int, int, LineBlock | None]] = []
    seq_array = np.array(seqs, dtype=np.int64)
    for lo, hi in stretches(certain):
        if certain[lo]:
            picked = np.arange(lo, hi, dtype=np.int64)
            out.append((lo, hi, LineBlock(parsed, picked, lines[lo:hi], sources[lo:hi], seq_array[lo:hi])))
        else:
            out.append((lo, hi, None))
    return out


def journal_items(entries: list[Any]) -> list[Any]:
    """Journal entries as `apply_batch` items: an encoded record decoded, a run of raw lines (``(source, seq,
    line)``, journalled from `LineBlock`s) as blocks again."""
    items: list[Any] = []
    i, n = 0, len(entries)
    while i < n:
        if entries[i].__class__ is not tuple:
            items.append(decode_record(entries[i]))
            i += 1
            continue
        j = i + 1
        while j < n and entries[j].__class__ is tuple:
            j += 1
        sources = [source for source, _, _ in entries[i:j]]
        seqs = [seq for _, seq, _ in entries[i:j]]
        lines = [line for _, _, line in entries[i:j]]
        parsed = parse_partition_lines(lines)
        blocks = parsed.certain & (parsed.column("partitionId").fill_null(0).to_numpy(zero_copy_only=False) != 0)
        for lo, hi in stretches(blocks):
            if blocks[lo]:
                picked = np.arange(lo, hi, dtype=np.int64)
                seq_array = np.array(seqs[lo:hi], dtype=np.int64)
                items.append(LineBlock(parsed, picked, lines[lo:hi], sources[lo:hi], seq_array))
            else:
                items.extend(line_record(lines[k], sources[k], seqs[k]) for k in range(lo, hi))
        i = j
    return items


def stretches(flags: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of the runs of equal values of ``flags``."""
    edges = np.flatnonzero(np.diff(flags.astype(np.int8))) + 1
    return list(pairwise([0, *edges.tolist(), len(flags)]))


def apply_records(records: Iterator[Any], bs: BucketState, quarantined: list[Any]) -> None:
    """Apply ``records`` (in log order, this bucket's or partition 0's: `bucket._items`): (encoded, record, whether
    this bucket reports it), or a `LineBlock` of lines this bucket reports, with ``apply_batch``: journal them
    (a block's lines raw) and count what this bucket reports. ``quarantined`` (appended to while ``records`` is
    consumed) gets each reported quarantined record in its place in the log order."""
    engine: AuditedColumnarState = bs.cluster
    counts = bs.counts
    journal = bs.journal.append
    pending: list[Any] = []
    slots: list[int] = []  # per pending item: its place in ``quarantined`` when it reports, else -1
    size = 0

    def flush() -> None:
        outcomes, errors = engine.apply_batch(pending, owned=True)
        k = 0
        for item, slot in zip(pending, slots, strict=True):
            if item.__class__ is LineBlock:
                n = len(item)
                outs = outcomes[k : k + n]
                counts.applied += outs.count(Outcome.APPLIED)
                counts.duplicates += outs.count(Outcome.DUPLICATE)
                found = []
                for j in [j for j, o in enumerate(outs) if o is Outcome.QUARANTINED]:
                    error = errors[k + j]
                    if error is not None:
                        if not error.raw:  # as the per-line path: the record's envelope
                            error.raw = orjson.dumps(item.record(j).envelope()).decode()
                        counts.quarantined_by_reason[error.reason] += 1
                        found.append(error.to_dict())
                quarantined[slot] = found or None
                k += n
                continue
            outcome, error = outcomes[k], errors[k]
            k += 1
            if slot < 0:
                continue
            if outcome is Outcome.APPLIED:
                counts.applied += 1
            elif outcome is Outcome.DUPLICATE:
                counts.duplicates += 1
            elif outcome is Outcome.QUARANTINED and error is not None:
                if not error.raw:
                    error.raw = orjson.dumps(item.envelope()).decode()
                counts.quarantined_by_reason[error.reason] += 1
                quarantined[slot] = error.to_dict()
        pending.clear()
        slots.clear()

    for item in records:
        if item.__class__ is LineBlock:
            names = item.source_names
            sources = [names[c] for c in item.source_codes.tolist()]
            bs.journal.extend(zip(sources, item.seqs.tolist(), item.lines, strict=True))
            pending.append(item)
            slots.append(len(quarantined))
            quarantined.append(None)
            size += len(item)
            _count_block(counts, item)
        else:
            rec, record, reports = item
            journal(rec)
            pending.append(record)
            size += 1
            if reports:
                counts.events_by_type[record.type] += 1
                if record.timestamp_ms is not None and (
                    counts.last_event_ms is None or record.timestamp_ms > counts.last_event_ms
                ):
                    counts.last_event_ms = record.timestamp_ms
                slots.append(len(quarantined))
                quarantined.append(None)
            else:
                slots.append(-1)
        if size >= CHUNK:
            flush()
            size = 0
    if pending:
        flush()
    engine.quarantined = []  # reported above, in the payload (the core's drain forgets its own too)
    flat: list[Any] = []
    for q in quarantined:
        if q.__class__ is list:
            flat.extend(q)
        elif q is not None:
            flat.append(q)
    quarantined[:] = flat


def _count_block(counts: PipelineCounts, block: LineBlock) -> None:
    """A block's lines in the pipeline counts: events by type, the latest event time."""
    prs = int(block.is_pr.sum())
    if prs:
        counts.events_by_type[PARTITION_RECORD] += prs
    if len(block) - prs:
        counts.events_by_type[PARTITION_CHANGE_RECORD] += len(block) - prs
    stamps = block.parsed.column("timestamp").take(pa.array(block.picked))
    latest = pc.max(stamps).as_py()
    if latest is not None and (counts.last_event_ms is None or latest > counts.last_event_ms):
        counts.last_event_ms = latest


def payload(bucket: int, bs: BucketState, quarantined: list[Any]) -> dict[str, Any]:
    """`bucket.bucket_payload` of a columnar bucket, from `columnar_output`."""
    engine: AuditedColumnarState = bs.cluster
    own = engine.partition_violations

    def kinds(topic_id: str, partition_id: int) -> list[str]:
        return [v.kind for v in own(topic_id, partition_id)]

    audited = bool(engine.violations)  # no partition breaks an invariant (the usual case): nothing to look up
    out = columnar_output.drain(engine, kinds if audited else None)
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
    topics = columnar_output.topic_documents(engine, out, bs.emitted_topic_counts)
    result: dict[str, Any] = {
        "bucket": bucket,
        "partitions": out.partitions,
        "removed": out.removed,
        "transitions": out.transitions,  # an Arrow table (or None): the rows file keeps it as one
        "quarantined": quarantined,
        "violations": violations,
        "topics": topics,
        "removedTopics": out.removed_topics,
        "gauges": encode_gauges(columnar_output.partition_gauges(engine)),
        "counts": bs.counts.to_payload(),
    }
    if bucket == 0:
        result.update(shared_parts(engine.core, out.brokers))
    return result
