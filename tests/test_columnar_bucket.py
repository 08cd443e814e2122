"""The state stage with the columnar engine (``--state-engine columnar``) against the object engine, at the bucket
level: the same routed rows through `bucket.run_bucket`, batch after batch, restarts from the state row in between,
give equal payloads."""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pytest

from elrwatch.state.eventgen import scenario
from elrwatch.state.records import Record, parse_line
from elrwatch.state.routing import ALL_BUCKETS, targets
from elrwatch.streaming import bucket as bucket_module
from elrwatch.streaming import payload as payload_module
from elrwatch.streaming import route
from elrwatch.streaming.config import JobConfig, check_engine
from elrwatch.streaming.snapshots import SnapshotError

BUCKETS = 3


def _lines() -> list[str]:
    """A scenario with faults: a bad line, quarantined records, a violation, duplicates and a re-sent range."""
    events = [json.loads(x) for x in scenario(3, 10, 4, steps=24, churn=150, seed=11)]
    topic = next(e["data"] for e in events if e["type"] == "PARTITION_RECORD" and e["data"]["partitionId"] == 1)
    tid = topic["topicId"]
    faults = [
        (40, {"type": "PARTITION_CHANGE_RECORD", "version": 2, "data": {"partitionId": 1, "topicId": "X" * 22}}),
        (80, {"type": "PARTITION_CHANGE_RECORD", "version": 2, "data": {"partitionId": 1, "topicId": tid, "isr": []}}),
        (
            120,
            {
                "type": "PARTITION_CHANGE_RECORD",
                "version": 2,
                "data": {
                    "partitionId": 1,
                    "topicId": tid,
                    "isr": [topic["replicas"][0]],
                    "leader": topic["replicas"][1],
                },
            },
        ),
        (300, {"type": "PARTITION_RECORD", "version": 2, "data": {"partitionId": 2, "topicId": tid, "replicas": "x"}}),
    ]
    for at, event in reversed(faults):
        events.insert(at, event)
    for i, event in enumerate(events):
        event["offset"], event["timestamp"] = i, 1_732_100_000_000 + i
    lines = [json.dumps(e, separators=(",", ":")) for e in events]
    lines[40] = json.dumps(events[40])  # the unknown topic's change with spaces: its quarantine shows the envelope
    lines.insert(9, "not json")
    lines.insert(200, lines[150])  # a duplicate
    lines[400:400] = lines[330:360]  # a re-sent range
    return lines


def _python_routed(lines: list[str]) -> dict[int, list[bucket_module.Row]]:
    n = len(lines)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(lines),
            pa.array(["ev"] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([None] * n, pa.timestamp("us", tz="UTC")),
        ],
        names=["value", "topic", "partition", "offset", "timestamp"],
    )
    routed = pa.Table.from_batches(list(route.route_batches(iter([batch]), BUCKETS))).to_pandas()
    return {b: list(bucket_module._ordered_rows(routed[routed.bucket == b])) for b in range(BUCKETS)}


def _jvm_routed(lines: list[str], sources: int = 1) -> dict[int, list[bucket_module.Row]]:
    """The rows `route.route_in_jvm` gives: raw lines placed in their bucket, or sent to every bucket. With
    ``sources`` event-topic partitions, a line goes to the one its record's partition hashes to (the producer's
    keys), with that partition's next offset, and the rows are in metadata-offset order (`bucket._ordered_rows`)."""
    out: dict[int, list[bucket_module.Row]] = {b: [] for b in range(BUCKETS)}
    next_seq = [0] * sources
    for line in lines:
        parsed = parse_line(line.encode())
        target = targets(parsed.type, parsed.data, BUCKETS) if isinstance(parsed, Record) else ALL_BUCKETS
        key = parsed.data.get("partitionId", 0) if isinstance(parsed, Record) else 0
        source = key % sources
        seq = next_seq[source]
        next_seq[source] += 1
        for b in range(BUCKETS) if target == ALL_BUCKETS else (target,):
            kind = route.KIND_RAW if target != ALL_BUCKETS else route.KIND_RAW_BROADCAST
            out[b].append((kind, f"ev/{source}", seq, line.encode()))
    return out


def _canonical_transitions(transitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """In order; those of one record sorted by partition (the core refreshes a broker's partitions in set order)."""
    groups: list[list[dict[str, Any]]] = []
    for t in transitions:
        if groups and (groups[-1][0]["offset"], groups[-1][0]["position"]) == (t["offset"], t["position"]):
            groups[-1].append(t)
        else:
            groups.append([t])
    return [t for g in groups for t in sorted(g, key=lambda t: (t["topicId"], t["partitionId"]))]


def _comparable(bodies: list[bytes], rows_dir: str | None = None) -> dict[str, Any]:
    """A bucket's output as the store gets it: the head with its lists, inline or read back from its rows file."""
    (head,), chunks = payload_module.decode_payloads(bodies)
    name = head.pop(payload_module.ROWS_FILE, None)
    if name is not None:
        assert rows_dir is not None and not chunks
        lists, chunks = payload_module.read_rows_file(os.path.join(rows_dir, name))
        assert len(lists["transitions"]) == head.pop("transitionCount")
        assert len(lists["quarantined"]) == head.pop("quarantinedCount")
        head.update(lists)
    rows = list(payload_module.iter_partition_rows(chunks))
    assert len(rows) == head.pop("partitionCount")
    head.pop("quarantinedCount", None)
    head.pop("timing")
    head["partitions"] = sorted(rows, key=lambda r: (r[0], r[1]))
    head["transitions"] = _canonical_transitions(head["transitions"])
    head["violations"] = sorted(head["violations"], key=lambda v: (v["topicId"], v["partitionId"], v["kind"]))
    head["brokers"] = sorted(head.get("brokers", []), key=lambda b: json.dumps(b, sort_keys=True))
    return head


def _run(
    engine: str,
    routed: dict[int, list[bucket_module.Row]],
    tmp: str,
    cache_mode: str,
    rows_files: bool = False,
    batch_rows: int = 37,
) -> list[dict[str, Any]]:
    """Every bucket through batches of ``batch_rows`` rows; restarts (cache gone) after every other batch, or no cache;
    ``rows_files``: the store's lists go to rows files (the job's way), else inline in the output."""
    rows_dir = os.path.join(tmp, f"{engine}-rows") if rows_files else None
    settings = bucket_module.StateSettings(
        BUCKETS,
        1,
        cache_mode != "off",
        "snapshot",
        os.path.join(tmp, engine),
        delta_max_records=90,
        engine=engine,
        rows_dir=rows_dir,
    )
    out = []
    for b in range(BUCKETS):
        rows = routed[b]
        row = None
        cache: dict[int, Any] = {}
        for n, i in enumerate(range(0, len(rows), batch_rows)):
            if n % 2 == 1:
                cache = {}
            batch = rows[i : i + batch_rows]
            token, blob, bodies = bucket_module.run_bucket(b, settings, row, iter(batch), len(batch), cache)
            row = (token, blob)
            out.append(_comparable(bodies, rows_dir))
    return out


@pytest.mark.parametrize(
    ("routing", "cache_mode", "rows_files"),
    [("python", "off", False), ("python", "restarts", False), ("jvm", "off", True), ("jvm", "restarts", True)],
)
def test_columnar_bucket_payloads_equal_the_object_engine(
    tmp_path, routing: str, cache_mode: str, rows_files: bool
) -> None:
    """Field by field; with rows files, the columnar engine's Arrow rows and transitions as the store writer reads
    them back against the object engine's lists inline."""
    lines = _lines()
    routed = (_python_routed if routing == "python" else _jvm_routed)(lines)
    objects = _run("objects", routed, str(tmp_path), cache_mode)
    columnar = _run("columnar", routed, str(tmp_path), cache_mode, rows_files)
    assert len(objects) == len(columnar) > 3 * BUCKETS
    for n, (ref, fast) in enumerate(zip(objects, columnar, strict=True)):
        for part in ref.keys() | fast.keys():
            assert ref.get(part) == fast.get(part), f"payload {n} ({ref['bucket']}): {part} differs"
    # not vacuous: the inputs exercise what is compared
    assert sum(len(p["transitions"]) for p in objects) > 50
    assert sum(len(p["violations"]) for p in objects) > 0
    reasons = {q["reason"] for p in objects for q in p["quarantined"]}
    assert reasons >= {"invalid_json", "unknown_topic", "invalid_field"}
    assert any(p["counts"]["duplicates"] for p in objects)
    assert any(os.listdir(tmp_path / "columnar")), "delta_max_records=90 must have forced Arrow snapshots"
    assert not rows_files or len(os.listdir(tmp_path / "columnar-rows")) > BUCKETS, "the lists went inline"


@pytest.mark.parametrize("sources", [1, 3])
@pytest.mark.parametrize("cache_mode", ["off", "restarts"])
@pytest.mark.parametrize("min_block", [4, 32])
def test_jvm_placed_lines_as_columns_equal_the_object_engine(
    tmp_path, monkeypatch: pytest.MonkeyPatch, cache_mode: str, min_block: int, sources: int
) -> None:
    """The lines the JVM placed in a bucket go to the engine as blocks of columns (`columnar_bucket.line_blocks`,
    the journal keeps them raw and a restart replays them as blocks again): the payloads equal the object
    engine's, field by field, with the scenario's faults, duplicates and re-sent range among the blocks."""
    from elrwatch.streaming import columnar_bucket

    made: list[int] = []
    real = columnar_bucket.line_blocks

    def counted(*args: Any) -> Any:
        out = real(*args)
        made.extend(hi - lo for lo, hi, block in out if block is not None)
        return out

    monkeypatch.setattr(columnar_bucket, "MIN_BLOCK", min_block)
    if min_block == 4:  # long stretches cut into parts too
        monkeypatch.setattr(columnar_bucket, "MAX_STRETCH", 40)
    monkeypatch.setattr(columnar_bucket, "line_blocks", counted)
    lines = _lines()
    routed = _jvm_routed(lines, sources)
    objects = _run("objects", routed, str(tmp_path), cache_mode, batch_rows=150)
    columnar = _run("columnar", routed, str(tmp_path), cache_mode, True, batch_rows=150)
    assert len(objects) == len(columnar) > BUCKETS
    for n, (ref, fast) in enumerate(zip(objects, columnar, strict=True)):
        for part in ref.keys() | fast.keys():
            assert ref.get(part) == fast.get(part), f"payload {n} ({ref['bucket']}): {part} differs"
    if min_block == 4:  # most of the partition records went as columns (stretches between broadcast lines are short)
        assert sum(made) > 0.5 * len(lines), made
    assert any(p["counts"]["duplicates"] for p in objects)


def test_the_columnar_engine_refuses_blob_mode_and_another_engine_s_checkpoint(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"^--state-engine columnar needs --state-mode snapshot"):
        check_engine("columnar", "blob")
    with pytest.raises(ValueError, match=r"^--state-engine must be one of objects, columnar, got 'x'$"):
        JobConfig(checkpoint=str(tmp_path / "ck"), state_engine="x").state_settings()
    lines = _lines()[:60]
    rows = _python_routed(lines)[0]
    settings = {
        e: bucket_module.StateSettings(1, 1, False, "snapshot", str(tmp_path), engine=e)
        for e in ("objects", "columnar")
    }
    token, blob, _ = bucket_module.run_bucket(0, settings["objects"], None, iter(rows), len(rows), {})
    with pytest.raises(SnapshotError, match=r"^bucket 0: the checkpoint's state was written by --state-engine objects"):
        bucket_module.run_bucket(0, settings["columnar"], (token, blob), iter(()), 0, {})
    token, blob, _ = bucket_module.run_bucket(0, settings["columnar"], None, iter(rows), len(rows), {})
    with pytest.raises(SnapshotError, match=r"^bucket 0: the checkpoint's state was written by --state-engine col"):
        bucket_module.run_bucket(0, settings["objects"], (token, blob), iter(()), 0, {})


def test_a_missing_or_corrupt_columnar_snapshot_is_a_one_line_error(tmp_path) -> None:
    rows = _python_routed(_lines()[:80])[0]
    settings = bucket_module.StateSettings(
        1, 1, False, "snapshot", str(tmp_path), delta_max_records=5, engine="columnar"
    )
    row = bucket_module.run_bucket(0, settings, None, iter(rows), len(rows), {})[:2]
    (name,) = os.listdir(tmp_path)
    path = tmp_path / name
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(SnapshotError) as err:
        bucket_module.run_bucket(0, settings, row, iter(()), 0, {})
    assert "\n" not in str(err.value) and str(err.value).startswith("bucket 0: ") and name in str(err.value)
    os.remove(path)
    with pytest.raises(SnapshotError) as err:
        bucket_module.run_bucket(0, settings, row, iter(()), 0, {})
    assert str(err.value).startswith(f"bucket 0: snapshot {path} referenced by the checkpoint is missing")
