"""Routing in the JVM (`route.route_in_jvm`, the ``kafka-native`` source): Spark SQL places exactly the partition
records the core routes to one bucket, sends everything else to every bucket, and buckets fed its raw rows
(parsed in the bucket) end equal to the replay oracle (the object store's replay, the specification), bad lines
quarantined and counted once."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from elrwatch.state.eventgen import scenario
from elrwatch.state.records import Record, parse_line
from elrwatch.state.replay import replay_lines
from elrwatch.state.routing import ALL_BUCKETS, targets
from elrwatch.streaming import bucket as bucket_module
from elrwatch.streaming import payload as payload_module
from elrwatch.streaming import route, sink
from elrwatch.streaming import snapshots as snapshot_module

BUCKETS = 4


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("elrwatch-test-jvm-routing")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    yield session
    session.stop()


def _lines() -> list[str]:
    lines = [x.decode() for x in scenario(3, 12, 4, steps=30, churn=80)]
    change = next(json.loads(x) for x in lines if '"PARTITION_CHANGE_RECORD"' in x and '"partitionId":0' not in x)
    odd = [
        "not json",
        "",
        "Log starting offset: 0",
        '{"type":"PARTITION_CHANGE_RECORD","version":0,"data":{"topicId":"x","partitionId":"3"}}',
        '{"type":"PARTITION_CHANGE_RECORD","version":0,"data":{"topicId":"x","partitionId":3.5}}',
        '{"type":"NO_OP_RECORD","version":0,"data":{}}',
        json.dumps({**change, "data": {**change["data"], "isr": [1, 1]}}),  # placed, then quarantined by its owner
    ]
    for i, line in enumerate(odd):
        lines.insert(7 + 9 * i, line)
    lines.insert(60, lines[40])  # a duplicate
    return lines


def _routed(spark, lines: list[str]) -> pd.DataFrame:
    frame = spark.createDataFrame(
        [(line.encode(), "ev", 0, i) for i, line in enumerate(lines)],
        "value binary, topic string, partition int, offset long",
    )
    return route.route_in_jvm(frame, BUCKETS).toPandas()


def test_jvm_places_what_the_core_places_and_broadcasts_the_rest(spark):
    lines = _lines()
    routed = _routed(spark, lines)
    by_seq = routed.groupby("seq")
    assert sorted(by_seq.groups) == list(range(len(lines)))  # nothing lost
    placed = 0
    for seq, group in by_seq:
        parsed = parse_line(lines[seq], "ev/0", seq)
        kinds = set(group["kind"])
        core_places = isinstance(parsed, Record) and targets(parsed.type, parsed.data, BUCKETS) != ALL_BUCKETS
        if kinds == {route.KIND_RAW}:  # placed by the JVM: where the core places it, or a record it rejects
            assert len(group) == 1, lines[seq]
            if core_places:
                assert list(group["bucket"]) == [targets(parsed.type, parsed.data, BUCKETS)]
                placed += 1
            else:
                assert not isinstance(parsed, Record), lines[seq]
        else:
            assert not core_places, lines[seq]
            assert kinds == {route.KIND_RAW_BROADCAST}
            assert sorted(group["bucket"]) == list(range(BUCKETS)), lines[seq]
    assert placed > len(lines) // 2
    assert set(routed["src"]) == {"ev/0"} and routed["moff"].dtype.kind == "i"


def _on_the_wire(payload: dict) -> dict:
    """A bucket's payload as the sink gets it: its output rows decoded."""
    (head,), chunks = payload_module.decode_payloads(payload_module.encode_payload(payload))
    head["partitions"] = list(payload_module.iter_partition_rows(chunks))
    return head


def test_buckets_fed_jvm_rows_equal_the_replay_oracle(spark, tmp_path):
    lines = _lines()
    routed = _routed(spark, lines)
    states = [snapshot_module.BucketState.new(b, BUCKETS, 1) for b in range(BUCKETS)]
    snapshots = snapshot_module.SnapshotDir(str(tmp_path))
    payloads = []
    for b in range(BUCKETS):  # two micro-batches, the state going through its state row in between: a blob (even
        # buckets) or a snapshot-mode row, its delta replayed on load (odd buckets)
        part = routed[routed.bucket == b].sort_values("seq")
        half = len(part) // 2
        payloads.append(
            bucket_module.process_bucket(b, BUCKETS, bucket_module.ordered_rows(part.iloc[:half]), states[b])
        )
        if b % 2 == 0:
            states[b] = snapshot_module.BucketState.from_blob(states[b].to_blob(), b)
        else:
            row = states[b].to_row(snapshots, b, "token", quiet_allowed=False)
            states[b] = snapshot_module.BucketState.from_row(row, snapshots, b, BUCKETS)
            assert states[b].delta_rows > 0 and states[b].snapshot is None  # the delta was replayed
        payloads.append(
            bucket_module.process_bucket(b, BUCKETS, bucket_module.ordered_rows(part.iloc[half:]), states[b])
        )
    aggregator = sink.Aggregator(BUCKETS)
    payloads = [_on_the_wire(p) for p in payloads]
    first = aggregator.absorb(payloads[0::2])
    second = aggregator.absorb(payloads[1::2])
    oracle = replay_lines(lines, "ev", store="objects").document()
    runtime = replay_lines(lines, "ev").document()
    assert (runtime["gauges"], runtime["counts"]) == (oracle["gauges"], oracle["counts"])
    assert second["gauges"] == oracle["gauges"]
    assert second["meta"]["counts"] == oracle["counts"]
    quarantined = first["quarantined"] + second["quarantined"]
    assert sorted(int(q["position"].split("@")[-1]) + 1 for q in quarantined) == sorted(  # replay: line numbers
        int(q["position"].split(":")[-1]) for q in oracle["quarantined"]["records"]
    )
    assert sorted(q["reason"] for q in quarantined) == sorted(q["reason"] for q in oracle["quarantined"]["records"])
    assert oracle["quarantined"]["count"] >= 4
