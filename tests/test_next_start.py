"""Will the next start of a broker be clean? Kafka's rule (state/next_start.py) on the agent's reading of the
``.kafka_cleanshutdown`` files (CLEAN_SHUTDOWN_RECORD), the metadata's fallback, and what follows from it: the
broker documents' ``nextStart``, the outlook and recommendation of the partitions it holds, and the gauge
``elrwatch_unclean_restart_pending_partitions`` (both stores, through the differential harness)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from core_events import (
    TOPIC_ID,
    base_cluster,
    broker_change,
    envelope,
    fence,
    line,
    offset_lines,
    partition,
    register,
    topic,
    topic_min_isr,
    unregister,
)
from test_columnar import run_both

from elrwatch.state import advice, controller, report
from elrwatch.state import metadata_version as mv
from elrwatch.state.gauges import key
from elrwatch.state.model import BrokerState, PartitionState
from elrwatch.state.next_start import next_start

PENDING = key("elrwatch_unclean_restart_pending_partitions")


def report_of(registration: int, epoch: int | None, dirs: int = 2, with_file: int | None = None) -> dict[str, Any]:
    return {
        "registrationEpoch": registration,
        "cleanShutdownEpoch": epoch,
        "logDirs": dirs,
        "logDirsWithFile": dirs if with_file is None else with_file,
        "timestampMs": None,
    }


def clean_shutdown(broker: int, registration: int, epoch: int | None, dirs: int = 1, with_file: int = 1) -> str:
    """The agent's CLEAN_SHUTDOWN_RECORD line (no metadata offset: it is not in Kafka's log)."""
    data = {
        "brokerId": broker,
        "registrationEpoch": registration,
        "cleanShutdownEpoch": epoch,
        "logDirs": dirs,
        "logDirsWithFile": with_file,
    }
    return line(envelope("CLEAN_SHUTDOWN_RECORD", 0, data, timestamp=1_732_100_000_000))


# --- the rule ---------------------------------------------------------------------------------------------------


def test_a_running_or_stopping_broker_has_no_prediction() -> None:
    assert next_start(BrokerState(1, epoch=7, fenced=False)).clean is None
    stopping = BrokerState(1, epoch=7, fenced=False, in_controlled_shutdown=True)
    assert next_start(stopping).clean is None and "stopping" in next_start(stopping).basis


def test_kafkas_rule_on_the_agents_report() -> None:
    def stopped(clean_shutdown: dict[str, Any] | None) -> BrokerState:
        return BrokerState(1, epoch=7, fenced=True, clean_shutdown=clean_shutdown)

    every_dir = next_start(stopped(report_of(7, 7)))
    assert every_dir.clean is True and "every log dir (2)" in every_dir.basis and "epoch 7" in every_dir.basis
    missing = next_start(stopped(report_of(7, None, with_file=1)))
    assert missing.clean is False and "1 of 2 log dirs have no .kafka_cleanshutdown" in missing.basis
    disagree = next_start(stopped(report_of(7, None)))
    assert disagree.clean is False and "disagree" in disagree.basis
    other_epoch = next_start(stopped(report_of(7, 5)))
    assert other_epoch.clean is False and "epoch 5, not 7" in other_epoch.basis
    assert next_start(stopped(report_of(7, 7, dirs=0, with_file=0))).clean is False


def test_a_report_of_an_earlier_registration_is_not_used() -> None:
    stale = BrokerState(1, epoch=9, fenced=True, in_controlled_shutdown=True, clean_shutdown=report_of(7, 7))
    start = next_start(stale)
    assert start.clean is True  # the metadata's fallback: a controlled shutdown
    assert "earlier registration (epoch 7)" in start.basis and "likely clean" in start.basis


def test_without_a_report_the_metadata_says_what_it_can() -> None:
    planned = next_start(BrokerState(1, epoch=7, fenced=True, in_controlled_shutdown=True))
    assert planned.clean is True and "controlled shutdown: likely clean" in planned.basis
    timed_out = next_start(BrokerState(1, epoch=7, fenced=True))
    assert timed_out.clean is None and "session timeout" in timed_out.basis and "crash" in timed_out.basis
    assert next_start(BrokerState(1, epoch=7, registered=False)).clean is False
    assert next_start(None).clean is False


def test_unknown_registration_epochs_use_the_agents_own_view_and_say_so() -> None:
    broker = BrokerState(1, epoch=1_795_868_477_268_000, fenced=True, clean_shutdown=report_of(7, 7))
    assert next_start(broker).clean is None  # with real epochs the report would be of another registration
    derived = next_start(broker, epochs_known=False)
    assert derived.clean is True and "own metadata log" in derived.basis
    killed = BrokerState(1, epoch=1_795_868_477_268_000, fenced=True, clean_shutdown=report_of(7, None, 1, 0))
    assert next_start(killed, epochs_known=False).clean is False
    bare = next_start(BrokerState(1, epoch=1_795_868_477_268_000, fenced=True), epochs_known=False)
    assert bare.clean is None and "not known here (admin bridge)" in bare.basis
    no_epoch = BrokerState(1, epoch=-1, fenced=True, clean_shutdown=report_of(7, 7))  # a registration without one
    assert next_start(no_epoch).clean is True and "own metadata log" in next_start(no_epoch).basis


# --- the record through both stores -----------------------------------------------------------------------------


def _metadata() -> list[str]:
    """Brokers 0..3; topic t with p0 ELR [1, 2] (both down), p1 ELR [2], p2 led by 0 with 2 in its ELR."""
    recs = [
        *base_cluster((0, 1, 2, 3)),
        topic("t"),
        topic_min_isr("t", "2"),
        partition(partition_id=0, replicas=(1, 2, 3), isr=[], leader=-1, elr=[1, 2], last_known_elr=[1]),
        partition(partition_id=1, replicas=(2, 3, 0), isr=[], leader=-1, elr=[2], last_known_elr=[2]),
        partition(partition_id=2, replicas=(0, 2, 3), isr=[0], leader=0, elr=[2]),
        fence(1),
        broker_change(2, fenced=1, in_controlled_shutdown=1),
    ]
    return offset_lines((rec, 10 + i) for i, rec in enumerate(recs))


@pytest.mark.parametrize("bucket", [None, (0, 2), (1, 2)])
def test_both_stores_keep_the_report_and_count_the_pending_partitions_alike(bucket: Any) -> None:
    batches = [
        _metadata(),
        [clean_shutdown(1, 100, None, with_file=0), clean_shutdown(2, 100, 100)],  # 1 killed, 2 clean
        [clean_shutdown(2, 100, None, dirs=2, with_file=1)],  # 2 killed after all: a dir without the file
        [clean_shutdown(7, 3, 3)],  # a broker not registered yet: kept for its registration
        offset_lines([(register(7, epoch=3, fenced=True), 40)]),
    ]
    for as_lines in (False, True):
        result = run_both(batches, bucket=bucket, as_lines=as_lines)
        assert result.quarantined == 0
    state = result.state
    assert state.brokers[7].clean_shutdown is not None and state.brokers[7].clean_shutdown["cleanShutdownEpoch"] == 3
    if bucket is None:
        assert state.partitions.gauges()[PENDING] == 2  # p0 (ELR [1, 2]) and p1 (ELR [2]); p2 has a leader


def test_the_gauge_follows_the_predictions() -> None:
    steps = {
        "no report": ([], 0),  # 1 fenced (unknown), 2 in a controlled shutdown (likely clean)
        "1 killed": ([clean_shutdown(1, 100, None, with_file=0)], 0),  # p0 still has 2, p1 has 2
        "2 killed": ([clean_shutdown(2, 100, None, with_file=0)], 2),
        "2 clean": ([clean_shutdown(2, 100, 100)], 0),
    }
    batches = [_metadata(), *(lines for lines, _ in steps.values())]
    for count in range(2, len(batches) + 1):
        result = run_both(batches[:count])
        expected = list(steps.values())[count - 2][1]
        assert result.state.partitions.gauges()[PENDING] == expected, list(steps)[count - 2]


def test_an_unregistered_elr_member_is_pending_without_any_report() -> None:
    recs = [(rec, 100 + i) for i, rec in enumerate([unregister(1), unregister(2)])]
    result = run_both([_metadata(), offset_lines(recs)])
    assert result.state.partitions.gauges()[PENDING] == 2


def test_with_elr_off_nothing_is_pending() -> None:
    off = offset_lines(
        [(("FEATURE_LEVEL_RECORD", 0, {"name": "eligible.leader.replicas.version", "featureLevel": 0}), 90)]
    )
    result = run_both(
        [_metadata(), off, [clean_shutdown(1, 100, None, with_file=0), clean_shutdown(2, 100, None, 1, 0)]]
    )
    assert result.state.partitions.gauges()[PENDING] == 0


def test_broker_documents_say_the_next_start() -> None:
    result = run_both([_metadata(), [clean_shutdown(1, 100, None, with_file=0)]])
    docs = {b: report.broker_doc(state) for b, state in result.state.brokers.items()}
    assert docs[1]["nextStart"]["clean"] is False and docs[1]["cleanShutdown"]["logDirsWithFile"] == 0
    assert docs[2]["nextStart"]["clean"] is True and "controlled shutdown" in docs[2]["nextStart"]["basis"]
    assert docs[0]["nextStart"]["clean"] is None and docs[0]["nextStart"]["basis"].startswith("running")
    assert report.broker_from_doc(docs[1]) == result.state.brokers[1].__class__(
        **{**vars_of(result.state.brokers[1]), "last_offset": None}
    )


def vars_of(broker: BrokerState) -> dict[str, Any]:
    from elrwatch.state.model import BROKER_FIELDS

    return {name: getattr(broker, name) for name in BROKER_FIELDS}


# --- the outlook and the recommendation apply the prediction -----------------------------------------------------

CTX = controller.TopicContext(min_isr=2, elr_enabled=True, metadata_version=mv.DEFAULT_LEVEL)


def _brokers(**reports: dict[str, Any] | None) -> dict[int, BrokerState]:
    """0 and 3 active; 1 and 2 fenced with the given agent reports (``b1=...``, ``b2=...``)."""
    out = {b: BrokerState(b, epoch=100, fenced=False) for b in (0, 3)}
    for b in (1, 2):
        out[b] = BrokerState(b, epoch=100, fenced=True, clean_shutdown=reports.get(f"b{b}"))
    return out


def _elr_pair() -> PartitionState:
    """Leaderless, ELR [1, 2] (both down), 1 the last known leader; 3 a live replica outside the ELR."""
    return PartitionState("t", 0, replicas=(1, 2, 3), isr=(), elr=(1, 2), last_known_elr=(1,), leader=-1)


KILLED = report_of(100, None, dirs=1, with_file=0)
CLEAN = report_of(100, 100, dirs=1)


def test_both_elr_members_killed_kafka_elects_the_last_known_leader() -> None:
    brokers = _brokers(b1=KILLED, b2=KILLED)
    look = advice.outlook(_elr_pair(), brokers, CTX)
    returns = {e["broker"]: e for e in look["whenBrokerReturns"]}
    assert returns[1]["nextStart"]["clean"] is False and returns[2]["nextStart"]["clean"] is False
    assert look["kind"] == "waits_for_broker"
    assert look["then"]["elects"] == 1 and look["then"]["how"] == controller.CHOSEN_LAST_KNOWN_LEADER
    assert "brokers 1, 2 will restart uncleanly and lose their ELR seats" in look["summary"]
    rec = advice.recommendation("t", _elr_pair(), brokers, CTX)
    assert rec["action"] == "wait_for_last_known_leader" and rec["risk"] == advice.RISK_UNCOMMITTED
    assert "will restart uncleanly" in rec["summary"] and "Restart them cleanly" not in rec["summary"]
    assert rec["commands"]  # find-hanging after the RECOVERING election


def test_both_killed_without_a_last_known_leader_needs_an_operator_with_the_longest_log() -> None:
    p = _elr_pair()
    p.last_known_elr = ()
    brokers = _brokers(b1=KILLED, b2=KILLED)
    look = advice.outlook(p, brokers, CTX)
    assert look["kind"] == "none" and "an operator must act" in look["summary"]
    rec = advice.recommendation("t", p, brokers, CTX, log_info={3: {"brokerEpoch": 100, "logEndOffset": 50}})
    assert rec["action"] == "unclean_recovery" and rec["candidate"] == 3 and rec["risk"] == advice.RISK_COMMITTED
    assert rec["summary"].startswith("ELR members [1, 2] will restart uncleanly")


def test_one_clean_one_killed_waits_for_the_clean_one() -> None:
    brokers = _brokers(b1=KILLED, b2=CLEAN)
    look = advice.outlook(_elr_pair(), brokers, CTX)
    assert look["kind"] == "waits_for_broker" and "elects 2 from the ELR (clean) as soon as broker 2" in look["summary"]
    assert "broker 1 will restart uncleanly and lose its ELR seat" in look["summary"]
    rec = advice.recommendation("t", _elr_pair(), brokers, CTX)
    assert rec["action"] == "wait_for_broker" and rec["waitFor"] == [2] and rec["risk"] == advice.RISK_NONE
    assert "next start of broker 2 is predicted clean" in rec["summary"]


def test_a_partition_with_a_leader_says_which_stopped_elr_member_loses_its_seat() -> None:
    p = PartitionState("t", 0, replicas=(0, 1, 2), isr=(0,), elr=(1, 2), last_known_elr=(), leader=0)
    look = advice.outlook(p, _brokers(b1=KILLED, b2=CLEAN), CTX)
    assert look["elrSeatsLost"] == [1] and "broker 1 will restart uncleanly and lose its ELR seat" in look["summary"]
    assert advice.outlook(p, _brokers(), CTX)["elrSeatsLost"] == []


def test_unknown_restarts_do_not_claim_no_risk() -> None:
    brokers = _brokers()  # both fenced by a session timeout, no agent
    rec = advice.recommendation("t", _elr_pair(), brokers, CTX)
    assert rec["action"] == "wait_for_broker" and rec["risk"] == advice.RISK_UNKNOWN
    look = advice.outlook(_elr_pair(), brokers, CTX)
    assert "(if 1 restarts uncleanly it loses its ELR seat)" in look["summary"]


# --- no contradictory risk statements, anywhere the simulator goes -----------------------------------------------


def stopped(state: BrokerState, clean: bool) -> BrokerState:
    """``state`` with its agent's report of a clean stop (its epoch in its one log dir) or a kill (no file)."""
    found = report_of(state.epoch, state.epoch, dirs=1) if clean else report_of(state.epoch, None, dirs=1, with_file=0)
    return dataclasses.replace(state, clean_shutdown=found)


LOSS_WORDS = ("may lose", "may be lost", "is lost", "lose committed", "loses whatever")


@pytest.mark.parametrize("kind", ["faults", *sorted(__import__("elrwatch.state.simulator").state.simulator.SCENARIOS)])
def test_no_recommendation_claims_no_risk_next_to_a_loss(kind: str) -> None:
    """Along every simulator scenario (advice after every few records; without agents, and with every stopped broker
    reported killed, or reported clean): a recommendation whose risk is ``none`` never says that data may be lost."""
    from core_events import valid_stream

    from elrwatch.state.replay import Replayer

    replayer = Replayer()
    lines = valid_stream(kind)
    checked = 0
    for seq, text in enumerate(lines, 1):
        replayer.feed_line(text, "sim", seq)
        if seq % 7 and seq != len(lines):
            continue
        cluster = replayer.cluster
        # as replayed (no agent), and with an agent report on every stopped broker: all killed, or all clean
        variants = [cluster.brokers] + [
            {b: state if state.active else stopped(state, clean) for b, state in cluster.brokers.items()}
            for clean in (False, True)
        ]
        for brokers in variants:
            for t, p in cluster.iter_partitions():
                _, rec = advice.advice_of(t.name, p, brokers, advice.topic_context(cluster, t), cluster.is_active)
                checked += 1
                if rec["risk"] == advice.RISK_NONE:
                    assert not any(word in rec["summary"] for word in LOSS_WORDS), (kind, seq, rec["summary"])
                    assert "will restart uncleanly" not in rec["summary"] or "Wait for" in rec["summary"]
    assert checked


def test_the_last_replica_standing_advice_carries_its_risk() -> None:
    p = PartitionState("t", 0, replicas=(0, 1, 2), isr=(0,), elr=(), last_known_elr=(), leader=0)
    off = controller.TopicContext(min_isr=2, elr_enabled=False, metadata_version=mv.DEFAULT_LEVEL)
    brokers = {b: BrokerState(b, epoch=1, fenced=b != 0) for b in (0, 1, 2)}
    rec = advice.recommendation("t", p, brokers, off)
    assert "Last replica standing" in rec["summary"] and rec["risk"] == advice.RISK_COMMITTED


def test_topic_id_constant_is_the_one_the_stream_uses() -> None:
    assert any(TOPIC_ID in text for text in _metadata())
