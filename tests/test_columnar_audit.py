"""The invariant audit of the columnar store (state/partitions/columnar/audit.py) against the object store's.

Every input of the differential harness (tests/test_columnar.py) runs again; after every batch, besides what the
harness compares, the violations of every partition (kind, detail and the record that first caused each) and the
violation counts of the columnar store must equal the object store's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import test_columnar as base
from test_columnar import Parser, assert_same

from elrwatch.state.cluster import ClusterState
from elrwatch.state.eventgen import EventGenerator
from elrwatch.state.outcome import Outcome


class _Compared:
    """The runs of the harness, with the violations compared after every batch."""

    def __init__(self) -> None:
        self.batches = 0
        self.violations = 0
        self.audited = 0


def _violations(cluster: ClusterState) -> dict[tuple[str, int], list[dict[str, object]]]:
    return {key: [v.to_dict() for v in found] for key, found in cluster.violations.items()}


@pytest.mark.parametrize(("test", "kwargs"), base.input_runs())
def test_harness_input(compared: _Compared, monkeypatch: pytest.MonkeyPatch, test: Any, kwargs: dict[str, Any]) -> None:
    base.run_input(test, kwargs, monkeypatch)
    if test in (base.test_conformance_corpus, base.test_random_faulty_streams, base.test_corner_cases):
        assert compared.violations > 0  # inputs whose object-store runs have violations: the audit compared some


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Compared]:
    """The harness's states replaced: the columnar store's compares its violations with its twin's after each
    batch."""
    seen = _Compared()

    class Compared(base.TwinState):
        def apply_batch(self, items: Any, owned: bool = False) -> Any:
            out = super().apply_batch(items, owned)
            if self.ref is None:
                return out
            ref = self.ref  # the harness applied the batch to the object store just before
            where = f"batch {seen.batches}"
            assert_same(f"{where} violations", _violations(ref), _violations(self))
            assert_same(
                f"{where} violation counts", +ref.partitions.violations.counts, +self.partitions.violations.counts
            )
            for key in ref.violations:
                assert self.partition_violations(*key) == ref.partition_violations(*key)
            seen.batches += 1
            seen.violations = max(seen.violations, sum(len(v) for v in ref.violations.values()))
            audited = self.partitions.audited_rows  # type: ignore[attr-defined]
            seen.audited += audited - getattr(self, "_counted", 0)
            self._counted = audited
            return out

    base.make_states_with(monkeypatch, Compared)
    yield seen
    assert seen.batches > 0


def test_a_violation_keeps_the_record_that_first_caused_it() -> None:
    """Within one segment: a shrink below min ISR with the ELR feature off, a second change that keeps the lost
    margin, a third that restores it; then a decreased epoch."""
    gen = EventGenerator(topics=1, partitions=4, brokers=3, seed=1)
    parser = Parser("s")
    fast = ClusterState(default_min_isr=2)
    boot = [line for line in gen.bootstrap() if b"eligible.leader.replicas" not in line]
    fast.apply_batch(parser.records(boot))
    topic_id = next(iter(fast.topics))
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
    assert fast.partitions.audited_rows >= 2  # type: ignore[attr-defined]
    fast.apply_batch(parser.records([change(base_offset + 2, isr=[leader, other])]))
    assert fast.partition_violations(topic_id, 1) == ()
    assert sum(fast.partitions.violations.counts.values()) == 0
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
    fast = ClusterState(default_min_isr=1)
    store = fast.partitions
    fast.apply_batch(parser.records(list(gen.bootstrap())))
    before = store.audited_rows  # type: ignore[attr-defined]
    fast.apply_batch(parser.records(list(gen.fence(0))))
    assert store.fast_records > 0 and store.audited_rows == before and not fast.violations  # type: ignore[attr-defined]
