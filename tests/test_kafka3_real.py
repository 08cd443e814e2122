"""Kafka 3.x against the real thing: 3.9.1 in ZooKeeper mode, 3.9.1 and 3.7.2 in KRaft mode (devtools/kafka_cluster.py,
jars from tools/kafka-<version>/pom.xml; `make kafka-jars` fetches them, and a missing jar fails these tests).

One scenario per version, on 3 brokers: broker 3 killed, broker 2 stopped cleanly (which leaves ``solo``, on 2 and 3,
leaderless, and ``orders`` with broker 1 as its last replica standing), then ``orders``' min ISR changed. The admin
bridge (a thread, as in tests/test_bridge_real.py) publishes to an event topic on broker 1, one `elrwatch stream` job
runs across all steps, and after each step the status store must equal what the cluster answers, partition by
partition (leader, leader epoch, replicas, ISR), with the down brokers fenced (KRaft) or unregistered (ZooKeeper
mode), and orders' effective min ISR and the last-replica-standing gauge must be what the step made them. On KRaft the metadata-log bridge follows broker 1's log (3.x record versions, no ELR fields) and its replay
must equal the cluster too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_bridge_real import BridgeThread, compare_with_dump, consume_lines, replay
from test_streaming_e2e import StreamJob, _poll, _store_doc, cli_options, kafka_source, store_options

pytestmark = [pytest.mark.e2e, pytest.mark.real_kafka, pytest.mark.slow, pytest.mark.timeout(900)]

TOPICS = ["orders", "solo"]

#: (name, step, then orders' effective min ISR and the last-replica-standing gauge in the store); every step is
#: followed by the store (and the log bridge's replay) matching the cluster.
STEPS: list[tuple[str, Callable[[Any], Any], tuple[int, int]]] = [
    ("start", lambda c: None, (2, 0)),
    (
        "broker 3 killed",
        lambda c: (c.kill_broker(3), c.wait_for(lambda: 3 in c.down_brokers(), "broker 3 down")),
        (2, 0),
    ),
    # orders' ISR is broker 1 alone with min ISR 2 and no ELR: both its partitions have their last replica standing
    (
        "broker 2 stopped cleanly",
        lambda c: (c.stop_broker(2), c.wait_for(lambda: 2 in c.down_brokers(), "broker 2 down")),
        (2, 2),
    ),
    ("min ISR of orders 2 -> 1", lambda c: c.set_topic_config("orders", "min.insync.replicas", "1"), (1, 0)),
]


def cluster_answer(cluster: Any) -> tuple[dict[tuple[str, int], tuple], set[int]]:
    """Partition → (leader, leader epoch, replicas, ISR) and the down brokers, as the cluster answers now."""
    described = cluster.describe_topic_partitions(TOPICS)
    return (
        {k: (d["leader"], d["leader_epoch"], d["replicas"], d["isr"]) for k, d in described.items()},
        cluster.down_brokers(),
    )


def store_answer(doc: dict, brokers: set[int], mode: str) -> tuple[dict[tuple[str, int], tuple], set[int]]:
    """The same from a status document; a down broker is fenced in KRaft mode and unregistered in ZooKeeper mode
    (anything else, e.g. a fenced broker on a ZooKeeper-mode cluster, counts as not down and fails the comparison)."""
    partitions = {
        (p["topic"], p["partitionId"]): (p["leader"], p["leaderEpoch"], p["replicas"], p["isr"])
        for p in doc["partitions"]
        if p["topic"] in TOPICS
    }
    shown = {b["brokerId"]: b for b in doc["brokers"]}
    down = set()
    for broker in brokers:
        b = shown.get(broker)
        gone = b is None or not b.get("registered", True)
        fenced = b is not None and b.get("registered", True) and b["fenced"]
        if (mode == "zookeeper" and gone) or (mode == "kraft" and fenced):
            down.add(broker)
    return partitions, down


def state_answer(state: Any, brokers: set[int]) -> tuple[dict[tuple[str, int], tuple], set[int]]:
    """The same from a replayed core state (the metadata-log bridge's events; KRaft: down is fenced)."""
    partitions = {}
    for name in TOPICS:
        for topic, p in state.iter_partitions():
            if topic.name == name:
                partitions[(name, p.partition_id)] = (p.leader, p.leader_epoch, list(p.replicas), list(p.isr))
    return partitions, {b for b in brokers if (s := state.brokers.get(b)) is not None and s.registered and s.fenced}


@pytest.mark.parametrize(("version", "mode"), [("3.9.1", "zookeeper"), ("3.9.1", "kraft"), ("3.7.2", "kraft")])
def test_scenario_admin_bridge_stream_store_equal_the_cluster(version: str, mode: str, tmp_path: Path) -> None:
    from elrwatch.bridge.admin import KafkaClusterReader
    from elrwatch.bridge.runner import AdminBridge, KafkaPublisher, LogBridge, Metrics, StateFile
    from elrwatch.devtools.kafka_cluster import ClusterError, KafkaCluster
    from elrwatch.kafkaio.config import kafka_python_config

    try:
        cluster = KafkaCluster(brokers=3, version=version, mode=mode)
    except ClusterError as exc:  # no jars or no java: `make test` fetches them, so this is an error, never a skip
        pytest.fail(str(exc), pytrace=False)
    threads: list[BridgeThread] = []
    job: StreamJob | None = None
    with cluster:
        for topic in ("ev-admin", "ev-log"):
            cluster.create_topic(topic, replica_assignment={0: [1]})
        cluster.create_topic("orders", partitions=2, replication_factor=3, configs={"min.insync.replicas": "2"})
        cluster.create_topic("solo", replica_assignment={0: [2, 3]})
        options = {"bootstrap.servers": cluster.bootstrap}
        metrics = Metrics()
        admin = AdminBridge(
            KafkaClusterReader(kafka_python_config(options)),
            KafkaPublisher(options, "ev-admin"),
            StateFile(tmp_path / "admin.json"),
            metrics,
        )
        threads.append(BridgeThread(admin, 0.3))
        if mode == "kraft":
            log = LogBridge(
                cluster.brokers[1].metadata_dir,
                KafkaPublisher(options, "ev-log"),
                StateFile(tmp_path / "log.json"),
                metrics,
            )
            threads.append(BridgeThread(log, 0.2))
        url = f"sqlite:///{tmp_path}/store.db"
        try:
            job = StreamJob(
                tmp_path,
                *kafka_source(cluster.bootstrap, "ev-admin"),
                *store_options(url, tmp_path / "ck"),
                *cli_options(buckets=2, trigger="1s", starting_offsets="earliest"),
            )
            brokers = set(cluster.brokers)
            last: dict[str, Any] = {}

            def caught_up(exposure: tuple[int, int]) -> bool:
                want = cluster_answer(cluster)
                doc = _store_doc(url)
                last["cluster"], last["store"] = want, doc and store_answer(doc, brokers, mode)
                last["exposure"] = doc and (
                    {p["effectiveMinIsr"] for p in doc["partitions"] if p["topic"] == "orders"},
                    doc["gauges"].get("elrwatch_last_replica_standing_partitions"),
                )
                if last["exposure"] != ({exposure[0]}, exposure[1]):
                    return False
                if mode == "kraft":
                    state, quarantined = replay(consume_lines(cluster.answering_bootstrap, "ev-log"))
                    last["log"] = (state_answer(state, brokers), [str(q) for q in quarantined][:3])
                    if last["log"] != (want, []):
                        return False
                return last["store"] == want

            for name, step, exposure in STEPS:
                step(cluster)
                try:
                    _poll(lambda e=exposure: caught_up(e), 240, name, job)
                except BaseException as exc:
                    raise AssertionError(f"{version} {mode}, {name}: {last}") from exc
            partitions, down = last["cluster"]
            assert down == {2, 3} and partitions[("solo", 0)][0] == -1  # what the scenario meant to reach
            assert partitions[("orders", 0)][3] == [1]
            doc = _store_doc(url)
            assert doc["cluster"]["derivedFrom"] == "admin-poll"
            assert "fencedBrokers" in doc["cluster"]["unknown"]
            # a broker going down makes a poll fail (broker_unreachable), and one answering with lagging metadata
            # says a topic is unknown (topic_deleted: its last state is kept); the store equalled the cluster above
            transient = ("broker_unreachable", "topic_deleted")
            assert not {k: v for k, v in metrics.counts.items() if k not in transient}, metrics.counts
            if mode == "kraft":
                check_metadata_log(cluster, tmp_path, last["cluster"])
            else:  # the metadata-log bridge refuses a ZooKeeper-mode broker's directory (one line, see test_bridge)
                from elrwatch.bridge.runner import zookeeper_broker_dir

                assert zookeeper_broker_dir(cluster.brokers[1].data_dir / "__cluster_metadata-0") is not None
        finally:
            for thread in threads:
                thread.stop()
            admin.reader.close()
            if job is not None:
                job.kill()


def check_metadata_log(cluster: Any, tmp_path: Path, want: tuple[dict, set[int]]) -> None:
    """The controller's 3.x metadata log: the decoder's records equal that version's DumpLogSegments record for
    record, and `elrwatch replay` of the dump ends where the cluster is (fenced brokers down)."""
    import json
    import subprocess
    import sys

    from elrwatch.bridge.runner import zookeeper_broker_dir

    assert zookeeper_broker_dir(cluster.brokers[1].metadata_dir) is None
    cluster.wait_metadata_quiet(quiet_for=1.0)
    dumps = []
    compared = 0
    for path in cluster.metadata_log_files():
        data = path.read_bytes()
        dump = cluster.dump_log_segments([path])
        compared += compare_with_dump(path, dump, data)
        dumps.append(dump)
    assert compared >= 20, compared
    dump_file = tmp_path / "controller.dump"
    dump_file.write_text("".join(dumps))
    done = subprocess.run(
        [sys.executable, "-P", "-m", "elrwatch.cli", "replay", "--compact", str(dump_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["cluster"]["derivedFrom"] is None and doc["cluster"]["unknown"] == []
    assert store_answer(doc, set(cluster.brokers), "kraft") == want
