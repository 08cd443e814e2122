"""Spark alone's restart: the job's stages with none of elrwatch's state, killed and restarted from their checkpoint.

The restart target of `bench/streaming.py --phases storm,restart` (≤ 10 s from the restarted process to the first
batch's records in the gauges) includes what Spark itself costs a new process: its JVM's start, the query's start
and the first batch in a new JVM and Python worker. This measures that part alone, as `bench/read_stage.py` does the
storm's: a child process runs the job's stages (Spark's Kafka source, the JVM routing,
``groupBy(bucket).applyInPandasWithState`` with a state function that only counts rows, RocksDB state with changelog
checkpoints, ``foreachBatch``; local[2], C1 only) on a checkpoint. It is SIGKILLed once every batch it started is
committed, then started again on the same checkpoint while 10 records are published; figure: seconds from the new
process's start to the end of the ``foreachBatch`` holding those records (median of ``--restarts``), with the
child's own marks (Spark ready, query started).

    python bench/restart_alone.py                       # a 1-broker Kafka of its own, 3 restarts
    python bench/restart_alone.py --bootstrap-servers HOST:PORT --restarts 5
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from read_stage import BUCKETS, SPARK_JARS, all_committed, counted_by_bucket, spark_session

from elrwatch.devtools.kafka_cluster import KafkaCluster
from elrwatch.kafkaio.clients import create_topic, make_producer
from elrwatch.kafkaio.produce import produce_lines
from elrwatch.state.eventgen import EventGenerator
from elrwatch.streaming.route import route_in_jvm
from elrwatch.streaming.sources import read_stream

EVENT_PARTITIONS = 8


def child(bootstrap: str, topic: str, checkpoint: str) -> None:
    """The stages as one query; prints a JSON line per mark (seconds since this process started)."""
    started = float(os.environ["RESTART_ALONE_T0"])

    def mark(what: str, **extra: object) -> None:
        print(json.dumps({"mark": what, "s": time.time() - started, **extra}), flush=True)

    jars = sorted(glob.glob(str(SPARK_JARS / "*.jar")))
    spark = spark_session(jars, "c1", 1)
    mark("spark ready")
    options = {"bootstrap.servers": bootstrap, "startingOffsets": "earliest", "topic": topic}
    counted = counted_by_bucket(route_in_jvm(read_stream(spark, "kafka-native", options), BUCKETS))

    def sink(frame, batch_id: int) -> None:
        rows = last = 0
        for row in frame.collect():
            rows += row["rows"]
            last = max(last, row["last"])
        mark("batch", batch=batch_id, rows=rows, last=last)

    query = (
        counted.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="250 milliseconds")
        .start()
    )
    mark("query started")
    query.awaitTermination()


class Child:
    """The child process and the marks it printed."""

    def __init__(self, bootstrap: str, topic: str, checkpoint: str, log: Path) -> None:
        self.t0 = time.time()
        env = {**os.environ, "RESTART_ALONE_T0": repr(self.t0)}
        self.out = log.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                "--bootstrap-servers",
                bootstrap,
                "--topic",
                topic,
                "--checkpoint",
                checkpoint,
            ],
            stdout=subprocess.PIPE,
            stderr=self.out,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.marks: list[dict] = []
        self._lines: queue.Queue[str] = queue.Queue()  # its stdout, read by a thread (a wait's timeout holds)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")  # the child ended

    def wait_for(self, condition, what: str, timeout: float = 300.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"{what}: not within {timeout:.0f} s; see {self.out.name}") from None
            if not line:
                raise RuntimeError(f"the child ended before {what} (exit {self.proc.wait()}); see {self.out.name}")
            if line.startswith("{"):
                mark = json.loads(line)
                self.marks.append(mark)
                if condition(mark):
                    return mark

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.out.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap-servers", help="an existing broker (default: start a 1-broker Kafka)")
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--checkpoint", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.bootstrap_servers, args.topic, args.checkpoint)
        return
    kafka = None if args.bootstrap_servers else KafkaCluster(brokers=1).start()
    bootstrap = args.bootstrap_servers or kafka.bootstrap
    work = Path(f"/tmp/elrwatch-restart-alone-{uuid.uuid4().hex[:8]}")
    work.mkdir()
    topic = f"restart-alone-{work.name[-8:]}"
    opts = {"bootstrap.servers": bootstrap, "topic": topic}
    create_topic(opts, topic, EVENT_PARTITIONS)
    gen = EventGenerator(topics=10, partitions=1000, brokers=6, seed=2)
    producer = make_producer(opts)
    checkpoint = str(work / "ck")
    figures: list[float] = []
    job: Child | None = None
    try:
        print(f"Spark alone's restart (load {os.getloadavg()[0]:.1f})", flush=True)
        produce_lines(opts, topic, gen.bootstrap(), out=None, producer=producer)
        job = Child(bootstrap, topic, checkpoint, work / "first.log")
        job.wait_for(lambda m: m["mark"] == "batch" and m["rows"] > 0, "the first run's first batch")
        for index in range(args.restarts):
            deadline = time.monotonic() + 60
            while not all_committed(checkpoint):  # killed before a commit, the restart would re-run that batch
                if time.monotonic() > deadline:
                    raise TimeoutError("the batches' commits")
                time.sleep(0.05)
            job.kill()
            job = Child(bootstrap, topic, checkpoint, work / f"restart-{index}.log")
            produce_lines(opts, topic, gen.churn(10), out=None, producer=producer)
            done = job.wait_for(lambda m: m["mark"] == "batch" and m["rows"] > 0, "the restart's first batch")
            marks = {m["mark"]: m["s"] for m in job.marks if m["mark"] != "batch"}
            figures.append(done["s"])
            print(
                f"  restart {index + 1}: first batch's records through the sink after {done['s']:.2f} s (Spark ready "
                f"{marks.get('spark ready', float('nan')):.2f} s, query started "
                f"{marks.get('query started', float('nan')):.2f} s; batch {done['batch']}, {done['rows']} rows); load "
                f"{os.getloadavg()[0]:.1f}",
                flush=True,
            )
        print(
            f"Spark alone's restart -> first batch: median {statistics.median(figures):.2f} s, min {min(figures):.2f} s "
            "(the job's target: <= 10 s)",
            flush=True,
        )
    finally:
        if job is not None:
            job.kill()
        producer.close()
        shutil.rmtree(work, ignore_errors=True)
        if kafka is not None:
            kafka.stop()


if __name__ == "__main__":
    main()
