"""What Kafka 4.4's DumpLogSegments prints today, read as Kafka prints it (fixtures: tests/data/real-kafka/formats/).

``--skip-record-metadata`` lines, snapshot and bootstrap headers, control records, undecodable records, a snapshot
followed by the segments left after it, a dump that starts past offset 0 (partial), and an offset whose content
changed (a diverged log: conflict).
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from core_events import TOPIC_ID, base_cluster, change, dump_line, envelope, partition, topic
from streaming_batches import routed_frame

from elrwatch.state.cluster import STORES, ClusterState
from elrwatch.state.image.positions import RECENT_OFFSETS
from elrwatch.state.outcome import Outcome
from elrwatch.state.records import (
    QUARANTINE_REASONS,
    DumpReader,
    Ignored,
    Record,
    RecordError,
    Skipped,
    parse_line,
)
from elrwatch.state.replay import PARTIAL_NAME_LIMIT, Replayer, replay_file, replay_lines

FORMATS = Path(__file__).parent / "data" / "real-kafka" / "formats"
OFFSETS = json.loads((FORMATS / "offsets.json").read_text())
SNAPSHOT_END = int(OFFSETS["snapshotFiles"][-1].split("-")[0])
FIRST_SEGMENT = int(OFFSETS["segmentFiles"][0].split(".")[0])
#: Where tail-segment.dump (the segments but the first) starts.
TAIL_START = next(
    int(text.split()[-1])
    for text in (FORMATS / "tail-segment.dump").read_text().splitlines()
    if text.startswith("Log starting offset:")
)


def fixture(name: str) -> str:
    return str(FORMATS / name)


def read_all(name: str) -> list[Record | RecordError | Ignored | Skipped]:
    reader = DumpReader()
    return [reader.parse(text, name, seq) for seq, text in enumerate(Path(fixture(name)).read_text().splitlines(), 1)]


def records_of(name: str) -> list[Record]:
    return [parsed for parsed in read_all(name) if isinstance(parsed, Record)]


def printed_offsets(name: str) -> list[int]:
    """The ``| offset: N`` of every record line with a payload, as Kafka printed them."""
    return [
        int(text.split()[2])
        for text in Path(fixture(name)).read_text().splitlines()
        if text.startswith("| offset:") and "payload:" in text
    ]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "elrwatch.cli", "replay", "--compact", "--no-advice", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def without_positions(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in p.items() if k != "lastPosition"} for p in document["partitions"]]


# --- 1. --skip-record-metadata ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '| payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":"a","topicId":"%s"}}',
        ' payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":"a","topicId":"%s"}}',
    ],
)
def test_a_payload_line_without_metadata_is_a_record_without_offset_on_its_own(text: str) -> None:
    parsed = parse_line(text % TOPIC_ID, "f", 1)
    assert isinstance(parsed, Record) and parsed.type == "TOPIC_RECORD" and parsed.offset is None


def test_skip_record_metadata_lines_take_their_offsets_from_the_batch_header() -> None:
    full = records_of("segments.dump")
    skipped = records_of("segments-skip-metadata.dump")
    assert [r.offset for r in full] == printed_offsets("segments.dump")
    assert [(r.offset, r.type, r.data) for r in skipped] == [(r.offset, r.type, r.data) for r in full]
    assert all(r.timestamp_ms is None for r in skipped)


def test_a_payload_line_past_the_batch_last_offset_gets_no_offset() -> None:
    reader = DumpReader()
    header = "baseOffset: 40 lastOffset: 41 count: 2 baseSequence: -1 lastSequence: -1 isControl: false"
    row = f'| payload: {{"type":"TOPIC_RECORD","version":0,"data":{{"name":"a","topicId":"{TOPIC_ID}"}}}}'
    parsed = [reader.parse(text, "f", n) for n, text in enumerate([header, row, row, row], 1)]
    assert [getattr(p, "offset", "header") for p in parsed] == ["header", 40, 41, None]


def test_the_skip_metadata_forms_replay_to_the_same_state() -> None:
    full = replay_file([fixture("snapshot.dump"), fixture("segments.dump")]).document(advice=False)
    skipped = replay_file([fixture("snapshot-skip-metadata.dump"), fixture("segments-skip-metadata.dump")]).document(
        advice=False
    )
    no_times = lambda doc: [  # noqa: E731 - without metadata, Kafka prints no CreateTime
        {k: v for k, v in p.items() if k not in ("statusSinceMs", "lastTimestampMs")} for p in without_positions(doc)
    ]
    assert no_times(skipped) == no_times(full)
    assert skipped["brokers"] == full["brokers"] and skipped["quarantined"]["count"] == 0


# --- 2. headers and control records -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "KRaft bootstrap snapshot",
        f"Snapshot end offset: {SNAPSHOT_END}, epoch: 1",
        'SnapshotHeader {"version":0,"lastContainedLogTimestamp":1795599944327}',
        'SnapshotFooter {"version":0}',
        'KRaftVersion {"version":0,"kRaftVersion":1}',
        'KRaftVoters {"version":0,"voters":[]}',
        'LeaderChange: {"version":0,"leaderId":0,"voters":[{"voterId":0}],"grantingVoters":[{"voterId":0}]}',
        '| offset: 16 CreateTime: 1 keySize: 4 valueSize: 3 sequence: -1 headerKeys: [] SnapshotFooter {"version":0}',
    ],
)
def test_snapshot_headers_and_control_records_are_ignored(text: str) -> None:
    assert isinstance(parse_line(text, "f", 1), Ignored)


@pytest.mark.parametrize("name", ["snapshot.dump", "snapshot-skip-metadata.dump"])
def test_a_snapshot_dump_is_read_without_errors_and_its_records_carry_the_snapshot_end_offset(name: str) -> None:
    parsed = read_all(name)
    assert not [p for p in parsed if isinstance(p, RecordError)]
    records = [p for p in parsed if isinstance(p, Record | Skipped)]
    assert records and {r.offset for r in records} == {SNAPSHOT_END - 1}
    lines = Path(fixture(name)).read_text().splitlines()
    assert sum(isinstance(p, Ignored) for p in parsed) == len(lines) - len(records)


def test_bootstrap_snapshot_records_get_no_offset() -> None:
    reader = DumpReader()
    lines = [
        "KRaft bootstrap snapshot",
        "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 isControl: false",
        "| offset: 0 CreateTime: 1 keySize: -1 valueSize: 23 sequence: -1 headerKeys: [] payload: "
        '{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":33}}',
    ]
    parsed = [reader.parse(text, "f", n) for n, text in enumerate(lines, 1)]
    assert isinstance(parsed[2], Record) and parsed[2].offset is None and reader.gap is None


# --- 3. records Kafka could not decode ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["undecodable.dump", "undecodable-skip-metadata.dump"])
def test_kafkas_decode_failures_are_quarantined_as_undecodable_records(name: str) -> None:
    document = replay_file(fixture(name)).document(advice=False)
    assert "undecodable_record" in QUARANTINE_REASONS
    assert document["quarantined"]["byReason"] == {"undecodable_record": 1}
    (error,) = document["quarantined"]["records"]
    assert error["offset"] == OFFSETS["corruptedRecordOffset"]
    assert "Unknown metadata id" in error["message"] and "Error at" in error["raw"]


# --- 5. a snapshot, then the segments left after it -------------------------------------------------------------------


def test_snapshot_then_segments_applies_the_segments_from_the_snapshot_end_offset() -> None:
    proc = cli(fixture("snapshot.dump"), fixture("segments.dump"))
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    segment_offsets = printed_offsets("segments.dump")
    covered = [o for o in segment_offsets if o < SNAPSHOT_END]
    assert FIRST_SEGMENT < SNAPSHOT_END and covered  # the fixture has covered records
    snapshot = document["snapshot"]
    assert (snapshot["endOffset"], snapshot["coveredLogRecords"]) == (SNAPSHOT_END, len(covered))
    assert snapshot["records"] == len(records_of("snapshot.dump"))  # every record a Record (not skipped) applied
    assert "partial" not in document and proc.stderr == ""
    assert document["quarantined"]["count"] == 0
    assert document["counts"]["duplicates"] == 0
    # every partition and broker the segments change was known from the snapshot; the last segment's changes apply
    last_offsets = {p["lastOffset"] for p in document["partitions"]}
    assert last_offsets <= {SNAPSHOT_END - 1, *segment_offsets}
    assert max(last_offsets) == max(segment_offsets)
    assert {b["brokerId"]: b["state"] for b in document["brokers"]} == {1: "active", 2: "fenced"}
    assert document["cluster"]["elrEnabled"] is True


def test_snapshot_and_segments_in_one_stream_are_the_same_as_two_files() -> None:
    text = Path(fixture("snapshot.dump")).read_text() + Path(fixture("segments.dump")).read_text()
    one = replay_lines(text.splitlines(), "stdin").document(advice=False)
    two = replay_file([fixture("snapshot.dump"), fixture("segments.dump")]).document(advice=False)
    assert without_positions(one) == without_positions(two) and one["snapshot"] == two["snapshot"]


def test_a_record_below_the_snapshot_end_is_covered_not_applied() -> None:
    cluster = ClusterState()
    replayer = Replayer(cluster=cluster)
    replayer.feed_lines(Path(fixture("snapshot.dump")).read_text().splitlines(), "snapshot")
    before = replayer.document(advice=False)["partitions"]
    stale = envelope(*change(topic_id=next(iter(cluster.topics)), partition_id=0, isr=[2], leader=2))
    assert replayer.feed_line(f"Log starting offset: {FIRST_SEGMENT}", "segments", 1) is None
    assert replayer.feed_line(dump_line(stale, offset=SNAPSHOT_END - 1), "segments", 2) is Outcome.COVERED
    assert replayer.document(advice=False)["partitions"] == before
    assert replayer.covered_by_snapshot == 1
    assert cluster.snapshot_end_offset == SNAPSHOT_END
    # the snapshot end offset is part of the persisted state
    assert ClusterState.from_bytes(cluster.to_bytes()).snapshot_end_offset == SNAPSHOT_END


# --- 6. an input that starts past offset 0 without a snapshot ----------------------------------------------------------


def test_a_dump_starting_past_zero_is_partial_and_names_what_it_never_saw_created() -> None:
    proc = cli(fixture("tail-segment.dump"))
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    partial = document["partial"]
    assert partial["logStartOffset"] == TAIL_START
    created = {r.data["topicId"] for r in records_of("tail-segment.dump") if r.type == "TOPIC_RECORD"}
    changed = {
        (r.data["topicId"], r.data["partitionId"])
        for r in records_of("tail-segment.dump")
        if r.type == "PARTITION_CHANGE_RECORD" and r.data["topicId"] not in created
    }
    assert changed and {(p["topicId"], p["partitionId"]) for p in partial["partitions"]} == changed
    # broker 2 is fenced in the segment, broker 1 holds the replica of the partition it creates: both registered before
    assert partial["brokers"] == [1, 2]
    assert partial["unresolvedRecords"] == len(changed) + 1
    assert document["quarantined"]["count"] == 0  # expected on such an input: not errors
    assert "starts at metadata offset" in proc.stderr and "partial" in proc.stderr
    # what the segment created itself is applied
    assert {p["topicId"] for p in document["partitions"]} == created


def test_a_partial_input_still_quarantines_bad_records() -> None:
    lines = [*Path(fixture("tail-segment.dump")).read_text().splitlines(), "| payload: {oops"]
    document = replay_lines(lines).document(advice=False)
    assert "partial" in document and document["quarantined"]["byReason"] == {"invalid_json": 1}


def test_a_partial_input_names_at_most_the_limit() -> None:
    header = "baseOffset: 5 lastOffset: 5 count: 1 baseSequence: -1 lastSequence: -1 isControl: false"
    lines = ["Log starting offset: 5", header]
    lines += [
        dump_line(envelope(*change(partition_id=n, isr=[1])), offset=5 + n) for n in range(PARTIAL_NAME_LIMIT + 5)
    ]
    partial = replay_lines(lines).document(advice=False)["partial"]
    assert len(partial["partitions"]) == PARTIAL_NAME_LIMIT and partial["truncated"] is True
    assert partial["unresolvedRecords"] == PARTIAL_NAME_LIMIT + 5


def test_a_snapshot_alone_is_not_partial() -> None:
    document = replay_file(fixture("snapshot.dump")).document(advice=False)
    assert "partial" not in document and document["quarantined"]["count"] == 0


def segments_past(offset: int) -> tuple[int, list[str]]:
    """The segments of segments.dump that start past ``offset``: (their start, their lines)."""
    lines = Path(fixture("segments.dump")).read_text().splitlines()
    for n, text in enumerate(lines):
        if text.startswith("Log starting offset:") and int(text.split()[-1]) > offset:
            return int(text.split()[-1]), lines[n - 1 :]  # from its "Dumping …" line
    raise AssertionError(f"the fixtures need a segment starting past {offset} (make_fixtures.py)")


def test_a_gap_between_the_snapshot_and_the_log_is_partial(tmp_path: Path) -> None:
    start, lines = segments_past(SNAPSHOT_END)
    (tmp_path / "later.dump").write_text("\n".join(lines) + "\n")
    proc = cli(fixture("snapshot.dump"), str(tmp_path / "later.dump"))
    document = json.loads(proc.stdout)
    partial = document["partial"]
    assert (partial["missingFromOffset"], partial["logStartOffset"]) == (SNAPSHOT_END, start)
    assert f"offsets {SNAPSHOT_END}-{start - 1} are missing" in proc.stderr
    assert document["quarantined"]["count"] == 0


# --- 4. conflicts: an applied offset with other content ---------------------------------------------------------------


def snapshot_and_segments() -> list[str]:
    return [
        *Path(fixture("snapshot.dump")).read_text().splitlines(),
        *Path(fixture("segments.dump")).read_text().splitlines(),
    ]


def _diverged_line() -> tuple[str, str, int]:
    """The last PARTITION_CHANGE_RECORD line of the real segments, and a copy with another ISR (a diverged log)."""
    original = [t for t in Path(fixture("segments.dump")).read_text().splitlines() if "PARTITION_CHANGE_RECORD" in t][
        -1
    ]
    offset = int(original.split()[2])
    assert '"isr":[1]' in original
    return original, original.replace('"isr":[1]', '"isr":[1,2]'), offset


def test_an_applied_offset_with_other_content_is_a_conflict_with_both_versions() -> None:
    _original, diverged, offset = _diverged_line()
    base = snapshot_and_segments()
    clean = replay_lines(base).document(advice=False)
    document = replay_lines([*base, diverged]).document(advice=False)
    assert document["quarantined"]["byReason"] == {"conflict": 1}
    (error,) = document["quarantined"]["records"]
    assert (error["offset"], error["field"]) == (offset, "offset") and "diverged" in error["message"]
    applied, now = json.loads(error["applied"]), json.loads(error["raw"])
    assert applied["data"]["isr"] == [1] and now["data"]["isr"] == [1, 2]
    assert applied["type"] == now["type"] == "PARTITION_CHANGE_RECORD" and applied["offset"] == offset
    assert without_positions(document) == without_positions(clean)  # not applied


def test_the_same_record_at_an_applied_offset_stays_a_duplicate() -> None:
    original, _diverged, _offset = _diverged_line()
    base = snapshot_and_segments()
    document = replay_lines([*base, original]).document(advice=False)
    assert document["quarantined"]["count"] == 0 and document["counts"]["duplicates"] == 1


@pytest.mark.parametrize("persisted", ["pickle", "columnar snapshot"])
def test_a_conflict_is_found_after_the_state_is_persisted_and_restored(persisted: str) -> None:
    from elrwatch.state.partitions.columnar import snapshot as columnar_snapshot

    _original, diverged, _offset = _diverged_line()
    replayer = replay_file([fixture("snapshot.dump"), fixture("segments.dump")])
    cluster = replayer.cluster
    if persisted == "pickle":
        cluster = ClusterState.from_bytes(cluster.to_bytes())
    else:  # as the streaming job keeps a bucket: its Arrow snapshot, taken between batches
        cluster.partitions.forget_changes()  # type: ignore[attr-defined]
        cluster = columnar_snapshot.from_bytes(columnar_snapshot.to_bytes(cluster))
    restored = Replayer(cluster=cluster)
    assert restored.feed_line(diverged, "again", 1) is Outcome.QUARANTINED
    assert restored.counts.quarantined_by_reason == {"conflict": 1}


def validated(rec: tuple[str, int, dict[str, Any]], source: str, seq: int, offset: int) -> Record:
    parsed = parse_line(json.dumps(envelope(*rec, offset=offset)), source, seq)
    assert isinstance(parsed, Record)
    return parsed


@pytest.mark.parametrize("store", STORES)
def test_the_conflict_window_is_bounded(store: str) -> None:
    cluster = ClusterState(store=store)
    first = 1000
    feed = [*base_cluster((0, 1, 2)), topic("foo"), partition(replicas=(0, 1, 2), isr=(0, 1, 2), leader=0)]
    for n, rec in enumerate(feed):
        assert cluster.apply(validated(rec, "s", n + 1, first + n)) is Outcome.APPLIED
    seq = len(feed) + 1
    for n in range(RECENT_OFFSETS + 10):
        isr = [0, 1, 2] if n % 2 else [0, 1]
        assert cluster.apply(validated(change(isr=isr), "s", seq + n, first + len(feed) + n)) is Outcome.APPLIED
    positions = cluster.image.positions
    assert len(positions.recent_offsets) == len(positions.recent_records) == RECENT_OFFSETS
    # an offset that left the window: the partition's last offset alone decides (a duplicate, not compared)
    assert cluster.apply(validated(change(isr=[2]), "t", 1, first + len(feed))) is Outcome.DUPLICATE
    recent = validated(change(isr=[2]), "t", 2, first + len(feed) + RECENT_OFFSETS + 9)
    assert cluster.apply(recent) is Outcome.QUARANTINED and cluster.last_error.reason == "conflict"


def test_snapshot_records_sharing_one_offset_are_not_conflicts() -> None:
    replayer = replay_file(fixture("snapshot.dump"))
    assert replayer.quarantined == [] and replayer.snapshot_records > 1


def test_a_conflict_reaches_the_streaming_quarantine_counts() -> None:
    from elrwatch.state.gauges import PipelineCounts
    from elrwatch.streaming.bucket import ordered_rows, process_bucket
    from elrwatch.streaming.snapshots import BucketState

    tail = Path(fixture("tail-segment.dump")).read_text().splitlines()
    created = [t for t in tail if "PARTITION_RECORD" in t][-1]  # applies: its topic is created in the segment
    lines = [*tail, created, created.replace('"leaderEpoch":0', '"leaderEpoch":1')]
    routed = routed_frame(lines, topic="tail-segment.dump", partition=-1, first_offset=1)
    state = BucketState(ClusterState(bucket=(0, 1)), PipelineCounts(), {})
    payload = process_bucket(0, 1, ordered_rows(routed), state)
    assert state.counts.quarantined_by_reason["conflict"] == 1
    assert [q["reason"] for q in payload["quarantined"]].count("conflict") == 1


def test_old_record_error_pickles_still_load() -> None:
    error = RecordError("f:1", "conflict", "offset", "m", "raw", "T", 5, applied="{}")
    restored = pickle.loads(pickle.dumps(error))
    assert restored == error and restored.to_dict()["applied"] == "{}"
    old_form = RecordError.__new__(RecordError)
    old_form.__setstate__(["f:1", "invalid_json", None, "m", "raw", None, None])  # 7 fields, before `applied`
    assert old_form.applied is None and "applied" not in old_form.to_dict()


# --- the streaming job's files source ---------------------------------------------------------------------------------


def _files_source_lines(directory: Path, per_trigger: int) -> list[str]:
    """Every line the files source yields for ``directory``, read ``per_trigger`` lines a micro-batch."""
    pytest.importorskip("pyspark")
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from elrwatch.streaming.sources import FilesStreamReader, read_file_split

    reader = FilesStreamReader({"path": str(directory)})
    start, values = reader.initialOffset(), []
    while True:
        end = reader.latestOffset(start, ReadMaxRows(per_trigger))
        if end == start:
            return values
        for split in reader.partitions(start, end):
            for batch in read_file_split(split):
                values += batch.column("value").to_pylist()
        start = json.loads(json.dumps(end))  # as Spark keeps it in its checkpoint


@pytest.mark.parametrize("per_trigger", [1000, 5, 1])
def test_the_files_source_gives_skip_metadata_lines_their_offsets_across_micro_batches(
    tmp_path: Path, per_trigger: int
) -> None:
    (tmp_path / "1-segments.dump").write_text(Path(fixture("segments-skip-metadata.dump")).read_text())
    lines = _files_source_lines(tmp_path, per_trigger)
    parsed = [parse_line(text, "f", n) for n, text in enumerate(lines, 1)]
    assert [p.offset for p in parsed if isinstance(p, Record)] == printed_offsets("segments.dump")
    assert not [p for p in parsed if isinstance(p, RecordError)]


def test_the_files_source_marks_a_snapshots_records_with_its_end_offset(tmp_path: Path) -> None:
    (tmp_path / "0-snapshot.dump").write_text(Path(fixture("snapshot.dump")).read_text())
    lines = _files_source_lines(tmp_path, 4)
    records = [p for p in (parse_line(t, "f", n) for n, t in enumerate(lines, 1)) if isinstance(p, Record)]
    assert [(r.type, r.data) for r in records] == [(r.type, r.data) for r in records_of("snapshot.dump")]
    assert {(r.offset, r.snapshot_end) for r in records} == {(SNAPSHOT_END - 1, SNAPSHOT_END)}


def test_the_files_source_applies_a_snapshot_then_the_segments_added_after_it(tmp_path: Path) -> None:
    """Read by the streaming job's stages (files source, route, bucket): the snapshot, then in a later micro-batch
    the segments, give the partitions `elrwatch replay SNAPSHOT SEGMENTS` gives."""
    from elrwatch.state.gauges import PipelineCounts
    from elrwatch.streaming.bucket import ordered_rows, process_bucket
    from elrwatch.streaming.snapshots import BucketState

    state = BucketState(ClusterState(bucket=(0, 1)), PipelineCounts(), {})
    for name in ("snapshot.dump", "segments-skip-metadata.dump"):
        (tmp_path / name).write_text(Path(fixture(name)).read_text())
        fresh = _files_source_lines(tmp_path, 1000)  # the only file in the directory now
        routed = routed_frame(fresh, topic=name, partition=-1, first_offset=1)
        process_bucket(0, 1, ordered_rows(routed), state)
        (tmp_path / name).unlink()
    oracle = replay_file([fixture("snapshot.dump"), fixture("segments-skip-metadata.dump")]).document(advice=False)
    streamed = Replayer(cluster=state.cluster).document(advice=False)
    assert without_positions(streamed) == without_positions(oracle)
    assert state.cluster.snapshot_end_offset == SNAPSHOT_END


def test_the_files_source_keeps_older_offsets_without_a_dump_position(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from elrwatch.streaming.sources import FilesStreamReader

    (tmp_path / "a.jsonl").write_text('{"type":"NO_OP_RECORD","version":0,"data":{}}\n' * 3)
    reader = FilesStreamReader({"path": str(tmp_path)})
    assert reader.latestOffset({"a.jsonl": [0, 0]}, ReadAllAvailable()) == {
        "a.jsonl": [138, 3]
    }  # no third element: not a dump


def test_snapshot_envelopes_keep_their_marker_through_the_streaming_route() -> None:
    """Envelopes with ``snapshotEnd`` (elrwatch bridge) share one offset: routed to a bucket, they stay a snapshot's
    records (not offset conflicts with each other), and a log record below the snapshot end is covered."""
    from elrwatch.state.gauges import PipelineCounts
    from elrwatch.streaming.bucket import ordered_rows, process_bucket
    from elrwatch.streaming.route import decode_record, encode_record
    from elrwatch.streaming.snapshots import BucketState

    snapshot = [*base_cluster((0, 1, 2)), topic("foo"), partition(replicas=(0, 1, 2), isr=(0, 1, 2), leader=0)]
    lines = [json.dumps({**envelope(*rec, offset=41), "snapshotEnd": 42, "source": "t"}) for rec in snapshot]
    lines.append(json.dumps(envelope(*change(isr=[0]), offset=40)))  # covered by the snapshot
    record = parse_line(lines[0], "f", 1)
    assert isinstance(record, Record) and record.snapshot_end == 42
    decoded = decode_record(encode_record(record))
    assert (decoded.snapshot_end, decoded.origin, decoded.offset) == (42, "t", 41)
    routed = routed_frame(lines)
    state = BucketState(ClusterState(bucket=(0, 1)), PipelineCounts(), {})
    payload = process_bucket(0, 1, ordered_rows(routed), state)
    assert payload["quarantined"] == [] and state.counts.applied == len(snapshot)
    assert state.cluster.snapshot_end_offset == 42
    assert state.cluster.partition(TOPIC_ID, 0).isr == (0, 1, 2)


@pytest.mark.parametrize(
    "checkpoint",
    [None, [], "x", ["x"] * 7, ["log", 1, 2, 3, True, ["a", "b"], []], ["log", 1, 2, 3, True, None, [["x", 1]]]],
)
def test_a_damaged_dump_position_reads_on_as_a_fresh_dump(checkpoint: Any) -> None:
    reader = DumpReader.restore(checkpoint)
    assert reader.checkpoint() == DumpReader().checkpoint()


def test_snapshot_envelopes_replay_like_the_snapshot_dump() -> None:
    """``snapshotEnd`` envelopes (elrwatch bridge, the files source) and the dump they come from replay alike."""
    reader = DumpReader()
    lines = [reader.self_contained(t) for t in Path(fixture("snapshot.dump")).read_text().splitlines()]
    lines += Path(fixture("segments.dump")).read_text().splitlines()
    from_envelopes = replay_lines(lines).document(advice=False)
    from_dump = replay_file([fixture("snapshot.dump"), fixture("segments.dump")]).document(advice=False)
    assert without_positions(from_envelopes) == without_positions(from_dump)
    assert from_envelopes["snapshot"]["endOffset"] == SNAPSHOT_END
    assert from_envelopes["snapshot"]["records"] == from_dump["snapshot"]["records"]
    assert from_envelopes["snapshot"]["coveredLogRecords"] == from_dump["snapshot"]["coveredLogRecords"]
