"""The status store's form of a partition (state/report.py: stored_partition, StoreView): the document it
rebuilds on read equals the replay's document of the state that wrote it, advice included."""

from __future__ import annotations

import io

import orjson
import pytest
from core_events import random_stream

from elrwatch.state import report
from elrwatch.state.replay import Replayer, replay_lines
from elrwatch.state.simulator import SCENARIOS, Simulator, simulate
from elrwatch.state.status import NEEDS_ATTENTION


def _stream(kind: str) -> list[bytes]:
    if kind.startswith("random-"):
        return [text.encode() for text in random_stream(int(kind.removeprefix("random-")), steps=300)]
    out = io.BytesIO()
    shape = {"brokers": 6, "topics": 3, "partitions": 8, "replication_factor": 3, "min_isr": 2, "seed": 3}
    if kind == "faults":
        simulate(out, **shape, faults=0.5, records=3000)  # type: ignore[arg-type]
    else:
        simulate(out, **shape, scenario=kind)  # type: ignore[arg-type]
    return out.getvalue().splitlines()


def _rebuilt_documents(replayer: Replayer) -> tuple[list[dict], list[dict]]:
    """(replay's partition documents, the same partitions rebuilt from their stored form + the report's
    brokers, cluster and topics, as a store reader sees them)."""
    cluster = replayer.cluster
    doc = report.build_document(cluster, replayer.counts, replayer.quarantined, report.load_advice())
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


@pytest.mark.parametrize("kind", ["random-1", "random-2", "random-3", "faults", *sorted(SCENARIOS)])
def test_a_stored_partition_rebuilds_the_replay_document(kind: str) -> None:
    replayer = replay_lines(_stream(kind))
    expected, rebuilt = _rebuilt_documents(replayer)
    assert expected, "the stream created partitions"
    assert rebuilt == expected


def test_the_stored_form_keeps_the_replicas_log_info_for_the_recommendation() -> None:
    out = io.BytesIO()
    sim = Simulator(brokers=3, topics=1, partitions=1, replication_factor=3, min_isr=2, seed=4, out=out)
    sim.bootstrap()
    for broker_id in (0, 1, 2):
        sim.fence(broker_id)
    sim.change_min_isr(2)
    for broker_id in (1, 2):
        sim.restart(broker_id, clean=True)
        sim.unfence(broker_id)
    sim.flush()
    lines = out.getvalue().splitlines()
    p = sim.partitions[0]
    for broker_id, end_offset in ((1, 100), (2, 150)):
        data = {
            "topicId": p.topic_id,
            "partitionId": 0,
            "brokerId": broker_id,
            "brokerEpoch": sim.brokers[broker_id].epoch,
            "logEndOffset": end_offset,
            "lastWrittenLeaderEpoch": 3,
            "currentLeaderEpoch": 3,
        }
        lines.append(orjson.dumps({"type": "REPLICA_LOG_INFO_RECORD", "version": 0, "data": data}))
    replayer = replay_lines(lines)
    expected, rebuilt = _rebuilt_documents(replayer)
    assert expected[0]["recommendation"]["logInfo"]["basis"] == "log_info"
    assert expected[0]["recommendation"]["candidate"] == 2
    assert rebuilt == expected


def test_a_document_loaded_into_a_store_rebuilds_itself() -> None:
    """stored_from_doc (a report document loaded into a store) keeps every field the document shows."""
    replayer = replay_lines(_stream("faults"))
    doc = report.build_document(replayer.cluster, replayer.counts, replayer.quarantined, report.load_advice())
    store_view = report.StoreView.from_docs(doc["brokers"], doc["cluster"], doc["topics"])
    for partition in doc["partitions"]:
        stored = report.stored_from_doc(partition)
        again = store_view.document(
            partition["topic"], partition["topicId"], partition["partitionId"], partition["effectiveMinIsr"], stored
        )
        assert again == partition


def test_needing_an_operator_is_a_status_class() -> None:
    """The store's needs_action column is the status alone: exactly the statuses whose recommendation has
    commands (so it needs no advice when the partition is written)."""
    seen: set[tuple[str, bool]] = set()
    for kind in ["random-1", "random-2", "faults", *sorted(SCENARIOS)]:
        replayer = replay_lines(_stream(kind))
        doc = report.build_document(replayer.cluster, replayer.counts, replayer.quarantined, report.load_advice())
        for partition in doc["partitions"]:
            has_commands = bool(partition["recommendation"]["commands"])
            seen.add((partition["status"], has_commands))
            if partition["status"] != "HEALTHY" and has_commands:
                assert partition["status"] in NEEDS_ATTENTION, partition
    assert {status for status, _ in seen} >= {"HEALTHY", "UNDER_MIN_ISR", "AT_MIN_ISR"}
