"""Election advice: Kafka's outlook from the controller model and the KIP-966 recommendation with commands."""

from __future__ import annotations

import io
import json

import orjson
import pytest
from typer.testing import CliRunner

from elrwatch.cli import app
from elrwatch.state import controller
from elrwatch.state.advice import (
    AGGRESSIVE,
    BALANCED,
    NONE,
    RISK_COMMITTED,
    RISK_NONE,
    advise,
    longest_log_choice,
    recommendation,
)
from elrwatch.state.model import BrokerState, PartitionState
from elrwatch.state.replay import replay_lines
from elrwatch.state.simulator import Simulator


def _cluster(build, log_info=()):  # type: ignore[no-untyped-def]
    """Replay what ``build(simulator)`` wrote (3 brokers, one topic, one partition [0,1,2], min ISR 2)."""
    out = io.BytesIO()
    sim = Simulator(brokers=3, topics=1, partitions=1, replication_factor=3, min_isr=2, seed=4, out=out)
    sim.bootstrap()
    build(sim)
    sim.flush()
    lines = out.getvalue().splitlines()
    p = sim.partitions[0]
    for broker_id, epoch, end_offset, leader_epoch in log_info:
        data = {
            "topicId": p.topic_id,
            "partitionId": 0,
            "brokerId": broker_id,
            "brokerEpoch": sim.brokers[broker_id].epoch if epoch is None else epoch,
            "logEndOffset": end_offset,
            "lastWrittenLeaderEpoch": leader_epoch,
            "currentLeaderEpoch": leader_epoch,
        }
        lines.append(orjson.dumps({"type": "REPLICA_LOG_INFO_RECORD", "version": 0, "data": data}))
    replayer = replay_lines(lines)
    assert replayer.quarantined == []
    return replayer.cluster, sim


def _strand(sim: Simulator) -> None:
    """All three fenced, then a min ISR change wipes ELR/LastKnownElr; 1 and 2 come back: nobody is electable."""
    for broker_id in (0, 1, 2):
        sim.fence(broker_id)
    sim.change_min_isr(2)
    for broker_id in (1, 2):
        sim.restart(broker_id, clean=True)
        sim.unfence(broker_id)


def test_healthy_partition_keeps_its_leader() -> None:
    cluster, _ = _cluster(lambda sim: None)
    doc = advise(cluster, "topic-0", 0)
    assert doc["outlook"]["kind"] == "keeps_leader"
    assert doc["outlook"]["ifLeaderFails"] == {"elects": 1, "how": "isr", "recovering": False, "risk": RISK_NONE}
    assert doc["recommendation"]["action"] == "none"
    assert doc["recommendation"]["commands"] == []


def test_under_min_isr_leader_says_writes_fail_and_who_takes_over() -> None:
    cluster, _ = _cluster(lambda sim: (sim.fence(0), sim.fence(1)))
    doc = advise(cluster, "topic-0", 0)
    assert doc["registration"]["isr"] == [2] and doc["registration"]["elr"] == [1]
    assert "acks=all writes fail" in doc["outlook"]["summary"]
    assert doc["outlook"]["ifLeaderFails"]["elects"] == -1  # 1 is in the ELR but fenced
    assert doc["recommendation"]["action"] == "restore_replicas"
    assert doc["recommendation"]["waitFor"] == [0, 1]


def test_leaderless_with_fenced_elr_waits_and_warns_about_unclean_restart() -> None:
    cluster, _ = _cluster(lambda sim: [sim.fence(b) for b in (0, 1, 2)])
    doc = advise(cluster, "topic-0", 0)
    outlook = doc["outlook"]
    assert outlook["kind"] == "waits_for_broker"
    returns = {entry["broker"]: entry for entry in outlook["whenBrokerReturns"]}
    assert returns[0]["elects"] == -1  # not in ISR/ELR
    assert (returns[1]["elects"], returns[1]["how"]) == (1, "elr")
    assert returns[1]["ifUncleanRestart"]["elects"] == -1
    assert "loses its ELR seat" in outlook["summary"]
    rec = doc["recommendation"]
    assert rec["action"] == "wait_for_broker" and rec["waitFor"] == [1, 2] and rec["commands"] == []


def test_unclean_restart_of_elr_member_can_elect_the_last_known_leader_at_registration() -> None:
    def build(sim: Simulator) -> None:
        for broker_id in (0, 1, 2):
            sim.fence(broker_id)
        sim.restart(2, clean=False)  # the last leader loses its ELR seat; LastKnownElr stays [2]
        sim.unfence(2)

    cluster, _ = _cluster(build)
    doc = advise(cluster, "topic-0", 0)
    assert doc["registration"]["elr"] == [1] and doc["registration"]["lastKnownElr"] == [2]
    returns = {entry["broker"]: entry for entry in doc["outlook"]["whenBrokerReturns"]}
    assert (returns[1]["elects"], returns[1]["how"]) == (1, "elr")
    unclean = returns[1]["ifUncleanRestart"]
    assert (unclean["elects"], unclean["how"], unclean["recovering"]) == (2, "last_known_leader", True)
    assert unclean["atRegistration"] is True


def _strand_all_back(sim: Simulator) -> None:
    """Stranded as `_strand`, then 0 is back too: every replica is live."""
    _strand(sim)
    sim.restart(0, clean=True)
    sim.unfence(0)


def test_stranded_partition_balanced_picks_longest_current_log_and_commands_make_it_win() -> None:
    cluster, _ = _cluster(_strand_all_back, log_info=[(0, None, 80, 3), (1, None, 100, 3), (2, None, 150, 3)])
    doc = advise(cluster, "topic-0", 0)
    assert doc["outlook"]["kind"] == "none"
    rec = doc["recommendation"]
    assert rec["strategy"] == BALANCED and rec["action"] == "unclean_recovery"
    assert rec["candidate"] == 2 and rec["risk"] == RISK_COMMITTED
    assert rec["logInfo"]["basis"] == "log_info" and rec["logInfo"]["missing"] == []
    assert rec["reorder"] == [2, 0, 1]
    reorder_doc = json.loads(rec["commands"][0].split("'")[1])
    assert reorder_doc == {"version": 1, "partitions": [{"topic": "topic-0", "partition": 0, "replicas": [2, 0, 1]}]}
    assert "--reassignment-json-file reorder.json --execute" in rec["commands"][1]
    assert json.loads(rec["commands"][2].split("'")[1]) == {"partitions": [{"topic": "topic-0", "partition": 0}]}
    assert "--election-type unclean --path-to-json-file elect.json" in rec["commands"][3]
    assert "find-hanging --topic topic-0 --partition 0" in rec["commands"][4]
    assert rec["recoverCommand"] == "elrwatch recover topic-0 0 --execute"
    assert "Unknown broker id" not in rec["summary"]
    # Running the commands through the controller model elects the candidate.
    p = cluster.partition(cluster.topic_by_name("topic-0").topic_id, 0).copy()
    ctx = controller.TopicContext(min_isr=2, elr_enabled=True)
    controller.apply_decision(p, controller.reassign(p, rec["reorder"], cluster.brokers, ctx))
    decision = controller.elect_leaders(p, "UNCLEAN", cluster.brokers, ctx)
    controller.apply_decision(p, decision)
    assert (p.leader, p.leader_recovery_state) == (2, 1)


def test_a_fenced_replica_in_the_reorder_gives_elrwatch_recover_not_kafkas_reassign_tool() -> None:
    """Replica 0 is fenced: kafka-reassign-partitions.sh refuses any assignment naming it ("Unknown broker id 0"),
    so the commands are `elrwatch recover … --execute` (reorder, election and restore through the Admin API)."""
    cluster, _ = _cluster(_strand, log_info=[(1, None, 100, 3), (2, None, 150, 3)])
    rec = advise(cluster, "topic-0", 0)["recommendation"]
    assert rec["action"] == "unclean_recovery" and rec["candidate"] == 2 and rec["reorder"] == [2, 0, 1]
    assert rec["commands"] == [
        "elrwatch recover topic-0 0 --execute",
        "bin/kafka-transactions.sh --bootstrap-server $BOOTSTRAP find-hanging --topic topic-0 --partition 0",
    ]
    assert not any("kafka-reassign-partitions" in c or "kafka-leader-election" in c for c in rec["commands"])
    assert '"Unknown broker id 0"' in rec["summary"] and "omits fenced brokers" in rec["summary"]
    assert "elrwatch recover topic-0 0 prints the plan" in rec["summary"]


def test_stale_or_missing_log_info_is_ignored_and_said() -> None:
    cluster, _ = _cluster(_strand, log_info=[(2, 3, 999, 9)])  # epoch 3 is broker 2's first registration
    rec = advise(cluster, "topic-0", 0)["recommendation"]
    assert rec["logInfo"]["basis"] == "replica_order"
    assert rec["candidate"] == 1 and rec["reorder"] is None  # Kafka's own unclean pick: first live replica
    missing = " ".join(rec["logInfo"]["missing"])
    assert "no log info from broker 1" in missing and "stale log info from broker 2" in missing


def test_strategy_none_is_manual_and_aggressive_acts_before_fenced_elr_returns() -> None:
    cluster, _ = _cluster(_strand)
    rec = advise(cluster, "topic-0", 0, NONE)["recommendation"]
    assert rec["action"] == "manual" and rec["commands"] == [] and rec["candidate"] is None

    def fenced_elr(sim: Simulator) -> None:
        for broker_id in (0, 1, 2):
            sim.fence(broker_id)
        sim.restart(0, clean=True)
        sim.unfence(0)  # 0 is live but not in ISR/ELR; ELR [1,2] is fenced

    cluster, _ = _cluster(fenced_elr)
    assert advise(cluster, "topic-0", 0, BALANCED)["recommendation"]["action"] == "wait_for_broker"
    rec = advise(cluster, "topic-0", 0, AGGRESSIVE)["recommendation"]
    assert rec["action"] == "unclean_recovery" and rec["candidate"] == 0


def test_live_elr_member_gets_a_preferred_election() -> None:
    p = PartitionState("AAAAAAAAAAAAAAAAAAAAAg", 3, replicas=(0, 1, 2), isr=(), elr=(1, 2), leader=-1)
    brokers = {b: BrokerState(b, epoch=10 + b, fenced=b != 2) for b in (0, 1, 2)}
    rec = recommendation("orders", p, brokers, controller.TopicContext(min_isr=2, elr_enabled=True))
    assert rec["action"] == "elect_clean" and rec["candidate"] == 2 and rec["risk"] == RISK_NONE
    assert "--election-type preferred --path-to-json-file elect.json" in rec["commands"][1]


def test_recovering_leader_gets_find_hanging() -> None:
    p = PartitionState("AAAAAAAAAAAAAAAAAAAAAg", 0, replicas=(0, 1), isr=(1,), leader=1, leader_recovery_state=1)
    brokers = {b: BrokerState(b, epoch=5, fenced=False) for b in (0, 1)}
    rec = recommendation("orders", p, brokers, controller.TopicContext(min_isr=1, elr_enabled=True))
    assert rec["action"] == "check_hanging_transactions"
    assert rec["commands"] == [
        "bin/kafka-transactions.sh --bootstrap-server $BOOTSTRAP find-hanging --topic orders --partition 0"
    ]


def test_longest_log_prefers_leader_epoch_over_length() -> None:
    p = PartitionState("AAAAAAAAAAAAAAAAAAAAAg", 0, replicas=(0, 1, 2), leader=-1)
    brokers = {b: BrokerState(b, epoch=7, fenced=False) for b in (0, 1, 2)}
    info = {
        0: {"brokerEpoch": 7, "logEndOffset": 500, "lastWrittenLeaderEpoch": 4},
        1: {"brokerEpoch": 7, "logEndOffset": 100, "lastWrittenLeaderEpoch": 5},
        2: {"brokerEpoch": 7, "logEndOffset": 900, "lastWrittenLeaderEpoch": 4},
    }
    assert longest_log_choice(p, brokers, info, lambda b: True)["broker"] == 1


def test_unknown_strategy_rejected() -> None:
    p = PartitionState("AAAAAAAAAAAAAAAAAAAAAg", 0, replicas=(0,), isr=(0,), leader=0)
    with pytest.raises(ValueError):
        recommendation("t", p, {0: BrokerState(0, fenced=False)}, controller.TopicContext(), strategy="Reckless")


def test_cli_advise(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = io.BytesIO()
    sim = Simulator(brokers=3, topics=1, partitions=2, replication_factor=3, min_isr=2, seed=4, out=out)
    sim.bootstrap()
    _strand(sim)
    sim.flush()
    path = tmp_path / "events.jsonl"
    path.write_bytes(out.getvalue())
    runner = CliRunner()
    result = runner.invoke(app, ["advise", "topic-0", "1", str(path)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["partitionId"] == 1 and doc["recommendation"]["action"] == "unclean_recovery"
    none = runner.invoke(app, ["advise", "topic-0", "1", str(path), "--strategy", "None"])
    assert json.loads(none.output)["recommendation"]["action"] == "manual"
    missing = runner.invoke(app, ["advise", "topic-0", "9", str(path)])
    assert missing.exit_code != 0 and "unknown partition topic-0-9" in missing.output


def test_unclean_recovery_says_what_each_choice_loses_and_who_has_not_reported() -> None:
    """Candidate 2 (epoch 3, 150); 1 reported 100 in epoch 3 (electing it loses 50); 0 is down and last reported,
    in a previous incarnation, 180 in epoch 3: waiting for it might save 30 records."""
    cluster, _ = _cluster(_strand, log_info=[(1, None, 100, 3), (2, None, 150, 3), (0, 1, 180, 3)])
    rec = advise(cluster, "topic-0", 0)["recommendation"]
    assert rec["candidate"] == 2
    assert rec["candidateLog"] == {"logEndOffset": 150, "lastWrittenLeaderEpoch": 3}
    by_broker = {c["broker"]: c for c in rec["logInfo"]["candidates"]}
    assert (by_broker[1]["recordsBehind"], by_broker[1]["truncatedIfChosenLeads"], by_broker[1]["exact"]) == (
        50,
        0,
        True,
    )
    assert by_broker[2]["recordsBehind"] == 0
    [absent] = rec["logInfo"]["notReported"]
    assert absent["broker"] == 0 and absent["state"] != "active"
    assert absent["lastReport"]["logEndOffset"] == 180 and absent["recordsAhead"] == 30
    assert "30 records past the candidate" in rec["waiting"] and rec["waiting"] in rec["summary"]
    assert "electing another loses (records): 1 50" in rec["summary"]
    assert "cannot be told which one" in rec["summary"]


def test_epoch_zero_outranks_no_epoch() -> None:
    p = PartitionState("AAAAAAAAAAAAAAAAAAAAAg", 0, replicas=(0, 1), leader=-1)
    brokers = {b: BrokerState(b, epoch=7, fenced=False) for b in (0, 1)}
    info = {
        0: {"brokerEpoch": 7, "logEndOffset": 50, "lastWrittenLeaderEpoch": -1},
        1: {"brokerEpoch": 7, "logEndOffset": 10, "lastWrittenLeaderEpoch": 0},
    }
    choice = longest_log_choice(p, brokers, info, lambda b: True)
    assert choice["broker"] == 1
    assert {c["broker"]: c["exact"] for c in choice["candidates"]} == {0: False, 1: True}


def test_candidate_known_gauge_separates_partitions_with_log_info() -> None:
    from elrwatch.state.gauges import candidate_known_partitions

    cluster, _ = _cluster(_strand)
    assert candidate_known_partitions(cluster.image, cluster.log_info, cluster.partition) == 0
    cluster, _ = _cluster(_strand, log_info=[(2, 3, 999, 9)])  # stale: not known
    assert candidate_known_partitions(cluster.image, cluster.log_info, cluster.partition) == 0
    cluster, _ = _cluster(_strand, log_info=[(2, None, 150, 3)])
    assert candidate_known_partitions(cluster.image, cluster.log_info, cluster.partition) == 1
    from elrwatch.state.gauges import partition_gauges

    gauges = {name: v for (name, _), v in partition_gauges(cluster).items()}
    assert gauges["elrwatch_unclean_recovery_candidate_known_partitions"] == 1
