"""The streaming job's configuration: what `elrwatch stream` was asked to do (one default per setting: the
CLI's defaults are these), and what follows from it (the source's options, the state stage's settings, the Spark
master).

The stages read their settings from here and this module imports none of them: it is the job's leaf, which the
command line imports without loading Spark, pandas, numpy or pyarrow."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from elrwatch.kafkaio.config import KafkaSettings
from elrwatch.store.urls import DEFAULT_URL, mask_url

SOURCES = ("kafka", "kafka-native", "files")
DEFAULT_SNAPSHOT_SUBDIR = "bucket-snapshots"
ROWS_SUBDIR_PREFIX = "rows-"

#: How a bucket's state is kept between micro-batches (`snapshots`): snapshot files plus a delta in Spark's state
#: row, or the whole state in the row.
STATE_MODES = ("snapshot", "blob")
DEFAULT_STATE_MODE = "snapshot"
#: Snapshot mode: a bucket writes a new snapshot once its delta (records applied since its snapshot) holds this
#: many records. It bounds the replay on a worker-cache miss (~10 µs per record).
DELTA_MAX_RECORDS = 100_000


@dataclass(frozen=True)
class StateSettings:
    """What the state stage needs to apply a bucket's micro-batch."""

    buckets: int
    default_min_isr: int | None = None
    use_cache: bool = True  # False: every batch rebuilds its buckets from the committed rows (tests of that path)
    state_mode: str = DEFAULT_STATE_MODE
    state_dir: str | None = None  # the bucket snapshots' directory (`snapshots.SnapshotDir`)
    delta_max_records: int = DELTA_MAX_RECORDS
    rows_dir: str | None = None  # the job's rows files (`payload.write_rows_file`); None: the rows go in the output


@dataclass
class LocalTuning:
    """Where the local-mode accelerators (`accelerators`) keep their files.

    The accelerators themselves are fixed behaviour, each kept because a benchmark showed it pays: the Python
    workers kept warm through idle periods, the driver JVM compiling with C1 only, and in local mode an archive of
    Spark's classes. The C1-only compilation is overridden with ``--spark-conf
    spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=4`` (later flags win)."""

    jvm_class_archive_dir: str | None = None  # None: jvm_archive.default_archive_dir()


@dataclass(frozen=True)
class StoreSettings:
    """Where the status store is: its URL and the file holding its password (kept out of the URL)."""

    url: str = DEFAULT_URL
    password_file: str | None = None


@dataclass(frozen=True)
class MetricsEndpoint:
    """Where a process serves its Prometheus metrics (``port`` None: not served, 0: any free port)."""

    port: int | None = None
    host: str = "127.0.0.1"


@dataclass
class JobConfig:
    """Everything `elrwatch stream` needs (the CLI fills it from options / env)."""

    source: str = "kafka-native"
    kafka: KafkaSettings = field(default_factory=KafkaSettings)  # servers, TLS, SASL (--source kafka*)
    topic: str | None = None
    path: str | None = None
    store: StoreSettings = field(default_factory=StoreSettings)
    checkpoint: str = "var/checkpoint"
    metrics: MetricsEndpoint = field(default_factory=MetricsEndpoint)
    trigger: str = "1s"
    buckets: int = 2
    max_records_per_batch: int | None = None
    min_records_per_batch: int | None = None  # kafka-native: Spark's minOffsetsPerTrigger
    max_batch_delay: str | None = None  # kafka-native, with min_records_per_batch: Spark's maxTriggerDelay
    starting_offsets: str = "earliest"
    available_now: bool = False
    default_min_isr: int | None = None
    source_timeout_ms: int = 15000
    spark_master: str | None = None  # None: spark-submit's master when launched by it, else local[2]
    spark_conf: dict[str, str] = field(default_factory=dict)
    spark_driver_memory: str = "2g"  # spark.driver.memory (local mode: the whole JVM's heap)
    spark_jars_packages: str | None = None  # spark.jars.packages, e.g. the Kafka connector for kafka-native
    spark_jars: str | None = None  # kafka-native's connector jars: a folder or a list (streaming/connector.py)
    spark_log_level: str | None = None  # None: FATAL, the job reports a failing batch itself as one line
    state_mode: str = DEFAULT_STATE_MODE  # snapshot: snapshot files + delta in the state row; blob: the whole state
    state_dir: str | None = None  # snapshot files; default <checkpoint>/bucket-snapshots for a local checkpoint
    state_delta_max_records: int = DELTA_MAX_RECORDS
    local: LocalTuning = field(default_factory=LocalTuning)  # the local-mode accelerators' knobs
    bound_metrics_port: int | None = None  # set by run(): the port actually serving (for --metrics-port 0)

    def snapshot_dir(self) -> str | None:
        """The absolute bucket snapshot directory; ValueError when snapshot mode has none.

        Blob mode writes no snapshots but still reads the snapshot rows a checkpoint may hold from an earlier
        snapshot-mode run: its directory is returned when known (None otherwise)."""
        if self.state_mode not in STATE_MODES:
            raise ValueError(f"--state-mode must be one of {', '.join(STATE_MODES)}, got {self.state_mode!r}")
        if self.state_dir:
            return os.path.abspath(self.state_dir)
        checkpoint = self.checkpoint.removeprefix("file://").removeprefix("file:")
        if "://" in checkpoint:
            if self.state_mode != "snapshot":
                return None
            raise ValueError(
                f"--checkpoint {self.checkpoint} is not a local path: give --state-dir (a filesystem shared "
                "by the driver and every executor) or use --state-mode blob"
            )
        return os.path.abspath(os.path.join(checkpoint, DEFAULT_SNAPSHOT_SUBDIR))

    def rows_dir(self) -> str | None:
        """Where the buckets write their rows files (``payload.write_rows_file``): ``rows-<key>`` in the state
        directory (shared by the driver and every executor), ``key`` a hash of the checkpoint's location, so that
        jobs sharing a ``--state-dir`` never touch each other's files. None when there is no state directory (blob
        mode on a remote checkpoint): the rows then travel in Spark's output."""
        state_dir = self.snapshot_dir()
        if state_dir is None:
            return None
        checkpoint = self.checkpoint.removeprefix("file://").removeprefix("file:")
        where = checkpoint if "://" in checkpoint else os.path.abspath(checkpoint)
        key = hashlib.sha256(where.encode()).hexdigest()[:12]
        return os.path.join(state_dir, f"{ROWS_SUBDIR_PREFIX}{key}")

    def state_settings(self) -> StateSettings:
        """The state stage's settings of this job."""
        return StateSettings(
            self.buckets,
            self.default_min_isr,
            state_mode=self.state_mode,
            state_dir=self.snapshot_dir(),
            delta_max_records=self.state_delta_max_records,
            rows_dir=self.rows_dir(),
        )

    def source_options(self) -> dict[str, str]:
        """Options for `sources.read_stream` (secrets by reference only: env var names or files)."""
        opts: dict[str, str] = {"timeout.ms": str(self.source_timeout_ms)}
        if self.source == "files":
            if not self.path:
                raise ValueError("--path is required with --source files")
            opts["path"] = self.path
        else:
            if not self.kafka.bootstrap_servers or not self.topic:
                raise ValueError(f"--bootstrap-servers and --topic are required with --source {self.source}")
            opts.update(self.kafka.options(self.topic, startingOffsets=self.starting_offsets))
        if self.max_records_per_batch:
            opts["maxOffsetsPerTrigger"] = str(self.max_records_per_batch)
        opts.update(self.batch_wait_options())
        return opts

    def batch_wait_options(self) -> dict[str, str]:
        """Spark's Kafka source's wait for a fuller batch (``minOffsetsPerTrigger``, ``maxTriggerDelay``): none by
        default, nor with ``--available-now`` (which reads what is there and stops: a delayed last batch would end it
        early); ValueError for another source, or a delay without a minimum (Spark would ignore it)."""
        if self.available_now or (self.min_records_per_batch is None and self.max_batch_delay is None):
            return {}
        if self.source != "kafka-native":
            raise ValueError("--min-records-per-batch and --max-batch-delay need --source kafka-native")
        if self.min_records_per_batch is None:
            raise ValueError("--max-batch-delay needs --min-records-per-batch (Spark ignores a delay without it)")
        opts = {"minOffsetsPerTrigger": str(self.min_records_per_batch)}
        if self.max_batch_delay is not None:
            millis = parse_trigger(self.max_batch_delay).removesuffix(" milliseconds")
            if not millis.isdigit():
                raise ValueError(f"--max-batch-delay: a duration such as 2s or 500ms, got {self.max_batch_delay!r}")
            opts["maxTriggerDelay"] = f"{millis}ms"
        return opts


def spark_master(config: JobConfig) -> str | None:
    """The master to set: ``--spark-master`` if given; none when spark-submit launched us (the Spark operator's
    driver, `spark-submit --master k8s://…`), so its master and executors are used; else local mode on 2 cores."""
    if config.spark_master:
        return config.spark_master
    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # set by spark-submit's PythonRunner for the driver process
        return None
    return "local[2]"


def is_local(master: str | None) -> bool:
    """Whether ``master`` is Spark's local mode (None: spark-submit's master, a cluster)."""
    return master is not None and master.startswith("local")


_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def parse_trigger(text: str) -> str:
    """``1s`` / ``500ms`` / ``2m`` / ``1.5s`` → Spark's ``"<n> milliseconds"``; Spark's own forms pass through."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)\s*", text)
    if match:
        millis = round(float(match.group(1)) * _UNITS[match.group(2)])
        return f"{max(millis, 0)} milliseconds"
    return text


def options_summary(config: JobConfig) -> Mapping[str, Any]:
    """The configuration without secrets nor password files (for the startup log line), flat."""
    groups = ("kafka", "store", "metrics", "local")
    data = {k: v for k, v in config.__dict__.items() if k not in groups}
    data.update({k: v for k, v in asdict(config.kafka).items() if not k.endswith("password_file")})
    data.update(asdict(config.local))
    data["store"] = _masked(config.store.url)
    data["metrics_port"], data["metrics_host"] = config.metrics.port, config.metrics.host
    with contextlib.suppress(ValueError):
        data["state_dir"] = config.snapshot_dir()
    return data


def _masked(url: str) -> str:
    try:
        return mask_url(url)
    except Exception:
        return "<store url>"
