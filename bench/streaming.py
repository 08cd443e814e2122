"""Streaming job benchmarks against a real 1-broker Apache Kafka (devtools/kafka_cluster.py), each figure printed
with its target.

    python bench/streaming.py                      # all phases (throughput, freshness, storm, restart)
    python bench/streaming.py --phases throughput --partitions 1000000 --events 300000
    python bench/streaming.py --phases throughput --partitions 10000    # the small state, quickly
    python bench/streaming.py --phases storm,restart --partitions 1000000 --storm-partitions 100000

* throughput: sustained events/s of `elrwatch stream` on a state of ``--partitions`` partitions (the storm
  phase's cluster). The job loads the cluster (one batch, ``--available-now``), then restarts from its checkpoint
  over a backlog of ``--events`` churn records (leader moves) read 100k a batch (``--max-records-per-batch``):
  events/s over the churn batches after the first (the load and the restart not counted), with the churn's RSS
  peak and batch count; ratios to raw consumption of the same churn records (a copy topic of the same layout) by
  Kafka's JVM consumer (ConsumerPerformance: the target's) and by kafka-python, in the same run.
* freshness: events produced at 1k/s; latency = first time the store's last event time covers the event − the
  wall-clock time it was sent (its timestamp only identifies it: the generator's clock can run ahead of the wall
  clock after the bootstrap); p50/p99 (store polled every 50 ms).
* storm: a cluster of ``--partitions`` partitions is loaded, then one broker is fenced: the controller-style
  PartitionChangeRecords touch ~``--storm-partitions`` partitions. Figure: seconds from the last storm record
  produced to the store (last event time) and the metrics port (last event time, fenced broker gauge) both
  showing it; each of the two is printed too (the gauges, which alerts read, come before the store write).
  RSS: peak resident memory of the whole job (Python driver + JVM + Python workers) with that state.
  Then, after ``--idle-seconds`` of nothing (default 75: Spark stops Python workers idle for 60 s), one record to
  the gauges: the first batch of an incident after a quiet minute.
* Spark alone, beside the job in the same run (the storm and throughput phases, on the same broker and event-topic
  layout): ``bench/read_stage.py``, the job's own stages (Spark's Kafka source, the JVM routing,
  ``groupBy(bucket).applyInPandasWithState`` with a state function that only counts rows, RocksDB state,
  ``foreachBatch``) as a subprocess. Storm: ``--stages live`` over the settled storm's own records (same trigger,
  published while its query runs; median of 3 after a warm-up storm), from the last acked record to the end of the
  ``foreachBatch`` holding its last row. Throughput: ``--stages batch`` over the churn's copy topic, read 100k a batch:
  Spark alone's events/s cap. Each figure is printed with the job's ratio to it.
* restart: the job is SIGKILLed and restarted from its checkpoint with the big state; seconds from the
  restart to the first completed batch. ``--cold-restart`` drops the page cache first (root), as on a rebooted
  node: every jar, module, archive and state file is read from disk again.

The jobs map the JVM class archive a first clean stop writes (`streaming/jvm_archive.py`): before the phases,
a short clean run writes it if this machine has none yet, as an operator's first stop (or the image) would.
``--no-class-archive`` measures without it (the jobs are given a ``--jvm-class-archive-dir`` that cannot exist, so
they start without one and write none).

The throughput, storm and restart phases also print the RSS by process kind (Python driver, JVM, Python workers,
...) and the job's batch log lines, which say where each batch's time went (Spark run incl. each bucket's state
load with cache hit / catch-up / miss, apply + documents, state save; driver merge; store write). Job options can
be changed through the environment (e.g. ELRWATCH_STATE_MODE=blob, ELRWATCH_BUCKETS=4).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from consume_raw import JvmProducer, consume_all, consume_all_jvm  # noqa: E402
from read_stage import all_committed  # noqa: E402

from elrwatch.devtools.kafka_cluster import KafkaCluster, free_port  # noqa: E402
from elrwatch.devtools.processes import cli_options, elrwatch_command, remove_workdir  # noqa: E402
from elrwatch.devtools.spark_cluster import SparkCluster  # noqa: E402
from elrwatch.kafkaio.clients import create_topic, make_producer  # noqa: E402
from elrwatch.kafkaio.produce import produce_lines  # noqa: E402
from elrwatch.state.eventgen import EventGenerator  # noqa: E402
from elrwatch.store import StatusStore  # noqa: E402
from elrwatch.streaming.metrics import scrape  # noqa: E402

BATCH_LINE = re.compile(r"^(\S+ \S+) INFO elrwatch.stream: batch (\d+): .* events=(\d+)")


def _unexeced_jvm_child(parent: int, child: int, comm: dict[int, str]) -> bool:
    """Whether ``child`` is a fork of the JVM ``parent`` that has not exec'd yet (it shares the JVM's memory).

    Same executable *and* same command line: a JVM that the parent JVM started (a standalone worker's executor)
    runs the same ``java`` but exec'd its own command line, and its memory is its own."""
    if comm.get(parent) != "java":
        return False
    try:
        if os.readlink(f"/proc/{child}/exe") != os.readlink(f"/proc/{parent}/exe"):
            return False
        return Path(f"/proc/{child}/cmdline").read_bytes() == Path(f"/proc/{parent}/cmdline").read_bytes()
    except OSError:
        return False


def rss_tree_mb(pid: int, top: list[tuple[float, int, str]] | None = None) -> float:
    """Resident memory of a process and all its descendants, MB (from /proc).

    A child of the JVM that is still the JVM (same executable: Hadoop's shell commands are spawned with vfork,
    and until the exec the child shares the JVM's memory, which /proc reports again as the child's RSS; its
    ``comm`` is the forking thread's name, e.g. "stream executio") is not counted: it would add the JVM's
    0.6-0.8 GB a second time for a few milliseconds.
    """
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    comm: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                text = fh.read()
            head, tail = text.rsplit(")", 1)
            fields = tail.split()
            ppid = int(fields[1])
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
            comm[int(entry)] = head.split("(", 1)[1]
            children.setdefault(ppid, []).append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        if top is not None:
            top.append((rss.get(p, 0) / 1e6, p, comm.get(p, "?")))
        for child in children.get(p, []):
            if not _unexeced_jvm_child(p, child, comm):
                todo.append(child)
    return total / 1e6


def _kind(pid: int, root: int) -> str:
    if pid == root:
        return "python driver"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "java" in cmd.split(" ", 1)[0]:
        if "CoarseGrainedExecutorBackend" in cmd:
            return "executor jvm"
        if "deploy.worker.Worker" in cmd:
            return "worker jvm"
        return "jvm"
    if "pyspark.daemon" in cmd:
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if b"ELRWATCH_PYTHON_POOL=state" in fh.read():
                    return "python state workers"
        except OSError:
            pass
        return "python workers"
    if "streaming_source_runner" in cmd or "pyspark" in cmd:
        return "python source/planner"
    return "other"


def rss_breakdown(root: int, extra_roots: list[int] | tuple[int, ...] = ()) -> dict[str, float]:
    """RSS (MB) of the job's process tree by kind (python driver, jvm, python workers, ...), and its PSS total
    (forked Python workers share their parent's pages: RSS counts them once per process, PSS divides them).
    ``extra_roots``: a standalone cluster's workers, counted with their executors and Python workers."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    out: dict[str, float] = {}
    pss = 0.0
    todo = [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                fields = {
                    line.split(":")[0]: int(line.split()[1]) for line in fh if line.split(":")[0] in ("Rss", "Pss")
                }
        except (OSError, IndexError, ValueError):
            continue
        kind = _kind(pid, root)
        out[kind] = out.get(kind, 0.0) + fields.get("Rss", 0) / 1000
        out[kind + " (n)"] = out.get(kind + " (n)", 0) + 1
        pss += fields.get("Pss", 0) / 1000
    out["PSS total"] = pss
    for extra in extra_roots:
        for key, value in rss_breakdown(extra).items():
            key = key.replace("python driver", "worker jvm")  # the root of its own tree: a worker, not the driver
            out[key] = out.get(key, 0.0) + value
    return out


class RssPeak:
    """The highest RSS of a job's process tree over repeated samples, with its breakdown by process kind and the
    biggest processes at that moment (sampled when the peak is reached, since a transient peak is gone after)."""

    def __init__(self, root: int, baseline_mb: float = 0.0, extra_roots: list[int] | None = None) -> None:
        self.root = root
        self.extra_roots = extra_roots or []  # a standalone cluster's workers (their executors and Python workers)
        self.mb = baseline_mb
        self.parts: dict[str, float] = {}
        self.biggest: list[tuple[float, int, str]] = []

    def sample(self) -> None:
        processes: list[tuple[float, int, str]] = []
        now = rss_tree_mb(self.root, processes)
        workers = sum(rss_tree_mb(root, processes) for root in self.extra_roots)
        now += workers
        if now > self.mb:
            self.mb, self.parts = now, rss_breakdown(self.root, self.extra_roots)
            self.biggest = sorted(processes, reverse=True)[:4]

    def print_at_peak(self, label: str) -> None:
        """The breakdown and the biggest processes at the peak, if a sample exceeded the baseline."""
        if self.parts:
            print_breakdown(f"at {label}", self.root, self.parts)
            biggest = ", ".join(f"{comm} {mb:,.0f} MB" for mb, _pid, comm in self.biggest)
            print(f"  biggest processes at {label}: {biggest}", flush=True)


def print_breakdown(
    label: str, root: int, parts: dict[str, float] | None = None, extra_roots: list[int] | tuple[int, ...] = ()
) -> None:
    parts = parts or rss_breakdown(root, extra_roots)
    text = ", ".join(
        f"{k} {v:,.0f} MB ({int(parts[k + ' (n)'])})"
        for k, v in parts.items()
        if not k.endswith("(n)") and k != "PSS total"
    )
    print(f"  {label}: {text}; PSS total {parts['PSS total']:,.0f} MB", flush=True)


EXTRA_JOB_ARGS: list[str] = []  # --job-args
STORM_PRODUCER = ["jvm"]  # --storm-producer
ROUTE_HEADERS = [True]  # --no-route-headers: the storm's records without elrwatch's routing headers (the JSON route)
EVENT_PARTITIONS = [0]  # --event-partitions (0: one per 125k metadata partitions, at least 2)


class Job:
    """`elrwatch stream` subprocess with its log."""

    def __init__(self, workdir: str, name: str, **options: object) -> None:
        """``elrwatch stream`` with ``options`` (`cli_options`), then --job-args."""
        self.log_path = os.path.join(workdir, f"{name}-{time.monotonic_ns()}.log")
        self.log = open(self.log_path, "w")  # noqa: SIM115
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            elrwatch_command("stream", *cli_options(**options), *EXTRA_JOB_ARGS),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "ELRWATCH_SPARK_DRIVER_MEMORY": os.environ.get("ELRWATCH_SPARK_DRIVER_MEMORY", "2g")},
        )

    def batches(self) -> list[tuple[float, int, int]]:
        """(epoch seconds, batch id, total events) per logged batch."""
        out = []
        for line in Path(self.log_path).read_text(errors="replace").splitlines():
            m = BATCH_LINE.match(line)
            if m:
                stamp = time.mktime(time.strptime(m.group(1).split(",")[0], "%Y-%m-%d %H:%M:%S"))
                stamp += int(m.group(1).split(",")[1]) / 1000
                out.append((stamp, int(m.group(2)), int(m.group(3))))
        return out

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def print_batches(self, label: str) -> None:
        """The job's per-batch log lines (where each batch's time went: state load/process/save, store)."""
        for line in Path(self.log_path).read_text(errors="replace").splitlines():
            if "elrwatch.stream: " in line:
                print(f"  [{label}] {line[:400]}", flush=True)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        self.log.close()

    def tail(self) -> str:
        return Path(self.log_path).read_text(errors="replace")[-3000:]


def fast_producer(opts: dict[str, str]):
    return make_producer(opts, acks=1, linger_ms=50, max_in_flight_requests_per_connection=1)


def poll(cond, timeout: float, what: str, job: Job | None = None, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        if job is not None and job.proc.poll() is not None:
            raise RuntimeError(f"job exited before {what}:\n{job.tail()}")
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {timeout}s" + (f"\n{job.tail()}" if job else ""))


def meta(url: str) -> dict:
    store = StatusStore(url)
    try:
        return store.get_meta()
    except Exception:
        return {}
    finally:
        store.dispose()


def report(name: str, value: float, unit: str, target: str, ok: bool | None) -> None:
    verdict = "" if ok is None else ("  OK" if ok else "  MISSED")
    print(f"{name:<52} {value:>12,.2f} {unit:<10} target {target}{verdict}", flush=True)


READ_STAGE = HERE / "read_stage.py"


def spark_alone(workdir: str, name: str, *args: str) -> dict:
    """``bench/read_stage.py args`` (Spark alone: the job's stages with a state function that only counts rows) as a
    subprocess, its lines printed indented; the figures it writes with ``--json-out``."""
    out = os.path.join(workdir, f"spark-alone-{name}.json")
    log = os.path.join(workdir, f"spark-alone-{name}.log")
    print(f"Spark alone ({name}): python bench/read_stage.py {shlex.join(args)}", flush=True)
    with open(log, "w") as handle:
        code = subprocess.run(
            [sys.executable, str(READ_STAGE), *args, "--json-out", out],
            stdout=handle,
            stderr=subprocess.STDOUT,
            timeout=3600,
            check=False,
        ).returncode
    text = Path(log).read_text(errors="replace")
    for line in text.splitlines():
        if " WARN " not in line and not line.startswith(
            ("WARNING", "Using Spark's default log4j", "Setting default log level", "To adjust logging")
        ):
            print(f"  [spark alone] {line[:300]}", flush=True)
    if code != 0 or not os.path.exists(out):
        raise RuntimeError(f"Spark alone ({name}) failed (exit {code}); its log: {log}\n{text[-3000:]}")
    return json.loads(Path(out).read_text())


def spark_alone_storm(kafka: KafkaCluster, workdir: str, partitions: int, lines: list[bytes]) -> dict:
    """Spark alone over the settled storm's records (``--stages live``, 3 storms after a warm-up one, then 3 single
    records after a warm-up one), on its own topic laid out as the job's event topic."""
    lines_file = os.path.join(workdir, "settled-storm.jsonl")
    Path(lines_file).write_bytes(b"\n".join(line.rstrip(b"\n") for line in lines) + b"\n")
    return spark_alone(
        workdir,
        "storm",
        "--stages",
        "live",
        "--bootstrap-servers",
        kafka.bootstrap,
        "--lines-file",
        lines_file,
        "--event-partitions",
        str(event_topic_partitions(partitions)),
        "--buckets",
        "4",
        "--storms",
        "4",
        "--floor-batches",
        "4",
        "--routing",
        "headers" if ROUTE_HEADERS[0] else "json",
    )


def print_storm_ratio(source: str, job: dict, alone: dict) -> None:
    """The settled storm and the floor, the job against Spark alone in the same run."""
    x, y = job["storm_s"], alone["storm_median_s"]
    print(
        f"storm → gauges (--source {source}): job {x:.2f} s, Spark alone {y:.2f} s, ratio {x / y:.2f} "
        "(target ≤ 1.5, then ≤ 1.2)",
        flush=True,
    )
    if "floor_median_s" in alone:
        x, y = job["floor_s"], alone["floor_median_s"]
        print(
            f"one record → gauges (--source {source}): job {x:.2f} s, Spark alone {y:.2f} s, ratio {x / y:.2f}",
            flush=True,
        )


# ------------------------------------------------------------------------------------------------ phases


THROUGHPUT_BATCH_CAP = 100_000  # events a churn batch (--max-records-per-batch), as a steady stream is read
GAUGES_LINE = re.compile(r"^(\S+ \S+) INFO elrwatch.stream: batch (\d+): gauges served after")


def gauges_times(job: Job) -> dict[int, float]:
    """Batch id -> epoch seconds its gauges were served (the batch's log line with ``events=`` follows its store
    write, which runs behind the batches)."""
    out = {}
    for line in Path(job.log_path).read_text(errors="replace").splitlines():
        m = GAUGES_LINE.match(line)
        if m:
            day, millis = m.group(1).split(",")
            out[int(m.group(2))] = time.mktime(time.strptime(day, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000
    return out


def throughput_target(raw_jvm: float) -> float:
    """The throughput target: 100k events/s, or half of raw JVM consumption where that is lower (2 cores)."""
    return min(100_000.0, 0.5 * raw_jvm)


def bench_cluster(partitions: int, storm: int, seed: int, wallclock: bool = False) -> EventGenerator:
    """The storm phase's cluster: ``partitions`` partitions in topics of 10k (RF 3), on as many brokers as make one
    broker's failure touch ~``storm`` partitions."""
    brokers = max(4, round(3 * partitions / storm))  # RF 3: each broker holds ~3/brokers of the partitions
    topics = max(1, partitions // 10_000)
    return EventGenerator(
        topics=topics, partitions=partitions // topics, brokers=brokers, seed=seed, wallclock=wallclock
    )


def event_topic_partitions(partitions: int) -> int:
    """The event topic's partitions for a cluster of ``partitions`` (`--event-partitions`, else one per 125k
    metadata partitions, at least 2), as the storm phase creates it."""
    return EVENT_PARTITIONS[0] or max(2, -(-partitions // 125_000))


def publish(kafka: KafkaCluster, topic: str, lines: Iterable[bytes]) -> tuple[int, float, str]:
    """Publish ``lines`` with the `--storm-producer` (acks=1, `elrwatch produce`'s keys); (events, seconds incl. the
    producer's start, who published)."""
    began = time.monotonic()
    if STORM_PRODUCER[0] == "jvm":
        sent = JvmProducer(kafka.bootstrap, topic, headers=ROUTE_HEADERS[0]).send(lines)[0]
        return sent, time.monotonic() - began, "Kafka ConsoleProducer (JVM)"
    opts = {"bootstrap.servers": kafka.bootstrap, "topic": topic}
    producer = fast_producer(opts)
    try:
        sent = produce_lines(opts, topic, lines, out=None, producer=producer).sent
    finally:
        producer.close()
    return sent, time.monotonic() - began, "kafka-python"


def phase_throughput(
    kafka: KafkaCluster, workdir: str, partitions: int, storm: int, events: int, sources: list[str]
) -> None:
    """Sustained events/s of the job over a churn backlog on a state of ``partitions`` partitions, per source.

    Each source's job first loads the cluster (``--available-now``, one uncapped batch, as a new checkpoint reads
    an existing cluster; its store write done before it exits), then restarts from its checkpoint with
    ``--max-records-per-batch`` over the ``events`` churn records published meanwhile. The rate counts the churn
    batches after the first (whose time holds the restart), from the batches' log lines."""
    gen = bench_cluster(partitions, storm, seed=1)
    topic = "bench-throughput"
    topic_partitions = event_topic_partitions(partitions)
    create_topic({"bootstrap.servers": kafka.bootstrap, "topic": topic}, topic, topic_partitions)
    n_load, seconds, who = publish(kafka, topic, gen.bootstrap())
    print(
        f"throughput: loading {partitions:,} partitions ({n_load:,} events produced in {seconds:.0f}s by {who}, "
        f"{gen.n_brokers} brokers, {topic_partitions} event-topic partitions)",
        flush=True,
    )
    churn = list(gen.churn(events))
    # Raw consumption of the same churn records: a copy topic laid out as the job's (same partitions and keys).
    raw_topic = "bench-throughput-churn"
    create_topic({"bootstrap.servers": kafka.bootstrap, "topic": raw_topic}, raw_topic, topic_partitions)
    n_churn, seconds, who = publish(kafka, raw_topic, churn)
    report(f"produce the churn ({who}, acks=1, start incl.)", n_churn / seconds, "events/s", "-", None)
    n, seconds = consume_all(kafka.bootstrap, raw_topic)
    raw = n / seconds
    report("raw kafka-python consumption of the churn", raw, "events/s", "-", None)
    jvm = consume_all_jvm(kafka.bootstrap, raw_topic, n)
    raw_jvm = jvm["fetch_records_s"]
    report("raw JVM consumption of the churn (ConsumerPerformance, no group join)", raw_jvm, "events/s", "-", None)
    report("  with the group join", jvm["records_s"], "events/s", "-", None)
    target = throughput_target(raw_jvm)

    def job_options(source: str) -> dict[str, object]:
        return {
            "source": source,
            "bootstrap_servers": kafka.bootstrap,
            "topic": topic,
            "store": f"sqlite:///{workdir}/tp-{source}.db",
            "checkpoint": f"{workdir}/tp-ck-{source}",
            "available_now": True,
            "buckets": 2,
        }

    def run(job: Job, what: str, peak: RssPeak | None = None) -> None:
        """Wait for a drained job's exit (sampling ``peak``); its batch log lines; an error if it failed."""

        def ended() -> bool:
            if peak is not None:
                peak.sample()
            return job.proc.poll() is not None

        try:
            poll(ended, 3600, what, every=0.5)
        finally:
            job.kill()
            job.print_batches(what)
        if job.proc.returncode != 0:
            raise RuntimeError(f"{what}: the job exited with {job.proc.returncode}:\n{job.tail()}")

    loaded: dict[str, int] = {}  # source -> events its job counted after the load
    for source in sources:
        job = Job(workdir, f"throughput-load-{source}", **job_options(source))
        run(job, f"throughput load --source {source}")
        loaded[source] = max((e for _, _, e in job.batches()), default=0)
        if loaded[source] < n_load:
            raise RuntimeError(
                f"throughput load --source {source}: {loaded[source]:,} of {n_load:,} events\n{job.tail()}"
            )
        report(
            f"load of {partitions:,} partitions, --source {source} (one batch, start and store write incl.)",
            time.monotonic() - job.started,
            "s",
            "-",
            None,
        )
    n_sent, seconds, who = publish(kafka, topic, churn)
    print(f"throughput: {n_sent:,} churn events produced in {seconds:.1f}s by {who}", flush=True)
    rates: dict[str, float] = {}  # source -> the job's sustained events/s
    for source in sources:
        job = Job(workdir, f"throughput-{source}", **job_options(source), max_records_per_batch=THROUGHPUT_BATCH_CAP)
        peak = RssPeak(job.proc.pid)
        run(job, f"throughput churn --source {source}", peak)
        batches = job.batches()
        if len(batches) < 2:
            print(f"throughput --source {source}: {len(batches)} churn batch(es), no rate\n{job.tail()}", flush=True)
            continue
        (t0, _, e0), (t1, _, e1) = batches[0], batches[-1]
        rate = (e1 - e0) / (t1 - t0)  # by the batches' log lines, each after its store write (as before)
        rates[source] = rate
        report(
            f"stream sustained on {partitions:,} partitions, --source {source} (churn batches 2..n)",
            rate,
            "events/s",
            f">= {target:,.0f} (min(100k, 0.5 x raw JVM))",
            rate >= target,
        )
        served = gauges_times(job)
        (b0, b1) = batches[0][1], batches[-1][1]
        if b0 in served and b1 in served and served[b1] > served[b0]:
            report(
                "  the same by the gauges' times (the store writes behind)",
                (e1 - e0) / (served[b1] - served[b0]),
                "events/s",
                "-",
                None,
            )
        report("  ratio to 100k events/s", rate / 100_000, "x", ">= 1 (or the JVM ratio >= 0.5)", None)
        report("  ratio to raw JVM consumption", rate / raw_jvm, "x", ">= 0.5 (or 100k/s)", None)
        report("  ratio to raw kafka-python consumption", rate / raw, "x", "-", None)
        report(
            f"  churn batches (<= {THROUGHPUT_BATCH_CAP:,} events; {e1 - loaded[source]:,} of {n_sent:,} churn events)",
            len(batches),
            "batches",
            "-",
            None,
        )
        report(f"  RSS peak during the churn, {partitions:,} partitions", peak.mb, "MB", "<= 2,000", peak.mb <= 2000)
        peak.print_at_peak("the churn's peak")
    # Spark alone over the same churn records (the copy topic, same layout), read as the job reads them
    alone = spark_alone(
        workdir,
        "throughput",
        "--stages",
        "batch",
        "--bootstrap-servers",
        kafka.bootstrap,
        "--topic",
        raw_topic,
        "--max-offsets-per-trigger",
        str(THROUGHPUT_BATCH_CAP),
        "--batches",
        str(max(2, n_churn // THROUGHPUT_BATCH_CAP)),
        "--buckets",
        "2",
    )
    cap = alone["events_per_s"]
    for source, rate in rates.items():
        print(
            f"throughput (--source {source}): job {rate:,.0f} events/s, Spark alone's cap {cap:,.0f} events/s, "
            f"ratio {rate / cap:.2f} (target ≥ 0.7)",
            flush=True,
        )


def phase_freshness(kafka: KafkaCluster, workdir: str, rate: float, seconds: float, buckets: int = 2) -> None:
    gen = EventGenerator(topics=10, partitions=1000, brokers=6, seed=2, wallclock=True)
    topic = "bench-fresh"
    opts = {"bootstrap.servers": kafka.bootstrap, "topic": topic}
    create_topic(opts, topic, 1)
    producer = fast_producer(opts)
    produce_lines(opts, topic, gen.bootstrap(), out=None, producer=producer)
    url = f"sqlite:///{workdir}/fresh.db"
    job = Job(
        workdir,
        "fresh",
        bootstrap_servers=kafka.bootstrap,
        topic=topic,
        store=url,
        checkpoint=f"{workdir}/fresh-ck",
        trigger="250ms",
        buckets=buckets,
    )
    try:
        boot_ms = gen.now_ms
        poll(lambda: (meta(url).get("lastEventTimeMs") or 0) >= boot_ms, 300, "bootstrap loaded", job, every=0.5)
        sent: list[tuple[int, float]] = []  # (the event's timestamp, wall-clock ms when it was sent)
        seen: list[tuple[float, int]] = []
        import threading

        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                last = meta(url).get("lastEventTimeMs")
                if last:
                    seen.append((time.time() * 1000, last))
                time.sleep(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        started = time.monotonic()
        i = 0
        churn = gen.churn(10**9)
        while time.monotonic() - started < seconds:
            due = started + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            line = next(churn)
            # the generator's clock may run ahead of the wall clock (max(previous + 1 ms, now) over the bootstrap's
            # 10k events): latency is measured from the wall-clock send, the timestamp only identifies the event
            sent.append((gen.now_ms, time.time() * 1000))
            producer.send(topic, key=b"x", value=line)
            if i % 20 == 0:
                producer.flush()
            i += 1
        producer.flush()
        poll(lambda: (meta(url).get("lastEventTimeMs") or 0) >= sent[-1][0], 60, "last fresh event", job)
        time.sleep(0.2)
        stop.set()
        watcher.join(5)
    finally:
        job.kill()
        producer.close()
    latencies = []
    j = 0
    warm = sent[0][1] + 5000  # the first 5 s warm the Python workers up: not counted
    for ts, sent_ms in sent:
        if sent_ms < warm:
            continue
        while j < len(seen) and seen[j][1] < ts:
            j += 1
        if j < len(seen):
            latencies.append((seen[j][0] - sent_ms) / 1000)
    latencies.sort()
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    report(f"freshness p50 at {rate:g} events/s (trigger 250ms, {buckets} buckets)", p50, "s", "-", None)
    report(f"freshness p99 at {rate:g} events/s", p99, "s", "<= 1", p99 <= 1)


def phase_storm_restart(
    kafka: KafkaCluster,
    workdir: str,
    partitions: int,
    storm: int,
    restart: bool,
    cold_restart: bool = False,
    source: str = "kafka",
    spark: SparkCluster | None = None,
    idle_s: float = 0.0,
) -> dict:
    """The load, the storm and (``restart``) a restart, with ``--source source``; ``spark``: on that standalone
    cluster (snapshot state mode with a --state-dir every executor shares), else local mode. Returns the settled
    storm's figures: ``storm_s`` (its last record -> gauges), ``floor_s`` (one record -> gauges) and ``lines`` (its
    records, for Spark alone)."""
    where = f"--source {source}, " + ("2-worker cluster" if spark else "local mode")
    print(f"storm ({where}):", flush=True)
    name = f"storm-{source}-{'cluster' if spark else 'local'}"
    brokers = max(4, round(3 * partitions / storm))  # RF 3: each broker holds ~3/brokers of the partitions
    topics = max(1, partitions // 10_000)
    gen = EventGenerator(topics=topics, partitions=partitions // topics, brokers=brokers, seed=3, wallclock=True)
    topic = f"bench-{name}"
    opts = {"bootstrap.servers": kafka.bootstrap, "topic": topic}
    # One event-topic partition per 125k metadata partitions (at least 2); each is a read task of every micro-batch,
    # so `--event-partitions` measures other layouts.
    create_topic(opts, topic, EVENT_PARTITIONS[0] or max(2, -(-partitions // 125_000)))
    producer = fast_producer(opts)
    jvm_producer = STORM_PRODUCER[0] == "jvm"
    t = time.monotonic()
    if jvm_producer:
        res_sent = JvmProducer(kafka.bootstrap, topic, headers=ROUTE_HEADERS[0]).send(gen.bootstrap())[0]
    else:
        res_sent = produce_lines(opts, topic, gen.bootstrap(), out=None, producer=producer).sent
    print(
        f"storm: loading {partitions:,} partitions ({res_sent:,} events produced in {time.monotonic() - t:.0f}s by "
        f"{'Kafka ConsoleProducer (JVM)' if jvm_producer else 'kafka-python'}, {brokers} brokers)",
        flush=True,
    )
    url = f"sqlite:///{workdir}/{name}.db"
    port = free_port()
    options: dict[str, object] = {
        "source": source,
        "bootstrap_servers": kafka.bootstrap,
        "topic": topic,
        "store": url,
        "checkpoint": f"{workdir}/{name}-ck",
        "trigger": "250ms",
        "buckets": 4,
        "metrics_port": port,
    }
    extra_roots: list[int] = []
    if spark is not None:
        options |= {
            "spark_master": spark.url,
            "state_dir": f"{workdir}/{name}-shared-state",
            "spark_conf": ["spark.executor.memory=1g", "spark.executor.cores=1"],
        }
        extra_roots = [p.pid for p in spark.workers if p is not None]
    # No --max-records-per-batch (the job's default): the whole load is one batch, as when a new checkpoint
    # reads an existing cluster's metadata, and its peak RSS is printed. A cap lowers that peak but keeps more
    # Python workers and a bigger JVM behind: a higher steady state (docs/PERFORMANCE.md, "Tried and dropped").
    job = Job(workdir, name, **options)
    producers: list[JvmProducer] = []
    settled: dict = {}  # the settled storm's figures and records (returned)

    def new_producer() -> JvmProducer | None:
        """A ConsoleProducer JVM started ahead of its (one) burst, so that its start is not timed."""
        if not jvm_producer:
            return None
        producers.append(JvmProducer(kafka.bootstrap, topic, headers=ROUTE_HEADERS[0]))
        time.sleep(3)
        return producers[-1]

    try:
        boot_ms = gen.now_ms

        metrics_url = f"http://127.0.0.1:{port}/metrics"

        load_peak = RssPeak(job.proc.pid, extra_roots=extra_roots)

        n_partitions = topics * (partitions // topics)

        def in_gauges() -> bool:
            load_peak.sample()
            try:
                return (scrape(metrics_url).get("elrwatch_partition_count") or 0) >= n_partitions
            except OSError:  # the job's exporter is not up yet
                return False

        def loaded() -> bool:
            load_peak.sample()
            # The store shows the batch at its commit, but the driver is then still checkpointing SQLite's WAL
            # and freeing the batch: the load is over when the metrics count the batch as completed.
            if (meta(url).get("lastEventTimeMs") or 0) < boot_ms:
                return False
            return (scrape(metrics_url).get("elrwatch_batches_total") or 0) >= 1

        def storm_to_gauges(victim: int, fenced: int, label: str, burst: JvmProducer | None) -> dict[str, float]:
            """Fence ``victim`` (its ~storm partition changes, then the fence record); when its last record shows
            in the gauges and in the store. ``fenced``: the fenced brokers the gauges then show."""
            storm_lines = list(gen.fence(victim))
            if burst is not None:
                _, t_first, t_last = burst.send(storm_lines)
            else:
                t_first = time.monotonic()
                produce_lines(opts, topic, storm_lines, out=None, producer=producer)
                t_last = time.monotonic()
            last_ms = gen.now_ms
            seen: dict[str, float] = {}  # "gauges" / "store" -> when the storm's last record showed there

            def reflected() -> bool:
                storm_peak.sample()
                if "gauges" not in seen:
                    gauges = scrape(metrics_url)
                    if (
                        gauges.get("elrwatch_last_event_timestamp_seconds", 0) >= last_ms / 1000 - 1e-6
                        and gauges.get('elrwatch_brokers{state="fenced"}') == fenced
                    ):
                        seen["gauges"] = time.monotonic()
                if "store" not in seen and (meta(url).get("lastEventTimeMs") or 0) >= last_ms:
                    seen["store"] = time.monotonic()
                return len(seen) == 2

            poll(reflected, 900, f"{label} reflected", job, every=0.1)
            n = len(storm_lines) - 1
            report(f"  {label}: produced in (first written -> last acked)", t_last - t_first, "s", "-", None)
            report(
                f"{label}: {n:,} changes of {partitions:,} -> gauges",
                seen["gauges"] - t_last,
                "s",
                "<= 5 (stage 1), <= 2",
                seen["gauges"] - t_last <= 5,
            )
            report(f"  {label}: ratio to the 2 s target", (seen["gauges"] - t_last) / 2.0, "x", "<= 1", None)
            report(f"  {label}: last record produced -> in the store (REST)", seen["store"] - t_last, "s", "-", None)
            return {
                "gauges": seen["gauges"] - t_last,
                "store": seen["store"] - t_last,
                "lines": len(storm_lines),
                "records": storm_lines,
            }

        # 1. The load (a new checkpoint reading an existing cluster's metadata: one batch of every record), and the
        # first storm as soon as the load shows in the gauges: it must not wait for the load's store write.
        burst = new_producer()
        poll(in_gauges, 1800, "initial load in the gauges", job, every=0.5)
        report(
            f"initial load of {partitions:,} partitions -> gauges (startup incl.)",
            time.monotonic() - job.started,
            "s",
            "-",
            None,
        )
        storm_peak = RssPeak(job.proc.pid, extra_roots=extra_roots)
        after_load_storm = storm_to_gauges(0, 1, "storm right after the load", burst)
        sent_total = res_sent + after_load_storm["lines"]
        poll(loaded, 1800, "initial load", job, every=1.0)
        load_s = time.monotonic() - job.started
        report(f"initial load of {partitions:,} partitions -> store (startup incl.)", load_s, "s", "-", None)
        report(
            "  RSS peak during the load (one batch of every record)",
            load_peak.mb,
            "MB",
            "<= 3,000",
            load_peak.mb <= 3000,
        )
        load_peak.print_at_peak("the load's peak")
        poll(lambda: any(events >= sent_total for _, _, events in job.batches()), 600, "the first storm's batch", job)
        time.sleep(5)
        after_load = rss_tree_mb(job.proc.pid) + sum(rss_tree_mb(r) for r in extra_roots)
        report(f"  RSS after the load, {partitions:,} partitions", after_load, "MB", "<= 2,000", after_load <= 2000)
        print_breakdown("after the load", job.proc.pid, extra_roots=extra_roots)

        def one_record_to_gauges() -> float:
            """Seconds from one churn record acknowledged to the gauges showing it."""
            one = new_producer()
            line = list(gen.churn(1))
            one_ms = gen.now_ms
            if one is not None:
                _, _, t_one = one.send(line)
            else:
                produce_lines(opts, topic, line, out=None, producer=producer)
                t_one = time.monotonic()
            poll(
                lambda ms=one_ms: (
                    scrape(metrics_url).get("elrwatch_last_event_timestamp_seconds", 0) >= ms / 1000 - 1e-6
                ),
                120,
                "one record in the gauges",
                job,
                every=0.02,
            )
            return time.monotonic() - t_one

        # 2. The floor: one record to the gauges, the job otherwise idle (median of 5).
        floors = []
        for _ in range(5):
            floors.append(one_record_to_gauges())
            sent_total += 1
            time.sleep(1.0)
        floor = sorted(floors)[len(floors) // 2]
        report("one record -> gauges (the floor, median of 5)", floor, "s", "-", None)

        # 3. The storm on a settled job (its store caught up).
        storm_peak = RssPeak(job.proc.pid, baseline_mb=after_load, extra_roots=extra_roots)
        storm = storm_to_gauges(1, 2, "storm", new_producer())
        settled.update(storm_s=storm["gauges"], floor_s=floor, lines=storm["records"])
        report("  storm: ratio to the floor", storm["gauges"] / max(floor, 1e-3), "x", "-", None)
        storm_peak.sample()
        peak = storm_peak.mb
        report(f"RSS peak, job process tree, {partitions:,} partitions", peak, "MB", "<= 2,000", peak <= 2000)
        storm_peak.print_at_peak("the storm's peak")
        print_breakdown("after the storm", job.proc.pid, extra_roots=extra_roots)
        storm_lines_total = sent_total + storm["lines"]
        # the storm's last batch logs its breakdown (printed below) once the driver is done with it
        poll(
            lambda: any(events >= storm_lines_total for _, _, events in job.batches()),
            120,
            "the storm batch's log line",
            job,
        )
        # 4. One record after an idle spell (Spark stops Python workers idle for 60 s: the first batch of an
        # incident after a quiet minute; the job's warm-ups exist for it).
        if idle_s > 0:
            time.sleep(idle_s)
            after_idle = one_record_to_gauges()
            sent_total = storm_lines_total + 1
            report(f"one record after {idle_s:.0f} s idle -> gauges", after_idle, "s", "-", None)
            report("  ratio to the floor", after_idle / max(floor, 1e-3), "x", "-", None)
        if not restart:
            return settled
        # Kill the job once Spark has committed every batch it started (the newest offsets file has its commit
        # file; no record arrives meanwhile): killed before, the restarted job re-runs that batch first (correct,
        # exactly once: the store skips it), and the restart's figure would time that batch and the next one. The
        # store's last batch is no guide: the store is written behind the batches.
        poll(lambda: all_committed(os.path.join(workdir, f"{name}-ck")), 120, "the batches' commits", job, every=0.1)
        job.kill()
        job.print_batches("storm job")
        before = meta(url).get("lastBatchId")
        if cold_restart:
            drop_page_cache()
            print("restart: page cache dropped (--cold-restart)", flush=True)
        # Spark's last committed batch: the store writer runs behind the batches, so the store may still lack
        # some that the restarted job's writer then writes first from its write-ahead list; the restart's own
        # first batch is a newer one, and its gauges show the churn produced now
        commits = os.path.join(workdir, f"{name}-ck", "commits")
        committed = max((int(n) for n in os.listdir(commits) if n.isdigit()), default=-1)
        job = Job(workdir, "restart", **options)
        produce_lines(opts, topic, gen.churn(10), out=None, producer=producer)
        churn_ms = gen.now_ms

        def restarted() -> bool:
            try:
                gauges = scrape(metrics_url)
            except OSError:
                return False  # not serving yet
            return gauges.get("elrwatch_last_event_timestamp_seconds", 0) >= churn_ms / 1000 - 1e-6

        poll(restarted, 600, "first batch after restart in the gauges", job, every=0.1)
        took = time.monotonic() - job.started
        poll(
            lambda: (meta(url).get("lastBatchId") or -1) > max(committed, before or -1),
            600,
            "first batch after restart in the store",
            job,
            every=0.1,
        )
        report("restart from checkpoint -> first batch in the gauges", took, "s", "<= 10", took <= 10)
        after_restart = rss_tree_mb(job.proc.pid) + sum(rss_tree_mb(r) for r in extra_roots)
        report(f"RSS after restart, {partitions:,} partitions", after_restart, "MB", "<= 3,000", None)
        print_breakdown("after restart", job.proc.pid, extra_roots=extra_roots)
    finally:
        for producer_jvm in producers:
            producer_jvm.close()
        job.kill()
        job.print_batches(job.log_path.rsplit("/", 1)[-1].split("-")[0] + " job")
        producer.close()
    return settled


DROP_CACHES = "/proc/sys/vm/drop_caches"


def drop_page_cache() -> None:
    """Write dirty pages out and drop Linux's page cache (root only), so that the next start reads every file it
    needs from disk: Spark's jars, the JVM class archive, Python's modules, the store, the bucket snapshots."""
    os.sync()
    with open(DROP_CACHES, "w") as handle:
        handle.write("3\n")


def ensure_class_archive(workdir: str) -> None:
    """Write the JVM class archive with a short clean run if this machine has none (a killed job never writes
    it); print what the jobs will use."""
    from elrwatch.state.eventgen import scenario
    from elrwatch.streaming import jvm_archive

    java = jvm_archive.java_executable()
    if java is None:
        print("JVM class archive: none (no java found)", flush=True)
        return
    path = jvm_archive.archive_path(jvm_archive.default_archive_dir(), java, jvm_archive.spark_jars_dir())
    if os.path.exists(path):
        print(f"JVM class archive: present ({path})", flush=True)
        return
    events = os.path.join(workdir, "archive-events")
    os.makedirs(events)
    Path(events, "scenario.jsonl").write_bytes(b"\n".join(scenario()) + b"\n")
    began = time.monotonic()
    job = Job(
        workdir,
        "archive",
        source="files",
        path=events,
        store=f"sqlite:///{workdir}/archive.db",
        checkpoint=f"{workdir}/archive-ck",
        metrics_port=0,
        available_now=True,
    )
    code = job.wait(600)
    job.log.close()
    state = "written" if os.path.exists(path) else f"NOT written (exit {code}; {job.log_path})"
    print(f"JVM class archive: {state} by a first clean run in {time.monotonic() - began:.0f}s ({path})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", default="throughput,freshness,storm,restart")
    parser.add_argument(
        "--job-args",
        default="",
        help="extra `elrwatch stream` options for every job (A/B runs), e.g. --state-mode blob",
    )
    parser.add_argument(
        "--events",
        type=int,
        default=300_000,
        help=f"throughput: churn events measured on the loaded cluster, read {THROUGHPUT_BATCH_CAP:,} a batch; more "
        "than one batch (the rate counts the batches after the first)",
    )
    parser.add_argument("--rate", type=float, default=1000.0, help="freshness: events/s")
    parser.add_argument("--seconds", type=float, default=35.0, help="freshness: duration (first 5 s: warm-up)")
    parser.add_argument("--fresh-buckets", type=int, default=2, help="freshness: --buckets of the job")
    parser.add_argument(
        "--partitions",
        type=int,
        default=1_000_000,
        help="storm and throughput: cluster size (the state the storm and the churn apply to; e.g. 10000 for a "
        "quick throughput run)",
    )
    parser.add_argument(
        "--storm-partitions",
        type=int,
        default=100_000,
        help="storm: partitions touched (it sets the cluster's broker count, the throughput phase's too)",
    )
    parser.add_argument(
        "--sources", default="kafka,kafka-native", help="throughput and storm: the job's sources to measure"
    )
    parser.add_argument(
        "--masters",
        default="local",
        help="storm: local (Spark's local mode) and/or cluster (a standalone master + 2 workers, 1 core and 1.5 GB "
        "each, devtools/spark_cluster.py), comma-separated",
    )
    parser.add_argument(
        "--no-class-archive", action="store_true", help="jobs start without the JVM class archive (A/B runs)"
    )
    parser.add_argument(
        "--event-partitions",
        type=int,
        default=0,
        help="storm and throughput: partitions of the event topic (default: one per 125k metadata partitions, at "
        "least 2); each is a read task of every micro-batch",
    )
    parser.add_argument(
        "--no-route-headers",
        action="store_true",
        help="publish the ConsoleProducer's storms without elrwatch's routing headers (the job then reads each "
        "line's JSON to route it; elrwatch's own producers always set them)",
    )
    parser.add_argument(
        "--storm-producer",
        choices=("jvm", "kafka-python"),
        default="jvm",
        help="storm and throughput: who publishes the load, the storm and the churn. jvm (default): Kafka's "
        "ConsoleProducer, a burst as a controller writes a broker's failure; kafka-python: elrwatch produce's client, "
        "several times slower on a small machine, where it competes with the job for the cores and spreads a storm "
        "over micro-batches",
    )
    parser.add_argument(
        "--keep-workdir",
        action="store_true",
        help="keep the work directory (job logs, store, checkpoint: ~0.8 GB at 1M partitions) after a run that "
        "succeeded; a failed run always keeps it",
    )
    parser.add_argument(
        "--cold-restart",
        action="store_true",
        help=f"restart: drop the page cache first (root; writes {DROP_CACHES}), as on a rebooted node",
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=75.0,
        help="storm: after the storm, the job idle this long, then one record -> gauges (Spark stops Python "
        "workers idle for 60 s; the job's warm-ups are for this); 0: skip",
    )
    args = parser.parse_args()
    EXTRA_JOB_ARGS.extend(shlex.split(args.job_args))
    STORM_PRODUCER[0] = args.storm_producer
    ROUTE_HEADERS[0] = not args.no_route_headers
    EVENT_PARTITIONS[0] = args.event_partitions
    phases = set(args.phases.split(","))
    if args.partitions < 1 or args.storm_partitions < 1:
        parser.error("--partitions and --storm-partitions must be at least 1")
    if "throughput" in phases and args.events <= THROUGHPUT_BATCH_CAP:
        parser.error(f"--events must exceed {THROUGHPUT_BATCH_CAP:,} (the throughput phase's batch cap) for a rate")
    if args.cold_restart and "restart" not in phases:
        parser.error("--cold-restart needs the restart phase (--phases storm,restart)")
    if args.cold_restart and not os.access(DROP_CACHES, os.W_OK):
        parser.error(f"--cold-restart needs write access to {DROP_CACHES} (root on Linux)")
    workdir = tempfile.mkdtemp(prefix="elrwatch-bench-")
    print(f"elrwatch streaming benchmarks ({os.cpu_count()} cores; workdir {workdir})", flush=True)
    if args.no_class_archive:  # a directory under a plain file: the job logs that it starts without an archive
        not_a_directory = os.path.join(workdir, "no-class-archive")
        Path(not_a_directory).touch()
        EXTRA_JOB_ARGS.extend(["--jvm-class-archive-dir", os.path.join(not_a_directory, "jvm")])
    try:
        if not args.no_class_archive:
            ensure_class_archive(workdir)
        # the broker's data and log stay in the work directory (kept when a run fails)
        with KafkaCluster(brokers=1, base_dir=os.path.join(workdir, "kafka")) as kafka:
            sources = [x for x in args.sources.split(",") if x]
            if "throughput" in phases:
                phase_throughput(kafka, workdir, args.partitions, args.storm_partitions, args.events, sources)
            if "freshness" in phases:
                phase_freshness(kafka, workdir, args.rate, args.seconds, args.fresh_buckets)
            if "storm" in phases or "restart" in phases:
                alone: dict | None = None  # Spark alone over the settled storm, once a run
                for master in args.masters.split(","):
                    for source in sources:
                        with contextlib.ExitStack() as stack:
                            spark = None
                            if master == "cluster":
                                spark = stack.enter_context(
                                    SparkCluster(
                                        workers=2,
                                        cores=1,
                                        memory="1536m",
                                        base_dir=os.path.join(workdir, f"spark-{source}"),
                                    )
                                )
                            settled = phase_storm_restart(
                                kafka,
                                workdir,
                                args.partitions,
                                args.storm_partitions,
                                "restart" in phases,
                                cold_restart=args.cold_restart,
                                source=source,
                                spark=spark,
                                idle_s=args.idle_seconds,
                            )
                        if master == "local":  # the job has stopped: Spark alone on the same broker, then ratios
                            if alone is None:
                                alone = spark_alone_storm(kafka, workdir, args.partitions, settled["lines"])
                            print_storm_ratio(source, settled, alone)
    except BaseException:
        print(f"work directory kept for inspection (job logs, store, checkpoint): {workdir}", flush=True)
        raise
    remove_workdir(workdir, args.keep_workdir)


if __name__ == "__main__":
    main()
