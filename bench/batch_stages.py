"""Where a streaming micro-batch's Python time goes, stage by stage, outside Spark (one process, one core).

The job's Python work for one batch, run in-process on the same rows a micro-batch carries: parse + route
(`route.route_batches`, the read task's share), the state stage's pandas frame and ordering (`bucket.ordered_rows`),
each bucket's apply (`bucket_input.apply_rows`) and payload (`bucket.bucket_payload` + `payload.encode_payload`), the
state save, and the driver's decode + merge (`sink.Aggregator`), each output both ways: everything in Spark's output
rows (no rows directory: before) and the lists in a rows file with only the head in the output (the default: after),
with the bytes through Spark's output. What Spark adds on top (JVM fetch, Arrow hops,
the shuffle, scheduling) is the batch's run time in the job's log minus these figures.

Two workloads: ``churn`` (the throughput phase of bench/streaming.py: 10k partitions, 100k single-partition leader
moves per batch) and ``storm`` (a broker fenced on a cluster of ``--partitions``: ~``--storm-partitions`` changes).

Run: python bench/batch_stages.py [--events 100000] [--partitions 1000000] [--storm-partitions 100000] [--buckets 4]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pickle
import pstats
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from elrwatch.state.eventgen import EventGenerator
from elrwatch.streaming.bucket import bucket_payload, ordered_rows, run_bucket
from elrwatch.streaming.bucket_input import apply_rows
from elrwatch.streaming.config import StateSettings
from elrwatch.streaming.payload import (
    decode_payloads,
    encode_payload,
    iter_partition_rows,
    read_rows_file,
    write_rows_file,
)
from elrwatch.streaming.route import route_batches
from elrwatch.streaming.sink import Aggregator
from elrwatch.streaming.snapshots import SnapshotDir


def arrow_batches(
    lines: list[bytes], first_offset: int = 0, topic: str = "events", chunk: int = 10_000
) -> Iterator[Any]:
    """The rows a Kafka source hands to the route stage (value, topic, partition, offset from ``first_offset``),
    ``chunk`` a batch."""
    import pyarrow as pa

    for start in range(0, len(lines), chunk):
        part = lines[start : start + chunk]
        n = len(part)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([x.decode() for x in part], pa.string()),
                pa.array([topic] * n, pa.string()),
                pa.array([0] * n, pa.int32()),
                pa.array(range(first_offset + start, first_offset + start + n), pa.int64()),
            ],
            names=["value", "topic", "partition", "offset"],
        )


def timed(label: str, fn: Callable[[], Any], events: int) -> Any:
    gc.collect()
    started = time.perf_counter()
    out = fn()
    took = time.perf_counter() - started
    print(f"  {label:<58} {took:7.3f} s  {took / max(events, 1) * 1e6:6.2f} µs/event", flush=True)
    return out, took


def route_all(lines: list[bytes], buckets: int, first_offset: int = 0) -> Any:
    import pyarrow as pa

    return pa.Table.from_batches(list(route_batches(arrow_batches(lines, first_offset), buckets)))


def route_as_jvm(lines: list[bytes], buckets: int, first_offset: int = 0) -> Any:
    """The rows `route.route_in_jvm` gives (raw lines, placed or broadcast), computed here with the core's routing
    (Spark SQL does it in the JVM: no Python time of the job, so not timed)."""
    import pyarrow as pa

    from elrwatch.state.records import Record, parse_line
    from elrwatch.state.routing import ALL_BUCKETS, targets
    from elrwatch.streaming.route import KIND_RAW, KIND_RAW_BROADCAST

    cols: list[list[Any]] = [[], [], [], [], [], []]
    for i, line in enumerate(lines):
        parsed = parse_line(line)
        target = targets(parsed.type, parsed.data, buckets) if isinstance(parsed, Record) else ALL_BUCKETS
        moff = parsed.offset if isinstance(parsed, Record) and parsed.offset is not None else -1
        for bucket in range(buckets) if target == ALL_BUCKETS else (target,):
            for col, value in zip(
                cols,
                (
                    bucket,
                    "events/0",
                    first_offset + i,
                    moff,
                    KIND_RAW if target != ALL_BUCKETS else KIND_RAW_BROADCAST,
                    line,
                ),
                strict=True,
            ):
                col.append(value)
    return pa.table(
        {
            "bucket": pa.array(cols[0], pa.int32()),
            "src": cols[1],
            "seq": pa.array(cols[2], pa.int64()),
            "moff": pa.array(cols[3], pa.int64()),
            "kind": cols[4],
            "rec": pa.array(cols[5], pa.binary()),
        }
    )


def one_batch(
    name: str,
    warm: list[bytes],
    batch: list[bytes],
    buckets: int,
    routing: str = "python",
    profile: int = 0,
) -> float:
    """Load ``warm`` into the buckets (not timed), then time each Python stage of ``batch``; ``routing``: python
    (the Python sources: parse + route in the read task) or jvm (kafka-native: routed in Spark SQL, parsed in the
    bucket); ``profile``: print that many functions with the
    most own time in the buckets' apply + payload (cProfile). The bucket stage (apply + payload + rows file) of the
    slowest bucket."""
    print(f"{name}: {len(batch):,} events on a state of {len(warm):,} events, {buckets} buckets ({routing} routing)")
    with tempfile.TemporaryDirectory() as tmp:
        settings = StateSettings(buckets=buckets, state_dir=tmp)
        cache: dict[int, Any] = {}
        rows: dict[int, tuple[str, bytes]] = {}
        table = route_all(warm, buckets).to_pandas()
        for bucket, frame in table.groupby("bucket"):
            token, blob, _ = run_bucket(int(bucket), settings, None, ordered_rows(frame), len(frame), cache)
            rows[int(bucket)] = (token, blob)
        del table
        total = 0.0
        if routing == "jvm":
            routed = route_as_jvm(batch, buckets, len(warm))
            print("  parse + route: in the JVM (Spark SQL), not Python's")
        else:
            routed, took = timed(
                "parse + validate + route (read task)", lambda: route_all(batch, buckets, len(warm)), len(batch)
            )
            total += took
        frames, took = timed(
            "Arrow -> pandas, per bucket (state task)",
            lambda: dict(tuple(routed.to_pandas().groupby("bucket"))),
            len(batch),
        )
        total += took
        ordered, took = timed(
            "order the rows (sort by source, seq)",
            lambda: {b: ordered_rows(f) for b, f in frames.items()},
            len(batch),
        )
        total += took
        payloads: list[bytes] = []  # Spark's output rows with the lists inline (no rows directory)
        heads: list[bytes] = []  # Spark's output rows with the lists in rows files (the job's default)
        rows_dir = os.path.join(tmp, "rows")
        apply_s = payload_s = inline_s = files_s = save_s = 0.0
        applied = 0
        per_bucket: dict[int, float] = {}  # the bucket stage: apply + payload + rows file (+ head)
        profiler = cProfile.Profile() if profile else None
        for bucket, bucket_rows in ordered.items():
            token, bs = cache[int(bucket)]
            gc.disable()
            if profiler is not None:
                profiler.enable()
            t0 = time.perf_counter()
            applied_before = bs.counts.applied
            quarantined = apply_rows(int(bucket), buckets, bucket_rows, bs)
            applied += bs.counts.applied - applied_before
            t1 = time.perf_counter()
            payload = bucket_payload(int(bucket), bs, quarantined)
            t2 = time.perf_counter()
            if profiler is not None:
                profiler.disable()
            copy = pickle.loads(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))  # not timed
            t3 = time.perf_counter()
            payloads.extend(encode_payload(copy))
            t4 = time.perf_counter()
            write_rows_file(rows_dir, payload, token)
            heads.extend(encode_payload(payload))
            t5 = time.perf_counter()
            bs.to_row(SnapshotDir(tmp), int(bucket), token, settings.delta_max_records)
            t6 = time.perf_counter()
            gc.enable()
            per_bucket[int(bucket)] = (t1 - t0) + (t2 - t1) + (t5 - t4)
            apply_s += t1 - t0
            payload_s += t2 - t1
            inline_s += t4 - t3
            files_s += t5 - t4
            save_s += t6 - t5
        n = len(batch)
        if profiler is not None:
            print(f"  the buckets' apply + payload, the {profile} functions with the most own time (cProfile):")
            pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(profile)
        print(f"  ({applied:,} records applied, {sum(len(r) for r in ordered.values()):,} rows in the buckets)")
        stage = ", ".join(f"{b}: {t:.3f} s" for b, t in sorted(per_bucket.items()))
        print(
            f"  bucket stage (apply + payload + rows file) per bucket: {stage}; slowest {max(per_bucket.values()):.3f} s"
        )
        for label, took in (
            ("apply (every bucket in turn; jvm routing: parse included)", apply_s),
            ("changed partitions -> payload (documents, transitions)", payload_s),
            ("  before: encode it all into Spark's output rows", inline_s),
            ("  after: rows file (write + fsync) + encode the head", files_s),
            ("state save (snapshot delta)", save_s),
        ):
            print(f"  {label:<58} {took:7.3f} s  {took / n * 1e6:6.2f} µs/event", flush=True)
            total += took if not label.startswith("  before") else 0.0

        def merge(bodies: list[bytes]) -> Any:
            decoded, _chunks = decode_payloads(bodies)
            return Aggregator(buckets).absorb(decoded)

        for label, bodies in (("before", payloads), ("after", heads)):
            print(f"  {label}: Spark's output to the driver: {sum(map(len, bodies)):,} bytes in {len(bodies)} rows")
        _, before = timed("before: driver decode + merge (gauges ready)", lambda: merge(payloads), n)
        _, took = timed("after: driver decode + merge (gauges ready)", lambda: merge(heads), n)
        total += took
        print(f"  driver decode + merge after/before: {took / before:.3f}")
        names = sorted(os.listdir(rows_dir))

        def read_back() -> int:
            count = 0
            for name in names:
                _lists, chunks = read_rows_file(os.path.join(rows_dir, name))
                count += sum(1 for _ in iter_partition_rows(chunks))
            return count

        rows_read, _ = timed("after: store writer reads the rows files (behind the gauges)", read_back, n)
        files_bytes = sum(os.path.getsize(os.path.join(rows_dir, name)) for name in names)
        print(f"  ({len(names)} rows files, {files_bytes:,} bytes, {rows_read:,} partition rows)")
        print(
            f"  {'total Python work of the batch (after)':<58} {total:7.3f} s  {total / n * 1e6:6.2f} µs/event "
            f"-> {n / total:,.0f} events/s on one core",
            flush=True,
        )
        return max(per_bucket.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000, help="churn: events in the batch")
    parser.add_argument("--partitions", type=int, default=1_000_000, help="storm: cluster size")
    parser.add_argument("--storm-partitions", type=int, default=100_000, help="storm: partitions changed")
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--workloads", default="churn,storm")
    parser.add_argument(
        "--routing", default="python,jvm", help="python (the kafka and files sources), jvm (kafka-native)"
    )
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="print the N functions with the most own time (cProfile)"
    )
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}; one process")
    workloads = set(args.workloads.split(","))
    if "churn" in workloads:
        gen = EventGenerator(topics=10, partitions=1000, brokers=6, seed=1)
        warm = list(gen.bootstrap()) + list(gen.churn(args.events))
        batch = list(gen.churn(args.events))
        for routing in args.routing.split(","):
            took = one_batch("churn (bench/streaming.py's throughput phase)", warm, batch, 2, routing, args.profile)
            print(f"churn, {routing} routing: slowest bucket stage {took:.3f} s")
    if "storm" in workloads:
        brokers = max(4, round(3 * args.partitions / args.storm_partitions))
        topics = max(1, args.partitions // 10_000)
        gen = EventGenerator(topics=topics, partitions=args.partitions // topics, brokers=brokers, seed=3)
        warm = list(gen.bootstrap())
        batch = list(gen.fence(0))
        for routing in args.routing.split(","):
            took = one_batch(
                "storm (bench/streaming.py's storm phase)", warm, batch, args.buckets, routing, args.profile
            )
            print(f"storm, {routing} routing: slowest bucket stage {took:.3f} s")


if __name__ == "__main__":
    main()
