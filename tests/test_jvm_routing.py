"""Routing in the JVM (`route.route_in_jvm`, the ``kafka-native`` source): Spark SQL places exactly the partition
records the core routes to one bucket, sends everything else to every bucket, and buckets fed its raw rows
(parsed in the bucket) end equal to the replay oracle (the object store's replay, the specification), bad lines
quarantined and counted once."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from local_spark import local_spark
from streaming_batches import two_batches_per_bucket

from elrwatch.state.eventgen import scenario
from elrwatch.state.records import Record, parse_line
from elrwatch.state.replay import replay_lines
from elrwatch.state.routing import ALL_BUCKETS, targets
from elrwatch.streaming import route
from elrwatch.streaming import snapshots as snapshot_module

BUCKETS = 4


@pytest.fixture(scope="module")
def spark():
    session = local_spark("elrwatch-test-jvm-routing", {"spark.sql.shuffle.partitions": "2"})
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


def test_buckets_fed_jvm_rows_equal_the_replay_oracle(spark, tmp_path):
    lines = _lines()
    routed = _routed(spark, lines)
    snapshots = snapshot_module.SnapshotDir(str(tmp_path))

    def reload(b: int, state: snapshot_module.BucketState) -> snapshot_module.BucketState:
        """Through its state row: a blob (even buckets) or a snapshot-mode row, its delta replayed on load (odd)."""
        if b % 2 == 0:
            return snapshot_module.BucketState.from_blob(state.to_blob(), b)
        row = state.to_row(snapshots, b, "token", quiet_allowed=False)
        loaded = snapshot_module.BucketState.from_row(row, snapshots, b, BUCKETS)
        assert loaded.delta_rows > 0 and loaded.snapshot is None  # the delta was replayed
        return loaded

    # two micro-batches per bucket, each bucket's rows in their order, the state going through its row in between
    first, second = two_batches_per_bucket(routed.sort_values("seq"), BUCKETS, reload)
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
