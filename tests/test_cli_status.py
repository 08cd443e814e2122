"""`elrwatch status --store URL` as a subprocess: the store's content in the `elrwatch replay` shape (DESIGN.md §5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from elrwatch.store import StatusStore

#: The top-level keys of the report document (DESIGN.md §5), shared by `elrwatch replay` and `elrwatch status`.
REPORT_KEYS = {"partitions", "brokers", "topics", "cluster", "gauges", "violations", "quarantined", "counts"}


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-P", "-m", "elrwatch.cli", *args],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip


def _doc(proc: subprocess.CompletedProcess) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _extra_lines(doc: dict[str, Any], next_offset: int, last_line: str) -> list[str]:
    """Records appended to the simulation so the report has violations, quarantined records and a duplicate."""
    t0 = 1_732_200_000_000
    parts = doc["partitions"]
    # a partition whose ISR shrinks to its leader alone, ELR cleared: |ISR ∪ ELR| < min ISR
    shrink = next(p for p in parts if p["leader"] in p["isr"] and len(p["isr"]) >= 2 and p["effectiveMinIsr"] >= 2)
    # another partition led by a replica outside its ISR
    other = next(p for p in parts if p is not shrink and set(p["replicas"]) - set(p["isr"]))
    outsider = sorted(set(other["replicas"]) - set(other["isr"]))[0]
    changes = [
        {"partitionId": shrink["partitionId"], "topicId": shrink["topicId"], "isr": [shrink["leader"]],
         "eligibleLeaderReplicas": []},
        {"partitionId": other["partitionId"], "topicId": other["topicId"], "leader": outsider},
        {"partitionId": 0, "topicId": "AAAAAAAAAAAAAAAAAAAAEg", "leader": 0},  # unknown topic: quarantined
    ]  # fmt: skip
    lines = [
        json.dumps({"type": "PARTITION_CHANGE_RECORD", "version": 2, "data": data, "offset": next_offset + i,
                    "timestamp": t0 + i}, separators=(",", ":"))
        for i, data in enumerate(changes)
    ]  # fmt: skip
    return [*lines, "{not json", last_line]  # the last line again: a duplicate


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """(`elrwatch replay` document of a simulated cluster with faults, URL of a SQLite store loaded with it)."""
    work = tmp_path_factory.mktemp("status")
    events = work / "events.jsonl"
    simulated = cli("simulate", "--faults", "0.5", "--records", "300", "--brokers", "4", "--topics", "2",
                    "--partitions", "4", "--seed", "1", "--output", str(events))  # fmt: skip
    assert simulated.returncode == 0, simulated.stderr
    lines = events.read_text(encoding="utf-8").splitlines()
    first = _doc(cli("replay", str(events), "--compact"))
    events.write_text("\n".join([*lines, *_extra_lines(first, len(lines) + 100, lines[-1])]) + "\n", encoding="utf-8")
    document = _doc(cli("replay", str(events), "--compact"))
    url = f"sqlite:///{work / 'store.db'}"
    store = StatusStore(url)
    try:
        store.load_document(document)
    finally:
        store.dispose()
    return document, url


def test_scenario_covers_every_section(replayed: tuple[dict[str, Any], str]) -> None:
    """The comparisons below are only worth something if each section of the document has content."""
    document, _ = replayed
    assert set(document) == REPORT_KEYS
    assert len(document["partitions"]) == 8
    assert len({p["status"] for p in document["partitions"]}) >= 2
    assert {b["state"] for b in document["brokers"]} >= {"active", "fenced"}
    assert {v["kind"] for v in document["violations"]} >= {"durability_margin_lost", "leader_not_in_isr"}
    assert document["quarantined"]["byReason"] == {"invalid_json": 1, "unknown_topic": 1}
    assert document["counts"]["duplicates"] == 1
    assert any(p["violations"] for p in document["partitions"])
    assert all("outlook" in p and "recommendation" in p for p in document["partitions"])


def test_status_prints_the_replay_document(replayed: tuple[dict[str, Any], str]) -> None:
    document, url = replayed
    proc = cli("status", "--store", url, "--compact")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert len(proc.stdout.splitlines()) == 1  # --compact: one line
    status = json.loads(proc.stdout)
    assert set(status) == REPORT_KEYS
    # partitions: same keys in the same order (topic, partitionId), then field by field. `lastPosition` is equal
    # too: this store was loaded from the replay document itself, not filled by the streaming job.
    assert [(p["topic"], p["partitionId"]) for p in status["partitions"]] == [
        (p["topic"], p["partitionId"]) for p in document["partitions"]
    ]
    assert sorted((p["topic"], p["partitionId"]) for p in status["partitions"]) == [
        (p["topic"], p["partitionId"]) for p in status["partitions"]
    ]
    for got, want in zip(status["partitions"], document["partitions"], strict=True):
        assert set(got) == set(want), (want["topic"], want["partitionId"])
        for field in want:
            assert got[field] == want[field], (want["topic"], want["partitionId"], field)
    assert status["brokers"] == document["brokers"]
    assert [b["brokerId"] for b in status["brokers"]] == sorted(b["brokerId"] for b in status["brokers"])
    assert status["topics"] == document["topics"]
    assert status["cluster"] == document["cluster"]
    assert status["gauges"] == document["gauges"]
    assert all(type(status["gauges"][k]) is type(v) for k, v in document["gauges"].items())  # 3 stays 3, not 3.0
    assert status["violations"] == document["violations"]
    assert status["quarantined"]["count"] == document["quarantined"]["count"] == 2
    assert status["quarantined"] == document["quarantined"]
    assert status["counts"] == document["counts"]
    assert status == document  # and nothing else differs


def test_status_pretty_by_default_and_store_from_environment(replayed: tuple[dict[str, Any], str]) -> None:
    document, url = replayed
    pretty = cli("status", "--store", url)
    assert pretty.returncode == 0, pretty.stderr
    assert pretty.stdout.startswith("{\n  ")  # indented
    assert json.loads(pretty.stdout) == document
    from_env = cli("status", "--compact", env={**os.environ, "ELRWATCH_STORE": url})
    assert from_env.returncode == 0, from_env.stderr
    assert json.loads(from_env.stdout) == document


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr  # no traceback
    assert lines[0].startswith("elrwatch: error: ")
    return lines[0]


def test_status_of_a_missing_store_fails_in_one_line_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    err = _one_line_error(cli("status", "--store", f"sqlite:///{missing}"))
    assert err == f"elrwatch: error: no status store at sqlite:///{missing}"
    missing_dir = tmp_path / "no-such-dir" / "store.db"
    err = _one_line_error(cli("status", "--store", f"sqlite:///{missing_dir}", "--compact"))
    assert err == f"elrwatch: error: no status store at sqlite:///{missing_dir}"
    assert list(tmp_path.iterdir()) == []  # neither the database file nor its directory was created


def test_status_with_a_store_option_that_is_not_a_url_fails_in_one_line() -> None:
    err = _one_line_error(cli("status", "--store", "not a url"))
    assert err == "elrwatch: error: --store is not a database URL (e.g. sqlite:///var/elrwatch.db)"


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"hello\n", "file is not a database"), (b"", "no such table: meta")],
    ids=["not-a-database", "no-schema"],
)
def test_status_of_a_file_that_is_not_a_store_fails_in_one_line(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "store.db"
    path.write_bytes(content)
    err = _one_line_error(cli("status", "--store", f"sqlite:///{path}"))
    assert err == f"elrwatch: error: cannot read status store sqlite:///{path}: {reason}"


def test_status_reads_a_store_given_in_sqlite_uri_form(replayed: tuple[dict[str, Any], str]) -> None:
    doc, url = replayed
    path = url.removeprefix("sqlite:///")
    proc = cli("status", "--store", f"sqlite:///file:{path}?mode=ro&uri=true", "--compact")
    assert proc.returncode == 0, proc.stderr
    assert _doc(proc)["partitions"] == doc["partitions"]
    missing = cli("status", "--store", f"sqlite:///file:{path}.missing?mode=ro&uri=true")
    assert "no status store at" in _one_line_error(missing)


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_store_is_one_database(url: str) -> None:
    store = StatusStore(url)
    try:
        store.create_schema()
        store.write_batch(1, brokers=[{"brokerId": 3, "state": "active"}])
        assert [b["brokerId"] for b in store.list_brokers()] == [3]  # another pooled use sees the same data
        assert store.last_batch_id() == 1
    finally:
        store.dispose()
