"""The local-mode accelerators of one run of the job, each an optimisation the job is correct without, behind one
object (`Accelerators`) that the query's wiring (``query.py``) asks at fixed points: before Spark starts (the JVM's
options and class archive, the workers' interpreter), when the query runs (keeping workers warm: ``warm.py``), in
its wait loop (warm-ups), and after Spark stops (writing the class archive: ``jvm_archive.py``).

Each accelerator is fixed behaviour, kept because a benchmark showed it pays (docs/PERFORMANCE.md, "The local-mode
accelerators"), and decides here, once, to which master it applies: on a cluster the class archive and the
interpreter choice are off, so the cluster path runs without them. A run that drains its source and ends
(``--available-now``) keeps no worker warm. `config.LocalTuning` says only where the class archive lives.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from elrwatch.streaming import jvm_archive
from elrwatch.streaming.config import JobConfig, is_local, spark_master
from elrwatch.streaming.warm import SOURCE_MODULES, STATE_MODULES, STATE_POOL_ENV, WorkerWarmer

log = logging.getLogger("elrwatch.stream")

# C1 only: HotSpot's optimising compiler (C2) is most of the JVM's CPU while Spark starts.
QUICK_START_OPTIONS = "-XX:TieredStopAtLevel=1"


# G1 returns unused heap to the OS when idle (after the initial load the heap is mostly garbage; without this the
# JVM kept ~2.7 GB resident at 1M partitions).
# ExplicitGCInvokesConcurrent: the driver's periodic System.gc() (memory.JvmHeapTrim) is a concurrent cycle whose
# remark shrinks the heap, a pause of milliseconds, not a full collection.
G1_RETURN_HEAP_OPTIONS = (
    "-XX:G1PeriodicGCInterval=15000 -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30 -XX:+ExplicitGCInvokesConcurrent"
)


def driver_java_options(config: JobConfig, archive_options: str = "") -> str:
    """``spark.driver.extraJavaOptions`` of the job: G1 returning idle heap, C1-only compilation, then the user's
    own value from ``--spark-conf`` (later flags win in HotSpot: ``-XX:TieredStopAtLevel=4`` brings C2 back).

    C1 only: the optimising compiler is about half of a restarting JVM's CPU before its first batch, which a
    restart on a small machine waits for, and gains a few per cent of sustained throughput at most (the job's hot
    code is Python; figures in docs/PERFORMANCE.md#restart). In local mode the driver JVM is the whole of Spark.
    ``archive_options``: the class archive's (`class_archive_for`)."""
    parts = [G1_RETURN_HEAP_OPTIONS, QUICK_START_OPTIONS]
    if archive_options:  # jvm_archive.ClassArchive.java_options
        parts.append(archive_options)
    own = config.spark_conf.get("spark.driver.extraJavaOptions")
    if own:
        parts.append(own)
    return " ".join(parts)


def local_worker_python(config: JobConfig, master: str | None) -> str | None:
    """The interpreter for Spark's Python workers and planner processes to set (``PYSPARK_PYTHON``): in local
    mode this process's own, unless ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` says otherwise.

    Spark's default is whatever ``python3`` the PATH finds first: another installation without elrwatch, or a
    version manager's shim that costs 0.1-0.4 s per process (a query's start and a restart's first batch spawn
    about ten). On a cluster the executors' interpreter is the cluster's to choose (None)."""
    if not is_local(master):
        return None
    if os.environ.get("PYSPARK_PYTHON") or "spark.pyspark.python" in config.spark_conf:
        return None
    return sys.executable


def class_archive_for(config: JobConfig) -> Any:
    """The JVM class archive (`jvm_archive.ClassArchive`) of the JVM `build_spark` is about to start, or None:
    not local mode, or a JVM already running in this process (its options are set)."""
    master = spark_master(config)
    if not is_local(master):
        return None
    from pyspark import SparkContext

    if SparkContext._gateway is not None:
        return None
    directory = config.local.jvm_class_archive_dir or jvm_archive.default_archive_dir()
    return jvm_archive.prepare(directory, jvm_archive.spark_jars_dir())


def launched_jvm() -> Any:
    """The JVM process PySpark started for this process (its ``Popen``), or None."""
    from pyspark import SparkContext

    return getattr(SparkContext._gateway, "proc", None)


class Accelerators:
    """The local-mode accelerators of one job run (see the module's docstring); every method is a no-op for an
    accelerator that does not apply."""

    def __init__(self, config: JobConfig) -> None:
        self.config = config
        self.master = spark_master(config)
        self.archive: Any = None  # jvm_archive.ClassArchive
        self.warmer: Any = None  # warm.WorkerWarmer
        #: The query's state tasks (`query.run` sets it: a checkpoint keeps the count it started with, which the
        #: session's ``spark.sql.shuffle.partitions`` does not show); None: the session's value.
        self.state_tasks: int | None = None

    def prepare_jvm(self) -> None:
        """Map (or arrange to write) the JVM class archive of the JVM Spark is about to start."""
        self.archive = class_archive_for(self.config)
        if self.archive is not None:
            doing = "to write at the stop (after a batch)" if self.archive.writing else "mapping"
            log.info("JVM class archive: %s %s", doing, self.archive.path)

    def java_options(self) -> str:
        """``spark.driver.extraJavaOptions`` (`driver_java_options` with the class archive's options)."""
        return driver_java_options(self.config, self.archive.java_options() if self.archive is not None else "")

    def worker_python(self, master: str | None) -> str | None:
        """The interpreter of Spark's Python workers to set (`local_worker_python`), or None."""
        return local_worker_python(self.config, master)

    def start_warming(self, spark: Any) -> None:
        """Keep the Python workers warm through quiet periods (not for a run that drains its source and ends)."""
        if self.config.available_now:
            return
        pools = {"state": ({STATE_POOL_ENV: "state"}, STATE_MODULES)}
        if self.config.source != "kafka-native":  # Spark's JVM source reads without Python workers: none to keep
            pools["source"] = ({}, SOURCE_MODULES)
        state_tasks = self.state_tasks or int(spark.conf.get("spark.sql.shuffle.partitions"))
        self.warmer = WorkerWarmer(spark, pools, tasks={"state": state_tasks})

    def tick(self, batches_completed: int) -> None:
        """From the driver's wait loop: warm the workers when idle."""
        if self.warmer is not None:
            self.warmer.tick(batches_completed)

    def after_spark_stop(self, jvm: Any, batches_completed: int) -> None:
        """Write the class archive of the stopped JVM (``jvm``: `launched_jvm()` before the stop) if it is to be
        written and the job completed a batch (the streaming classes are loaded)."""
        if self.archive is not None:
            self.archive.finish(jvm, write=batches_completed > 0)
