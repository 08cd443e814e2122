"""`elrwatch recover` on a real Kafka 4.4.0 cluster with agents: a stranded partition whose replicas' logs diverged,
one replica's broker still down (fenced), and the status store built from the event topic.

Brokers 1..3 hold ``div`` ([1, 2, 3]) and ``solo`` ([3], whose fenced broker keeps an ELR seat); broker 4 holds the event topic ``ev``, which the
metadata-log bridge (on the controller's log), the agents and `elrwatch recover` publish to. The story (as in
tests/test_agent_real.py): 100 records on all three; 3 is killed; 50 acks=1 records on 1 and 2; 1 is killed, 2 leads
(epoch 1) and takes 20 more alone; 2 is killed; min ISR 2 clears the ELR. Brokers 1 and 2 come back, 3 stays down:
the candidate is 2 (highest epoch, longest log: 170), Kafka's own unclean pick would be 1 (150), and the reorder
[2, 1, 3] names the fenced broker 3, which ``kafka-reassign-partitions.sh`` refuses ("Unknown broker id 3").

Checked: the advice gives ``elrwatch recover … --execute`` and no reassign command; the refusals (log not reported,
candidate not alive, store too old, a non-empty ELR, a partition with a leader) each change nothing; the dry run
changes nothing; ``--execute`` elects 2 with an end offset equal to its reported log end offset, puts the order back
and publishes its four steps, which the partition's document then shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from kafka_clusters import running_cluster
from test_agent_real import Agents, controller_bridge, partition_of, replica_leo, strand_with_diverged_logs
from test_bridge_real import consume_lines, replay
from typer.testing import CliRunner

pytestmark = [pytest.mark.real_kafka, pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

TOPIC, SOLO, EVENTS = "div", "solo", "ev"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with running_cluster(brokers=4) as c:
        yield c


def write_store(url: str, lines: list[bytes], age_s: float = 0.0) -> dict[str, Any]:
    """A status store holding the state of the event lines (as the streaming job writes it: the partitions' stored
    form with their replicas' log info); ``age_s``: written that long ago. Returns ``div``-0's document."""
    from elrwatch.state import report
    from elrwatch.state.gauges import PipelineCounts
    from elrwatch.state.partition_row import partition_row
    from elrwatch.store import StatusStore
    from elrwatch.store.schema import UPDATED_AT_MS

    state, quarantined = replay(lines)
    assert [q for q in quarantined if q.reason != "conflict"] == []
    store = StatusStore(url)
    try:
        store.load_document(report.build_document(state, PipelineCounts(), [], report.load_advice()))
        rows = [
            partition_row(t.name, p, state.effective_min_isr(t), report.stored_partition(state, t, p))
            for t, p in state.iter_partitions()
        ]
        store.write_batch(1, partition_rows=rows)
        if age_s:  # as if the job had last written it age_s ago
            with store._writer.begin() as conn:
                store._meta_put(conn, UPDATED_AT_MS, int((time.time() - age_s) * 1000))
        doc = store.get_partition(TOPIC, 0)
    finally:
        store.dispose()
    assert doc is not None
    return doc


def recover(cluster: Any, url: str, *args: str) -> tuple[int, list[str]]:
    """``elrwatch recover div 0 ARGS`` against the cluster (the event topic on broker 4)."""
    from elrwatch.cli import app

    ev = f"127.0.0.1:{cluster.brokers[4].port}"
    argv = ["recover", *(args or (TOPIC, "0")), "--store", url, "--bootstrap-servers", ev]
    argv += ["--admin-bootstrap-servers", cluster.bootstrap, "--topic", EVENTS, "--timeout", "60"]
    result = CliRunner().invoke(app, argv)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output.splitlines()


def kafka_reassign(cluster: Any, replicas: list[int], workdir: Path) -> subprocess.CompletedProcess[str]:
    """Kafka's own kafka-reassign-partitions.sh --execute with a same-set reorder of div-0."""
    document = {"version": 1, "partitions": [{"topic": TOPIC, "partition": 0, "replicas": replicas}]}
    path = workdir / "reorder.json"
    path.write_text(json.dumps(document))
    command = cluster._java_cmd(
        "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
        "--bootstrap-server",
        cluster.bootstrap,
        "--reassignment-json-file",
        str(path),
        "--execute",
    )
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=os.environ.copy())


def operator_steps(lines: list[bytes]) -> list[dict[str, Any]]:
    return [e["data"] for e in map(orjson.loads, lines) if e.get("type") == "OPERATOR_RECOVERY_RECORD"]


def test_recover_with_a_replica_broker_down(cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:

    ev_bootstrap = f"127.0.0.1:{cluster.brokers[4].port}"
    cluster.create_topic(EVENTS, replica_assignment={0: [4]})
    cluster.create_topic(TOPIC, replica_assignment={0: [1, 2, 3]})
    cluster.create_topic(SOLO, replica_assignment={0: [3]})
    bridge = controller_bridge(cluster, tmp_path, ev_bootstrap)
    agents = Agents(cluster, tmp_path, ev_bootstrap)
    url = f"sqlite:///{tmp_path}/store.db"
    report: list[str] = []
    try:
        strand_with_diverged_logs(cluster)
        for broker in (1, 2):  # broker 3 stays down
            cluster.start_broker(broker)
        cluster.wait_for(lambda: cluster.down_brokers() == {3}, "brokers 1, 2 unfenced, 3 fenced")
        solo = partition_of(cluster, SOLO)
        assert (solo["leader"], solo["isr"], solo["elr"]) == (-1, [], [3]), solo  # 3 keeps an ELR seat
        before = partition_of(cluster)
        assert before["leader"] == -1 and before["replicas"] == [1, 2, 3]

        # No agent has reported yet: the candidate's log is unknown.
        cluster.wait_for(
            lambda: (lambda s: s.is_active(1) and s.is_active(2))(replay(consume_lines(ev_bootstrap, EVENTS))[0]),
            "the events show brokers 1 and 2 active",
        )
        write_store(url, consume_lines(ev_bootstrap, EVENTS))
        code, out = recover(cluster, url, TOPIC, "0", "--candidate", "1")
        assert code == 1 and len(out) == 1 and out[0].startswith("refused: no current log info from candidate 1"), out
        report.append(out[0])
        assert partition_of(cluster) == before

        for broker in (1, 2, 3):  # 3's agent cannot report: its broker is down
            agents.start(broker)
        cluster.wait_for(
            lambda: write_store(url, consume_lines(ev_bootstrap, EVENTS))["recommendation"].get("candidateLog"),
            "the agents of 1 and 2 reported",
            timeout=90,
            interval=1.0,
        )
        doc = write_store(url, consume_lines(ev_bootstrap, EVENTS))
        rec = doc["recommendation"]
        assert rec["action"] == "unclean_recovery" and rec["candidate"] == 2
        assert rec["candidateLog"]["logEndOffset"] == 170 == replica_leo(cluster, 2)
        assert rec["reorder"] == [2, 1, 3]

        # Kafka's reassign tool refuses the reorder (fenced 3); the advice does not show it, but elrwatch recover.
        refused = kafka_reassign(cluster, [2, 1, 3], tmp_path)
        assert refused.returncode != 0 and "Unknown broker id 3" in refused.stdout + refused.stderr
        assert not any("kafka-reassign-partitions" in c for c in rec["commands"]), rec["commands"]
        assert rec["commands"][0] == "elrwatch recover div 0 --execute", rec["commands"]
        assert "Unknown broker id" in rec["summary"]
        assert partition_of(cluster) == before

        # Refusals, each changing nothing.
        refusals = [
            (("--candidate", "3", "--accept-unknown-log"), 0, "refused: candidate 3 is not alive"),
            ((), 600, "refused: the status store's view is "),
        ]
        for extra, age_s, expected in refusals:
            write_store(url, consume_lines(ev_bootstrap, EVENTS), age_s=age_s)
            code, out = recover(cluster, url, TOPIC, "0", *extra)
            assert code == 1 and len(out) == 1 and out[0].startswith(expected), out
            assert not age_s or "s old (bound 300 s, --max-store-age)" in out[0], out
            report.append(out[0])
            assert partition_of(cluster) == before
        write_store(url, consume_lines(ev_bootstrap, EVENTS))
        code, out = recover(cluster, url, SOLO, "0")
        assert code == 1 and out == [
            "refused: solo-0's ELR [3] is not empty (Kafka reports it): Kafka elects an ELR member cleanly when it "
            "is back"
        ], out
        report.append(out[0])

        # The dry run: the plan, nothing changed.
        code, plan = recover(cluster, url)
        assert code == 0, plan
        assert plan[0].startswith("plan for div-0: elect 2 uncleanly") and "log end offset 170" in plan[0], plan
        assert plan[1] == "records each other replica loses: ≈ 0 records on 1, unknown on 3 (fenced, not reported)"
        assert plan[2] == "Kafka's own unclean election would elect 1 (first live replica, losing ≈ 20 records)"
        assert plan[3] == "  1/4 reorder: replicas [1, 2, 3] → [2, 1, 3] (same set, candidate first)"
        assert plan[-1].startswith("dry run: nothing changed")
        assert partition_of(cluster) == before
        assert operator_steps(consume_lines(ev_bootstrap, EVENTS)) == []

        # --execute: the candidate elected with its reported log end offset, the order put back.
        code, lines = recover(cluster, url, TOPIC, "0", "--execute")
        assert code == 0, lines
        after = partition_of(cluster)
        assert after["leader"] == 2 and after["replicas"] == [1, 2, 3], after
        from kafka import KafkaAdminClient, TopicPartition
        from kafka.admin import OffsetSpec

        admin = KafkaAdminClient(bootstrap_servers=cluster.answering_bootstrap.split(","))
        try:
            tp = TopicPartition(TOPIC, 0)
            end = admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset
        finally:
            admin.close()
        assert end == rec["candidateLog"]["logEndOffset"] == 170
        executed = [line for line in lines if line.startswith(("step", "recovered"))]
        assert [line.split(":")[0] for line in executed[-5:]] == [
            "step 1/4 reorder",
            "step 2/4 elect",
            "step 3/4 verify",
            "step 4/4 restore",
            "recovered div-0",
        ], lines
        assert "end offset 170 = 2's reported log end offset 170" in executed[-3]

        # Each step went to the event topic; the partition's document shows the recovery.
        events = consume_lines(ev_bootstrap, EVENTS)
        steps = operator_steps(events)
        assert [(s["step"], s["outcome"]) for s in steps] == [
            ("reorder", "done"),
            ("elect", "done"),
            ("verify", "done"),
            ("restore", "done"),
        ]
        assert steps[2]["leader"] == 2 and steps[2]["endOffset"] == 170 == steps[2]["candidateLogEndOffset"]
        doc = write_store(url, events)
        summary = doc["operatorRecovery"]["summary"]
        assert summary.startswith("recovered by operator: elected 2, lost ≈ 0 records on 1, unknown on 3"), summary

        # A second run refuses: the partition has a leader now.
        code, out = recover(cluster, url)
        assert code == 1 and out == ["refused: div-0 has leader 2 (Kafka reports it): nothing to recover"], out
        report.append(out[0])
        assert partition_of(cluster)["replicas"] == [1, 2, 3]
        with capsys.disabled():
            said = [line for line in (refused.stdout + refused.stderr).splitlines() if "Unknown broker id" in line]
            print(
                f"\n[recover, broker 3 down] kafka-reassign-partitions.sh [2, 1, 3]: exit {refused.returncode}, {said}"
            )
            print("[recover] advice commands: " + json.dumps(rec["commands"]))
            print("[recover] dry run:\n  " + "\n  ".join(plan))
            print("[recover] --execute:\n  " + "\n  ".join(lines))
            print(
                f"[recover] end offset {end}, candidate's reported log end offset {rec['candidateLog']['logEndOffset']}"
            )
            print("[recover] refusals:\n  " + "\n  ".join(report))
            print(f"[recover] partition document: {summary}")
    finally:
        agents.stop_all()
        bridge.stop()
