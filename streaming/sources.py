"""Event sources of the streaming job: Kafka (Python data source or Spark's built-in) and a file directory.

Every source yields the same rows: ``value`` (the event line), ``topic``, ``partition``, ``offset``,
``timestamp``. For the files source ``topic`` is the file's path relative to the directory, ``partition``
is -1 and ``offset`` the 1-based line number, so positions read ``<file>:<line>`` as in ``elrwatch replay``;
for Kafka positions read ``<topic>/<partition>@<offset>`` (DESIGN §2).

* ``kafka`` (:class:`KafkaDataSource`, format ``elrwatch-kafka``): a Spark Python Data Source on kafka-python.
  Its offset (kept in Spark's checkpoint) is ``{"<topic>": {"<partition>": <next offset>}}``. Options:
  ``bootstrap.servers``, ``topic`` (comma-separated allowed), ``startingOffsets`` (``earliest`` | ``latest`` |
  Spark's JSON ``{"t":{"0":23,"1":-2}}``, -2 earliest, -1 latest), ``maxOffsetsPerTrigger``,
  ``security.protocol``, ``ssl.cafile``/``ssl.certfile``/``ssl.keyfile``, ``sasl.mechanism``
  (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), ``sasl.username``, and the secrets only by reference:
  ``ssl.password.env``/``ssl.password.file``, ``sasl.password.env``/``sasl.password.file`` (an environment
  variable name or a file whose first line is the secret; values never travel in the plan or the logs),
  ``timeout.ms`` (bound on every metadata call: a missing topic or an unreachable broker fails within it).
  New partitions of the event topic are picked up at their earliest offset.
* ``routeBuckets`` (both Python sources): when set, the source parses and routes its rows itself
  (``route.route_batches``) and yields the routed rows (``route.ROUTED_SCHEMA``) for that many buckets: the
  streaming job's read task then needs one Python worker, not two (reader + ``mapInArrow``).
* ``kafka-native``: Spark's ``format("kafka")`` (needs spark-sql-kafka-0-10 on the classpath), same options
  mapped by :func:`elrwatch.kafkaio.jvm.native_kafka_options`.
* ``files`` (:class:`FilesDataSource`, format ``elrwatch-files``): every file under ``path`` (sorted by name;
  appended lines and new files are picked up), envelope lines or kafka-dump-log output. Offset:
  ``{"<file>": [<bytes consumed>, <lines consumed>, <dump position>]}``; only complete lines (ending in a newline)
  are read. The dump position (``records.DumpReader.checkpoint``, absent from offsets of older versions) is where
  the consumed lines leave a DumpLogSegments dump: the next split rewrites its ``--skip-record-metadata`` lines
  with their batch's offsets and drops the in-snapshot offsets of a snapshot's records (applied without offsets:
  ``elrwatch replay`` is what applies a snapshot and the segments after it).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from elrwatch.kafkaio.clients import make_consumer
from elrwatch.kafkaio.config import (
    DEFAULT_TIMEOUT_MS,
    READER_FETCH_MAX_WAIT_MS,
    READER_FETCH_SIZES,
    Options,
    SourceError,
    kafka_python_config,
)
from elrwatch.kafkaio.jvm import native_kafka_options
from elrwatch.state.records import DumpReader
from elrwatch.streaming.route import ROUTED_SCHEMA, route_batches

SCHEMA = "value string, topic string, partition int, offset long, timestamp timestamp"
KAFKA_FORMAT = "elrwatch-kafka"
FILES_FORMAT = "elrwatch-files"
EARLIEST, LATEST = -2, -1
ROUTE_BUCKETS_OPTION = "routeBuckets"
ROUTING_SOURCES = frozenset({"kafka", "files"})  # the Python sources, which take ROUTE_BUCKETS_OPTION


# ---------------------------------------------------------------------------------------------- options


def route_buckets(options: Mapping[str, str]) -> int | None:
    """The ``routeBuckets`` option: None (rows as read) or the bucket count to route the rows to."""
    value = Options(options).get(ROUTE_BUCKETS_OPTION)
    if value is None or value == "":
        return None
    try:
        buckets = int(value)
    except ValueError:
        buckets = 0
    if buckets < 1:
        raise SourceError(f"option {ROUTE_BUCKETS_OPTION} must be an integer >= 1, not {value!r}")
    return buckets


def parse_starting_offsets(spec: str | None, topics: list[str]) -> dict[str, dict[str, int]] | str:
    """``earliest`` | ``latest`` | Spark's JSON form (partition → offset, -2 earliest, -1 latest)."""
    spec = (spec or "earliest").strip()
    if spec.lower() in ("earliest", "latest"):
        return spec.lower()
    try:
        parsed = json.loads(spec)
        result = {str(t): {str(int(p)): int(o) for p, o in parts.items()} for t, parts in parsed.items()}
    except (ValueError, AttributeError, TypeError):
        raise SourceError(
            f'startingOffsets must be earliest, latest or JSON like {{"{topics[0]}":{{"0":42}}}}'
        ) from None
    unknown = set(result) - set(topics)
    if unknown:
        raise SourceError(f"startingOffsets names topics that are not subscribed: {sorted(unknown)}")
    return result


def split_limit(available: dict[tuple[str, str], int], cap: int) -> dict[tuple[str, str], int]:
    """Share ``cap`` records over partitions with ``available`` records, proportionally, exact total."""
    total = sum(available.values())
    if total <= cap:
        return dict(available)
    take = {k: (v * cap) // total for k, v in available.items()}
    left = cap - sum(take.values())
    for key in sorted(available, key=lambda k: available[k] - take[k], reverse=True):
        if left <= 0:
            break
        if take[key] < available[key]:
            take[key] += 1
            left -= 1
    return take


class _EventDataSource(DataSource):
    """A Python source of the job's rows (`SCHEMA`; `ROUTED_SCHEMA` with ``routeBuckets``): its ``format`` name and
    its stream reader."""

    FORMAT: str
    READER: type[DataSourceStreamReader]

    @classmethod
    def name(cls) -> str:
        return cls.FORMAT

    def schema(self) -> str:
        return SCHEMA if route_buckets(self.options) is None else ROUTED_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return self.READER(Options(self.options))  # type: ignore[call-arg]


# ---------------------------------------------------------------------------------------------- kafka


@dataclass
class KafkaSplit(InputPartition):
    topic: str
    partition: int
    start: int
    end: int

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = options = Options(options)
        topic = options.get("topic") or options.get("subscribe")
        if not topic:
            raise SourceError("option topic is required")
        self.topics = [t.strip() for t in topic.split(",") if t.strip()]
        self.timeout_s = int(options.get("timeout.ms", DEFAULT_TIMEOUT_MS)) / 1000.0
        self.max_rows = int(options["maxOffsetsPerTrigger"]) if options.get("maxOffsetsPerTrigger") else None
        self.starting = parse_starting_offsets(options.get("startingOffsets"), self.topics)
        self.route_buckets = route_buckets(options)
        kafka_python_config(options)  # validate early (missing servers, bad mechanism, unreadable secrets)
        self._consumer: Any = None
        self._latest: dict[str, dict[str, int]] | None = None
        self._target: dict[str, dict[str, int]] | None = None
        self._refreshed_at = 0.0

    # -- driver-side helpers
    def _client(self) -> Any:
        if self._consumer is None:
            self._consumer = make_consumer(self.options, enable_auto_commit=False, group_id=None)
        return self._consumer

    def _partitions(self) -> dict[str, list[int]]:
        """Current partitions of every subscribed topic (metadata refreshed at most every 5 s, so new
        partitions are picked up); a missing topic is an error after ``timeout.ms``."""
        from kafka.errors import KafkaError

        consumer = self._client()
        deadline = time.monotonic() + self.timeout_s
        now = time.monotonic()
        refresh = now - self._refreshed_at > 5.0
        result: dict[str, list[int]] = {}
        for topic in self.topics:
            while True:
                try:
                    if refresh:
                        consumer.topics()  # remote metadata request
                        self._refreshed_at = time.monotonic()
                    parts = consumer.partitions_for_topic(topic)
                except KafkaError:  # transient: retried until the deadline
                    parts = None
                if parts:
                    result[topic] = sorted(parts)
                    break
                if time.monotonic() > deadline:
                    raise SourceError(
                        f"topic {topic} does not exist on {self.options.get('bootstrap.servers')} "
                        f"(waited {self.timeout_s:g}s)"
                    )
                refresh = True
                time.sleep(0.2)
        return result

    def _offsets(self, which: str, parts: dict[str, list[int]]) -> dict[str, dict[str, int]]:
        from kafka import TopicPartition

        consumer = self._client()
        tps = [TopicPartition(t, p) for t, ps in parts.items() for p in ps]
        fetch = consumer.beginning_offsets if which == "earliest" else consumer.end_offsets
        try:
            got = fetch(tps)
        except Exception as exc:
            raise SourceError(f"ListOffsets({which}) failed: {type(exc).__name__}: {exc}") from None
        out: dict[str, dict[str, int]] = {t: {} for t in parts}
        for tp, off in got.items():
            out[tp.topic][str(tp.partition)] = int(off)
        return out

    def _resolve(self, offsets: dict[str, dict[str, int]], parts: dict[str, list[int]]) -> dict:
        """Replace -2/-1 by real offsets; new partitions (not in ``offsets``) start at earliest."""
        earliest = latest = None
        out: dict[str, dict[str, int]] = {}
        for topic, ps in parts.items():
            out[topic] = {}
            for p in ps:
                off = offsets.get(topic, {}).get(str(p), EARLIEST)
                if off == EARLIEST:
                    earliest = earliest or self._offsets("earliest", parts)
                    off = earliest[topic][str(p)]
                elif off == LATEST:
                    latest = latest or self._offsets("latest", parts)
                    off = latest[topic][str(p)]
                out[topic][str(p)] = off
        return out

    # -- DataSourceStreamReader
    def initialOffset(self) -> dict:
        parts = self._partitions()
        if self.starting == "earliest":
            return self._offsets("earliest", parts)
        if self.starting == "latest":
            return self._offsets("latest", parts)
        return self._resolve(self.starting, parts)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._offsets("latest", self._partitions())

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: Any) -> dict:
        parts = self._partitions()
        start = self._resolve(start, parts)
        latest = self._target if self._target is not None else self._offsets("latest", parts)
        self._latest = latest
        available = {}
        for topic, ps in start.items():
            for p, off in ps.items():
                end = latest.get(topic, {}).get(p, off)
                available[(topic, p)] = max(0, end - off)
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if cap is None and self._target is not None:
            cap = self.max_rows  # Spark passes ReadAllAvailable under AvailableNow: keep batches bounded
        if cap:
            available = split_limit(available, cap)
        return {t: {p: off + available[(t, p)] for p, off in ps.items()} for t, ps in start.items()}

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    def partitions(self, start: dict, end: dict) -> list[KafkaSplit]:
        splits = []
        for topic, ps in end.items():
            for p, stop in ps.items():
                begin = start.get(topic, {}).get(p, EARLIEST)
                if begin < 0:  # a partition that appeared in this batch
                    begin = self._offsets("earliest", {topic: [int(p)]})[topic][p]
                if stop > begin:
                    splits.append(KafkaSplit(topic, int(p), begin, stop))
        return splits

    def read(self, partition: KafkaSplit) -> Iterator[Any]:
        batches = read_kafka_split(self.options, partition)
        yield from batches if self.route_buckets is None else route_batches(batches, self.route_buckets)

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class KafkaDataSource(_EventDataSource):
    """``spark.readStream.format("elrwatch-kafka")``: Kafka through kafka-python (see module doc)."""

    FORMAT = KAFKA_FORMAT
    READER = KafkaStreamReader


def read_kafka_split(options: Mapping[str, str], split: KafkaSplit, batch_rows: int = 20000) -> Iterator[Any]:
    """Executor side: fetch [start, end) of one partition as Arrow record batches (bounded wait)."""
    options = Options(options)
    import pyarrow as pa
    from kafka import KafkaConsumer, TopicPartition

    schema = pa.schema(
        [
            ("value", pa.string()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
        ]
    )
    timeout_s = int(options.get("timeout.ms", DEFAULT_TIMEOUT_MS)) / 1000.0
    consumer = KafkaConsumer(
        enable_auto_commit=False,
        group_id=None,
        **READER_FETCH_SIZES,
        fetch_max_wait_ms=READER_FETCH_MAX_WAIT_MS,
        **kafka_python_config(options),
    )
    try:
        tp = TopicPartition(split.topic, split.partition)
        consumer.assign([tp])
        consumer.seek(tp, split.start)
        values: list[str] = []
        offsets: list[int] = []
        stamps: list[int] = []
        position = split.start
        idle_deadline = time.monotonic() + max(timeout_s, 30.0)
        while position < split.end:
            records = consumer.poll(timeout_ms=500).get(tp, [])
            if not records:
                if time.monotonic() > idle_deadline:
                    raise SourceError(
                        f"{split.topic}/{split.partition}: no records between {position} and {split.end} "
                        f"after {max(timeout_s, 30.0):g}s (deleted by retention, or broker unreachable)"
                    )
                continue
            idle_deadline = time.monotonic() + max(timeout_s, 30.0)
            for m in records:
                if m.offset >= split.end:
                    break
                if m.offset < position:
                    continue
                value = m.value
                values.append(value.decode("utf-8", "replace") if value is not None else None)
                offsets.append(m.offset)
                stamps.append(m.timestamp * 1000 if m.timestamp is not None and m.timestamp >= 0 else None)
                position = m.offset + 1
            if len(values) >= batch_rows or position >= split.end:
                yield _kafka_batch(schema, values, split, offsets, stamps)
                values, offsets, stamps = [], [], []
        if values:
            yield _kafka_batch(schema, values, split, offsets, stamps)
    finally:
        consumer.close()


def _kafka_batch(schema: Any, values: list, split: KafkaSplit, offsets: list, stamps: list) -> Any:
    import pyarrow as pa

    n = len(values)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(values, pa.string()),
            pa.array([split.topic] * n, pa.string()),
            pa.array([split.partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(stamps, pa.timestamp("us", tz="UTC")),
        ],
        schema=schema,
    )


# ---------------------------------------------------------------------------------------------- files


@dataclass
class FileSplit(InputPartition):
    path: str
    name: str
    start_byte: int
    end_byte: int
    first_line: int
    dump_position: list | None = None  # DumpReader.checkpoint() at start_byte (None: not in a dump, or unknown)

    def __init__(
        self, path: str, name: str, start_byte: int, end_byte: int, first_line: int, dump_position: list | None = None
    ) -> None:
        super().__init__((name, start_byte, end_byte, first_line))
        self.path, self.name = path, name
        self.start_byte, self.end_byte, self.first_line = start_byte, end_byte, first_line
        self.dump_position = dump_position


#: Bytes that only DumpLogSegments output holds (file and batch headers, --skip-record-metadata lines): a chunk
#: without them, read from no dump position, is not followed line by line.
_DUMP_MARKERS = (b"baseOffset:", b"starting offset:", b"end offset:", b"KRaft bootstrap", b"payload:")


def dump_position_after(position: list | None, chunk: bytes) -> list | None:
    """Where the complete lines of ``chunk`` leave a DumpLogSegments dump read from ``position`` (None: no dump)."""
    if position is None and not any(marker in chunk for marker in _DUMP_MARKERS):
        return None
    reader = DumpReader.restore(position)
    follow = reader.self_contained
    for raw in chunk.split(b"\n")[:-1]:
        if raw[:1] in b"|bLSKD p":
            follow(raw.decode("utf-8", "replace").rstrip("\r"))
    return reader.checkpoint()


class FilesStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]) -> None:
        options = Options(options)
        self.root = options.get("path")
        if not self.root:
            raise SourceError("option path is required")
        if not os.path.isdir(self.root):
            raise SourceError(f"{self.root} is not a directory")
        self.max_rows = int(options["maxOffsetsPerTrigger"]) if options.get("maxOffsetsPerTrigger") else None
        self.route_buckets = route_buckets(options)
        self._frozen: dict[str, int] | None = None
        self._line_cache: dict[tuple[str, int, int], int] = {}

    def _files(self) -> dict[str, int]:
        """Relative file name → size, sorted by name (hidden and temporary files skipped)."""
        found = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for f in filenames:
                if f.startswith(".") or f.endswith(".tmp") or f.startswith("_"):
                    continue
                full = os.path.join(dirpath, f)
                found[os.path.relpath(full, self.root)] = os.path.getsize(full)
        return dict(sorted(found.items()))

    def initialOffset(self) -> dict:
        return {}

    def prepareForTriggerAvailableNow(self) -> None:
        self._frozen = self._files()

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: Any) -> dict:
        sizes = self._frozen if self._frozen is not None else self._files()
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if budget is None and self._frozen is not None:
            budget = self.max_rows  # AvailableNow: keep batches bounded
        end = dict(start)
        for name, size in sizes.items():
            done = start.get(name, [0, 0])
            done_bytes, done_lines = done[0], done[1]
            if size <= done_bytes:
                continue
            with open(os.path.join(self.root, name), "rb") as fh:
                fh.seek(done_bytes)
                chunk = fh.read(size - done_bytes)
            cut = chunk.rfind(b"\n") + 1  # complete lines only
            if cut == 0:
                continue
            chunk = chunk[:cut]
            lines = chunk.count(b"\n")
            if budget is not None and lines > budget:
                if budget <= 0:
                    break
                pos = -1
                for _ in range(budget):
                    pos = chunk.index(b"\n", pos + 1)
                cut, lines = pos + 1, budget
            position = dump_position_after(done[2] if len(done) > 2 else None, chunk[:cut])
            end[name] = [done_bytes + cut, done_lines + lines, *([position] if position is not None else [])]
            if budget is not None:
                budget -= lines
                if budget <= 0:
                    break
        return end

    def partitions(self, start: dict, end: dict) -> list[FileSplit]:
        splits = []
        for name, ended in end.items():
            end_byte = ended[0]
            started = start.get(name, [0, 0])
            start_byte, start_lines = started[0], started[1]
            if end_byte > start_byte:
                position = started[2] if len(started) > 2 else None
                splits.append(FileSplit(self.root, name, start_byte, end_byte, start_lines + 1, position))
        return splits

    def read(self, partition: FileSplit) -> Iterator[Any]:
        batches = read_file_split(partition)
        yield from batches if self.route_buckets is None else route_batches(batches, self.route_buckets)


class FilesDataSource(_EventDataSource):
    """``spark.readStream.format("elrwatch-files").option("path", DIR)``: event files as a stream."""

    FORMAT = FILES_FORMAT
    READER = FilesStreamReader


def read_file_split(partition: FileSplit) -> Iterator[Any]:
    """Executor side: the complete lines of [start_byte, end_byte) of one file as an Arrow record batch."""
    import pyarrow as pa

    with open(os.path.join(partition.path, partition.name), "rb") as fh:
        fh.seek(partition.start_byte)
        data = fh.read(partition.end_byte - partition.start_byte)
    lines = [line.rstrip("\r") for line in data.decode("utf-8", "replace").split("\n")[:-1]]
    if partition.dump_position is not None or any(marker in data for marker in _DUMP_MARKERS):
        follow = DumpReader.restore(partition.dump_position).self_contained
        lines = [follow(line) for line in lines]
    n = len(lines)
    yield pa.RecordBatch.from_arrays(
        [
            pa.array(lines, pa.string()),
            pa.array([partition.name] * n, pa.string()),
            pa.array([-1] * n, pa.int32()),
            pa.array(range(partition.first_line, partition.first_line + n), pa.int64()),
            pa.array([None] * n, pa.timestamp("us", tz="UTC")),
        ],
        names=["value", "topic", "partition", "offset", "timestamp"],
    )


# ---------------------------------------------------------------------------------------------- factory


def register(spark: Any) -> None:
    """Register the Python data sources with a Spark session."""
    spark.dataSource.register(KafkaDataSource)
    spark.dataSource.register(FilesDataSource)


def preflight(options: Mapping[str, str]) -> dict[str, list[int]]:
    """The event topics' partitions, asked through kafka-python with the job's options: for Spark's own source
    (whose JVM client retries an unreachable cluster, rejected credentials or a missing topic silently) the same
    one-line SourceError within ``timeout.ms`` as for ``kafka``, before the query starts."""
    reader = KafkaStreamReader(options)
    try:
        return reader._partitions()
    finally:
        reader.stop()


def read_stream(spark: Any, source: str, options: Mapping[str, str]) -> Any:
    """The streaming DataFrame of ``source`` (``kafka`` | ``kafka-native`` | ``files``), common columns."""

    if source == "kafka":
        register(spark)
        return spark.readStream.format(KAFKA_FORMAT).options(**dict(options)).load()
    if source == "files":
        register(spark)
        return spark.readStream.format(FILES_FORMAT).options(**dict(options)).load()
    if source == "kafka-native":
        preflight(options)
        try:
            df = spark.readStream.format("kafka").options(**native_kafka_options(options)).load()
        except Exception as exc:
            if "kafka" in str(exc) and ("Failed to find" in str(exc) or "DATA_SOURCE_NOT_FOUND" in str(exc)):
                raise SourceError(
                    "--source kafka-native needs Spark's Kafka connector on the classpath (spark-sql-kafka-0-10: "
                    "`make spark-jars` and --spark-jars, see streaming/connector.py); --source kafka needs nothing "
                    "extra"
                ) from None
            raise
        return df.select(
            "value",  # binary: routed in the JVM (route.route_in_jvm), parsed from its bytes in the bucket
            "topic",
            "partition",
            "offset",
            "timestamp",
            "headers",  # the routing headers of elrwatch's producers (kafkaio/headers.py), read by route_in_jvm
        )
    raise SourceError(f"unknown source {source!r} (kafka, kafka-native, files)")
