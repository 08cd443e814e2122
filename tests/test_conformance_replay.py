"""The reference conformance corpus as replay input: expected records in, expected states out.

For every case of shared/reference/conformance/cases.jsonl: FEATURE_LEVEL_RECORDs (metadata.version, ELR),
REGISTER_BROKER_RECORDs for its brokers, TOPIC_RECORD, CONFIG_RECORD for the (effective) min ISR, a
PARTITION_RECORD of `initial`; then, per step, the PARTITION_CHANGE_RECORD Kafka wrote (or, for a min ISR config
change, the CONFIG_RECORD + CLEAR_ELR_RECORD actually written) together with the broker records the step's input
writes (fence, unfence, controlled shutdown, new incarnation, unregister), in the order Kafka's controller writes
them. After each step the expected `state` subset is asserted on the replayed partition (ELR and LastKnownElr as
sets; conformance/README.md "Ordering caveat"), and the live electable replicas against the case's broker model.
The walkthrough and "last replica standing" scenarios also assert the exact status (monitor-spec §3) per step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

import pytest
from core_events import (
    TOPIC_ID,
    Feeder,
    broker_change,
    clear_elr,
    cluster_min_isr,
    config,
    elr_feature,
    feature,
    fence,
    partition,
    register,
    topic,
    topic_min_isr,
    unfence,
    unregister,
)
from reference import conformance_cases_file

from elrwatch.state.cluster import Outcome
from elrwatch.state.records import compiled_fields

CASES_FILE = conformance_cases_file()
CASES = [json.loads(x) for x in CASES_FILE.read_text().splitlines() if x.strip()]
BY_ID = {c["id"]: c for c in CASES}

# Kafka's MetadataVersion feature levels (server-common MetadataVersion.java)
MV_LEVELS = {
    "3.0-IV1": 1,
    "3.1-IV0": 2,
    "3.2-IV0": 3,
    "3.3-IV0": 4,
    "3.3-IV1": 5,
    "3.3-IV2": 6,
    "3.3-IV3": 7,
    "3.4-IV0": 8,
    "3.5-IV0": 9,
    "3.5-IV1": 10,
    "3.5-IV2": 11,
    "3.6-IV0": 12,
    "3.6-IV1": 13,
    "3.6-IV2": 14,
    "3.7-IV0": 15,
    "3.7-IV1": 16,
    "3.7-IV2": 17,
    "3.7-IV3": 18,
    "3.7-IV4": 19,
    "3.8-IV0": 20,
    "3.9-IV0": 21,
    "4.0-IV0": 22,
    "4.0-IV1": 23,
}
STATE_KEYS = (
    "replicas",
    "isr",
    "elr",
    "lastKnownElr",
    "leader",
    "leaderEpoch",
    "partitionEpoch",
    "leaderRecoveryState",
    "addingReplicas",
    "removingReplicas",
)
SET_KEYS = ("elr", "lastKnownElr")
#: What a case's expected PartitionChangeRecord may hold: the fields Kafka's schema lets a change carry, but the log
#: directories (no case moves a replica between directories).
RECORD_KEYS = {f.json_name for f in compiled_fields("PARTITION_CHANGE_RECORD", 2)} - {
    "partitionId",
    "topicId",
    "directories",
}
BROKER_KINDS = ("fence", "unfence", "controlled_shutdown", "register", "unregister", "set_broker")

Rec = tuple[str, int, dict[str, Any]]


def _pcr_version(mv: str | None, data: dict[str, Any]) -> int:
    if "eligibleLeaderReplicas" in data or "lastKnownElr" in data:
        return 2
    if mv is None:
        return 2
    level = MV_LEVELS[mv]
    return 2 if level >= MV_LEVELS["4.0-IV1"] else 1 if level >= MV_LEVELS["3.7-IV2"] else 0


def _normalize(state: dict[str, Any]) -> dict[str, Any]:
    return {k: set(v) if k in SET_KEYS else v for k, v in state.items()}


def _actual(f: Feeder) -> dict[str, Any]:
    doc = f.doc("foo", 0)
    return {k: doc[k] for k in STATE_KEYS}


def _assert_state(f: Feeder, expected: dict[str, Any], where: str) -> None:
    subset = {k: v for k, v in expected.items() if k in STATE_KEYS}
    actual = _normalize(_actual(f))
    want = _normalize(subset)
    got = {k: actual[k] for k in want}
    assert got == want, f"{where}: expected {want}, got {got}"


def _steps(case: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    inp = case["input"]
    if inp.get("kind") == "sequence":
        return [(s["input"], s["expected"]) for s in inp["steps"]]
    return [(inp, case["expected"])]


@dataclass
class Broker:
    """A broker as the case models it (conformance/README.md "brokers"): absent from the map = unregistered."""

    epoch: int
    fenced: bool = False
    in_controlled_shutdown: bool = False

    @property
    def active(self) -> bool:
        return not self.fenced and not self.in_controlled_shutdown


class CaseReplay:
    """One case fed to a replayer: the case's broker model is kept beside it to write the broker records."""

    def __init__(self, case: dict[str, Any]) -> None:
        self.case = case
        init = case["initial"]
        self.mv: str | None = init.get("metadataVersion")
        self.brokers: dict[int, Broker] = {}
        f = self.f = Feeder()
        if self.mv is not None:
            assert f.feed(feature("metadata.version", MV_LEVELS[self.mv])) is Outcome.APPLIED
        if init.get("elrEnabled"):
            assert f.feed(elr_feature(True)) is Outcome.APPLIED
        for broker_id, b in sorted(case.get("brokers", {}).items(), key=lambda kv: int(kv[0])):
            broker = self.brokers[int(broker_id)] = Broker(b.get("epoch", 100), bool(b.get("fenced")))
            assert f.feed(register(int(broker_id), broker.epoch, fenced=broker.fenced)) is Outcome.APPLIED
            if b.get("inControlledShutdown"):
                broker.in_controlled_shutdown = True
                assert f.feed(broker_change(int(broker_id), broker.epoch, in_controlled_shutdown=1)) is Outcome.APPLIED
        assert f.feed(topic("foo")) is Outcome.APPLIED
        # minIsr is the effective min ISR, already capped to the replica count: the cap keeps it unchanged
        assert len(init["replicas"]) >= init["minIsr"]
        assert f.feed(topic_min_isr("foo", str(init["minIsr"]))) is Outcome.APPLIED
        if init.get("uncleanLeaderElectionEnable"):
            assert f.feed(config(2, "foo", "unclean.leader.election.enable", "true")) is Outcome.APPLIED
        version = 2 if (init["elr"] or init["lastKnownElr"]) else _pcr_version(self.mv, {})
        rec = partition(
            TOPIC_ID,
            0,
            init["replicas"],
            init["isr"],
            init["leader"],
            init["leaderEpoch"],
            init["partitionEpoch"],
            elr=init["elr"] if version >= 2 else None,
            last_known_elr=init["lastKnownElr"] if version >= 2 else None,
            leader_recovery_state=init["leaderRecoveryState"] or None,
            adding=init["addingReplicas"],
            removing=init["removingReplicas"],
            version=version,
        )
        assert f.feed(rec) is Outcome.APPLIED

    # --- one step: (broker records written before the partition's, the partition's records, broker records after)

    def plan(self, inp: dict[str, Any], expected: dict[str, Any]) -> tuple[list[Rec], list[Rec], list[Rec]]:
        """The records one step writes, in the order Kafka's controller writes them: ReplicationControlManager's
        handleBrokerFenced and handleBrokerUnregistered, and ClusterControlManager.registerBroker (new incarnation →
        handleBrokerShutdown), write the partition changes first and the broker record last; handleBrokerUnfenced
        and handleBrokerInControlledShutdown write the broker record first, then the partition changes."""
        main = self._partition_records(inp, expected)
        kind = inp.get("kind")
        if kind not in BROKER_KINDS:
            return [], main, []
        broker_id = int(inp["broker"])
        broker = self.brokers.get(broker_id)
        if kind == "register":  # a new incarnation: fenced, not in controlled shutdown, a new (larger) epoch
            epoch = int(inp.get("newEpoch", (broker.epoch + 1) if broker is not None else 100))
            self.brokers[broker_id] = Broker(epoch, fenced=True)
            return [], main, [register(broker_id, epoch, fenced=True)]
        assert broker is not None, f"{kind} of unregistered broker {broker_id}"
        if kind == "fence":
            broker.fenced = True
            return [], main, [self._fencing(broker_id, broker.epoch, fenced=True)]
        if kind == "unfence":
            # The case model also ends a controlled shutdown on unfence; Kafka's BrokerRegistrationChangeRecord
            # cannot (only a new registration does), so a corpus that needed it could not be replayed faithfully.
            assert not broker.in_controlled_shutdown, f"unfence of broker {broker_id} in controlled shutdown"
            broker.fenced = False
            return [self._fencing(broker_id, broker.epoch, fenced=False)], main, []
        if kind == "controlled_shutdown":
            pre = (
                []
                if broker.in_controlled_shutdown
                else [broker_change(broker_id, broker.epoch, in_controlled_shutdown=1)]
            )
            broker.in_controlled_shutdown = True
            return pre, main, []
        if kind == "unregister":
            del self.brokers[broker_id]
            return [], main, [unregister(broker_id, broker.epoch)]
        # set_broker: a test-harness change with no controller record; restate the registration to match it
        assert not main, "set_broker writes no partition record"
        broker.fenced = bool(inp.get("fenced", broker.fenced))
        broker.in_controlled_shutdown = bool(inp.get("inControlledShutdown", broker.in_controlled_shutdown))
        return (
            [
                register(
                    broker_id, broker.epoch, fenced=broker.fenced, in_controlled_shutdown=broker.in_controlled_shutdown
                )
            ],
            [],
            [],
        )

    def _fencing(self, broker_id: int, epoch: int, fenced: bool) -> Rec:
        """BrokerRegistrationChangeRecord from 3.3-IV2 on, Fence/UnfenceBrokerRecord before."""
        if self.mv is None or MV_LEVELS[self.mv] >= MV_LEVELS["3.3-IV2"]:
            return broker_change(broker_id, epoch, fenced=1 if fenced else -1, version=0)
        return fence(broker_id, epoch) if fenced else unfence(broker_id, epoch)

    def _partition_records(self, inp: dict[str, Any], expected: dict[str, Any]) -> list[Rec]:
        record = expected.get("record")
        if inp.get("kind") == "min_isr_config_change":
            if record is None:
                return []
            assert record == {"eligibleLeaderReplicas": [], "lastKnownElr": []}
            scope = inp.get("scope")
            assert scope in ("this_topic", "cluster"), scope
            recs = []
            if "newMinIsr" in inp:
                value = str(inp["newMinIsr"])
                recs.append(topic_min_isr("foo", value) if scope == "this_topic" else cluster_min_isr(value))
            return [*recs, clear_elr("foo" if scope == "this_topic" else "")]
        if inp.get("kind") == "effective_min_isr":
            assert record is None
            return [topic_min_isr("foo", str(inp["minInsyncReplicas"]))]
        if record is None:
            return []
        assert set(record) <= RECORD_KEYS, record
        return [
            (
                "PARTITION_CHANGE_RECORD",
                _pcr_version(self.mv, record),
                {"partitionId": 0, "topicId": TOPIC_ID, **record},
            )
        ]

    def feed(self, recs: list[Rec], where: str) -> None:
        for rec in recs:
            assert self.f.feed(rec) is Outcome.APPLIED, (where, rec, self.f.replayer.quarantined[-1:])

    def assert_live_electable(self, where: str) -> None:
        """The monitor's live electable replicas (ISR ∪ ELR, active) match the case's broker model: the broker
        records were applied with the case's meaning."""
        doc = self.f.doc("foo", 0)
        electable = sorted(set(doc["isr"]) | set(doc["elr"]))
        want = [b for b in electable if b in self.brokers and self.brokers[b].active]
        assert doc["liveElectable"] == want, f"{where}: live electable {doc['liveElectable']}, expected {want}"


@pytest.mark.parametrize("case_id", sorted(BY_ID))
def test_conformance_case_replays(case_id: str) -> None:
    case = BY_ID[case_id]
    r = CaseReplay(case)
    f = r.f
    _assert_state(f, case["initial"], "initial")
    assert f.doc("foo", 0)["effectiveMinIsr"] == case["initial"]["minIsr"]
    r.assert_live_electable("initial")
    for index, (inp, expected) in enumerate(_steps(case)):
        where = f"step {index} ({inp.get('kind')})"
        record = expected.get("record")
        before = _actual(f)
        pre, main, post = r.plan(inp, expected)
        r.feed([*pre, *main, *post], where)
        if inp.get("kind") == "effective_min_isr":
            assert f.doc("foo", 0)["effectiveMinIsr"] == expected["effectiveMinIsr"]
        after = _actual(f)
        if record is None:
            assert after == before, f"{where}: no record, but the state changed"
        else:
            assert after["partitionEpoch"] == before["partitionEpoch"] + 1, where
            bumped = "leader" in record
            assert after["leaderEpoch"] == before["leaderEpoch"] + (1 if bumped else 0), where
        if "state" in expected:
            _assert_state(f, expected["state"], where)
        r.assert_live_electable(where)
    if case["input"].get("kind") == "sequence":
        _assert_state(f, case["expected"], "final")
    assert not f.replayer.quarantined, [e.to_dict() for e in f.replayer.quarantined]


def test_corpus_includes_walkthrough_and_last_replica_standing() -> None:
    assert len(CASES) == len(BY_ID) >= 54
    for required in (
        "scenario-kip966-4-broker-walkthrough",
        "scenario-last-replica-standing-elr",
        "scenario-last-replica-standing-no-elr",
        "scenario-clear-elr-strands-leaderless-partition",
    ):
        assert required in BY_ID


def test_every_case_is_replayable() -> None:
    """No case kind is left out: every step is a record, a ClearElr, an effective-min-ISR query, a broker state
    change, or nothing."""
    kinds = set()
    for case in CASES:
        for inp, expected in _steps(case):
            kinds.add(inp.get("kind"))
            if inp.get("kind") == "min_isr_config_change" and expected.get("record") is not None:
                assert inp.get("scope") in ("this_topic", "cluster")
            if inp.get("kind") in BROKER_KINDS:
                assert isinstance(inp.get("broker"), int), inp
    assert "min_isr_config_change" in kinds and "effective_min_isr" in kinds
    assert {"fence", "unfence", "register", "controlled_shutdown"} <= kinds


# --- exact derived status along the scenarios (monitor-spec §3) ------------------------------------------------------


class Want(NamedTuple):
    """Expected after one step: its status and live electable replicas; `mid`, if given, is the status right after
    the broker record that Kafka writes *before* the step's partition change (unfence, controlled shutdown): the
    moment the monitor sees a candidate become active, before the election record arrives."""

    status: str
    live_electable: list[int]
    mid: str | None = None


def _replay_statuses(case_id: str, initial: str, wants: list[Want]) -> CaseReplay:
    case = BY_ID[case_id]
    steps = _steps(case)
    assert len(wants) == len(steps), f"{case_id}: {len(steps)} steps, {len(wants)} expectations"
    r = CaseReplay(case)
    assert r.f.doc("foo", 0)["status"] == initial, "initial"
    for index, ((inp, expected), want) in enumerate(zip(steps, wants, strict=True)):
        where = f"{case_id} step {index} ({inp.get('kind')} {inp.get('broker', '')})"
        pre, main, post = r.plan(inp, expected)
        r.feed(pre, where)
        if want.mid is not None:
            assert pre, f"{where}: no broker record precedes the partition change"
            got = r.f.doc("foo", 0)["status"]
            assert got == want.mid, f"{where}, before the partition change: status {got}, expected {want.mid}"
        r.feed([*main, *post], where)
        doc = r.f.doc("foo", 0)
        assert doc["status"] == want.status, f"{where}: status {doc['status']}, expected {want.status}"
        assert doc["liveElectable"] == want.live_electable, where
        if "state" in expected:
            _assert_state(r.f, expected["state"], where)
    _assert_state(r.f, case["expected"], f"{case_id} final")
    assert not r.f.replayer.quarantined, [e.to_dict() for e in r.f.replayer.quarantined]
    return r


def test_walkthrough_statuses() -> None:
    """KIP-966 walkthrough: RF 4, min ISR 3, ELR on, unclean off; the exact status after every step."""
    r = _replay_statuses(
        "scenario-kip966-4-broker-walkthrough",
        "HEALTHY",
        [
            # fence 3: ISR [0,1,2], |ISR| == min ISR 3 with a leader: one more failure from under min ISR
            Want("AT_MIN_ISR", [0, 1, 2]),
            # fence 2: ISR [0,1] < 3, leader 0 still there; 2 moves to the ELR but is fenced, so not live
            Want("UNDER_MIN_ISR", [0, 1]),
            # fence 1: ISR [0] < 3, ELR [1,2] both fenced
            Want("UNDER_MIN_ISR", [0]),
            # fence 0: leader -1, ISR [], ELR [0,1,2] all fenced. A clean path exists (ELR members) but no candidate
            # is active and unclean election is off: Kafka elects once a fenced ELR member returns → WAITING
            Want("LEADERLESS_WAITING", []),
            # 1 re-registers after an unclean shutdown: dropped from the ELR ([0,2]), its new incarnation is fenced;
            # ELR members 0 and 2 are still fenced → still WAITING, not MANUAL (the ELR is a path)
            Want("LEADERLESS_WAITING", []),
            # 1 unfenced: active but neither in ISR nor ELR, so not a candidate (its data may be lost): still WAITING,
            # not ELECTING (unclean election is off, the last known leader path needs ISR and ELR empty)
            Want("LEADERLESS_WAITING", [], mid="LEADERLESS_WAITING"),
            # 2 re-registers cleanly (not in the ISR, so no record): its new incarnation is fenced → WAITING
            Want("LEADERLESS_WAITING", []),
            # 2 unfenced: the moment its UNFENCE record lands, an active ELR member exists → ELECTING; Kafka's ELR
            # election in the same batch makes 2 leader with ISR [2] (< 3) and ELR [0] → UNDER_MIN_ISR, clean (no
            # RECOVERING: an ELR election is clean)
            Want("UNDER_MIN_ISR", [2], mid="LEADERLESS_ELECTING"),
            # 3 re-registers cleanly (fenced, not in ISR, no record): nothing changes for the partition
            Want("UNDER_MIN_ISR", [2]),
            # 3 unfenced: the partition has a leader, so no election; ISR still [2] < 3
            Want("UNDER_MIN_ISR", [2], mid="UNDER_MIN_ISR"),
            # AlterPartition ISR [2,1]: 2 < 3, ELR [0] kept (fenced, not live)
            Want("UNDER_MIN_ISR", [1, 2]),
            # AlterPartition ISR [2,1,3]: |ISR| == min ISR 3 → ELR cleared; 0 is still missing → AT_MIN_ISR
            Want("AT_MIN_ISR", [1, 2, 3]),
        ],
    )
    doc = r.f.doc("foo", 0)
    assert doc["leader"] == 2 and doc["leaderRecoveryState"] == 0


#: KIP-966 "last replica standing" (RF 3, min ISR 2, unclean off): the statuses while the brokers fail, the same
#: with ELR and without.
LAST_REPLICA_STANDING_FAILURES = [
    # fence 0: ISR [1,2] == min ISR 2, leader 1
    Want("AT_MIN_ISR", [1, 2]),
    # fence 1: ISR [2] < 2, leader 2 (with ELR: ELR [1], fenced)
    Want("UNDER_MIN_ISR", [2]),
    # fence 2: leader -1. With ELR: ISR [], ELR [1,2] all fenced, LastKnownElr [2]; without: the ISR stays [2]
    # (fenced). Either is a clean path with nobody active → WAITING
    Want("LEADERLESS_WAITING", []),
    # 2 re-registers after an unclean shutdown (with ELR: removed from the ELR, [1]; without: handled like a fence,
    # no record), its new incarnation fenced → WAITING
    Want("LEADERLESS_WAITING", []),
]
#: Then the brokers come back: the statuses with ELR and without.
LAST_REPLICA_STANDING_RECOVERIES = {
    "scenario-last-replica-standing-elr": [
        # 2 (which lost data) unfenced: not in ISR/ELR, and the last known leader path needs an empty ELR, so it is
        # no candidate → still WAITING (this is the data loss KIP-966 prevents; not ELECTING)
        Want("LEADERLESS_WAITING", [], mid="LEADERLESS_WAITING"),
        # 0 unfenced: not in ISR/ELR either → still WAITING
        Want("LEADERLESS_WAITING", [], mid="LEADERLESS_WAITING"),
        # 1 unfenced: an active ELR member → ELECTING until Kafka's ELR election lands: leader 1, ISR [1] < 2,
        # clean → UNDER_MIN_ISR (not RECOVERING)
        Want("UNDER_MIN_ISR", [1], mid="LEADERLESS_ELECTING"),
    ],
    "scenario-last-replica-standing-no-elr": [
        # 2 unfenced: ISR member active → ELECTING until Kafka re-elects it from the ISR: leader 2, ISR [2] < 2.
        # Kafka counts this as clean (no RECOVERING) although 2 lost data: the KIP's global data loss case
        Want("UNDER_MIN_ISR", [2], mid="LEADERLESS_ELECTING"),
        # 0 and 1 unfenced: not in the ISR (only AlterPartition adds them back) → unchanged
        Want("UNDER_MIN_ISR", [2], mid="UNDER_MIN_ISR"),
        Want("UNDER_MIN_ISR", [2], mid="UNDER_MIN_ISR"),
    ],
}


@pytest.mark.parametrize("case_id", sorted(LAST_REPLICA_STANDING_RECOVERIES))
def test_last_replica_standing_statuses(case_id: str) -> None:
    """KIP-966 "last replica standing", with ELR and with ELR disabled (the ISR can never become empty then)."""
    wants = [*LAST_REPLICA_STANDING_FAILURES, *LAST_REPLICA_STANDING_RECOVERIES[case_id]]
    _replay_statuses(case_id, "HEALTHY", wants)


def test_clear_elr_strands_leaderless_partition_statuses() -> None:
    """ClearElr on a leaderless partition (elr-semantics §7.5): the two most severe statuses."""
    _replay_statuses(
        "scenario-clear-elr-strands-leaderless-partition",
        "LEADERLESS_WAITING",
        [
            # (initial: ISR [], ELR [0,1,2] all fenced → WAITING.) min.insync.replicas changed → ClearElr empties ELR
            # and LastKnownElr: no ISR, ELR or last known leader, unclean off → nobody Kafka would ever elect: MANUAL
            Want("MANUAL_ELECTION_REQUIRED", []),
            # 1 unfenced: active, but not a candidate of any automatic election → still MANUAL
            Want("MANUAL_ELECTION_REQUIRED", [], mid="MANUAL_ELECTION_REQUIRED"),
            # preferred election: PREFERRED_LEADER_NOT_AVAILABLE, no record
            Want("MANUAL_ELECTION_REQUIRED", []),
            # unclean election: leader 1, ISR [1], leaderRecoveryState 1 → RECOVERING (most severe after MANUAL)
            Want("RECOVERING", [1]),
        ],
    )
