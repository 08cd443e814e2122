"""The state stage (`bucket.run_bucket`: a bucket's ClusterState with the columnar store) against the object store,
the specification, at the bucket level: the same routed rows, batch after batch, with restarts from the state row
in between (snapshot mode, blob mode, and the job switching between them), give the payloads that buckets holding
the object store, fed the same rows record by record, give."""

from __future__ import annotations

import json
import os
import pickle
import zlib
from typing import Any

import orjson
import pytest
from columnar_output_check import reference_rows, reference_topics
from streaming_batches import routed_frame

from elrwatch.state import report
from elrwatch.state.cluster import ClusterState
from elrwatch.state.eventgen import scenario
from elrwatch.state.gauges import PipelineCounts, encode_gauges, partition_gauges
from elrwatch.state.outcome import Outcome
from elrwatch.state.records import Record, parse_line
from elrwatch.state.routing import ALL_BUCKETS, targets
from elrwatch.streaming import bucket as bucket_module
from elrwatch.streaming import bucket_input, route
from elrwatch.streaming import payload as payload_module
from elrwatch.streaming.bucket_input import Row
from elrwatch.streaming.config import JobConfig
from elrwatch.streaming.snapshots import BLOB_TAG, ROW_TAG, SnapshotError

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


def _python_routed(lines: list[str]) -> dict[int, list[Row]]:
    routed = routed_frame(lines, BUCKETS)
    return {b: list(bucket_module.ordered_rows(routed[routed.bucket == b])) for b in range(BUCKETS)}


def _jvm_routed(lines: list[str], sources: int = 1) -> dict[int, list[Row]]:
    """The rows `route.route_in_jvm` gives: raw lines placed in their bucket, or sent to every bucket. With
    ``sources`` event-topic partitions, a line goes to the one its record's partition hashes to (the producer's
    keys), with that partition's next offset, and the rows are in metadata-offset order (`bucket.ordered_rows`)."""
    out: dict[int, list[Row]] = {b: [] for b in range(BUCKETS)}
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


def _reference_payload(
    bucket: int, cluster: ClusterState, counts: PipelineCounts, emitted: dict[str, int], quarantined: list[Any]
) -> dict[str, Any]:
    """What a bucket emits after a batch, built from an object-store state as the specification says: the changed
    partitions' rows and violations, removals, transitions, the topic documents whose owned partition count
    changed (or that changed), gauges and counts; bucket 0 adds the shared parts."""
    changes = cluster.drain_changes()
    violations = [
        report.violation_doc(topic.name, topic.topic_id, partition.partition_id, v)
        for topic, partition in changes.partitions
        for v in cluster.partition_violations(topic.topic_id, partition.partition_id)
    ]
    payload: dict[str, Any] = {
        "bucket": bucket,
        "partitions": reference_rows(cluster, changes),
        "removed": [[tid, pid] for tid, pid, _name in changes.removed],
        "transitions": [t.to_dict() for t in changes.transitions],
        "quarantined": quarantined,
        "violations": violations,
        "topics": reference_topics(cluster, changes, emitted),
        "removedTopics": [tid for tid, _name in changes.removed_topics],
        "gauges": encode_gauges(partition_gauges(cluster)),
        "counts": counts.to_payload(),
        "timing": {},
    }
    if bucket == 0:
        payload.update(payload_module.shared_parts(cluster, changes.brokers))
    return payload


def _reference(routed: dict[int, list[Row]], batch_rows: int = 37) -> list[dict[str, Any]]:
    """The payloads of buckets holding the object store, fed the same batches in memory, each row parsed on its own
    (`bucket_input._records`) and each record applied and counted one at a time."""
    out = []
    for b in range(BUCKETS):
        cluster = ClusterState(default_min_isr=1, bucket=(b, BUCKETS), store="objects")
        counts = PipelineCounts()
        emitted: dict[str, int] = {}
        rows = routed[b]
        for i in range(0, len(rows), batch_rows):
            quarantined: list[Any] = []
            for _rec, record, reports in bucket_input._records(
                b, BUCKETS, rows[i : i + batch_rows], counts, quarantined
            ):
                outcome = cluster.apply(record)
                if not reports:
                    continue
                counts.events_by_type[record.type] += 1
                if record.timestamp_ms is not None and (
                    counts.last_event_ms is None or record.timestamp_ms > counts.last_event_ms
                ):
                    counts.last_event_ms = record.timestamp_ms
                if outcome is Outcome.APPLIED:
                    counts.applied += 1
                elif outcome is Outcome.DUPLICATE:
                    counts.duplicates += 1
                elif outcome is Outcome.QUARANTINED and cluster.last_error is not None:
                    error = cluster.last_error
                    if not error.raw:
                        error.raw = orjson.dumps(record.envelope()).decode()
                    counts.quarantined_by_reason[error.reason] += 1
                    quarantined.append(error.to_dict())
            payload = _reference_payload(b, cluster, counts, emitted, quarantined)
            out.append(_comparable(payload_module.encode_payload(payload)))
    return out


def _mode_of(state_mode: str, n: int) -> str:
    """The state mode of batch ``n``: ``switch`` alternates snapshot and blob mode every other batch (so that the
    batches that load their state from the row, the odd ones, each read a row the other mode wrote)."""
    if state_mode != "switch":
        return state_mode
    return ("snapshot", "blob")[((n + 1) // 2) % 2]


def _run(
    routed: dict[int, list[Row]],
    tmp: str,
    cache_mode: str,
    rows_files: bool = False,
    batch_rows: int = 37,
    state_mode: str = "snapshot",
) -> list[dict[str, Any]]:
    """Every bucket through `run_bucket` in batches of ``batch_rows`` rows; restarts (cache gone) after every other
    batch, or no cache; ``rows_files``: the store's lists go to rows files (the job's way), else inline in the
    output; ``state_mode``: snapshot, blob, or switch (`_mode_of`)."""
    rows_dir = os.path.join(tmp, "rows") if rows_files else None
    out = []
    for b in range(BUCKETS):
        rows = routed[b]
        row = None
        cache: dict[int, Any] = {}
        for n, i in enumerate(range(0, len(rows), batch_rows)):
            if n % 2 == 1:
                cache = {}
            settings = bucket_module.StateSettings(
                BUCKETS,
                1,
                cache_mode != "off",
                _mode_of(state_mode, n),
                os.path.join(tmp, "snapshots"),
                delta_max_records=90,
                rows_dir=rows_dir,
            )
            batch = rows[i : i + batch_rows]
            token, blob, bodies = bucket_module.run_bucket(b, settings, row, iter(batch), len(batch), cache)
            assert blob[:1] == (BLOB_TAG if settings.state_mode == "blob" else ROW_TAG)
            row = (token, blob)
            out.append(_comparable(bodies, rows_dir))
    return out


def _assert_payloads_equal(reference: list[dict[str, Any]], columnar: list[dict[str, Any]]) -> None:
    assert len(reference) == len(columnar)
    for n, (ref, fast) in enumerate(zip(reference, columnar, strict=True)):
        for part in ref.keys() | fast.keys():
            assert ref.get(part) == fast.get(part), f"payload {n} ({ref['bucket']}): {part} differs"


@pytest.mark.parametrize(
    ("routing", "cache_mode", "rows_files", "state_mode"),
    [
        ("python", "off", False, "snapshot"),
        ("python", "restarts", False, "snapshot"),
        ("jvm", "off", True, "snapshot"),
        ("jvm", "restarts", True, "snapshot"),
        ("python", "restarts", False, "blob"),
        ("jvm", "off", True, "blob"),
        ("python", "off", False, "switch"),
        ("jvm", "restarts", True, "switch"),
    ],
)
def test_bucket_payloads_equal_the_object_store_s(
    tmp_path, routing: str, cache_mode: str, rows_files: bool, state_mode: str
) -> None:
    """Field by field; with rows files, the Arrow rows and transitions as the store writer reads them back against
    the reference's lists inline."""
    lines = _lines()
    routed = (_python_routed if routing == "python" else _jvm_routed)(lines)
    reference = _reference(routed)
    columnar = _run(routed, str(tmp_path), cache_mode, rows_files, state_mode=state_mode)
    assert len(reference) > 3 * BUCKETS
    _assert_payloads_equal(reference, columnar)
    # not vacuous: the inputs exercise what is compared
    assert sum(len(p["transitions"]) for p in reference) > 50
    assert sum(len(p["violations"]) for p in reference) > 0
    reasons = {q["reason"] for q in (q for p in reference for q in p["quarantined"])}
    assert reasons >= {"invalid_json", "unknown_topic", "invalid_field"}
    assert any(p["counts"]["duplicates"] for p in reference)
    snapshots = os.listdir(tmp_path / "snapshots") if (tmp_path / "snapshots").exists() else []
    if state_mode == "blob":
        assert not snapshots, "blob mode writes no snapshot file"
    else:
        assert snapshots, "delta_max_records=90 (and a blob row read in snapshot mode) must have written snapshots"
    assert not rows_files or len(os.listdir(tmp_path / "rows")) > BUCKETS, "the lists went inline"


@pytest.mark.parametrize("sources", [1, 3])
@pytest.mark.parametrize("cache_mode", ["off", "restarts"])
@pytest.mark.parametrize("min_block", [4, 32])
def test_jvm_placed_lines_as_columns_equal_the_object_store_s(
    tmp_path, monkeypatch: pytest.MonkeyPatch, cache_mode: str, min_block: int, sources: int
) -> None:
    """The lines the JVM placed in a bucket go to the state as blocks of columns (`bucket_input.line_blocks`, the
    journal keeps them raw and a restart replays them as blocks again): the payloads equal the object store's,
    field by field, with the scenario's faults, duplicates and re-sent range among the blocks."""
    made: list[int] = []
    real = bucket_input.line_blocks

    def counted(*args: Any) -> Any:
        out = real(*args)
        made.extend(hi - lo for lo, hi, block in out if block is not None)
        return out

    monkeypatch.setattr(bucket_input, "MIN_BLOCK", min_block)
    if min_block == 4:  # long stretches cut into parts too
        monkeypatch.setattr(bucket_input, "MAX_STRETCH", 40)
    monkeypatch.setattr(bucket_input, "line_blocks", counted)
    lines = _lines()
    routed = _jvm_routed(lines, sources)
    reference = _reference(routed, batch_rows=150)
    columnar = _run(routed, str(tmp_path), cache_mode, True, batch_rows=150)
    assert len(reference) > BUCKETS
    _assert_payloads_equal(reference, columnar)
    if min_block == 4:  # most of the partition records went as columns (stretches between broadcast lines are short)
        assert sum(made) > 0.5 * len(lines), made
    assert any(p["counts"]["duplicates"] for p in reference)


@pytest.mark.parametrize(
    "older",
    [
        b"S" + pickle.dumps({"run": "r", "snapshot": None, "delta": [], "counts": None}),  # its snapshot mode
        zlib.compress(pickle.dumps(("state", "counts", {})), 1),  # its blob mode
    ],
)
def test_a_state_row_of_the_older_object_engine_is_a_one_line_error(tmp_path, older: bytes) -> None:
    for mode in ("snapshot", "blob"):
        settings = bucket_module.StateSettings(1, 1, False, mode, str(tmp_path))
        with pytest.raises(SnapshotError) as err:
            bucket_module.run_bucket(0, settings, ("token", older), iter(()), 0, {})
        message = str(err.value)
        assert "\n" not in message and message.startswith("bucket 0: the checkpoint's state was written by an older")
        assert "start the job on a new checkpoint" in message


def test_the_engine_is_no_setting_of_the_job() -> None:
    """One engine: neither the job's config nor the state stage's settings name one."""
    assert "state_engine" not in JobConfig.__dataclass_fields__
    assert "engine" not in bucket_module.StateSettings.__dataclass_fields__


def test_blob_mode_needs_no_state_directory(tmp_path) -> None:
    """The whole state in the row: no snapshot file, and a restart from the row alone gives the same state."""
    rows = _python_routed(_lines()[:120])[0]
    settings = bucket_module.StateSettings(1, 1, False, "blob", None)
    token, blob, _ = bucket_module.run_bucket(0, settings, None, iter(rows[:60]), 60, {})
    assert blob[:1] == BLOB_TAG
    token, blob, bodies = bucket_module.run_bucket(0, settings, (token, blob), iter(rows[60:]), len(rows) - 60, {})
    (head,), _ = payload_module.decode_payloads(bodies)
    assert head["timing"]["cache"] == "miss" and head["counts"]["applied"] > 0
    assert list(tmp_path.iterdir()) == []
    snapshot_settings = bucket_module.StateSettings(1, 1, False, "snapshot", None)
    with pytest.raises(ValueError, match="snapshot state mode needs a state directory"):
        bucket_module.make_state_function(snapshot_settings)


def test_a_missing_or_corrupt_columnar_snapshot_is_a_one_line_error(tmp_path) -> None:
    rows = _python_routed(_lines()[:80])[0]
    settings = bucket_module.StateSettings(1, 1, False, "snapshot", str(tmp_path), delta_max_records=5)
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


def test_a_corrupt_blob_row_is_a_one_line_error(tmp_path) -> None:
    rows = _python_routed(_lines()[:80])[0]
    settings = bucket_module.StateSettings(1, 1, False, "blob", None)
    token, blob, _ = bucket_module.run_bucket(0, settings, None, iter(rows), len(rows), {})
    data, counts, emitted = pickle.loads(zlib.decompress(blob[1:]))
    torn = BLOB_TAG + zlib.compress(pickle.dumps((data[: len(data) // 2], counts, emitted)), 1)
    with pytest.raises(SnapshotError) as err:
        bucket_module.run_bucket(0, settings, (token, torn), iter(()), 0, {})
    message = str(err.value)
    assert "\n" not in message and message.startswith("bucket 0: ") and "state row" in message, message
