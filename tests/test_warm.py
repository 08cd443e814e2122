"""Keeping the job's Python workers warm while the stream is idle (streaming/warm.py)."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
from local_spark import local_spark

from elrwatch.streaming import warm
from elrwatch.streaming.warm import STATE_POOL_ENV, WorkerWarmer


class _FakeJob:
    def __init__(self, spark: _FakeSpark, environment: dict[str, str]) -> None:
        self.spark = spark
        self.environment = environment

    def mapInArrow(self, function: Any, schema: str) -> _FakeJob:
        return self

    def collect(self) -> list[dict[str, int]]:
        if self.spark.fail:
            raise RuntimeError("executor lost")
        self.spark.runs.append(self.environment)
        return [{"pid": 1}]


class _FakeSpark:
    """What WorkerWarmer uses of a SparkSession: the context's parallelism and environment, range().mapInArrow()."""

    def __init__(self) -> None:
        self.sparkContext = self
        self.defaultParallelism = 2
        self.environment: dict[str, str] = {"ARROW_DEFAULT_MEMORY_POOL": "system"}
        self.runs: list[dict[str, str]] = []
        self.ranges: list[tuple[int, ...]] = []
        self.fail = False

    def range(self, *args: int) -> _FakeJob:
        self.ranges.append(args)
        return _FakeJob(self, dict(self.environment))


_POOLS = {"source": ({}, warm.SOURCE_MODULES), "state": ({STATE_POOL_ENV: "state"}, warm.STATE_MODULES)}


def _warmer(idle_s: float = 25.0) -> tuple[WorkerWarmer, _FakeSpark]:
    spark = _FakeSpark()
    return WorkerWarmer(spark, _POOLS, idle_s=idle_s), spark


def test_each_pool_is_warmed_under_its_own_environment_which_is_then_restored():
    warmer, spark = _warmer()
    assert spark.environment == {"ARROW_DEFAULT_MEMORY_POOL": "system"}
    assert warmer.warm() == {"source": {1}, "state": {1}}
    assert [STATE_POOL_ENV in run for run in spark.runs] == [False, True]


def test_the_state_pool_is_warmed_with_as_many_tasks_as_state_tasks():
    """One state task (local mode): one warm-up task, so the pool keeps one worker, the one holding the buckets
    (Spark hands idle workers out first in, first out); the source pool one task per core."""
    spark = _FakeSpark()
    WorkerWarmer(spark, _POOLS, tasks={"state": 1})
    assert spark.ranges == [(0, 2, 1, 2), (0, 1, 1, 1)]


@pytest.mark.parametrize(("source", "pools"), [("kafka-native", ["state"]), ("kafka", ["state", "source"])])
def test_the_job_warms_the_source_pool_only_for_a_python_source(source: str, pools: list[str]):
    """Spark's JVM Kafka source reads without Python workers: warming a pool for it would only start workers that
    hold memory (three of them, 348 MB, measured after a 1M load)."""
    from elrwatch.streaming.accelerators import Accelerators
    from elrwatch.streaming.config import JobConfig

    spark = _FakeSpark()
    accelerators = Accelerators(JobConfig(source=source))
    accelerators.state_tasks = 1
    accelerators.start_warming(spark)
    assert list(accelerators.warmer.jobs) == pools
    assert accelerators.warmer.warm() == {name: {1} for name in pools}


def test_warms_only_after_a_batch_and_an_idle_period(monkeypatch: pytest.MonkeyPatch):
    now = [1000.0]
    monkeypatch.setattr(warm.time, "monotonic", lambda: now[0])
    warmer, spark = _warmer(idle_s=25.0)
    now[0] += 100
    assert not warmer.tick(0), "before the first batch the query's start has the cores"
    assert warmer.tick(1) is False  # a batch completed: activity
    now[0] += 24
    assert not warmer.tick(1)
    now[0] += 2
    assert warmer.tick(1) and len(spark.runs) == 2
    now[0] += 10
    assert not warmer.tick(1), "a warm-up counts as activity"
    now[0] += 20
    assert warmer.tick(1) and len(spark.runs) == 4
    now[0] += 20
    assert not warmer.tick(2), "a new batch resets the idle time"
    now[0] += 20
    assert not warmer.tick(2)


def test_a_failing_warm_up_is_logged_once_and_never_raised(monkeypatch, caplog):
    now = [0.0]
    monkeypatch.setattr(warm.time, "monotonic", lambda: now[0])
    warmer, spark = _warmer(idle_s=1.0)
    warmer.tick(1)
    spark.fail = True
    with caplog.at_level(logging.WARNING, logger="elrwatch.stream"):
        for _ in range(3):
            now[0] += 2
            assert warmer.tick(1) is False
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["keeping the Python workers warm failed"]
    spark.fail = False
    now[0] += 2
    assert warmer.tick(1), "it tries again at the next idle period"


@pytest.mark.e2e
@pytest.mark.slow
def test_warm_ups_run_in_the_workers_the_job_s_tasks_get():
    """Against a real local Spark: the default pool's warm-up keeps workers that a function defined in the
    default environment (what the Python sources' read tasks are) then gets, the state pool's are other ones, and
    each warmed worker has imported its pool's modules."""
    spark = local_spark("elrwatch-test-warm", {"spark.python.worker.reuse": "true"})
    try:
        warmer = WorkerWarmer(spark, _POOLS, idle_s=0)
        warmed = warmer.warm()
        assert warmed["source"] and warmed["state"]
        assert warmed["source"].isdisjoint(warmed["state"]), "the state function's pool is a separate one"

        def probe(batches: Any, modules: tuple[str, ...]) -> Any:
            import sys

            import pyarrow as pa

            for _ in batches:
                pass
            loaded = all(name in sys.modules for name in modules)
            yield pa.RecordBatch.from_pydict({"pid": [os.getpid()], "loaded": [loaded]})

        def run_probe(modules: tuple[str, ...]) -> list[Any]:
            frame = spark.range(0, 1, 1, 1).mapInArrow(lambda b: probe(b, modules), "pid long, loaded boolean")
            return frame.collect()

        (source_row,) = run_probe(warm.SOURCE_MODULES)
        env = spark.sparkContext.environment
        env[STATE_POOL_ENV] = "state"
        try:
            (state_row,) = run_probe(warm.STATE_MODULES)
        finally:
            env.pop(STATE_POOL_ENV)
        assert source_row["pid"] in warmed["source"] and source_row["loaded"]
        assert state_row["pid"] in warmed["state"] and state_row["loaded"]
        assert warmer.warm()["source"] & warmed["source"], "the next warm-up keeps the same workers"
    finally:
        spark.stop()


def test_a_warm_up_runs_the_idle_hook_of_the_modules_that_have_one(monkeypatch: pytest.MonkeyPatch):
    import sys
    import types

    import pyarrow as pa

    calls: list[str] = []
    hooked = types.ModuleType("elrwatch_test_hooked")
    hooked.on_idle = lambda: calls.append("hooked")  # type: ignore[attr-defined]
    plain = types.ModuleType("elrwatch_test_plain")
    monkeypatch.setitem(sys.modules, hooked.__name__, hooked)
    monkeypatch.setitem(sys.modules, plain.__name__, plain)
    batch = pa.RecordBatch.from_pydict({"id": [0]})
    (out,) = warm.warm_worker(iter([batch]), (plain.__name__, hooked.__name__))
    assert calls == ["hooked"] and out.column("pid").to_pylist() == [os.getpid()]
    from elrwatch.streaming import bucket

    assert "elrwatch.streaming.bucket" in warm.STATE_MODULES and callable(bucket.on_idle)  # the buckets compact
