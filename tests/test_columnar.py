"""The differential harness of the columnar store (the runtime, state/partitions/columnar/) against the object store
(the specification, state/partitions/objects.py): two `ClusterState`s, one of each store.

`run_both` feeds both the same micro-batches of parsed records and, after every batch, compares field by field:
each record's outcome and quarantine error, the quarantine reported, every partition's state and derived status
and flags, the status transitions in order with their offsets, the status and flag counts, the image each state
built (brokers, topics, configs, features, source positions, the recent-offsets ring, partition 0 shadows), the
replica log infos, the election counters and each partition's last leader change kind, and what a bucket emits
(tests/columnar_output_check.py: changed rows, removals, changed brokers, topic documents, gauges and insight
counters). Inputs: the conformance corpus, every simulator scenario, the real-Kafka golden logs, a storm on a large
generated cluster and random faulty streams, whole and bucketed.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import json
import random
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from columnar_output_check import OutputCheck
from core_events import Feeder, corner_stream, random_stream
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from elrwatch.state.cluster import ClusterState
from elrwatch.state.eventgen import EventGenerator
from elrwatch.state.model import PARTITION_FIELDS, BrokerState, PartitionState
from elrwatch.state.outcome import Outcome
from elrwatch.state.partitions import Transition
from elrwatch.state.partitions.columnar.lines import LineBlock
from elrwatch.state.partitions.columnar.parse import RawLine, parse_partition_lines
from elrwatch.state.records import DumpReader, Record
from elrwatch.state.simulator import SCENARIOS, simulate

DATA = Path(__file__).parent / "data" / "real-kafka"
REAL = sorted(p.parent.name for p in DATA.glob("*/metadata.dump"))
#: Kafka's dump-log files read as one stream: a snapshot then segments, records the snapshot covers, a gap, and
#: undecodable records.
DUMP_FORMATS = [
    ("snapshot.dump", "segments.dump"),
    ("snapshot-skip-metadata.dump", "segments-skip-metadata.dump"),
    ("snapshot.dump", "tail-segment.dump"),
    ("undecodable.dump",),
]
SIM_SHAPE = {"brokers": 6, "topics": 2, "partitions": 5, "replication_factor": 3, "min_isr": 2}
#: Partition fields not compared (none: the last leader change kind included).
NOT_COMPARED: frozenset[str] = frozenset()
COMPARED_FIELDS = tuple(name for name in PARTITION_FIELDS if name not in NOT_COMPARED)

Line = str | bytes
Item = Line | tuple[str, int, Line]


class Parser:
    """Parses items in order as the replay reads them (envelopes or DumpLogSegments text), snapshot ends set.
    An item is a line (the run's source, the next line number) or ``(source, seq, line)``."""

    def __init__(self, source: str, separator: str = ":") -> None:
        self.reader = DumpReader()
        self.source = source
        self.seq = 0
        self.separator = separator  # positions ``source<separator>seq`` (the streaming buckets': "@")

    def placed(self, items: Iterable[Item]) -> list[tuple[str, int, Line]]:
        out = []
        for item in items:
            if isinstance(item, tuple):
                out.append(item)
            else:
                self.seq += 1
                out.append((self.source, self.seq, item))
        return out

    def parse(self, source: str, seq: int, line: Line) -> Record | None:
        parsed = self.reader.parse(line, source, seq, f"{source}{self.separator}{seq}")
        if isinstance(parsed, Record):
            if self.reader.snapshot_end is not None and parsed.snapshot_end is None:
                parsed.snapshot_end = self.reader.snapshot_end
            return parsed
        return None

    def records(self, items: Iterable[Item]) -> list[Record]:
        return [r for source, seq, line in self.placed(items) if (r := self.parse(source, seq, line)) is not None]

    def items(self, items: Iterable[Item]) -> list[Any]:
        """As `records`, but the certain partition-record lines (partitions other than 0) of a plain envelope
        stream as `LineBlock`s (one per run, its lines from any sources), as the streaming buckets apply them."""
        placed = self.placed(items)
        raw = [line if isinstance(line, bytes) else line.encode() for _, _, line in placed]
        parsed = parse_partition_lines(raw)
        pids = parsed.column("partitionId").fill_null(0).to_numpy(zero_copy_only=False)
        out: list[Any] = []
        block: list[int] = []

        def close() -> None:
            if block:
                picked = np.array(block, dtype=np.int64)
                seqs = np.array([placed[i][1] for i in block], dtype=np.int64)
                sources = [placed[i][0] for i in block]
                out.append(LineBlock(parsed, picked, [raw[i] for i in block], sources, seqs))
                block.clear()

        for i, (source, seq, line) in enumerate(placed):
            plain = self.reader.plain and self.reader.snapshot_end is None and self.separator == "@"
            if plain and parsed.certain[i] and pids[i] != 0:
                block.append(i)
                continue
            close()
            record = self.parse(source, seq, line)
            if record is not None:
                out.append(record)
        close()
        return out


def normal(value: Any) -> Any:
    """A comparable plain form (domain objects as their pickled field values)."""
    if isinstance(value, RawLine):  # the engine's ring keeps a line it admitted as a vector raw: its Record
        value = value.record()
    if isinstance(value, dict):
        return {normal(k): normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(normal(v) for v in value)
    if isinstance(value, Record):
        return (
            "Record",
            value.type,
            value.version,
            normal(value.data),
            value.source,
            value.seq,
            value.position,
            value.offset,
            value.timestamp_ms,
            value.origin,
            value.snapshot_end,
        )
    if isinstance(value, PartitionState | BrokerState | Transition):
        return (type(value).__name__, *(normal(v) for v in value.__getstate__()))
    return value


def partition_fields(p: PartitionState) -> dict[str, Any]:
    return {name: getattr(p, name) for name in COMPARED_FIELDS}


def held_partitions(cluster: ClusterState) -> dict[tuple[str, int], dict[str, Any]]:
    return {(p.topic_id, p.partition_id): partition_fields(p) for _, p in cluster.iter_partitions()}


def kept_state(cluster: ClusterState) -> dict[str, Any]:
    """The image a state built (everything but its partitions)."""
    image = cluster.image
    positions, topics, configs = image.positions, image.topics, image.configs
    ring = [(s, o, normal(positions.recent_records[s])) for s, o in enumerate(positions.recent_offsets) if o != -1]
    return {
        "topics": {t.topic_id: (t.name, t.last_offset) for t in topics.by_id.values()},
        "topic_ids_by_name": topics.ids_by_name,
        "configs": (configs.of_topic, configs.cluster, configs.of_broker),
        "brokers": normal(cluster.brokers),
        "features": cluster.features,
        "offsets": (configs.offsets, image.features.offsets, topics.clear_elr_offsets),
        "source_seq": positions.source_seq,
        "removed": (topics.removed, topics.removed_names),
        "shadow_p0": normal(topics.shadow_p0),
        "snapshot_end_offset": positions.snapshot_end_offset,
        "derived_from": positions.derived_from,
        "ring": ring,
    }


def canonical(transitions: list[Transition]) -> list[tuple[Any, ...]]:
    """Transitions as tuples, in order; those of one record sorted by partition (the core refreshes a broker's
    partitions in the order of a set of objects, so that order is not part of its output)."""
    groups: list[list[tuple[Any, ...]]] = []
    for t in transitions:
        row = (t.offset, t.position, t.topic_id, t.partition_id, t.topic, t.from_status, t.to_status, t.at_ms)
        if groups and groups[-1][0][:2] == row[:2]:
            groups[-1].append(row)
        else:
            groups.append([row])
    return [row for group in groups for row in sorted(group, key=lambda r: (r[2], r[3]))]


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
    """What a differential run did."""

    records: int = 0
    fast: int = 0
    outcomes: dict[str, int] = dataclasses.field(default_factory=dict)
    transitions: int = 0
    quarantined: int = 0
    rows: int = 0
    state: ClusterState | None = None


class TwinState(ClusterState):
    """A harness state that knows its twin: `run_both` makes the object store's state, then the columnar store's,
    whose ``ref`` is that object-store state (the object store's own ``ref`` is None). See `make_states_with`."""

    made: ClassVar[list[ClusterState]] = []  # the object store's states, in the order made

    def __init__(self, *args: Any, store: str = "columnar", **kwargs: Any) -> None:
        super().__init__(*args, store=store, **kwargs)
        self.ref: ClusterState | None = None
        if store == "objects":
            self.made.append(self)
        else:
            self.ref = self.made[-1]


def make_states_with(monkeypatch: pytest.MonkeyPatch, state_class: type[TwinState]) -> None:
    """For the rest of the test the harness makes its states with ``state_class``."""
    monkeypatch.setattr(state_class, "made", [])
    monkeypatch.setattr(sys.modules[__name__], "ClusterState", state_class)


def run_both(
    batches: Sequence[Sequence[Item]],
    bucket: tuple[int, int] | None = None,
    default_min_isr: int = 1,
    source: str = "events",
    compare_every_batch: bool = True,
    as_lines: bool = False,
) -> Result:
    """Apply ``batches`` with the object store and with the columnar store; assert everything equal after each
    batch. ``as_lines``: the columnar store gets the certain partition-record lines as `LineBlock`s (positions
    ``source@seq``)."""
    ref = ClusterState(default_min_isr=default_min_isr, bucket=bucket, store="objects")
    fast = ClusterState(default_min_isr=default_min_isr, bucket=bucket, store="columnar")
    result = Result()
    separator = "@" if as_lines else ":"
    ref_parser, fast_parser = Parser(source, separator), Parser(source, separator)
    ref_transitions: list[Transition] = []
    fast_transitions: list[Transition] = []
    ref_quarantined: list[dict[str, Any]] = []
    check_output = OutputCheck(assert_same, normal)
    for number, lines in enumerate(batches):
        where = f"batch {number}"
        ref_records = ref_parser.records(lines)
        fast_records = fast_parser.items(lines) if as_lines else fast_parser.records(lines)
        ref_outcomes: list[Outcome] = []
        ref_errors: list[Any] = []
        for record in ref_records:
            outcome = ref.apply(record)
            ref_outcomes.append(outcome)
            ref_errors.append(ref.last_error.to_dict() if outcome is Outcome.QUARANTINED and ref.last_error else None)
        fast_outcomes, errors = fast.apply_batch(fast_records)
        assert_same(f"{where} outcomes", ref_outcomes, fast_outcomes)
        assert_same(f"{where} errors", ref_errors, [e.to_dict() if e is not None else None for e in errors])
        changes = ref.drain_changes()
        ref_transitions += changes.transitions
        fast_transitions += fast.partitions.drain_transitions()
        check_output(where, ref, changes, fast)
        result.quarantined += len(changes.quarantined)
        ref_quarantined += [e.to_dict() for e in changes.quarantined]
        if compare_every_batch or number == len(batches) - 1:
            assert_same(f"{where} transitions", canonical(ref_transitions), canonical(fast_transitions))
            assert_same(f"{where} partitions", held_partitions(ref), held_partitions(fast))
            assert_same(f"{where} kept state", kept_state(ref), kept_state(fast))
            assert_same(f"{where} log info", ref.log_info, fast.log_info)
            assert_same(f"{where} status counts", +ref.status_counts, +fast.status_counts)
            assert_same(
                f"{where} flag histogram", dict(+ref.partitions.flag_histogram), fast.partitions.flag_histogram()
            )
            assert_same(f"{where} partition count", ref.partition_count, len(held_partitions(fast)))
        for outcome in ref_outcomes:
            result.outcomes[outcome.value] = result.outcomes.get(outcome.value, 0) + 1
        result.records += len(ref_records)
    assert_same("quarantine reported", ref_quarantined, [e.to_dict() for e in fast.drain_quarantined()])
    result.transitions = len(ref_transitions)
    result.rows = check_output.rows
    result.state = fast
    result.fast = fast.partitions.fast_records
    return result


def cut(lines: Sequence[Item], sizes: Iterable[int]) -> list[list[Item]]:
    """``lines`` cut into consecutive batches of the given sizes (the rest in a last batch)."""
    out: list[list[Item]] = []
    start = 0
    for size in sizes:
        if start >= len(lines):
            break
        out.append(list(lines[start : start + size]))
        start += size
    if start < len(lines):
        out.append(list(lines[start:]))
    return out


def sizes(seed: int, low: int = 1, high: int = 40) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(10_000)]


def buckets_of(n: int) -> list[tuple[int, int] | None]:
    return [None, *((i, n) for i in range(n))]


# --- the event generator: load, storms, churn -------------------------------------------------------------------


def generator_batches(seed: int) -> list[list[Item]]:
    """Bootstrap (the load), a fence storm, churn, an unfence storm, random failures: one batch each."""
    gen = EventGenerator(topics=3, partitions=60, brokers=5, seed=seed)
    out: list[list[Item]] = [list(gen.bootstrap())]
    out.append(list(gen.fence(1)))
    out.append(list(gen.churn(150)))
    out.append(list(gen.fence(2)))  # below min ISR: ELR and leaderless partitions
    out.append(list(gen.unfence(1)))
    out.append(list(gen.steps(8)))
    out.append(list(gen.churn(100)))
    return out


@pytest.mark.parametrize("as_lines", [False, True])
@pytest.mark.parametrize("bucket", buckets_of(3))
def test_event_generator_load_storms_and_churn(bucket: tuple[int, int] | None, as_lines: bool) -> None:
    result = run_both(generator_batches(5), bucket=bucket, default_min_isr=2, as_lines=as_lines)
    assert result.transitions > 0
    assert result.fast >= 0.8 * result.outcomes["applied"], result  # the vector path takes the load and storms
    if as_lines and bucket is None:  # and most lines are admitted as vectors (a bucket's stream here mixes others';
        # the count is the engine's since it was made or last loaded from a snapshot)
        assert result.state is not None and result.state.partitions.vector_admitted >= 0.5 * result.records


def test_event_generator_in_random_batches() -> None:
    gen = EventGenerator(topics=2, partitions=30, brokers=4, seed=3)
    lines = [*gen.bootstrap(), *gen.steps(15), *gen.churn(100)]
    result = run_both(cut(lines, sizes(3)), default_min_isr=2)
    assert result.fast > 0 and result.outcomes == {"applied": result.records}


#: Topics of `test_storm_on_a_large_cluster`'s cluster (3,000 partitions each); the harnesses that re-run every input
#: with more work per batch (snapshot reloads, the audit's rows) take a third of it.
STORM_TOPICS = 50


def test_storm_on_a_large_cluster() -> None:
    """A storm on a large cluster (150k partitions, ≥ 100k records): the fences of two brokers, then an unfence, in
    batches of 20k records (compared after every batch)."""
    gen = EventGenerator(topics=STORM_TOPICS, partitions=3000, brokers=9, seed=2)
    load = list(gen.bootstrap())
    storm = [*gen.fence(0), *gen.fence(1), *gen.unfence(0)]
    assert len(storm) >= 2_000 * STORM_TOPICS
    result = run_both([load, *cut(storm, [20_000] * 10)], default_min_isr=2, compare_every_batch=False)
    assert result.transitions >= 1_000 * STORM_TOPICS, result
    assert result.fast >= 0.99 * result.records, result


# --- real Kafka metadata logs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", REAL)
def test_real_kafka_logs(scenario: str) -> None:
    lines = (DATA / scenario / "metadata.dump").read_text().splitlines()
    for bucket in buckets_of(2):
        result = run_both(cut(lines, sizes(len(scenario), 1, 120)), bucket=bucket, source=scenario)
        assert result.records > 0


@pytest.mark.parametrize("names", DUMP_FORMATS)
def test_real_kafka_dump_formats(names: tuple[str, ...]) -> None:
    """Kafka's dump-log output read as one stream: a snapshot, then segments (records the snapshot covers, a gap,
    undecodable records)."""
    lines = [line for name in names for line in (DATA / "formats" / name).read_text().splitlines()]
    outcomes: dict[str, int] = {}
    for bucket in buckets_of(2):
        for key, count in run_both(cut(lines, sizes(3, 1, 50)), bucket=bucket, source="dump").outcomes.items():
            outcomes[key] = outcomes.get(key, 0) + count
    assert outcomes.get("applied", 0) > 0
    if names[0].startswith("snapshot") and "segments" in names[1]:
        assert outcomes.get("covered", 0) > 0


def test_real_kafka_corpus_is_there() -> None:
    assert len(REAL) >= 13


# --- the conformance corpus -------------------------------------------------------------------------------------


def conformance_lines(monkeypatch: pytest.MonkeyPatch, case: dict[str, Any]) -> list[Item]:
    """The lines the conformance replay feeds for a case (its initial state, then every step's records)."""
    import test_conformance_replay as conformance

    fed: list[Item] = []
    original = Feeder.feed_raw

    def recording(self: Feeder, text: str | bytes) -> Any:
        fed.append(text)
        return original(self, text)

    with monkeypatch.context() as patch:
        patch.setattr(Feeder, "feed_raw", recording)
        replay = conformance.CaseReplay(case)
        for index, (inp, expected) in enumerate(conformance._steps(case)):
            pre, main, post = replay.plan(inp, expected)
            replay.feed([*pre, *main, *post], f"step {index}")
    return fed


def test_conformance_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    import test_conformance_replay as conformance

    assert len(conformance.BY_ID) >= 54
    transitions = 0
    for case_id, case in sorted(conformance.BY_ID.items()):
        lines = conformance_lines(monkeypatch, case)
        for bucket in (None, (0, 2), (1, 2)):
            for batch in (1, 3, len(lines)):
                try:
                    transitions += run_both(cut(lines, [batch] * len(lines)), bucket=bucket).transitions
                except AssertionError as error:
                    raise AssertionError(f"{case_id} bucket {bucket} batches of {batch}: {error}") from None
    assert transitions > 0


# --- the simulator ----------------------------------------------------------------------------------------------


def simulated(**kwargs: Any) -> list[Item]:
    out = io.BytesIO()
    simulate(out, **{**SIM_SHAPE, "seed": 11, **kwargs})
    return list(out.getvalue().splitlines())


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_simulator_scenarios(scenario: str) -> None:
    lines = simulated(scenario=scenario)
    for bucket in buckets_of(2):
        run_both(cut(lines, sizes(7, 1, 30)), bucket=bucket)
        run_both(cut(lines, sizes(7, 1, 30)), bucket=bucket, as_lines=True)


@pytest.mark.parametrize("seed", [1, 2])
def test_simulator_random_faults(seed: int) -> None:
    lines = simulated(faults=0.3, records=600, seed=seed)
    for bucket in (None, (seed % 2, 2)):
        for as_lines in (False, True):
            result = run_both(cut(lines, sizes(seed, 5, 80)), bucket=bucket, as_lines=as_lines)
            assert result.records > 0


# --- random faulty streams --------------------------------------------------------------------------------------

_PHASES = (Phase.explicit, Phase.reuse, Phase.generate)
FAULTY = settings(max_examples=40, deadline=None, phases=_PHASES, suppress_health_check=[HealthCheck.too_slow])


def faulty_stream(seed: int, steps: int, rnd: random.Random) -> list[Item]:
    """`random_stream` with faults: malformed lines, re-delivered records (same and new positions), records whose
    offset was applied with other content (conflicts), records without offsets, out-of-order offsets."""
    lines = random_stream(seed, steps=steps)
    out: list[Item] = []
    seq = 0
    for i, text in enumerate(lines):
        seq += 1
        out.append(("events", seq, text))
        roll = rnd.random()
        if roll < 0.05:
            out.append(("events", seq, text))  # the same position again
        elif roll < 0.12:
            out.append(("retry", seq, lines[rnd.randrange(i + 1)]))  # an earlier record, another source
        elif roll < 0.16:
            seq += 1
            out.append(("events", seq, rnd.choice(['{"type": "PARTITION_CHANGE_RECORD"', "not json", "{}", "[1]"])))
        elif roll < 0.24:
            env = json.loads(lines[rnd.randrange(i + 1)])
            data = env["data"]
            if rnd.random() < 0.5 and "isr" in data:
                data["isr"] = [*reversed(data["isr"]), rnd.randrange(6)]
            elif rnd.random() < 0.5:
                env.pop("offset", None)
            else:
                env["offset"] = env.get("offset", 0) + rnd.randrange(-3, 4)
            seq += 1
            out.append(("events", seq, json.dumps(env)))
    return out


@FAULTY
@given(st.integers(0, 10**6), st.integers(1, 120), st.randoms(use_true_random=False), st.integers(0, 3))
def test_random_faulty_streams(seed: int, steps: int, rnd: random.Random, which: int) -> None:
    stream = faulty_stream(seed, steps, rnd)
    bucket = None if which == 0 else (which - 1, 3)
    batches = cut(stream, [rnd.randint(1, 50) for _ in range(len(stream))])
    run_both(batches, bucket=bucket)
    run_both(batches, bucket=bucket, as_lines=True)


# --- the vector path itself -------------------------------------------------------------------------------------


def test_a_partition_changed_twice_in_a_segment_gives_both_transitions() -> None:
    gen = EventGenerator(topics=1, partitions=4, brokers=3, seed=1)
    boot = list(gen.bootstrap())
    fast = ClusterState(default_min_isr=2)
    parser = Parser("s")
    fast.apply_batch(parser.records(boot))
    fast.partitions.drain_transitions()
    topic_id = next(iter(fast.topics))
    p1 = fast.partition(topic_id, 1)
    assert p1 is not None and p1.status == "HEALTHY"
    base = 10_000
    shrink = {
        "type": "PARTITION_CHANGE_RECORD",
        "version": 0,
        "offset": base,
        "data": {"topicId": topic_id, "partitionId": 1, "isr": [p1.replicas[0]]},
    }
    grow = {
        "type": "PARTITION_CHANGE_RECORD",
        "version": 0,
        "offset": base + 1,
        "data": {"topicId": topic_id, "partitionId": 1, "isr": list(p1.replicas)},
    }
    outcomes, _ = fast.apply_batch(parser.records([json.dumps(shrink), json.dumps(grow)]))
    assert outcomes == [Outcome.APPLIED, Outcome.APPLIED]
    assert fast.partitions.fast_records >= 2
    moves = [(t.from_status, t.to_status, t.offset) for t in fast.partitions.drain_transitions()]
    assert moves == [("HEALTHY", "UNDER_MIN_ISR", base), ("UNDER_MIN_ISR", "HEALTHY", base + 1)]
    after = fast.partition(topic_id, 1)
    assert after is not None and after.partition_epoch == p1.partition_epoch + 2
    assert after.isr == p1.isr and after.last_offset == base + 1


@pytest.mark.parametrize("as_lines", [False, True])
@pytest.mark.parametrize("batch", [1, 4, 10_000])
@pytest.mark.parametrize("bucket", buckets_of(2))
def test_corner_cases(bucket: tuple[int, int] | None, batch: int, as_lines: bool) -> None:
    lines = corner_stream()
    result = run_both(cut(lines, [batch] * len(lines)), bucket=bucket, as_lines=as_lines)
    assert result.transitions > 0
    assert result.outcomes.get("quarantined", 0) == 1  # the change of the removed topic's partition


def replica_log_stream() -> list[Item]:
    """Replica log infos: per broker, a later one replaces the kept one, a resent or older one is a duplicate, one
    without an offset applies; an unknown partition and an unknown topic are quarantined; the topic removed and
    created again has none."""
    from core_events import base_cluster, offset_lines, partition, remove_topic, topic, uuid_of

    t = "FbrrdcfiR-KC2CPSTHaJrg"

    def info(p: int, broker: int, end: int, topic_id: str = t) -> tuple[str, int, dict[str, Any]]:
        data = {
            "topicId": topic_id,
            "partitionId": p,
            "brokerId": broker,
            "brokerEpoch": 100,
            "logEndOffset": end,
            "lastWrittenLeaderEpoch": 1,
            "currentLeaderEpoch": 2,
        }
        return "REPLICA_LOG_INFO_RECORD", 0, data

    recs: list[tuple[Any, int | None]] = [(r, None) for r in base_cluster((0, 1, 2))]
    recs += [(topic("t", t), 10)] + [(partition(t, p, replicas=(0, 1, 2)), 11 + p) for p in range(4)]
    recs += [(info(p, b, 50 + p + b), 20 + 3 * p + b) for p in range(4) for b in range(3)]
    recs += [
        (info(1, 1, 70), 40),  # replaces broker 1's
        (info(1, 1, 70), 40),  # resent: a duplicate
        (info(1, 1, 72), 39),  # older than broker 1's kept one: a duplicate
        (info(2, 0, 73), None),  # no offset: applies
        (info(9, 0, 74), 41),  # unknown partition
        (info(0, 0, 75, uuid_of(99)), 42),  # unknown topic
        (remove_topic(t), 43),
        (topic("t", t), 44),
        (partition(t, 0, replicas=(0, 1, 2)), 45),
        (info(0, 2, 76), 46),
    ]
    return offset_lines(recs)


@pytest.mark.parametrize("batch", [1, 5, 10_000])
@pytest.mark.parametrize("bucket", buckets_of(2))
def test_replica_log_infos(bucket: tuple[int, int] | None, batch: int) -> None:
    result = run_both(cut(replica_log_stream(), [batch] * 100), bucket=bucket)
    if bucket is None:
        t = "FbrrdcfiR-KC2CPSTHaJrg"
        assert result.outcomes["duplicate"] == 2 and result.quarantined == 2
        assert result.state is not None and list(result.state.log_info) == [(t, 0)]
        before_removal = run_both([replica_log_stream()[:-4]]).state
        assert before_removal is not None
        assert before_removal.log_info[(t, 1)][1] == {
            "brokerId": 1,
            "brokerEpoch": 100,
            "logEndOffset": 70,
            "lastWrittenLeaderEpoch": 1,
            "currentLeaderEpoch": 2,
            "offset": 40,
            "timestampMs": 1_732_100_000_040,
        }
        assert before_removal.log_info[(t, 2)][0]["offset"] is None


def operator_recovery_stream() -> list[Item]:
    """An operator's recovery steps (`elrwatch recover`): kept per partition, the newest `recovery.KEEP_STEPS`; an
    unknown partition is quarantined, an invalid step too; the topic removed and created again has none."""
    from core_events import base_cluster, offset_lines, partition, remove_topic, topic

    from elrwatch.state.recovery import KEEP_STEPS

    t = "FbrrdcfiR-KC2CPSTHaJrg"

    def step(p: int, name: str, outcome: str = "done", leader: int = -1) -> tuple[str, int, dict[str, Any]]:
        data = {
            "topicId": t,
            "partitionId": p,
            "step": name,
            "outcome": outcome,
            "candidate": 2,
            "replicas": [0, 1, 2],
            "order": {"reorder": [2, 0, 1], "restore": [0, 1, 2]}.get(name, []),
            "leader": leader,
            "endOffset": 170 if leader >= 0 else -1,
            "candidateLogEndOffset": 170,
            "losses": [{"brokerId": 0, "records": -1, "exact": False}, {"brokerId": 1, "records": 0, "exact": True}],
            "message": f"{name} {outcome}",
        }
        return "OPERATOR_RECOVERY_RECORD", 0, data

    recs: list[tuple[Any, int | None]] = [(r, None) for r in base_cluster((0, 1, 2))]
    recs += [(topic("t", t), 10)] + [(partition(t, p, replicas=(0, 1, 2)), 11 + p) for p in range(3)]
    recs += [(step(0, "reorder"), None), (step(0, "elect"), None), (step(0, "verify", leader=2), None)]
    recs += [(step(0, "restore"), None), (step(1, "reorder"), None), (step(1, "elect", "failed"), None)]
    recs += [(step(2, "elect"), None) for _ in range(KEEP_STEPS + 3)]
    recs += [(step(9, "reorder"), None), (step(0, "undo"), None)]  # unknown partition; unknown step
    recs += [(remove_topic(t), 43), (topic("t", t), 44), (partition(t, 0, replicas=(0, 1, 2)), 45)]
    return offset_lines(recs)


@pytest.mark.parametrize("batch", [1, 5, 10_000])
@pytest.mark.parametrize("bucket", buckets_of(2))
def test_operator_recovery_steps(bucket: tuple[int, int] | None, batch: int) -> None:
    from elrwatch.state.recovery import KEEP_STEPS
    from elrwatch.state.replay import replay_lines
    from elrwatch.state.report import partition_doc

    lines = operator_recovery_stream()
    result = run_both(cut(lines, [batch] * 100), bucket=bucket)
    if bucket is None:
        t = "FbrrdcfiR-KC2CPSTHaJrg"
        assert result.state is not None and result.state.operator_steps == {}  # the topic was removed
        replayed = replay_lines(lines[:-3])
        assert [q.reason for q in replayed.quarantined] == ["unknown_partition", "invalid_field"]
        state = replayed.cluster
        assert len(state.operator_steps[(t, 2)]) == KEEP_STEPS
        topic = state.topic_by_name("t")
        docs = {p: partition_doc(state, topic, state.partition(t, p))["operatorRecovery"] for p in (0, 1)}
        assert docs[0]["summary"] == (
            "recovered by operator: elected 2, lost unknown on 0, 0 records on 1; replica order restored to [0, 1, 2]"
        )
        assert [s["step"] for s in docs[0]["steps"]] == ["reorder", "elect", "verify", "restore"]
        assert docs[1]["summary"] == "operator recovery failed at step elect: elect failed"


# --- the inputs, for the modules that run them again under another state ----------------------------------------

#: The tests of whole inputs, which tests/test_columnar_audit.py and tests/test_columnar_snapshot.py run again with
#: the harness's `ClusterState` replaced.
INPUT_TESTS = (
    test_event_generator_load_storms_and_churn,
    test_event_generator_in_random_batches,
    test_storm_on_a_large_cluster,
    test_real_kafka_logs,
    test_real_kafka_dump_formats,
    test_conformance_corpus,
    test_simulator_scenarios,
    test_simulator_random_faults,
    test_random_faulty_streams,
    test_corner_cases,
    test_operator_recovery_steps,
)


def input_runs() -> list[Any]:
    """Each test of `INPUT_TESTS` with each of its parameter sets (its ``parametrize`` marks), as `pytest.param`s of
    (test, keyword arguments) named after the test and its parameters."""
    runs = []
    for test in INPUT_TESTS:
        combinations: list[dict[str, Any]] = [{}]
        for mark in getattr(test, "pytestmark", []):
            if mark.name == "parametrize":
                names, values = mark.args[0], mark.args[1]
                assert isinstance(names, str) and "," not in names, names  # one argument per mark
                combinations = [{**kwargs, names: value} for kwargs in combinations for value in values]
        for kwargs in combinations:
            values = (
                "+".join(v) if isinstance(v, tuple) and v and isinstance(v[0], str) else str(v) for v in kwargs.values()
            )
            name = "-".join([test.__name__.removeprefix("test_"), *values])
            runs.append(pytest.param(test, kwargs, id=name))
    return runs


def run_input(test: Any, kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """One of `input_runs`: the test called with its arguments (and ``monkeypatch`` if it takes it); the storm on a
    third of its cluster (these harnesses do more per batch; the cluster stays large: 51k partitions)."""
    if test is test_storm_on_a_large_cluster:
        monkeypatch.setattr(sys.modules[__name__], "STORM_TOPICS", 17)
    if "monkeypatch" in inspect.signature(test).parameters:
        kwargs = {**kwargs, "monkeypatch": monkeypatch}
    test(**kwargs)
