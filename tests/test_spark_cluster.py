"""`elrwatch stream` on a real Spark standalone cluster (a master and two workers, devtools/spark_cluster.py) against
the session's real Kafka broker: the store equals the replay oracle after a worker is killed mid-stream (nothing
lost, nothing applied twice: the history holds every status transition once). A driver killed and restarted from
its checkpoint is tests/test_streaming_e2e.py's test_sigkill_mid_stream_then_restart_applies_every_record_once (the
same restart in local mode; here the executors already read the snapshots another executor wrote).

The state mode is the chart's SparkApplication's: bucket snapshots (``--state-mode snapshot``) in a ``--state-dir``
that the driver and every executor share, as the chart's ReadWriteMany volume; here the workers share this machine's
filesystem. The state engine is the default one (columnar). The event topic has one partition: across its partitions
the job keeps each key's order only (docs/STREAMING.md), and the history oracle is the log's own order.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from test_streaming_e2e import (
    StreamJob,
    _events,
    _poll,
    _produce,
    _replay,
    _store_doc,
    assert_history_as_oracle,
    assert_same_as_oracle,
)

from elrwatch.devtools.spark_cluster import SparkCluster
from elrwatch.streaming.columnar_bucket import DEFAULT_ENGINE
from elrwatch.streaming.config import JobConfig

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def spark_cluster(tmp_path):
    """A master and two workers (one core, 1.5 GB each) on loopback; every process ends with the test."""
    with SparkCluster(workers=2, cores=1, memory="1536m", base_dir=tmp_path / "spark") as cluster:
        yield cluster


def _job_args(cluster: SparkCluster, kafka, topic: str, tmp: Path) -> list[str]:
    return [
        "--spark-master",
        cluster.url,
        "--source",
        JobConfig.source,  # the default source
        "--bootstrap-servers",
        kafka.bootstrap,
        "--topic",
        topic,
        "--store",
        f"sqlite:///{tmp}/store.db",
        "--checkpoint",
        str(tmp / "shared" / "checkpoint"),
        "--state-mode",
        "snapshot",
        "--state-dir",
        str(tmp / "shared" / "bucket-snapshots"),
        "--buckets",
        "4",
        "--max-records-per-batch",
        "300",
        "--state-delta-max-records",
        "400",
        "--spark-conf",
        "spark.executor.memory=1g",
        "--spark-conf",
        "spark.executor.cores=1",
    ]


def _both_executors_running(cluster: SparkCluster, job: StreamJob) -> None:
    _poll(lambda: cluster.executors_running() == 2, 120, "an executor on each worker", job)


def test_worker_killed_mid_stream_loses_nothing_and_applies_nothing_twice(
    kafka_server, fresh_topic, tmp_path, spark_cluster
):
    events = _events(tmp_path, records=3000, seed=21)
    oracle = _replay(events)
    topic = fresh_topic("meta-cluster-worker")
    _produce(kafka_server, events, topic, 1)
    url = f"sqlite:///{tmp_path}/store.db"
    want = oracle["counts"]["events"]
    job = StreamJob(tmp_path, *_job_args(spark_cluster, kafka_server, topic, tmp_path), "--trigger", "200 milliseconds")
    try:
        _both_executors_running(spark_cluster, job)
        _poll(lambda: (d := _store_doc(url)) and d["counts"].get("events", 0) >= 600, 240, "a few batches", job)
        spark_cluster.kill_worker(0)  # kill -9: the worker, its executor and their Python workers
        partial = _store_doc(url)["counts"]["events"]
        assert partial < want, "the kill came too late to be mid-stream"
        assert spark_cluster.executors_running() == 1
        _poll(lambda: (d := _store_doc(url)) and d["counts"].get("events") == want, 300, "every event", job)
        job.proc.send_signal(signal.SIGTERM)  # clean stop, to the driver's process (as Kubernetes does)
        assert job.wait(120) == 0, job.output()[-3000:]
    finally:
        job.kill()
    assert "Lost executor" in job.output() or "worker lost" in job.output().lower() or partial < want
    assert f"state engine {DEFAULT_ENGINE})" in job.output()
    assert_same_as_oracle(_store_doc(url), oracle)
    assert_history_as_oracle(url, events)
    snapshots = os.listdir(tmp_path / "shared" / "bucket-snapshots")
    assert any(name.endswith(".snap") for name in snapshots), snapshots  # the shared state dir was used
    assert not (tmp_path / "shared" / "checkpoint" / "bucket-snapshots").exists()
