"""The differential check of the columnar store's output (state/partitions/columnar/output.py) against what the
object store gives for the same batch (its `drain_changes` as a bucket would emit it, `partition_gauges`), used by
the harness (tests/test_columnar.py `run_both`) after every batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from elrwatch.state import report
from elrwatch.state.cluster import Changes, ClusterState
from elrwatch.state.gauges import partition_gauges
from elrwatch.state.partition_row import partition_row
from elrwatch.state.partitions.columnar import output


def reference_rows(ref: ClusterState, changes: Changes) -> list[list[Any]]:
    """The object store's changed rows as a bucket would emit them."""
    return [
        partition_row(topic.name, p, ref.effective_min_isr(topic), report.stored_partition(ref, topic, p))
        for topic, p in changes.partitions
    ]


def reference_topics(ref: ClusterState, changes: Changes, emitted: dict[str, int]) -> dict[str, dict[str, Any]]:
    """The topic documents a bucket emits (``emitted`` updated as `output.topic_documents` does)."""
    topics: dict[str, dict[str, Any]] = {}
    dirty = {t.topic_id for t in changes.topics}
    for topic in ref.topics.values():
        n = ref.partition_count_of(topic)
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

    def __call__(self, where: str, ref: ClusterState, changes: Changes, fast: ClusterState) -> None:
        """Compare after a batch: ``changes`` is the object store's drain (its transitions are compared by the
        harness)."""
        same = self.assert_same
        store = fast.partitions
        own = store.violations.of

        def kinds(topic_id: str, partition_id: int) -> list[str]:  # the audit's part of the stored form
            return [v.kind for v in own(topic_id, partition_id)]

        out = output.drain(store, kinds)  # type: ignore[arg-type]
        ref_rows = sorted(reference_rows(ref, changes), key=lambda r: (r[0], r[1]))
        fast_rows = sorted(output.rows_of(out.partitions), key=lambda r: (r[0], r[1]))
        same(f"{where} changed rows", ref_rows, fast_rows)
        self.rows += len(fast_rows)
        same(f"{where} removed", [[tid, pid] for tid, pid, _ in changes.removed], out.removed)
        same(f"{where} removed topics", [tid for tid, _ in changes.removed_topics], out.removed_topics)
        same(f"{where} changed brokers", self.normal(changes.brokers), self.normal(out.brokers))
        same(
            f"{where} topic documents",
            reference_topics(ref, changes, self.ref_emitted),
            output.topic_documents(store, out, self.fast_emitted),  # type: ignore[arg-type]
        )
        same(f"{where} election counters", dict(+ref.counters), dict(+store.counters))
        counts = output.insight_counts(store)  # type: ignore[arg-type]
        same(f"{where} insight counters", dict(+ref.partitions.insight_counts), dict(counts))  # type: ignore[attr-defined]
        same(f"{where} gauges", partition_gauges(ref), output.partition_gauges(store, counts))  # type: ignore[arg-type]
