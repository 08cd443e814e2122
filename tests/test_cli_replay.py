"""`elrwatch replay FILE|-` as a subprocess (DESIGN.md §5)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from core_events import (
    TOPIC_ID,
    base_cluster,
    broker_change,
    change,
    dump_line,
    envelope,
    line,
    partition,
    skip_metadata_line,
    topic,
    topic_min_isr,
)


def run(*args: str, stdin: str | bytes | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    return subprocess.run(
        [sys.executable, "-P", "-m", "elrwatch.cli", "replay", *args],
        input=data,
        capture_output=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )


def _lines(recs, first_offset: int = 1) -> list[str]:
    return [
        line(envelope(t, v, d, offset=first_offset + i, timestamp=1_732_100_000_000 + i))
        for i, (t, v, d) in enumerate(recs)
    ]


GOOD = _lines(
    [
        *base_cluster((0, 1, 2)),
        topic("foo"),
        topic_min_isr("foo", "2"),
        partition(replicas=(0, 1, 2), isr=(0, 1, 2), leader=0),
    ]
)


def _doc(proc: subprocess.CompletedProcess) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout)


def test_replay_file_with_quarantined_records_exits_zero(tmp_path: Path) -> None:
    bad = [
        "{not json",
        line(envelope(*change("AAAAAAAAAAAAAAAAAAAAEg", 0, leader=1), offset=50)),  # unknown topic
        line(envelope("PARTITION_CHANGE_RECORD", 99, {"partitionId": 0, "topicId": TOPIC_ID})),
        line(envelope(*change(replicas=[0, 0, 1]), offset=51)),
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join([*GOOD, *bad, line(envelope(*change(isr=[0, 1]), offset=52))]) + "\n")
    doc = _doc(run(str(path), cwd=tmp_path))
    q = doc["quarantined"]
    assert q["count"] == 4
    assert q["byReason"] == {"invalid_json": 1, "unknown_topic": 1, "unsupported_version": 1, "invalid_field": 1}
    positions = [r["position"] for r in q["records"]]
    n = len(GOOD)
    assert positions == [f"{path}:{n + 1}", f"{path}:{n + 2}", f"{path}:{n + 3}", f"{path}:{n + 4}"]
    assert [r["reason"] for r in q["records"]] == [
        "invalid_json",
        "unknown_topic",
        "unsupported_version",
        "invalid_field",
    ]
    assert q["records"][3]["field"] == "replicas"
    (p,) = doc["partitions"]
    assert (p["topic"], p["isr"], p["partitionEpoch"], p["status"]) == ("foo", [0, 1], 1, "AT_MIN_ISR")
    for key in (
        "topicId",
        "partitionId",
        "replicas",
        "elr",
        "lastKnownElr",
        "leader",
        "leaderEpoch",
        "leaderRecoveryState",
        "addingReplicas",
        "removingReplicas",
        "effectiveMinIsr",
    ):
        assert key in p
    assert {b["brokerId"] for b in doc["brokers"]} == {0, 1, 2}
    assert doc["gauges"]['elrwatch_partitions{status="AT_MIN_ISR"}'] == 1
    assert doc["gauges"]['elrwatch_quarantined_records_total{reason="unknown_topic"}'] == 1
    assert isinstance(doc["violations"], list)
    assert doc["counts"]["applied"] == len(GOOD) + 1


def test_missing_file_fails_with_one_line_error(tmp_path: Path) -> None:
    proc = run(str(tmp_path / "nope.jsonl"))
    assert proc.returncode != 0
    assert proc.stdout == b""
    err = proc.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "nope.jsonl" in err[0]


def test_directory_fails_with_one_line_error(tmp_path: Path) -> None:
    proc = run(str(tmp_path))
    assert proc.returncode != 0
    assert proc.stdout == b""
    err = proc.stderr.decode().strip().splitlines()
    assert len(err) == 1 and str(tmp_path) in err[0]


def test_stdin_dash(tmp_path: Path) -> None:
    text = "\n".join([*GOOD, line(envelope(*change(leader=1), offset=90))]) + "\n"
    doc = _doc(run("-", stdin=text))
    (p,) = doc["partitions"]
    assert (p["leader"], p["leaderEpoch"], p["partitionEpoch"]) == (1, 1, 1)
    assert doc["quarantined"]["count"] == 0
    path = tmp_path / "same.jsonl"
    path.write_text(text)
    from_file = _doc(run(str(path)))
    for d in (doc, from_file):
        for part in d["partitions"]:
            part.pop("lastPosition")
    assert doc["partitions"] == from_file["partitions"]
    assert doc["gauges"] == from_file["gauges"]


def test_mixed_envelope_and_dump_log_lines(tmp_path: Path) -> None:
    setup = [*base_cluster((0, 1, 2)), topic("foo"), topic_min_isr("foo", "2")]
    text = [
        "Dumping /var/kafka/__cluster_metadata-0/00000000000000000000.log",
        "Log starting offset: 0",
        "baseOffset: 0 lastOffset: 9 count: 10 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
        "partitionLeaderEpoch: 1 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
        "position: 0 CreateTime: 1732100000000 size: 900 magic: 2 compresscodec: none crc: 1 isvalid: true",
    ]
    text += [
        dump_line(envelope(t, v, d), offset=i + 1, create_time=1_732_100_000_000 + i)
        for i, (t, v, d) in enumerate(setup)
    ]
    text += [skip_metadata_line(envelope(*partition(replicas=(0, 1, 2), isr=(0, 1, 2), leader=0))), ""]
    text += [line(envelope(*change(isr=[0, 1], leader=0), offset=40, timestamp=1_732_100_100_000))]
    text += [
        dump_line(
            envelope(*change(isr=[0], leader=0, eligibleLeaderReplicas=[1])), offset=41, create_time=1_732_100_200_000
        )
    ]
    text += [line(envelope(*broker_change(1, fenced=1), offset=42))]
    text += [dump_line(envelope("NO_OP_RECORD", 0, {}), offset=43)]
    path = tmp_path / "mixed.log"
    path.write_text("\n".join(text) + "\n")
    doc = _doc(run(str(path), "--compact"))
    (p,) = doc["partitions"]
    assert (p["isr"], p["elr"], p["leader"], p["leaderEpoch"], p["partitionEpoch"]) == ([0], [1], 0, 2, 2)
    assert (p["status"], p["lastOffset"], p["lastTimestampMs"]) == ("UNDER_MIN_ISR", 41, 1_732_100_200_000)
    assert p["liveElectable"] == [0]
    assert doc["quarantined"]["count"] == 0
    assert doc["counts"]["ignoredLines"] == 4
    assert doc["counts"]["skippedByType"] == {"NO_OP_RECORD": 1}
    assert doc["cluster"]["elrEnabled"] is True


def test_compact_output_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text("\n".join(GOOD) + "\n")
    proc = run(str(path), "--compact")
    assert proc.returncode == 0
    assert len(proc.stdout.decode().strip().splitlines()) == 1
    assert json.loads(proc.stdout)["partitions"][0]["topic"] == "foo"


def test_empty_input_and_binary_garbage(tmp_path: Path) -> None:
    doc = _doc(run("-", stdin=b""))
    assert doc["partitions"] == [] and doc["quarantined"]["count"] == 0
    doc = _doc(run("-", stdin=b"\xff\xfe garbage\n" + "\n".join(GOOD).encode() + b"\n\x00\x01\n"))
    assert doc["quarantined"]["count"] == 2
    assert len(doc["partitions"]) == 1
