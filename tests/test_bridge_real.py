"""`elrwatch bridge` against a real Kafka 4.4.0 KRaft cluster (devtools/kafka_cluster.py).

One cluster for the module (controller 0, brokers 1..3; controller and broker 1 write snapshots and roll segments
often, so that the metadata-log mode meets snapshots, rolled and deleted segments). Both bridges run in threads and
publish to event topics on broker 1 (never killed); after each scenario step (kills, restarts, min ISR changes, an
unclean election) the published events are consumed and replayed with the core, and every partition's leader, ISR,
ELR, LastKnownELR and every broker's fenced state must equal DescribeTopicPartitions and DescribeCluster. Both
bridges are also restarted from their state files in the middle. At the end, the decoder's records equal Kafka's
DumpLogSegments --cluster-metadata-decoder output, record for record, for every segment and snapshot of two nodes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_bridge import dump_payloads

from elrwatch.devtools.kafka_cluster import ClusterError

pytestmark = [pytest.mark.real_kafka, pytest.mark.slow, pytest.mark.timeout(600)]

#: Snapshot and segment-roll settings of the nodes whose logs the tests read (the harness keeps everything by
#: default: no snapshot, one segment).
SNAPSHOT_PROPS = {
    "metadata.log.max.record.bytes.between.snapshots": "4000",
    "metadata.log.max.snapshot.interval.ms": "1000",
    "internal.metadata.log.segment.bytes": "8192",
    "metadata.log.segment.ms": "2000",
}
EVENT_TOPICS = ("ev-admin", "ev-log")


def _kill_and_wait(cluster: Any, broker: int) -> None:
    cluster.kill_broker(broker)
    cluster.wait_for(lambda: broker in cluster.fenced_brokers(), f"broker {broker} fenced")


def set_cluster_config(cluster: Any, key: str, value: str | None) -> None:
    """Set (None: delete) a cluster-wide default (BROKER resource ""). kafka-python's alter_configs refuses a broker
    resource without an id, so the IncrementalAlterConfigs request is sent as is."""
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    admin = cluster.admin()
    op = (AlterConfigOp.DELETE, None) if value is None else (AlterConfigOp.SET, value)
    request = admin._alter_configs_request(
        [ConfigResource(ConfigResourceType.BROKER, "", configs={key: op})], incremental=True
    )

    async def send() -> Any:
        return await admin._manager.send(request)

    response = admin._manager.run(send)
    assert [r.error_code for r in response.responses] == [0], response


#: The scenario: (name, step). "orders" has 3 partitions on brokers 1..3 with min ISR 2; "solo" lives on 2 and 3.
SCENARIO: list[tuple[str, Callable[[Any], None]]] = [
    (
        "create topics",
        lambda c: (
            c.create_topic("orders", partitions=3, replication_factor=3, configs={"min.insync.replicas": "2"}),
            c.create_topic("solo", replica_assignment={0: [2, 3]}),
        ),
    ),
    ("kill broker 3", lambda c: _kill_and_wait(c, 3)),
    ("min ISR 3 on orders", lambda c: c.set_topic_config("orders", "min.insync.replicas", "3")),
    ("min ISR back to 2", lambda c: c.set_topic_config("orders", "min.insync.replicas", "2")),
    ("restart broker 3", lambda c: c.start_broker(3)),
    ("kill brokers 3 then 2 (ELR)", lambda c: (_kill_and_wait(c, 3), _kill_and_wait(c, 2))),
    ("restart broker 3 (not in solo's ELR)", lambda c: c.start_broker(3)),
    ("unclean election of solo", lambda c: c.elect_leaders("solo", [0], unclean=True)),
    ("restart broker 2", lambda c: c.start_broker(2)),
    ("cluster min ISR 2", lambda c: set_cluster_config(c, "min.insync.replicas", "2")),
    # (Kafka refuses to delete the cluster-level min ISR while ELR is on: "cannot be removed while ELR is enabled")
    (
        "cluster unclean election on, min ISR 1",
        lambda c: (
            set_cluster_config(c, "unclean.leader.election.enable", "true"),
            set_cluster_config(c, "min.insync.replicas", "1"),
        ),
    ),
]


def _cluster() -> Any:
    from elrwatch.devtools.kafka_cluster import ClusterError, KafkaCluster

    try:
        cluster = KafkaCluster(brokers=3)
    except ClusterError as exc:  # no jars or no java: `make test` fetches them, so this is an error, never a skip
        pytest.fail(str(exc), pytrace=False)
    for node in (cluster.controller, cluster.brokers[1]):
        node.extra_props.update(SNAPSHOT_PROPS)
    # Broker 1 (whose log the metadata-log bridge follows) deletes segments a snapshot covers after 2 s.
    cluster.brokers[1].extra_props["metadata.max.retention.ms"] = "2000"
    return cluster


def consume_lines(bootstrap: str, topic: str, timeout: float = 20) -> list[bytes]:
    """Every event of a one-partition topic, from the beginning to its current end (what came within ``timeout``
    seconds)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, request_timeout_ms=10000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        lines: list[bytes] = []
        deadline = time.monotonic() + timeout
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                lines.extend(m.value for m in batch)
        return lines
    finally:
        consumer.close()


def replay(lines: list[bytes]) -> tuple[Any, list[Any]]:
    """The core's state after the events, and what it quarantined."""
    from elrwatch.state import records
    from elrwatch.state.cluster import ClusterState, Outcome

    state = ClusterState()
    quarantined = []
    for seq, line in enumerate(lines):
        parsed = records.parse_line(line, "events", seq)
        if isinstance(parsed, records.Record) and state.apply(parsed) is Outcome.QUARANTINED:
            quarantined.append(state.last_error)
    return state, quarantined


def mismatches(cluster: Any, state: Any) -> list[Any]:
    """Where the core's state differs from DescribeTopicPartitions / DescribeCluster (empty: equal)."""
    found: list[Any] = []
    described = cluster.describe_topic_partitions()
    for (topic, pid), d in sorted(described.items()):
        t = state.topic_by_name(topic)
        p = state.partition(t.topic_id, pid) if t is not None else None
        if p is None:
            found.append((topic, pid, "missing"))
            continue
        mine = (p.leader, list(p.isr), list(p.elr), list(p.last_known_elr))
        theirs = (d["leader"], d["isr"], d["elr"], d["last_known_elr"])
        if mine != theirs:
            found.append((topic, pid, mine, theirs))
    for broker_id, fenced in sorted(cluster.describe_cluster().items()):
        b = state.brokers.get(broker_id)
        if b is None or not b.registered or b.fenced != fenced:
            found.append(("broker", broker_id, None if b is None else b.fenced, fenced))
    return found


class BridgeThread:
    """A bridge stepping in a thread until stopped."""

    def __init__(self, bridge: Any, interval_s: float) -> None:
        from elrwatch.bridge.runner import run

        self.bridge = bridge
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=run, args=(bridge, interval_s, 0.0, self.stop_event.is_set), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)
        assert not self.thread.is_alive()
        self.bridge.publisher.close()


class Bridges:
    """The admin and metadata-log bridges of the module, restartable from their state files."""

    def __init__(self, cluster: Any, workdir: Path) -> None:
        from elrwatch.bridge.runner import Metrics

        self.cluster = cluster
        self.workdir = workdir
        self.metrics = Metrics()
        self.log_dir = cluster.brokers[1].metadata_dir
        self.threads: list[BridgeThread] = []
        self.start()

    def start(self) -> None:
        from elrwatch.bridge.admin import KafkaClusterReader
        from elrwatch.bridge.runner import AdminBridge, KafkaPublisher, LogBridge, StateFile
        from elrwatch.kafkaio.config import kafka_python_config

        options = {"bootstrap.servers": self.cluster.bootstrap}
        reader = KafkaClusterReader(kafka_python_config(options))
        self.admin = AdminBridge(
            reader,
            KafkaPublisher(options, "ev-admin"),
            StateFile(self.workdir / "admin.json"),
            self.metrics,
            page_size=2,
        )  # small pages: the cursor is followed across topics
        self.log = LogBridge(
            self.log_dir, KafkaPublisher(options, "ev-log"), StateFile(self.workdir / "log.json"), self.metrics
        )
        self.threads = [BridgeThread(self.admin, 0.3), BridgeThread(self.log, 0.2)]

    def stop(self) -> None:
        for thread in self.threads:
            thread.stop()
        self.admin.reader.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Bridges]]:
    cluster = _cluster()
    with cluster:
        for topic in EVENT_TOPICS:
            cluster.create_topic(topic, replica_assignment={0: [1]})
        bridges = Bridges(cluster, tmp_path_factory.mktemp("bridge"))
        try:
            yield cluster, bridges
        finally:
            bridges.stop()


def _wait_caught_up(cluster: Any, what: str) -> None:
    """Until both replays equal the cluster (the bridges poll; the brokers' metadata caches lag a little)."""
    last: dict[str, Any] = {}

    def equal() -> bool:
        ok = True
        for topic in EVENT_TOPICS:
            state, quarantined = replay(consume_lines(cluster.answering_bootstrap, topic))
            diff = mismatches(cluster, state)
            last[topic] = (diff, [str(q) for q in quarantined][:3])
            ok = ok and not diff and not quarantined
        return ok

    try:
        cluster.wait_for(equal, what, timeout=45, interval=0.5)
    except Exception as exc:
        raise AssertionError(f"{what}: not caught up: {last}") from exc


def test_scenario_through_both_bridges(live: tuple[Any, Bridges]) -> None:
    cluster, bridges = live
    _wait_caught_up(cluster, "start")
    for index, (name, step) in enumerate(SCENARIO):
        step(cluster)
        cluster.wait_metadata_quiet(quiet_for=1.0)
        _wait_caught_up(cluster, name)
        if index == 3:
            # Restart both bridges from their state files: nothing is published again, nothing is lost.
            bridges.stop()
            before = {t: consume_lines(cluster.answering_bootstrap, t) for t in EVENT_TOPICS}
            bridges.start()
            cluster.wait_for(
                lambda: bridges.admin.steps >= 4 and bridges.log.steps >= 4, "a few polls of both restarted bridges"
            )
            for topic in EVENT_TOPICS:
                old = before[topic]
                new = consume_lines(cluster.answering_bootstrap, topic)[len(old) :]
                # Whatever the restarted bridge published is new: offsets above every offset published before (a
                # record Kafka appended meanwhile may come; a re-publication of an old one must not).
                top = max(orjson.loads(line)["offset"] for line in old)
                assert all(orjson.loads(line)["offset"] > top for line in new), (topic, new[:3])
                # The admin bridge's offsets are its own: a re-publication would be new offsets, but it would
                # register the brokers and create the topics again.
                again = [
                    e["type"] for e in map(orjson.loads, new) if e["type"] in ("TOPIC_RECORD", "REGISTER_BROKER_RECORD")
                ]
                assert not again, (topic, again)
    # The polled state says what it cannot know; the log's state does not.
    admin_state, _ = replay(consume_lines(cluster.answering_bootstrap, "ev-admin"))
    log_state, _ = replay(consume_lines(cluster.answering_bootstrap, "ev-log"))
    from elrwatch.state.report import cluster_doc

    # The configs that matter to elrwatch, polled (DescribeConfigs, the cluster default included) and logged, agree.
    keys = ("min.insync.replicas", "unclean.leader.election.enable")
    assert (
        {k: admin_state.cluster_configs.get(k) for k in keys}
        == {k: log_state.cluster_configs.get(k) for k in keys}
        == {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
    )
    for topic in ("orders", "solo"):
        assert {k: admin_state.topic_configs.get(topic, {}).get(k) for k in keys} == {
            k: log_state.topic_configs.get(topic, {}).get(k) for k in keys
        }, topic
    assert cluster_doc(admin_state)["derivedFrom"] == "admin-poll"
    assert "partitionEpoch" in cluster_doc(admin_state)["unknown"]
    assert cluster_doc(log_state)["derivedFrom"] is None and cluster_doc(log_state)["unknown"] == []
    # The log bridge met snapshots and rolled segments; the unclean election is in the log as RECOVERING.
    solo = log_state.partition(log_state.topic_by_name("solo").topic_id, 0)
    assert solo.leader == 3
    broker1 = cluster.brokers[1]
    # Kafka writes its snapshots on a timer and a byte count of its own: on a busy machine the second one may come a
    # little after the scenario's last change
    cluster.wait_for(
        lambda: len(cluster.metadata_snapshot_files(broker1)) >= 2, "broker 1 writing a second metadata snapshot", 60
    )
    cluster.wait_for(
        lambda: int(cluster.metadata_log_files(broker1)[0].name[:20]) > 0,
        "broker 1 deleting the segments its snapshots cover",
    )
    unexpected = {k: v for k, v in bridges.metrics.counts.items() if k not in ("broker_unreachable", "topic_deleted")}
    assert not unexpected, unexpected


def compare_with_dump(path: Path, dump_text: str, data: bytes | None = None) -> int:
    """Assert that the decoder's records of one file (``data``: its bytes, read beforehand) equal Kafka's dump of it;
    returns how many were compared."""
    from elrwatch.bridge import metadata_log

    theirs = dump_payloads(dump_text)
    result = metadata_log.scan(path.read_bytes() if data is None else data)
    assert not result.errors, (path.name, result.errors[:3])
    mine = {d.offset: metadata_log.dumps_payload(d) for d in result.records}
    assert sorted(mine) == sorted(theirs), (path.name, sorted(set(mine) ^ set(theirs))[:10])
    for offset, payload in theirs.items():
        assert orjson.loads(mine[offset]) == orjson.loads(payload), (path.name, offset, mine[offset], payload)
        assert mine[offset] == payload, (path.name, offset)  # byte for byte: same field order and formatting
    return len(theirs)


def test_decoder_equals_dump_log_segments(live: tuple[Any, Bridges]) -> None:
    """Every segment and snapshot of the controller and of broker 1, after the scenario (run it first)."""
    cluster, _ = live
    cluster.wait_metadata_quiet(quiet_for=1.0)
    compared = files = 0
    for node in (cluster.controller, cluster.brokers[1]):
        for path in [*cluster.metadata_log_files(node), *cluster.metadata_snapshot_files(node)]:
            # broker 1 deletes what a newer snapshot covers (retention 2 s) while we read: a file gone before its
            # bytes were read, or before Kafka's tool dumped it, is passed over (read first: the dump may succeed
            # and the file vanish right after)
            try:
                data = path.read_bytes()
                dump = cluster.dump_log_segments([path])
            except FileNotFoundError:
                continue
            except ClusterError:
                if path.exists():
                    raise
                continue
            compared += compare_with_dump(path, dump, data)
            files += 1
    assert files >= 4 and compared >= 100, (files, compared)


def test_cli_both_modes_publish_and_serve_metrics(live: tuple[Any, Bridges], tmp_path: Path) -> None:
    """`elrwatch bridge` as an operator runs it (a process per mode, SIGTERM to stop, --state-file, --metrics-port):
    its events replay to the cluster's state."""
    import os
    import signal
    import subprocess
    import sys
    import urllib.request

    from test_streaming_e2e import cli_options

    from elrwatch.devtools.kafka_cluster import free_port

    cluster, _ = live
    for topic in ("ev-cli-admin", "ev-cli-log"):
        cluster.create_topic(topic, replica_assignment={0: [1]})
    procs = []
    ports = {}
    try:
        for mode, topic, extra in (
            ("admin", "ev-cli-admin", []),
            ("metadata-log", "ev-cli-log", ["--log-dir", str(cluster.controller.metadata_dir)]),
        ):
            ports[mode] = free_port()
            options = cli_options(source=mode, bootstrap_servers=cluster.bootstrap, topic=topic, interval=0.5)
            options += cli_options(state_file=tmp_path / f"{mode}.json", metrics_port=ports[mode])
            cmd = [sys.executable, "-m", "elrwatch.cli", "bridge", *options, *extra]
            procs.append(
                subprocess.Popen(
                    cmd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )
            )
        _kill_and_wait(cluster, 3)
        cluster.wait_metadata_quiet(quiet_for=1.0)

        def caught_up() -> bool:
            return all(
                not mismatches(cluster, replay(consume_lines(cluster.answering_bootstrap, t))[0])
                for t in ("ev-cli-admin", "ev-cli-log")
            )

        cluster.wait_for(caught_up, "the CLI bridges caught up", timeout=60, interval=1.0)
        for mode, port in ports.items():
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            assert "elrwatch_bridge_published_records_total" in text, mode
            published = [
                line for line in text.splitlines() if line.startswith("elrwatch_bridge_published_records_total ")
            ]
            assert float(published[0].split()[1]) > 0, mode
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        outputs = [proc.communicate(timeout=30)[0] for proc in procs]
        cluster.start_broker(3)
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert all("--source" in out for out in outputs), outputs  # the start line names the mode
    assert all(orjson.loads((tmp_path / f"{mode}.json").read_bytes())["pending"] == [] for mode in ports)


def test_spark_stream_of_the_bridges_events_equals_the_cluster(live: tuple[Any, Bridges], tmp_path: Path) -> None:
    """The full pipeline once: bridge → event topic → `elrwatch stream` (Spark, --available-now) → status store;
    the store's partitions and brokers equal DescribeTopicPartitions / DescribeCluster, for both modes."""
    import json

    from test_streaming_e2e import _cli, cli_options, kafka_source, store_options

    cluster, _ = live
    _wait_caught_up(cluster, "before the stream jobs")
    for topic in EVENT_TOPICS:
        url = f"sqlite:///{tmp_path}/{topic}.db"
        done = _cli(
            "stream",
            *kafka_source(cluster.bootstrap, topic),
            *store_options(url, tmp_path / f"ck-{topic}"),
            *cli_options(buckets=2, available_now=True, starting_offsets="earliest"),
            timeout=420,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        status = _cli("status", "--store", url)
        assert status.returncode == 0, status.stderr[-3000:]
        doc = json.loads(status.stdout)
        stored = {
            (p["topic"], p["partitionId"]): (p["leader"], p["isr"], p.get("elr", []), p.get("lastKnownElr", []))
            for p in doc["partitions"]
        }
        described = {
            k: (d["leader"], d["isr"], d["elr"], d["last_known_elr"])
            for k, d in cluster.describe_topic_partitions().items()
        }
        assert {k: stored.get(k) for k in described} == described, topic
        fenced = {b["brokerId"]: b["fenced"] for b in doc["brokers"] if b.get("registered", True)}
        assert fenced == cluster.describe_cluster(), topic
        assert doc["cluster"]["derivedFrom"] == ("admin-poll" if topic == "ev-admin" else None)
