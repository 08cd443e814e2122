"""The per-broker, per-topic and by-cause gauges on a real Kafka cluster, through the streaming job's /metrics and
the REST API, equal what DescribeTopicPartitions + DescribeCluster + DescribeConfigs imply, after a kill -9, a
controlled shutdown and a min.insync.replicas change.

The job reads the controller's metadata log (its DumpLogSegments text, a new file at each checkpoint: the files
source; records it already applied are skipped by their offsets). The oracle below is written from the gauges'
definitions over Kafka's own answers, not with state/insight.py.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from real_kafka_check import replay_dump
from test_streaming_e2e import StreamJob, _poll, cli_options, files_source, store_options

from elrwatch.api.app import create_app
from elrwatch.api.settings import Settings
from elrwatch.devtools.kafka_cluster import free_port
from elrwatch.store import StatusStore
from elrwatch.streaming.metrics import scrape

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.real_kafka, pytest.mark.timeout(600)]

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
PREFIXES = (
    "elrwatch_broker_",
    "elrwatch_topic_under_min_isr_partitions{",
    "elrwatch_topic_offline_partitions{",
    "elrwatch_topic_at_min_isr_partitions{",
    "elrwatch_under_min_isr_partitions_by_cause{",
)


def describe(cluster: Any, topics: set[str]) -> tuple[dict[tuple[str, int], dict], dict[int, bool], dict[str, int]]:
    """DescribeTopicPartitions of every topic (internal ones too: elrwatch sees them in the log; ``topics``: the
    test's, which a client's metadata may not list yet), DescribeCluster, and each topic's resolved
    min.insync.replicas (DescribeConfigs)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    from elrwatch.devtools.kafka_cluster import ClusterError

    names = sorted(set(cluster._admin_call(lambda a: a.list_topics(), "ListTopics")) | topics)

    def settled() -> tuple[dict, dict] | None:
        try:
            return cluster.settle(names)
        except ClusterError:  # a broker whose metadata cache does not know a new topic yet (UNKNOWN_TOPIC)
            return None

    partitions, brokers = cluster.wait_for(settled, "every broker knows the topics", timeout=60)
    resources = [ConfigResource(ConfigResourceType.TOPIC, t, configs=["min.insync.replicas"]) for t in names]
    found = cluster._admin_call(lambda a: a.describe_configs(resources, config_filter="all"), "DescribeConfigs")
    min_isr = {}
    for name, configs in found["topic"].items():
        entry = configs["min.insync.replicas"]
        min_isr[name] = int(entry["value"] if isinstance(entry, dict) else entry)
    return partitions, brokers, min_isr


def expected(
    cluster: Any, planned: set[int], topics: set[str]
) -> tuple[dict[str, float], dict[tuple[str, int], list[dict]]]:
    """The gauges and each partition's missing replicas with causes, from Kafka's answers; ``planned``: the brokers
    the test stopped with a controlled shutdown (DescribeCluster shows them fenced)."""
    partitions, brokers, min_isr = describe(cluster, topics)
    active = {b for b, fenced in brokers.items() if not fenced and b not in planned}

    def cause(b: int) -> str:
        if b not in brokers:
            return "unregistered"
        if b in planned:
            return "controlled_shutdown"
        return "fenced" if brokers[b] else "lagging"

    priority = ["controlled_shutdown", "lagging", "fenced", "unregistered"]
    gauges: dict[str, float] = {}
    for b in brokers:
        for name in ("isr_missing", "restart_blocking", "restart_offline"):
            gauges[f'elrwatch_broker_{name}_partitions{{broker="{b}"}}'] = 0
    for c in priority:
        gauges[f'elrwatch_under_min_isr_partitions_by_cause{{cause="{c}"}}'] = 0
    missing_of: dict[tuple[str, int], list[dict]] = {}

    def add(sample: str) -> None:
        if sample.startswith("elrwatch_broker_") and sample not in gauges:
            return  # an unregistered broker has no series
        gauges[sample] = gauges.get(sample, 0) + 1

    for (topic, pid), p in partitions.items():
        effective = min(min_isr[topic], len(partitions[(topic, 0)]["replicas"]))
        isr, leader = p["isr"], p["leader"]
        missing = [b for b in p["replicas"] if b not in isr]
        missing_of[(topic, pid)] = [{"brokerId": b, "cause": cause(b)} for b in missing]
        for b in missing:
            add(f'elrwatch_broker_isr_missing_partitions{{broker="{b}"}}')
        if len(isr) - 1 < effective:
            for b in isr:
                add(f'elrwatch_broker_restart_blocking_partitions{{broker="{b}"}}')
        electable = {b for b in set(isr) | set(p["elr"]) if b in active}
        if leader != -1 and len(electable) == 1:
            add(f'elrwatch_broker_restart_offline_partitions{{broker="{electable.pop()}"}}')
        if len(isr) < effective:
            add(f'elrwatch_topic_under_min_isr_partitions{{topic="{topic}"}}')
            dominant = max((cause(b) for b in missing), key=priority.index) if missing else "lagging"
            add(f'elrwatch_under_min_isr_partitions_by_cause{{cause="{dominant}"}}')
        elif len(isr) == effective:
            add(f'elrwatch_topic_at_min_isr_partitions{{topic="{topic}"}}')
        if leader == -1:
            add(f'elrwatch_topic_offline_partitions{{topic="{topic}"}}')
    return gauges, missing_of


def write_dump(cluster: Any, folder: Path, n: int) -> str:
    """The whole metadata log as DumpLogSegments text, as the next file of the job's source (renamed in whole)."""
    text = cluster.dump_metadata_log()
    tmp = folder.parent / f"dump-{n}.tmp"
    tmp.write_text(text)
    os.rename(tmp, folder / f"{n:03d}-metadata.log")
    return text


@pytest.fixture
def job(real_kafka_cluster: Any, tmp_path: Path) -> Iterator[tuple[StreamJob, str, str, Path]]:
    logs = tmp_path / "log"
    logs.mkdir()
    write_dump(real_kafka_cluster, logs, 0)
    url = f"sqlite:///{tmp_path}/store.db"
    port = free_port()
    stream = StreamJob(
        tmp_path,
        *files_source(logs),
        *store_options(url, tmp_path / "ck"),
        *cli_options(metrics_port=port, buckets=2, trigger="1s"),
    )
    try:
        yield stream, url, f"http://127.0.0.1:{port}/metrics", logs
    finally:
        stream.kill()


def test_insight_gauges_equal_kafkas_answers_through_metrics_and_rest(real_kafka_cluster: Any, job: Any) -> None:
    cluster = real_kafka_cluster
    stream, url, metrics_url, logs = job
    wide, narrow = f"insight-{uuid.uuid4().hex[:6]}", f"insight-rf2-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(wide, partitions=3, replication_factor=3)
    cluster.create_topic(narrow, replica_assignment={0: [1, 2], 1: [2, 1], 2: [1, 3]})
    planned: set[int] = set()
    seen: dict[str, dict[str, float]] = {}

    def checkpoint(label: str, n: int) -> None:
        for attempt in range(3):  # Kafka's answers and the dump of the same metadata log
            want, missing_of = expected(cluster, planned, {wide, narrow})
            size = cluster.metadata_log_size()
            dump = write_dump(cluster, logs, 10 * n + attempt)
            if cluster.metadata_log_size() == size:
                break
        else:
            pytest.fail(f"{label}: the metadata log kept growing")

        def insight_metrics() -> dict[str, float] | None:
            try:
                got = {k: v for k, v in scrape(metrics_url).items() if k.startswith(PREFIXES)}
            except OSError:
                return None
            return got if got == want else None

        try:
            _poll(insight_metrics, 180, f"{label}: /metrics equal to Kafka's answers", stream)
        except BaseException:
            got = {k: v for k, v in scrape(metrics_url).items() if k.startswith(PREFIXES)}
            diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
            raise AssertionError(f"{label}: /metrics (got, want) differ: {diff}") from None
        seen[label] = want
        # the offline path: `elrwatch replay` of the same dump carries the same figures in its "gauges"
        replayed = replay_dump(dump).document(advice=False)["gauges"]
        assert {k: v for k, v in replayed.items() if k.startswith(PREFIXES)} == want, label
        # REST: the store of the same batches (written just after the gauges are served)
        store = StatusStore(url)
        try:
            with TestClient(create_app(Settings(store=url), store=store)) as client:

                def rest_brokers() -> list[dict] | None:
                    brokers = client.get("/v1/brokers").json()
                    return (
                        brokers
                        if all(
                            b["restartBlockingPartitions"]
                            == want.get(f'elrwatch_broker_restart_blocking_partitions{{broker="{b["brokerId"]}"}}')
                            for b in brokers
                            if b["state"] != "unregistered"
                        )
                        else None
                    )

                brokers = _poll(rest_brokers, 60, f"{label}: /v1/brokers of the same batch", stream)
                for b in brokers:
                    bid = b["brokerId"]
                    assert (b["isrMissingPartitions"], b["restartOfflinePartitions"]) == (
                        want[f'elrwatch_broker_isr_missing_partitions{{broker="{bid}"}}'],
                        want[f'elrwatch_broker_restart_offline_partitions{{broker="{bid}"}}'],
                    ), label
                    check = client.get(f"/v1/brokers/{bid}/restart-check", params={"limit": 1000}).json()
                    assert check["blockingCount"] == b["restartBlockingPartitions"], label
                    assert len(check["blocking"]["items"]) == check["blockingCount"], label
                    assert check["safe"] is (check["blockingCount"] == 0 and check["offlineCount"] == 0), label
                for topic in (wide, narrow):
                    items = client.get("/v1/partitions", params={"topic": topic}).json()["items"]
                    got_missing = {(topic, p["partitionId"]): p["missingReplicas"] for p in items}
                    assert got_missing == {k: v for k, v in missing_of.items() if k[0] == topic}, label
        finally:
            store.dispose()

    try:
        checkpoint("healthy", 1)
        cluster.kill_broker(3)  # a crash: fenced after the session timeout
        cluster.wait_for(lambda: 3 in cluster.fenced_brokers(), "broker 3 fenced", timeout=60)
        checkpoint("broker 3 killed", 2)
        assert seen["broker 3 killed"]['elrwatch_broker_isr_missing_partitions{broker="3"}'] >= 4
        cluster.stop_broker(2)  # SIGTERM: a controlled shutdown, then fenced
        planned.add(2)
        cluster.wait_for(lambda: 2 in cluster.fenced_brokers(), "broker 2 fenced", timeout=60)
        checkpoint("broker 2 in a controlled shutdown", 3)
        state = seen["broker 2 in a controlled shutdown"]
        assert state['elrwatch_under_min_isr_partitions_by_cause{cause="controlled_shutdown"}'] >= 2  # narrow-0, -1
        assert state['elrwatch_under_min_isr_partitions_by_cause{cause="fenced"}'] >= 3  # wide-*, narrow-2
        assert state[f'elrwatch_topic_under_min_isr_partitions{{topic="{wide}"}}'] == 3
        assert state['elrwatch_broker_restart_offline_partitions{broker="1"}'] >= 6
        cluster.set_topic_config(wide, "min.insync.replicas", "1")
        checkpoint("min ISR of the wide topic lowered to 1", 4)
        state = seen["min ISR of the wide topic lowered to 1"]
        assert f'elrwatch_topic_under_min_isr_partitions{{topic="{wide}"}}' not in state  # the series was dropped
        assert state[f'elrwatch_topic_at_min_isr_partitions{{topic="{wide}"}}'] == 3
        ARTIFACTS.mkdir(exist_ok=True)  # each checkpoint's gauges, for the record
        (ARTIFACTS / "insight-real-kafka.json").write_text(json.dumps(seen, indent=2, sort_keys=True) + "\n")
    finally:
        for broker in (2, 3):
            if not cluster.broker(broker).running:
                cluster.start_broker(broker)
        cluster.set_topic_config(wide, "min.insync.replicas", None)
