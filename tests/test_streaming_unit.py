"""The job's Python stages without Spark: route → buckets → aggregate equals replay (fast regression test)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from elrwatch.state.cluster import ClusterState
from elrwatch.state.gauges import PipelineCounts
from elrwatch.state.replay import replay_lines
from elrwatch.streaming import job
from elrwatch.streaming.eventgen import scenario


def _batch(lines: list[str]) -> pa.RecordBatch:
    n = len(lines)
    return pa.RecordBatch.from_arrays(
        [pa.array(lines), pa.array(["ev"] * n), pa.array([0] * n, pa.int32()), pa.array(range(n), pa.int64()),
         pa.array([None] * n, pa.timestamp("us", tz="UTC"))],
        names=["value", "topic", "partition", "offset", "timestamp"],
    )


@pytest.mark.parametrize("buckets", [1, 3])
def test_buckets_aggregate_to_the_replay_document(buckets):
    lines = [x.decode() for x in scenario(3, 10, 4, steps=20, churn=60)]
    lines.insert(5, "not json")
    lines.insert(50, lines[40])  # a duplicate
    lines.insert(7, "Log starting offset: 0")  # not an event
    routed = pa.Table.from_batches(list(job.route_batches(iter([_batch(lines)]), buckets))).to_pandas()
    states = [job.BucketState(ClusterState(bucket=(b, buckets)), PipelineCounts(), {}) for b in range(buckets)]
    payloads = []
    for b in range(buckets):  # two micro-batches per bucket, the state going through its blob in between
        part = routed[routed.bucket == b]
        half = len(part) // 2
        payloads.append(job.process_bucket(b, buckets, job._ordered_rows(part.iloc[:half]), states[b], True))
        states[b] = job.BucketState.from_blob(states[b].to_blob())
        payloads.append(job.process_bucket(b, buckets, job._ordered_rows(part.iloc[half:]), states[b], True))
    aggregator = job.Aggregator(buckets)
    first = aggregator.absorb(payloads[0::2])
    second = aggregator.absorb(payloads[1::2])
    oracle = replay_lines(lines, "ev").document()
    docs = {(d["topicId"], d["partitionId"]): d for d in first["partitions"] + second["partitions"]}
    strip = lambda d: {k: v for k, v in d.items() if k != "lastPosition"}  # noqa: E731
    assert [strip(docs[(p["topicId"], p["partitionId"])]) for p in oracle["partitions"]] == [
        strip(p) for p in oracle["partitions"]
    ]
    assert second["gauges"] == oracle["gauges"]
    assert second["meta"]["counts"] == oracle["counts"]
    assert second["meta"]["cluster"] == oracle["cluster"]
    topics = {t["topicId"]: t for t in first["topics"] + second["topics"]}
    assert sorted(topics.values(), key=lambda t: t["topic"]) == oracle["topics"]
    assert len(first["quarantined"]) + len(second["quarantined"]) == oracle["quarantined"]["count"] == 1


def test_trigger_parsing():
    assert job.parse_trigger("1s") == "1000 milliseconds"
    assert job.parse_trigger("250ms") == "250 milliseconds"
    assert job.parse_trigger("10 seconds") == "10 seconds"


def test_fresh_checkpoint_with_a_used_store_is_refused(tmp_path):
    import subprocess
    import sys

    from elrwatch.streaming.store import StatusStore

    url = f"sqlite:///{tmp_path}/s.db"
    store = StatusStore(url)
    store.create_schema()
    store.write_batch(0, gauges={"elrwatch_partition_count": 0})
    store.dispose()
    done = subprocess.run(
        [sys.executable, "-m", "elrwatch.cli", "stream", "--source", "files", "--path", str(tmp_path), "--store", url,
         "--checkpoint", str(tmp_path / "new-ck")],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1
    assert "already holds batches of another run" in done.stderr.splitlines()[-1]
