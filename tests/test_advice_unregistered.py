"""advice.outlook for a broker Kafka has no registration for (found on a real Kafka 4.4 controller, scenario
tests/data/real-kafka/unregistered_broker/): its next registration is always handled as an unclean shutdown
(CCM.registerBroker has no stored epoch to match the broker's previous one), so it loses its ELR seat on the way back.
"""

from __future__ import annotations

from elrwatch.state import advice, controller
from elrwatch.state import metadata_version as mv
from elrwatch.state.model import BrokerState, PartitionState

CTX = controller.TopicContext(min_isr=2, elr_enabled=True, metadata_version=mv.DEFAULT_LEVEL)


def leaderless() -> PartitionState:
    """Leaderless: ISR empty, 3 the only ELR member, 1 the last known leader (active again)."""
    return PartitionState("t", 0, replicas=(1, 3), isr=(), elr=(3,), last_known_elr=(1,), leader=-1, leader_epoch=4)


def returning(brokers: dict[int, BrokerState]) -> dict:
    look = advice.outlook(leaderless(), brokers, CTX)
    return next(e for e in look["whenBrokerReturns"] if e["broker"] == 3)


def test_an_unregistered_elr_member_returns_uncleanly_whatever_it_did() -> None:
    entry = returning({1: BrokerState(1, epoch=20, fenced=False), 3: BrokerState(3, epoch=12, registered=False)})
    assert entry["state"] == "unregistered"
    # its registration removes it from the ELR: the ELR is empty, so the last known leader 1 is elected at once
    assert (entry["elects"], entry["how"], entry["recovering"], entry.get("atRegistration")) == (
        1,
        controller.CHOSEN_LAST_KNOWN_LEADER,
        True,
        True,
    )
    assert entry["ifUncleanRestart"]["elects"] == 1


def test_a_fenced_elr_member_returning_cleanly_is_elected_from_the_elr() -> None:
    entry = returning({1: BrokerState(1, epoch=20, fenced=False), 3: BrokerState(3, epoch=12, fenced=True)})
    assert entry["state"] == "fenced"
    assert (entry["elects"], entry["how"], entry["recovering"]) == (3, controller.CHOSEN_ELR, False)
    assert entry["ifUncleanRestart"]["elects"] == 1
