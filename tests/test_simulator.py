"""The simulator: deterministic, Kafka's record order and versions, and its output replays to its own state."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from elrwatch.cli import app
from elrwatch.state.audit import DURABILITY_MARGIN_LOST
from elrwatch.state.records import Record, parse_line
from elrwatch.state.replay import replay_lines
from elrwatch.state.simulator import SCENARIOS, Simulator, simulate

SHAPE = {"brokers": 6, "topics": 2, "partitions": 5, "replication_factor": 3, "min_isr": 2}


def _run(**kwargs: object) -> tuple[Simulator, list[dict]]:
    out = io.BytesIO()
    sim = simulate(out, **{**SHAPE, "seed": 11, **kwargs})  # type: ignore[arg-type]
    lines = out.getvalue().splitlines()
    return sim, [orjson.loads(line) for line in lines]


def assert_replay_matches(sim: Simulator, envelopes: list[dict]) -> dict:
    """Replay the simulator's output with elrwatch's replay and compare every partition and broker."""
    lines = [orjson.dumps(envelope) for envelope in envelopes]
    replayer = replay_lines(lines, source="sim")
    assert replayer.quarantined == []
    assert replayer.counts.applied == len(lines)
    cluster = replayer.cluster
    for p in sim.partitions:
        replayed = cluster.partition(p.topic_id, p.partition_id)
        assert replayed is not None
        assert replayed.registration() == p.registration(), (p, replayed)
    assert sorted(cluster.brokers) == sorted(sim.brokers)
    for broker_id, state in sim.brokers.items():
        other = cluster.brokers[broker_id]
        assert (other.epoch, other.fenced, other.in_controlled_shutdown, other.registered) == (
            state.epoch,
            state.fenced,
            state.in_controlled_shutdown,
            state.registered,
        )
    return replayer.document(advice=False)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_scenario_replays_to_the_simulators_state_without_violations(scenario: str) -> None:
    sim, envelopes = _run(scenario=scenario)
    document = assert_replay_matches(sim, envelopes)
    assert document["violations"] == []
    assert [e["offset"] for e in envelopes] == list(range(len(envelopes)))
    timestamps = [e["timestamp"] for e in envelopes]
    assert timestamps == sorted(timestamps)
    for envelope in envelopes:
        assert isinstance(parse_line(orjson.dumps(envelope), "sim", 1), Record), envelope


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_faults_replay_to_the_simulators_state(seed: int) -> None:
    sim, envelopes = _run(faults=0.6, records=1500, seed=seed)
    assert len(envelopes) >= 1500
    document = assert_replay_matches(sim, envelopes)
    # Kafka's invariants always hold; only the durability margin may be lost, by design of the faults (an ELR
    # member restarting uncleanly, a min.insync.replicas change wiping the ELR).
    assert {v["kind"] for v in document["violations"]} <= {DURABILITY_MARGIN_LOST}
    assert sim.counts_by_type.get("PARTITION_CHANGE_RECORD", 0) > 100


def test_same_seed_same_bytes_other_seed_other_ids() -> None:
    outputs = []
    for seed in (5, 5, 6):
        out = io.BytesIO()
        simulate(out, **SHAPE, seed=seed, faults=0.5, records=400)
        outputs.append(out.getvalue())
    assert outputs[0] == outputs[1]
    assert outputs[0] != outputs[2]


def test_topic_ids_are_kafka_uuids() -> None:
    _, envelopes = _run(scenario="rolling-restart")
    ids = [e["data"]["topicId"] for e in envelopes if e["type"] == "TOPIC_RECORD"]
    assert len(ids) == 2 and len(set(ids)) == 2
    for topic_id in ids:
        assert len(topic_id) == 22 and not topic_id.startswith("-")
        assert set(topic_id) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_bootstrap_records_and_versions() -> None:
    _, envelopes = _run(scenario="broker-failure-storm")
    types = [e["type"] for e in envelopes]
    assert types[:3] == ["FEATURE_LEVEL_RECORD", "FEATURE_LEVEL_RECORD", "CONFIG_RECORD"]
    assert envelopes[0]["data"] == {"name": "metadata.version", "featureLevel": 26}
    assert envelopes[1]["data"] == {"name": "eligible.leader.replicas.version", "featureLevel": 1}
    registrations = [e for e in envelopes if e["type"] == "REGISTER_BROKER_RECORD"]
    assert {e["version"] for e in registrations} == {3}
    assert all(e["data"]["brokerEpoch"] == e["offset"] for e in registrations)
    assert {e["version"] for e in envelopes if e["type"] in ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD")} == {2}
    assert types.index("TOPIC_RECORD") > max(i for i, t in enumerate(types) if t == "REGISTER_BROKER_RECORD")


def test_fence_record_follows_the_partition_changes_and_unfence_precedes_elections() -> None:
    _, envelopes = _run(scenario="broker-failure-storm")
    last = envelopes[-1]
    assert last["type"] == "BROKER_REGISTRATION_CHANGE_RECORD" and last["data"]["fenced"] == 1
    changes = [e for e in envelopes if e["type"] == "PARTITION_CHANGE_RECORD"]
    assert changes and all(e["offset"] < last["offset"] for e in changes)
    assert all(0 not in e["data"].get("isr", ()) for e in changes)

    _, envelopes = _run(scenario="last-replica-standing-elr", topics=1, partitions=1)
    unfence_2 = next(
        i
        for i, e in enumerate(envelopes)
        if e["type"] == "BROKER_REGISTRATION_CHANGE_RECORD" and e["data"].get("fenced") == -1 and i > 20
    )
    electing = [e for e in envelopes[unfence_2:] if e["type"] == "PARTITION_CHANGE_RECORD" and "leader" in e["data"]]
    assert electing and electing[0]["data"]["leader"] == 1  # broker 2 restarted uncleanly: 1 from the ELR wins


def test_last_replica_standing_without_elr_reelects_the_unclean_broker() -> None:
    sim, envelopes = _run(scenario="last-replica-standing-no-elr", topics=1, partitions=1)
    assert not any(e["type"] == "FEATURE_LEVEL_RECORD" and "eligible" in e["data"]["name"] for e in envelopes)
    leaders = [
        e["data"]["leader"] for e in envelopes if e["type"] == "PARTITION_CHANGE_RECORD" and "leader" in e["data"]
    ]
    assert leaders[:4] == [1, 2, -1, 2]  # the last ISR member comes back as leader (data loss without ELR)
    assert sim.partitions[0].elr == ()


def test_kip966_walkthrough_ends_like_the_conformance_case() -> None:
    sim, _ = _run(scenario="kip966-walkthrough", topics=1, partitions=1)
    p = sim.partitions[0]
    assert p.replicas == (0, 1, 2, 3)
    assert (p.isr, p.elr, p.last_known_elr, p.leader, p.leader_epoch, p.partition_epoch) == (
        (2, 1, 3),
        (),
        (),
        2,
        2,
        8,
    )


def test_min_isr_change_writes_clear_elr_after_its_config() -> None:
    _, envelopes = _run(scenario="min-isr-change")
    types = [e["type"] for e in envelopes]
    clear = [i for i, t in enumerate(types) if t == "CLEAR_ELR_RECORD"]
    assert len(clear) == 2
    assert all(types[i - 1] == "CONFIG_RECORD" for i in clear)
    assert envelopes[clear[0]]["data"] == {"topicName": "topic-0"}
    assert envelopes[clear[1]]["data"] == {"topicName": ""}


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        simulate(None, **SHAPE, seed=1)
    with pytest.raises(ValueError, match="unknown scenario"):
        simulate(None, **SHAPE, seed=1, scenario="nope")
    with pytest.raises(ValueError, match="replication factor"):
        simulate(None, **{**SHAPE, "replication_factor": 9}, seed=1, faults=0.1)


def test_cli_writes_file_and_rejects_bad_options(tmp_path: Path) -> None:
    runner = CliRunner()
    target = tmp_path / "out.jsonl"
    args = ["simulate", "--brokers", "4", "--topics", "1", "--partitions", "2", "--seed", "3"]
    ok = runner.invoke(app, [*args, "--scenario", "rolling-restart", "--output", str(target)])
    assert ok.exit_code == 0, ok.output
    lines = target.read_bytes().splitlines()
    assert lines and orjson.loads(lines[-1])["offset"] == len(lines) - 1
    both = runner.invoke(app, [*args, "--scenario", "rolling-restart", "--faults", "0.5"])
    assert both.exit_code != 0 and "exactly one" in both.output
    unknown = runner.invoke(app, [*args, "--scenario", "nope"])
    assert unknown.exit_code != 0 and "unknown scenario" in unknown.output
