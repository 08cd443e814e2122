"""Will a broker's next start be clean? elrwatch's prediction against Kafka 4.4.0's own decision, with an
``elrwatch agent`` beside each broker reading its log dirs' ``.kafka_cleanshutdown``.

Brokers 1..3 hold ``r`` ([1, 2, 3]) and ``s`` ([4, 2, 3]), both with min ISR 3; broker 4 also holds the event topic,
which the metadata-log bridge (on the controller's log) and the agents publish to. The story:

* broker 2 is stopped with SIGTERM (a clean shutdown), broker 3 killed with ``kill -9``: both enter the ELR of
  ``r`` and ``s``; broker 1 is stopped with SIGTERM too, so ``r`` has no leader (ELR [1, 2, 3]) while ``s`` keeps
  leader 4 (ISR [4], ELR [2, 3]);
* elrwatch predicts: 2's next start is clean, 3's unclean; ``r``'s outlook: 3 comes back without its ELR seat and
  elects nobody, 2 comes back and is elected from the ELR (clean);
* broker 3 restarts: Kafka removes it from both ELRs (``r``: ELR [1, 2], still leaderless; ``s``: ELR [2]: 2 kept);
* broker 2 restarts: Kafka elects it from the ELR of ``r``, cleanly (no RECOVERING).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_clusters import running_cluster
from test_agent_real import Agents, controller_bridge, partition_of
from test_bridge_real import consume_lines, replay

pytestmark = [pytest.mark.real_kafka, pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

EVENTS = "ev"
MIN_ISR_3 = {"min.insync.replicas": "3"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with running_cluster(brokers=4) as c:
        yield c


def elrwatch_now(ev_bootstrap: str, events: str = EVENTS) -> Any:
    """The core's state after every event published to ``events`` so far."""
    state, quarantined = replay(consume_lines(ev_bootstrap, events))
    assert [q for q in quarantined if q.reason != "conflict"] == []
    return state


def next_starts(state: Any) -> dict[int, dict[str, Any]]:
    from elrwatch.state import report

    return {b: report.broker_doc(state.brokers[b], state.epochs_known)["nextStart"] for b in state.brokers}


def test_clean_and_unclean_restarts_as_predicted(
    cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from elrwatch.state.advice import advise

    ev_bootstrap = f"127.0.0.1:{cluster.brokers[4].port}"
    cluster.create_topic(EVENTS, replica_assignment={0: [4]})
    cluster.create_topic("r", replica_assignment={0: [1, 2, 3]}, configs=MIN_ISR_3)
    cluster.create_topic("s", replica_assignment={0: [4, 2, 3]}, configs=MIN_ISR_3)
    bridge = controller_bridge(cluster, tmp_path, ev_bootstrap)
    agents = Agents(cluster, tmp_path, ev_bootstrap)
    try:
        for broker in (1, 2, 3):
            agents.start(broker)
        cluster.wait_for(
            lambda: {1, 2, 3} <= {b for b, s in elrwatch_now(ev_bootstrap).brokers.items() if s.clean_shutdown},
            "a clean-shutdown report from each agent (none: the brokers run)",
            timeout=60,
            interval=1.0,
        )
        cluster.stop_broker(2)  # SIGTERM
        cluster.wait_for(lambda: partition_of(cluster, "r")["elr"] == [2], "2 in the ELR of r")
        cluster.kill_broker(3)  # kill -9
        cluster.wait_for(lambda: sorted(partition_of(cluster, "s")["elr"]) == [2, 3], "2 and 3 in the ELR of s")
        cluster.stop_broker(1)  # SIGTERM: r loses its leader
        cluster.wait_for(lambda: partition_of(cluster, "r")["leader"] == -1, "r leaderless")
        assert sorted(partition_of(cluster, "r")["elr"]) == [1, 2, 3]

        def predicted() -> dict[int, dict[str, Any]]:
            return next_starts(elrwatch_now(ev_bootstrap))

        cluster.wait_for(
            lambda: (lambda n: n[2]["clean"] is True and n[3]["clean"] is False and n[1]["clean"] is True)(predicted()),
            "elrwatch predicts 1 and 2 clean, 3 unclean",
            timeout=60,
            interval=1.0,
        )
        prediction = predicted()
        assert prediction[2]["basis"].startswith("agent: every log dir (1) has .kafka_cleanshutdown with epoch")
        assert prediction[3]["basis"].startswith("agent: 1 of 1 log dirs have no .kafka_cleanshutdown")
        # without the agents' reports, the metadata alone: 1 led r when it stopped (a controlled shutdown: likely
        # clean), 3 was fenced by its session timeout (unknown); 2 led nothing, so its stop looks like 3's
        lines = consume_lines(ev_bootstrap, EVENTS)
        metadata_only = next_starts(replay([x for x in lines if b"CLEAN_SHUTDOWN_RECORD" not in x])[0])
        assert metadata_only[1]["clean"] is True and "controlled shutdown" in metadata_only[1]["basis"]
        assert metadata_only[3]["clean"] is None and "session timeout" in metadata_only[3]["basis"]
        state = elrwatch_now(ev_bootstrap)
        r_before = advise(state, "r", 0)
        returns = {e["broker"]: e for e in r_before["outlook"]["whenBrokerReturns"]}
        assert returns[3]["nextStart"]["clean"] is False and returns[3]["elects"] == -1  # loses its seat, elects nobody
        assert (returns[2]["elects"], returns[2]["how"], returns[2]["recovering"]) == (2, "elr", False)
        assert "broker 3 will restart uncleanly and lose its ELR seat" in r_before["outlook"]["summary"]
        assert r_before["recommendation"]["risk"] == "none" and 3 not in r_before["recommendation"]["waitFor"]
        s_before = advise(state, "s", 0)
        assert s_before["outlook"]["elrSeatsLost"] == [3]  # 2 keeps its seat in s, 3 loses it
        assert "broker 3 will restart uncleanly and lose its ELR seat" in s_before["outlook"]["summary"]

        # broker 3 comes back (unclean, as predicted): Kafka removes it from every ELR
        cluster.start_broker(3)
        cluster.wait_for(lambda: sorted(partition_of(cluster, "r")["elr"]) == [1, 2], "3 out of r's ELR")
        after_3 = {t: partition_of(cluster, t) for t in ("r", "s")}
        assert after_3["r"]["leader"] == -1  # as the outlook said: 3's return elects nobody
        assert after_3["s"]["elr"] == [2]  # the clean one kept, the unclean one removed

        # broker 2 comes back (clean, as predicted): Kafka elects it from r's ELR, cleanly
        cluster.start_broker(2)
        cluster.wait_for(lambda: partition_of(cluster, "r")["leader"] == 2, "2 elected in r")
        state = elrwatch_now(ev_bootstrap)
        cluster.wait_for(
            lambda: elrwatch_now(ev_bootstrap).partition(state.topic_by_name("r").topic_id, 0).leader == 2,
            "the bridge published 2's election",
        )
        state = elrwatch_now(ev_bootstrap)
        r_after = state.partition(state.topic_by_name("r").topic_id, 0)
        assert r_after.leader_recovery_state == 0 and r_after.last_leader_change == "elr"  # clean, from the ELR
        after_2 = partition_of(cluster, "r")
        with capsys.disabled():
            print(
                "\n[restart prediction] elrwatch: "
                + "; ".join(f"broker {b}: clean={prediction[b]['clean']} ({prediction[b]['basis']})" for b in (2, 3))
                + "\n  metadata only (no agent): "
                + "; ".join(f"broker {b}: clean={metadata_only[b]['clean']}" for b in (1, 2, 3))
                + f"\n  r outlook before: {r_before['outlook']['summary']}"
                + f"\n  s outlook before: {s_before['outlook']['summary']}"
                + f"\n  Kafka after 3 restarted: r leader {after_3['r']['leader']} ELR {after_3['r']['elr']}; "
                f"s leader {after_3['s']['leader']} ELR {after_3['s']['elr']}"
                + f"\n  Kafka after 2 restarted: r leader {after_2['leader']} ISR {after_2['isr']} ELR {after_2['elr']}"
                f" (leaderRecoveryState {r_after.leader_recovery_state}, elrwatch: {r_after.last_leader_change})"
            )
    finally:
        agents.stop_all()
        bridge.stop()


def test_every_elr_member_killed_then_the_last_known_leader(
    cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """All three replicas of ``u`` killed one after the other (ELR [1, 2, 3], last known leader 3): elrwatch predicts
    that each loses its ELR seat when it returns and that Kafka then elects 3 as last known leader (RECOVERING), and
    counts ``u`` in ``elrwatch_unclean_restart_pending_partitions``; Kafka does exactly that as they come back."""
    from elrwatch.state.advice import advise
    from elrwatch.state.gauges import key, loses_last_electable

    ev_bootstrap = f"127.0.0.1:{cluster.brokers[4].port}"
    events = "ev-u"  # this test's own event topic: it runs alone too
    cluster.create_topic(events, replica_assignment={0: [4]})
    for broker in (1, 2, 3):
        if cluster.brokers[broker].proc is None:
            cluster.start_broker(broker)
    cluster.create_topic("u", replica_assignment={0: [1, 2, 3]}, configs=MIN_ISR_3)
    cluster.wait_for(lambda: partition_of(cluster, "u")["isr"] == [1, 2, 3], "u in sync")
    bridge = controller_bridge(cluster, tmp_path, ev_bootstrap, events)
    agents = Agents(cluster, tmp_path, ev_bootstrap, events)
    try:
        for broker in (1, 2, 3):
            agents.start(broker)
        for broker, isr in ((1, [2, 3]), (2, [3]), (3, [])):
            cluster.kill_broker(broker)
            cluster.wait_for(lambda isr=isr: partition_of(cluster, "u")["isr"] == isr, f"u ISR {isr}")
        kafka_before = partition_of(cluster, "u")
        assert kafka_before["leader"] == -1 and sorted(kafka_before["elr"]) == [1, 2, 3]
        assert kafka_before["last_known_elr"] == [3]

        def u_of(state: Any) -> Any:
            return state.partition(state.topic_by_name("u").topic_id, 0)

        def pending(state: Any) -> bool:
            doomed = frozenset(b for b, n in next_starts(state).items() if n["clean"] is False)
            return {1, 2, 3} <= doomed and loses_last_electable(u_of(state), doomed)

        cluster.wait_for(lambda: pending(elrwatch_now(ev_bootstrap, events)), "1, 2, 3 predicted unclean", 60, 1.0)
        state = elrwatch_now(ev_bootstrap, events)
        assert state.partitions.gauges()[key("elrwatch_unclean_restart_pending_partitions")] >= 1
        doc = advise(state, "u", 0)
        outlook, rec = doc["outlook"], doc["recommendation"]
        assert outlook["then"]["elects"] == 3 and outlook["then"]["how"] == "last_known_leader"
        assert "brokers 1, 2, 3 will restart uncleanly and lose their ELR seats" in outlook["summary"]
        assert rec["action"] == "wait_for_last_known_leader" and rec["risk"] == "uncommitted_data"

        seen = []
        for broker in (1, 2, 3):
            cluster.start_broker(broker)
            seen.append((broker, partition_of(cluster, "u")))
        cluster.wait_for(lambda: partition_of(cluster, "u")["leader"] == 3, "3 elected in u")
        cluster.wait_for(
            lambda: u_of(elrwatch_now(ev_bootstrap, events)).leader == 3, "the bridge published 3's election"
        )
        final = elrwatch_now(ev_bootstrap, events)
        after = u_of(final)
        # a last-known-leader election (its record sets RECOVERING; the leader may have reported RECOVERED since)
        assert after.last_leader_change == "last_known_leader"
        assert sorted(seen[0][1]["elr"]) == [2, 3] and seen[0][1]["leader"] == -1  # 1 back: its seat gone
        assert seen[1][1]["elr"] == [3] and seen[1][1]["leader"] == -1  # 2 back: its seat gone
        with capsys.disabled():
            print(
                f"\n[all killed] elrwatch before: {outlook['summary']}\n  recommendation: {rec['summary']}"
                + "".join(
                    f"\n  Kafka after {b} restarted: leader {p['leader']} ELR {p['elr']} LKE {p['last_known_elr']}"
                    for b, p in seen
                )
                + f"\n  then: leader {after.leader} ({after.last_leader_change} election), now ISR {list(after.isr)}, "
                f"leaderRecoveryState {after.leader_recovery_state}"
            )
    finally:
        agents.stop_all()
        bridge.stop()
