"""Replay rules of the core (monitor-spec §2–§4, §6; elr-semantics §1.1; DESIGN.md §2–§6) through Replayer/ClusterState."""

from __future__ import annotations

import functools
import gc
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from core_events import (
    OTHER_TOPIC_ID,
    TOPIC_ID,
    Feeder,
    base_cluster,
    broker_change,
    change,
    clear_elr,
    cluster_min_isr,
    config,
    elr_feature,
    envelope,
    fence,
    line,
    partition,
    random_stream,
    register,
    remove_topic,
    topic,
    topic_min_isr,
    unfence,
    unregister,
    valid_stream,
)

from elrwatch.state import report, routing
from elrwatch.state.cluster import ClusterState
from elrwatch.state.gauges import partition_gauges, shared_gauges, sum_gauges
from elrwatch.state.outcome import Outcome
from elrwatch.state.records import Record, parse_line
from elrwatch.state.replay import Replayer
from elrwatch.state.simulator import SCENARIOS

STATUSES = (
    "MANUAL_ELECTION_REQUIRED",
    "RECOVERING",
    "LEADERLESS_WAITING",
    "LEADERLESS_ELECTING",
    "UNDER_MIN_ISR",
    "AT_MIN_ISR",
    "UNDER_REPLICATED",
    "HEALTHY",
)


def reg(p) -> dict[str, Any]:
    """Kafka's registration fields of a PartitionState (`PartitionState.registration`), ELR/LastKnownElr as sets."""
    return {**p.registration(), "elr": set(p.elr), "lastKnownElr": set(p.last_known_elr)}


def state_doc(feeder: Feeder) -> dict[str, Any]:
    """The report document without the parts that count input events (for 'state unchanged' comparisons)."""
    doc = feeder.replayer.document(advice=False)
    for key in ("counts", "quarantined"):
        doc.pop(key)
    doc["gauges"] = {
        k: v
        for k, v in doc["gauges"].items()
        if not k.startswith(
            (
                "elrwatch_events_total",
                "elrwatch_quarantined_records_total",
                "elrwatch_duplicate_records_total",
                "elrwatch_skipped_records_total",
                "elrwatch_last_event_timestamp_seconds",
            )
        )
    }
    return doc


def setup(
    *,
    min_isr: int | None = 2,
    elr_enabled: bool = True,
    fenced: tuple[int, ...] = (),
    brokers=(0, 1, 2, 3),
    **registration: Any,
) -> Feeder:
    """A feeder holding ``brokers`` (``fenced`` fenced), topic foo (its min ISR ``min_isr``) and its partition 0
    made by `core_events.partition` with ``registration``."""
    f = Feeder()
    f.feed(*base_cluster(brokers, elr=elr_enabled))
    f.feed(topic("foo"))
    if min_isr is not None:
        f.feed(topic_min_isr("foo", str(min_isr)))
    f.feed(partition(**registration))
    for b in fenced:
        assert f.feed(broker_change(b, fenced=1)) is Outcome.APPLIED
    return f


# --- PartitionRecord -------------------------------------------------------------------------------------------------


def test_partition_record_replaces_whole_registration() -> None:
    f = setup(
        replicas=(0, 1, 2, 3), isr=(0,), leader=0, elr=[1, 3], last_known_elr=[2], leader_epoch=5, partition_epoch=9
    )
    p = f.part()
    assert reg(p) == {
        "replicas": [0, 1, 2, 3],
        "isr": [0],
        "elr": {1, 3},
        "lastKnownElr": {2},
        "leader": 0,
        "leaderEpoch": 5,
        "partitionEpoch": 9,
        "leaderRecoveryState": 0,
        "addingReplicas": [],
        "removingReplicas": [],
    }
    # a new PartitionRecord without ELR fields: ELR and LastKnownElr become [] (not kept)
    assert (
        f.feed(
            partition(replicas=(2, 1), isr=(1,), leader=1, leader_epoch=6, partition_epoch=10, adding=(2,), removing=())
        )
        is Outcome.APPLIED
    )
    assert reg(f.part()) == {
        "replicas": [2, 1],
        "isr": [1],
        "elr": set(),
        "lastKnownElr": set(),
        "leader": 1,
        "leaderEpoch": 6,
        "partitionEpoch": 10,
        "leaderRecoveryState": 0,
        "addingReplicas": [2],
        "removingReplicas": [],
    }


@pytest.mark.parametrize("version", [0, 1])
def test_partition_record_before_v2_has_empty_elr(version: int) -> None:
    f = setup(replicas=(0, 1, 2), isr=(0,), elr=[1], last_known_elr=[2])
    f.feed(partition(replicas=(0, 1, 2), isr=(0,), leader=0, leader_epoch=1, partition_epoch=1, version=version))
    assert f.part().elr == () and f.part().last_known_elr == ()


def test_partition_record_recovering_state() -> None:
    f = setup(isr=(1,), leader=1, leader_recovery_state=1)
    assert f.part().leader_recovery_state == 1


# --- PartitionChangeRecord -------------------------------------------------------------------------------------------


def test_change_with_leader_bumps_leader_epoch() -> None:
    f = setup(leader_epoch=3, partition_epoch=7)
    f.feed(change(leader=1))
    p = f.part()
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (1, 4, 8)


def test_change_with_same_leader_still_bumps_leader_epoch() -> None:
    f = setup(leader_epoch=3, partition_epoch=7)
    f.feed(change(leader=0))
    p = f.part()
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (0, 4, 8)


def test_change_without_leader_keeps_leader_epoch_and_bumps_partition_epoch() -> None:
    f = setup(leader_epoch=3, partition_epoch=7)
    f.feed(change(isr=[0, 1]))
    f.feed(change(isr=[0, 1, 2]))
    p = f.part()
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (0, 3, 9, (0, 1, 2))


def test_change_leader_minus_one_and_minus_two() -> None:
    f = setup(leader_epoch=3, partition_epoch=7)
    f.feed(change(leader=-1, isr=[]))
    assert (f.part().leader, f.part().leader_epoch) == (-1, 4)
    f.feed(change(leader=-2))  # explicit "no change"
    assert (f.part().leader, f.part().leader_epoch, f.part().partition_epoch) == (-1, 4, 9)


def test_change_absent_fields_keep_and_empty_lists_clear() -> None:
    f = setup(replicas=(0, 1, 2, 3), isr=(0, 1), elr=[2], last_known_elr=[3], min_isr=3)
    f.feed(change(leader=1))
    p = f.part()
    assert reg(p)["isr"] == [0, 1] and p.elr == (2,) and p.last_known_elr == (3,) and p.replicas == (0, 1, 2, 3)
    f.feed(change(eligibleLeaderReplicas=[], lastKnownElr=[]))
    assert f.part().elr == () and f.part().last_known_elr == ()
    assert f.part().isr == (0, 1)
    f.feed(change(isr=[], leader=-1))
    assert f.part().isr == ()


def test_change_lrs_minus_one_keeps_and_values_replace() -> None:
    f = setup(isr=(1,), leader=1, leader_recovery_state=1)
    f.feed(change(leaderRecoveryState=-1, isr=[1, 2]))
    assert f.part().leader_recovery_state == 1
    f.feed(change(leaderRecoveryState=0))
    assert f.part().leader_recovery_state == 0
    f.feed(change(leaderRecoveryState=1, leader=2, isr=[2]))
    assert f.part().leader_recovery_state == 1


def test_change_replaces_replica_lists() -> None:
    f = setup()
    f.feed(change(replicas=[0, 2, 1, 3], removingReplicas=[3], addingReplicas=[0]))
    r = reg(f.part())
    assert (r["replicas"], r["removingReplicas"], r["addingReplicas"]) == ([0, 2, 1, 3], [3], [0])


def test_change_v0_and_v1() -> None:
    f = setup(leader_epoch=0, partition_epoch=0)
    f.feed(change(version=0, isr=[1, 2], leader=1))
    f.feed(change(version=1, isr=[1, 2, 0]))
    p = f.part()
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((1, 2, 0), 1, 1, 2)


# --- ClearElrRecord --------------------------------------------------------------------------------------------------


def _two_topics() -> Feeder:
    """foo-0 (ELR), foo-1 (LastKnownElr only), foo-2 (neither); bar-0 (ELR)."""
    f = Feeder()
    f.feed(*base_cluster())
    f.feed(topic("foo"), topic("bar", OTHER_TOPIC_ID), topic_min_isr("foo", "3"), topic_min_isr("bar", "3"))
    f.feed(partition(TOPIC_ID, 0, (0, 1, 2), (0,), 0, 2, 5, elr=[1, 2]))
    f.feed(partition(TOPIC_ID, 1, (0, 1, 2), (), -1, 2, 5, elr=[], last_known_elr=[0]))
    f.feed(partition(TOPIC_ID, 2, (0, 1, 2), (0, 1, 2), 0, 2, 5))
    f.feed(partition(OTHER_TOPIC_ID, 0, (0, 1, 2), (1,), 1, 2, 5, elr=[0]))
    return f


def test_clear_elr_one_topic() -> None:
    f = _two_topics()
    f.replayer.cluster.drain_changes()
    assert f.feed(clear_elr("foo")) is Outcome.APPLIED
    p0, p1, p2 = (f.part(TOPIC_ID, i) for i in range(3))
    assert (p0.elr, p0.last_known_elr, p0.leader_epoch, p0.partition_epoch) == ((), (), 2, 6)
    assert (p1.elr, p1.last_known_elr, p1.leader_epoch, p1.partition_epoch) == ((), (), 2, 6)
    assert (p2.leader_epoch, p2.partition_epoch) == (2, 5)  # nothing to clear: untouched
    bar = f.part(OTHER_TOPIC_ID, 0)
    assert (bar.elr, bar.partition_epoch) == ((0,), 5)  # other topic untouched
    changed = {(t.topic_id, p.partition_id) for t, p in f.cluster.drain_changes().partitions}
    assert (TOPIC_ID, 2) not in changed and (OTHER_TOPIC_ID, 0) not in changed
    assert {(TOPIC_ID, 0), (TOPIC_ID, 1)} <= changed


def test_clear_elr_all_topics() -> None:
    f = _two_topics()
    assert f.feed(clear_elr("")) is Outcome.APPLIED
    for tid, pid, pe in ((TOPIC_ID, 0, 6), (TOPIC_ID, 1, 6), (TOPIC_ID, 2, 5), (OTHER_TOPIC_ID, 0, 6)):
        p = f.part(tid, pid)
        assert (p.elr, p.last_known_elr, p.leader_epoch, p.partition_epoch) == ((), (), 2, pe), (tid, pid)


def test_clear_elr_unknown_topic_is_quarantined() -> None:
    f = _two_topics()
    before = state_doc(f)
    assert f.feed(clear_elr("nope")) is Outcome.QUARANTINED
    assert f.replayer.quarantined[-1].reason == "unknown_topic"
    assert state_doc(f) == before


# --- RemoveTopicRecord -----------------------------------------------------------------------------------------------


def test_remove_topic_deletes_partitions() -> None:
    f = _two_topics()
    f.cluster.drain_changes()
    assert f.feed(remove_topic(TOPIC_ID)) is Outcome.APPLIED
    assert f.part(TOPIC_ID, 0) is None
    removed = f.cluster.drain_changes().removed
    assert sorted((tid, pid) for tid, pid, *_ in removed) == [(TOPIC_ID, 0), (TOPIC_ID, 1), (TOPIC_ID, 2)]
    doc = f.replayer.document(advice=False)
    assert [(p["topic"], p["partitionId"]) for p in doc["partitions"]] == [("bar", 0)]
    assert [t["topic"] for t in doc["topics"]] == ["bar"]
    assert doc["gauges"]["elrwatch_partition_count"] == 1
    assert doc["gauges"]["elrwatch_topic_count"] == 1
    assert sum(v for k, v in doc["gauges"].items() if k.startswith("elrwatch_partitions{")) == 1
    # later changes for the removed topic are quarantined
    assert f.feed(change(TOPIC_ID, 0, leader=1)) is Outcome.QUARANTINED
    assert f.replayer.quarantined[-1].reason == "unknown_topic"


def test_topic_recreated_with_same_name() -> None:
    f = _two_topics()
    f.feed(remove_topic(TOPIC_ID))
    new_id = "AAAAAAAAAAAAAAAAAAAAEQ"
    assert f.feed(topic("foo", new_id)) is Outcome.APPLIED
    assert f.feed(partition(new_id, 0, (0, 1), (0, 1), 0)) is Outcome.APPLIED
    assert f.doc("foo")["topicId"] == new_id


# --- brokers ---------------------------------------------------------------------------------------------------------


def broker_docs(f: Feeder) -> dict[int, dict[str, Any]]:
    return {b["brokerId"]: b for b in f.replayer.document(advice=False)["brokers"]}


def test_register_broker() -> None:
    f = Feeder()
    assert f.feed(register(1, 101, fenced=True, rack="r1")) is Outcome.APPLIED
    b = broker_docs(f)[1]
    assert (b["epoch"], b["fenced"], b["inControlledShutdown"], b["registered"], b["rack"], b["state"]) == (
        101,
        True,
        False,
        True,
        "r1",
        "fenced",
    )
    assert f.feed(register(2, 7, fenced=False, version=0)) is Outcome.APPLIED
    assert broker_docs(f)[2]["state"] == "active"


@pytest.mark.parametrize("legacy", [False, True])
def test_fence_unfence(legacy: bool) -> None:
    f = setup(isr=(0, 1), leader=0, min_isr=2)
    f.feed(fence(2) if legacy else broker_change(2, fenced=1))
    assert broker_docs(f)[2]["fenced"] is True and broker_docs(f)[2]["state"] == "fenced"
    assert f.doc("foo")["liveElectable"] == [0, 1]
    f.feed(unfence(2) if legacy else broker_change(2, fenced=-1))
    assert broker_docs(f)[2]["fenced"] is False and broker_docs(f)[2]["state"] == "active"


def test_broker_change_fenced_zero_is_no_change() -> None:
    f = setup(fenced=(2,))
    f.feed(broker_change(2, fenced=0))
    assert broker_docs(f)[2]["fenced"] is True


def test_controlled_shutdown_and_reregistration() -> None:
    f = setup(isr=(0, 1, 2))
    f.feed(broker_change(1, in_controlled_shutdown=1))
    b = broker_docs(f)[1]
    assert (b["inControlledShutdown"], b["state"]) == (True, "controlled_shutdown")
    assert 1 not in f.doc("foo")["liveElectable"]
    f.feed(register(1, 101, fenced=True))  # new incarnation
    b = broker_docs(f)[1]
    assert (b["epoch"], b["inControlledShutdown"], b["fenced"], b["state"]) == (101, False, True, "fenced")
    f.feed(broker_change(1, 101, fenced=-1))
    assert broker_docs(f)[1]["state"] == "active"
    assert 1 in f.doc("foo")["liveElectable"]


def test_unregister_broker() -> None:
    f = setup(isr=(0, 1, 2))
    assert f.feed(unregister(2)) is Outcome.APPLIED
    docs = broker_docs(f)
    assert 2 not in docs or docs[2]["registered"] is False
    assert 2 not in f.doc("foo")["liveElectable"]
    gauges = f.replayer.document(advice=False)["gauges"]
    assert gauges['elrwatch_brokers{state="active"}'] == 3
    # a change for an unregistered broker is quarantined
    assert f.feed(broker_change(2, fenced=-1)) is Outcome.QUARANTINED
    assert f.replayer.quarantined[-1].reason == "unknown_broker"


@pytest.mark.parametrize(
    "rec",
    [
        broker_change(1, 99, fenced=1),
        broker_change(1, 101, in_controlled_shutdown=1),
        fence(1, 5),
        unfence(1, 5),
        unregister(1, 42),
    ],
    ids=["brc-fence", "brc-cs", "legacy-fence", "legacy-unfence", "unregister"],
)
def test_broker_epoch_mismatch_is_a_conflict(rec) -> None:
    f = setup()
    before = state_doc(f)
    assert f.feed(rec) is Outcome.QUARANTINED
    err = f.replayer.quarantined[-1]
    assert err.reason == "conflict"
    assert err.field in ("brokerEpoch", "epoch")
    assert state_doc(f) == before


@pytest.mark.parametrize("rec", [broker_change(9, fenced=1), fence(9), unfence(9), unregister(9)])
def test_change_for_unknown_broker_is_quarantined(rec) -> None:
    f = setup()
    before = state_doc(f)
    assert f.feed(rec) is Outcome.QUARANTINED
    assert f.replayer.quarantined[-1].reason == "unknown_broker"
    assert state_doc(f) == before


# --- configs and features --------------------------------------------------------------------------------------------


def test_topic_and_cluster_min_isr_set_and_delete() -> None:
    f = setup(isr=(0, 1), min_isr=None)  # Replayer default min ISR 1
    assert (f.doc("foo")["effectiveMinIsr"], f.doc("foo")["status"]) == (1, "UNDER_REPLICATED")
    f.feed(cluster_min_isr("2"))
    assert (f.doc("foo")["effectiveMinIsr"], f.doc("foo")["status"]) == (2, "AT_MIN_ISR")
    f.feed(topic_min_isr("foo", "3"))
    d = f.doc("foo")
    assert (d["effectiveMinIsr"], d["status"], d["underMinIsr"], d["atMinIsr"]) == (3, "UNDER_MIN_ISR", True, False)
    f.feed(topic_min_isr("foo", None))  # delete: back to the cluster default
    assert (f.doc("foo")["effectiveMinIsr"], f.doc("foo")["status"]) == (2, "AT_MIN_ISR")
    f.feed(cluster_min_isr(None))  # delete: back to elrwatch's default
    assert (f.doc("foo")["effectiveMinIsr"], f.doc("foo")["status"]) == (1, "UNDER_REPLICATED")


def test_default_min_isr_option() -> None:
    f = Feeder(default_min_isr=2)
    f.feed(*base_cluster(), topic("foo"), partition(isr=(0, 1), leader=0))
    assert (f.doc("foo")["effectiveMinIsr"], f.doc("foo")["status"]) == (2, "AT_MIN_ISR")


def test_broker_level_min_isr_is_not_the_cluster_default() -> None:
    f = setup(isr=(0, 1), min_isr=None)
    f.feed(config(4, "1", "min.insync.replicas", "3"))
    assert f.doc("foo")["effectiveMinIsr"] == 1


def test_effective_min_isr_capped_by_partition_zero_replicas() -> None:
    f = Feeder()
    f.feed(*base_cluster((0, 1, 2, 3, 4)), topic("foo"), topic_min_isr("foo", "5"))
    f.feed(partition(TOPIC_ID, 0, (0, 1, 2), (0, 1, 2), 0))
    f.feed(partition(TOPIC_ID, 1, (0, 1, 2, 3), (0, 1, 2), 0))
    assert f.doc("foo", 0)["effectiveMinIsr"] == 3 and f.doc("foo", 0)["status"] == "AT_MIN_ISR"
    assert f.doc("foo", 1)["effectiveMinIsr"] == 3 and f.doc("foo", 1)["status"] == "AT_MIN_ISR"
    # partition 0 grows to 4 replicas: the cap (and partition 1's status) follows
    text, offset = f.next_line(change(TOPIC_ID, 0, replicas=[0, 1, 2, 3], isr=[0, 1, 2, 3]))
    f.cluster.drain_changes()
    f.feed_raw(text)
    assert f.doc("foo", 1)["effectiveMinIsr"] == 4 and f.doc("foo", 1)["status"] == "UNDER_MIN_ISR"
    assert f.doc("foo", 0)["status"] == "AT_MIN_ISR"
    # the new status of partition 1 entered with that record (monitor-spec §2: when it entered its status)
    assert f.doc("foo", 1)["statusSinceOffset"] == offset
    assert f.doc("foo", 1)["statusSinceMs"] == f.timestamp0 + offset * 1000
    transitions = [
        (t.partition_id, t.from_status, t.to_status, t.offset) for t in f.cluster.drain_changes().transitions
    ]
    assert (1, "AT_MIN_ISR", "UNDER_MIN_ISR", offset) in transitions


def test_cluster_default_capped_too() -> None:
    f = Feeder()
    f.feed(*base_cluster(), cluster_min_isr("4"), topic("foo"), partition(replicas=(0, 1), isr=(0, 1)))
    assert f.doc("foo")["effectiveMinIsr"] == 2


def test_elr_feature_toggles_elr_and_status() -> None:
    # ISR and ELR empty, LastKnownElr [0], broker 0 fenced: with ELR, Kafka elects the last known leader when it
    # returns (leaderless, waiting); without ELR nothing elects it (manual election required).
    f = setup(replicas=(0, 1, 2), isr=(), leader=-1, elr=[], last_known_elr=[0], min_isr=2, fenced=(0,))
    doc = f.replayer.document(advice=False)
    assert doc["cluster"]["elrEnabled"] is True and doc["gauges"]["elrwatch_elr_enabled"] == 1
    assert f.doc("foo")["status"] == "LEADERLESS_WAITING"
    f.feed(elr_feature(False))
    doc = f.replayer.document(advice=False)
    assert doc["cluster"]["elrEnabled"] is False and doc["gauges"]["elrwatch_elr_enabled"] == 0
    assert f.doc("foo")["status"] == "MANUAL_ELECTION_REQUIRED"
    f.feed(elr_feature(True))
    assert f.doc("foo")["status"] == "LEADERLESS_WAITING"


def test_unclean_election_config_resolution() -> None:
    f = setup(replicas=(0, 1, 2), isr=(), leader=-1, elr=[], last_known_elr=[], fenced=(0, 1))
    assert f.doc("foo")["status"] == "MANUAL_ELECTION_REQUIRED"
    f.feed(config(4, "", "unclean.leader.election.enable", "true"))
    assert f.doc("foo")["status"] != "MANUAL_ELECTION_REQUIRED"
    f.feed(config(2, "foo", "unclean.leader.election.enable", "false"))  # topic overrides cluster
    assert f.doc("foo")["status"] == "MANUAL_ELECTION_REQUIRED"


# --- unknown topic / partition ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rec", "reason"),
    [
        (change("AAAAAAAAAAAAAAAAAAAAEg", 0, leader=1), "unknown_topic"),
        (partition("AAAAAAAAAAAAAAAAAAAAEg", 0), "unknown_topic"),
        (change(TOPIC_ID, 7, leader=1), "unknown_partition"),
        (remove_topic("AAAAAAAAAAAAAAAAAAAAEg"), "unknown_topic"),
    ],
)
def test_changes_for_unknown_topic_or_partition_are_quarantined(rec, reason: str) -> None:
    f = setup()
    before = state_doc(f)
    assert f.feed(rec) is Outcome.QUARANTINED
    err = f.replayer.quarantined[-1]
    assert err.reason == reason
    assert err.position == f"events.jsonl:{f.seq}"
    assert err.field in ("topicId", "partitionId")
    assert state_doc(f) == before
    doc = f.replayer.document(advice=False)
    assert doc["quarantined"]["count"] == 1 and doc["quarantined"]["byReason"] == {reason: 1}
    assert doc["gauges"][f'elrwatch_quarantined_records_total{{reason="{reason}"}}'] == 1


def test_topic_record_conflict() -> None:
    f = setup()
    assert f.feed(topic("foo", OTHER_TOPIC_ID)) is Outcome.QUARANTINED  # same name, another id
    assert f.replayer.quarantined[-1].reason == "conflict"


# --- exactly-once ----------------------------------------------------------------------------------------------------


def test_same_source_position_twice_is_duplicate() -> None:
    f = setup(leader_epoch=3, partition_epoch=7)
    text, _ = f.next_line(change(leader=1))
    f.seq += 1
    assert f.replayer.feed_line(text, f.source, f.seq) is Outcome.APPLIED
    before = state_doc(f)
    assert f.replayer.feed_line(text, f.source, f.seq) is Outcome.DUPLICATE
    assert f.replayer.feed_line(text, f.source, f.seq - 3) is Outcome.DUPLICATE  # below the last seq too
    assert state_doc(f) == before
    assert (f.part().leader_epoch, f.part().partition_epoch) == (4, 8)
    assert f.replayer.document(advice=False)["counts"]["duplicates"] == 2
    assert f.replayer.document(advice=False)["gauges"]["elrwatch_duplicate_records_total"] == 2


def test_same_position_without_metadata_offset_is_duplicate() -> None:
    f = setup(leader_epoch=3, partition_epoch=7)
    text = line(envelope(*change(leader=1)))
    assert f.replayer.feed_line(text, "events-topic/3", 50) is Outcome.APPLIED
    assert f.replayer.feed_line(text, "events-topic/3", 50) is Outcome.DUPLICATE
    assert (f.part().leader_epoch, f.part().partition_epoch) == (4, 8)
    # another source has its own positions
    assert f.replayer.feed_line(text, "events-topic/4", 1) is Outcome.APPLIED
    assert (f.part().leader_epoch, f.part().partition_epoch) == (5, 9)


REPUBLISHED = {
    "partition_change": change(leader=1, isr=[0, 1]),
    "partition_record": partition(isr=(0, 1), leader=1, leader_epoch=9, partition_epoch=9),
    "broker_change": broker_change(2, fenced=1),
    "legacy_fence": fence(2),
    "register": register(3, 200, fenced=True),
    "unregister": unregister(3),
    "topic_config": topic_min_isr("foo", "3"),
    "cluster_config": cluster_min_isr("3"),
    "feature": elr_feature(False),
    "topic": topic("bar", OTHER_TOPIC_ID),
    "remove_topic": remove_topic(TOPIC_ID),
    "clear_elr": clear_elr("foo"),
}


@pytest.mark.parametrize("name", sorted(REPUBLISHED))
def test_republished_record_with_same_metadata_offset_changes_nothing(name: str) -> None:
    f = setup(replicas=(0, 1, 2), isr=(0,), elr=[1], last_known_elr=[], min_isr=2)
    text, _ = f.next_line(REPUBLISHED[name])
    assert f.feed_raw(text) is Outcome.APPLIED
    before = state_doc(f)
    outcome = f.feed_raw(text)  # same record and offset, later event position (producer retry)
    assert state_doc(f) == before
    if name != "clear_elr":  # ClearElr's entities are partitions; the state check above is what matters there
        assert outcome is Outcome.DUPLICATE
    assert not f.replayer.quarantined


def test_republished_change_with_older_offset_is_duplicate() -> None:
    f = setup(leader_epoch=0, partition_epoch=0)
    first, off1 = f.next_line(change(leader=1))
    second, _ = f.next_line(change(leader=2))
    assert f.feed_raw(first) is Outcome.APPLIED
    assert f.feed_raw(second) is Outcome.APPLIED
    assert f.feed_raw(first) is Outcome.DUPLICATE  # republished older record
    p = f.part()
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (2, 2, 2)
    assert off1 < p.last_offset


def test_republished_clear_elr_after_elr_repopulated_changes_nothing() -> None:
    f = setup(replicas=(0, 1, 2), isr=(0,), elr=[1], min_isr=2)
    clear, _ = f.next_line(clear_elr("foo"))
    assert f.feed_raw(clear) is Outcome.APPLIED
    f.feed(change(isr=[0], eligibleLeaderReplicas=[2]))
    before = reg(f.part())
    f.feed_raw(clear)
    assert reg(f.part()) == before and f.part().elr == (2,)


def test_republished_clear_elr_after_topic_removal_is_not_quarantined() -> None:
    # a producer retry of an old ClearElrRecord (offset below the topic's removal) is a duplicate, not bad input
    f = setup(replicas=(0, 1, 2), isr=(0,), elr=[1], min_isr=2)
    clear, _ = f.next_line(clear_elr("foo"))
    assert f.feed_raw(clear) is Outcome.APPLIED
    assert f.feed(remove_topic()) is Outcome.APPLIED
    before = state_doc(f)
    outcome = f.feed_raw(clear)
    assert state_doc(f) == before
    assert not f.replayer.quarantined, [e.to_dict() for e in f.replayer.quarantined]
    assert outcome is Outcome.DUPLICATE


# --- derived status (monitor-spec §3) --------------------------------------------------------------------------------


def test_status_healthy() -> None:
    assert setup(isr=(0, 1, 2), min_isr=2).doc("foo")["status"] == "HEALTHY"


def test_status_under_replicated() -> None:
    assert setup(isr=(0, 1), min_isr=1).doc("foo")["status"] == "UNDER_REPLICATED"


def test_status_at_min_isr() -> None:
    d = setup(isr=(0, 1), min_isr=2).doc("foo")
    assert (d["status"], d["atMinIsr"], d["underMinIsr"]) == ("AT_MIN_ISR", True, False)


def test_status_under_min_isr() -> None:
    d = setup(isr=(0,), elr=[1], min_isr=2).doc("foo")
    assert (d["status"], d["underMinIsr"], d["leaderless"]) == ("UNDER_MIN_ISR", True, False)
    assert d["electable"] == [0, 1] and d["liveElectable"] == [0, 1]


def test_status_leaderless_electing() -> None:
    d = setup(isr=(), leader=-1, elr=[1, 2], min_isr=2, fenced=(2,)).doc("foo")
    assert (d["status"], d["leaderless"]) == ("LEADERLESS_ELECTING", True)
    assert d["liveElectable"] == [1]


def test_status_leaderless_waiting() -> None:
    d = setup(isr=(), leader=-1, elr=[1, 2], min_isr=2, fenced=(1, 2)).doc("foo")
    assert (d["status"], d["liveElectable"]) == ("LEADERLESS_WAITING", [])


def test_status_leaderless_waiting_then_electing_on_unfence() -> None:
    f = setup(isr=(), leader=-1, elr=[1, 2], min_isr=2, fenced=(1, 2))
    f.feed(broker_change(2, fenced=-1))
    assert f.doc("foo")["status"] == "LEADERLESS_ELECTING"


def test_status_last_replica_standing_without_elr() -> None:
    # ELR disabled: the ISR keeps its last member while the partition is leaderless (elr-semantics §2.6)
    f = setup(isr=(2,), leader=-1, min_isr=2, elr_enabled=False, fenced=(0, 1, 2))
    assert f.doc("foo")["status"] == "LEADERLESS_WAITING"
    f.feed(broker_change(2, fenced=-1))
    assert f.doc("foo")["status"] == "LEADERLESS_ELECTING"


def test_status_manual_election_required_after_clear_elr() -> None:
    # conformance scenario-clear-elr-strands-leaderless-partition, as events
    f = setup(
        replicas=(0, 1, 2, 3),
        isr=(),
        leader=-1,
        elr=[0, 1, 2],
        last_known_elr=[0],
        min_isr=3,
        leader_epoch=1,
        partition_epoch=4,
        fenced=(0, 1, 2, 3),
    )
    assert f.doc("foo")["status"] == "LEADERLESS_WAITING"
    f.feed(topic_min_isr("foo", "2"), clear_elr("foo"))
    d = f.doc("foo")
    assert (d["elr"], d["lastKnownElr"], d["partitionEpoch"], d["leaderEpoch"]) == ([], [], 5, 1)
    assert d["status"] == "MANUAL_ELECTION_REQUIRED"
    f.feed(broker_change(1, fenced=-1))  # former ELR member back: still nobody Kafka would elect
    assert f.doc("foo")["status"] == "MANUAL_ELECTION_REQUIRED"
    gauges = f.replayer.document(advice=False)["gauges"]
    assert gauges["elrwatch_manual_leader_election_required_partitions"] == 1
    assert gauges['elrwatch_partitions{status="MANUAL_ELECTION_REQUIRED"}'] == 1


def test_status_recovering_and_recovered() -> None:
    f = setup(isr=(1,), leader=1, leader_recovery_state=1, min_isr=2)
    d = f.doc("foo")
    assert d["status"] == "RECOVERING"
    gauges = f.replayer.document(advice=False)["gauges"]
    assert gauges["elrwatch_recovering_partitions"] == 1
    assert gauges["elrwatch_unclean_recovery_partitions"] == 1
    f.feed(change(leaderRecoveryState=0, isr=[1, 2]))
    assert f.doc("foo")["status"] == "AT_MIN_ISR"
    gauges = f.replayer.document(advice=False)["gauges"]
    assert gauges["elrwatch_recovering_partitions"] == 0
    assert gauges["elrwatch_unclean_recovery_finished_total"] == 1


def test_status_transition_is_recorded_with_its_record() -> None:
    f = setup(isr=(0, 1, 2), min_isr=2)
    f.cluster.drain_changes()
    text, offset = f.next_line(change(isr=[0, 1]))
    f.feed_raw(text)
    changes = f.cluster.drain_changes()
    assert [(t.from_status, t.to_status, t.offset) for t in changes.transitions] == [("HEALTHY", "AT_MIN_ISR", offset)]
    d = f.doc("foo")
    assert (d["statusSinceOffset"], d["lastOffset"], d["lastPosition"]) == (offset, offset, f"events.jsonl:{f.seq}")


def test_status_elr_member_in_controlled_shutdown_is_not_live() -> None:
    f = setup(isr=(), leader=-1, elr=[1], min_isr=2)
    assert f.doc("foo")["status"] == "LEADERLESS_ELECTING"
    f.feed(broker_change(1, in_controlled_shutdown=1))
    assert f.doc("foo")["status"] == "LEADERLESS_WAITING"


def test_status_fenced_isr_member_blocks_live_elr_member() -> None:
    # valid(r) needs r in the ISR, or an empty ISR and r in the ELR (elr-semantics §2.3): a live ELR member cannot
    # be elected while a (fenced) ISR member remains, so Kafka waits for the ISR member.
    f = setup(replicas=(0, 1, 2), isr=(0,), leader=-1, elr=[1], min_isr=2, fenced=(0,))
    assert f.doc("foo")["status"] == "LEADERLESS_WAITING"


def test_status_last_known_leader_live_is_electing_with_unclean_recovery() -> None:
    f = setup(isr=(), leader=-1, elr=[], last_known_elr=[0], min_isr=2)
    assert f.doc("foo")["status"] == "LEADERLESS_ELECTING"
    assert f.replayer.document(advice=False)["gauges"]["elrwatch_unclean_recovery_partitions"] == 1


# --- election counters and the last leader change (monitor-spec §2, §4; metrics.md §1) -------------------------------


def _counters(f: Feeder) -> tuple[int, int, int]:
    g = f.replayer.document(advice=False)["gauges"]
    return (
        g["elrwatch_elr_elections_total"],
        g["elrwatch_unclean_elections_total"],
        g["elrwatch_last_known_leader_elections_total"],
    )


def test_elr_election_counted() -> None:
    f = setup(isr=(), leader=-1, elr=[1, 2], min_isr=2)
    f.feed(change(leader=1, isr=[1], eligibleLeaderReplicas=[2]))
    assert _counters(f) == (1, 0, 0)
    assert f.doc("foo")["lastLeaderChange"] == "elr"


def test_last_known_leader_election_counted_as_unclean_too() -> None:
    f = setup(isr=(), leader=-1, elr=[], last_known_elr=[0], min_isr=2)
    f.feed(change(leader=0, isr=[0], leaderRecoveryState=1, lastKnownElr=[]))
    assert _counters(f) == (0, 1, 1)
    d = f.doc("foo")
    assert (d["lastLeaderChange"], d["status"]) == ("last_known_leader", "RECOVERING")


def test_unclean_election_counted() -> None:
    f = setup(isr=(), leader=-1, elr=[], last_known_elr=[], min_isr=2)
    f.feed(change(leader=2, isr=[2], leaderRecoveryState=1))
    assert _counters(f) == (0, 1, 0)
    assert f.doc("foo")["lastLeaderChange"] == "unclean"


def test_clean_election_and_lost_leader() -> None:
    f = setup(isr=(0, 1, 2), min_isr=2)
    f.feed(change(leader=1))
    assert _counters(f) == (0, 0, 0)
    assert f.doc("foo")["lastLeaderChange"] == "clean"
    f.feed(change(leader=-1, isr=[]))
    assert f.doc("foo")["lastLeaderChange"] == "lost"


def test_partition_record_replacing_counts_elections() -> None:
    f = setup(isr=(), leader=-1, elr=[1, 2], min_isr=2)
    f.feed(partition(isr=(1,), leader=1, leader_epoch=1, partition_epoch=1, elr=[2]))
    f.feed(partition(isr=(2,), leader=2, leader_epoch=2, partition_epoch=2, leader_recovery_state=1))
    assert _counters(f)[:2] == (2, 1)


# --- gauges ----------------------------------------------------------------------------------------------------------


def _mixed() -> Feeder:
    f = Feeder()
    f.feed(*base_cluster((0, 1, 2, 3)), topic("foo"), topic_min_isr("foo", "2"))
    specs = [
        dict(isr=(0, 1, 2)),
        dict(isr=(0, 1)),
        dict(isr=(0,), elr=[1]),
        dict(isr=(), leader=-1, elr=[1, 2]),
        dict(isr=(), leader=-1, elr=[3]),
        dict(isr=(1,), leader=1, leader_recovery_state=1),
        dict(isr=(), leader=-1, elr=[], last_known_elr=[]),
        dict(isr=(), leader=-1, elr=[], last_known_elr=[0]),
        dict(replicas=(1, 2, 3), isr=(1, 2, 3)),
        dict(replicas=(0, 1, 2, 3), isr=(0, 1, 2)),
    ]
    for pid, spec in enumerate(specs):
        spec.setdefault("replicas", (0, 1, 2, 3) if pid == 4 else (0, 1, 2))
        f.feed(partition(TOPIC_ID, pid, **spec))
    f.feed(broker_change(3, fenced=1), broker_change(0, in_controlled_shutdown=1))
    return f


def test_gauges_match_partition_statuses() -> None:
    doc = _mixed().replayer.document(advice=False)
    parts, gauges = doc["partitions"], doc["gauges"]
    for status in STATUSES:
        assert gauges[f'elrwatch_partitions{{status="{status}"}}'] == sum(p["status"] == status for p in parts)
    assert {p["status"] for p in parts} >= {
        "HEALTHY",
        "AT_MIN_ISR",
        "UNDER_MIN_ISR",
        "LEADERLESS_ELECTING",
        "LEADERLESS_WAITING",
        "RECOVERING",
        "MANUAL_ELECTION_REQUIRED",
    }
    assert gauges["elrwatch_global_under_min_isr_partitions"] == sum(p["underMinIsr"] for p in parts)
    assert gauges["elrwatch_at_min_isr_partitions"] == sum(p["atMinIsr"] for p in parts)
    assert gauges["elrwatch_offline_partitions"] == sum(p["leaderless"] for p in parts)
    assert gauges["elrwatch_manual_leader_election_required_partitions"] == sum(
        p["status"] == "MANUAL_ELECTION_REQUIRED" for p in parts
    )
    assert gauges["elrwatch_recovering_partitions"] == sum(p["leaderRecoveryState"] == 1 for p in parts)
    assert gauges["elrwatch_partition_count"] == len(parts) == 10
    assert gauges["elrwatch_topic_count"] == 1
    for label, test in (
        ("0", lambda n: n == 0),
        ("1", lambda n: n == 1),
        ("2", lambda n: n == 2),
        ("3+", lambda n: n >= 3),
    ):
        want = sum(test(len(p["liveElectable"])) for p in parts)
        assert gauges[f'elrwatch_electable_leaders_partitions{{live_electable="{label}"}}'] == want, label
    assert gauges['elrwatch_brokers{state="active"}'] == 2
    assert gauges['elrwatch_brokers{state="fenced"}'] == 1
    assert gauges['elrwatch_brokers{state="controlled_shutdown"}'] == 1
    for p in parts:
        assert p["liveElectable"] == [b for b in p["electable"] if b in (1, 2)]
        assert p["electable"] == sorted(set(p["isr"]) | set(p["elr"]))


# --- audit (monitor-spec §6) -----------------------------------------------------------------------------------------


def _violation(f: Feeder, kind: str) -> dict[str, Any]:
    doc = f.replayer.document(advice=False)
    found = [v for v in doc["violations"] if v["kind"] == kind]
    assert len(found) == 1, doc["violations"]
    assert doc["gauges"][f'elrwatch_invariant_violations{{kind="{kind}"}}'] == 1
    assert kind in f.doc(found[0]["topic"], found[0]["partitionId"])["violations"]
    return found[0]


AUDIT_CASES = {
    "isr_elr_overlap": (dict(min_isr=3, isr=(0, 1, 2)), change(isr=[0, 1], eligibleLeaderReplicas=[1])),
    "elr_not_under_min_isr": (
        dict(replicas=(0, 1, 2, 3), isr=(0, 1, 2), min_isr=2),
        change(eligibleLeaderReplicas=[3]),
    ),
    "isr_not_in_replicas": (dict(isr=(0, 1, 2), min_isr=2), change(isr=[0, 1, 3])),
    "elr_not_in_replicas": (dict(isr=(0, 1, 2), min_isr=2), change(isr=[0], eligibleLeaderReplicas=[3])),
    "leader_not_in_isr": (dict(isr=(0, 1), min_isr=2), change(leader=2)),
    "ineligible_broker_in_isr": (dict(isr=(0, 1, 2), min_isr=2), broker_change(1, fenced=1)),
    "epoch_decreased": (
        dict(isr=(0, 1, 2), min_isr=2, leader_epoch=5, partition_epoch=5),
        partition(isr=(0, 1, 2), leader=0, leader_epoch=3, partition_epoch=4),
    ),
    "durability_margin_lost": (dict(isr=(0, 1, 2), min_isr=2, elr_enabled=False), change(isr=[0])),
}


@pytest.mark.parametrize("kind", sorted(AUDIT_CASES))
def test_audit_violation_names_its_record(kind: str) -> None:
    kwargs, rec = AUDIT_CASES[kind]
    f = setup(**kwargs)
    assert not f.replayer.document(advice=False)["violations"]
    text, offset = f.next_line(rec)
    assert f.feed_raw(text) is Outcome.APPLIED
    v = _violation(f, kind)
    assert (v["topic"], v["partitionId"], v["offset"], v["position"]) == ("foo", 0, offset, f"events.jsonl:{f.seq}")
    assert v["detail"]


def test_audit_kinds_cover_state_audit() -> None:
    from elrwatch.state.audit import VIOLATION_KINDS

    assert set(VIOLATION_KINDS) == set(AUDIT_CASES)


def test_audit_violation_keeps_the_record_that_caused_it_and_clears() -> None:
    f = setup(isr=(0, 1), min_isr=2)
    text, offset = f.next_line(change(leader=2))
    f.feed_raw(text)
    f.feed(change(isr=[0, 1]))  # unrelated change, violation persists
    assert _violation(f, "leader_not_in_isr")["offset"] == offset
    f.feed(change(isr=[0, 1, 2]))
    doc = f.replayer.document(advice=False)
    assert not [v for v in doc["violations"] if v["kind"] == "leader_not_in_isr"]
    assert doc["gauges"]['elrwatch_invariant_violations{kind="leader_not_in_isr"}'] == 0


# --- buckets (DESIGN.md §4) ------------------------------------------------------------------------------------------


def _bucketed(lines: list[str], n: int) -> tuple[ClusterState, list[ClusterState]]:
    whole = ClusterState()
    buckets = [ClusterState(bucket=(i, n)) for i in range(n)]
    for seq, text in enumerate(lines, start=1):
        rec = parse_line(text, "events.jsonl", seq)
        assert isinstance(rec, Record), rec
        whole.apply(rec)
        target = routing.targets(rec.type, rec.data, n)
        for i in range(n) if target == routing.ALL_BUCKETS else [target]:
            buckets[i].apply(rec)
    return whole, buckets


def _docs(cluster: ClusterState) -> list[dict[str, Any]]:
    return [report.partition_doc(cluster, t, p) for t, p in cluster.iter_partitions()]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("n", [1, 2, 5])
def test_buckets_sum_to_the_whole(seed: int, n: int) -> None:
    lines = random_stream(seed, steps=120)
    whole, buckets = _bucketed(lines, n)
    assert sum_gauges(partition_gauges(b) for b in buckets) == {k: v for k, v in partition_gauges(whole).items()}
    docs = sorted((d for b in buckets for d in _docs(b)), key=lambda d: (d["topic"], d["partitionId"]))
    assert docs == _docs(whole)
    assert shared_gauges(buckets[0]) == shared_gauges(whole)
    quarantined_whole = len(whole.drain_changes().quarantined)
    assert sum(len(b.drain_changes().quarantined) for b in buckets) == quarantined_whole


def test_buckets_with_quarantined_records() -> None:
    lines = random_stream(3, steps=40)
    lines += [
        line(envelope(*change("AAAAAAAAAAAAAAAAAAAAEg", 0, leader=1), offset=10_000)),
        line(envelope(*change("AAAAAAAAAAAAAAAAAAAAEg", 5, leader=1), offset=10_001)),
        line(envelope(*broker_change(42, fenced=1), offset=10_002)),
    ]
    whole, buckets = _bucketed(lines, 4)
    assert len(whole.drain_changes().quarantined) == 3
    assert sum(len(b.drain_changes().quarantined) for b in buckets) == 3


# --- serialization ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_to_bytes_from_bytes_round_trip(seed: int) -> None:
    replayer = Replayer()
    replayer.feed_lines(random_stream(seed, steps=100), "events.jsonl")
    doc = replayer.document(advice=False)
    for compress in (True, False):
        blob = replayer.cluster.to_bytes(compress=compress)
        assert isinstance(blob, bytes)
        restored = ClusterState.from_bytes(blob)
        again = report.build_document(restored, replayer.counts, replayer.quarantined)
        assert again == doc


def test_round_trip_of_mixed_state_and_bucketed_state() -> None:
    f = _mixed()
    doc = f.replayer.document(advice=False)
    restored = ClusterState.from_bytes(f.cluster.to_bytes())
    assert report.build_document(restored, f.replayer.counts, f.replayer.quarantined) == doc
    _, buckets = _bucketed(random_stream(11, steps=60), 3)
    for b in buckets:
        r = ClusterState.from_bytes(b.to_bytes())
        assert r.bucket == b.bucket
        assert _docs(r) == _docs(b) and partition_gauges(r) == partition_gauges(b)


def test_pickled_field_lists_name_every_field() -> None:
    """The explicit pickled forms cannot drift from the classes."""
    import ast
    import dataclasses
    from pathlib import Path

    from elrwatch.state import model, partitions, records
    from elrwatch.state.partitions import objects

    for cls, names in (
        (model.BrokerState, model.BROKER_FIELDS),
        (model.TopicState, model.TOPIC_FIELDS),
        (records.RecordError, records.RECORD_ERROR_FIELDS),
        (partitions.Transition, partitions.TRANSITION_FIELDS),
    ):
        assert tuple(f.name for f in dataclasses.fields(cls)) == names, cls.__name__
    # PartitionState: every attribute __init__ sets, in the pickled order
    source = (Path(__file__).parent.parent / "state" / "model.py").read_text()
    init = next(
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == "__init__" and node.args.args[1].arg == "topic_id"
    )
    assigned = [t.attr for n in ast.walk(init) if isinstance(n, ast.Assign | ast.AnnAssign) for t in (
        n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Attribute)]  # fmt: skip
    assert sorted(assigned) == sorted(model.PARTITION_FIELDS)
    # The object store: a pickle keeps every public attribute its __init__ (and its base's) sets but the image
    public = set()
    for path, name in (("objects.py", "ObjectPartitions"), ("__init__.py", "PartitionStore")):
        source = (Path(__file__).parent.parent / "state" / "partitions" / path).read_text()
        state_class = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == name)
        init = next(n for n in state_class.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        public |= {
            t.attr
            for n in ast.walk(init)
            if isinstance(n, ast.Assign | ast.AnnAssign)
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Attribute) and not t.attr.startswith("_")
        }
    assert public - {"image"} == set(objects.PERSISTED)


def garbage_in_cycles(kind: str) -> dict[str, int]:
    """Apply ``kind``'s valid stream with the collector off, drain the changes and build the document; then the
    objects a collection finds in reference cycles, with the replay's counts."""
    lines = valid_stream(kind)
    warm = Replayer(track_changes=True)  # every path once first: what imports and builds on first use makes cycles
    warm.feed_lines(lines, "warm")
    report.build_document(warm.cluster, warm.counts, warm.quarantined, report.load_advice())
    del warm
    gc.collect()
    gc.disable()
    try:
        replayer = Replayer(track_changes=True)
        for start in range(0, len(lines), 50):
            replayer.feed_lines(lines[start : start + 50], "good", first_seq=start + 1)
            replayer.cluster.drain_changes()
        report.build_document(replayer.cluster, replayer.counts, replayer.quarantined, report.load_advice())
        garbage = gc.collect()
    finally:
        gc.enable()
    return {"lines": len(lines), "applied": replayer.counts.applied, "quarantined": len(replayer.quarantined),
            "garbage": garbage}  # fmt: skip


CYCLE_KINDS = ("random-1", "random-2", "random-3", "faults", *sorted(SCENARIOS))


@functools.cache
def _garbage_in_cycles_alone() -> dict[str, dict[str, int]]:
    """`garbage_in_cycles` of every kind, measured in an interpreter of its own: a collection counts the garbage of
    every thread of the process (an xdist worker's, a Kafka client's)."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); from test_replay_rules import garbage_in_cycles; "
        "print(json.dumps({kind: garbage_in_cycles(kind) for kind in sys.argv[2:]}))"
    )
    done = subprocess.run(
        [sys.executable, "-P", "-c", code, os.path.dirname(__file__), *CYCLE_KINDS],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("kind", CYCLE_KINDS)
def test_applying_good_records_makes_no_reference_cycles(kind: str) -> None:
    """`Replayer.feed_lines` freezes the state without a collection when nothing was quarantined: safe only
    because applying good records, draining the changes and building the document never make a reference cycle."""
    counts = _garbage_in_cycles_alone()[kind]
    assert counts["quarantined"] == 0 and counts["applied"] == counts["lines"]
    assert counts["garbage"] == 0


def test_a_collection_precedes_the_freeze_only_after_quarantined_records(monkeypatch: pytest.MonkeyPatch) -> None:
    from elrwatch.state import replay as replay_module

    collections: list[int] = []
    freezes: list[bool] = []
    monkeypatch.setattr(replay_module, "GC_FREEZE_EVERY", 4)
    monkeypatch.setattr(replay_module.gc, "collect", lambda generation=2: collections.append(generation) or 0)
    monkeypatch.setattr(replay_module.gc, "freeze", lambda: freezes.append(True))
    good = [text.encode() for text in random_stream(1)]
    Replayer().feed_lines(good[:8], "clean")
    assert collections == [] and len(freezes) == 2
    Replayer().feed_lines([b"{not json", *good[:7]], "faulty")
    assert collections == [1] and len(freezes) == 4
