"""The invariant audit of the columnar engine (state/columnar_audit.py) against the object core's.

Every input of the differential harness (tests/test_columnar.py) runs again with the audited engine; after every
batch, besides what the harness compares, the violations of every partition (kind, detail and the record that
first caused each) and the violation counts must equal the core's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import test_columnar as base
from test_columnar import Parser, assert_same, buckets_of

from elrwatch.state.cluster import ClusterState
from elrwatch.state.columnar_audit import AuditedColumnarState
from elrwatch.state.eventgen import EventGenerator
from elrwatch.state.outcome import Outcome


class _Compared:
    """The runs of the harness, with the violations compared after every batch."""

    def __init__(self) -> None:
        self.refs: list[ClusterState] = []
        self.batches = 0
        self.violations = 0
        self.audited = 0


def _violations(cluster: ClusterState) -> dict[tuple[str, int], list[dict[str, object]]]:
    return {key: [v.to_dict() for v in found] for key, found in cluster.violations.items()}


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Compared]:
    """The harness's engines replaced: the core registers itself, the audited engine compares after each batch."""
    seen = _Compared()

    def reference(*args: Any, **kwargs: Any) -> ClusterState:  # the core as made, kept for the comparison
        made = ClusterState(*args, **kwargs)
        seen.refs.append(made)
        return made

    class Audited(AuditedColumnarState):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.ref = seen.refs[-1]  # run_both makes the core first

        def apply_batch(self, batch: Any) -> Any:
            out = super().apply_batch(batch)  # the harness applied the batch to the core just before
            where = f"batch {seen.batches}"
            assert_same(f"{where} violations", _violations(self.ref), _violations(self.core))
            assert_same(f"{where} violation counts", +self.ref.violation_counts, +self.violation_counts)
            for key in self.ref.violations:
                assert self.partition_violations(*key) == self.ref.partition_violations(*key)
            seen.batches += 1
            seen.violations = max(seen.violations, sum(len(v) for v in self.ref.violations.values()))
            seen.audited += self.audited_rows - getattr(self, "_counted", 0)
            self._counted = self.audited_rows
            return out

    monkeypatch.setattr(base, "ClusterState", reference)
    monkeypatch.setattr(base, "ColumnarState", Audited)
    yield seen
    assert seen.batches > 0


@pytest.mark.parametrize("as_lines", [False, True])
@pytest.mark.parametrize("bucket", buckets_of(3))
def test_event_generator_load_storms_and_churn(
    compared: _Compared, bucket: tuple[int, int] | None, as_lines: bool
) -> None:
    base.test_event_generator_load_storms_and_churn(bucket, as_lines)


def test_event_generator_in_random_batches(compared: _Compared) -> None:
    base.test_event_generator_in_random_batches()


def test_storm_on_a_large_cluster(compared: _Compared) -> None:
    base.test_storm_on_a_large_cluster()


@pytest.mark.parametrize("scenario", base.REAL)
def test_real_kafka_logs(compared: _Compared, scenario: str) -> None:
    base.test_real_kafka_logs(scenario)


@pytest.mark.parametrize("names", base.DUMP_FORMATS)
def test_real_kafka_dump_formats(compared: _Compared, names: tuple[str, ...]) -> None:
    base.test_real_kafka_dump_formats(names)


def test_conformance_corpus(compared: _Compared, monkeypatch: pytest.MonkeyPatch) -> None:
    base.test_conformance_corpus(monkeypatch)
    assert compared.violations > 0


@pytest.mark.parametrize("scenario", sorted(base.SCENARIOS))
def test_simulator_scenarios(compared: _Compared, scenario: str) -> None:
    base.test_simulator_scenarios(scenario)


@pytest.mark.parametrize("seed", [1, 2])
def test_simulator_random_faults(compared: _Compared, seed: int) -> None:
    base.test_simulator_random_faults(seed)


def test_random_faulty_streams(compared: _Compared) -> None:
    base.test_random_faulty_streams()
    assert compared.violations > 0


@pytest.mark.parametrize("as_lines", [False, True])
@pytest.mark.parametrize("batch", [1, 4, 10_000])
@pytest.mark.parametrize("bucket", buckets_of(2))
def test_corner_cases(compared: _Compared, bucket: tuple[int, int] | None, batch: int, as_lines: bool) -> None:
    base.test_corner_cases(bucket, batch, as_lines)
    assert compared.violations > 0


def test_a_violation_keeps_the_record_that_first_caused_it() -> None:
    """Within one segment: a shrink below min ISR with the ELR feature off, a second change that keeps the lost
    margin, a third that restores it; then a decreased epoch."""
    gen = EventGenerator(topics=1, partitions=4, brokers=3, seed=1)
    parser = Parser("s")
    fast = AuditedColumnarState(default_min_isr=2)
    boot = [line for line in gen.bootstrap() if b"eligible.leader.replicas" not in line]
    fast.apply_batch(parser.records(boot))
    topic_id = next(iter(fast.core.topics))
    p1 = fast.partition(topic_id, 1)
    assert p1 is not None and fast.partition_violations(topic_id, 1) == ()
    leader, other = p1.replicas[0], p1.replicas[1]

    def change(offset: int, **data: Any) -> str:
        env = {"type": "PARTITION_CHANGE_RECORD", "version": 0, "offset": offset}
        return json.dumps({**env, "data": {"topicId": topic_id, "partitionId": 1, **data}})

    base_offset = 10_000
    lines = [
        change(base_offset, isr=[leader]),
        change(base_offset + 1, isr=[leader], leader=leader),
    ]
    fast.apply_batch(parser.records(lines))
    kinds = {v.kind: v.offset for v in fast.partition_violations(topic_id, 1)}
    assert kinds == {"durability_margin_lost": base_offset}
    assert fast.audited_rows >= 2
    fast.apply_batch(parser.records([change(base_offset + 2, isr=[leader, other])]))
    assert fast.partition_violations(topic_id, 1) == ()
    assert sum(fast.violation_counts.values()) == 0
    replaced = {
        "type": "PARTITION_RECORD",
        "version": 0,
        "offset": base_offset + 3,
        "data": {
            "topicId": topic_id,
            "partitionId": 1,
            "replicas": list(p1.replicas),
            "isr": [leader],
            "leader": other,
            "leaderEpoch": 0,
            "partitionEpoch": 0,
            "removingReplicas": [],
            "addingReplicas": [],
        },
    }
    outcomes, errors = fast.apply_batch(parser.records([json.dumps(replaced)]))
    assert outcomes == [Outcome.APPLIED], errors
    assert [v.kind for v in fast.partition_violations(topic_id, 1)] == [
        "leader_not_in_isr",
        "epoch_decreased",
        "durability_margin_lost",
    ]


def test_a_storm_without_violations_audits_no_row() -> None:
    gen = EventGenerator(topics=3, partitions=200, brokers=6, seed=4)
    parser = Parser("s")
    fast = AuditedColumnarState(default_min_isr=1)
    fast.apply_batch(parser.records(list(gen.bootstrap())))
    before = fast.audited_rows
    fast.apply_batch(parser.records(list(gen.fence(0))))
    assert fast.fast_records > 0 and fast.audited_rows == before and not fast.violations
