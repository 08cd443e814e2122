"""`elrwatch agent` on a real Kafka 4.4.0 cluster: logs that really diverge, a partition with neither ISR nor ELR
(unclean leader election disabled), an agent beside each replica, and elrwatch's recommendation carried out with the
exact commands it gives.

Brokers 1..3 hold ``div`` ([1, 2, 3], min ISR 1); broker 4 holds the event topic, which the metadata-log bridge
(on the controller's log) and the agents publish to. The story:

* 100 records on all three; broker 3 is killed; 50 acks=1 records on 1 and 2 (leader 1, epoch 0);
* broker 1 is killed: 2 leads (epoch 1) and takes 20 acks=1 records alone; broker 2 is killed: no leader, ELR [2];
* min ISR 2 on ``div`` clears the ELR and LastKnownELR: neither ISR nor ELR is left;
* broker 3's last batch is torn (its segment file cut short while it is down);
* agents start beside 1, 2, 3, then the brokers restart: nothing is elected (unclean election is off).

Kafka's own DumpLogSegments on each replica's files gives every replica's log end offset and last leader epoch; the
recommendation must name the one with the longest log of the highest epoch, with the agents' figures equal to
Kafka's. Then: an agent restart publishes nothing twice; a broker that re-registers (new epoch) makes its old info
stale until its agent publishes again; the recommended commands (a replica reorder, then an unclean election) elect
the candidate, and the partition then holds exactly the candidate's records, no fewer than any alternative.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from kafka_clusters import running_cluster
from test_bridge_real import BridgeThread, consume_lines, replay
from test_replica_log_real import kafka_tool

from elrwatch.bridge import replica_log as rl

pytestmark = [pytest.mark.real_kafka, pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

TOPIC, EVENTS = "div", "ev"
_BATCH = re.compile(r"baseOffset: (\d+) lastOffset: (\d+) .*partitionLeaderEpoch: (-?\d+).* crc: (\d+)")
_INVALID = re.compile(r"Found (\d+) invalid bytes at the end of")


def kafka_view(cluster: Any, broker: int) -> dict[str, Any]:
    """Broker ``broker``'s replica of div-0 as DumpLogSegments shows it: batches (base, last, epoch, crc), log end
    offset, last leader epoch, records, invalid tail bytes."""
    files = [str(p) for _, p in rl.segments(cluster.brokers[broker].data_dir / f"{TOPIC}-0")]
    out = kafka_tool(cluster, "org.apache.kafka.tools.DumpLogSegments", "--files", ",".join(files))
    batches = [tuple(int(g) for g in m.groups()) for m in _BATCH.finditer(out)]
    assert batches, out[-2000:]
    return {
        "batches": batches,
        "logEndOffset": batches[-1][1] + 1,
        "lastEpoch": batches[-1][2],
        "records": sum(last - base + 1 for base, last, _, _ in batches),
        "invalid": [int(n) for n in _INVALID.findall(out)],
    }


def produce(cluster: Any, count: int, acks: int | str, tag: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=cluster.answering_bootstrap.split(","),
        acks=acks,
        linger_ms=20,
        retries=5,
        request_timeout_ms=10000,
    )
    try:
        for i in range(count):
            producer.send(TOPIC, value=f"{tag}-{i}".encode(), partition=0).get(timeout=30)
    finally:
        producer.close(10)


def replica_leo(cluster: Any, broker: int) -> int:
    return rl.read_replica_log(cluster.brokers[broker].data_dir / f"{TOPIC}-0").log_end_offset


def partition_of(cluster: Any, topic: str = TOPIC) -> dict[str, Any]:
    """DescribeTopicPartitions of ``topic``-0: leader, isr, elr, last_known_elr, replicas."""
    return cluster.describe_topic_partitions([topic])[(topic, 0)]


def controller_bridge(cluster: Any, workdir: Path, ev_bootstrap: str, events: str = EVENTS) -> BridgeThread:
    """The metadata-log bridge on the controller's log, publishing to ``events`` (a thread, stepping every 0.2 s)."""
    from elrwatch.bridge.runner import KafkaPublisher, LogBridge, Metrics, StateFile

    return BridgeThread(
        LogBridge(
            cluster.controller.metadata_dir,
            KafkaPublisher({"bootstrap.servers": ev_bootstrap}, events),
            StateFile(workdir / "bridge.json"),
            Metrics(),
        ),
        0.2,
    )


def strand_with_diverged_logs(cluster: Any) -> None:
    """``TOPIC``-0 on [1, 2, 3] stranded with diverged logs: 100 records on all three, broker 3 killed, 50 more on
    1 and 2 (broker 2 at 150), broker 1 killed, 20 more on 2 alone (leader epoch 1), broker 2 killed; then min ISR
    2 leaves it with neither ISR nor ELR nor LastKnownELR."""
    produce(cluster, 100, "all", "a")
    cluster.kill_broker(3)
    cluster.wait_for(lambda: partition_of(cluster)["isr"] == [1, 2], "ISR [1, 2]")
    produce(cluster, 50, 1, "b")
    cluster.wait_for(lambda: replica_leo(cluster, 2) == 150, "broker 2 at 150")
    cluster.kill_broker(1)
    cluster.wait_for(lambda: partition_of(cluster)["leader"] == 2, "leader 2")
    produce(cluster, 20, 1, "c")
    cluster.kill_broker(2)
    cluster.wait_for(lambda: partition_of(cluster)["leader"] == -1, "no leader")
    cluster.set_topic_config(TOPIC, "min.insync.replicas", "2")
    cluster.wait_for(
        lambda: (lambda p: p["isr"] == [] and p["elr"] == [] and p["last_known_elr"] == [])(partition_of(cluster)),
        "neither ISR nor ELR nor LastKnownELR",
    )


class Agents:
    """One agent thread per broker, publishing to the event topic, restartable from its state file."""

    def __init__(self, cluster: Any, workdir: Path, bootstrap: str, events: str = EVENTS) -> None:
        self.cluster, self.workdir, self.bootstrap, self.events = cluster, workdir, bootstrap, events
        self.threads: dict[int, BridgeThread] = {}

    def start(self, broker: int) -> Any:
        from elrwatch.bridge.agent import ReplicaLogAgent
        from elrwatch.bridge.runner import KafkaPublisher, Metrics, StateFile

        node = self.cluster.brokers[broker]
        agent = ReplicaLogAgent(
            [node.data_dir],
            node.metadata_dir,
            KafkaPublisher({"bootstrap.servers": self.bootstrap}, self.events),
            StateFile(self.workdir / f"agent-{broker}.json"),
            Metrics(),
            max_rate=50,
        )
        self.threads[broker] = BridgeThread(agent, 0.2)
        return agent

    def stop(self, broker: int) -> None:
        self.threads.pop(broker).stop()

    def stop_all(self) -> None:
        for broker in list(self.threads):
            self.stop(broker)


def info_lines(lines: list[bytes], broker: int) -> list[dict[str, Any]]:
    """The REPLICA_LOG_INFO_RECORDs of ``broker`` among the event lines."""
    out = []
    for line in lines:
        event = orjson.loads(line)
        if event.get("type") == "REPLICA_LOG_INFO_RECORD" and event["data"]["brokerId"] == broker:
            out.append(event["data"])
    return out


def advice_now(ev_bootstrap: str) -> tuple[dict[str, Any], Any, list[bytes]]:
    from elrwatch.state.advice import advise

    lines = consume_lines(ev_bootstrap, EVENTS)
    state, quarantined = replay(lines)
    assert [q for q in quarantined if q.reason != "conflict"] == []
    return advise(state, TOPIC, 0)["recommendation"], state, lines


def current_reporters(state: Any) -> set[int]:
    topic = state.topic_by_name(TOPIC)
    if topic is None:
        return set()
    infos = state.log_info.get((topic.topic_id, 0), {})
    return {b for b, i in infos.items() if b in state.brokers and i["brokerEpoch"] == state.brokers[b].epoch}


def run_commands(cluster: Any, commands: list[str], workdir: Path) -> list[str]:
    """Run the recommendation's shell commands as written, with bin/ scripts that start Kafka's tools."""
    bin_dir = workdir / "bin"
    bin_dir.mkdir(exist_ok=True)
    for script, main in {
        "kafka-reassign-partitions.sh": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
        "kafka-leader-election.sh": "org.apache.kafka.tools.LeaderElectionCommand",
        "kafka-transactions.sh": "org.apache.kafka.tools.TransactionsCommand",
    }.items():
        path = bin_dir / script
        path.write_text(f'#!/bin/sh\nexec {shlex.join(cluster._java_cmd(main))} "$@"\n')
        path.chmod(0o755)
    outputs = []
    env = {**os.environ, "BOOTSTRAP": cluster.bootstrap}
    for command in commands:
        proc = subprocess.run(["sh", "-c", command], cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (command, proc.stdout[-1500:], proc.stderr[-1500:])
        outputs.append(proc.stdout)
    return outputs


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with running_cluster(brokers=4) as c:
        yield c


def test_divergent_logs_unclean_recovery(cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:

    ev_bootstrap = f"127.0.0.1:{cluster.brokers[4].port}"
    cluster.create_topic(EVENTS, replica_assignment={0: [4]})
    cluster.create_topic(TOPIC, replica_assignment={0: [1, 2, 3]})
    bridge = controller_bridge(cluster, tmp_path, ev_bootstrap)
    agents = Agents(cluster, tmp_path, ev_bootstrap)
    try:
        strand_with_diverged_logs(cluster)

        # A torn last batch on broker 3 (down): Kafka's recovery will cut it, the agent must count it the same way.
        seg = rl.segments(cluster.brokers[3].data_dir / f"{TOPIC}-0")[-1][1]
        with open(seg, "r+b") as fh:
            fh.truncate(seg.stat().st_size - 5)
        torn = rl.read_replica_log(seg.parent)
        assert torn.stop == "partial_batch" and torn.log_end_offset < 100

        for broker in (1, 2, 3):
            agents.start(broker)
        for broker in (1, 2, 3):
            cluster.start_broker(broker)
        cluster.wait_for(
            lambda: current_reporters(advice_now(ev_bootstrap)[1]) == {1, 2, 3},
            "current log info from brokers 1, 2, 3",
            timeout=90,
            interval=1.0,
        )
        assert partition_of(cluster)["leader"] == -1  # unclean election is off: Kafka elects nobody

        kafka = {b: kafka_view(cluster, b) for b in (1, 2, 3)}
        assert kafka[3]["invalid"] == [] and kafka[3]["logEndOffset"] == torn.log_end_offset  # Kafka cut it too
        expected = max((1, 2, 3), key=lambda b: (kafka[b]["lastEpoch"], kafka[b]["logEndOffset"]))
        rec, state, lines = advice_now(ev_bootstrap)
        reported = {c["broker"]: c for c in rec["logInfo"]["candidates"]}
        for b in (1, 2, 3):
            assert (reported[b]["logEndOffset"], reported[b]["lastWrittenLeaderEpoch"]) == (
                kafka[b]["logEndOffset"],
                kafka[b]["lastEpoch"],
            ), b
        assert rec["action"] == "unclean_recovery"
        assert rec["candidate"] == expected == 2
        assert rec["candidateLog"] == {"logEndOffset": 170, "lastWrittenLeaderEpoch": kafka[2]["lastEpoch"]}
        assert kafka[2]["lastEpoch"] > kafka[1]["lastEpoch"]
        assert rec["reorder"] == [2, 1, 3]  # Kafka's unclean election would take broker 1, the first live replica

        # An agent restart publishes nothing twice.
        before = len(info_lines(lines, 2))
        agents.stop(2)
        restarted = agents.start(2)
        cluster.wait_for(lambda: restarted.steps >= 5, "the restarted agent stepped")
        assert len(info_lines(consume_lines(ev_bootstrap, EVENTS), 2)) == before

        # A broker that re-registers: its old info is stale until its agent publishes with the new epoch.
        agents.stop(3)
        old_epoch = state.brokers[3].epoch
        cluster.kill_broker(3)
        cluster.start_broker(3)
        cluster.wait_for(
            lambda: (lambda s: s.brokers[3].epoch != old_epoch and s.is_active(3))(advice_now(ev_bootstrap)[1]),
            "broker 3 re-registered and unfenced",
        )
        stale, _, _ = advice_now(ev_bootstrap)
        assert any("stale log info from broker 3" in m for m in stale["logInfo"]["missing"])
        [absent] = stale["logInfo"]["notReported"]
        assert absent["broker"] == 3 and absent["lastReport"]["brokerEpoch"] == old_epoch
        assert 3 not in {c["broker"] for c in stale["logInfo"]["candidates"]} and stale["candidate"] == 2
        agents.start(3)
        cluster.wait_for(
            lambda: current_reporters(advice_now(ev_bootstrap)[1]) == {1, 2, 3},
            "broker 3's agent reported with the new epoch",
            timeout=60,
            interval=1.0,
        )
        rec, _, _ = advice_now(ev_bootstrap)
        assert rec["candidate"] == 2

        # The recommended commands elect the candidate; the partition then holds its records, no fewer than any
        # alternative's log (each of which is a prefix of the candidate's).
        outputs = run_commands(cluster, rec["commands"], tmp_path)
        cluster.wait_for(lambda: partition_of(cluster)["leader"] == 2, "leader 2 after the commands")
        for b in (1, 3):
            mine = kafka[b]["batches"]
            assert mine == kafka[2]["batches"][: len(mine)], f"broker {b}'s log is not a prefix of the candidate's"
        lost = {b: kafka[2]["records"] - kafka[b]["records"] for b in (1, 2, 3)}
        cluster.wait_for(
            lambda: all(replica_leo(cluster, b) == 170 for b in (1, 2, 3)), "replicas caught up", timeout=60
        )
        kept = len(consume_lines(cluster.answering_bootstrap, TOPIC, timeout=60))
        assert kept == kafka[2]["records"] == 170
        assert lost[2] == 0 and all(lost[2] <= lost[b] for b in (1, 3))
        with capsys.disabled():
            print(
                "\n[divergent logs] Kafka's DumpLogSegments: "
                + ", ".join(
                    f"broker {b}: LEO {kafka[b]['logEndOffset']} epoch {kafka[b]['lastEpoch']}" for b in (1, 2, 3)
                )
                + f"; elrwatch recommends {rec['candidate']} (reorder {rec['reorder']}); records lost by electing "
                + ", ".join(f"{b}: {lost[b]}" for b in (1, 2, 3))
                + f"; kept after the commands: {kept}"
                + f"; find-hanging said: {(outputs[-1].strip().splitlines() or [''])[-1][:100]!r}"
            )
    finally:
        agents.stop_all()
        bridge.stop()
