"""The reference conformance corpus as replay input: expected records in, expected states out.

For every case of shared/reference/conformance/cases.jsonl: FEATURE_LEVEL_RECORDs (metadata.version, ELR),
REGISTER_BROKER_RECORDs for its brokers, TOPIC_RECORD, CONFIG_RECORD for the (effective) min ISR, a
PARTITION_RECORD of `initial`; then, per step, the PARTITION_CHANGE_RECORD Kafka wrote (or, for a min ISR config
change, the CONFIG_RECORD + CLEAR_ELR_RECORD actually written). After each step the expected `state` subset is
asserted on the replayed partition (ELR and LastKnownElr as sets; conformance/README.md "Ordering caveat").
"""

from __future__ import annotations

import json
from typing import Any

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
    partition,
    register,
    topic,
    topic_min_isr,
)
from reference import conformance_cases_file

from elrwatch.state.cluster import Outcome

CASES_FILE = conformance_cases_file()
CASES = [json.loads(x) for x in CASES_FILE.read_text().splitlines() if x.strip()]
BY_ID = {c["id"]: c for c in CASES}

# Kafka's MetadataVersion feature levels (server-common MetadataVersion.java)
MV_LEVELS = {
    "3.0-IV1": 1, "3.1-IV0": 2, "3.2-IV0": 3, "3.3-IV0": 4, "3.3-IV1": 5, "3.3-IV2": 6, "3.3-IV3": 7,
    "3.4-IV0": 8, "3.5-IV0": 9, "3.5-IV1": 10, "3.5-IV2": 11, "3.6-IV0": 12, "3.6-IV1": 13, "3.6-IV2": 14,
    "3.7-IV0": 15, "3.7-IV1": 16, "3.7-IV2": 17, "3.7-IV3": 18, "3.7-IV4": 19, "3.8-IV0": 20, "3.9-IV0": 21,
    "4.0-IV0": 22, "4.0-IV1": 23,
}
STATE_KEYS = ("replicas", "isr", "elr", "lastKnownElr", "leader", "leaderEpoch", "partitionEpoch",
              "leaderRecoveryState", "addingReplicas", "removingReplicas")
SET_KEYS = ("elr", "lastKnownElr")
RECORD_KEYS = {"isr", "leader", "replicas", "removingReplicas", "addingReplicas", "leaderRecoveryState",
               "eligibleLeaderReplicas", "lastKnownElr"}


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


def _start(case: dict[str, Any]) -> Feeder:
    init = case["initial"]
    f = Feeder()
    mv = init.get("metadataVersion")
    if mv is not None:
        assert f.feed(feature("metadata.version", MV_LEVELS[mv])) is Outcome.APPLIED
    if init.get("elrEnabled"):
        assert f.feed(elr_feature(True)) is Outcome.APPLIED
    for broker_id, b in sorted(case.get("brokers", {}).items(), key=lambda kv: int(kv[0])):
        epoch = b.get("epoch", 100)
        assert f.feed(register(int(broker_id), epoch, fenced=bool(b.get("fenced")))) is Outcome.APPLIED
        if b.get("inControlledShutdown"):
            assert f.feed(broker_change(int(broker_id), epoch, in_controlled_shutdown=1)) is Outcome.APPLIED
    assert f.feed(topic("foo")) is Outcome.APPLIED
    # minIsr is the effective min ISR, already capped to the replica count: the cap keeps it unchanged
    assert len(init["replicas"]) >= init["minIsr"]
    assert f.feed(topic_min_isr("foo", str(init["minIsr"]))) is Outcome.APPLIED
    if init.get("uncleanLeaderElectionEnable"):
        assert f.feed(config(2, "foo", "unclean.leader.election.enable", "true")) is Outcome.APPLIED
    version = 2 if (init["elr"] or init["lastKnownElr"]) else _pcr_version(mv, {})
    rec = partition(
        TOPIC_ID, 0, init["replicas"], init["isr"], init["leader"], init["leaderEpoch"], init["partitionEpoch"],
        elr=init["elr"] if version >= 2 else None, last_known_elr=init["lastKnownElr"] if version >= 2 else None,
        leader_recovery_state=init["leaderRecoveryState"] or None, adding=init["addingReplicas"],
        removing=init["removingReplicas"], version=version,
    )
    assert f.feed(rec) is Outcome.APPLIED
    return f


@pytest.mark.parametrize("case_id", sorted(BY_ID))
def test_conformance_case_replays(case_id: str) -> None:
    case = BY_ID[case_id]
    f = _start(case)
    _assert_state(f, case["initial"], "initial")
    assert f.doc("foo", 0)["effectiveMinIsr"] == case["initial"]["minIsr"]
    mv = case["initial"].get("metadataVersion")
    for index, (inp, expected) in enumerate(_steps(case)):
        record = expected.get("record")
        before = _actual(f)
        if inp.get("kind") == "min_isr_config_change":
            if record is not None:
                assert record == {"eligibleLeaderReplicas": [], "lastKnownElr": []}
                scope = inp.get("scope")
                assert scope in ("this_topic", "cluster"), scope
                if "newMinIsr" in inp:
                    value = str(inp["newMinIsr"])
                    cfg = topic_min_isr("foo", value) if scope == "this_topic" else cluster_min_isr(value)
                    assert f.feed(cfg) is Outcome.APPLIED
                assert f.feed(clear_elr("foo" if scope == "this_topic" else "")) is Outcome.APPLIED
        elif inp.get("kind") == "effective_min_isr":
            assert record is None
            assert f.feed(topic_min_isr("foo", str(inp["minInsyncReplicas"]))) is Outcome.APPLIED
            assert f.doc("foo", 0)["effectiveMinIsr"] == expected["effectiveMinIsr"]
        elif record is not None:
            assert set(record) <= RECORD_KEYS, record
            rec = ("PARTITION_CHANGE_RECORD", _pcr_version(mv, record),
                   {"partitionId": 0, "topicId": TOPIC_ID, **record})
            assert f.feed(rec) is Outcome.APPLIED, f.replayer.quarantined[-1:]
        after = _actual(f)
        if record is None:
            assert after == before, f"step {index}: no record, but the state changed"
        else:
            assert after["partitionEpoch"] == before["partitionEpoch"] + 1, f"step {index}"
            bumped = "leader" in record
            assert after["leaderEpoch"] == before["leaderEpoch"] + (1 if bumped else 0), f"step {index}"
        if "state" in expected:
            _assert_state(f, expected["state"], f"step {index} ({inp.get('kind')})")
    if case["input"].get("kind") == "sequence":
        _assert_state(f, case["expected"], "final")
    assert not f.replayer.quarantined, [e.to_dict() for e in f.replayer.quarantined]


def test_corpus_includes_walkthrough_and_last_replica_standing() -> None:
    assert len(CASES) == len(BY_ID) >= 54
    for required in ("scenario-kip966-4-broker-walkthrough", "scenario-last-replica-standing-elr",
                     "scenario-last-replica-standing-no-elr", "scenario-clear-elr-strands-leaderless-partition"):
        assert required in BY_ID


def test_every_case_is_replayable() -> None:
    """No case kind is left out: every step is a record, a ClearElr, an effective-min-ISR query or nothing."""
    kinds = set()
    for case in CASES:
        for inp, expected in _steps(case):
            kinds.add(inp.get("kind"))
            if inp.get("kind") == "min_isr_config_change" and expected.get("record") is not None:
                assert inp.get("scope") in ("this_topic", "cluster")
    assert "min_isr_config_change" in kinds and "effective_min_isr" in kinds


def test_walkthrough_final_status() -> None:
    """The KIP-966 walkthrough ends with a leader elected from the ELR: the replayed partition has a leader."""
    case = BY_ID["scenario-kip966-4-broker-walkthrough"]
    f = _start(case)
    mv = case["initial"].get("metadataVersion")
    leaderless_seen = False
    for _, expected in _steps(case):
        record = expected.get("record")
        if record is not None and set(record) <= RECORD_KEYS:
            f.feed(("PARTITION_CHANGE_RECORD", _pcr_version(mv, record),
                    {"partitionId": 0, "topicId": TOPIC_ID, **record}))
            if f.doc("foo", 0)["leader"] == -1:
                leaderless_seen = True
                assert f.doc("foo", 0)["status"] in ("LEADERLESS_WAITING", "LEADERLESS_ELECTING",
                                                     "MANUAL_ELECTION_REQUIRED", "RECOVERING")
    assert leaderless_seen
    assert f.doc("foo", 0)["leader"] == case["expected"].get("leader", f.doc("foo", 0)["leader"])
