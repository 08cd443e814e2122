"""Routing in the JVM (`route.route_in_jvm`, the ``kafka-native`` source): Spark SQL places exactly the partition
records the core routes to one bucket, sends everything else to every bucket, and buckets fed its raw rows
(parsed in the bucket) end equal to the replay oracle (the object store's replay, the specification), bad lines
quarantined and counted once. Lines with the routing headers of elrwatch's producers (kafkaio/headers.py) are
routed to the same rows as from their JSON; a wrong header places a line where its owner never sees it, and the
bucket that gets it quarantines it as a conflict, applied nowhere."""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest
from local_spark import local_spark
from streaming_batches import two_batches_per_bucket

from elrwatch.kafkaio.headers import EVERY_BUCKET, OFFSET_HEADER, ROUTE_HEADER
from elrwatch.kafkaio.produce import EventKeys
from elrwatch.state.eventgen import scenario
from elrwatch.state.records import Record, parse_line
from elrwatch.state.replay import replay_lines
from elrwatch.state.routing import ALL_BUCKETS, bucket_of, targets
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


Headers = list[tuple[str, bytes]]


def _routed(spark, lines: list[str], headers: list[Headers | None] | None = None) -> pd.DataFrame:
    """``lines`` as Spark's Kafka source gives them (one event-topic partition), routed; ``headers``: each line's
    (None: none, as a topic without headers), or no ``headers`` column at all (a source that does not include them)."""
    if headers is None:
        frame = spark.createDataFrame(
            [(line.encode(), "ev", 0, i) for i, line in enumerate(lines)],
            "value binary, topic string, partition int, offset long",
        )
    else:
        frame = spark.createDataFrame(
            [(line.encode(), "ev", 0, i, hs) for i, (line, hs) in enumerate(zip(lines, headers, strict=True))],
            "value binary, topic string, partition int, offset long, headers array<struct<key:string,value:binary>>",
        )
    routed = route.route_in_jvm(frame, BUCKETS).toPandas()
    return routed.sort_values(["seq", "bucket"], kind="stable").reset_index(drop=True)


def _producer_headers(lines: list[str]) -> list[Headers | None]:
    """The headers `elrwatch produce` and the bridges set on each line."""
    keys = EventKeys()
    return [keys.with_headers(line)[1] for line in lines]


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


def _random_stream(seed: int) -> list[str]:
    """A generated stream with every record class: bootstrap, broker failures, leader moves, then the odd lines,
    kafka-dump-log text lines and duplicates of `_lines`."""
    lines = [x.decode() for x in scenario(2, 9, 4, steps=12, churn=40, seed=seed)] + _lines()
    rng = random.Random(seed)
    for line in rng.sample(lines, 8):
        lines.insert(rng.randrange(len(lines)), f"| offset: {rng.randrange(100)} CreateTime: 1 payload: {line}")
    return lines


def test_headers_route_each_line_as_its_json_does(spark, seed: int = 1):
    """The same rows whether a line is routed from elrwatch's headers, from its JSON (no headers, an empty header
    list, a header version this job does not know, the contract's headers not first or not in order) or a mix of
    them."""
    lines = _random_stream(seed)
    from_json = _routed(spark, lines)
    produced = _producer_headers(lines)
    assert sum(h is not None and any(k == ROUTE_HEADER and v != EVERY_BUCKET for k, v in h) for h in produced) > 100
    rng = random.Random(seed)
    unknown = [("elrwatch.route.v0", b"garbage"), ("elrwatch.route.v2", b"x:1")]
    mixed = [rng.choice([h, None, [], unknown, [*unknown, *(h or [])], (h or [])[::-1]]) for h in produced]
    for headers in (produced, [None] * len(lines), mixed):
        pd.testing.assert_frame_equal(_routed(spark, lines, headers), from_json)


def test_a_wrong_header_is_a_conflict_applied_nowhere_and_harmless_ones_change_nothing(spark, tmp_path):
    """Forged placements (a partition's record in another partition's bucket, a broker record in one bucket) are
    quarantined as conflicts by the bucket that gets them and applied nowhere: the buckets end as the replay of the
    stream without those lines. A placement sent to every bucket, an invalid line placed somewhere, a duplicated
    header key (the first counts) and a malformed offset header change nothing the replay sees."""
    lines = _lines()
    headers = _producer_headers(lines)
    change = next(
        i
        for i, line in enumerate(lines)
        if '"PARTITION_CHANGE_RECORD"' in line
        and '"partitionId":0' not in line
        and isinstance(parse_line(line, "ev/0", i), Record)
    )
    fence = next(i for i, line in enumerate(lines) if '"BROKER_REGISTRATION_CHANGE_RECORD"' in line and i > change)
    data = json.loads(lines[change])["data"]
    owner = bucket_of(data["topicId"], data["partitionId"], BUCKETS)
    elsewhere = next(p for p in range(1, 99) if bucket_of(data["topicId"], p, BUCKETS) != owner)
    forged = {change: f"{data['topicId']}:{elsewhere}".encode(), fence: f"{data['topicId']}:1".encode()}
    for i, route_value in forged.items():
        headers[i] = [(ROUTE_HEADER, route_value)]
    harmless = next(i for i, line in enumerate(lines) if i not in forged and '"PARTITION_RECORD"' in line)
    headers[harmless] = [(ROUTE_HEADER, EVERY_BUCKET), (OFFSET_HEADER, b"not a number")]
    headers[lines.index("not json")] = [(ROUTE_HEADER, b"x:3")]  # reported by the one bucket that gets it
    duplicated = next(i for i, h in enumerate(headers) if h and h[0][1] != EVERY_BUCKET and i not in forged)
    headers[duplicated] = [headers[duplicated][0], (ROUTE_HEADER, b"other:1"), *headers[duplicated][1:]]
    routed = _routed(spark, lines, headers)
    by_seq = routed.groupby("seq")
    assert list(by_seq.get_group(harmless)["kind"]) == [route.KIND_RAW_BROADCAST] * BUCKETS
    assert list(by_seq.get_group(harmless)["moff"]) == [-1] * BUCKETS
    assert list(by_seq.get_group(change)["bucket"]) == [bucket_of(data["topicId"], elsewhere, BUCKETS)]
    assert list(by_seq.get_group(fence)["kind"]) == [route.KIND_RAW]

    first, second = two_batches_per_bucket(routed, BUCKETS, lambda _b, state: state)
    kept = [line for i, line in enumerate(lines) if i not in forged]
    oracle = replay_lines(kept, "ev", store="objects").document()
    counters = ("elrwatch_events_total", "elrwatch_quarantined_records_total")
    state = lambda gauges: {k: v for k, v in gauges.items() if not k.startswith(counters)}  # noqa: E731
    assert state(second["gauges"]) == state(oracle["gauges"])
    events = lambda gauges: {k: v for k, v in gauges.items() if k.startswith(counters[0])}  # noqa: E731
    assert events(second["gauges"]) == events(replay_lines(lines, "ev").document()["gauges"])  # counted once
    quarantined = first["quarantined"] + second["quarantined"]
    conflicts = [q for q in quarantined if q["reason"] == "conflict"]
    assert sorted(int(q["position"].split("@")[-1]) for q in conflicts) == sorted(forged)
    assert all("not applied" in q["message"] for q in conflicts)
    assert any("owned by every bucket" in q["message"] for q in conflicts)  # the broker record
    assert sorted(q["reason"] for q in quarantined if q["reason"] != "conflict") == sorted(
        q["reason"] for q in oracle["quarantined"]["records"]
    )
