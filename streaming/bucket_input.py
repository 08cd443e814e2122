"""A bucket's rows of one micro-batch, applied: routed rows → records and blocks of lines → `ClusterState.apply_batch`,
counted as the pipeline counts say (the bucket that reports a record counts it: its partition's owner, bucket 0
for the rest), and journalled (the state row's delta).

Rows routed by the Python sources carry an encoded record (`route.encode_record`) or what is not one (a bad line,
a skipped type: counted here). Rows routed in the JVM (``route.route_in_jvm``) carry the raw line: a stretch of
lines the JVM placed in this bucket (`route.KIND_RAW`, the event topic's partitions interleaved in metadata-offset
order) is parsed as columns (`line_blocks`, `state.partitions.columnar.parse`), its certain partition records of
this bucket given as `LineBlock`s (admitted as vectors); every other line is parsed here one by one
(`records.parse_line`). A line sent to every bucket (`route.KIND_RAW_BROADCAST`) is applied by each bucket only as
far as it owns it, and what is not a record is reported by bucket 0; a line placed here (by its routing header or
by the JVM's read of its JSON) that the core's parse would place elsewhere, or in every bucket, is quarantined as
a ``conflict`` and applied nowhere, never dropped silently.

No Spark import.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from elrwatch.state.outcome import Outcome
from elrwatch.state.partitions.columnar.lines import LineBlock, stretches
from elrwatch.state.partitions.columnar.parse import parse_partition_lines
from elrwatch.state.record_types import PARTITION_ROUTED
from elrwatch.state.records import PARTITION_CHANGE_RECORD, PARTITION_RECORD, Ignored, Record, RecordError, parse_line
from elrwatch.state.routing import ALL_BUCKETS, bucket_of, reporter, targets
from elrwatch.streaming.route import (
    KIND_ERROR,
    KIND_RAW,
    KIND_RAW_BROADCAST,
    KIND_RECORD,
    KIND_SKIPPED,
    decode_record,
    encode_record,
)
from elrwatch.streaming.snapshots import CHUNK

if TYPE_CHECKING:
    from elrwatch.state.gauges import PipelineCounts
    from elrwatch.streaming.snapshots import BucketState

#: A stretch of JVM-placed lines shorter than this is parsed line by line (Arrow's reader costs ~0.1 ms a call).
MIN_BLOCK = 32
#: Lines parsed as columns at once: the parse's byte-wise vectors take ≈ 3 bytes a byte of text for a moment
#: (≈ 0.25 GB for a 1M load's 250k-line stretch of ≈ 82 MB); 32k lines take ≈ 30 MB.
MAX_STRETCH = 1 << 15

#: One routed row as the state stage applies it: (kind, source, seq, payload); ``route.ROUTED_SCHEMA``.
Row = tuple[int, str, int, bytes | None]


class OrderedRows:
    """A bucket's rows in apply order as columns (`bucket.ordered_rows`); iterates as `Row` tuples."""

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


def apply_rows(bucket: int, buckets: int, rows: Iterable[Row], bs: BucketState) -> list[Any]:
    """Apply a batch's rows in order to the bucket's state, journal its records, count what this bucket reports;
    the quarantined records this bucket reports, in log order (as dicts)."""
    quarantined: list[Any] = []
    apply_items(_items(bucket, buckets, rows, bs.counts, quarantined), bs, quarantined)
    return quarantined


def _items(
    bucket: int, buckets: int, rows: Iterable[Row], counts: PipelineCounts, quarantined: list[Any]
) -> Iterator[Any]:
    """The records to apply, in log order: a stretch of lines the JVM placed here as `LineBlock`s of its certain
    partition records of this bucket (`line_blocks`), every other row through `_records`."""
    cols = rows if isinstance(rows, OrderedRows) else OrderedRows.of(rows)
    if not len(cols):
        return
    placed = cols.kinds == KIND_RAW
    for lo, hi in stretches(placed):
        if not placed[lo] or hi - lo < MIN_BLOCK:
            yield from _records(bucket, buckets, cols.slice(lo, hi), counts, quarantined)
            continue
        for start in range(lo, hi, MAX_STRETCH):  # bounded: a load's stretch is 250k lines
            end = min(hi, start + MAX_STRETCH)
            lines = cols.recs[start:end]
            if None in lines:  # a record without a value
                lines = [rec or b"" for rec in lines]
            blocks = line_blocks(cols.srcs[start:end], cols.seqs[start:end], lines, bucket, buckets)
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
    and quarantined here. Every partition record it gives is this bucket's or partition 0's."""
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
            if owner != bucket and (owner != ALL_BUCKETS or kind == KIND_RAW):
                if kind == KIND_RAW:  # placed here alone, its owner (or every other bucket) never sees it: loudly
                    report_error(_conflict(record, rec, bucket, owner))
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


def _conflict(record: Record, line: bytes | None, bucket: int, owner: int) -> RecordError:
    """The quarantined record of a line placed in ``bucket`` alone (`KIND_RAW`: by its routing header, or by the
    JVM's read of its JSON) that the core's parse gives to ``owner`` (a bucket, or `ALL_BUCKETS`). It is applied
    nowhere: the bucket that got it does not own it, and its owner never sees it."""
    where = "every bucket" if owner == ALL_BUCKETS else f"bucket {owner}"
    message = (
        f"routed to bucket {bucket} alone, owned by {where}: the routing (a wrong routing header, or the JVM's "
        "read of the line) and the core's parse of this line disagree; not applied"
    )
    raw = (line or b"").decode("utf-8", "replace")
    return RecordError(record.position, "conflict", "topicId", message, raw, record.type)


def line_blocks(
    sources: list[str], seqs: list[int], lines: list[bytes], bucket: int, buckets: int
) -> list[tuple[int, int, LineBlock | None]]:
    """A stretch of lines (in log order; ``sources`` and ``seqs``: one per line) as (start, end, block): a
    `LineBlock` for each run of certain partition-record lines of this bucket's partitions other than 0, None for
    the lines between (parsed one by one: `_records`)."""
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


def apply_items(items: Iterator[Any], bs: BucketState, quarantined: list[Any]) -> None:
    """Apply ``items`` (in log order, this bucket's or partition 0's: `_items`): (encoded, record, whether this
    bucket reports it), or a `LineBlock` of lines this bucket reports, with ``apply_batch``: journal them (a
    block's lines raw) and count what this bucket reports. ``quarantined`` (appended to while ``items`` is
    consumed) gets each reported quarantined record in its place in the log order."""
    cluster = bs.cluster
    counts = bs.counts
    journal = bs.journal.append
    pending: list[Any] = []
    slots: list[int] = []  # per pending item: its place in ``quarantined`` when it reports, else -1
    size = 0

    def flush() -> None:
        outcomes, errors = cluster.apply_batch(pending, owned=True)
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

    for item in items:
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
    cluster.drain_quarantined()  # reported above, in the payload
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
