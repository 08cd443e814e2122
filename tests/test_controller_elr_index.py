"""controller.ElrIndex: Kafka's broker → ELR index, stale after a ClearElrRecord (found on a real Kafka 4.4 controller).

The real sequence (tests/data/real-kafka/, scenarios min_isr_raised_and_lowered then unclean_election_admin): a
partition's ELR held broker 2, a min.insync.replicas change cleared it (ClearElrRecord: Kafka's index keeps the
entry), later ELR [2] again (the index lists the partition twice). When broker 2 then re-registered after kill -9,
Kafka wrote the same last-known-leader election record twice for the partition (leader epoch +2).
"""

from __future__ import annotations

from elrwatch.state import controller
from elrwatch.state import metadata_version as mv
from elrwatch.state.model import BrokerState, PartitionState

TOPIC = "gpDmxi6UT8a_ZoFldBYmuQ"
CTX = controller.TopicContext(min_isr=2, elr_enabled=True, metadata_version=mv.DEFAULT_LEVEL)


def brokers() -> dict[int, BrokerState]:
    """Broker 1 back and unfenced, 2 re-registering (its old registration fenced), 3 active."""
    return {
        1: BrokerState(1, epoch=69, fenced=False),
        2: BrokerState(2, epoch=41, fenced=True),
        3: BrokerState(3, epoch=65, fenced=False),
    }


def leaderless() -> PartitionState:
    return PartitionState(
        TOPIC,
        0,
        replicas=(1, 2, 3),
        isr=(),
        elr=(2,),
        last_known_elr=(1,),
        leader=-1,
        leader_epoch=1,
        partition_epoch=9,
    )


def test_clear_elr_leaves_the_index_stale_and_a_new_elr_doubles_it() -> None:
    index = controller.ElrIndex()
    index.update(TOPIC, 0, (), (2,))  # ELR [2]
    # ClearElrRecord: the partition's ELR is emptied without an index update (RCM.removeTopicElrs)
    assert index.passes(2, TOPIC, 0) == 1
    index.update(TOPIC, 0, (), (2,))  # a later record puts 2 into the (empty) ELR again
    assert index.passes(2, TOPIC, 0) == 2
    index.update(TOPIC, 0, (1, 2), (2,))  # 1 never listed: nothing to remove, 2 unchanged
    assert index.passes(2, TOPIC, 0) == 2 and index.passes(1, TOPIC, 0) == 0


def test_remove_drops_every_occurrence_into_a_shorter_array_padded_with_partition_0() -> None:
    index = controller.ElrIndex()
    for partition in (3, 5, 5):
        index.update(TOPIC, partition, (), (2,))
    index.update(TOPIC, 5, (2,), ())
    assert [index.passes(2, TOPIC, p) for p in (0, 3, 5)] == [1, 1, 0]  # [3, 5, 5] → [3, 0]
    index.update(TOPIC, 3, (2,), ())
    index.update(TOPIC, 0, (2,), ())
    assert index.passes(2, TOPIC, 0) == 0
    index.update(TOPIC, 1, (), (2,))
    index.remove_topic(TOPIC)
    assert index.passes(2, TOPIC, 1) == 0


def test_unclean_registration_writes_one_record_per_index_entry() -> None:
    p = leaderless()
    once = controller.register(p, 2, False, brokers(), CTX)
    expected = {"leader": 1, "isr": (1,), "leaderRecoveryState": 1, "eligibleLeaderReplicas": (), "lastKnownElr": ()}
    assert once.records == [expected]
    twice = controller.register(p, 2, False, brokers(), CTX, elr_passes=2)
    assert twice.records == [expected, expected]  # both passes see the registration before the op
    controller.apply_decision(p, twice)
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.leader_recovery_state) == (1, 3, 11, 1)


def test_stale_entry_runs_an_election_pass_for_a_partition_whose_elr_was_cleared() -> None:
    p = leaderless()
    p.elr = ()  # cleared by a ClearElrRecord; LastKnownElr [1] cleared too would stop the election
    assert controller.register(p, 2, False, brokers(), CTX).records == []
    stale = controller.register(p, 2, False, brokers(), CTX, elr_passes=1)
    assert stale.records == [{"leader": 1, "isr": (1,), "leaderRecoveryState": 1, "lastKnownElr": ()}]


def test_unregister_uses_the_index_too() -> None:
    p = leaderless()
    p.elr = ()  # stale entry: the ELR pass runs although 2 is no longer in the ELR, and elects the last leader
    assert controller.unregister(p, 2, brokers(), CTX).records == []
    assert len(controller.unregister(p, 2, brokers(), CTX, elr_passes=2).records) == 2
