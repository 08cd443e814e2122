"""The command line's options: type, flag, environment variable (``ELRWATCH_<OPTION>``) and help of each, shared by
the commands that take them. ``elrwatch stream``'s defaults are the job's own (`JobConfig`, `LocalTuning`)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer

from elrwatch.streaming.config import SOURCES, JobConfig
from elrwatch.streaming.local.tuning import LocalTuning


def option(name: str, help_text: str, **kwargs: Any) -> Any:
    """A typer.Option whose env var is ELRWATCH_<NAME>."""
    envvar = "ELRWATCH_" + name.split("/")[0].lstrip("-").replace("-", "_").upper()
    return typer.Option(name, envvar=envvar, help=help_text, **kwargs)


DefaultMinIsr = Annotated[
    int,
    typer.Option(
        "--default-min-isr",
        envvar="ELRWATCH_DEFAULT_MIN_ISR",
        min=1,
        help="min.insync.replicas when neither the topic nor the cluster sets it (Kafka's default is 1).",
    ),
]
StoreUrl = Annotated[
    str,
    typer.Option(
        "--store",
        envvar="ELRWATCH_STORE",
        help="Status store URL: sqlite:///PATH (default) or postgresql+psycopg://USER@HOST/DB.",
    ),
]
StorePasswordFile = Annotated[
    Path | None,
    typer.Option(
        "--store-password-file",
        envvar="ELRWATCH_STORE_PASSWORD_FILE",
        help="File whose first line is the store's database password (keeps it out of the URL).",
    ),
]
BootstrapServers = Annotated[
    str | None, option("--bootstrap-servers", "Kafka bootstrap servers, host:port[,host:port].")
]
EventTopic = Annotated[str | None, option("--topic", "Kafka topic of the metadata events.")]
SecurityProtocol = Annotated[
    str | None, option("--security-protocol", "PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL.")
]
SslCafile = Annotated[str | None, option("--ssl-cafile", "PEM file of the CA that signed the brokers' certificates.")]
SslCertfile = Annotated[
    str | None,
    option(
        "--ssl-certfile",
        "PEM client certificate (mutual TLS). --source kafka-native reads key and chain from one PEM file: "
        "give that file to both --ssl-certfile and --ssl-keyfile.",
    ),
]
SslKeyfile = Annotated[str | None, option("--ssl-keyfile", "PEM client private key (mutual TLS).")]
SslPasswordFile = Annotated[
    str | None, option("--ssl-password-file", "File with the client key's password (or env ELRWATCH_SSL_PASSWORD).")
]
SaslMechanism = Annotated[str | None, option("--sasl-mechanism", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.")]
SaslUsername = Annotated[str | None, option("--sasl-username", "SASL user name.")]
SaslPasswordFile = Annotated[
    str | None, option("--sasl-password-file", "File with the SASL password (or env ELRWATCH_SASL_PASSWORD).")
]


# --- elrwatch stream -----------------------------------------------------------------------------------------------
Source = Annotated[str, option("--source", "kafka (Python data source), kafka-native (Spark's) or files.")]
FilesPath = Annotated[str | None, option("--path", "--source files: directory of event files.")]
Checkpoint = Annotated[
        str, option("--checkpoint", "Spark checkpoint directory (offsets + state).")
    ]
MetricsPort = Annotated[int | None, option("--metrics-port", "Serve Prometheus metrics on this port.", min=0)]
MetricsHost = Annotated[str, option("--metrics-host", "Address of the metrics endpoint.")]
Trigger = Annotated[str, option("--trigger", "Micro-batch interval, e.g. 1s, 500 milliseconds.")]
Buckets = Annotated[int, option("--buckets", "State groups (partitions hashed over them).", min=1)]
MaxRecordsPerBatch = Annotated[
        int | None, option("--max-records-per-batch", "Cap on events per micro-batch.", min=1)
    ]
StartingOffsets = Annotated[
        str, option("--starting-offsets", 'earliest, latest or JSON {"topic":{"0":42}} (new checkpoints only).')
    ]
AvailableNow = Annotated[
        bool, option("--available-now", "Process everything currently in the source, then exit.")
    ]
SourceTimeoutMs = Annotated[
        int, option("--source-timeout-ms", "Bound on Kafka metadata calls (missing topic / broker down).", min=100)
    ]
SparkMaster = Annotated[
        str | None,
        option("--spark-master", "Spark master URL; default: spark-submit's when launched by it, else local[2]."),
    ]
SparkConf = Annotated[list[str] | None, option("--spark-conf", "Extra Spark setting KEY=VALUE (repeatable).")]
SparkDriverMemory = Annotated[
        str, option("--spark-driver-memory", "spark.driver.memory (in local mode the heap of Spark's whole JVM).")
    ]
SparkJarsPackages = Annotated[
        str | None,
        option(
            "--spark-jars-packages",
            "spark.jars.packages (Maven coordinates), e.g. org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version> "
            "for --source kafka-native.",
        ),
    ]
SparkJars = Annotated[
        str | None,
        option(
            "--spark-jars",
            "Spark's Kafka connector for --source kafka-native: a folder of jars or a comma-separated list (default: "
            "pyspark's own jars, else ./.tools/spark/jars, which `make spark-jars` fills).",
        ),
    ]
SparkLogLevel = Annotated[
        str | None,
        option(
            "--spark-log-level",
            "Spark's log level (WARN, INFO, ...); default FATAL: a failing batch is reported once, as one line.",
        ),
    ]
ChangelogCheckpointing = Annotated[
        bool,
        option(
            "--changelog-checkpointing/--no-changelog-checkpointing",
            "RocksDB state store changelog checkpointing (faster commits of the small per-bucket state rows).",
        ),
    ]
StateCache = Annotated[
        bool,
        option(
            "--state-cache/--no-state-cache",
            "Keep each bucket's state in memory between micro-batches (off: every batch reloads it from the "
            "committed row and snapshot; for debugging, much slower).",
        ),
    ]
KeepWorkersWarm = Annotated[
        bool,
        option(
            "--keep-workers-warm/--no-keep-workers-warm",
            "While no batch ran for 25 s, run a tiny Spark job that keeps the Python workers and their imports "
            "alive (Spark kills a worker idle for a minute): the first batch after a quiet period, usually the "
            "first of an incident, then takes about 1 s instead of 3-5 s.",
        ),
    ]
JvmQuickStart = Annotated[
        bool,
        option(
            "--jvm-quick-start/--no-jvm-quick-start",
            "Spark's driver JVM compiles with C1 only (-XX:TieredStopAtLevel=1): its start costs half the CPU, "
            "a restart reaches its first batch about 5 s sooner on 2 cores, for a few per cent of sustained "
            "throughput. A --spark-conf spark.driver.extraJavaOptions is appended (later flags win).",
        ),
    ]
JvmClassArchive = Annotated[
        bool,
        option(
            "--jvm-class-archive/--no-jvm-class-archive",
            "Local mode: Spark's JVM maps an archive of the classes an earlier run loaded (AppCDS), written at the "
            "first stop after a completed batch (once per JDK and Spark build): a restart's JVM then needs about "
            "half the CPU.",
        ),
    ]
JvmClassArchiveDir = Annotated[
        str | None,
        option(
            "--jvm-class-archive-dir",
            "Where the JVM class archive is kept (≈ 175 MB); default $XDG_CACHE_HOME/elrwatch or ~/.cache/elrwatch. "
            "On Kubernetes a persistent volume, e.g. next to the checkpoint.",
        ),
    ]
StateMode = Annotated[
        str,
        option(
            "--state-mode",
            "snapshot: bucket snapshots in --state-dir + a small delta in Spark's state; "
            "blob: each bucket's whole state in Spark's state (no shared filesystem needed, slower).",
        ),
    ]
StateDir = Annotated[
        str | None,
        option(
            "--state-dir",
            "Bucket snapshot directory (--state-mode snapshot); default <checkpoint>/bucket-snapshots "
            "for a local checkpoint. With several executors: a filesystem shared by all (e.g. an RWX volume).",
        ),
    ]
StateDeltaMaxRecords = Annotated[
        int,
        option(
            "--state-delta-max-records",
            "Snapshot mode: write a new bucket snapshot once this many records were applied since the last one.",
            min=1,
        ),
    ]
StateTasks = Annotated[
        int | None,
        option(
            "--state-tasks",
            "Parallel state tasks (spark.sql.shuffle.partitions, fixed per checkpoint); default: 1 in local mode "
            "(2 with the state servers applies two buckets at a time: faster storms and restarts' first batch, "
            "but slower small batches), one per bucket on a cluster.",
            min=1,
        ),
    ]
StateService = Annotated[
        bool | None,
        option(
            "--state-service/--no-state-service",
            "Keep the buckets' state in server processes next to the driver, one per state task: buckets stay "
            "cached whichever Python worker Spark picks, state tasks can run in parallel, and a restart preloads "
            "the state while Spark starts; default: on in local mode (a cluster keeps the state in its "
            "executors' Python workers).",
        ),
    ]


class OptionError(ValueError):
    """An option value the job cannot take (one line)."""


def key_values(items: list[str], option_name: str) -> dict[str, str]:
    """Parse repeated KEY=VALUE options."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise OptionError(f"{option_name} takes KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def job_config(values: dict[str, Any]) -> JobConfig:
    """The job's configuration from ``elrwatch stream``'s option values (by parameter name)."""
    values = dict(values)
    tuning = LocalTuning(**{f.name: values.pop(f.name) for f in fields(LocalTuning)})
    values["spark_conf"] = key_values(values["spark_conf"] or [], "--spark-conf")
    if values["store_password_file"]:
        values["store_password_file"] = str(values["store_password_file"])
    if values["source"] not in SOURCES:
        raise OptionError(f"--source must be {', '.join(SOURCES[:-1])} or {SOURCES[-1]}")
    return JobConfig(**values, local=tuning)
