"""What Spark alone costs the streaming job, per micro-batch: the event topic read by one source and routed as the
job routes it (``kafka``: parsed and routed in its Python read tasks; ``kafka-native``: Spark's Kafka source, routed
in Spark SQL), then

* ``--stages read`` (default): Spark's ``noop`` sink, so a batch's ``addBatch`` time is its read stage;
* ``--stages batch``: the job's stage structure without elrwatch's state: ``groupBy(bucket)`` →
  ``applyInPandasWithState`` with a function that only counts its rows (a tiny state) → ``foreachBatch`` collecting
  the result on the driver. A batch's ``triggerExecution`` is then the floor under the job's own batch for the same
  records (printed with its ratio to the storm's 2 s target). Local mode, 2 cores.
* ``--stages live``: the same stages as one query running with the job's storm trigger (250 ms, as
  ``bench/streaming.py`` runs the job), the storms published while it runs, as ``bench/streaming.py`` publishes
  them (Kafka's ConsoleProducer, started ahead); from each storm's last acknowledged record to the end of the
  ``foreachBatch`` that holds its last row. That is Spark's own share of the job's "storm → gauges" (the first
  storm, which warms the JVM and the Python worker, apart), a storm straddling triggers included.

    python bench/read_stage.py --source kafka-native --jit c1     # then --jit c2, interleaved, several times
    python bench/read_stage.py --stages batch                      # Spark's share of a storm batch
    python bench/read_stage.py --stages live                       # Spark's share of storm -> gauges
    python bench/read_stage.py --stages batch --routing both --rounds 2   # JSON route vs routing headers
    python bench/read_stage.py --source kafka --bootstrap-servers HOST:PORT   # an existing broker

Without ``--bootstrap-servers`` it starts a 1-broker Kafka (devtools/kafka_cluster.py). Two queries, one Spark
session: ``--storms`` batches of a broker's fence (≈ ``--storm-partitions`` PartitionChangeRecords, published by
Kafka's ConsoleProducer, one storm a batch), then ``--floor-batches`` batches of about one record per partition of
the event topic (the floor). Prints each batch's rows and read stage (ms), then min / median of each query
(the first storm batch, which starts the Python workers and compiles Spark's code, apart).

``--routing`` (kafka-native): ``json`` publishes the storms with keys only, so Spark SQL routes each line from its
JSON (``from_json``); ``headers`` with the routing headers elrwatch's producers set (kafkaio/headers.py), so each
line is placed from its headers; ``both`` publishes each to a topic of its own and runs their storm queries in
turn, ``--rounds`` times, in one Spark session, then prints each one's medians and their ratio.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from consume_raw import JvmProducer

from elrwatch.devtools.kafka_cluster import KafkaCluster
from elrwatch.kafkaio.clients import create_topic
from elrwatch.kafkaio.headers import ROUTE_HEADER
from elrwatch.state.eventgen import EventGenerator
from elrwatch.streaming.accelerators import QUICK_START_OPTIONS
from elrwatch.streaming.route import route_in_jvm
from elrwatch.streaming.sources import ROUTE_BUCKETS_OPTION, read_stream

SPARK_JARS = Path(__file__).resolve().parent.parent / ".tools" / "spark" / "jars"
BUCKETS = 4
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def storm_lines(partitions: int, storm: int) -> list[bytes]:
    """A broker's fence on a ``partitions``-partition cluster: ≈ ``storm`` PartitionChangeRecords + the fence."""
    brokers = max(4, round(3 * partitions / storm))
    topics = max(1, partitions // 10_000)
    gen = EventGenerator(topics=topics, partitions=partitions // topics, brokers=brokers, seed=3)
    for _ in gen.bootstrap():
        pass
    return list(gen.fence(1))


def count_rows(key: tuple, frames, state):
    """The state function of ``--stages batch``: counts its rows (touching the raw lines, as a bucket reads them)."""
    import pandas as pd

    rows = 0
    for frame in frames:
        rows += len(frame)
        frame["rec"].to_numpy()
    state.update(((state.get[0] if state.exists else 0) + rows,))
    yield pd.DataFrame({"bucket": [int(key[0])], "rows": [rows]})


def counted_by_bucket(events):
    """The job's state stage without elrwatch's state: ``groupBy(bucket)`` → ``applyInPandasWithState(count_rows)``."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    return events.groupBy("bucket").applyInPandasWithState(
        count_rows, "bucket int, rows long", "rows long", "append", GroupStateTimeout.NoTimeout
    )


def jvm_cpu_ms(spark) -> int:
    """CPU time (user + system, ms) Spark's JVM used so far: on a loaded machine a batch's wall time grows with the
    load, its CPU time much less."""
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 // os.sysconf("SC_CLK_TCK")


def run_query(
    spark, source: str, options: dict[str, str], batches: int, checkpoint: str, stages: str = "read"
) -> list[tuple[int, int, int, int]]:
    """(rows, addBatch ms, triggerExecution ms, the JVM's CPU ms) of each of the first ``batches`` non-empty
    micro-batches (the CPU time from the previous batch's end, seen by polling, to its end)."""
    if source == "kafka":
        events = read_stream(spark, source, {**options, ROUTE_BUCKETS_OPTION: str(BUCKETS)})
    else:
        events = route_in_jvm(read_stream(spark, source, options), BUCKETS)
    if stages == "batch":
        query = counted_by_bucket(events).writeStream.foreachBatch(lambda frame, _batch_id: frame.collect())
    else:
        query = events.writeStream.format("noop")
    query = query.option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds")
    cpu = [jvm_cpu_ms(spark)]
    running = query.start()
    seen: list[tuple[int, int, int]] = []
    try:
        deadline = time.monotonic() + 1800
        while len(seen) < batches:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(seen)} of {batches} batches in 1800 s")
            if running.exception() is not None:
                raise RuntimeError(str(running.exception()))
            progress = [p for p in running.recentProgress if p["numInputRows"] > 0]
            seen = [
                (p["numInputRows"], p["durationMs"].get("addBatch", 0), p["durationMs"].get("triggerExecution", 0))
                for p in progress
            ]
            if len(seen) >= len(cpu):
                cpu.extend([jvm_cpu_ms(spark)] * (len(seen) + 1 - len(cpu)))
            time.sleep(0.1)
    finally:
        running.stop()
    return [(*batch, cpu[i + 1] - cpu[i]) for i, batch in enumerate(seen[:batches])]


def run_live(
    spark,
    options: dict[str, str],
    checkpoint: str,
    bootstrap: str,
    topic: str,
    storms: list[list[bytes]],
    headers: bool = False,
) -> list[tuple[float, list[int]]]:
    """For each storm (published while the ``--stages batch`` query runs with a 250 ms trigger): (seconds from its
    last acknowledged record to the end of the foreachBatch holding its last row, the routed rows of each batch it
    took). The first storm also learns how many routed rows a storm makes."""
    counted = counted_by_bucket(route_in_jvm(read_stream(spark, "kafka-native", options), BUCKETS))
    finished: list[tuple[float, int]] = []  # (monotonic end of the sink, routed rows) of each non-empty batch

    def sink(frame, _batch_id: int) -> None:
        rows = sum(row["rows"] for row in frame.collect())
        if rows:
            finished.append((time.monotonic(), rows))

    running = (
        counted.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="250 milliseconds")
        .start()
    )

    def wait_quiet(seconds: float = 3.0) -> None:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            if running.exception() is not None:
                raise RuntimeError(str(running.exception()))
            last = finished[-1][0] if finished else 0.0
            if time.monotonic() - last >= seconds:
                return
            time.sleep(0.1)
        raise TimeoutError("the query did not go quiet in 900 s")

    results: list[tuple[float, list[int]]] = []
    per_storm = 0
    try:
        wait_quiet()
        for index, lines in enumerate(storms):
            producer = JvmProducer(bootstrap, topic, headers=headers)
            time.sleep(3)  # the producer's JVM starts ahead of its burst, as in bench/streaming.py
            start = len(finished)
            _, _, t_last = producer.send(lines)
            if index == 0:
                deadline = time.monotonic() + 900
                while len(finished) == start:  # its first batch, then no batch for 3 s
                    if running.exception() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the first storm made no batch: {running.exception()}")
                    time.sleep(0.05)
                wait_quiet()
                per_storm = sum(rows for _, rows in finished[start:])
                continue
            deadline = time.monotonic() + 900
            while sum(rows for _, rows in finished[start:]) < per_storm:
                if running.exception() is not None:
                    raise RuntimeError(str(running.exception()))
                if time.monotonic() > deadline:
                    raise TimeoutError("a storm's rows did not all arrive in 900 s")
                time.sleep(0.02)
            done, taken, seen = 0.0, [], 0
            for when, rows in finished[start:]:
                taken.append(rows)
                seen += rows
                if seen >= per_storm:
                    done = when
                    break
            results.append((done - t_last, taken))
            wait_quiet()
    finally:
        running.stop()
    return results


def summary(label: str, batches: list[tuple[int, int, int, int]], stages: str = "read") -> None:
    what = "read stage" if stages == "read" else "addBatch"
    for rows, ms, trigger_ms, cpu_ms in batches:
        print(
            f"  {label}: {rows:>7,} routed rows, {what} {ms:>6,} ms, whole batch {trigger_ms:>6,} ms, "
            f"JVM CPU {cpu_ms:>6,} ms",
            flush=True,
        )
    later = [ms for _, ms, _, _ in batches[1:]] or [batches[0][1]]
    print(f"{label}: {what} min {min(later):,} ms, median {statistics.median(later):,.0f} ms", flush=True)
    if stages == "batch":
        whole = [t for _, _, t, _ in batches[1:]] or [batches[0][2]]
        median = statistics.median(whole)
        print(f"{label}: whole batch (triggerExecution) min {min(whole):,} ms, median {median:,.0f} ms", flush=True)
        if label == "storm":
            print(f"storm: Spark alone, ratio of the median to the 2 s target {median / 2000:.2f}", flush=True)


def compare(by_json: list[tuple[int, ...]], by_headers: list[tuple[int, ...]], stages: str) -> None:
    """The medians of the storm batches routed from the JSON and from the headers (first batch apart), their ratio."""
    for index, what in ((1, "read stage" if stages == "read" else "addBatch"), (2, "whole batch"), (3, "JVM CPU")):
        json_ms = statistics.median(batch[index] for batch in by_json[1:])
        headers_ms = statistics.median(batch[index] for batch in by_headers[1:])
        print(
            f"storm, {what} median: JSON route {json_ms:,.0f} ms, header route {headers_ms:,.0f} ms, "
            f"ratio headers / JSON {headers_ms / json_ms:.2f}",
            flush=True,
        )


def with_route_header(spark, bootstrap: str, topic: str) -> int:
    """How many of ``topic``'s records carry the routing header (kafkaio/headers.py): Spark's Kafka source read
    them as the job does."""
    from pyspark.sql import functions as F

    records = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )
    return records.where(F.exists("headers", lambda h: h["key"] == F.lit(ROUTE_HEADER))).count()


def spark_session(jars: list[str], jit: str, shuffle_partitions: int):
    """Local[2] Spark as the job runs it locally: C1 only (``--jit c1``), RocksDB state with changelog checkpoints."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.jars", ",".join(jars))
        .config("spark.driver.extraJavaOptions", QUICK_START_OPTIONS if jit == "c1" else "")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def live_main(args: argparse.Namespace, jars: list[str], bootstrap: str, lines: list[bytes], topic: str, work: str):
    """``--stages live``: storms and single records published while the query runs; each one's latency."""
    create_topic({"bootstrap.servers": bootstrap}, topic, args.event_partitions)
    spark = spark_session(jars, args.jit, 1)
    print(
        f"kafka-native, JIT {args.jit}, stages live (trigger 250 ms), {args.routing} routing, "
        f"{len(lines):,} records a storm, "
        f"{args.event_partitions} event-topic partitions, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    options = {"bootstrap.servers": bootstrap, "startingOffsets": "earliest", "topic": topic}
    headers = args.routing == "headers"
    results = run_live(spark, options, f"{work}/live", bootstrap, topic, [lines] * args.storms, headers)
    for seconds, taken in results:
        print(f"  storm: {seconds:.2f} s after its last record, batches of {taken} routed rows", flush=True)
    latencies = [seconds for seconds, _ in results]
    median = statistics.median(latencies)
    print(
        f"storm (live): Spark alone, last record -> sink min {min(latencies):.2f} s, median {median:.2f} s", flush=True
    )
    print(f"storm (live): Spark alone, ratio of the median to the 2 s target {median / 2:.2f}", flush=True)
    floors = run_live(spark, options, f"{work}/live", bootstrap, topic, [lines[:1]] * args.floor_batches, headers)
    floor = statistics.median(seconds for seconds, _ in floors)
    print(f"floor (live): one record -> sink median {floor:.2f} s", flush=True)
    print(f"load at the end {os.getloadavg()[0]:.1f}", flush=True)
    spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", choices=("kafka", "kafka-native"), default="kafka-native")
    ap.add_argument("--jit", choices=("c1", "c2"), default="c1", help="c1: as the job runs (C1 only)")
    ap.add_argument(
        "--stages",
        choices=("read", "batch", "live"),
        default="read",
        help="read: the read stage; batch: the job's stages; live: the job's stages, storms published while it runs",
    )
    ap.add_argument("--bootstrap-servers", help="an existing broker (default: start a 1-broker Kafka)")
    ap.add_argument("--partitions", type=int, default=1_000_000, help="metadata partitions of the storm's cluster")
    ap.add_argument("--storm-partitions", type=int, default=100_000)
    ap.add_argument("--event-partitions", type=int, default=8, help="partitions of the event topic")
    ap.add_argument("--storms", type=int, default=4)
    ap.add_argument("--floor-batches", type=int, default=6)
    ap.add_argument(
        "--routing",
        choices=("json", "headers", "both"),
        default="json",
        help="kafka-native: route each line from its JSON, from elrwatch's routing headers, or both in turn",
    )
    ap.add_argument("--rounds", type=int, default=1, help="storm queries of each routing, taken in turn")
    args = ap.parse_args()

    jars = sorted(glob.glob(str(SPARK_JARS / "*.jar")))
    if args.source == "kafka-native" and not jars:
        raise SystemExit(f"--source kafka-native needs Spark's Kafka connector in {SPARK_JARS} (make spark-jars)")
    kafka = None
    if args.bootstrap_servers is None:
        kafka = KafkaCluster(brokers=1).start()
    bootstrap = args.bootstrap_servers or kafka.bootstrap
    work = f"/tmp/elrwatch-read-stage-{uuid.uuid4().hex[:8]}"
    try:
        lines = storm_lines(args.partitions, args.storm_partitions)
        tag = uuid.uuid4().hex[:8]
        if args.routing != "json" and args.source != "kafka-native":
            raise SystemExit("--routing headers and both: Spark's Kafka source, --source kafka-native")
        if args.stages == "live":
            if args.routing == "both":
                raise SystemExit("--stages live takes --routing json or headers")
            if args.source != "kafka-native":
                raise SystemExit("--stages live runs the job's default source, kafka-native")
            if args.storms < 2 or args.floor_batches < 2:
                raise SystemExit("--stages live needs --storms and --floor-batches of 2 or more (the first warms up)")
            live_main(args, jars, bootstrap, lines, f"live-{tag}", work)
            return
        routings = ("json", "headers") if args.routing == "both" else (args.routing,)
        storm_topics = {routing: f"read-stage-storm-{routing}-{tag}" for routing in routings}
        floor_topic = f"read-stage-floor-{tag}"
        for topic in (*storm_topics.values(), floor_topic):
            create_topic({"bootstrap.servers": bootstrap}, topic, args.event_partitions)
        for routing, topic in storm_topics.items():
            for _ in range(args.storms):
                JvmProducer(bootstrap, topic, headers=routing == "headers").send(lines)
        floor_records = args.event_partitions * args.floor_batches
        floor_lines = lines[:: max(1, len(lines) // floor_records)][:floor_records]
        JvmProducer(bootstrap, floor_topic, headers=routings[0] == "headers").send(floor_lines)

        # --stages batch: one state task and the state store, as the job runs locally (streaming/query.py)
        spark = spark_session(jars, args.jit, 1 if args.stages == "batch" else BUCKETS)
        print(
            f"{args.source}, JIT {args.jit}, stages {args.stages}, {args.routing} routing, {len(lines):,} records a "
            f"storm, {args.event_partitions} event-topic partitions, load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        base = {"bootstrap.servers": bootstrap, "startingOffsets": "earliest"}
        for routing, topic in storm_topics.items():
            print(f"storm ({routing}): {with_route_header(spark, bootstrap, topic):,} records with the route header")
        storms: dict[str, list[tuple[int, int, int, int]]] = {routing: [] for routing in routings}
        for round_ in range(args.rounds):
            for routing, topic in storm_topics.items():
                batches = run_query(
                    spark,
                    args.source,
                    {**base, "topic": topic, "maxOffsetsPerTrigger": str(len(lines))},
                    args.storms,
                    f"{work}/storm-{routing}-{round_}",
                    args.stages,
                )
                storms[routing].extend(batches if not storms[routing] else batches[1:])  # one warm-up batch
                whole, cpu = [batch[2] for batch in batches], [batch[3] for batch in batches]
                print(f"  round {round_ + 1}, {routing}: whole batch {whole} ms, JVM CPU {cpu} ms", flush=True)
        for routing in routings:
            summary("storm" if len(routings) == 1 else f"storm ({routing})", storms[routing], args.stages)
        if len(routings) == 2:
            compare(storms["json"], storms["headers"], args.stages)
        floor = run_query(
            spark,
            args.source,
            {**base, "topic": floor_topic, "maxOffsetsPerTrigger": str(args.event_partitions)},
            args.floor_batches,
            f"{work}/floor",
            args.stages,
        )
        summary("floor", floor, args.stages)
        print(f"load at the end {os.getloadavg()[0]:.1f}", flush=True)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if kafka is not None:
            kafka.stop()


if __name__ == "__main__":
    main()
