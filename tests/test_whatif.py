"""What-if: brokers taken down through the controller model on copies of the replayed cluster."""

from __future__ import annotations

import io
import json

from typer.testing import CliRunner

from elrwatch.cli import app
from elrwatch.state.replay import replay_lines
from elrwatch.state.simulator import Simulator
from elrwatch.state.whatif import what_if


def _cluster(build=None, **shape):  # type: ignore[no-untyped-def]
    out = io.BytesIO()
    params = {"brokers": 4, "topics": 2, "partitions": 4, "replication_factor": 3, "min_isr": 2, "seed": 9}
    sim = Simulator(**{**params, **shape}, out=out)
    sim.bootstrap()
    if build is not None:
        build(sim)
    sim.flush()
    return replay_lines(out.getvalue().splitlines()).cluster, sim, out.getvalue()


def _registrations(cluster):  # type: ignore[no-untyped-def]
    return [p.registration() for _, p in cluster.iter_partitions()]


def test_nobody_down_changes_nothing() -> None:
    cluster, _, _ = _cluster(lambda sim: sim.fence(3))
    before = _registrations(cluster)
    result = what_if(cluster, [])
    assert result["changedPartitions"] == 0
    assert result["counts"] == result["countsBefore"]
    assert all(value == 0 for value in result["newlyAffected"].values())
    assert _registrations(cluster) == before


def test_fencing_two_of_three_replicas_puts_partitions_under_min_isr_without_touching_the_cluster() -> None:
    cluster, sim, _ = _cluster()
    before = _registrations(cluster)
    result = what_if(cluster, [0, 1])
    affected = [p for p in sim.partitions if {0, 1} <= set(p.replicas)]
    assert result["counts"]["underMinIsr"] == len(affected) > 0
    assert result["leadersMoved"] == sum(1 for p in sim.partitions if p.leader in (0, 1))
    assert result["counts"]["leaderless"] == 0  # a third replica is always live with 4 brokers, RF 3
    for entry in result["underMinIsr"]:
        assert entry["isr"] and not {0, 1} & set(entry["isr"])
        # 0 left while the ISR stayed at min ISR (no ELR seat); 1 left as it fell below: ELR [1]
        assert entry["elr"] == [1]
    assert _registrations(cluster) == before


def test_all_replicas_down_needs_unclean_election_and_unclean_restart_loses_elr_seats() -> None:
    cluster, _, _ = _cluster(brokers=3, topics=1, partitions=2)
    fenced = what_if(cluster, [0, 1, 2])
    assert fenced["counts"] == {"underMinIsr": 2, "leaderless": 2, "uncleanElectionNeeded": 2}
    assert all(entry["elr"] and len(entry["lastKnownElr"]) == 1 for entry in fenced["leaderless"])
    unclean = what_if(cluster, [0, 1, 2], unclean=True)
    assert unclean["counts"]["leaderless"] == 2
    assert all(entry["elr"] == [] for entry in unclean["leaderless"])


def test_limit_truncates_lists_not_counts() -> None:
    cluster, _, _ = _cluster()
    result = what_if(cluster, [0, 1], limit=1)
    assert len(result["underMinIsr"]) == 1
    assert result["underMinIsrTruncated"] is True
    assert result["counts"]["underMinIsr"] > 1


def test_cli_whatif(tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, _, data = _cluster()
    path = tmp_path / "events.jsonl"
    path.write_bytes(data)
    runner = CliRunner()
    result = runner.invoke(app, ["whatif", "--down", "0,1", str(path)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["down"] == [0, 1] and doc["counts"]["underMinIsr"] > 0
    bad = runner.invoke(app, ["whatif", "--down", "zero", str(path)])
    assert bad.exit_code != 0 and "--down" in bad.output
