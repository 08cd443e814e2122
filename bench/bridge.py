"""Benchmark `elrwatch bridge`: the admin poll's cost on a large real cluster, and the metadata-log decoder's rate.

1. **Admin poll** (``--partitions``, default 20000): a real Kafka 4.4.0 cluster (devtools/kafka_cluster.py,
   controller + 3 brokers on this machine) with that many RF-1 partitions in topics of ``--per-topic``. It times
   the first poll (everything is new: DescribeCluster, DescribeTopicPartitions pages, DescribeConfigs of every
   topic, and the diff that derives one record per partition), then steady polls (nothing changed), split into
   the admin calls and the diff, and extrapolates **linearly** to 1M partitions — an extrapolation, not a
   measurement: the brokers' answer time per page and the client's parse time are assumed to stay per-partition.
2. **Decoder**: records/s of `metadata_log.scan` (batches → CRC → records → JSON-ready dicts) on the cluster's
   own metadata log (the controller's, with one PartitionRecord per partition), and on a synthetic segment of
   ``--records`` real records (values taken from tests/data/real-kafka/bridge/controller.log, re-batched like the
   controller writes them); and the whole metadata-log bridge (tail + envelopes + JSON lines, publishing to memory).

Run: python bench/bridge.py [--partitions 20000] [--per-topic 1000] [--records 300000] [--skip-cluster]
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import crc32c

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
    print(f"decoder  {label}: {len(result.records):,} records, {len(buf) / 1e6:.1f} MB: "
          f"{rate:,.0f} records/s (median of {repeat}; {len(buf) / (len(result.records) / rate) / 1e6:.1f} MB/s)")
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
    print(f"log bridge (tail + envelopes + JSON lines, memory publisher): {len(publisher.lines):,} records in "
          f"{seconds:.2f} s: {rate:,.0f} records/s")
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


def bench_cluster(partitions: int, per_topic: int, polls: int) -> None:
    from elrwatch.bridge.admin import KafkaClusterReader, diff, poll_view
    from elrwatch.devtools.kafka_cluster import ClusterError, KafkaCluster
    from elrwatch.streaming.sources import kafka_python_config

    # Many partitions on 3 small JVMs: small index files and no flush pressure.
    props = {"log.index.size.max.bytes": "65536", "log.segment.bytes": str(1 << 20)}
    with KafkaCluster(brokers=3, broker_props=props, start_timeout=120) as cluster:
        topics = (partitions + per_topic - 1) // per_topic
        started = time.monotonic()
        for t in range(topics):
            count = min(per_topic, partitions - t * per_topic)
            cluster.create_topic(f"bench-{t:04d}", partitions=count, replication_factor=1, wait=False)
        def all_led() -> bool:
            try:
                state = cluster.describe_topic_partitions()
            except ClusterError:  # a topic just created is not in the brokers' metadata yet (UNKNOWN_TOPIC)
                return False
            return len(state) >= partitions and all(p["leader"] >= 0 for p in state.values())

        cluster.wait_for(all_led, f"{partitions} partitions with leaders", timeout=1800, interval=5)
        print(f"cluster  {partitions:,} partitions in {topics} topics (RF 1, 3 brokers) created in "
              f"{time.monotonic() - started:.0f} s")
        cluster.wait_metadata_quiet(quiet_for=2.0, timeout=300)
        reader = TimedReader(KafkaClusterReader(kafka_python_config({"bootstrap.servers": cluster.bootstrap,
                                                                     "timeout.ms": "60000"})))
        errors: list[tuple[str, str]] = []
        try:
            t0 = time.perf_counter()
            view = poll_view(reader, None, 2000, lambda r, m: errors.append((r, m)))
            t1 = time.perf_counter()
            events = diff(None, view, 0, 0)
            t2 = time.perf_counter()
            first = t2 - t0
            print(f"admin    first poll: admin calls {t1 - t0:.2f} s + diff {t2 - t1:.2f} s "
                  f"({len(events):,} records derived) for {partitions:,} partitions")
            steady_calls, steady_diff = [], []
            broker_pids = [b.proc.pid for b in cluster.brokers.values() if b.proc is not None]
            cpu_before, wall_before = jvm_cpu_seconds(broker_pids), time.perf_counter()
            for _ in range(polls):
                t0 = time.perf_counter()
                new = poll_view(reader, view, 2000, lambda r, m: errors.append((r, m)))
                t1 = time.perf_counter()
                changed = diff(view, new, len(events), 0)
                t2 = time.perf_counter()
                view = new
                steady_calls.append(t1 - t0)
                steady_diff.append(t2 - t1)
            broker_cpu = jvm_cpu_seconds(broker_pids) - cpu_before
            steady_wall = time.perf_counter() - wall_before
            calls, diffs = statistics.median(steady_calls), statistics.median(steady_diff)
            print(f"brokers  load of the steady polls: {broker_cpu:.2f} CPU s over {steady_wall:.2f} s of polling "
                  f"({broker_cpu / max(steady_wall, 1e-9):.2f} cores busy, all 3 brokers; "
                  f"{broker_cpu / polls:.2f} CPU s per poll); at the default 2 s interval that is "
                  f"{broker_cpu / polls / max(2.0, (calls + diffs)):.2f} cores of the cluster")
            print("admin    time per call over all polls: " + ", ".join(
                f"{name} {sum(times) / len(times):.2f} s x{len(times)}" for name, times in reader.times.items()))
            print(f"admin    steady poll (nothing changed, median of {polls}): admin calls {calls:.2f} s + diff "
                  f"{diffs:.3f} s = {calls + diffs:.2f} s ({len(changed)} records); "
                  f"{(calls + diffs) / partitions * 1e6:.1f} µs per partition")
            scale = 1_000_000 / partitions
            print(f"admin    1M partitions, EXTRAPOLATED linearly (x{scale:.0f}, not measured): first poll "
                  f"~{first * scale:.0f} s, steady poll ~{(calls + diffs) * scale:.0f} s (polls then run back to "
                  "back whatever --interval says)")
            if errors:
                print(f"admin    errors during the polls: {errors[:5]}")
        finally:
            reader.close()
        files = cluster.metadata_log_files()
        buf = b"".join(f.read_bytes() for f in files)
    # Measured once the cluster's JVMs are gone (they would compete for the same cores).
    bench_decoder(buf, f"the controller's real log ({len(files)} segments, mostly PartitionRecords)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=20000)
    parser.add_argument("--per-topic", type=int, default=1000)
    parser.add_argument("--polls", type=int, default=3)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--skip-cluster", action="store_true", help="Only the decoder (no JVM).")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}; one process, pure-Python decoder (no JVM)")
    buf = synthetic_segment(args.records)
    bench_decoder(buf, "synthetic segment of real records, 20 a batch")
    bench_log_bridge(buf)
    if not args.skip_cluster:
        bench_cluster(args.partitions, args.per_topic, args.polls)


if __name__ == "__main__":
    main()
