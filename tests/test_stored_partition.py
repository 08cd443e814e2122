"""The status store's form of a partition (state/report.py: stored_partition, StoreView): the document it
rebuilds on read equals the replay's document of the state that wrote it, advice included."""

from __future__ import annotations

import pytest
from core_events import valid_stream
from test_advice import _cluster, _strand

from elrwatch.state import report
from elrwatch.state.cluster import STORES, ClusterState
from elrwatch.state.gauges import PipelineCounts
from elrwatch.state.replay import replay_lines
from elrwatch.state.simulator import SCENARIOS
from elrwatch.state.status import NEEDS_ATTENTION

KINDS = ["random-1", "random-2", "random-3", "faults", *sorted(SCENARIOS)]


def _document(cluster: ClusterState) -> dict:
    return report.build_document(cluster, PipelineCounts(), [], report.load_advice())


def _rebuilt_documents(cluster: ClusterState) -> tuple[list[dict], list[dict]]:
    """(replay's partition documents, the same partitions rebuilt from their stored form + the report's
    brokers, cluster and topics, as a store reader sees them)."""
    doc = _document(cluster)
    store_view = report.StoreView.from_docs(doc["brokers"], doc["cluster"], doc["topics"])
    rebuilt = [
        store_view.document(
            topic.name,
            topic.topic_id,
            partition.partition_id,
            cluster.effective_min_isr(topic),
            report.stored_partition(cluster, topic, partition),
        )
        for topic, partition in cluster.iter_partitions()
    ]
    return doc["partitions"], rebuilt


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_stored_partition_rebuilds_the_replay_document(kind: str, store: str) -> None:
    expected, rebuilt = _rebuilt_documents(replay_lines(valid_stream(kind), store=store).cluster)
    assert expected, "the stream created partitions"
    assert rebuilt == expected


def test_the_stored_form_keeps_the_replicas_log_info_for_the_recommendation() -> None:
    cluster, _ = _cluster(_strand, log_info=[(1, None, 100, 3), (2, None, 150, 3)])
    expected, rebuilt = _rebuilt_documents(cluster)
    assert expected[0]["recommendation"]["logInfo"]["basis"] == "log_info"
    assert expected[0]["recommendation"]["candidate"] == 2
    assert rebuilt == expected


def test_a_document_loaded_into_a_store_rebuilds_itself() -> None:
    """stored_from_doc (a report document loaded into a store) keeps every field the document shows."""
    doc = _document(replay_lines(valid_stream("faults")).cluster)
    store_view = report.StoreView.from_docs(doc["brokers"], doc["cluster"], doc["topics"])
    for partition in doc["partitions"]:
        stored = report.stored_from_doc(partition)
        again = store_view.document(
            partition["topic"], partition["topicId"], partition["partitionId"], partition["effectiveMinIsr"], stored
        )
        assert again == partition


def test_needing_an_operator_is_a_status_class() -> None:
    """The store's needs_action column is the status alone (one of the first five): every partition whose
    recommendation has commands has such a status, so it needs no advice when the partition is written."""
    seen: set[tuple[str, bool]] = set()
    for kind in KINDS:
        for partition in _document(replay_lines(valid_stream(kind)).cluster)["partitions"]:
            has_commands = bool(partition["recommendation"]["commands"])
            seen.add((partition["status"], has_commands))
            if partition["status"] != "HEALTHY" and has_commands:
                assert partition["status"] in NEEDS_ATTENTION, partition
    assert {status for status, _ in seen} >= {"HEALTHY", "UNDER_MIN_ISR", "AT_MIN_ISR"}
    assert any(has_commands for _, has_commands in seen)


@pytest.mark.parametrize("store", STORES)
def test_the_stored_form_keeps_the_operator_recovery_steps(store: str) -> None:
    from test_columnar import operator_recovery_stream

    cluster = replay_lines(operator_recovery_stream()[:-3], store=store).cluster
    expected, rebuilt = _rebuilt_documents(cluster)
    recovered = [p for p in expected if "operatorRecovery" in p]
    assert [p["partitionId"] for p in recovered] == [0, 1, 2]
    assert recovered[0]["operatorRecovery"]["summary"].startswith("recovered by operator: elected 2")
    assert rebuilt == expected
    store_view = report.StoreView.from_docs([], {}, [])
    for partition in recovered:  # a report document loaded into a store keeps them too (stored_from_doc)
        again = store_view.document(
            partition["topic"],
            partition["topicId"],
            partition["partitionId"],
            1,
            report.stored_from_doc(partition),
            advice=False,
        )
        assert again["operatorRecovery"] == partition["operatorRecovery"]
