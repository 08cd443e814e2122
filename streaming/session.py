"""Spark's session for the streaming job, started as early as the job can: `EarlySpark` launches Spark's JVM in a
thread while the driver imports and prepares the rest (the status store, the sink, the buckets' modules), so a
restart waits for the longer of the two instead of their sum. Imports only what building the session needs (no
pandas, SQLAlchemy or the buckets' modules); pyspark is imported in the thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from elrwatch.streaming.accelerators import Accelerators
from elrwatch.streaming.config import JobConfig, spark_master
from elrwatch.streaming.connector import ConnectorError, ConnectorJars
from elrwatch.streaming.connector import resolve as resolve_connector
from elrwatch.streaming.memory import ARROW_POOL_ENV

log = logging.getLogger("elrwatch.stream")

#: Spark's own redaction of secrets in its logs and UI (the Kafka source's options included).
REDACTION_REGEX = "(?i)secret|password|token|access[.]?key|jaas|keystore[.]key"


class JobError(RuntimeError):
    """A one-line reason the job cannot start or stopped."""


class SparkGone(JobError):
    """Spark's JVM went away under the job: the driver exits at once (threads blocked on the JVM are not waited
    for; an interrupted batch re-runs from the checkpoint)."""


def validate(config: JobConfig) -> None:
    """The checks the job makes before it starts anything (a one-line JobError or ValueError)."""
    if config.buckets < 1:
        raise JobError("--buckets must be >= 1")
    config.source_options()  # validates required options early


class EarlySpark:
    """Spark's session being built in a daemon thread (`start`): the accelerators, the Kafka connector's jars and
    the session, or the error that stopped it, raised by `result`. `discard` stops a session nobody will use."""

    def __init__(self, config: JobConfig) -> None:
        self.config = config
        self.accelerators = Accelerators(config)
        self.connector: ConnectorJars | None = None
        self.began = time.monotonic()
        self._spark: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._build, name="elrwatch-spark-start", daemon=True)

    @classmethod
    def start(cls, config: JobConfig) -> EarlySpark:
        """Validate ``config`` (`validate`) and start building the session."""
        validate(config)
        early = cls(config)
        early._thread.start()
        return early

    def _build(self) -> None:
        try:
            self.connector = kafka_connector(self.config)
            log.info("starting Spark (checkpoint %s, state mode %s)", self.config.checkpoint, self.config.state_mode)
            self.accelerators.prepare_jvm()
            self._spark = build_spark(self.config, self.accelerators, self.connector)
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc

    def result(self) -> Any:
        """The session (waits for it); the build's error is raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        log.info("Spark ready after %.1fs (master %s)", time.monotonic() - self.began, self._spark.sparkContext.master)
        return self._spark

    def discard(self) -> None:
        """Stop the session when the job ends before using it (waits for the build)."""
        self._thread.join()
        if self._spark is not None:
            self._spark.stop()
            self._spark = None


def kafka_connector(config: JobConfig) -> ConnectorJars | None:
    """Where ``--source kafka-native`` gets Spark's Kafka connector (streaming/connector.py); None for the other
    sources; a one-line JobError naming a missing jar before Spark starts."""
    if config.source != "kafka-native":
        return None
    try:
        found = resolve_connector(config.spark_jars, config.spark_jars_packages)
    except ConnectorError as exc:
        raise JobError(str(exc)) from None
    log.info("Spark's Kafka connector: %s", found.origin)
    return found


def state_tasks(config: JobConfig, master: str) -> int:
    """Parallel state tasks (``spark.sql.shuffle.partitions``; a checkpoint keeps the value it started with).

    Local mode: one task, so that one Python worker of the state pool keeps (and hits) every bucket;
    with more, Spark hands each task any idle worker of the pool and the workers swap buckets (cache misses),
    and every micro-batch pays another task and state store (measured: docs/PERFORMANCE.md). A cluster: one task
    per bucket, each executor keeping the buckets Spark's state-store locality sends it.
    """
    return 1 if master.startswith("local") else config.buckets


def build_spark(
    config: JobConfig, accelerators: Accelerators | None = None, connector: ConnectorJars | None = None
) -> Any:
    """A Spark session tuned for the job (RocksDB state store, few shuffle partitions, Arrow); ``accelerators``:
    the run's local-mode accelerators (the driver JVM's options and class archive, the workers' interpreter);
    ``connector``: where the kafka-native source's jars come from (`kafka_connector`)."""
    from pyspark.sql import SparkSession

    accelerators = accelerators or Accelerators(config)

    # Python workers (children of the JVM in local mode) import the driver's elrwatch (the installed one, or the
    # one on PYTHONPATH), never an `elrwatch` folder of the working directory: in a source checkout that folder
    # holds only the CLI, so a worker would mix the checkout's CLI with the subpackages of another copy
    os.environ.setdefault("PYTHONSAFEPATH", "1")
    builder = SparkSession.builder.appName("elrwatch-stream")
    master = spark_master(config)
    if master is not None:
        builder = builder.master(master)
    python = accelerators.worker_python(master)
    if python is not None:  # before the JVM starts: its planner processes read the environment too
        os.environ["PYSPARK_PYTHON"] = python
    builder = (
        builder.config("spark.sql.shuffle.partitions", str(config.buckets))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        # changelog checkpointing: faster commits of the small per-bucket state rows
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100000")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.driver.memory", config.spark_driver_memory)
        .config("spark.driver.extraJavaOptions", accelerators.java_options())
        # secrets in Spark's logs and UI, the Kafka source's options included (the PEM key store's key as a value)
        .config("spark.redaction.regex", REDACTION_REGEX)
    )
    if connector is not None and connector.jars:  # served to the executors by the driver
        builder = builder.config("spark.jars", ",".join(connector.jars))
    if config.spark_jars_packages:  # e.g. the Kafka connector for --source kafka-native
        builder = builder.config("spark.jars.packages", config.spark_jars_packages)
    for key, value in {**ARROW_POOL_ENV, "PYTHONSAFEPATH": "1"}.items():  # executors' Python workers (cluster mode)
        builder = builder.config(f"spark.executorEnv.{key}", value)
    for key, value in config.spark_conf.items():
        if key != "spark.driver.extraJavaOptions":  # appended to the job's own (driver_java_options)
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.environment.update(ARROW_POOL_ENV)  # Python workers of the functions defined from now on
    spark.conf.set("spark.sql.shuffle.partitions", str(state_tasks(config, spark.sparkContext.master)))
    # Spark's own ERROR lines repeat what the job reports as one line; --spark-log-level WARN shows them.
    spark.sparkContext.setLogLevel(config.spark_log_level or "FATAL")
    return spark
