"""The command line's options: type, flag, environment variable (``ELRWATCH_<OPTION>``) and help of each, shared by
the commands that take them, and the groups of options several commands take (:class:`OptionGroup`: the Kafka
connection, the status store, the metrics endpoint, `elrwatch stream`'s job), each shown in ``--help`` under a panel
of its own. ``elrwatch stream``'s defaults are the job's own (`JobConfig`, `LocalTuning`)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from typer.models import ParameterInfo

from elrwatch.kafkaio.config import KafkaSettings
from elrwatch.store.urls import DEFAULT_URL
from elrwatch.streaming.config import SOURCES, JobConfig, LocalTuning, MetricsEndpoint, StoreSettings

JOB, TUNING = JobConfig(), LocalTuning()  # elrwatch stream's defaults


def option(
    name: str, help_text: str | None = None, *, command: str | None = None, short: str | None = None, **kwargs: Any
) -> Any:
    """A typer.Option whose env var is ELRWATCH_<NAME>, or ELRWATCH_<COMMAND>_<NAME> for an option of one command
    (``option("--limit", ..., command="restart-check")``: ELRWATCH_RESTART_CHECK_LIMIT); ``short`` is a one-letter
    alias (``-o``)."""
    words = ["ELRWATCH", *([command] if command else []), name.split("/")[0].lstrip("-")]
    envvar = "_".join(words).replace("-", "_").upper()
    return typer.Option(name, *([short] if short else []), envvar=envvar, help=help_text, **kwargs)


def command_option(command: str) -> Callable[..., Any]:
    """:func:`option` for the options of one command: ``command_option("bridge")("--interval", ...)`` has the env
    var ELRWATCH_BRIDGE_INTERVAL."""
    return functools.partial(option, command=command)


DefaultMinIsr = Annotated[
    int | None,
    typer.Option(
        "--default-min-isr",
        envvar="ELRWATCH_DEFAULT_MIN_ISR",
        min=1,
        show_default=False,
        help="Override the static min.insync.replicas (server.properties) of topics that neither their config nor "
        "the dynamic cluster default sets. Not needed when the bridge reports the nodes' static configs; "
        "[default: the static config the bridge reports, else Kafka's 1]",
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
Source = Annotated[
    str,
    option(
        "--source",
        "kafka-native (Spark's Kafka connector, routed in the JVM; the default: needs its jars, see --spark-jars), "
        "kafka (a Python data source: nothing beyond pip install) or files.",
    ),
]
FilesPath = Annotated[str | None, option("--path", "--source files: directory of event files.")]
Checkpoint = Annotated[str, option("--checkpoint", "Spark checkpoint directory (offsets + state).")]
MetricsPort = Annotated[int | None, option("--metrics-port", "Serve Prometheus metrics on this port.", min=0)]
MetricsHost = Annotated[str, option("--metrics-host", "Address of the metrics endpoint.")]
Trigger = Annotated[str, option("--trigger", "Micro-batch interval, e.g. 1s, 500 milliseconds.")]
Buckets = Annotated[int, option("--buckets", "State groups (partitions hashed over them).", min=1)]
MaxRecordsPerBatch = Annotated[int | None, option("--max-records-per-batch", "Cap on events per micro-batch.", min=1)]
MinRecordsPerBatch = Annotated[
    int | None,
    option(
        "--min-records-per-batch",
        "kafka-native: a micro-batch waits for this many events or --max-batch-delay (Spark's minOffsetsPerTrigger; "
        "default: no wait; not with --available-now).",
        min=1,
    ),
]
MaxBatchDelay = Annotated[
    str | None,
    option(
        "--max-batch-delay",
        "kafka-native, with --min-records-per-batch: the longest wait for them, e.g. 1s (Spark's maxTriggerDelay, "
        "default 15m).",
    ),
]
StartingOffsets = Annotated[
    str, option("--starting-offsets", 'earliest, latest or JSON {"topic":{"0":42}} (new checkpoints only).')
]
AvailableNow = Annotated[bool, option("--available-now", "Process everything currently in the source, then exit.")]
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


class OptionError(ValueError):
    """An option value the job cannot take (one line)."""


def fail(message: str, code: int = 2) -> None:
    """Print a one-line error to stderr and exit non-zero."""
    typer.echo(f"elrwatch: error: {message}", err=True)
    raise typer.Exit(code)


def key_values(items: list[str], option_name: str) -> dict[str, str]:
    """Parse repeated KEY=VALUE options."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise OptionError(f"{option_name} takes KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


# --- option groups -------------------------------------------------------------------------------------------------
Command = TypeVar("Command", bound=Callable[..., Any])


@dataclass(frozen=True)
class Opt:
    """One option of a group: its parameter name, its declaration (``Annotated[type, typer.Option(...)]``), its
    default and the ``--help`` panel it is shown under (None: its group's)."""

    name: str
    annotation: Any
    default: Any = None
    panel: str | None = None


def panel(title: str, *options: Opt) -> tuple[Opt, ...]:
    """``options`` shown under the ``--help`` panel ``title`` (to splice into an :class:`OptionGroup`'s options)."""
    return tuple(dataclasses.replace(o, panel=title) for o in options)


def in_panel(annotation: Any, title: str | None) -> Any:
    """``annotation`` (``Annotated[type, typer.Option(...)]``) with its option shown under the ``--help`` panel
    ``title``: a copy, since one declaration serves several commands; ``annotation`` itself when ``title`` is None."""
    if title is None:
        return annotation
    base, *metadata = typing.get_args(annotation)
    placed = []
    for item in metadata:
        if isinstance(item, ParameterInfo):
            item = copy.copy(item)
            item.rich_help_panel = title
        placed.append(item)
    return Annotated[(base, *placed)]


@dataclass(frozen=True)
class OptionGroup:
    """Options several commands take, declared once, and the object they make.

    Typer reads a command's options from its signature and has no groups: a command decorated with :func:`grouped`
    declares ``name: Type = GROUP``, gets the group's options in its signature instead (the same flags, env vars
    and help in every command, at that place in ``--help``) and is called with ``name=build(**their values)``. An
    entry of ``options`` may be a group itself, ``(keyword, group)``: its object is passed to ``build`` under that
    keyword."""

    build: Callable[..., Any]
    options: tuple[Opt | tuple[str, OptionGroup], ...]
    #: The ``--help`` panel of the group's options that name none (`Opt.panel`); None: the command's "Options".
    panel: str | None = None

    def parameters(self) -> list[inspect.Parameter]:
        """The group's options as keyword parameters, nested groups' included, in declaration order."""
        out: list[inspect.Parameter] = []
        for entry in self.options:
            if isinstance(entry, Opt):
                kind = inspect.Parameter.KEYWORD_ONLY
                annotation = in_panel(entry.annotation, entry.panel or self.panel)
                out.append(inspect.Parameter(entry.name, kind, default=entry.default, annotation=annotation))
            else:
                out.extend(entry[1].parameters())
        return out

    def collect(self, values: dict[str, Any]) -> Any:
        """The group's object from the command's option values (its own values are taken out of ``values``)."""
        kwargs: dict[str, Any] = {}
        for entry in self.options:
            if isinstance(entry, Opt):
                kwargs[entry.name] = values.pop(entry.name)
            else:
                kwargs[entry[0]] = entry[1].collect(values)
        return self.build(**kwargs)


def grouped(command: Command) -> Command:
    """Decorator of a command whose parameters default to :class:`OptionGroup` s (``kafka: KafkaSettings = KAFKA``):
    each such parameter is replaced by its group's options (at its place in ``--help``: typer reads the signature)
    and the command is called with the group's object. An :class:`OptionError` while building one is a one-line
    usage error (exit 2)."""
    signature = inspect.signature(command, eval_str=True)
    groups = {p.name: p.default for p in signature.parameters.values() if isinstance(p.default, OptionGroup)}
    if not groups:
        raise TypeError(f"{command.__name__} has no parameter that defaults to an OptionGroup")
    parameters: list[inspect.Parameter] = []
    for parameter in signature.parameters.values():
        if parameter.name in groups:
            parameters.extend(groups[parameter.name].parameters())
        else:
            parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY))

    @functools.wraps(command)
    def wrapper(**values: Any) -> Any:
        try:
            for name, group in groups.items():
                values[name] = group.collect(values)
        except OptionError as exc:
            fail(str(exc))
        return command(**values)

    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
    wrapper.__annotations__["return"] = signature.return_annotation
    return wrapper  # type: ignore[return-value]


def _text(value: str | Path | None) -> str | None:
    return None if value is None else str(value)


#: --bootstrap-servers and TLS/SASL: the Kafka connection of `stream`, `produce`, `bridge` and `agent`.
KAFKA = OptionGroup(
    KafkaSettings,
    (
        Opt("bootstrap_servers", BootstrapServers),
        Opt("security_protocol", SecurityProtocol),
        Opt("ssl_cafile", SslCafile),
        Opt("ssl_certfile", SslCertfile),
        Opt("ssl_keyfile", SslKeyfile),
        Opt("ssl_password_file", SslPasswordFile),
        Opt("sasl_mechanism", SaslMechanism),
        Opt("sasl_username", SaslUsername),
        Opt("sasl_password_file", SaslPasswordFile),
    ),
    panel="Kafka connection",
)

#: --store and --store-password-file: the status store of `stream`, `status` and `api`.
STORE = OptionGroup(
    lambda store, store_password_file: StoreSettings(store, _text(store_password_file)),
    (Opt("store", StoreUrl, DEFAULT_URL), Opt("store_password_file", StorePasswordFile)),
    panel="Status store",
)

#: --metrics-port and --metrics-host: the Prometheus endpoint of `stream`, `bridge` and `agent`.
METRICS = OptionGroup(
    lambda metrics_port, metrics_host: MetricsEndpoint(metrics_port, metrics_host),
    (Opt("metrics_port", MetricsPort), Opt("metrics_host", MetricsHost, MetricsEndpoint().host)),
    panel="Metrics endpoint",
)

#: Where `elrwatch stream`'s local-mode accelerators keep their files.
LOCAL_TUNING = OptionGroup(
    LocalTuning,
    (Opt("jvm_class_archive_dir", JvmClassArchiveDir, TUNING.jvm_class_archive_dir),),
    panel="Local mode",
)


def job_config(*, source: str, spark_conf: list[str] | None, **values: Any) -> JobConfig:
    """The job's configuration from ``elrwatch stream``'s option values (groups already made into objects)."""
    if source not in SOURCES:
        raise OptionError(f"--source must be {', '.join(SOURCES[:-1])} or {SOURCES[-1]}")
    return JobConfig(source=source, spark_conf=key_values(spark_conf or [], "--spark-conf"), **values)


#: Everything `elrwatch stream` takes, in `--help` order, panel by panel.
JOB_OPTIONS = OptionGroup(
    job_config,
    (
        *panel(
            "Source",
            Opt("source", Source, JOB.source),
            Opt("topic", EventTopic, JOB.topic),
            Opt("path", FilesPath, JOB.path),
            Opt("starting_offsets", StartingOffsets, JOB.starting_offsets),
            Opt("source_timeout_ms", SourceTimeoutMs, JOB.source_timeout_ms),
        ),
        ("kafka", KAFKA),
        *panel(
            "Micro-batches",
            Opt("checkpoint", Checkpoint, JOB.checkpoint),
            Opt("trigger", Trigger, JOB.trigger),
            Opt("max_records_per_batch", MaxRecordsPerBatch, JOB.max_records_per_batch),
            Opt("min_records_per_batch", MinRecordsPerBatch, JOB.min_records_per_batch),
            Opt("max_batch_delay", MaxBatchDelay, JOB.max_batch_delay),
            Opt("available_now", AvailableNow, JOB.available_now),
        ),
        *panel(
            "State",
            Opt("buckets", Buckets, JOB.buckets),
            Opt("default_min_isr", DefaultMinIsr, JOB.default_min_isr),
            Opt("state_mode", StateMode, JOB.state_mode),
            Opt("state_dir", StateDir, JOB.state_dir),
            Opt("state_delta_max_records", StateDeltaMaxRecords, JOB.state_delta_max_records),
        ),
        ("store", STORE),
        ("metrics", METRICS),
        *panel(
            "Spark",
            Opt("spark_master", SparkMaster, JOB.spark_master),
            Opt("spark_conf", SparkConf, None),  # JobConfig's: {}
            Opt("spark_driver_memory", SparkDriverMemory, JOB.spark_driver_memory),
            Opt("spark_jars_packages", SparkJarsPackages, JOB.spark_jars_packages),
            Opt("spark_jars", SparkJars, JOB.spark_jars),
            Opt("spark_log_level", SparkLogLevel, JOB.spark_log_level),
        ),
        ("local", LOCAL_TUNING),
    ),
)
