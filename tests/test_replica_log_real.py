"""bridge/replica_log.py on segment files a real Kafka 4.4.0 cluster wrote (devtools/kafka_cluster.py): every
replica's log end offset and last batch's leader epoch equal what Kafka's own tools say (GetOffsetShell, and
DumpLogSegments on each replica's files), also across a leader change, with compressed batches, and for a copy whose
last batch was torn (DumpLogSegments reports the same invalid tail)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_clusters import running_cluster

from elrwatch.bridge import replica_log as rl

pytestmark = [pytest.mark.real_kafka, pytest.mark.slow, pytest.mark.timeout(300)]

TOPIC = "rl"


def kafka_tool(cluster: Any, main: str, *args: str) -> str:
    """Run one of Kafka's command-line tools with the cluster's jars; its stdout."""
    proc = subprocess.run(cluster._java_cmd(main, *args), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def latest_offset(cluster: Any, topic: str, partition: int) -> int:
    """GetOffsetShell --time -1 (the high watermark, the log end offset once every replica caught up)."""
    out = kafka_tool(
        cluster,
        "org.apache.kafka.tools.GetOffsetShell",
        "--bootstrap-server",
        cluster.bootstrap,
        "--topic",
        topic,
        "--partitions",
        str(partition),
        "--time",
        "-1",
    )
    return int(out.strip().rsplit(":", 1)[1])


_BATCH_LINE = re.compile(r"baseOffset: (\d+) lastOffset: (\d+) .*partitionLeaderEpoch: (-?\d+)")
_INVALID = re.compile(r"Found (\d+) invalid bytes at the end of")


def dump_batches(cluster: Any, files: list[Path]) -> tuple[list[tuple[int, int, int]], list[int]]:
    """(baseOffset, lastOffset, partitionLeaderEpoch) of every batch DumpLogSegments prints, and the invalid tail
    sizes it reports."""
    out = kafka_tool(cluster, "org.apache.kafka.tools.DumpLogSegments", "--files", ",".join(map(str, files)))
    batches = [tuple(int(g) for g in m.groups()) for m in _BATCH_LINE.finditer(out)]
    return batches, [int(n) for n in _INVALID.findall(out)]  # type: ignore[misc]


def produce(cluster: Any, topic: str, count: int, batches: int, compression: str | None = None) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=cluster.answering_bootstrap.split(","),
        acks="all",
        linger_ms=50,
        compression_type=compression,
        request_timeout_ms=10000,
    )
    try:
        for _ in range(batches):
            for i in range(count):
                producer.send(topic, value=b"v%06d" % i, partition=0)
            producer.flush(30)
    finally:
        producer.close(10)


def infos(cluster: Any, topic: str) -> dict[int, rl.ReplicaLogInfo]:
    return {bid: rl.read_log_dir(node.data_dir)[(topic, 0)] for bid, node in cluster.brokers.items()}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with running_cluster(brokers=3) as c:
        yield c


def test_replicas_match_kafka_tools(cluster: Any, tmp_path: Path) -> None:
    cluster.create_topic(TOPIC, replica_assignment={0: [1, 2, 3]})
    produce(cluster, TOPIC, 50, 3)
    produce(cluster, TOPIC, 40, 2, compression="gzip")
    cluster.kill_broker(1)  # the leader: broker 2 takes over with a new leader epoch
    cluster.wait_for(lambda: cluster.describe_topic_partitions([TOPIC])[(TOPIC, 0)]["leader"] == 2, "leader 2")
    produce(cluster, TOPIC, 30, 2)
    cluster.start_broker(1)
    end = latest_offset(cluster, TOPIC, 0)
    assert end == 50 * 3 + 40 * 2 + 30 * 2
    cluster.wait_for(
        lambda: all(i.log_end_offset == end for i in infos(cluster, TOPIC).values()),
        "every replica's files at the log end offset",
    )
    found = infos(cluster, TOPIC)
    for bid, info in found.items():
        files = [p for _, p in rl.segments(cluster.brokers[bid].data_dir / f"{TOPIC}-0")]
        batches, invalid = dump_batches(cluster, files)
        assert invalid == []
        assert info.log_end_offset == batches[-1][1] + 1 == end, bid
        assert info.last_batch_epoch == batches[-1][2] == info.last_written_leader_epoch, bid
        assert info.checkpoint_epoch == info.last_batch_epoch, bid  # leader-epoch-checkpoint agrees
        assert (info.truncated_bytes, info.stop) == (0, None)
        assert info.topic_id is not None and len(info.topic_id) == 22
    epochs = {i.last_written_leader_epoch for i in found.values()}
    assert len(epochs) == 1 and epochs.pop() >= 1  # the leader change moved the epoch on

    # A copy of broker 3's replica whose last batch is torn: the log ends before it, as DumpLogSegments sees it.
    copy = tmp_path / f"{TOPIC}-0"
    shutil.copytree(cluster.brokers[3].data_dir / f"{TOPIC}-0", copy)
    last_segment = rl.segments(copy)[-1][1]
    with open(last_segment, "r+b") as fh:
        fh.truncate(last_segment.stat().st_size - 7)
    torn = rl.read_replica_log(copy)
    batches, invalid = dump_batches(cluster, [last_segment])
    assert torn.stop == "partial_batch"
    assert torn.log_end_offset == batches[-1][1] + 1 < end
    assert invalid == [torn.truncated_bytes]
    assert torn.last_batch_epoch == batches[-1][2]
