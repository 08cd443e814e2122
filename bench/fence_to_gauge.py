"""Benchmark the whole pipeline's delay from a broker fence to the gauge: controller fence record → `elrwatch bridge`
→ event topic → `elrwatch stream` → ``elrwatch_brokers{state="fenced"}`` on the job's /metrics.

One real Kafka 4.4.0 KRaft cluster (devtools/kafka_cluster.py: controller 0 + brokers 1..3, on this machine) with
``--topics`` topics of 3 partitions (RF 3, min ISR 2) and one event topic per mode on broker 1. For each mode in
``--modes`` (admin, metadata-log), in turn: `elrwatch bridge --source <mode>` (a subprocess, ``--interval`` as
given, default the CLI's 2 s; the metadata-log bridge follows the controller's ``__cluster_metadata-0``; the admin
bridge polls all three brokers) and `elrwatch stream` (a subprocess, its default trigger, ``--metrics-port``) on
that mode's event topic; once the job has caught up (its /metrics show 3 active brokers and no source lag), each
repetition:

1. waits a random 0..``--jitter`` s (so that the fence falls at a random point of the bridge's poll and the job's
   trigger cycles: the previous repetition ended right after both), then kills -9 a broker (2 and 3 in turn:
   broker 1 holds the event topic, as the event topic's cluster would be a different one in production);
2. finds the controller's fence record for it (BROKER_REGISTRATION_CHANGE_RECORD with fenced=1, or
   FENCE_BROKER_RECORD) in its metadata log with the pure-Python decoder (``elrwatch.bridge.metadata_log``), and
   polls the job's /metrics every ``--poll-every`` s until ``elrwatch_brokers{state="fenced"}`` shows it;
   **delay = wall time when seen − the record's CreateTime** (same machine, same clock);
3. breaks it down: fence record → the bridge's publish (the event's record timestamp in the event topic, i.e. the
   producer's send time; admin mode also: the poll that saw it, the envelope's timestamp) → the micro-batch that
   carried it starting its sink (from the job's batch log line: log time − sink time) → its Spark run → gauge seen;
4. restarts the broker and waits until Kafka and the gauges show it unfenced again (and the gauges are back to
   their state before the kill).

Prints per mode p50, p99 (nearest rank: with fewer than 100 repetitions the p99 is the maximum), max, the median of
each stage, and the ratio to the 2 s freshness target of docs/PERFORMANCE.md.

Run: python bench/fence_to_gauge.py [--modes admin,metadata-log] [--repetitions 15] [--interval 2] [--keep-workdir]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import re
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from elrwatch.bridge import metadata_log
from elrwatch.devtools.kafka_cluster import KafkaCluster, free_port
from elrwatch.devtools.processes import cli_options, elrwatch_command, remove_workdir

#: The README's freshness target (Benchmarks: "freshness p99 ≤ 2 s").
TARGET_S = 2.0
FENCED = 'elrwatch_brokers{state="fenced"}'
ACTIVE = 'elrwatch_brokers{state="active"}'
#: Gauges that must be back to their value before the first kill before the next repetition.
SETTLED = (FENCED, ACTIVE, "elrwatch_at_min_isr_partitions", "elrwatch_global_under_min_isr_partitions")
BATCH_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) INFO elrwatch\.stream: batch (\d+): .* events=(\d+), "
    r"sink ([\d.]+)s \(run ([\d.]+)"
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def fetch_metrics(url: str, timeout: float = 2.0) -> dict[str, float]:
    """The samples of a /metrics page, keyed as printed (``name{labels}``); a light parser (polled every 50 ms)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[key] = float(value)
    return out


def try_metrics(url: str) -> dict[str, float]:
    try:
        return fetch_metrics(url)
    except OSError:
        return {}


class Proc:
    """A subprocess in its own process group, its output in a log file; `stop` ends it and everything it started."""

    def __init__(self, name: str, cmd: list[str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self.started = time.monotonic()
        with open(log_path, "wb") as out:
            self.proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (a clean stop), SIGKILL to the whole group after ``timeout`` s or for whatever is left."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{self.name} did not stop within {timeout:.0f} s: SIGKILL")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # its JVM, Python workers, ... if any outlived it
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)


def poll(cond: Any, timeout: float, what: str, procs: list[Proc], every: float = 0.2) -> Any:
    """Poll ``cond`` until truthy; fail when ``timeout`` passes or one of ``procs`` exited."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        for proc in procs:
            proc.check()
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


class LogCursor:
    """Follows the controller's metadata log segments with the pure-Python decoder, from where it last stopped."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self.path: Path | None = None
        self.pos = 0

    def read(self) -> list[metadata_log.Decoded]:
        """The records appended since the last call (complete batches only)."""
        out: list[metadata_log.Decoded] = []
        for path in self.cluster.metadata_log_files():
            if self.path is not None and path.name < self.path.name:
                continue
            if path != self.path:
                self.path, self.pos = path, 0
            buf = path.read_bytes()
            result = metadata_log.scan(buf, self.pos)
            self.pos = result.end
            out.extend(result.records)
        return out


def is_fence(decoded: metadata_log.Decoded, broker: int) -> bool:
    data = decoded.data or {}
    if decoded.type == "BROKER_REGISTRATION_CHANGE_RECORD":
        return data.get("brokerId") == broker and data.get("fenced") == 1
    return decoded.type == "FENCE_BROKER_RECORD" and data.get("id") == broker


class EventTopic:
    """Reads the event topic (one partition) from a remembered position: the fence event's record timestamp."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.tp = TopicPartition(topic, 0)
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, request_timeout_ms=10000
        )
        self.consumer.assign([self.tp])
        self.mark()

    def mark(self) -> None:
        self.start = self.consumer.end_offsets([self.tp])[self.tp]

    def find(self, match: Any, timeout: float = 20.0) -> tuple[int, dict[str, Any]] | None:
        """(record timestamp ms, envelope) of the first event since `mark` that ``match``es."""
        self.consumer.seek(self.tp, self.start)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for batch in self.consumer.poll(timeout_ms=500).values():
                for message in batch:
                    event = orjson.loads(message.value)
                    if match(event):
                        return message.timestamp, event
        return None

    def close(self) -> None:
        self.consumer.close()


def job_batches(path: Path) -> list[tuple[float, int, int, float, float]]:
    """(log time, batch id, cumulative events, sink s, Spark run s) of each batch line of the job's log."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        m = BATCH_LINE.match(line)
        if m:
            stamp = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
            out.append((stamp, int(m.group(3)), int(m.group(4)), float(m.group(5)), float(m.group(6))))
    return out


def carrying_batch(path: Path, published: float | None, seen: float) -> tuple[float, float] | None:
    """(sink start, Spark run s) of the micro-batch that carried the fence event: the first one that brought events
    and whose sink started after the event was published (its planning read the offsets after the append) and before
    the gauge showed it. Without the publish time: the last such batch before ``seen``. A batch's line is logged
    after its store write, which may come after ``seen``: None while it is not there yet."""
    found = None
    previous_events = None
    for stamp, _bid, events, sink, run in job_batches(path):
        start = stamp - sink
        brought = previous_events is None or events > previous_events
        previous_events = events
        if not brought or start > seen:
            continue
        if published is None:
            found = (start, run)
        elif start > published:
            return start, run
    return found


@dataclass
class Sample:
    victim: int
    killed: float  # wall s
    fence_offset: int
    fence_ms: int  # the record's CreateTime
    seen: float  # wall s when the gauge showed it
    scrape_s: float  # how long that scrape took (the resolution, with --poll-every)
    published_ms: int | None = None  # the event's record timestamp in the event topic
    polled_ms: int | None = None  # admin: the envelope's timestamp (the poll that saw the fence)
    batch_start: float | None = None
    batch_run: float | None = None

    @property
    def total(self) -> float:
        return self.seen - self.fence_ms / 1000

    def stages(self) -> dict[str, float]:
        out: dict[str, float] = {}
        fence = self.fence_ms / 1000
        if self.polled_ms is not None:
            out["fence -> admin poll saw it"] = self.polled_ms / 1000 - fence
        if self.published_ms is not None:
            out["fence -> bridge published"] = self.published_ms / 1000 - fence
            if self.batch_start is not None and self.batch_run is not None:
                out["published -> batch sink start"] = self.batch_start - self.published_ms / 1000
                out["batch Spark run"] = self.batch_run
                out["run end -> gauge seen"] = self.seen - self.batch_start - self.batch_run
            out["published -> gauge seen"] = self.seen - self.published_ms / 1000
        return out


@dataclass
class ModeResult:
    mode: str
    samples: list[Sample] = field(default_factory=list)
    bridge_errors: dict[str, float] = field(default_factory=dict)
    startup_s: float = 0.0


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def run_mode(cluster: KafkaCluster, mode: str, args: argparse.Namespace, workdir: Path) -> ModeResult:
    result = ModeResult(mode)
    topic = f"ev-{mode}"
    event_bootstrap = f"127.0.0.1:{cluster.brokers[1].port}"  # broker 1: never killed
    bridge_port, job_port = free_port(), free_port()
    bridge_cmd = elrwatch_command(
        "bridge",
        source=mode,
        bootstrap_servers=event_bootstrap,
        topic=topic,
        interval=args.interval,
        state_file=workdir / f"bridge-{mode}.json",
        metrics_port=bridge_port,
    )
    if mode == "admin":
        bridge_cmd += cli_options(admin_bootstrap_servers=cluster.bootstrap)
    else:
        bridge_cmd += cli_options(log_dir=cluster.controller.metadata_dir)
    job_cmd = elrwatch_command(
        "stream",
        bootstrap_servers=event_bootstrap,
        topic=topic,
        store=f"sqlite:///{workdir}/{mode}.db",
        checkpoint=workdir / f"ck-{mode}",
        metrics_port=job_port,
    )
    job_url = f"http://127.0.0.1:{job_port}/metrics"
    procs: list[Proc] = []
    events: EventTopic | None = None
    try:
        started = time.monotonic()
        procs.append(Proc(f"bridge ({mode})", bridge_cmd, workdir / f"bridge-{mode}.log"))
        job = Proc(f"stream ({mode})", job_cmd, workdir / f"stream-{mode}.log")
        procs.append(job)
        log(
            f"{mode}: bridge pid {procs[0].proc.pid}, stream job pid {job.proc.pid} (metrics :{job_port}); "
            "waiting for the job to catch up"
        )

        def caught_up() -> dict[str, float] | None:
            m = try_metrics(job_url)
            if (
                m.get(ACTIVE) == len(cluster.brokers)
                and m.get(FENCED) == 0
                and m.get("elrwatch_batches_total", 0) >= 1
                and m.get("elrwatch_source_lag_records", 1) == 0
            ):
                return m
            return None

        poll(caught_up, 900, f"{mode}: stream job caught up", procs, every=0.5)
        cluster.wait_metadata_quiet(quiet_for=1.0)
        baseline = poll(caught_up, 120, f"{mode}: stream job caught up after quiet", procs, every=0.2)
        baseline = {k: baseline.get(k) for k in SETTLED}
        result.startup_s = time.monotonic() - started
        log(f"{mode}: caught up after {result.startup_s:.0f} s; gauges {baseline}")
        events = EventTopic(event_bootstrap, topic)
        cursor = LogCursor(cluster)
        rng = random.Random(args.seed)
        for rep in range(args.repetitions):
            victim = (2, 3)[rep % 2]
            # A random phase: the previous repetition ended on a gauge change, i.e. right after a bridge publish
            # and a micro-batch, so without it every kill would fall at the same point of their cycles.
            time.sleep(rng.uniform(0, args.jitter))
            cursor.read()  # to the log's current end
            events.mark()
            killed = time.time()
            cluster.kill_broker(victim)
            fence: metadata_log.Decoded | None = None
            deadline = time.monotonic() + args.timeout
            seen = scrape_s = 0.0
            while True:
                if fence is None:
                    fence = next((d for d in cursor.read() if is_fence(d, victim)), None)
                t0 = time.time()
                m = try_metrics(job_url)
                t1 = time.time()
                if m.get(FENCED, 0) >= 1:
                    seen, scrape_s = t1, t1 - t0
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{mode}: broker {victim} not fenced in the gauge within {args.timeout:.0f} s")
                for proc in procs:
                    proc.check()
                time.sleep(args.poll_every)
            if fence is None:  # (the gauge cannot show it before the record exists: normally found already)
                fence = poll(
                    lambda v=victim: next((d for d in cursor.read() if is_fence(d, v)), None),
                    30,
                    f"broker {victim}'s fence record in the controller's metadata log",
                    procs,
                    0.05,
                )
            sample = Sample(victim, killed, fence.offset, fence.timestamp, seen, scrape_s)

            def match(event: dict[str, Any], fence: metadata_log.Decoded = fence, victim: int = victim) -> bool:
                if mode == "metadata-log":
                    return event.get("offset") == fence.offset
                data = event.get("data") or {}
                return (
                    event.get("type") == "BROKER_REGISTRATION_CHANGE_RECORD"
                    and data.get("brokerId") == victim
                    and data.get("fenced") == 1
                )

            found = events.find(match)
            if found is not None:
                sample.published_ms = found[0]
                if mode == "admin":
                    sample.polled_ms = found[1].get("timestamp")
            published = None if sample.published_ms is None else sample.published_ms / 1000

            def batch(p: float | None = published, s: float = seen) -> tuple[float, float] | None:
                return carrying_batch(job.log_path, p, s)

            with contextlib.suppress(TimeoutError):  # (the breakdown then lacks the batch's stages)
                sample.batch_start, sample.batch_run = poll(batch, 15, "the carrying batch's log line", procs, 0.1)
            result.samples.append(sample)
            stages = ", ".join(f"{k} {v:.2f}" for k, v in sample.stages().items())
            log(
                f"{mode} #{rep + 1}/{args.repetitions}: broker {victim} killed; fence record offset "
                f"{fence.offset} {fence.timestamp / 1000 - killed:.2f} s after the kill; gauge after "
                f"**{sample.total:.2f} s** ({stages}; scrape {scrape_s * 1000:.0f} ms)"
            )
            cluster.start_broker(victim, timeout=180)

            def settled() -> bool:
                m = try_metrics(job_url)
                return all(m.get(k) == v for k, v in baseline.items())

            poll(settled, 180, f"{mode}: broker {victim} unfenced in the gauges", procs, every=0.2)
            cluster.wait_metadata_quiet(quiet_for=1.0, timeout=120)
            poll(settled, 120, f"{mode}: gauges settled", procs, every=0.2)
        bridge_metrics = try_metrics(f"http://127.0.0.1:{bridge_port}/metrics")
        result.bridge_errors = {
            k: v for k, v in bridge_metrics.items() if k.startswith("elrwatch_bridge_errors_total{") and v
        }
        return result
    except BaseException:
        for proc in procs:
            log(f"last lines of {proc.name} ({proc.log_path}):\n{proc.tail(2000)}")
        raise
    finally:
        if events is not None:
            events.close()
        for proc in reversed(procs):
            proc.stop()


def report(result: ModeResult, interval: float) -> None:
    totals = [s.total for s in result.samples]
    if not totals:
        print(f"{result.mode}: no samples")
        return
    p50, p99 = statistics.median(totals), nearest_rank(totals, 0.99)
    print(
        f"\n{result.mode} (bridge --interval {interval:g} s, stream default trigger 1 s), "
        f"{len(totals)} fences: fence record -> gauge p50 {p50:.2f} s, p99 {p99:.2f} s, max {max(totals):.2f} s, "
        f"min {min(totals):.2f} s"
    )
    print(
        f"  ratio to the {TARGET_S:g} s freshness target: p50 {p50 / TARGET_S:.2f}, p99 {p99 / TARGET_S:.2f} "
        f"({'met' if p99 <= TARGET_S else 'missed'} at p99)"
    )
    names: list[str] = []
    for s in result.samples:
        names += [n for n in s.stages() if n not in names]
    for name in names:
        values = [s.stages()[name] for s in result.samples if name in s.stages()]
        print(f"  {name:<32} median {statistics.median(values):5.2f} s, max {max(values):5.2f} s (n={len(values)})")
    print(
        f"  kill -> fence record (Kafka's session timeout, not counted): median "
        f"{statistics.median(s.fence_ms / 1000 - s.killed for s in result.samples):.2f} s"
    )
    print(
        f"  gauge poll: every 50 ms + scrape (median {statistics.median(s.scrape_s for s in result.samples) * 1000:.0f}"
        f" ms); all delays: {', '.join(f'{t:.2f}' for t in totals)}"
    )
    print(
        f"  bridge errors: {result.bridge_errors or 'none'}; job and bridge startup to caught up "
        f"{result.startup_s:.0f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="admin,metadata-log", help="bridge modes, in order (comma-separated)")
    parser.add_argument("--repetitions", type=int, default=15, help="fences per mode")
    parser.add_argument(
        "--interval", type=float, default=2.0, help="the bridge's --interval (default: the CLI's default, 2 s)"
    )
    parser.add_argument("--topics", type=int, default=3, help="topics of 3 partitions, RF 3, min ISR 2")
    parser.add_argument(
        "--jitter",
        type=float,
        default=None,
        help="before each kill, wait a random 0..JITTER s so that the fence falls at a random point "
        "of the bridge's and the job's cycles (default: the larger of --interval and the 1 s "
        "trigger)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the jitter")
    parser.add_argument("--poll-every", type=float, default=0.05, help="seconds between two scrapes of /metrics")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for a fence to reach the gauge")
    parser.add_argument(
        "--keep-workdir",
        action="store_true",
        help="keep the work directory (Kafka data, job and bridge logs) after a run that succeeded; "
        "a failed run always keeps it",
    )
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in ("admin", "metadata-log") for m in modes):
        parser.error("--modes takes admin and/or metadata-log")
    if args.jitter is None:
        args.jitter = max(args.interval, 1.0)
    if args.repetitions < 1:
        parser.error("--repetitions must be at least 1")

    def terminate(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    workdir = Path(tempfile.mkdtemp(prefix="elrwatch-fence-bench-"))
    load = os.getloadavg()
    print(
        f"elrwatch fence -> gauge bench: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f}; modes {', '.join(modes)}; {args.repetitions} fences each; bridge --interval {args.interval:g} s; "
        f"jitter 0..{args.jitter:g} s before each kill; workdir {workdir}",
        flush=True,
    )
    results: list[ModeResult] = []
    try:
        with KafkaCluster(brokers=3, base_dir=workdir / "kafka") as cluster:
            log(
                f"cluster up (controller pid {cluster.controller.proc.pid}, brokers "
                f"{[b.proc.pid for b in cluster.brokers.values()]})"
            )
            for t in range(args.topics):
                cluster.create_topic(
                    f"bench-{t}", partitions=3, replication_factor=3, configs={"min.insync.replicas": "2"}
                )
            for mode in modes:
                cluster.create_topic(f"ev-{mode}", replica_assignment={0: [1]})
            for mode in modes:
                results.append(run_mode(cluster, mode, args, workdir))
    except BaseException:
        print(f"work directory kept for inspection: {workdir}", flush=True)
        for result in results:
            report(result, args.interval)
        raise
    for result in results:
        report(result, args.interval)
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    remove_workdir(workdir, args.keep_workdir)


if __name__ == "__main__":
    main()
