"""Property tests over random fault sequences from the simulator (hypothesis).

* replaying the simulator's records (elrwatch.state.replay) reproduces its state exactly, and the audit finds
  no broken Kafka invariant (only a lost durability margin, which the faults cause on purpose);
* advice never makes a fenced or non-replica broker leader: a recommendation's candidate is a live replica, a
  reorder is a permutation of the replicas led by it, and running its commands through the controller model
  elects exactly it;
* what-if with no broker down changes nothing.
"""

from __future__ import annotations

import io
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elrwatch.state import controller
from elrwatch.state.advice import STRATEGIES, partition_advice, topic_context
from elrwatch.state.audit import DURABILITY_MARGIN_LOST
from elrwatch.state.replay import replay_lines
from elrwatch.state.simulator import simulate
from elrwatch.state.whatif import what_if


@st.composite
def fault_runs(draw: st.DrawFn) -> dict[str, object]:
    brokers = draw(st.integers(min_value=3, max_value=7))
    replication_factor = draw(st.integers(min_value=1, max_value=min(brokers, 4)))
    return {
        "brokers": brokers,
        "topics": draw(st.integers(min_value=1, max_value=3)),
        "partitions": draw(st.integers(min_value=1, max_value=6)),
        "replication_factor": replication_factor,
        "min_isr": draw(st.integers(min_value=1, max_value=replication_factor + 1)),
        "seed": draw(st.integers(min_value=0, max_value=2**31)),
        "faults": draw(st.floats(min_value=0.0, max_value=1.0)),
        "records": draw(st.integers(min_value=50, max_value=600)),
    }


def _replayed(run: dict[str, object]):  # type: ignore[no-untyped-def]
    out = io.BytesIO()
    sim = simulate(out, **run)  # type: ignore[arg-type]
    replayer = replay_lines(out.getvalue().splitlines(), source="sim")
    return sim, replayer


PROPERTY_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(fault_runs())
def test_replay_reproduces_the_simulator_and_kafka_invariants_hold(run: dict[str, object]) -> None:
    sim, replayer = _replayed(run)
    assert replayer.quarantined == []
    assert replayer.counts.duplicates == 0
    cluster = replayer.cluster
    for p in sim.partitions:
        replayed = cluster.partition(p.topic_id, p.partition_id)
        assert replayed is not None
        assert replayed.registration() == p.registration()
    assert {b: (s.epoch, s.fenced, s.in_controlled_shutdown, s.registered) for b, s in cluster.brokers.items()} == {
        b: (s.epoch, s.fenced, s.in_controlled_shutdown, s.registered) for b, s in sim.brokers.items()
    }
    kinds = {v["kind"] for v in replayer.document(advice=False)["violations"]}
    assert kinds <= {DURABILITY_MARGIN_LOST}


def _command_json(commands: list[str], name: str) -> dict | None:
    for command in commands:
        if command.endswith(f"> {name}"):
            return json.loads(command.split("'")[1])
    return None


@PROPERTY_SETTINGS
@given(fault_runs(), st.sampled_from((None, *STRATEGIES)))
def test_advice_only_makes_live_replicas_leader_and_its_commands_work(run: dict[str, object], strategy) -> None:  # type: ignore[no-untyped-def]
    _, replayer = _replayed(run)
    cluster = replayer.cluster
    for topic, p in cluster.iter_partitions():
        outlook, rec = partition_advice(cluster, topic, p, strategy)
        json.dumps(outlook)
        json.dumps(rec)
        for entry in outlook.get("whenBrokerReturns", []):
            assert entry["broker"] in p.replicas and not cluster.is_active(entry["broker"])
            assert entry["elects"] == -1 or entry["elects"] in p.replicas
        candidate = rec["candidate"]
        if candidate is None:
            assert not any("--election-type" in command for command in rec["commands"])
            continue
        assert candidate in p.replicas and cluster.is_active(candidate)
        reorder = _command_json(rec["commands"], "reorder.json")
        elect = _command_json(rec["commands"], "elect.json")
        assert elect == {"partitions": [{"topic": topic.name, "partition": p.partition_id}]}
        ctx = topic_context(cluster, topic)
        copy = p.copy()
        if reorder is not None:
            replicas = reorder["partitions"][0]["replicas"]
            assert sorted(replicas) == sorted(p.replicas) and replicas[0] == candidate
            decision = controller.reassign(copy, replicas, cluster.brokers, ctx)
            assert decision.error is None
            controller.apply_decision(copy, decision)
        election = "UNCLEAN" if "--election-type unclean" in " ".join(rec["commands"]) else "PREFERRED"
        decision = controller.elect_leaders(copy, election, cluster.brokers, ctx)
        controller.apply_decision(copy, decision)
        assert copy.leader == candidate, (p, rec)


@PROPERTY_SETTINGS
@given(fault_runs())
def test_what_if_with_no_broker_down_changes_nothing(run: dict[str, object]) -> None:
    _, replayer = _replayed(run)
    cluster = replayer.cluster
    before = [p.registration() for _, p in cluster.iter_partitions()]
    result = what_if(cluster, [])
    assert result["changedPartitions"] == 0
    assert result["counts"] == result["countsBefore"]
    assert [p.registration() for _, p in cluster.iter_partitions()] == before
