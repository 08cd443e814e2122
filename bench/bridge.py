"""Benchmark `elrwatch bridge`: the admin poll's cost on a large real cluster, and the metadata-log decoder's rate.

1. **Admin poll** (``--partitions``, default 20000): a real Kafka 4.4.0 cluster (devtools/kafka_cluster.py,
   controller + ``--brokers`` brokers on this machine) with that many RF-1 partitions in topics of
   ``--per-topic``. Once every partition's log exists on its broker, it times the first poll (everything is new:
   DescribeCluster, DescribeTopicPartitions pages, DescribeConfigs of every topic, and the diff that derives one
   record per partition), then steady polls (nothing changed), split into the admin calls and the diff, with the
   brokers' CPU (less what they burn idle), and extrapolates **linearly** to 1M partitions — an extrapolation, not
   a measurement: the brokers' answer time per page and the client's parse time are assumed to stay per-partition.
2. **Decoder**: records/s of `metadata_log.scan` (batches → CRC → records → JSON-ready dicts) on the cluster's
   own metadata log (the controller's, with one PartitionRecord per partition), and on a synthetic segment of
   ``--records`` real records (values taken from tests/data/real-kafka/bridge/controller.log, re-batched like the
   controller writes them); and the whole metadata-log bridge (tail + envelopes + JSON lines, publishing to memory).

Sizing the cluster: each broker keeps one file open per partition it hosts, so with ``--brokers auto`` there are
enough brokers (at least 3) for each to host at most 85 % of this process's open-file limit (RLIMIT_NOFILE, which
the JVMs inherit; 20,000 here and not raisable: 6 brokers for 100k partitions). A broker past its limit fails to
create the rest of its logs ("Too many open files") while the controller's metadata still lists them with leaders,
then refuses connections: the bench checks that every partition's log exists before timing. ``--broker-heap auto``
(every node's ``-Xmx``) is the harness's 384m up to 50k partitions and 1g above (each broker caches the metadata
of every partition; 384 MB brokers with 33k partitions each spent their time in GC).

Run: python bench/bridge.py [--partitions 20000] [--per-topic 1000] [--brokers auto] [--broker-heap auto]
[--polls 3] [--records 300000] [--skip-cluster]
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import crc32c
import orjson

from elrwatch.bridge import metadata_log

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "real-kafka" / "bridge" / "controller.log"


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def _varint(n: int) -> bytes:
    return _uvarint((n << 1) ^ (n >> 63))


def synthetic_segment(records: int, per_batch: int = 20) -> bytes:
    """``records`` real metadata record values, in batches of ``per_batch`` (the controller batches its writes)."""
    values = [d.value for d in metadata_log.scan(FIXTURE.read_bytes()).records if d.value is not None]
    out = bytearray()
    offset = 0
    while offset < records:
        count = min(per_batch, records - offset)
        recs = b""
        for i in range(count):
            value = values[(offset + i) % len(values)]
            body = b"\x00" + _varint(0) + _varint(i) + _varint(-1) + _varint(len(value)) + value + _varint(0)
            recs += _varint(len(body)) + body
        after = struct.pack(">hiqqqhii", 0, count - 1, 0, 0, -1, -1, -1, count) + recs
        out += struct.pack(">qiibI", offset, 9 + len(after), 1, 2, crc32c.crc32c(after)) + after
        offset += count
    return bytes(out)


def bench_decoder(buf: bytes, label: str, repeat: int = 3) -> float:
    rates = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = metadata_log.scan(buf)
        seconds = time.perf_counter() - started
        assert not result.errors, result.errors[:3]
        rates.append(len(result.records) / seconds)
    rate = statistics.median(rates)
    print(
        f"decoder  {label}: {len(result.records):,} records, {len(buf) / 1e6:.1f} MB: "
        f"{rate:,.0f} records/s (median of {repeat}; {len(buf) / (len(result.records) / rate) / 1e6:.1f} MB/s)"
    )
    return rate


def bench_log_bridge(buf: bytes) -> float:
    from elrwatch.bridge.runner import LogBridge, MemoryPublisher, Metrics, StateFile

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / f"{0:020d}.log").write_bytes(buf)
        publisher = MemoryPublisher()
        bridge = LogBridge(tmp, publisher, StateFile(None), Metrics())
        started = time.perf_counter()
        while bridge.step():
            pass
        seconds = time.perf_counter() - started
    rate = len(publisher.lines) / seconds
    print(
        f"log bridge (tail + envelopes + JSON lines, memory publisher): {len(publisher.lines):,} records in "
        f"{seconds:.2f} s: {rate:,.0f} records/s"
    )
    return rate


def jvm_cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by these processes (Linux /proc; 0 for one that is gone)."""
    import os

    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MB (Linux /proc; 0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def heap_used_mb(pid: int) -> str:
    """The JVM's used / committed heap from ``jcmd <pid> GC.heap_info`` ("?" without jcmd or an answer)."""
    import re
    import subprocess

    try:
        proc = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"? {type(exc).__name__}"
    used = sum(int(k) for k in re.findall(r"used (\d+)K", proc.stdout)[:2])  # young + old generation (SerialGC)
    total = sum(int(k) for k in re.findall(r"total (\d+)K", proc.stdout)[:2])
    if not total:
        return f"? jcmd exit {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-200:]!r}"
    return f"{used / 1024:.0f}/{total / 1024:.0f}"


def default_heap(partitions: int) -> str:
    """The harness's 384m up to 50k partitions, 1g above (384 MB brokers spend their time in GC at 100k)."""
    return "384m" if partitions <= 50_000 else "1g"


def open_file_limit() -> int:
    import resource

    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def default_brokers(partitions: int) -> int:
    """At least 3 brokers, and enough that each hosts at most 85 % of the open-file limit in partitions."""
    per_broker = int(open_file_limit() * 0.85)
    return max(3, -(-partitions // per_broker))


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class TimedReader:
    """A ClusterReader that records how long each admin call takes (one DescribeTopicPartitions page each)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.times: dict[str, list[float]] = {}

    def _timed(self, name: str, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return getattr(self.inner, name)(*args)
        finally:
            self.times.setdefault(name, []).append(time.perf_counter() - started)

    def features(self) -> Any:
        return self._timed("features")

    def brokers(self) -> Any:
        return self._timed("brokers")

    def partitions_page(self, cursor: Any, limit: int) -> Any:
        return self._timed("partitions_page", cursor, limit)

    def configs(self, topics: list[str]) -> Any:
        return self._timed("configs", topics)

    def close(self) -> None:
        self.inner.close()


def bench_cluster(partitions: int, per_topic: int, polls: int, heap: str, brokers: int, idle_s: float = 10.0) -> None:
    from elrwatch.bridge.admin import KafkaClusterReader, diff, poll_view
    from elrwatch.bridge.runner import StateFile
    from elrwatch.devtools.kafka_cluster import ClusterError, KafkaCluster
    from elrwatch.kafkaio.config import kafka_python_config

    # Many partitions on small JVMs: small index files and no flush pressure. RF 1: no replica fetchers, so
    # num.replica.fetchers and replica.lag.time.max.ms play no part.
    props = {"log.index.size.max.bytes": "65536", "log.segment.bytes": str(1 << 20)}
    with KafkaCluster(brokers=brokers, broker_props=props, start_timeout=180, heap=heap) as cluster:
        topics = (partitions + per_topic - 1) // per_topic
        print(
            f"cluster  controller + {brokers} brokers, -Xmx{heap} each, open-file limit {open_file_limit():,} "
            f"(~{partitions // brokers:,} partitions a broker); load average {_loadavg()}"
        )
        started = time.monotonic()
        for t in range(topics):
            count = min(per_topic, partitions - t * per_topic)
            cluster.create_topic(f"bench-{t:04d}", partitions=count, replication_factor=1, wait=False)
        print(f"cluster  CreateTopics of {topics} topics answered in {time.monotonic() - started:.0f} s")

        def all_led() -> bool:
            try:
                state = cluster.describe_topic_partitions()
            except ClusterError:  # a topic just created is not in the brokers' metadata yet (UNKNOWN_TOPIC)
                return False
            return len(state) >= partitions and all(p["leader"] >= 0 for p in state.values())

        cluster.wait_for(all_led, f"{partitions} partitions with leaders", timeout=1800, interval=5)
        led = time.monotonic() - started

        def all_logs() -> bool:
            """Every partition's log exists on its broker (the metadata alone says nothing about that)."""
            for node in cluster.brokers.values():
                if "Too many open files" in node.log_path.read_text(errors="replace"):
                    raise ClusterError(
                        f"broker {node.node_id} ran out of file descriptors creating its logs "
                        f"(limit {open_file_limit():,}): use more --brokers"
                    )
            return sum(len(list(n.data_dir.glob("bench-*"))) for n in cluster.brokers.values()) >= partitions

        cluster.wait_for(all_logs, f"the logs of {partitions} partitions", timeout=1800, interval=5)
        print(
            f"cluster  {partitions:,} partitions in {topics} topics (RF 1, {brokers} brokers) created in "
            f"{time.monotonic() - started:.0f} s (leaders after {led:.0f} s, then every log); "
            f"load average {_loadavg()}"
        )
        cluster.wait_metadata_quiet(quiet_for=2.0, timeout=300)
        reader = TimedReader(
            KafkaClusterReader(kafka_python_config({"bootstrap.servers": cluster.bootstrap, "timeout.ms": "60000"}))
        )
        errors: list[tuple[str, str]] = []
        try:
            t0 = time.perf_counter()
            view = poll_view(reader, None, 2000, lambda r, m: errors.append((r, m)))
            t1 = time.perf_counter()
            events = diff(None, view, 0, 0)
            t2 = time.perf_counter()
            first = t2 - t0
            print(
                f"admin    first poll: admin calls {t1 - t0:.2f} s + diff {t2 - t1:.2f} s "
                f"({len(events):,} records derived) for {partitions:,} partitions"
            )
            steady_calls, steady_diff, steady_total, pages, cpu = [], [], [], [], []
            broker_pids = [b.proc.pid for b in cluster.brokers.values() if b.proc is not None]
            # The brokers' own background work (heartbeats, ISR and checkpoint timers over every partition) costs
            # CPU whether anyone polls or not: measured first, without polling, and taken off the polls' share.
            cpu_before, wall_before = jvm_cpu_seconds(broker_pids), time.perf_counter()
            time.sleep(idle_s)
            idle_cores = (jvm_cpu_seconds(broker_pids) - cpu_before) / (time.perf_counter() - wall_before)
            cpu_before, wall_before = jvm_cpu_seconds(broker_pids), time.perf_counter()
            for _ in range(polls):
                pages_before = len(reader.times.get("partitions_page", []))
                cpu_at = jvm_cpu_seconds(broker_pids)
                t0 = time.perf_counter()
                new = poll_view(reader, view, 2000, lambda r, m: errors.append((r, m)))
                t1 = time.perf_counter()
                changed = diff(view, new, len(events), 0)
                t2 = time.perf_counter()
                view = new
                steady_calls.append(t1 - t0)
                steady_diff.append(t2 - t1)
                steady_total.append(t2 - t0)
                pages.append(len(reader.times["partitions_page"]) - pages_before)
                cpu.append(jvm_cpu_seconds(broker_pids) - cpu_at)
            broker_cpu = jvm_cpu_seconds(broker_pids) - cpu_before
            steady_wall = time.perf_counter() - wall_before
            calls, diffs = statistics.median(steady_calls), statistics.median(steady_diff)
            print(
                "admin    steady polls, each: "
                + ", ".join(f"{t:.2f} s" for t in steady_total)
                + f" (p50 {statistics.median(steady_total):.2f} s, max {max(steady_total):.2f} s); "
                f"{'/'.join(str(n) for n in sorted(set(pages)))} DescribeTopicPartitions pages of 2,000 a poll; "
                f"load average {_loadavg()}"
            )
            nodes = [("controller", cluster.controller), *((f"broker {i}", b) for i, b in cluster.brokers.items())]
            print(
                "jvms     RSS MB (heap used/committed MB; open files): "
                + ", ".join(
                    f"{name} {rss_mb(n.proc.pid):.0f} ({heap_used_mb(n.proc.pid)}; {open_fds(n.proc.pid):,})"
                    for name, n in nodes
                    if n.proc is not None
                )
            )
            # What AdminBridge writes around a publish (runner.py): the view with the records as pending, then
            # the view alone. The first poll's publish carries every partition's record as pending.
            with tempfile.TemporaryDirectory() as tmp:
                state = StateFile(Path(tmp) / "bridge.json")
                sizes = []
                for pending in ([orjson.dumps(e).decode() for e in events], []):
                    t0 = time.perf_counter()
                    state.save(
                        {"source": "admin", "nextOffset": len(events), "view": view.to_json(), "pending": pending}
                    )
                    sizes.append((state.path.stat().st_size, time.perf_counter() - t0))
                loaded = time.perf_counter()
                state.load()
                loaded = time.perf_counter() - loaded
            (first_size, first_s), (size, saved) = sizes
            print(
                f"admin    state file (--state-file): {size / 1e6:.1f} MB ({size / partitions:.0f} B per partition), "
                f"written in {saved:.2f} s, read in {loaded:.2f} s; during the first poll's publish (its "
                f"{len(events):,} records pending) {first_size / 1e6:.1f} MB, written in {first_s:.2f} s"
            )
            poll_cpu = max(0.0, broker_cpu - idle_cores * steady_wall) / polls
            print(
                f"brokers  idle (no poll, {idle_s:.0f} s): {idle_cores:.2f} cores busy, all {brokers} brokers; "
                f"during the steady polls {broker_cpu:.2f} CPU s over {steady_wall:.2f} s "
                f"({broker_cpu / max(steady_wall, 1e-9):.2f} cores; each poll "
                + ", ".join(f"{c:.2f}" for c in cpu)
                + f" CPU s): the polls' share {poll_cpu:.2f} CPU s a poll; "
                f"at the default 2 s interval {poll_cpu / max(2.0, (calls + diffs)):.2f} cores of the cluster"
            )
            print(
                "admin    time per call over all polls: "
                + ", ".join(
                    f"{name} {sum(times) / len(times):.2f} s x{len(times)}" for name, times in reader.times.items()
                )
            )
            print(
                f"admin    steady poll (nothing changed, median of {polls}): admin calls {calls:.2f} s + diff "
                f"{diffs:.3f} s = {calls + diffs:.2f} s ({len(changed)} records); "
                f"{(calls + diffs) / partitions * 1e6:.1f} µs per partition"
            )
            scale = 1_000_000 / partitions
            print(
                f"admin    1M partitions, EXTRAPOLATED linearly (x{scale:.0f}, not measured): first poll "
                f"~{first * scale:.0f} s, steady poll ~{(calls + diffs) * scale:.0f} s (polls then run back to "
                "back whatever --interval says)"
            )
            if errors:
                print(f"admin    errors during the polls: {errors[:5]}")
        finally:
            reader.close()
        files = cluster.metadata_log_files()
        buf = b"".join(f.read_bytes() for f in files)
    # Measured once the cluster's JVMs are gone (they would compete for the same cores).
    bench_decoder(buf, f"the controller's real log ({len(files)} segments, mostly PartitionRecords)")


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=20000)
    parser.add_argument("--per-topic", type=int, default=1000)
    parser.add_argument("--polls", type=int, default=3, help="Steady polls timed (default 3).")
    parser.add_argument(
        "--broker-heap",
        default="auto",
        help="-Xmx of every Kafka node (e.g. 2g); auto: 384m up to 50k partitions, 1g above.",
    )
    parser.add_argument(
        "--brokers",
        default="auto",
        help="Brokers (RF 1); auto: at least 3, and each hosting at most 85 %% of the open-file limit in partitions.",
    )
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--skip-cluster", action="store_true", help="Only the decoder (no JVM).")
    args = parser.parse_args()
    heap = default_heap(args.partitions) if args.broker_heap == "auto" else args.broker_heap
    print(
        f"python {sys.version.split()[0]}; one process, pure-Python decoder (no JVM); {os.cpu_count()} cores, "
        f"load average {_loadavg()}"
    )
    buf = synthetic_segment(args.records)
    bench_decoder(buf, "synthetic segment of real records, 20 a batch")
    bench_log_bridge(buf)
    if not args.skip_cluster:
        brokers = default_brokers(args.partitions) if args.brokers == "auto" else int(args.brokers)
        bench_cluster(args.partitions, args.per_topic, args.polls, heap, brokers)


if __name__ == "__main__":
    main()
