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
    python bench/read_stage.py --source kafka --bootstrap-servers HOST:PORT   # an existing broker
    python bench/read_stage.py --stages wait --partitions 100000 --storm-partitions 20000   # one batch per storm?

* ``--stages wait``: what Spark's Kafka source options ``minOffsetsPerTrigger`` / ``maxTriggerDelay`` (the job's
  ``--min-records-per-batch`` / ``--max-batch-delay``) do, in one run: for no wait (Spark's default) and for each
  ``--batch-waits MIN:DELAY`` (MIN ``storm``: the storm's record count), a ``--stages live`` query over the storms
  (each storm's batches and last record -> sink), then freshness at ``--rate`` events/s (one event-topic
  partition; each event's send -> the end of the ``foreachBatch`` holding it, p50 / p99, the first 5 s apart).

``bench/streaming.py`` runs this script beside the job (Spark alone in the same run): ``--lines-file`` publishes its
storm's records, ``--topic`` with ``--stages batch`` reads an existing topic (its churn) ``--max-offsets-per-trigger``
a batch, and ``--json-out`` writes the figures it parses.

Without ``--bootstrap-servers`` it starts a 1-broker Kafka (devtools/kafka_cluster.py). Two queries, one Spark
session: ``--storms`` batches of a broker's fence (≈ ``--storm-partitions`` PartitionChangeRecords, published by
Kafka's ConsoleProducer, one storm a batch), then ``--floor-batches`` batches of about one record per partition of
the event topic (the floor). Prints each batch's rows and read stage (ms), then min / median of each query
(the first storm batch, which starts the Python workers and compiles Spark's code, apart).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
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
from elrwatch.kafkaio.clients import create_topic, make_producer
from elrwatch.kafkaio.headers import ROUTE_HEADER
from elrwatch.state.eventgen import EventGenerator
from elrwatch.streaming.accelerators import QUICK_START_OPTIONS
from elrwatch.streaming.config import parse_trigger
from elrwatch.streaming.route import group_keys, route_in_jvm
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


def make_count_rows(cost_us: float = 0.0):
    """The state function of ``--stages batch`` / ``live``: counts its rows (touching the raw lines, as a bucket reads
    them), keeps the highest event-topic offset it saw (which tells a freshness run which events a batch held), and
    names the Python worker that ran it (its pid: which worker Spark gave each bucket). ``cost_us``: pure-Python CPU
    time spent per row while holding the GIL (``--state-cost-us``), a stand-in for a bucket's apply with none of
    elrwatch's code."""

    def count_rows(key: tuple, frames, state):
        import os
        import time

        import pandas as pd

        rows, last = 0, -1
        for frame in frames:
            rows += len(frame)
            frame["rec"].to_numpy()
            if len(frame):
                last = max(last, int(frame["seq"].max()))
        if cost_us and rows:
            until = time.thread_time() + rows * cost_us / 1e6
            while time.thread_time() < until:
                pass
        state.update(((state.get[0] if state.exists else 0) + rows,))
        yield pd.DataFrame({"bucket": [int(key[0])], "rows": [rows], "last": [last], "worker": [os.getpid()]})

    return count_rows


def counted_by_bucket(events, cost_us: float = 0.0, state_tasks: int = 1, buckets: int = BUCKETS):
    """The job's state stage without elrwatch's state: ``groupBy(bucket)`` → ``applyInPandasWithState`` of a state
    function that only counts rows (`make_count_rows`). With several state tasks each bucket is grouped by the
    job's key for it (`route.group_keys`: bucket ``b`` in task ``b % state_tasks``), so the tasks share the buckets
    evenly, as the job's do."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    if state_tasks > 1:
        keys = group_keys(buckets, state_tasks)  # the output's ``bucket`` is then the bucket's key
        events = events.withColumn("bucket", F.element_at(F.array(*map(F.lit, keys)), F.col("bucket") + 1))
    return events.groupBy("bucket").applyInPandasWithState(
        make_count_rows(cost_us),
        "bucket int, rows long, last long, worker long",
        "rows long",
        "append",
        GroupStateTimeout.NoTimeout,
    )


def all_committed(checkpoint: str) -> bool:
    """Every micro-batch Spark started on ``checkpoint`` (its offsets file) is committed (its commit file)."""

    def newest(folder: str) -> int:
        with contextlib.suppress(FileNotFoundError):
            return max((int(n) for n in os.listdir(os.path.join(checkpoint, folder)) if n.isdigit()), default=-1)
        return -1

    started = newest("offsets")
    return started >= 0 and newest("commits") == started


def jvm_cpu_ms(spark) -> int:
    """CPU time (user + system, ms) Spark's JVM used so far: on a loaded machine a batch's wall time grows with the
    load, its CPU time much less."""
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 // os.sysconf("SC_CLK_TCK")


def run_query(
    spark,
    source: str,
    options: dict[str, str],
    batches: int,
    checkpoint: str,
    stages: str = "read",
    buckets: int = BUCKETS,
) -> list[tuple[int, int, int, int]]:
    """(rows, addBatch ms, triggerExecution ms, the JVM's CPU ms) of each of the first ``batches`` non-empty
    micro-batches (the CPU time from the previous batch's end, seen by polling, to its end)."""
    if source == "kafka":
        events = read_stream(spark, source, {**options, ROUTE_BUCKETS_OPTION: str(buckets)})
    else:
        events = route_in_jvm(read_stream(spark, source, options), buckets)
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


class LiveQuery:
    """The job's stages (``kafka-native``, JVM routing, ``count_rows``, ``foreachBatch``) as one query running with
    the job's storm trigger; the end of each non-empty ``foreachBatch`` is recorded as it happens."""

    def __init__(
        self,
        spark,
        options: dict[str, str],
        checkpoint: str,
        buckets: int = BUCKETS,
        trigger: str = "250 milliseconds",
        cost_us: float = 0.0,
        state_tasks: int = 1,
    ) -> None:
        routed = route_in_jvm(read_stream(spark, "kafka-native", options), buckets)
        counted = counted_by_bucket(routed, cost_us, state_tasks, buckets)
        self.finished: list[tuple[float, int, int]] = []  # (monotonic end of the sink, routed rows, last offset)
        self.workers: list[dict[int, int]] = []  # per non-empty batch: bucket -> the Python worker (pid) that ran it

        def sink(frame, _batch_id: int) -> None:
            rows, last, workers = 0, -1, {}
            for row in frame.collect():
                rows += row["rows"]
                last = max(last, row["last"])
                workers[row["bucket"]] = row["worker"]
            if rows:
                self.workers.append(workers)
                self.finished.append((time.monotonic(), rows, last))

        self.running = (
            counted.writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=trigger)
            .start()
        )

    def check(self) -> None:
        """Raise the query's failure, if it failed."""
        if self.running.exception() is not None:
            raise RuntimeError(str(self.running.exception()))

    def wait_until(self, condition, what: str, timeout: float = 900.0, every: float = 0.02) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            self.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout:.0f} s")
            time.sleep(every)

    def wait_quiet(self, seconds: float = 3.0) -> None:
        """Until no batch has ended for ``seconds``."""

        def quiet() -> bool:
            last = self.finished[-1][0] if self.finished else 0.0
            return time.monotonic() - last >= seconds

        self.wait_until(quiet, "the query going quiet", every=0.1)

    def stop(self) -> None:
        self.running.stop()


def run_live(
    spark,
    options: dict[str, str],
    checkpoint: str,
    bootstrap: str,
    topic: str,
    storms: list[list[bytes]],
    buckets: int = BUCKETS,
    headers: bool = False,
    cost_us: float = 0.0,
    swaps: list[tuple[int, int]] | None = None,
    state_tasks: int = 1,
) -> list[tuple[float, list[int]]]:
    """For each storm (published while the ``--stages batch`` query runs with a 250 ms trigger): (seconds from its
    last acknowledged record to the end of the foreachBatch holding its last row, the routed rows of each batch it
    took). The first storm also learns how many routed rows a storm makes: its batches until none for 3 s more than
    the source's ``maxTriggerDelay`` (the longest a batch of its last records may wait). ``swaps`` gets (buckets
    run by another Python worker than in their previous batch, buckets run) over the query's batches."""
    query = LiveQuery(spark, options, checkpoint, buckets, cost_us=cost_us, state_tasks=state_tasks)
    quiet_s = 3.0 + trigger_delay_s(options)
    finished = query.finished
    results: list[tuple[float, list[int]]] = []
    per_storm = 0
    try:
        query.wait_quiet()
        for index, lines in enumerate(storms):
            producer = JvmProducer(bootstrap, topic, headers=headers)
            time.sleep(3)  # the producer's JVM starts ahead of its burst, as in bench/streaming.py
            start = len(finished)
            _, _, t_last = producer.send(lines)
            if index == 0:  # its first batch, then no batch for 3 s
                query.wait_until(lambda start=start: len(finished) > start, "the first storm's first batch")
                query.wait_quiet(quiet_s)
                per_storm = sum(rows for _, rows, _ in finished[start:])
                continue
            query.wait_until(
                lambda start=start, want=per_storm: sum(rows for _, rows, _ in finished[start:]) >= want,
                "a storm's rows",
            )
            done, taken, seen = 0.0, [], 0
            for when, rows, _ in finished[start:]:
                taken.append(rows)
                seen += rows
                if seen >= per_storm:
                    done = when
                    break
            results.append((done - t_last, taken))
            query.wait_quiet()
    finally:
        query.stop()
    if swaps is not None:
        swaps.append(worker_swaps(query.workers))
    return results


def worker_swaps(batches: list[dict[int, int]]) -> tuple[int, int]:
    """(buckets run by another Python worker than in their previous batch, buckets run after their first batch):
    how often a bucket's state would have to move between workers if each worker kept the buckets it ran."""
    last: dict[int, int] = {}
    moved = runs = 0
    for workers in batches:
        for bucket, worker in workers.items():
            if bucket in last:
                runs += 1
                moved += last[bucket] != worker
            last[bucket] = worker
    return moved, runs


def trigger_delay_s(options: dict[str, str]) -> float:
    """The source's ``maxTriggerDelay`` in seconds (0 without ``minOffsetsPerTrigger``, when Spark ignores it)."""
    if not options.get("minOffsetsPerTrigger"):
        return 0.0
    return int(parse_trigger(options.get("maxTriggerDelay", "15m")).removesuffix(" milliseconds")) / 1000


def run_freshness(
    spark,
    options: dict[str, str],
    checkpoint: str,
    bootstrap: str,
    topic: str,
    rate: float,
    seconds: float,
    buckets: int = BUCKETS,
    warmup: float = 5.0,
) -> list[float]:
    """Churn events sent at ``rate``/s for ``seconds`` (kafka-python, acks=1, as bench/streaming.py's freshness
    phase) to ``topic``, a new topic of one partition (event i at offset i), while the query runs: each event's
    seconds from its send to the end of the ``foreachBatch`` holding it, sorted (the first ``warmup`` s apart)."""
    gen = EventGenerator(topics=10, partitions=1000, brokers=6, seed=2)
    for _ in gen.bootstrap():
        pass
    churn = gen.churn(10**9)
    query = LiveQuery(spark, options, checkpoint, buckets)
    opts = {"bootstrap.servers": bootstrap, "topic": topic}
    producer = make_producer(opts, acks=1, linger_ms=50, max_in_flight_requests_per_connection=1)
    sent: list[float] = []  # monotonic send time of event i
    try:
        query.wait_quiet()
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            delay = started + len(sent) / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            sent.append(time.monotonic())
            producer.send(topic, key=b"x", value=next(churn))
            if len(sent) % 20 == 0:
                producer.flush()
        producer.flush()
        last = len(sent) - 1
        query.wait_until(lambda: bool(query.finished) and query.finished[-1][2] >= last, "the last fresh event")
    finally:
        producer.close()
        query.stop()
    latencies, batch = [], 0
    for offset, when in enumerate(sent):
        while query.finished[batch][2] < offset:
            batch += 1
        if when >= started + warmup:
            latencies.append(query.finished[batch][0] - when)
    return sorted(latencies)


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The ``fraction`` percentile of ascending values, as bench/streaming.py's freshness phase takes it."""
    return sorted_values[max(0, int(len(sorted_values) * fraction) - 1)]


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


def storm_figures(results: list[tuple[float, list[int]]], label: str) -> dict[str, object]:
    """Print each storm's latency and batches, then min / median; the figures for ``--json-out``."""
    for seconds, taken in results:
        print(f"  {label}: {seconds:.2f} s after its last record, batches of {taken} routed rows", flush=True)
    latencies = [seconds for seconds, _ in results]
    median = statistics.median(latencies)
    one_batch = sum(len(taken) == 1 for _, taken in results)
    print(
        f"{label}: Spark alone, last record -> sink min {min(latencies):.2f} s, median {median:.2f} s; "
        f"{one_batch} of {len(results)} storms in one batch",
        flush=True,
    )
    return {
        "storm_s": latencies,
        "storm_median_s": median,
        "storm_batches": [taken for _, taken in results],
        "storms_in_one_batch": one_batch,
    }


def live_main(args: argparse.Namespace, jars: list[str], bootstrap: str, lines: list[bytes], topic: str, work: str):
    """``--stages live``: storms and single records published while the query runs; each one's latency."""
    create_topic({"bootstrap.servers": bootstrap}, topic, args.event_partitions)
    spark = spark_session(jars, args.jit, args.state_tasks)
    print(
        f"kafka-native, JIT {args.jit}, stages live (trigger 250 ms), {args.routing} routing, "
        f"{len(lines):,} records a storm, "
        f"{args.event_partitions} event-topic partitions, {args.state_tasks} state task(s), state function "
        f"{args.state_cost_us:g} us of Python CPU a row, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    options = {"bootstrap.servers": bootstrap, "startingOffsets": "earliest", "topic": topic}
    headers = args.routing == "headers"
    swaps: list[tuple[int, int]] = []
    results = run_live(
        spark,
        options,
        f"{work}/live",
        bootstrap,
        topic,
        [lines] * args.storms,
        args.buckets,
        headers=headers,
        cost_us=args.state_cost_us,
        swaps=swaps,
        state_tasks=args.state_tasks,
    )
    figures = storm_figures(results, "storm (live)")
    moved, runs = swaps[0]
    figures["worker_swaps"], figures["bucket_runs"] = moved, runs
    print(
        f"storm (live): {moved} of {runs} bucket runs on another Python worker than the bucket's previous batch",
        flush=True,
    )
    median = figures["storm_median_s"]
    print(f"storm (live): Spark alone, ratio of the median to the 2 s target {median / 2:.2f}", flush=True)
    if args.floor_batches:
        floors = run_live(
            spark,
            options,
            f"{work}/live",
            bootstrap,
            topic,
            [lines[:1]] * args.floor_batches,
            args.buckets,
            headers=headers,
            cost_us=args.state_cost_us,
            state_tasks=args.state_tasks,
        )
        figures["floor_median_s"] = statistics.median(seconds for seconds, _ in floors)
        print(f"floor (live): one record -> sink median {figures['floor_median_s']:.2f} s", flush=True)
    figures["load_end"] = os.getloadavg()[0]
    print(f"load at the end {figures['load_end']:.1f}", flush=True)
    spark.stop()
    return figures


def batch_waits(text: str, storm_records: int) -> list[tuple[int, str]]:
    """``--batch-waits``: ``MIN:DELAY,...`` (MIN ``storm``: the storm's record count) as (min offsets, delay)."""
    waits = []
    for item in filter(None, text.split(",")):
        least, _, delay = item.partition(":")
        if not delay:
            raise SystemExit(f"--batch-waits: MIN:DELAY, e.g. storm:500ms, got {item!r}")
        waits.append((storm_records if least == "storm" else int(least), delay))
    return waits


def wait_main(args: argparse.Namespace, jars: list[str], bootstrap: str, lines: list[bytes], tag: str, work: str):
    """``--stages wait``: for no wait, then each ``--batch-waits``, the storms (``--stages live``) and freshness at
    ``--rate``; one Spark session, a new topic and query for each."""
    spark = spark_session(jars, args.jit, 1)
    print(
        f"kafka-native, JIT {args.jit}, stages wait (trigger 250 ms), {len(lines):,} records a storm, "
        f"{args.event_partitions} event-topic partitions, freshness at {args.rate:g}/s for {args.seconds:g} s, "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    variants: list[tuple[str, dict[str, str]]] = [("no wait", {})]
    for least, delay in batch_waits(args.batch_waits, len(lines)):
        label = f"minOffsetsPerTrigger {least}, maxTriggerDelay {delay}"
        variants.append((label, {"minOffsetsPerTrigger": str(least), "maxTriggerDelay": delay}))
    out: dict[str, object] = {}
    for index, (label, wait) in enumerate(variants):
        storm_topic, fresh_topic = f"wait-storm-{tag}-{index}", f"wait-fresh-{tag}-{index}"
        create_topic({"bootstrap.servers": bootstrap}, storm_topic, args.event_partitions)
        create_topic({"bootstrap.servers": bootstrap}, fresh_topic, 1)
        base = {"bootstrap.servers": bootstrap, "startingOffsets": "earliest", **wait}
        print(f"{label}: load {os.getloadavg()[0]:.1f}", flush=True)
        results = run_live(
            spark,
            {**base, "topic": storm_topic},
            f"{work}/wait-storm-{index}",
            bootstrap,
            storm_topic,
            [lines] * args.storms,
            args.buckets,
        )
        figures = storm_figures(results, f"{label}, storm")
        latencies = run_freshness(
            spark,
            {**base, "topic": fresh_topic},
            f"{work}/wait-fresh-{index}",
            bootstrap,
            fresh_topic,
            args.rate,
            args.seconds,
            args.buckets,
        )
        figures["fresh_p50_s"] = latencies[len(latencies) // 2]
        figures["fresh_p99_s"] = latencies[int(len(latencies) * 0.99) - 1]
        figures["load"] = os.getloadavg()[0]
        print(
            f"{label}: freshness at {args.rate:g}/s (send -> sink) p50 {figures['fresh_p50_s']:.2f} s, "
            f"p99 {figures['fresh_p99_s']:.2f} s; load {figures['load']:.1f}",
            flush=True,
        )
        out[label] = figures
    spark.stop()
    return out


def cap_main(args: argparse.Namespace, jars: list[str], bootstrap: str, work: str) -> dict[str, object]:
    """``--stages batch --topic T``: Spark alone's events/s cap over an existing topic (e.g. bench/streaming.py's
    churn) read ``--max-offsets-per-trigger`` a batch, back to back: the routed rows of the batches after the first
    over their ``triggerExecution``."""
    spark = spark_session(jars, args.jit, 1)
    print(
        f"{args.source}, JIT {args.jit}, stages batch, topic {args.topic} read {args.max_offsets_per_trigger:,} a "
        f"batch, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    options = {
        "bootstrap.servers": bootstrap,
        "startingOffsets": "earliest",
        "topic": args.topic,
        "maxOffsetsPerTrigger": str(args.max_offsets_per_trigger),
    }
    batches = run_query(spark, args.source, options, args.batches, f"{work}/cap", "batch", args.buckets)
    summary("batch", batches, "batch")
    later = batches[1:] or batches
    rate = sum(batch[0] for batch in later) / (sum(batch[2] for batch in later) / 1000)  # rows / triggerExecution
    print(f"Spark alone's cap: {rate:,.0f} events/s (the batches after the first)", flush=True)
    spark.stop()
    return {"batches": batches, "events_per_s": rate, "load_end": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", choices=("kafka", "kafka-native"), default="kafka-native")
    ap.add_argument("--jit", choices=("c1", "c2"), default="c1", help="c1: as the job runs (C1 only)")
    ap.add_argument(
        "--stages",
        choices=("read", "batch", "live", "wait"),
        default="read",
        help="read: the read stage; batch: the job's stages; live: the job's stages, storms published while it "
        "runs; wait: live and freshness without and with --batch-waits",
    )
    ap.add_argument("--bootstrap-servers", help="an existing broker (default: start a 1-broker Kafka)")
    ap.add_argument("--partitions", type=int, default=1_000_000, help="metadata partitions of the storm's cluster")
    ap.add_argument("--storm-partitions", type=int, default=100_000)
    ap.add_argument("--lines-file", help="the storm's records, one a line (default: a fence on --partitions)")
    ap.add_argument("--event-partitions", type=int, default=8, help="partitions of the event topic")
    ap.add_argument("--buckets", type=int, default=BUCKETS, help="the routing's buckets")
    ap.add_argument("--storms", type=int, default=4)
    ap.add_argument("--floor-batches", type=int, default=6, help="live: one-record batches after the storms (0: none)")
    ap.add_argument(
        "--routing",
        choices=("json", "headers", "both"),
        default="json",
        help="kafka-native: route each line from its JSON, from elrwatch's routing headers, or both in turn",
    )
    ap.add_argument("--rounds", type=int, default=1, help="storm queries of each routing, taken in turn")
    ap.add_argument("--topic", help="batch: read this existing topic (Spark alone's cap) instead of storms")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=100_000, help="batch with --topic: a batch's cap")
    ap.add_argument("--batches", type=int, default=3, help="batch with --topic: batches read")
    ap.add_argument(
        "--batch-waits",
        default="storm:500ms,storm:1s",
        help="wait: MIN:DELAY,... minOffsetsPerTrigger and maxTriggerDelay to measure beside no wait (MIN storm: "
        "the storm's record count)",
    )
    ap.add_argument("--rate", type=float, default=1000.0, help="wait: freshness events/s")
    ap.add_argument("--seconds", type=float, default=35.0, help="wait: freshness duration (the first 5 s apart)")
    ap.add_argument(
        "--state-tasks",
        type=int,
        default=1,
        help="live: spark.sql.shuffle.partitions, the state stage's tasks (the job runs 1 in local mode)",
    )
    ap.add_argument(
        "--state-cost-us",
        type=float,
        default=0.0,
        help="live: pure-Python CPU (µs) the state function spends per row holding the GIL, a stand-in for a "
        "bucket's apply (elrwatch's: ≈ 15 µs a storm row at 1M partitions)",
    )
    ap.add_argument("--json-out", help="write the figures here as JSON (live, wait, batch with --topic)")
    args = ap.parse_args()

    jars = sorted(glob.glob(str(SPARK_JARS / "*.jar")))
    if args.source == "kafka-native" and not jars:
        raise SystemExit(f"--source kafka-native needs Spark's Kafka connector in {SPARK_JARS} (make spark-jars)")
    if args.stages in ("live", "wait") and args.source != "kafka-native":
        raise SystemExit(f"--stages {args.stages} runs the job's default source, kafka-native")
    if args.stages in ("live", "wait") and args.storms < 2:
        raise SystemExit(f"--stages {args.stages} needs --storms of 2 or more (the first warms up)")
    if args.stages == "live" and args.floor_batches == 1:
        raise SystemExit("--stages live needs --floor-batches of 0 or 2 or more (the first warms up)")
    if args.topic and args.stages != "batch":
        raise SystemExit("--topic is for --stages batch")
    if (args.state_tasks != 1 or args.state_cost_us) and args.stages != "live":
        raise SystemExit("--state-tasks and --state-cost-us are for --stages live")
    kafka = None
    if args.bootstrap_servers is None:
        kafka = KafkaCluster(brokers=1).start()
    bootstrap = args.bootstrap_servers or kafka.bootstrap
    work = f"/tmp/elrwatch-read-stage-{uuid.uuid4().hex[:8]}"
    figures: dict[str, object] | None = None
    try:
        if args.lines_file:
            lines = [line for line in Path(args.lines_file).read_bytes().splitlines() if line]
        else:
            lines = storm_lines(args.partitions, args.storm_partitions)
        tag = uuid.uuid4().hex[:8]
        if args.routing != "json" and args.source != "kafka-native":
            raise SystemExit("--routing headers and both: Spark's Kafka source, --source kafka-native")
        if args.routing == "both" and args.stages == "live":
            raise SystemExit("--stages live takes --routing json or headers")
        if args.routing != "json" and (args.stages == "wait" or args.topic):
            raise SystemExit(f"--stages {args.stages} publishes or reads its own records: --routing json only")
        if args.stages == "live":
            figures = live_main(args, jars, bootstrap, lines, f"live-{tag}", work)
        elif args.stages == "wait":
            figures = wait_main(args, jars, bootstrap, lines, tag, work)
        elif args.topic:
            figures = cap_main(args, jars, bootstrap, work)
        else:
            storms_and_floor(args, jars, bootstrap, lines, tag, work)
        if args.json_out and figures is not None:
            Path(args.json_out).write_text(json.dumps(figures))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if kafka is not None:
            kafka.stop()


def storms_and_floor(
    args: argparse.Namespace, jars: list[str], bootstrap: str, lines: list[bytes], tag: str, work: str
):
    """``--stages read`` / ``batch``: ``--storms`` storm batches (per routing, ``--rounds`` times in turn), then
    ``--floor-batches`` of a few records."""
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
        args.buckets,
    )
    summary("floor", floor, args.stages)
    print(f"load at the end {os.getloadavg()[0]:.1f}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
