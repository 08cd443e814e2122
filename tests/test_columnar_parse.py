"""The columnar parse of partition-record lines (state/partitions/columnar/parse.py) is the object parse
(`records.parse_line`) for every line it is certain of, and it is certain of the well-formed lines Kafka and
elrwatch write."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elrwatch.state.eventgen import EventGenerator
from elrwatch.state.partitions.columnar.parse import parse_partition_lines
from elrwatch.state.records import Record, parse_line
from elrwatch.state.simulator import SCENARIOS, simulate

UUID = "FbrrdcfiR-KC2CPSTHaJrg"


def _as_bytes(lines: list[Any]) -> list[bytes]:
    return [x if isinstance(x, bytes) else x.encode() for x in lines]


def _fields(record: Record) -> tuple[Any, ...]:
    """Everything a record holds (what it pickles: its constructor's arguments), its data's key order too: the data
    is serialised as it is (quarantine, conflicts)."""
    _, arguments = record.__reduce__()
    return (*arguments, list(record.data.items()))


def assert_certain_lines_parse_alike(lines: list[bytes]) -> Any:
    """Every certain line's Record equals the object parse's; the parse result."""
    parsed = parse_partition_lines(lines)
    assert len(parsed.certain) == len(lines)
    for i, text in enumerate(lines):
        if not parsed.certain[i]:
            continue
        reference = parse_line(text, "events/0", i, f"events/0@{i}")
        assert isinstance(reference, Record), (text, reference)
        assert _fields(parsed.record(i, "events/0", i, f"events/0@{i}")) == _fields(reference), text
    return parsed


def test_generated_partition_records_are_all_certain_and_equal() -> None:
    gen = EventGenerator(topics=3, partitions=40, brokers=5, seed=7)
    boot = _as_bytes(list(gen.bootstrap()))
    storm = _as_bytes(list(gen.fence(1)))
    lines = [x for x in boot + storm if b'"PARTITION_' in x[:40]]
    parsed = assert_certain_lines_parse_alike(lines)
    assert parsed.certain.all()
    # and in a run with other records: those are declined, the partition records still certain
    mixed = assert_certain_lines_parse_alike(boot + storm)
    assert sorted(i for i, ok in enumerate(mixed.certain) if ok) == [
        i for i, x in enumerate(boot + storm) if b'"PARTITION_' in x[:40]
    ]


@pytest.mark.parametrize("scenario", [*sorted(SCENARIOS), None])
def test_simulator_scenarios_and_random_faults(scenario: str | None) -> None:
    """Every simulator scenario, and a run of random faults (malformed lines among them): certain lines parse
    alike."""
    out = io.BytesIO()
    shape = {"brokers": 6, "topics": 2, "partitions": 5, "replication_factor": 3, "min_isr": 2, "seed": 5}
    if scenario is None:
        simulate(out, **shape, faults=0.3, records=800)
    else:
        simulate(out, **shape, scenario=scenario)
    parsed = assert_certain_lines_parse_alike(out.getvalue().splitlines())
    assert parsed.certain.any()


def test_real_kafka_payloads() -> None:
    """Real Kafka's JSON of its records (the golden fixtures' dump payloads, json-format.md's examples): every
    partition record is certain and parses alike."""
    data = Path(__file__).parent / "data"
    lines = [
        text.split(b"payload:", 1)[1].strip()
        for path in sorted(data.glob("real-kafka/*/*.dump"))
        for text in path.read_bytes().splitlines()
        if b"payload: {" in text
    ]
    lines += [x for x in (data / "json_format_payloads.txt").read_bytes().splitlines() if x.startswith(b"{")]
    parsed = assert_certain_lines_parse_alike(lines)
    partition_records = [
        i
        for i, x in enumerate(lines)
        if x.startswith((b'{"type":"PARTITION_RECORD"', b'{"type":"PARTITION_CHANGE_RECORD"'))
    ]
    assert len(partition_records) > 100
    assert all(parsed.certain[i] for i in partition_records)


def _valid_envelopes(rnd: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(6):
        version = rnd.randint(0, 2)
        if rnd.random() < 0.5:
            data: dict[str, Any] = {
                "partitionId": rnd.randint(0, 50),
                "topicId": UUID,
                "replicas": [0, 1, 2],
                "isr": [0, 1],
                "removingReplicas": [],
                "addingReplicas": [],
                "leader": rnd.choice([0, 1, -1]),
                "leaderEpoch": rnd.randint(0, 9),
                "partitionEpoch": rnd.randint(0, 9),
            }
            if version >= 1:
                data["directories"] = ["AAAAAAAAAAAAAAAAAAAAAA"] * 3
            if rnd.random() < 0.5:
                data["leaderRecoveryState"] = rnd.choice([0, 1])
            if version >= 2 and rnd.random() < 0.5:
                data["eligibleLeaderReplicas"] = [2]
                data["lastKnownElr"] = []
            env: dict[str, Any] = {"type": "PARTITION_RECORD", "version": version, "data": data}
        else:
            data = {"partitionId": rnd.randint(0, 50), "topicId": UUID}
            for key, value in (("isr", [0]), ("leader", -2), ("replicas", [0, 1]), ("leaderRecoveryState", 1)):
                if rnd.random() < 0.5:
                    data[key] = value
            if version >= 2 and rnd.random() < 0.5:
                data["eligibleLeaderReplicas"] = [1]
            env = {"type": "PARTITION_CHANGE_RECORD", "version": version, "data": data}
        if rnd.random() < 0.8:
            env["offset"] = 100 + i
        if rnd.random() < 0.5:
            env["timestamp"] = 1_732_100_000_000 + i
        out.append(env)
    return out


_BAD_VALUES = [None, "1", 1.5, 1.0, True, -1, -3, 2**31, 2**63, [], [1, 1], [-1], {}, {"a": 1}, "x", UUID, "\u00e9"]


def _mutate(env: dict[str, Any], rnd: random.Random) -> str:
    """One line with one fault (or none): a value of another type or range, a key added or dropped, an envelope
    key, a duplicate key, other spacing, escapes, two objects, a line break."""
    roll = rnd.randrange(14)
    data = env["data"]
    if roll == 0 and data:
        data[rnd.choice(list(data))] = rnd.choice(_BAD_VALUES)
    elif roll == 1:
        env[rnd.choice(["type", "version", "offset", "timestamp"])] = rnd.choice(_BAD_VALUES)
    elif roll == 2 and data:
        del data[rnd.choice(list(data))]
    elif roll == 3:
        data[rnd.choice(["leaderEpoch", "directories", "eligibleLeaderReplicas", "lastKnownElr", "extra"])] = (
            rnd.choice([*_BAD_VALUES, 3, [3], ["AAAAAAAAAAAAAAAAAAAAAA"]])
        )
    elif roll == 4:
        env[rnd.choice(["source", "snapshotEnd", "other"])] = rnd.choice(["admin-poll", 5, None])
    elif roll == 5:
        env["type"] = rnd.choice(["TOPIC_RECORD", "PARTITION_RECORD", "PARTITION_CHANGE_RECORD", "partition_record"])
    text = json.dumps(env, separators=(",", ":"))
    if roll == 6:
        text = text.replace('"topicId":', '"topicId":' + json.dumps(UUID) + ',"topicId":', 1)
    elif roll == 7:
        text = text.replace('":', '" :', 1)
    elif roll == 8:
        text = text.replace(UUID, "\\u0046" + UUID[1:], 1)
    elif roll == 9:
        text = text + text
    elif roll == 10:
        text = text.replace(",", ",\n", 1)
    elif roll == 11:
        text = " " + text
    elif roll == 12:
        text = text.replace("[0,1", "[0, 1", 1).replace(
            "PARTITION", "PARTITION\\u005f" if rnd.random() < 0.2 else "PARTITION", 1
        )
    return text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.integers(1, 40))
def test_random_faulty_lines(rnd: random.Random, size: int) -> None:
    lines = []
    clean = []
    for _ in range(size):
        for env in _valid_envelopes(rnd):
            if rnd.random() < 0.3:
                lines.append(_mutate(env, rnd).encode())
                clean.append(False)
            else:
                lines.append(json.dumps(env, separators=(",", ":")).encode())
                clean.append(True)
    parsed = assert_certain_lines_parse_alike(lines)
    # a well-formed line (as Kafka and elrwatch write them) is never declined
    assert all(parsed.certain[i] for i, ok in enumerate(clean) if ok)


def test_declined_lines_name_nothing_and_break_nothing() -> None:
    good = json.dumps(
        {"type": "PARTITION_CHANGE_RECORD", "version": 0, "data": {"partitionId": 1, "topicId": UUID, "isr": [0]}}
    ).encode()
    lines = [good, b"", b"not json", b'{"type": "PARTITION_CHANGE_RECORD"', b"[1]", good, b"{}", good + b"\n", good]
    parsed = assert_certain_lines_parse_alike(lines)
    assert [bool(x) for x in parsed.certain] == [True, False, False, False, False, True, False, False, True]
