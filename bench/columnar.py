"""Benchmark the batch engine (state/columnar.py) against the object core (`ClusterState.apply`) in one process.

1. The load: ``--partitions`` partitions (EventGenerator bootstrap: features, brokers, topics, PartitionRecords)
   applied to an empty bucket state (``bucket=(0, 1)``: the ownership check runs as in the streaming job).
2. The storm: a broker fence on that state (EventGenerator.fence: one PartitionChangeRecord per partition whose
   ISR holds the broker, ≈ 3 × partitions / brokers, then the broker record, which refreshes every partition of
   the broker).

For each, per engine: CPU seconds of this process (`time.process_time`: the machine is shared, wall time varies
with the others' load) to apply (records already parsed; the GC paused, as the job does), µs per record,
then seconds for the bucket's output (`streaming.bucket.bucket_payload`: drain, changed rows, gauges), and the
ratio core / engine. The engines' states are `ClusterState`s either way; the RSS each added is printed.

Run: python bench/columnar.py [--partitions 1000000] [--brokers 30] [--topics 100]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from elrwatch.devtools.eventgen import EventGenerator
from elrwatch.state.cluster import ClusterState, Outcome
from elrwatch.state.columnar import BatchEngine
from elrwatch.state.gauges import PipelineCounts
from elrwatch.state.records import Record, parse_line
from elrwatch.streaming.bucket import bucket_payload
from elrwatch.streaming.snapshots import BucketState


def rss_mb() -> float:
    """This process's resident set size, MB (Linux)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def parse(lines: list[bytes], source: str, first_seq: int = 1) -> list[Record]:
    out = []
    for seq, line in enumerate(lines, first_seq):
        record = parse_line(line, source, seq, f"{source}@{seq}")
        assert isinstance(record, Record), record
        out.append(record)
    return out


def core_apply(cluster: ClusterState) -> Callable[[list[Record]], list[Outcome]]:
    apply = cluster.apply
    return lambda records: [apply(r) for r in records]


def engine_apply(engine: BatchEngine) -> Callable[[list[Record]], list[Outcome]]:
    return lambda records: engine.apply_batch(records)[0]


def timed(apply: Callable[[list[Record]], list[Outcome]], records: list[Record]) -> tuple[float, list[Outcome]]:
    gc.disable()
    try:
        started = time.process_time()
        outcomes = apply(records)
        return time.process_time() - started, outcomes
    finally:
        gc.enable()


def payload_seconds(bs: BucketState) -> tuple[float, dict[str, Any]]:
    gc.disable()
    try:
        started = time.process_time()
        payload = bucket_payload(0, bs, [])
        return time.process_time() - started, payload
    finally:
        gc.enable()


def run_engine(name: str, load_lines: list[bytes], storm_lines: list[bytes]) -> dict[str, Any]:
    """Load then storm with one engine; its figures."""
    load, storm = parse(load_lines, "events"), parse(storm_lines, "events", len(load_lines) + 1)
    gc.collect()
    before = rss_mb()
    cluster = ClusterState(default_min_isr=2, bucket=(0, 1))
    engine = BatchEngine(cluster)
    apply = core_apply(cluster) if name == "core" else engine_apply(engine)
    bs = BucketState(cluster, PipelineCounts(), {})
    load_s, outcomes = timed(apply, load)
    assert all(o is Outcome.APPLIED for o in outcomes)
    load_out_s, _ = payload_seconds(bs)
    cluster.index_brokers()  # as the job does between batches
    del load, outcomes
    gc.collect()
    state_mb = rss_mb() - before
    storm_s, outcomes = timed(apply, storm)
    assert all(o is Outcome.APPLIED for o in outcomes)
    storm_out_s, payload = payload_seconds(bs)
    return {
        "load": load_s, "load_out": load_out_s, "storm": storm_s, "storm_out": storm_out_s, "state_mb": state_mb,
        "fast": engine.fast_records, "rows": len(payload["partitions"]), "transitions": len(payload["transitions"]),
        "gauges": payload["gauges"],
    }


def main() -> None:
    """Run the load and the storm on each engine (each in a process of its own) and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1_000_000)
    parser.add_argument("--brokers", type=int, default=30)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--engine", choices=("core", "engine"), help=argparse.SUPPRESS)  # one run, JSON out
    args = parser.parse_args()
    if args.partitions % args.topics:
        parser.error("--partitions must be a multiple of --topics")
    if args.engine is None:
        results = {}
        for name in ("core", "engine"):
            argv = [sys.executable, __file__, "--engine", name, *sys.argv[1:]]
            done = subprocess.run(argv, check=True, capture_output=True, text=True)
            results[name] = json.loads(done.stdout.splitlines()[-1])
        n_load, n_storm = results["core"]["n_load"], results["core"]["n_storm"]
        print(f"{n_load} load records ({args.partitions} partitions), {n_storm} storm records (fence of a broker)")
        for name, r in results.items():
            print(f"{name:6}: load {r['load']:6.2f} s ({r['load'] / n_load * 1e6:5.2f} µs/record), output "
                  f"{r['load_out']:5.2f} s | storm {r['storm']:5.3f} s ({r['storm'] / n_storm * 1e6:5.2f} "
                  f"µs/record), output {r['storm_out']:5.3f} s | state +{r['state_mb']:,.0f} MB RSS"
                  + (f" | fast path: {r['fast']} records" if name == "engine" else ""))
        core, fast = results["core"], results["engine"]
        same = all(core[k] == fast[k] for k in ("rows", "transitions", "gauges"))
        print(f"ratio core/engine: load apply {core['load'] / fast['load']:.2f}x, storm apply "
              f"{core['storm'] / fast['storm']:.2f}x, storm apply + output "
              f"{(core['storm'] + core['storm_out']) / (fast['storm'] + fast['storm_out']):.2f}x; "
              f"storm rows, transitions and gauges equal: {same}")
        return
    gen = EventGenerator(topics=args.topics, partitions=args.partitions // args.topics, brokers=args.brokers, seed=1)
    load_lines = list(gen.bootstrap())
    storm_lines = list(gen.fence(0))
    result = run_engine(args.engine, load_lines, storm_lines)
    result.update(n_load=len(load_lines), n_storm=len(storm_lines))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
