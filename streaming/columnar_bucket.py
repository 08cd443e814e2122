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
from typing import Any

import orjson

from elrwatch.state import columnar_output, columnar_snapshot, report
from elrwatch.state.cluster import Outcome
from elrwatch.state.columnar_audit import AuditedColumnarState
from elrwatch.state.gauges import PipelineCounts, encode_gauges
from elrwatch.state.records import Record
from elrwatch.streaming.payload import shared_parts
from elrwatch.streaming.route import decode_record
from elrwatch.streaming.snapshots import BucketState, SnapshotDir, SnapshotError

ENGINES = ("objects", "columnar")
DEFAULT_ENGINE = "columnar"
#: A columnar state row starts with this byte (an object engine's snapshot row with ``S``, a blob otherwise).
ROW_TAG = b"C"
BLOB_REFUSED = "--state-engine columnar needs --state-mode snapshot: with --state-mode blob add --state-engine objects"
#: Records per ``apply_batch`` call (log order kept across calls): bounds the per-call lists.
CHUNK = 1 << 18


def check_engine(engine: str, state_mode: str) -> None:
    """A one-line ValueError for an unknown engine or the columnar engine in blob mode."""
    if engine not in ENGINES:
        raise ValueError(f"--state-engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "columnar" and state_mode != "snapshot":
        raise ValueError(BLOB_REFUSED)


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
        records: list[Record] = []
        for chunk in chunks:
            records.extend(decode_record(rec) for rec in marshal.loads(zlib.decompress(chunk)))
            if len(records) >= CHUNK:
                cluster.apply_batch(records, owned=True)  # journalled by `apply_records`: owned
                records = []
        if records:
            cluster.apply_batch(records, owned=True)
        cluster.forget_changes()
        cluster.quarantined = []


def apply_records(records: Iterator[tuple[bytes, Record, bool]], bs: BucketState, quarantined: list[Any]) -> None:
    """Apply ``records`` ((encoded, record, whether this bucket reports it), in log order, this bucket's or
    partition 0's: `bucket._records`) with ``apply_batch``: journal them and count what this bucket reports.
    ``quarantined`` (appended to while ``records`` is consumed) gets each reported quarantined record in its place
    in the log order."""
    engine: AuditedColumnarState = bs.cluster
    counts = bs.counts
    journal = bs.journal.append
    pending: list[Record] = []
    slots: list[int] = []  # per pending record: its place in ``quarantined`` when it reports, else -1

    def flush() -> None:
        outcomes, errors = engine.apply_batch(pending, owned=True)
        for record, slot, outcome, error in zip(pending, slots, outcomes, errors, strict=True):
            if slot < 0:
                continue
            if outcome is Outcome.APPLIED:
                counts.applied += 1
            elif outcome is Outcome.DUPLICATE:
                counts.duplicates += 1
            elif outcome is Outcome.QUARANTINED and error is not None:
                if not error.raw:
                    error.raw = orjson.dumps(record.envelope()).decode()
                counts.quarantined_by_reason[error.reason] += 1
                quarantined[slot] = error.to_dict()
        pending.clear()
        slots.clear()

    for rec, record, reports in records:
        journal(rec)
        pending.append(record)
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
        if len(pending) >= CHUNK:
            flush()
    if pending:
        flush()
    engine.quarantined = []  # reported above, in the payload (the core's drain forgets its own too)
    quarantined[:] = [q for q in quarantined if q is not None]


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
