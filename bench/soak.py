"""Soak: the live product under a chaos loop for a given time, its memory and checkpoint writes sampled.

    python bench/soak.py --minutes 120                  # the 2-hour run docs/PERFORMANCE.md reports
    python bench/soak.py --minutes 10 --sample-seconds 10   # a quick look
    python bench/soak.py --minutes 30 --nmt             # + the JVM's Native Memory Tracking per sample

What runs (everything on this machine, from the jars ``make kafka-jars`` fetches):

* the **watched cluster**: Apache Kafka KRaft, one controller and three brokers, ELR on, min.insync.replicas=2,
  the demo's topics (RF 3, RF 2, a topic with min ISR 1);
* the **event topic** on a 1-broker cluster of its own;
* ``elrwatch bridge --source metadata-log`` on the controller's metadata log, ``elrwatch api`` and
  ``elrwatch stream`` (1 s trigger, 2 buckets), each a process tree of its own.

The chaos loop:

* **churn**: one change a second (``--change-seconds``): ``clicks``' min.insync.replicas toggles between 1 and 2
  (a ConfigRecord through the bridge, a derived-status change for its 3 partitions): the quiet cluster of the
  checkpoint target;
* **broker faults**: the demo's fault injector (kill -9 and SIGTERM of one or two brokers, restarts, unclean
  elections of partitions left leaderless), all the run long;
* **topics**: one created and the previous one deleted every ``--topic-minutes``;
* **garbage**: a few lines that are not records, every ``--garbage-minutes`` (quarantined, counted);
* **restarts** in the first half only (the second half measures the slopes of undisturbed processes):
  ``--job-restarts`` kills of the stream job (kill -9 of its process group: driver, JVM, workers), each restarted
  at once from its checkpoint, and one kill + restart of the bridge and of the API.

Every ``--sample-seconds`` one JSON line goes to ``<workdir>/soak.jsonl``: RSS (MB) of each process tree (the job's
broken down into JVM, Python driver and Python workers), with ``--nmt`` the JVM's NMT committed total (what the JVM
itself accounts for; RSS above it is native memory outside the JVM's books: RocksDB, glibc), the checkpoint's size
and the bytes written to it since the last sample (new files, grown files) with the batches committed meanwhile.

At the end it prints, per process tree, the RSS at 10, 60 and 120 minutes (those within the run) and the slope
over the second half (least squares, MB/min); the checkpoint bytes written per batch around the same times and
its size; the first batch after each restart (seconds from the restart to the batch's log line); the garbage
lines sent and quarantined. Targets: bytes per batch <= 10 KB after the first hour, RSS slope <= 0.5 MB/min in the
second half, first batch after a restart <= 10 s.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from elrwatch.devtools.demo import WATCHED_TOPICS  # noqa: E402
from elrwatch.devtools.fault_injector import FaultInjector  # noqa: E402
from elrwatch.devtools.kafka_cluster import KafkaCluster, free_port  # noqa: E402
from elrwatch.devtools.processes import elrwatch_command, end, remove_workdir  # noqa: E402
from elrwatch.kafkaio.produce import produce_lines  # noqa: E402
from elrwatch.streaming.metrics import scrape  # noqa: E402
from streaming import Job, rss_breakdown, rss_tree_mb  # noqa: E402

TOPIC = "elrwatch-metadata"
GARBAGE = (b"not json at all", b'{"type": "PARTITION_RECORD"}', b'{"timestamp": "x", "record": 7}')
NMT_TOTAL = re.compile(r"Total: reserved=(\d+)KB, committed=(\d+)KB")
NMT_AREA = re.compile(r"^-\s+(\S[^(]*?)\s+\(reserved=(\d+)KB, committed=(\d+)KB\)", re.M)


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} soak: {message}", flush=True)


class Spawned:
    """An ``elrwatch`` command (bridge, api) in a session of its own, restartable."""

    def __init__(self, name: str, command: list[str], workdir: str) -> None:
        self.name, self.command, self.workdir = name, command, workdir
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> Spawned:
        self.starts += 1
        log = open(os.path.join(self.workdir, f"{self.name}-{self.starts}.log"), "w")  # noqa: SIM115
        self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        end(self.proc)


class CheckpointMeter:
    """Bytes written to a checkpoint directory between two looks: files that are new count whole, files that
    grew count their growth, files rewritten with another modification time count whole."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.seen: dict[str, tuple[int, int]] = {}

    def look(self) -> tuple[int, int, dict[str, int]]:
        """(bytes written since the last look, total size now, bytes written by top-level folder)."""
        written, size, by_area = 0, 0, {}
        now: dict[str, tuple[int, int]] = {}
        for folder, _dirs, files in os.walk(self.root):
            for name in files:
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                now[path] = (st.st_size, st.st_mtime_ns)
                size += st.st_size
                before = self.seen.get(path)
                if before is None:
                    new = st.st_size
                elif before[1] != st.st_mtime_ns:
                    new = st.st_size - before[0] if st.st_size >= before[0] else st.st_size
                else:
                    new = 0
                if new:
                    written += new
                    area = os.path.relpath(path, self.root).split(os.sep)[0]
                    by_area[area] = by_area.get(area, 0) + new
        self.seen = now
        return written, size, by_area


def committed_batch(checkpoint: str) -> int:
    """The last batch id in the checkpoint's commit log (-1: none)."""
    commits = os.path.join(checkpoint, "commits")
    with contextlib.suppress(OSError):
        return max((int(n) for n in os.listdir(commits) if n.isdigit()), default=-1)
    return -1


def jvm_pid(root: int) -> int | None:
    """The ``java`` process in a job's process tree (its driver JVM in local mode)."""
    todo = [root]
    while todo:
        pid = todo.pop()
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/exe").endswith("/java"):
                return pid
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{pid}/task"):
                children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
                todo.extend(int(c) for c in children)
    return None


def nmt_committed_mb(pid: int) -> tuple[float | None, dict[str, float]]:
    """The JVM's Native Memory Tracking committed total (MB) and per area (Java Heap, Class, Thread, Code, GC,
    Internal, Other, Arena Chunk, ...), or (None, {}) (NMT off, jcmd missing, JVM gone)."""
    java = os.readlink(f"/proc/{pid}/exe") if os.path.exists(f"/proc/{pid}/exe") else "java"
    jcmd = os.path.join(os.path.dirname(java), "jcmd")
    try:
        out = subprocess.run(
            [jcmd, str(pid), "VM.native_memory", "summary"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None, {}
    m = NMT_TOTAL.search(out)
    areas = {a.group(1).strip(): round(int(a.group(3)) / 1024, 1) for a in NMT_AREA.finditer(out)}
    return (int(m.group(2)) / 1024 if m else None), areas


def first_batch_after(job: Job, since_epoch: float, timeout: float) -> float | None:
    """Seconds from ``since_epoch`` to the first batch line in ``job``'s log, polled (None: none in time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for stamp, _batch, _events in job.batches():
            if stamp >= since_epoch - 1:
                return stamp - since_epoch
        if job.proc.poll() is not None:
            return None
        time.sleep(0.2)
    return None


def slope_mb_per_min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (minute, MB) points."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else None


def at_minute(samples: list[dict], minute: float, key: str) -> float | None:
    """The sample value of ``key`` nearest to ``minute`` (within 2 minutes)."""
    near = [s for s in samples if abs(s["minute"] - minute) <= 2 and s.get(key) is not None]
    return min(near, key=lambda s: abs(s["minute"] - minute))[key] if near else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=120.0, help="how long the chaos loop runs")
    parser.add_argument("--sample-seconds", type=float, default=30.0)
    parser.add_argument("--change-seconds", type=float, default=1.0, help="one config change every N seconds")
    parser.add_argument("--topic-minutes", type=float, default=5.0)
    parser.add_argument("--garbage-minutes", type=float, default=10.0)
    parser.add_argument("--job-restarts", type=int, default=3, help="kill -9 + restart of the job, first half")
    parser.add_argument("--no-faults", action="store_true", help="no broker kills and stops")
    parser.add_argument(
        "--fault-pause-seconds", type=float, default=120.0, help="quiet time between two fault episodes"
    )
    parser.add_argument("--nmt", action="store_true", help="the job's JVM with Native Memory Tracking (summary)")
    parser.add_argument("--job-args", default="", help="extra `elrwatch stream` options, e.g. '--spark-conf K=V'")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--keep-workdir", action="store_true")
    args = parser.parse_args()

    workdir = args.workdir or tempfile.mkdtemp(prefix="elrwatch-soak-")
    os.makedirs(workdir, exist_ok=True)
    out_path = os.path.join(workdir, "soak.jsonl")
    checkpoint = os.path.join(workdir, "checkpoint")
    store = f"sqlite:///{workdir}/elrwatch.db"
    duration = args.minutes * 60
    stop = threading.Event()
    kafka = watched = None
    injector = None
    bridge = api = None
    job: Job | None = None
    threads: list[threading.Thread] = []
    counters = {"changes": 0, "change_errors": 0, "topics": 0, "garbage": 0}
    restarts: list[dict] = []
    try:
        say(f"workdir {workdir}; samples to {out_path}")
        kafka = KafkaCluster(brokers=1, base_dir=os.path.join(workdir, "kafka")).start()
        kafka.create_topic(TOPIC, partitions=1)
        watched = KafkaCluster(
            brokers=3, base_dir=os.path.join(workdir, "watched"), min_insync_replicas=2, elr=True
        ).start()
        for name, kwargs in WATCHED_TOPICS:
            watched.create_topic(name, **kwargs)
        say(f"event topic on {kafka.bootstrap}; watched cluster on {watched.bootstrap}")

        bridge = Spawned(
            "bridge",
            elrwatch_command(
                "bridge",
                "--source",
                "metadata-log",
                "--log-dir",
                str(watched.controller.metadata_dir),
                bootstrap_servers=kafka.bootstrap,
                topic=TOPIC,
                interval=0.5,
                state_file=os.path.join(workdir, "bridge.json"),
            ),
            workdir,
        ).start()
        api_port = free_port()
        api = Spawned("api", elrwatch_command("api", store=store, port=api_port), workdir).start()
        metrics_port = free_port()
        extra = args.job_args.split()
        if args.nmt:
            extra += ["--spark-conf", "spark.driver.extraJavaOptions=-XX:NativeMemoryTracking=summary"]

        def start_job() -> Job:
            import streaming as bench_streaming

            bench_streaming.EXTRA_JOB_ARGS[:] = extra
            return Job(
                workdir,
                "stream",
                bootstrap_servers=kafka.bootstrap,
                topic=TOPIC,
                store=store,
                checkpoint=checkpoint,
                metrics_port=metrics_port,
                trigger="1s",
                buckets=2,
            )

        at = time.time()
        job = start_job()
        first = first_batch_after(job, at, 300)
        if first is None:
            raise RuntimeError(f"the stream job made no batch in 300 s:\n{job.tail()}")
        say(f"stream job's first batch {first:.1f} s after its start; chaos loop for {args.minutes:g} min")
        t0 = time.monotonic()

        def elapsed_min() -> float:
            return (time.monotonic() - t0) / 60

        def churn() -> None:
            from kafka import KafkaAdminClient
            from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, NewTopic

            servers = [f"127.0.0.1:{n.port}" for n in watched.brokers.values()]
            admin = None
            value, next_topic, last_topic = "1", time.monotonic(), None
            while not stop.is_set():
                tick = time.monotonic()
                try:
                    admin = admin or KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=5000)
                    value = "2" if value == "1" else "1"
                    resource = ConfigResource(
                        ConfigResourceType.TOPIC, "clicks", configs={"min.insync.replicas": (AlterConfigOp.SET, value)}
                    )
                    admin.alter_configs([resource], raise_on_unknown=False, incremental=True)
                    counters["changes"] += 1
                    if tick >= next_topic:
                        name = f"soak-{counters['topics']}"
                        admin.create_topics([NewTopic(name, 3, 3)])
                        if last_topic:
                            admin.delete_topics([last_topic])
                        counters["topics"] += 1
                        last_topic, next_topic = name, tick + args.topic_minutes * 60
                except Exception:  # brokers come and go under the fault injector: the next tick tries again
                    counters["change_errors"] += 1
                    with contextlib.suppress(Exception):
                        admin.close()
                    admin = None
                stop.wait(max(0.0, args.change_seconds - (time.monotonic() - tick)))

        def garbage() -> None:
            wait = 60.0
            while not stop.wait(wait):
                wait = args.garbage_minutes * 60
                produce_lines({"bootstrap.servers": kafka.bootstrap}, TOPIC, GARBAGE, out=None)
                counters["garbage"] += len(GARBAGE)

        for target in (churn, garbage):
            threads.append(threading.Thread(target=target, name=target.__name__, daemon=True))
            threads[-1].start()
        if not args.no_faults:
            injector = FaultInjector(
                watched, lambda m: say(f"fault: {m}"), seed=11, first_delay=20, pause=args.fault_pause_seconds
            ).start()

        half = duration / 2
        restart_at = [half * (i + 1) / (args.job_restarts + 1) for i in range(args.job_restarts)]
        other_at = {"bridge": half * 0.4, "api": half * 0.6}
        meter = CheckpointMeter(checkpoint)
        meter.look()
        last_batch = committed_batch(checkpoint)
        next_sample = 0.0
        with open(out_path, "a") as out:
            while (now := time.monotonic() - t0) < duration:
                if restart_at and now >= restart_at[0]:
                    restart_at.pop(0)
                    job.kill()
                    at = time.time()
                    job = start_job()
                    took = first_batch_after(job, at, 120)
                    restarts.append({"minute": round(elapsed_min(), 1), "what": "stream", "first_batch_s": took})
                    say(f"stream job killed (kill -9) and restarted: first batch after {took} s")
                for name, at_s in list(other_at.items()):
                    if now >= at_s:
                        del other_at[name]
                        proc = bridge if name == "bridge" else api
                        proc.kill()
                        proc.start()
                        restarts.append({"minute": round(elapsed_min(), 1), "what": name})
                        say(f"{name} killed (kill -9) and restarted")
                if job.proc.poll() is not None:
                    raise RuntimeError(f"the stream job exited ({job.proc.returncode}):\n{job.tail()}")
                if now >= next_sample:
                    next_sample = now + args.sample_seconds
                    written, size, by_area = meter.look()
                    batch = committed_batch(checkpoint)
                    parts = rss_breakdown(job.proc.pid)
                    jvm = jvm_pid(job.proc.pid)
                    nmt, nmt_areas = nmt_committed_mb(jvm) if args.nmt and jvm else (None, {})
                    sample = {
                        "minute": round(elapsed_min(), 2),
                        "job_mb": round(rss_tree_mb(job.proc.pid), 1),
                        "job_jvm_mb": round(parts.get("jvm", 0.0), 1),
                        "job_python_driver_mb": round(parts.get("python driver", 0.0), 1),
                        "job_python_workers_mb": round(
                            sum(v for k, v in parts.items() if "workers" in k and not k.endswith("(n)")), 1
                        ),
                        "bridge_mb": round(rss_tree_mb(bridge.proc.pid), 1),
                        "api_mb": round(rss_tree_mb(api.proc.pid), 1),
                        "nmt_committed_mb": nmt,
                        "nmt_areas": nmt_areas,
                        "fault_actions": injector.actions if injector is not None else 0,
                        "checkpoint_bytes": size,
                        "written_bytes": written,
                        "written_by_area": by_area,
                        "batches": max(0, batch - last_batch),
                        "batch_id": batch,
                        **counters,
                    }
                    sample["bytes_per_batch"] = round(written / sample["batches"]) if sample["batches"] else None
                    last_batch = batch
                    out.write(json.dumps(sample) + "\n")
                    out.flush()
                    say(
                        f"min {sample['minute']:.1f}: job {sample['job_mb']:.0f} MB (JVM {sample['job_jvm_mb']:.0f}"
                        + (f", NMT {sample['nmt_committed_mb']:.0f}" if sample["nmt_committed_mb"] else "")
                        + f"), bridge {sample['bridge_mb']:.0f}, api {sample['api_mb']:.0f}; checkpoint "
                        f"{size / 1e6:.1f} MB, {sample['batches']} batches wrote {written / 1e3:.0f} KB "
                        f"({sample['bytes_per_batch'] or 0:,} B/batch); {counters['changes']} changes"
                    )
                time.sleep(0.5)
        stop.set()
        quarantined = quarantined_count(metrics_port)
        summarize(out_path, restarts, duration / 60, counters, quarantined)
        remove_workdir(workdir, args.keep_workdir)
    finally:
        stop.set()
        if injector is not None:
            injector.stop()
        if job is not None:
            job.kill()
        for proc in (bridge, api):
            if proc is not None:
                proc.stop()
        for cluster in (watched, kafka):
            if cluster is not None:
                cluster.stop()


def quarantined_count(metrics_port: int) -> float | None:
    """The job's quarantined-records counter (None: not served)."""
    try:
        gauges = scrape(f"http://127.0.0.1:{metrics_port}/metrics")
    except OSError:
        return None
    return sum(v for k, v in gauges.items() if k.startswith("elrwatch_quarantined"))


def summarize(path: str, restarts: list[dict], minutes: float, counters: dict, quarantined: float | None) -> None:
    """Print the run's figures from its samples (see the module docstring)."""
    samples = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    marks = [m for m in (10, 60, 120) if m <= minutes + 1] or [round(minutes)]
    print("\n== soak figures ==", flush=True)
    second = [s for s in samples if s["minute"] >= minutes / 2]
    for key, label in (
        ("job_mb", "stream job (whole tree)"),
        ("job_jvm_mb", "  its JVM"),
        ("nmt_committed_mb", "  its JVM, NMT committed"),
        ("job_python_driver_mb", "  its Python driver"),
        ("job_python_workers_mb", "  its Python workers"),
        ("bridge_mb", "bridge"),
        ("api_mb", "api"),
    ):
        if not any(s.get(key) for s in samples):
            continue
        at = ", ".join(f"{m} min {v:,.0f} MB" for m in marks if (v := at_minute(samples, m, key)) is not None)
        slope = slope_mb_per_min([(s["minute"], s[key]) for s in second if s.get(key) is not None])
        verdict = "" if slope is None else ("  OK" if slope <= 0.5 else "  MISSED")
        slope_text = "n/a" if slope is None else f"{slope:+.2f} MB/min"
        print(f"RSS {label:<28} {at}; slope over the second half {slope_text} (target <= 0.5){verdict}")
    for m in marks:
        window = [s for s in samples if abs(s["minute"] - m) <= 5 and s["batches"]]
        if window:
            per = sum(s["written_bytes"] for s in window) / sum(s["batches"] for s in window)
            size = at_minute(samples, m, "checkpoint_bytes") or 0
            print(
                f"checkpoint around {m} min: {per:,.0f} B written per batch ({len(window)} samples), "
                f"size {size / 1e6:.1f} MB"
            )
    quiet = [  # samples whose interval saw no broker fault: config churn only (one change a second)
        s for before, s in itertools.pairwise(samples) if s["fault_actions"] == before["fault_actions"] and s["batches"]
    ]
    for label, chosen in (("every", samples), ("quiet (no broker fault in the interval)", quiet)):
        late = [s for s in chosen if s["minute"] >= min(60, minutes / 2) and s["batches"]]
        if late:
            per = sum(s["written_bytes"] for s in late) / sum(s["batches"] for s in late)
            verdict = "OK" if per <= 10_000 else "MISSED"
            print(
                f"checkpoint bytes per batch after minute {min(60, minutes / 2):g}, {label} sample: {per:,.0f} B "
                f"over {len(late)} samples (target <= 10 KB on a quiet cluster) {verdict}"
            )
    for r in restarts:
        if r["what"] == "stream":
            took = r["first_batch_s"]
            verdict = "" if took is None else ("  OK" if took <= 10 else "  MISSED")
            print(
                f"restart at {r['minute']} min: first batch after {took if took is None else f'{took:.1f}'} s"
                f" (target <= 10){verdict}"
            )
    print(
        f"chaos: {counters['changes']} config changes ({counters['change_errors']} refused while brokers were down), "
        f"{counters['topics']} topics created, {counters['garbage']} garbage lines sent, "
        f"quarantined counter {quarantined}"
    )


if __name__ == "__main__":
    main()
