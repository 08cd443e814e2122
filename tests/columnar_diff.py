"""The differential harness of the batch engine (state/columnar.py) against the object core (`ClusterState.apply`).

`run_both` feeds both the same micro-batches of lines (each engine its own parse of them) and, after every batch,
compares field by field: each record's outcome and quarantine error, the bucket's whole output payload
(`streaming.bucket.bucket_payload`: changed rows in their stored form with violations, removals, transitions in
order with offsets and positions, topic documents, partition gauges; bucket 0's shared gauges, brokers and
cluster document), the shared gauges, and every persisted attribute of the state (partitions slot by slot,
counters, the recent-offsets ring, source positions). At the end, the whole report document.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from elrwatch.state import report
from elrwatch.state.cluster import PERSISTED_ATTRIBUTES, ClusterState, Outcome, Transition
from elrwatch.state.columnar import BatchEngine
from elrwatch.state.gauges import PipelineCounts, shared_gauges
from elrwatch.state.model import BrokerState, PartitionState, TopicState
from elrwatch.state.records import DumpReader, Record
from elrwatch.streaming.bucket import bucket_payload
from elrwatch.streaming.snapshots import BucketState

RING = frozenset({"recent_offsets", "recent_records"})
Line = str | bytes
Item = Line | tuple[str, int, Line]


class Parser:
    """Parses items in order as the replay reads them (envelopes or DumpLogSegments text), snapshot ends set.

    An item is a line (the run's source, the next line number) or ``(source, seq, line)``."""

    def __init__(self, source: str) -> None:
        self.reader = DumpReader()
        self.source = source
        self.seq = 0

    def records(self, items: Iterable[Item]) -> list[Record]:
        out: list[Record] = []
        for item in items:
            if isinstance(item, tuple):
                source, seq, line = item
            else:
                self.seq += 1
                source, seq, line = self.source, self.seq, item
            parsed = self.reader.parse(line, source, seq, f"{source}:{seq}")
            if isinstance(parsed, Record):
                if self.reader.snapshot_end is not None and parsed.snapshot_end is None:
                    parsed.snapshot_end = self.reader.snapshot_end
                out.append(parsed)
        return out


def normal(value: Any) -> Any:
    """A comparable plain form of a state value (slot objects and dataclasses as their field values)."""
    if isinstance(value, dict):
        return {normal(k): normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(normal(v) for v in value)
    if isinstance(value, set | frozenset):
        return sorted(normal(v) for v in value)
    if isinstance(value, Record):
        return ("Record", value.type, value.version, normal(value.data), value.source, value.seq,
                value.position, value.offset, value.timestamp_ms, value.origin, value.snapshot_end)
    if isinstance(value, PartitionState | BrokerState | TopicState | Transition):
        # their pickled form: the field values (the compiled classes have neither __slots__ nor dataclass fields)
        return (type(value).__name__, *(normal(v) for v in value.__getstate__()))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, *(normal(getattr(value, f.name)) for f in dataclasses.fields(value)))
    slots = getattr(type(value), "__slots__", None)
    if slots:
        return (type(value).__name__, *(normal(getattr(value, name, None)) for name in slots))
    return value


def canonical(payload: dict[str, Any]) -> dict[str, Any]:
    """A bucket payload with the order the core leaves to object ids made canonical: a broker record refreshes the
    broker's partitions in the order of a set of objects (hashed by id), so the changed rows and violations are
    compared sorted by partition, and the transitions of one record sorted by partition (records stay in order)."""
    out = dict(payload)
    out["partitions"] = sorted(payload["partitions"], key=lambda row: (row[0], row[1]))
    out["violations"] = sorted(payload["violations"], key=lambda v: (v["topicId"], v["partitionId"], v["kind"]))
    groups: list[list[dict[str, Any]]] = []
    for transition in payload["transitions"]:
        if groups and (groups[-1][0]["offset"], groups[-1][0]["position"]) == (
            transition["offset"],
            transition["position"],
        ):
            groups[-1].append(transition)
        else:
            groups.append([transition])
    out["transitions"] = [
        t for group in groups for t in sorted(group, key=lambda t: (t["topicId"], t["partitionId"]))
    ]
    return out


def state_of(cluster: ClusterState) -> dict[str, Any]:
    """Every persisted attribute, in plain form (the recent-offsets ring: its filled slots)."""
    out = {name: normal(getattr(cluster, name)) for name in sorted(PERSISTED_ATTRIBUTES - RING)}
    filled = [slot for slot, offset in enumerate(cluster.recent_offsets) if offset != -1]
    out["ring"] = [(slot, cluster.recent_offsets[slot], normal(cluster.recent_records[slot])) for slot in filled]
    out["ring_size"] = len(cluster.recent_offsets), len(cluster.recent_records)
    return out


def assert_same(what: str, ref: Any, fast: Any) -> None:
    """Equal, or an assertion naming the first differing key or index."""
    if ref == fast:
        return
    if isinstance(ref, dict) and isinstance(fast, dict):
        for key in sorted(set(ref) | set(fast), key=repr):
            assert key in ref and key in fast, f"{what}: key {key!r} only in {'ref' if key in ref else 'fast'}"
            assert_same(f"{what}.{key}", ref[key], fast[key])
    if isinstance(ref, list | tuple) and isinstance(fast, list | tuple):
        for i, (a, b) in enumerate(zip(ref, fast, strict=False)):
            assert_same(f"{what}[{i}]", a, b)
        assert len(ref) == len(fast), f"{what}: {len(ref)} items in ref, {len(fast)} in fast"
    raise AssertionError(f"{what}: ref {ref!r} != fast {fast!r}")


@dataclasses.dataclass
class Result:
    """What a differential run did: records per batch, how many the fast path applied, the outcomes."""

    records: int = 0
    fast: int = 0
    outcomes: dict[str, int] = dataclasses.field(default_factory=dict)
    transitions: int = 0


def run_both(
    batches: Sequence[Sequence[Item]],
    bucket: tuple[int, int] | None = None,
    default_min_isr: int = 1,
    source: str = "events",
    track_changes: bool = True,
    index_brokers: bool = False,
) -> Result:
    """Apply ``batches`` with the core and with the batch engine; assert everything equal after each batch.

    ``index_brokers``: build the broker index after each batch, as the streaming job does (else the core builds
    it at the first broker record that finds partitions)."""
    ref = ClusterState(default_min_isr=default_min_isr, bucket=bucket, track_changes=track_changes)
    engine = BatchEngine(ClusterState(default_min_isr=default_min_isr, bucket=bucket, track_changes=track_changes))
    index = bucket[0] if bucket is not None else 0
    ref_bs = BucketState(ref, PipelineCounts(), {})
    fast_bs = BucketState(engine.cluster, PipelineCounts(), {})
    result = Result()
    ref_parser, fast_parser = Parser(source), Parser(source)
    for number, lines in enumerate(batches):
        where = f"batch {number}"
        ref_records = ref_parser.records(lines)
        fast_records = fast_parser.records(lines)
        ref_outcomes: list[Outcome] = []
        ref_errors: list[Any] = []
        for record in ref_records:
            outcome = ref.apply(record)
            ref_outcomes.append(outcome)
            ref_errors.append(ref.last_error.to_dict() if outcome is Outcome.QUARANTINED and ref.last_error else None)
        fast_outcomes, errors = engine.apply_batch(fast_records)
        assert_same(f"{where} outcomes", ref_outcomes, fast_outcomes)
        assert_same(f"{where} errors", ref_errors, [e.to_dict() if e is not None else None for e in errors])
        ref_payload = bucket_payload(index, ref_bs, [])
        fast_payload = bucket_payload(index, fast_bs, [])
        result.transitions += len(ref_payload["transitions"])
        assert_same(f"{where} payload", canonical(ref_payload), canonical(fast_payload))
        assert_same(f"{where} shared gauges", shared_gauges(ref), shared_gauges(engine.cluster))
        assert_same(f"{where} state", state_of(ref), state_of(engine.cluster))
        if index_brokers:
            ref.index_brokers()
            engine.cluster.index_brokers()
        for outcome in ref_outcomes:
            result.outcomes[outcome.value] = result.outcomes.get(outcome.value, 0) + 1
        result.records += len(ref_records)
    assert_same(
        "report",
        report.build_document(ref, PipelineCounts(), [], advice=None),
        report.build_document(engine.cluster, PipelineCounts(), [], advice=None),
    )
    result.fast = engine.fast_records
    assert engine.fast_records + engine.core_records == result.records
    return result


def cut(lines: Sequence[Item], sizes: Iterable[int]) -> list[list[Item]]:
    """``lines`` cut into consecutive batches of the given sizes (the rest in a last batch)."""
    out: list[list[Item]] = []
    start = 0
    for size in sizes:
        if start >= len(lines):
            break
        out.append(list(lines[start:start + size]))
        start += size
    if start < len(lines):
        out.append(list(lines[start:]))
    return out
