"""The differential check of the columnar engine's output (state/columnar_output.py) against what the object core's
bucket emits (`streaming.bucket.bucket_payload`'s parts from `drain_changes` and `partition_gauges`), used by the
harness (tests/test_columnar.py `run_both`) after every batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from elrwatch.state import columnar_output, report
from elrwatch.state.cluster import Changes, ClusterState
from elrwatch.state.columnar import ColumnarState
from elrwatch.state.gauges import partition_gauges
from elrwatch.state.partition_row import partition_row

#: The gauges an engine that does not audit does not build.
NOT_BUILT = frozenset({"elrwatch_invariant_violations"})


def reference_rows(ref: ClusterState, changes: Changes) -> list[list[Any]]:
    """The object core's changed rows as `bucket_payload` builds them."""
    return [
        partition_row(topic.name, p, ref.effective_min_isr(topic), report.stored_partition(ref, topic, p))
        for topic, p in changes.partitions
    ]


def reference_topics(ref: ClusterState, changes: Changes, emitted: dict[str, int]) -> dict[str, dict[str, Any]]:
    """The topic documents `bucket_payload` emits (``emitted`` updated as it does)."""
    topics: dict[str, dict[str, Any]] = {}
    dirty = {t.topic_id for t in changes.topics}
    for topic in ref.topics.values():
        n = len(topic.partitions)
        if topic.topic_id in dirty or emitted.get(topic.topic_id) != n:
            topics[topic.topic_id] = report.topic_doc(ref, topic)
            emitted[topic.topic_id] = n
    for tid, _name in changes.removed_topics:
        emitted.pop(tid, None)
    return topics


class OutputCheck:
    """Compares one run's outputs batch after batch (it keeps each side's emitted topic counts)."""

    def __init__(self, assert_same: Callable[[str, Any, Any], None], normal: Callable[[Any], Any]) -> None:
        self.assert_same = assert_same
        self.normal = normal
        self.ref_emitted: dict[str, int] = {}
        self.fast_emitted: dict[str, int] = {}
        self.rows = 0

    def __call__(self, where: str, ref: ClusterState, changes: Changes, fast: ColumnarState) -> None:
        """Compare after a batch: ``changes`` is the core's drain (its transitions are compared by the harness)."""
        same = self.assert_same

        own = getattr(fast, "partition_violations", None)  # an engine that audits

        def kinds(topic_id: str, partition_id: int) -> list[str]:  # the audit's part of the stored form
            if own is not None:
                return [v.kind for v in own(topic_id, partition_id)]
            return [v.kind for v in ref.violations.get((topic_id, partition_id), ())]

        out = columnar_output.drain(fast, kinds if ref.violations or own is not None else None)
        ref_rows = sorted(reference_rows(ref, changes), key=lambda r: (r[0], r[1]))
        fast_rows = sorted(columnar_output.rows_of(out.partitions), key=lambda r: (r[0], r[1]))
        same(f"{where} changed rows", ref_rows, fast_rows)
        self.rows += len(fast_rows)
        same(f"{where} removed", [[tid, pid] for tid, pid, _ in changes.removed], out.removed)
        same(f"{where} removed topics", [tid for tid, _ in changes.removed_topics], out.removed_topics)
        same(f"{where} changed brokers", self.normal(changes.brokers), self.normal(out.brokers))
        same(
            f"{where} topic documents",
            reference_topics(ref, changes, self.ref_emitted),
            columnar_output.topic_documents(fast, out, self.fast_emitted),
        )
        same(f"{where} election counters", dict(+ref.counters), dict(+fast.counters))
        counts = columnar_output.insight_counts(fast)
        same(f"{where} insight counters", dict(+ref.insight_counts), dict(counts))
        expected = {k: v for k, v in partition_gauges(ref).items() if own is not None or k[0] not in NOT_BUILT}
        same(f"{where} gauges", expected, columnar_output.partition_gauges(fast, counts))
