"""Operator insight (state/insight.py): each partition's contribution to the per-broker, per-topic and per-cause
gauges; the counters of both partition stores (the object store's kept incrementally, the columnar store's counted
from its columns) equal a from-scratch recount; bucketed states; persistence."""

from __future__ import annotations

import random
from typing import Any

import pytest
from core_events import (
    TOPIC_ID,
    Feeder,
    base_cluster,
    broker_change,
    change,
    envelope,
    fence,
    line,
    partition,
    random_stream,
    register,
    remove_topic,
    topic,
    topic_min_isr,
    unregister,
)
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from elrwatch.state import insight, routing
from elrwatch.state.cluster import STORES, ClusterState
from elrwatch.state.gauges import all_gauges, as_samples, partition_gauges, shared_gauges, sum_gauges
from elrwatch.state.gauges import with_unregistered_brokers as with_unregistered
from elrwatch.state.partitions.columnar import ColumnarPartitions
from elrwatch.state.partitions.columnar import output as columnar_output
from elrwatch.state.partitions.columnar import snapshot as columnar_snapshot
from elrwatch.state.partitions.objects import ObjectPartitions
from elrwatch.state.records import Record, parse_line
from elrwatch.state.replay import Replayer

STREAMS = settings(
    max_examples=30,
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow],
)
CS, LAG, FEN, UNR = (
    insight.CAUSE_CONTROLLED_SHUTDOWN,
    insight.CAUSE_LAGGING,
    insight.CAUSE_FENCED,
    insight.CAUSE_UNREGISTERED,
)


# --- the contribution of one partition (plain values) -----------------------------------------------------------


def test_a_healthy_partition_contributes_nothing() -> None:
    assert insight.contribution((0, 1, 2), (0, 1, 2), (), 0, 2, {0: LAG, 1: LAG, 2: LAG}, {0, 1, 2}) is None


def test_missing_replicas_blocking_members_and_the_dominant_cause() -> None:
    causes = {0: LAG, 1: FEN, 2: CS}
    missing, blocking, critical, bits, cause = insight.contribution((0, 1, 2), (0,), (), 0, 2, causes, {0})
    assert missing == (1, 2)
    assert blocking == (0,)  # |ISR| - 1 = 0 < 2
    assert critical == 0  # the only active member of ISR ∪ ELR
    assert bits == insight.T_UNDER_MIN_ISR
    assert cause == FEN  # fenced outranks controlled shutdown


def test_at_min_isr_every_member_blocks_a_restart_but_none_is_critical() -> None:
    part = insight.contribution((0, 1, 2), (0, 1), (), 0, 2, {2: CS}, {0, 1})
    assert part == ((2,), (0, 1), -1, insight.T_AT_MIN_ISR, insight.NO_CAUSE)


def test_an_elr_member_that_is_active_keeps_the_partition_electable() -> None:
    # ISR {0}, ELR {1}: stopping 0 leaves 1 electable, so 0 is not critical
    part = insight.contribution((0, 1, 2), (0,), (1,), 0, 2, {1: LAG, 2: FEN}, {0, 1})
    assert part is not None and part[2] == -1
    # the ELR member fenced: 0 is the only active one
    part = insight.contribution((0, 1, 2), (0,), (1,), 0, 2, {1: FEN, 2: FEN}, {0})
    assert part is not None and part[2] == 0


def test_a_leaderless_partition_is_offline_and_never_critical() -> None:
    part = insight.contribution((0, 1), (1,), (), -1, 2, {0: UNR}, {1})
    assert part == ((0,), (1,), -1, insight.T_UNDER_MIN_ISR | insight.T_OFFLINE, UNR)


def test_controlled_shutdown_is_the_cause_only_when_every_missing_replica_is_planned() -> None:
    assert insight.contribution((0, 1, 2), (0,), (), 0, 2, {1: CS, 2: CS}, {0})[4] == CS  # type: ignore[index]
    assert insight.contribution((0, 1, 2), (0,), (), 0, 2, {1: CS, 2: LAG}, {0})[4] == LAG  # type: ignore[index]
    assert insight.contribution((0, 1, 2), (0,), (), 0, 2, {1: CS}, {0})[4] == UNR  # type: ignore[index]


def test_under_min_isr_without_a_missing_replica_counts_as_lagging() -> None:
    # replica count 2 below the topic's effective min ISR 3 (set by partition 0's replica count)
    assert insight.contribution((0, 1), (0, 1), (), 0, 3, {}, {0, 1}) == ((), (0, 1), -1, 1, LAG)


def test_broker_cause_keeps_a_fenced_controlled_shutdown_planned() -> None:
    from elrwatch.state.model import BrokerState

    assert insight.broker_cause(None) == UNR
    assert insight.broker_cause(BrokerState(1, registered=False, fenced=True, in_controlled_shutdown=True)) == UNR
    assert insight.broker_cause(BrokerState(1, fenced=True, in_controlled_shutdown=True)) == CS
    assert insight.broker_cause(BrokerState(1, fenced=False, in_controlled_shutdown=True)) == CS
    assert insight.broker_cause(BrokerState(1, fenced=True)) == FEN
    assert insight.broker_cause(BrokerState(1, fenced=False)) == LAG


# --- the core's counters and gauges through records ---------------------------------------------------------------


def _gauges(cluster: ClusterState, prefix: str) -> dict[str, float]:
    return {k: v for k, v in as_samples(partition_gauges(cluster)).items() if k.startswith(prefix)}


def _counts(cluster: ClusterState) -> Any:
    """The store's insight counters: the object store's incremental ones, the columnar store's from its columns."""
    store = cluster.partitions
    if isinstance(store, ObjectPartitions):
        return store.insight_counts
    assert isinstance(store, ColumnarPartitions)
    store.flush()  # records applied one by one wait in the segment: the output reads the table after a flush
    return columnar_output.insight_counts(store)


def _rolling_restart_feeder(store: str) -> Feeder:
    """Brokers 0-2, topic 'orders' (min ISR 2) with partitions 0 (replicas 0,1,2) and 1 (replicas 1,2)."""
    f = Feeder(replayer=Replayer(store=store))
    other = "BBBBBBBBBBBBBBBBBBBBBQ"
    f.feed(
        *base_cluster((0, 1, 2)),
        topic("orders"),
        topic_min_isr("orders", "2"),
        partition(TOPIC_ID, 0, [0, 1, 2], [0, 1, 2], 0),
        partition(TOPIC_ID, 1, [1, 2, 0], [1, 2], 1),
        topic("other", other),
        partition(other, 0, [2], [2], 2),
    )
    return f


@pytest.mark.parametrize("store", STORES)
def test_per_broker_per_topic_and_cause_gauges_through_a_rolling_restart(store: str) -> None:
    f = _rolling_restart_feeder(store)
    g = _gauges(f.cluster, "elrwatch_broker_")
    # orders-1 misses 0 (lagging); it is at min ISR: 1 and 2 block a restart; other-0 (min ISR 1, RF 1): 2 is the
    # only electable replica, and stopping it leaves other-0 under min ISR
    assert g == {
        'elrwatch_broker_isr_missing_partitions{broker="0"}': 1,
        'elrwatch_broker_isr_missing_partitions{broker="1"}': 0,
        'elrwatch_broker_isr_missing_partitions{broker="2"}': 0,
        'elrwatch_broker_restart_blocking_partitions{broker="0"}': 0,
        'elrwatch_broker_restart_blocking_partitions{broker="1"}': 1,
        'elrwatch_broker_restart_blocking_partitions{broker="2"}': 2,
        'elrwatch_broker_restart_offline_partitions{broker="0"}': 0,
        'elrwatch_broker_restart_offline_partitions{broker="1"}': 0,
        'elrwatch_broker_restart_offline_partitions{broker="2"}': 1,
    }
    assert _gauges(f.cluster, "elrwatch_topic_") == {
        'elrwatch_topic_at_min_isr_partitions{topic="orders"}': 1,
        'elrwatch_topic_at_min_isr_partitions{topic="other"}': 1,
    }
    causes = _gauges(f.cluster, "elrwatch_under_min_isr_partitions_by_cause")
    assert set(causes.values()) == {0} and len(causes) == 4  # every cause, 0 when none

    # broker 1 starts a controlled shutdown: it leaves the ISRs (as Kafka's controller does), then it is fenced
    f.feed(
        broker_change(1, in_controlled_shutdown=1),
        change(TOPIC_ID, 0, isr=[0, 2]),
        change(TOPIC_ID, 1, isr=[2], leader=2),
        broker_change(1, fenced=1),
    )
    causes = _gauges(f.cluster, "elrwatch_under_min_isr_partitions_by_cause")
    assert causes['elrwatch_under_min_isr_partitions_by_cause{cause="controlled_shutdown"}'] == 0
    # orders-1 misses 1 (planned) and 0 (lagging): lagging dominates
    assert causes['elrwatch_under_min_isr_partitions_by_cause{cause="lagging"}'] == 1
    assert _gauges(f.cluster, "elrwatch_topic_under")['elrwatch_topic_under_min_isr_partitions{topic="orders"}'] == 1
    assert f.doc("orders", 1)["missingReplicas"] == [
        {"brokerId": 1, "cause": "controlled_shutdown"},
        {"brokerId": 0, "cause": "lagging"},
    ]
    # broker 0 catches up: only the planned shutdown explains orders-1 now
    f.feed(change(TOPIC_ID, 1, isr=[2, 0]))
    assert _gauges(f.cluster, "elrwatch_under_min_isr_partitions_by_cause") == {
        f'elrwatch_under_min_isr_partitions_by_cause{{cause="{c}"}}': 0 for c in insight.CAUSES
    }
    # with min ISR 3 both partitions are under it, each missing only the broker in its planned shutdown
    f.feed(topic_min_isr("orders", "3"))
    assert (
        _gauges(f.cluster, "elrwatch_under_min_isr_partitions_by_cause")[
            'elrwatch_under_min_isr_partitions_by_cause{cause="controlled_shutdown"}'
        ]
        == 2
    )
    # the broker registers again (a new incarnation, fenced): its replicas are missing because it is fenced
    f.feed(register(1, epoch=101, fenced=True))
    assert f.doc("orders", 1)["missingReplicas"][0] == {"brokerId": 1, "cause": "fenced"}
    assert (
        _gauges(f.cluster, "elrwatch_under_min_isr_partitions_by_cause")[
            'elrwatch_under_min_isr_partitions_by_cause{cause="fenced"}'
        ]
        == 2
    )
    # unregistered: its series disappear and its replicas are missing as unregistered
    f.feed(unregister(1, epoch=101))
    assert not any('broker="1"' in k for k in _gauges(f.cluster, "elrwatch_broker_"))
    assert f.doc("orders", 1)["missingReplicas"][0] == {"brokerId": 1, "cause": "unregistered"}
    # the topic back to full health: its series are dropped
    f.feed(
        register(1, epoch=102),
        change(TOPIC_ID, 0, isr=[0, 1, 2]),
        change(TOPIC_ID, 1, isr=[2, 0, 1]),
        topic_min_isr("orders", "2"),
    )
    assert _gauges(f.cluster, "elrwatch_topic_") == {'elrwatch_topic_at_min_isr_partitions{topic="other"}': 1}
    f.feed(remove_topic("BBBBBBBBBBBBBBBBBBBBBQ"))
    assert _gauges(f.cluster, "elrwatch_topic_") == {}
    assert _counts(f.cluster) == insight.recount(f.cluster)[1]


@pytest.mark.parametrize("store", STORES)
def test_a_min_isr_change_recounts_the_topic(store: str) -> None:
    f = _rolling_restart_feeder(store)
    f.feed(topic_min_isr("orders", "3"))
    g = _gauges(f.cluster, "elrwatch_topic_")
    assert g['elrwatch_topic_under_min_isr_partitions{topic="orders"}'] == 1
    assert g['elrwatch_topic_at_min_isr_partitions{topic="orders"}'] == 1
    assert (
        _gauges(f.cluster, "elrwatch_broker_restart_blocking")[
            'elrwatch_broker_restart_blocking_partitions{broker="0"}'
        ]
        == 1
    )


@pytest.mark.parametrize("store", STORES)
def test_fencing_the_only_other_active_member_makes_a_broker_critical(store: str) -> None:
    f = _rolling_restart_feeder(store)
    f.feed(fence(1))  # orders-1 ISR {1,2}: 2 is now its only active member (Kafka would shrink the ISR too)
    g = _gauges(f.cluster, "elrwatch_broker_restart_offline")
    assert g['elrwatch_broker_restart_offline_partitions{broker="2"}'] == 2


# --- the counters equal a recount, whatever the records; buckets; persistence ------------------------------------


def _with_unregistrations(lines: list[str], seed: int) -> list[str]:
    """The stream with a few broker unregistrations and re-registrations inserted (random_stream has none)."""
    rng = random.Random(seed)
    out = []
    offset = 10_000
    for text in lines:
        out.append(text)
        if rng.random() < 0.04:
            b = rng.randrange(5)
            recs = [register(b, epoch=offset, fenced=True), unregister(b, epoch=offset)]
            if rng.random() < 0.5:
                recs.append(register(b, epoch=offset + 1))
            for rec in recs:
                offset += 1
                type_name, version, data = rec
                out.append(line(envelope(type_name, version, data, None, 1_732_100_000_000 + offset)))
    return out


def _records(lines: list[str]) -> list[Record]:
    out = []
    for seq, text in enumerate(lines, start=1):
        rec = parse_line(text, "events.jsonl", seq)
        assert isinstance(rec, Record), rec
        out.append(rec)
    return out


@STREAMS
@given(seed=st.integers(min_value=0, max_value=10_000), steps=st.integers(min_value=5, max_value=80))
def test_incremental_counters_equal_a_recount(seed: int, steps: int) -> None:
    """The object store's incremental counters, and the columnar store's counted from its columns, equal a recount
    after any records (checked every few records; the columnar store's segment is applied by the read)."""
    cluster = ClusterState(store="objects")
    columnar = ClusterState(store="columnar")
    store = cluster.partitions
    assert isinstance(store, ObjectPartitions)
    for i, rec in enumerate(_records(_with_unregistrations(random_stream(seed, steps=steps), seed))):
        cluster.apply(rec)
        columnar.apply(rec)
        if i % 7 == 0:
            assert (store.insight, store.insight_counts) == insight.recount(cluster)
            assert _counts(columnar) == insight.recount(columnar)[1] == store.insight_counts
    assert (store.insight, store.insight_counts) == insight.recount(cluster)
    assert _counts(columnar) == store.insight_counts
    restored = ClusterState.from_bytes(cluster.to_bytes()).partitions
    assert isinstance(restored, ObjectPartitions)
    assert (restored.insight, restored.insight_counts) == (store.insight, store.insight_counts)


@STREAMS
@given(seed=st.integers(min_value=0, max_value=10_000), n=st.integers(min_value=2, max_value=4))
def test_bucketed_states_count_only_their_partitions_and_sum_to_the_whole(seed: int, n: int) -> None:
    for store in STORES:
        whole = ClusterState(store=store)
        buckets = [ClusterState(bucket=(i, n), store=store) for i in range(n)]
        for rec in _records(random_stream(seed, steps=50)):
            whole.apply(rec)
            target = routing.targets(rec.type, rec.data, n)
            for i in range(n) if target == routing.ALL_BUCKETS else [target]:
                buckets[i].apply(rec)
        for b in buckets:
            parts, counts = insight.recount(b)
            held = {(t.topic_id, p.partition_id) for t, p in b.iter_partitions()}
            assert all(b.owns(*key) for key in held)
            assert set(parts) <= held
            if isinstance(b.partitions, ObjectPartitions):
                assert (b.partitions.insight, b.partitions.insight_counts) == (parts, counts)
            assert _counts(b) == counts
        keys = (
            "elrwatch_broker_",
            "elrwatch_topic_",
            "elrwatch_under_min_isr_partitions_by_cause",
            "elrwatch_unregistered_broker_partitions",
        )
        summed = {
            k: v for k, v in as_samples(sum_gauges(partition_gauges(b) for b in buckets)).items() if k.startswith(keys)
        }
        assert summed == {k: v for k, v in as_samples(partition_gauges(whole)).items() if k.startswith(keys)}, store


def test_a_columnar_snapshot_keeps_no_counters_and_a_loaded_state_counts_them_from_its_columns() -> None:
    cluster = ClusterState(store="columnar")
    reference = ClusterState(store="objects")
    for rec in _records(random_stream(3, steps=60)):
        cluster.apply(rec)
        reference.apply(rec)
    assert _counts(reference)  # the stream leaves something to count
    cluster.partitions.forget_changes()  # type: ignore[attr-defined]
    data = columnar_snapshot.to_bytes(cluster)
    assert b"insight" not in data
    restored = columnar_snapshot.from_bytes(data)
    assert _counts(restored) == _counts(cluster) == _counts(reference) == insight.recount(restored)[1]
    assert _gauges(restored, "elrwatch_") == _gauges(reference, "elrwatch_")


# --- brokers without a registration -----------------------------------------------------------------------------


def _zookeeper_like_cluster() -> list[tuple[str, int, dict[str, Any]]]:
    """Broker 1 went down and was unregistered (what the admin bridge publishes for a ZooKeeper-mode cluster),
    broker 3 was never registered, broker 4 was unregistered and is named by no partition (decommissioned)."""
    other = "AAAAAAAAAAAAAAAAAAAAAg"
    return [
        *base_cluster(brokers=(0, 1, 2, 4)),
        topic("orders"),
        *(partition(partition_id=i, replicas=(0, 1, 2), isr=(0, 2)) for i in range(3)),
        topic("payments", other),
        partition(other, 0, replicas=(2, 3), isr=(2,)),
        partition(other, 1, replicas=(1, 3), isr=(1,), leader=-1),
        unregister(1),
        unregister(4),
    ]


@pytest.mark.parametrize("store", STORES)
def test_brokers_named_by_replicas_without_a_registration_count_as_unregistered(store: str) -> None:
    cluster = ClusterState(store=store)
    for rec in _records([line(envelope(*r)) for r in _zookeeper_like_cluster()]):
        cluster.apply(rec)
    gauges = all_gauges(cluster)
    assert {k: v for k, v in gauges.items() if k.startswith("elrwatch_brokers{")} == {
        'elrwatch_brokers{state="active"}': 2,
        'elrwatch_brokers{state="fenced"}': 0,
        'elrwatch_brokers{state="controlled_shutdown"}': 0,
        'elrwatch_brokers{state="unregistered"}': 2,  # 1 and 3; not 4, which no partition names
    }
    assert {k: v for k, v in gauges.items() if k.startswith("elrwatch_unregistered_broker_partitions")} == {
        'elrwatch_unregistered_broker_partitions{broker="1"}': 4,
        'elrwatch_unregistered_broker_partitions{broker="3"}': 2,
    }


@pytest.mark.parametrize("store", STORES)
def test_a_broker_named_in_several_buckets_counts_once(store: str) -> None:
    n = 3
    whole = ClusterState(store=store)
    buckets = [ClusterState(bucket=(i, n), store=store) for i in range(n)]
    for rec in _records([line(envelope(*r)) for r in _zookeeper_like_cluster()]):
        whole.apply(rec)
        target = routing.targets(rec.type, rec.data, n)
        for i in range(n) if target == routing.ALL_BUCKETS else [target]:
            buckets[i].apply(rec)
    holding_broker_1 = [b for b in buckets if any(1 in p.replicas for _, p in b.iter_partitions())]
    assert len(holding_broker_1) >= 2  # the case at hand: summing the buckets' brokers would count broker 1 twice
    summed = with_unregistered({**sum_gauges(partition_gauges(b) for b in buckets), **shared_gauges(buckets[0])})
    assert as_samples(summed) == {k: v for k, v in all_gauges(whole).items() if k in as_samples(summed)}
    assert as_samples(summed)['elrwatch_brokers{state="unregistered"}'] == 2
