"""The columnar store's output (state/partitions/columnar/output.py): what the differential harness's inputs
exercise, and the drain's own rules. Equality with what the object store gives for a bucket's payload is checked
after every batch of every input by the harness (tests/test_columnar.py `run_both`,
tests/columnar_output_check.py)."""

from __future__ import annotations

from collections import Counter

import orjson
from core_events import corner_stream
from test_columnar import DATA, REAL, SCENARIOS, Parser, cut, generator_batches, run_both, simulated

from elrwatch.state import insight
from elrwatch.state.cluster import ClusterState
from elrwatch.state.partition_row import PARTITION_ROW_FIELDS
from elrwatch.state.partitions.columnar import ColumnarPartitions
from elrwatch.state.partitions.columnar import output as columnar_output
from elrwatch.state.partitions.columnar.elections import LEADER_CHANGES
from elrwatch.state.report import STORED_FIELDS


def test_the_inputs_exercise_every_counter_and_leader_change_kind() -> None:
    """The harness's comparison is not vacuous: its inputs move every election counter, reach every last leader
    change kind and every insight counter kind, emit rows, removals and removed topics."""
    counters: Counter[str] = Counter()
    kinds: set[str] = set()
    insight_kinds: set[str] = set()
    rows = removed = 0
    inputs = [corner_stream(), *(simulated(scenario=s) for s in sorted(SCENARIOS))]
    inputs += [(DATA / s / "metadata.dump").read_text().splitlines() for s in REAL]
    for lines in inputs:
        result = run_both(cut(lines, [25] * len(lines)))
        fast = result.state
        assert fast is not None
        counters.update(fast.counters)
        kinds.update(p.last_leader_change for _, p in fast.iter_partitions())
        insight_kinds.update(kind for kind, _ in columnar_output.insight_counts(store_of(fast)))
        rows += result.rows
        removed += len(fast.image.topics.removed)
    elections = {"unclean_elections", "unclean_recovery_finished", "elr_elections", "last_known_leader_elections"}
    assert set(+counters) == elections, counters
    assert kinds == set(LEADER_CHANGES), kinds
    expected = {insight.MISSING, insight.BLOCKING, insight.OFFLINE, insight.TOPIC_UNDER, insight.TOPIC_OFFLINE}
    assert expected | {insight.TOPIC_AT, insight.CAUSE} == insight_kinds, insight_kinds
    assert rows > 0 and removed > 0


def store_of(cluster: ClusterState) -> ColumnarPartitions:
    """The columnar store of a state."""
    store = cluster.partitions
    assert isinstance(store, ColumnarPartitions)
    return store


def test_a_drain_forgets_what_it_returned() -> None:
    fast = ClusterState(default_min_isr=2, bucket=(1, 3))
    parser = Parser("s")
    batches = generator_batches(5)
    fast.apply_batch(parser.records(batches[0]))
    first = columnar_output.drain(store_of(fast))
    assert first.partitions and first.topics and first.brokers and first.transitions
    again = columnar_output.drain(store_of(fast))
    assert again.partitions is None and again.transitions is None
    assert again.removed == again.brokers == again.topics == []
    fast.apply_batch(parser.records(batches[1]))  # a fence: only the broker's partitions changed
    storm = columnar_output.drain(store_of(fast))
    assert 0 < len(storm.partitions) < len(first.partitions)
    row = dict(zip(PARTITION_ROW_FIELDS, next(columnar_output.rows_of(storm.partitions)), strict=True))
    stored = dict(zip((*STORED_FIELDS, "violations", "logInfo"), orjson.loads(row["state"]), strict=True))
    p = fast.partition(row["topicId"], row["partitionId"])
    assert p is not None and stored["isr"] == list(p.isr) and stored["violations"] == []
    assert (row["status"], row["isrSize"], stored["status"]) == (p.status, len(p.isr), p.status)


def test_the_transition_table_holds_what_the_transition_objects_hold() -> None:
    """`transition_table` → `transitions_of` (what the store gets) equals `drain_transitions`' objects as dicts,
    registrations (no previous status: null) included."""
    batches = generator_batches(5)
    states = [ClusterState(default_min_isr=2, bucket=(1, 3)) for _ in range(2)]
    parsers = [Parser("s"), Parser("s")]
    for batch in batches[:3]:
        for state, parser in zip(states, parsers, strict=True):
            state.apply_batch(parser.records(batch))
        objects = [t.to_dict() for t in store_of(states[0]).drain_transitions()]
        dicts = columnar_output.transitions_of(columnar_output.transition_table(store_of(states[1])))
        assert objects == dicts
        assert columnar_output.transition_table(store_of(states[1])) is None  # forgotten
    assert columnar_output.transitions_of(None) == []
    first = ClusterState(default_min_isr=2, bucket=(1, 3))
    first.apply_batch(Parser("s").records(batches[0]))
    registered = columnar_output.transitions_of(columnar_output.transition_table(store_of(first)))
    assert registered and any(t["from"] is None for t in registered) and all(t["to"] for t in registered)


def test_topic_documents_follow_the_owned_partition_count() -> None:
    fast = ClusterState(default_min_isr=2, bucket=(0, 2))
    store = store_of(fast)
    parser = Parser("s")
    emitted: dict[str, int] = {}
    fast.apply_batch(parser.records(generator_batches(5)[0]))
    docs = columnar_output.topic_documents(store, columnar_output.drain(store), emitted)
    assert len(docs) == 3 and sum(d["partitionCount"] for d in docs.values()) == store.table.size
    assert all(d["effectiveMinIsr"] == 2 and d["replicationFactor"] == 3 for d in docs.values()), docs
    assert columnar_output.topic_documents(store, columnar_output.drain(store), emitted) == {}
