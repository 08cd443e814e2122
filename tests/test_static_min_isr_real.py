"""min.insync.replicas set only in the nodes' server.properties, on real clusters: ZooKeeper-mode 3.9.1, KRaft 3.9.1
and KRaft 4.4 with ELR off (the metadata log never carries the value there). With no flag given to elrwatch, the
partitions it finds under min ISR must equal Kafka's own ``kafka-topics.sh --describe --under-min-isr-partitions``
(TopicCommand of that version), through the admin bridge (DescribeConfigs of each broker: source 4) and, on KRaft,
the metadata-log bridge with ``--server-properties`` of the controller node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_bridge_real import BridgeThread, consume_lines

pytestmark = [pytest.mark.e2e, pytest.mark.real_kafka, pytest.mark.slow, pytest.mark.timeout(600)]

#: ``orders``: no config of its own (the static 2 applies); ``audit``: its own min ISR 1.
TOPICS = ("orders", "audit")


def elrwatch_under_min_isr(lines: list[bytes], tmp_path: Path, name: str) -> tuple[set[tuple[str, int]], dict]:
    """`elrwatch replay` (no flag) of the events: the partitions of `TOPICS` under min ISR, and the document."""
    events = tmp_path / f"{name}.jsonl"
    events.write_bytes(b"\n".join(lines) + b"\n")
    done = subprocess.run(
        [sys.executable, "-P", "-m", "elrwatch.cli", "replay", "--compact", str(events)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    under = {(p["topic"], p["partitionId"]) for p in doc["partitions"] if p["topic"] in TOPICS and p["underMinIsr"]}
    return under, doc


@pytest.mark.parametrize(("version", "mode"), [("3.9.1", "zookeeper"), ("3.9.1", "kraft"), ("4.4.0", "kraft")])
def test_static_min_isr_equals_kafkas_under_min_isr(version: str, mode: str, tmp_path: Path) -> None:
    from elrwatch.bridge.admin import KafkaClusterReader
    from elrwatch.bridge.runner import AdminBridge, KafkaPublisher, LogBridge, Metrics, StateFile
    from elrwatch.devtools.kafka_cluster import KAFKA_VERSION, ClusterError, KafkaCluster
    from elrwatch.kafkaio.config import kafka_python_config

    version = KAFKA_VERSION if version == "4.4.0" else version
    try:  # min.insync.replicas=2 in every node's server.properties; ELR off (3.x has none)
        cluster = KafkaCluster(brokers=3, version=version, mode=mode, min_insync_replicas=2, elr=False)
    except ClusterError as exc:  # no jars or no java: `make test` fetches them, so this is an error, never a skip
        pytest.fail(str(exc), pytrace=False)
    threads: list[BridgeThread] = []
    bridges: dict[str, Any] = {}
    with cluster:
        event_topics = ["ev-admin"] + (["ev-log"] if mode == "kraft" else [])
        for topic in event_topics:  # RF 1 on broker 1: its own min ISR 1, or acks=all writes would fail
            cluster.create_topic(topic, replica_assignment={0: [1]}, configs={"min.insync.replicas": "1"})
        cluster.create_topic("orders", partitions=5, replication_factor=3)
        cluster.create_topic("audit", partitions=2, replication_factor=3, configs={"min.insync.replicas": "1"})
        options = {"bootstrap.servers": cluster.bootstrap}
        metrics = Metrics()
        reader = KafkaClusterReader(kafka_python_config(options))
        bridges["ev-admin"] = AdminBridge(
            reader, KafkaPublisher(options, "ev-admin"), StateFile(tmp_path / "admin.json"), metrics
        )
        if mode == "kraft":  # on the controller node: its metadata log and its server.properties
            bridges["ev-log"] = LogBridge(
                cluster.controller.metadata_dir,
                KafkaPublisher(options, "ev-log"),
                StateFile(tmp_path / "log.json"),
                metrics,
                server_properties=cluster.controller.props_path,
            )
        threads = [BridgeThread(bridge, 0.3) for bridge in bridges.values()]
        try:
            cluster.kill_broker(3)
            cluster.stop_broker(2)
            cluster.wait_for(lambda: cluster.down_brokers() == {2, 3}, "brokers 2 and 3 down", timeout=60)
            seen: dict[str, Any] = {}

            def agree() -> bool:
                seen["kafka"] = cluster.under_min_isr_partitions(TOPICS)
                for topic in event_topics:
                    seen[topic], doc = elrwatch_under_min_isr(
                        consume_lines(cluster.answering_bootstrap, topic), tmp_path, topic
                    )
                    seen[f"{topic} cluster"] = doc["cluster"]
                    seen[f"{topic} gauge"] = doc["gauges"].get("elrwatch_global_under_min_isr_partitions")
                return all(seen[t] == seen["kafka"] for t in event_topics)

            try:
                cluster.wait_for(agree, "elrwatch's under-min-ISR partitions equal Kafka's", timeout=120, interval=1)
            except ClusterError as exc:
                raise AssertionError(f"{version} {mode}: {seen}") from exc
            assert seen["kafka"] == {("orders", p) for p in range(5)}, seen  # what the scenario meant to reach
            for topic in event_topics:
                cluster_doc = seen[f"{topic} cluster"]
                assert cluster_doc["defaultMinIsr"] == 2, cluster_doc
                assert cluster_doc["defaultMinIsrSource"] == "static config (server.properties)", cluster_doc
                # the event topics (RF 1, min ISR 1) are not under min ISR either: the gauge counts orders' 5
                assert seen[f"{topic} gauge"] == 5, seen
            print(
                f"\n{version} {mode}: Kafka's --under-min-isr-partitions {sorted(seen['kafka'])}; elrwatch "
                + ", ".join(f"{t}: {seen[f'{t} gauge']}" for t in event_topics)
            )
            assert not {k: v for k, v in metrics.counts.items() if k != "broker_unreachable"}, metrics.counts
        finally:
            for thread in threads:
                thread.stop()
            reader.close()
