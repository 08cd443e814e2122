"""Keep the job's Python workers alive while the stream is idle, so the first batch after a pause is not slow.

Spark kills a Python worker that has been idle for one minute (``PythonWorkerFactory``, not configurable). The
next micro-batch then forks new workers, which import pandas, pyarrow, kafka-python and the core again before
they read a record: seconds for a batch of a few records, and the first batch of an incident, after a quiet
minute, is the one an operator waits for.

While no batch has completed for ``idle_s`` seconds, the driver runs a tiny Spark job per worker pool (the
source's and the state function's, `STATE_POOL_ENV`) with one task per core: each task takes an idle
worker of its pool, imports what the pool's real tasks import, and hands the worker back with a fresh idle
time. No Spark import at module level; the functions run in the workers.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("elrwatch.stream")

WARM_SCHEMA = "pid long"
#: The environment variable that puts the state function's Python workers in a pool of their own (see
#: `query.build_query`); the warm-ups keep that pool alive too.
STATE_POOL_ENV = "ELRWATCH_PYTHON_POOL"
# Spark's timeout is 60 s (PythonWorkerFactory.IDLE_WORKER_TIMEOUT_NS in Spark 4.x): warming twice per timeout,
# one late or failed warm-up costs nothing.
DEFAULT_WARM_AFTER_IDLE_S = 25.0
# What each pool's tasks import before their first record (measured with -X importtime: ≈ 1 s together).
SOURCE_MODULES = (
    "pyarrow",
    "kafka",
    "elrwatch.streaming.sources",
    "elrwatch.streaming.route",
    "elrwatch.state.records",
    "elrwatch.state.routing",
)
STATE_MODULES = ("pandas", "pyarrow", "elrwatch.streaming.bucket")


def warm_worker(batches: Iterator[Any], modules: tuple[str, ...]) -> Iterator[Any]:
    """mapInArrow body of a warm-up task: import ``modules`` (a no-op in a worker that has them), run each one's
    ``on_idle()`` if it has one (the state worker's buckets compact their deltas: `bucket.on_idle`), and report
    the worker's pid."""
    import os

    import pyarrow as pa

    for name in modules:
        idle_hook = getattr(importlib.import_module(name), "on_idle", None)
        if idle_hook is not None:
            idle_hook()
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"pid": [os.getpid()]}, schema=pa.schema([("pid", pa.int64())]))


class WorkerWarmer:
    """Runs the warm-up jobs from the driver's loop (`tick`) while the stream is idle."""

    def __init__(
        self,
        spark: Any,
        pools: dict[str, tuple[dict[str, str], tuple[str, ...]]],
        idle_s: float = DEFAULT_WARM_AFTER_IDLE_S,
        tasks: dict[str, int] | None = None,
    ):
        """``pools``: name → (the environment variables that select the pool, ``{}`` for the default one where the
        Python sources' read tasks run; the modules its tasks import). A function runs in the pool of the
        environment it was defined in, so each pool's job is defined once here, under its variables.

        ``tasks``: a pool's warm-up tasks (default: one per core, every worker a batch can use). The state pool's
        must be the state tasks' count: Spark hands out idle workers first in, first out, so a second warmed
        worker would take the next batch's state task and miss the buckets cached in the first."""
        self.idle_s = idle_s
        per_core = max(1, int(spark.sparkContext.defaultParallelism))
        self.jobs: dict[str, Any] = {}
        env = spark.sparkContext.environment
        for name, (variables, modules) in pools.items():
            n = (tasks or {}).get(name, per_core)
            saved = {key: env.get(key) for key in variables}
            env.update(variables)
            try:
                self.jobs[name] = spark.range(0, n, 1, n).mapInArrow(
                    lambda batches, modules=modules: warm_worker(batches, modules), WARM_SCHEMA
                )
            finally:
                for key, value in saved.items():
                    if value is None:
                        env.pop(key, None)
                    else:
                        env[key] = value
        self.batches = 0
        self.last_activity = time.monotonic()
        self.failed = False

    def warm(self) -> dict[str, set[int]]:
        """Run each pool's warm-up job now: pool name → the pids of the workers it kept."""
        return {name: {row["pid"] for row in job.collect()} for name, job in self.jobs.items()}

    def tick(self, batches_completed: int) -> bool:
        """Called from the driver's loop with the count of completed batches: warm the pools if neither a batch
        nor a warm-up happened for ``idle_s`` (never before the first batch: the query's start comes first).
        True if it warmed them. A failure is logged once and never raised: the next batch only starts slower."""
        now = time.monotonic()
        if batches_completed != self.batches:
            self.batches = batches_completed
            self.last_activity = now
            return False
        if batches_completed == 0 or now - self.last_activity < self.idle_s:
            return False
        self.last_activity = now
        try:
            pids = self.warm()
        except Exception as exc:
            if not self.failed:
                log.warning("keeping the Python workers warm failed (%s); batches after a pause start slower", exc)
            self.failed = True
            return False
        log.debug("Python workers kept warm in %.2fs: %s", time.monotonic() - now, pids)
        return True
