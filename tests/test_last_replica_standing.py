"""Last-replica-standing exposure: a partition whose ISR is one replica while its effective min ISR is 2 or more,
on a cluster with ELR off (Kafka 3.x, or 4.x with eligible.leader.replicas.version=0). Its flag, its gauge
(``elrwatch_last_replica_standing_partitions``: 0 on ELR clusters) and what the advice says, both ways."""

from __future__ import annotations

import pytest
from core_events import (
    TOPIC_ID,
    Feeder,
    base_cluster,
    change,
    fence,
    partition,
    topic,
    topic_min_isr,
)

from elrwatch.state.status import F_LAST_REPLICA_STANDING, FLAG_BITS

GAUGE = "elrwatch_last_replica_standing_partitions"


def scenario(elr: bool, min_isr: str) -> Feeder:
    """Brokers 0-3, topic t (replicas 0, 1, 2) with the given min ISR; brokers 1 and 2 fail: the ISR shrinks to 0
    (ELR on: 1 and 2 move to the ELR when min ISR is 2 or more)."""
    f = Feeder()
    f.feed(*base_cluster(elr=elr), topic("t"), topic_min_isr("t", min_isr), partition(replicas=(0, 1, 2)))
    f.feed(change(isr=[0, 2]), fence(1), change(isr=[0]), fence(2))
    return f


def gauge(f: Feeder) -> float:
    return f.replayer.document(advice=False)["gauges"][GAUGE]


def test_the_new_flag_is_a_bit_of_its_own_above_the_others() -> None:
    assert F_LAST_REPLICA_STANDING == 512 and F_LAST_REPLICA_STANDING in FLAG_BITS
    assert all(bit < F_LAST_REPLICA_STANDING for bit in FLAG_BITS if bit != F_LAST_REPLICA_STANDING)


def test_elr_off_isr_of_one_with_min_isr_two_is_exposed_and_the_advice_says_why() -> None:
    f = scenario(elr=False, min_isr="2")
    p = f.part()
    assert list(p.isr) == [0] and p.leader == 0
    assert p.flags & F_LAST_REPLICA_STANDING
    assert gauge(f) == 1
    doc = f.replayer.document(advice=True)
    entry = next(e for e in doc["partitions"] if e["topic"] == "t")
    assert entry["outlook"]["lastReplicaStanding"] is True
    assert "last replica standing: ELR off and 0 is the only ISR member (min ISR 2)" in entry["outlook"]["summary"]
    assert "committed data may be lost" in entry["outlook"]["summary"]
    assert "Last replica standing (ELR off): keep 0 from an unclean shutdown" in entry["recommendation"]["summary"]
    # The min ISR lowered to 1: no longer exposed (one replica is all the topic asks for).
    f.feed(topic_min_isr("t", "1"))
    assert not f.part().flags & F_LAST_REPLICA_STANDING and gauge(f) == 0
    # Back to 2, then the leader fails too: leaderless with ISR [0] (ELR off keeps the last member): still exposed,
    # Kafka elects 0 from the ISR when it is back, however it shut down.
    f.feed(topic_min_isr("t", "2"), change(leader=-1), fence(0))
    assert f.part().leader == -1 and list(f.part().isr) == [0]
    assert gauge(f) == 1
    entry = next(e for e in f.replayer.document(advice=True)["partitions"] if e["topic"] == "t")
    assert entry["outlook"]["lastReplicaStanding"] is True
    assert "with ELR off an ISR member that shut down uncleanly still leads again" in entry["recommendation"]["summary"]


def test_elr_on_the_gauge_is_zero_and_the_advice_says_so() -> None:
    f = scenario(elr=True, min_isr="2")
    p = f.part()
    assert list(p.isr) == [0]
    assert not p.flags & F_LAST_REPLICA_STANDING
    assert gauge(f) == 0
    entry = next(e for e in f.replayer.document(advice=True)["partitions"] if e["topic"] == "t")
    assert entry["outlook"]["lastReplicaStanding"] is False
    assert (
        "ELR on: 0 is the last ISR member, but an unclean shutdown of it costs its ELR seat"
        in entry["outlook"]["summary"]
    )
    assert "Last replica standing" not in entry["recommendation"]["summary"]


@pytest.mark.parametrize("elr", [False, True])
def test_min_isr_one_or_a_larger_isr_is_not_exposed(elr: bool) -> None:
    f = Feeder()
    f.feed(*base_cluster(elr=elr), topic("t"), topic_min_isr("t", "1"), partition(replicas=(0, 1, 2)), change(isr=[0]))
    assert gauge(f) == 0
    f.feed(topic_min_isr("t", "3"), change(TOPIC_ID, isr=[0, 1]))
    assert (
        gauge(f) == 0
        and "lastReplicaStanding"
        not in next(e for e in f.replayer.document(advice=True)["partitions"] if e["topic"] == "t")["outlook"]
    )
