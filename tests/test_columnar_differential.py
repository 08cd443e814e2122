"""The batch engine (state/columnar.py) equals the object core on every corpus: real Kafka logs, the conformance
corpus, the simulator's scenarios and random faults, the event generator's load, storms and churn, and random
faulty streams (malformed, duplicate, re-sent, conflicting records), whole and bucketed (tests/columnar_diff.py
compares the two field by field after every micro-batch)."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from columnar_diff import Item, cut, run_both
from core_events import Feeder, random_stream
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from elrwatch.devtools.eventgen import EventGenerator
from elrwatch.state.columnar import BatchEngine
from elrwatch.state.simulator import SCENARIOS, simulate

DATA = Path(__file__).parent / "data" / "real-kafka"
REAL = sorted(p.parent.name for p in DATA.glob("*/metadata.dump"))
SIM_SHAPE = {"brokers": 6, "topics": 2, "partitions": 5, "replication_factor": 3, "min_isr": 2}


def sizes(seed: int, low: int = 1, high: int = 40) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(10_000)]


def buckets_of(n: int) -> list[tuple[int, int] | None]:
    return [None, *((i, n) for i in range(n))]


# --- the event generator: load, storms, churn ---------------------------------------------------------------------


def generator_batches(seed: int) -> list[list[Item]]:
    """Bootstrap (the load), a fence storm, churn, an unfence storm, random failures: one batch each."""
    gen = EventGenerator(topics=3, partitions=60, brokers=5, seed=seed)
    out: list[list[Item]] = [list(gen.bootstrap())]
    out.append(list(gen.fence(1)))
    out.append(list(gen.churn(150)))
    out.append(list(gen.fence(2)))  # below min ISR: ELR and leaderless partitions
    out.append(list(gen.unfence(1)))
    out.append(list(gen.steps(8)))
    out.append(list(gen.churn(100)))
    return out


@pytest.mark.parametrize("index_brokers", [False, True])
@pytest.mark.parametrize("bucket", buckets_of(3))
def test_event_generator_load_storms_and_churn(bucket: tuple[int, int] | None, index_brokers: bool) -> None:
    result = run_both(generator_batches(5), bucket=bucket, default_min_isr=2, index_brokers=index_brokers)
    assert result.transitions > 0
    assert result.fast >= 0.8 * result.outcomes["applied"], result  # the fast path takes the storms and the load


def test_event_generator_in_random_batches() -> None:
    gen = EventGenerator(topics=2, partitions=30, brokers=4, seed=3)
    lines = [*gen.bootstrap(), *gen.steps(15), *gen.churn(100)]
    result = run_both(cut(lines, sizes(3)), default_min_isr=2)
    assert result.fast > 0 and result.outcomes == {"applied": result.records}


def test_without_change_tracking() -> None:
    result = run_both(generator_batches(9), track_changes=False)
    assert result.fast > 0


# --- real Kafka metadata logs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", REAL)
def test_real_kafka_logs(scenario: str) -> None:
    lines = (DATA / scenario / "metadata.dump").read_text().splitlines()
    for bucket in buckets_of(2):
        run_both(cut(lines, sizes(len(scenario), 1, 120)), bucket=bucket, source=scenario)


def test_real_kafka_corpus_is_there() -> None:
    assert len(REAL) >= 13


# --- the conformance corpus -----------------------------------------------------------------------------------------


def conformance_lines(monkeypatch: pytest.MonkeyPatch, case: dict[str, Any]) -> list[Item]:
    """The lines the conformance replay feeds for a case (its initial state, then every step's records)."""
    import test_conformance_replay as conformance

    fed: list[Item] = []
    original = Feeder.feed_raw

    def recording(self: Feeder, text: str | bytes) -> Any:
        fed.append(text)
        return original(self, text)

    monkeypatch.setattr(Feeder, "feed_raw", recording)
    replay = conformance.CaseReplay(case)
    for index, (inp, expected) in enumerate(conformance._steps(case)):
        pre, main, post = replay.plan(inp, expected)
        replay.feed([*pre, *main, *post], f"step {index}")
    return fed


def test_conformance_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    import test_conformance_replay as conformance

    assert len(conformance.BY_ID) >= 54
    for case_id, case in sorted(conformance.BY_ID.items()):
        lines = conformance_lines(monkeypatch, case)
        for bucket in (None, (0, 2), (1, 2)):
            for batch in (1, 3, len(lines)):
                try:
                    run_both(cut(lines, [batch] * len(lines)), bucket=bucket)
                except AssertionError as error:
                    raise AssertionError(f"{case_id} bucket {bucket} batches of {batch}: {error}") from None


# --- the simulator ----------------------------------------------------------------------------------------------------


def simulated(**kwargs: Any) -> list[Item]:
    out = io.BytesIO()
    simulate(out, **{**SIM_SHAPE, "seed": 11, **kwargs})
    return list(out.getvalue().splitlines())


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_simulator_scenarios(scenario: str) -> None:
    lines = simulated(scenario=scenario)
    for bucket in buckets_of(2):
        run_both(cut(lines, sizes(7, 1, 30)), bucket=bucket)


@pytest.mark.parametrize("seed", [1, 2])
def test_simulator_random_faults(seed: int) -> None:
    lines = simulated(faults=0.3, records=600, seed=seed)
    for bucket in (None, (seed % 2, 2)):
        result = run_both(cut(lines, sizes(seed, 5, 80)), bucket=bucket, index_brokers=bucket is None)
        assert result.records > 0


# --- random faulty streams --------------------------------------------------------------------------------------------

_PHASES = (Phase.explicit, Phase.reuse, Phase.generate)
FAULTY = settings(max_examples=30, deadline=None, phases=_PHASES, suppress_health_check=[HealthCheck.too_slow])


def faulty_stream(seed: int, steps: int, rnd: random.Random) -> list[Item]:
    """`random_stream` with faults: malformed lines, re-delivered records (same and new positions), records whose
    offset was applied with other content (conflicts), records without offsets, out-of-order offsets."""
    lines = random_stream(seed, steps=steps)
    out: list[Item] = []
    seq = 0
    for i, text in enumerate(lines):
        seq += 1
        out.append(("events", seq, text))
        roll = rnd.random()
        if roll < 0.05:
            out.append(("events", seq, text))  # the same position again
        elif roll < 0.12:
            out.append(("retry", seq, lines[rnd.randrange(i + 1)]))  # an earlier record, another source
        elif roll < 0.16:
            seq += 1
            out.append(("events", seq, rnd.choice(['{"type": "PARTITION_CHANGE_RECORD"', "not json", "{}", "[1]"])))
        elif roll < 0.24:
            env = json.loads(lines[rnd.randrange(i + 1)])
            data = env["data"]
            if rnd.random() < 0.5 and "isr" in data:
                data["isr"] = [*reversed(data["isr"]), rnd.randrange(6)]
            elif rnd.random() < 0.5:
                env.pop("offset", None)
            else:
                env["offset"] = env.get("offset", 0) + rnd.randrange(-3, 4)
            seq += 1
            out.append(("events", seq, json.dumps(env)))
    return out


@FAULTY
@given(st.integers(0, 10**6), st.integers(1, 120), st.randoms(use_true_random=False), st.integers(0, 3))
def test_random_faulty_streams(seed: int, steps: int, rnd: random.Random, which: int) -> None:
    stream = faulty_stream(seed, steps, rnd)
    bucket = None if which == 0 else (which - 1, 3)
    run_both(cut(stream, [rnd.randint(1, 50) for _ in range(len(stream))]), bucket=bucket, index_brokers=which < 2)


# --- what the engine takes and declines ------------------------------------------------------------------------------


def test_fast_path_declines_what_it_does_not_cover() -> None:
    """Barriers (features, configs, registrations, topics), duplicates and partition 0's replica count changes go
    to the core; liveness changes of registered brokers and partition records take the fast path."""
    gen = EventGenerator(topics=1, partitions=4, brokers=4, seed=1)
    boot = list(gen.bootstrap())
    result = run_both([boot, boot])  # the second time: every record a duplicate, decided by the core
    assert result.outcomes == {"applied": len(boot), "duplicate": len(boot)}
    from columnar_diff import Parser

    from elrwatch.state.cluster import ClusterState

    engine = BatchEngine(ClusterState())
    records = Parser("s").records(boot)
    engine.apply_batch(records)
    partition_records = [r for r in records if r.type == "PARTITION_RECORD"]
    unfences = [r for r in records if r.type == "BROKER_REGISTRATION_CHANGE_RECORD"]
    assert unfences and engine.fast_records == len(unfences) + len(
        [r for r in partition_records if r.data["partitionId"] != 0]
    )
    assert engine.core_records == len(records) - engine.fast_records
    # a replica count change of partition 0 goes to the core, a change of another partition does not
    topic_id = partition_records[0].data["topicId"]
    before = engine.fast_records
    change = orjson.dumps({"type": "PARTITION_CHANGE_RECORD", "version": 0, "offset": 10_000,
                           "data": {"topicId": topic_id, "partitionId": 0, "replicas": [0, 1], "isr": [0, 1],
                                    "leader": 0}})
    other = orjson.dumps({"type": "PARTITION_CHANGE_RECORD", "version": 0, "offset": 10_001,
                          "data": {"topicId": topic_id, "partitionId": 1, "leader": -1}})
    engine.apply_batch(Parser("t").records([change, other]))
    assert engine.fast_records == before + 1
