"""Controller-model rules of elr-semantics.md that the visible conformance cases do not pin down.

Each expectation is derived from the rule it cites (not from running Kafka); cases use the conformance format
so they run through the same runner as `elrwatch conformance`.
"""

from __future__ import annotations

from typing import Any

import pytest

from elrwatch.state import controller
from elrwatch.state import metadata_version as mv
from elrwatch.state.conformance import run_case
from elrwatch.state.model import BrokerState, PartitionState

LIVE = {"fenced": False, "inControlledShutdown": False}
FENCED = {"fenced": True, "inControlledShutdown": False}


def _initial(**fields: Any) -> dict[str, Any]:
    base = {
        "replicas": [0, 1, 2],
        "isr": [0, 1, 2],
        "elr": [],
        "lastKnownElr": [],
        "leader": 0,
        "leaderEpoch": 0,
        "partitionEpoch": 0,
        "leaderRecoveryState": 0,
        "addingReplicas": [],
        "removingReplicas": [],
        "minIsr": 2,
        "elrEnabled": True,
        "metadataVersion": "4.1-IV0",
    }
    base.update(fields)
    return base


def _assert_passes(case: dict[str, Any]) -> None:
    case.setdefault("id", "derived")
    result = run_case(case)
    assert result.passed, result.line()


def test_java_hash_set_order_for_large_ids() -> None:
    # capacity 16: bucket = id & 15, ties in insertion order
    assert controller.java_hash_set_order((3, 20)) == [3, 20]
    assert controller.java_hash_set_order((5, 20)) == [20, 5]
    assert controller.java_hash_set_order((1,), (16, 33)) == [16, 1, 33]
    assert controller.java_hash_set_order((2, 1, 0)) == [0, 1, 2]
    # 13 elements grow the table to 32 buckets
    assert controller.java_hash_set_order(tuple(range(40, 27, -1))) == [
        32,
        33,
        34,
        35,
        36,
        37,
        38,
        39,
        40,
        28,
        29,
        30,
        31,
    ]


def test_elr_populated_in_hash_order_for_large_broker_ids() -> None:
    p = PartitionState("AAAAAAAAAAAAAAAAAAAAAg", 0, replicas=(101, 102, 117), isr=(101, 102, 117), leader=101)
    ctx = controller.TopicContext(min_isr=3, elr_enabled=True)
    record = controller.build_partition_change(p, controller.ANY_BROKER, ctx, target_isr=(101,))
    assert record == {"isr": (101,), "eligibleLeaderReplicas": (117, 102)}  # 117 & 15 = 5 < 102 & 15 = 6


def test_unregister_leaves_an_elr_only_member_in_the_elr() -> None:
    _assert_passes(
        {
            "initial": _initial(isr=[0], elr=[1], leader=0),
            "brokers": {"0": LIVE, "1": FENCED, "2": LIVE},
            "input": {"kind": "unregister", "broker": 1},
            "expected": {"record": None, "state": {"elr": [1]}},
        }
    )


def test_alter_partition_v2_skips_the_broker_epoch_check_v3_does_not() -> None:
    brokers = {"0": {**LIVE, "epoch": 10}, "1": {**LIVE, "epoch": 11}, "2": {**LIVE, "epoch": 12}}
    initial = _initial(isr=[0, 1], leader=0, minIsr=1)
    steps = [
        {
            "input": {"kind": "register", "broker": 2, "cleanShutdown": True, "newEpoch": 50},
            "expected": {"record": None},
        },
        {"input": {"kind": "unfence", "broker": 2}, "expected": {"record": None}},
        {
            "input": {"kind": "alter_partition", "brokerId": 0, "newIsrWithEpochs": [[0, 10], [1, 11], [2, 12]]},
            "expected": {"record": None, "error": "INELIGIBLE_REPLICA"},
        },
        {
            "input": {"kind": "alter_partition", "brokerId": 0, "newIsr": [0, 1, 2]},
            "expected": {"record": {"isr": [0, 1, 2]}},
        },
    ]
    _assert_passes({"initial": initial, "brokers": brokers, "input": {"kind": "sequence", "steps": steps}})


def test_preferred_election_never_unclean_but_unclean_election_is() -> None:
    initial = _initial(isr=[0], leader=-1, elr=[], uncleanLeaderElectionEnable=True, elrEnabled=False)
    brokers = {"0": FENCED, "1": LIVE, "2": LIVE}
    steps = [
        {
            "input": {"kind": "elect", "electionType": "PREFERRED"},
            "expected": {"record": None, "error": "PREFERRED_LEADER_NOT_AVAILABLE"},
        },
        {
            "input": {"kind": "elect", "electionType": "UNCLEAN"},
            "expected": {"record": {"isr": [1], "leader": 1, "leaderRecoveryState": 1}},
        },
        {
            "input": {"kind": "elect", "electionType": "UNCLEAN"},
            "expected": {"record": None, "error": "ELECTION_NOT_NEEDED"},
        },
    ]
    _assert_passes({"initial": initial, "brokers": brokers, "input": {"kind": "sequence", "steps": steps}})


def test_elr_disabled_clears_stale_elr_but_keeps_stale_last_known_elr() -> None:
    _assert_passes(
        {
            "initial": _initial(isr=[0, 1], elr=[2], lastKnownElr=[2], elrEnabled=False),
            "brokers": {"0": LIVE, "1": LIVE, "2": LIVE},
            "input": {"kind": "fence", "broker": 1},
            "expected": {"record": {"isr": [0], "eligibleLeaderReplicas": []}, "state": {"lastKnownElr": [2]}},
        }
    )


def test_elr_feature_needs_metadata_version_4_0_iv1() -> None:
    _assert_passes(
        {
            "initial": _initial(elrEnabled=True, metadataVersion="3.9-IV0", isr=[0, 1]),
            "brokers": {"0": LIVE, "1": LIVE, "2": LIVE},
            "input": {"kind": "fence", "broker": 1},
            "expected": {"record": {"isr": [0]}, "state": {"elr": []}},
        }
    )


def test_no_recovering_state_before_3_2() -> None:
    initial = _initial(isr=[0], leader=-1, elrEnabled=False, metadataVersion="3.1-IV0")
    _assert_passes(
        {
            "initial": initial,
            "brokers": {"0": FENCED, "1": LIVE, "2": LIVE},
            "input": {"kind": "elect", "electionType": "UNCLEAN"},
            "expected": {"record": {"isr": [1], "leader": 1}, "state": {"leaderRecoveryState": 0}},
        }
    )


def test_alter_partition_completing_a_reassignment_reports_new_leader_elected() -> None:
    initial = _initial(
        replicas=[1, 2, 3, 4], isr=[1, 2, 3], leader=1, addingReplicas=[4], removingReplicas=[1], minIsr=2
    )
    _assert_passes(
        {
            "initial": initial,
            "brokers": {str(b): LIVE for b in (1, 2, 3, 4)},
            "input": {"kind": "alter_partition", "brokerId": 1, "newIsr": [1, 2, 3, 4]},
            "expected": {
                "record": {
                    "isr": [2, 3, 4],
                    "leader": 2,
                    "replicas": [2, 3, 4],
                    "removingReplicas": [],
                    "addingReplicas": [],
                },
                "error": "NEW_LEADER_ELECTED",
            },
        }
    )


def test_cancel_reassignment_needing_unclean_revert_is_rejected_unless_unclean_enabled() -> None:
    initial = _initial(
        replicas=[0, 1, 2, 3], isr=[3], leader=3, addingReplicas=[3], removingReplicas=[0], elrEnabled=False
    )
    brokers = {str(b): LIVE for b in (0, 1, 2, 3)}
    _assert_passes(
        {
            "initial": initial,
            "brokers": brokers,
            "input": {"kind": "cancel_reassign"},
            "expected": {"record": None, "error": "INVALID_REPLICA_ASSIGNMENT"},
        }
    )
    _assert_passes(
        {
            "initial": {**initial, "uncleanLeaderElectionEnable": True},
            "brokers": brokers,
            "input": {"kind": "cancel_reassign"},
            "expected": {
                "record": {"isr": [0], "leader": 0, "replicas": [0, 1, 2], "removingReplicas": [], "addingReplicas": []}
            },
        }
    )


def test_unclean_registration_removes_from_isr_then_separately_from_elr() -> None:
    p = PartitionState("AAAAAAAAAAAAAAAAAAAAAg", 0, replicas=(0, 1, 2), isr=(0,), elr=(1,), leader=0)
    brokers = {b: BrokerState(b, epoch=5, fenced=b == 1) for b in (0, 1, 2)}
    ctx = controller.TopicContext(min_isr=2, elr_enabled=True)
    decision = controller.register(p, 1, False, brokers, ctx)
    assert decision.records == [{"eligibleLeaderReplicas": ()}]
    decision = controller.register(p, 0, False, brokers, ctx)
    # 0 is not added to the ELR (unclean shutdown); the ELR [1] is unchanged, so not written
    assert decision.records == [{"isr": (), "leader": -1, "lastKnownElr": (0,)}]


@pytest.mark.parametrize(
    ("name", "level", "pcr", "register"),
    [("3.3-IV3", 7, 0, 1), ("3.6-IV0", 12, 0, 2), ("3.7-IV2", 17, 1, 3), ("4.0-IV1", 23, 2, 3), ("4.3-IV0", 30, 2, 4)],
)
def test_metadata_versions(name: str, level: int, pcr: int, register: int) -> None:
    assert mv.parse_metadata_version(name) == level
    assert mv.metadata_version_name(level) == name
    assert mv.partition_change_record_version(level) == pcr
    assert mv.register_broker_record_version(level) == register


def test_metadata_version_parsing() -> None:
    assert mv.parse_metadata_version("3.7") == 19  # a bare release is its latest IV
    assert mv.parse_metadata_version("26") == 26
    assert mv.parse_metadata_version("IBP_4_0_IV1") == 23
    assert mv.is_leader_epoch_bump_required_on_isr_shrink(11) and not mv.is_leader_epoch_bump_required_on_isr_shrink(12)
    with pytest.raises(ValueError):
        mv.parse_metadata_version("5.0-IV9")
