"""Replays of REAL Kafka 4.4 metadata logs, no JVM (the golden fixtures of tests/test_real_kafka_conformance.py).

Each tests/data/real-kafka/<scenario>/ holds the controller's metadata log as Kafka's DumpLogSegments printed it at
the scenario's end (``metadata.dump``) and, per checkpoint, the log's end offset then and what the brokers answered
to DescribeTopicPartitions and DescribeCluster (``answers.json``). For every checkpoint the log up to its end offset
is replayed through the core and must equal those answers; over the whole log the controller model must predict
every PartitionChangeRecord Kafka wrote (tests/real_kafka_check.py). This runs in the fast suite.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from real_kafka_check import (
    KAFKA_VERSION,
    check_controller,
    compare_brokers,
    compare_partitions,
    replay_dump,
    replay_problems,
)

DATA = Path(__file__).parent / "data" / "real-kafka"
#: Scenario folders are the ones with answers.json (others under real-kafka/ belong to other tests).
SCENARIOS = sorted(p.parent.name for p in DATA.glob("*/answers.json"))


def dump_prefix(dump: str, end_offset: int) -> str:
    """The lines of a DumpLogSegments text up to (excluding) the first batch at or after ``end_offset``."""
    out: list[str] = []
    for line in dump.splitlines():
        if line.startswith("baseOffset:") and int(line.split()[1]) >= end_offset:
            break
        out.append(line)
    return "\n".join(out) + "\n"


def load(scenario: str) -> tuple[str, dict[str, Any]]:
    folder = DATA / scenario
    return (folder / "metadata.dump").read_text(), json.loads((folder / "answers.json").read_text())


def test_every_conformance_scenario_has_a_fixture() -> None:
    expected = {
        "one_broker_killed",
        "killed_until_leaderless",
        "elr_member_unclean_restart",
        "last_replica_standing_returns",
        "min_isr_raised_and_lowered",
        "unclean_election_admin",
        "reassignment",
        "controlled_shutdown",
        "paused_broker",
        "last_isr_member_controlled_shutdown",
        "stale_elr_index_after_min_isr_change",
        "unclean_enabled_topic",
        "unregistered_broker",
    }
    assert expected <= set(SCENARIOS)


def test_dump_prefix_cuts_at_a_batch() -> None:
    dump = (
        "Dumping x\nbaseOffset: 0 lastOffset: 1 count: 2\n| offset: 0 a\n| offset: 1 b\n"
        "baseOffset: 2 lastOffset: 2 count: 1\n| offset: 2 c\n"
    )
    assert dump_prefix(dump, 2) == "Dumping x\nbaseOffset: 0 lastOffset: 1 count: 2\n| offset: 0 a\n| offset: 1 b\n"
    assert dump_prefix(dump, 3) == dump


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_replay_equals_what_the_brokers_answered(scenario: str) -> None:
    dump, answers = load(scenario)
    assert answers["kafkaVersion"] == KAFKA_VERSION and answers["checkpoints"]
    for checkpoint in answers["checkpoints"]:
        prefix = dump_prefix(dump, checkpoint["endOffset"])
        replayer = replay_dump(prefix, f"{scenario}/{checkpoint['label']}")
        document = replayer.document(advice=False)
        assert max(p["lastOffset"] or 0 for p in document["partitions"]) < checkpoint["endOffset"]
        rows = checkpoint["describeTopicPartitions"]
        assert rows, "a checkpoint describes partitions"
        problems = replay_problems(replayer)
        problems += compare_partitions(document, rows)
        problems += compare_brokers(document, {int(b): f for b, f in checkpoint["describeCluster"].items()})
        assert not problems, f"{scenario}/{checkpoint['label']}:\n" + "\n".join(problems)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_controller_model_predicts_every_record_kafka_wrote(scenario: str) -> None:
    dump, _ = load(scenario)
    report = check_controller(dump, scenario)
    assert not report.mismatches, "\n".join(report.mismatches)
    kinds = {c.trigger.kind for c in report.checks if c.predicted}
    assert "fence" in kinds, "every scenario fences a broker that was in an ISR"
    assert report.predicted_records > 0


def test_the_fixtures_cover_every_trigger_and_the_stale_elr_index() -> None:
    """Across the fixtures: fences, unfence elections, controlled shutdown and re-registrations with records, clean
    and unclean re-registrations, other records explained as AlterPartition, reassignment and admin unclean election, and the
    duplicate ELR pass of Kafka's stale broker → ELR index (controller.ElrIndex); and the advice's outlook of
    returning brokers checked against Kafka's elections."""
    kinds: set[str] = set()
    explained: set[str] = set()
    duplicate = False
    returns = 0
    registrations: set[bool] = set()
    for scenario in SCENARIOS:
        report = check_controller(load(scenario)[0], scenario)
        for check in report.checks:
            if check.predicted:
                kinds.add(check.trigger.kind)
            if check.trigger.kind == "register":
                registrations.add(check.trigger.clean)
        explained |= set(report.explained)
        duplicate |= report.duplicate_elr_passes > 0
        returns += report.return_checks
    assert {"fence", "unfence", "controlled_shutdown", "register"} <= kinds
    assert any(c.trigger.kind == "unregister" for s in SCENARIOS for c in check_controller(load(s)[0], s).checks)
    assert registrations == {True, False}
    assert {"alter_partition", "reassign", "elect_unclean"} <= explained
    assert duplicate
    assert returns > 0
