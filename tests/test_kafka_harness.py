"""The real-Kafka harness itself (devtools/kafka_cluster.py): a cluster answers produce, consume and ListOffsets,
``stop()`` leaves no process behind, and a start that cannot succeed (port taken, jar missing, JVM exited) fails
within seconds with a ClusterError that says why (the node's last log lines), instead of hanging.

These tests start clusters of their own (not the session's ``kafka_server``), one at a time."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from elrwatch.devtools.kafka_cluster import ClusterError, KafkaCluster, kafka_libs

pytestmark = [pytest.mark.e2e, pytest.mark.real_kafka]

#: A start that cannot succeed must fail within this bound (a healthy 1-broker start takes ~8 s on an idle machine).
FAIL_FAST_S = 30.0


def _processes_of(cluster: KafkaCluster) -> list[int]:
    """Every live process whose command line names the cluster's folder (its JVMs and their tools)."""
    needle = str(cluster.base_dir).encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if needle in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:  # exited meanwhile
                pass
    return found


def _assert_nothing_left(cluster: KafkaCluster) -> None:
    assert cluster.running_pids() == []
    assert _processes_of(cluster) == []
    assert not cluster.base_dir.exists()  # its own temp dir is removed


def test_start_roundtrip_stop_leaves_no_process():
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    cluster = KafkaCluster(brokers=1, heap="320m", jvm_opts=["-Delrwatch.harness.test=1"])
    try:
        cluster.start()
        pids = cluster.running_pids()
        assert len(pids) == 2 and sorted(pids) == sorted(_processes_of(cluster))  # the controller and the broker
        for pid in pids:  # heap= replaces the default -Xmx of every node, jvm_opts= is added
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert b"-Xmx320m" in args and b"-Xmx384m" not in args and b"-Delrwatch.harness.test=1" in args, args
        assert cluster.describe_cluster() == {1: False}  # registered, unfenced
        cluster.create_topic("harness", partitions=2)  # replication factor: 1 on a 1-broker cluster
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=20)
        for i in range(50):
            producer.send("harness", key=b"k", value=b"v%d" % i, partition=i % 2)
        producer.flush(10)
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False)
        try:
            tps = [TopicPartition("harness", p) for p in (0, 1)]
            assert consumer.partitions_for_topic("harness") == {0, 1}
            assert consumer.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}
            assert consumer.end_offsets(tps) == {tps[0]: 25, tps[1]: 25}
            consumer.assign(tps)
            consumer.seek_to_beginning()
            got: list[bytes] = []
            deadline = time.monotonic() + 15
            while len(got) < 50 and time.monotonic() < deadline:
                for msgs in consumer.poll(500).values():
                    got.extend(m.value for m in msgs)
            assert sorted(got) == sorted(b"v%d" % i for i in range(50))
        finally:
            consumer.close()
        with pytest.raises(ClusterError, match="no-such-topic"):  # auto-create is off: a missing topic stays missing
            cluster.describe_topic_partitions(["no-such-topic"])
    finally:
        cluster.stop()
    _assert_nothing_left(cluster)
    for port in (cluster.controller.port, cluster.brokers[1].port):
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
            pass


def test_port_taken_fails_at_once_and_starts_nothing():
    cluster = KafkaCluster(brokers=1)
    port = cluster.brokers[1].port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        started = time.monotonic()
        with pytest.raises(ClusterError, match=f"port {port} of broker 1 is taken"):
            cluster.start()
        assert time.monotonic() - started < FAIL_FAST_S
    _assert_nothing_left(cluster)


def test_a_bad_heap_size_fails_before_anything_starts():
    for heap in ("2 g", "-Xmx2g", "", "0m"):
        with pytest.raises(ClusterError, match="is not a JVM size"):
            KafkaCluster(brokers=1, heap=heap)


def test_missing_jars_fail_with_the_make_target(tmp_path):
    with pytest.raises(ClusterError, match=r"is missing: run `make kafka-jars`"):
        KafkaCluster(brokers=1, libs=tmp_path)


def test_incomplete_jars_fail_within_seconds_with_the_jvm_output(tmp_path):
    """Kafka's own jars present, a dependency missing: the JVM exits (NoClassDefFoundError), the error says so."""
    libs = tmp_path / "libs"
    libs.mkdir()
    for jar in kafka_libs().glob("*.jar"):
        if not jar.name.startswith("kafka-clients-"):
            (libs / jar.name).symlink_to(jar)
    cluster = KafkaCluster(brokers=1, libs=libs)
    started = time.monotonic()
    with pytest.raises(ClusterError) as failure:
        cluster.start()
    assert time.monotonic() - started < FAIL_FAST_S
    message = str(failure.value)
    assert "failed (exit 1)" in message and "org/apache/kafka/" in message, message
    _assert_nothing_left(cluster)


def test_broker_jvm_exit_during_start_fails_within_seconds_with_its_log_lines():
    """A broker that formats fine but dies while starting (an authorizer class that does not exist)."""
    cluster = KafkaCluster(brokers=1, broker_props={"authorizer.class.name": "no.such.Authorizer"})
    started = time.monotonic()
    with pytest.raises(ClusterError) as failure:
        cluster.start()
    assert time.monotonic() - started < FAIL_FAST_S
    message = str(failure.value)
    assert message.startswith("broker 1 exited with 1; its last log lines"), message
    assert "ClassNotFoundException: no.such.Authorizer" in message, message
    _assert_nothing_left(cluster)  # the controller, which was running, is stopped too


@pytest.mark.parametrize(("version", "mode"), [("3.9.1", "zookeeper"), ("3.9.1", "kraft"), ("3.7.2", "kraft")])
def test_older_kafka_starts_from_its_own_jars_and_stops_clean(version: str, mode: str) -> None:
    """Kafka 3.x from .tools/kafka-<version>/libs: every JVM runs that version's jars (ZooKeeper mode: a ZooKeeper
    node in the controller's place), DescribeCluster shows the broker live, a partition is described (through
    Metadata where DescribeTopicPartitions is not advertised), and stop() leaves nothing behind."""
    cluster = KafkaCluster(brokers=1, version=version, mode=mode)
    try:
        cluster.start()
        pids = cluster.running_pids()
        assert len(pids) == 2 and sorted(pids) == sorted(_processes_of(cluster))
        for pid in pids:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert str(kafka_libs(version=version)).encode() + b"/*" in args, args
        zookeeper = [
            b"org.apache.zookeeper.server.quorum.QuorumPeerMain" in Path(f"/proc/{p}/cmdline").read_bytes()
            for p in pids
        ]
        assert sum(zookeeper) == (1 if mode == "zookeeper" else 0)
        assert cluster.describe_cluster() == {1: False}
        assert cluster.has_api(75) is (version == "3.9.1" and mode == "kraft")  # DescribeTopicPartitions
        cluster.create_topic("harness", partitions=2, configs={"min.insync.replicas": "1"})
        described = cluster.describe_topic_partitions(["harness"])
        assert {k: (d["leader"], d["replicas"], d["isr"], d["elr"]) for k, d in described.items()} == {
            ("harness", 0): (1, [1], [1], []),
            ("harness", 1): (1, [1], [1], []),
        }
        assert bool(cluster.metadata_log_files()) is (mode == "kraft")
    finally:
        cluster.stop()
    _assert_nothing_left(cluster)


def test_a_version_or_mode_the_harness_does_not_run_fails_at_once(tmp_path):
    with pytest.raises(ClusterError, match=r"Kafka 3\.7\.2 runs here in kraft mode, not zookeeper"):
        KafkaCluster(brokers=1, version="3.7.2", mode="zookeeper")
    with pytest.raises(ClusterError, match="mode 'zk' is not one of kraft, zookeeper"):
        KafkaCluster(brokers=1, version="3.9.1", mode="zk")
    with pytest.raises(ClusterError, match=r"Kafka 2\.8\.0 is not one the harness runs"):
        KafkaCluster(brokers=1, version="2.8.0")
    with pytest.raises(
        ClusterError,
        match=r"kafka_2.13-3.9.1.jar is missing: run `make kafka-jars` .*"
        r"tools/kafka-3.9.1/pom.xml",
    ):
        KafkaCluster(brokers=1, version="3.9.1", libs=tmp_path)


class _LaggingAdmin:
    """A stand-in admin client whose first ``lagging`` DescribeTopicPartitions answers do not know the topic, the
    way a broker whose metadata cache lags the controller answers right after a topic was created."""

    def __init__(self, lagging: int) -> None:
        self.lagging = lagging
        self.calls = 0
        self._manager = type("Manager", (), {"broker_version_data": type("V", (), {"api_versions": {75: (0, 0)}})})

    def create_topics(self, topics: list[object]) -> None:
        pass

    def describe_topic_partitions(self, topics: list[str], page_size: int, cursor: object) -> dict:
        self.calls += 1
        if self.calls <= self.lagging:
            return {"topics": [{"name": t, "error_code": 3, "partitions": []} for t in topics]}
        partition = {"partition_index": 0, "leader_id": 2, "leader_epoch": 0, "replica_nodes": [2, 3],
                     "isr_nodes": [2, 3]}  # fmt: skip
        return {"topics": [{"name": t, "topic_id": "id", "partitions": [partition]} for t in topics]}


def _cluster_asking(admin: _LaggingAdmin, tmp_path: Path) -> KafkaCluster:
    cluster = KafkaCluster(brokers=1, base_dir=tmp_path)
    cluster.admin = lambda: admin  # type: ignore[method-assign]
    return cluster


def test_a_broker_that_does_not_know_a_created_topic_yet_is_asked_again(tmp_path):
    admin = _LaggingAdmin(lagging=2)
    cluster = _cluster_asking(admin, tmp_path)
    cluster.create_topic("solo", replica_assignment={0: [2, 3]}, wait=False)
    described = cluster.describe_topic_partitions(["solo"])
    assert described[("solo", 0)]["isr"] == [2, 3]
    assert admin.calls == 3


def test_a_topic_the_cluster_never_created_is_an_error_at_once(tmp_path):
    admin = _LaggingAdmin(lagging=1)
    cluster = _cluster_asking(admin, tmp_path)
    started = time.monotonic()
    with pytest.raises(ClusterError, match="topic solo error 3"):
        cluster.describe_topic_partitions(["solo"])
    assert admin.calls == 1
    assert time.monotonic() - started < FAIL_FAST_S
