"""Simulator throughput: records/s written by `elrwatch simulate` (target >= 100k records/s).

Runs in-process (no subprocess start-up in the figure) into an in-memory buffer, so it measures the controller
model, the replay of each record into the simulator's state and JSON encoding. Prints wall-clock and CPU-time
rates (CPU time is the stable figure on a shared machine). Usage:

    python bench/simulate.py [--partitions-per-topic 10000] [--topics 10] [--faults-records 200000]
"""

from __future__ import annotations

import argparse
import io
import time

from elrwatch.state.simulator import simulate


def _run(label: str, **kwargs: object) -> float:
    out = io.BytesIO()
    start, cpu_start = time.perf_counter(), time.process_time()
    sim = simulate(out, **kwargs)  # type: ignore[arg-type]
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    rate, cpu_rate = sim.records_written / elapsed, sim.records_written / cpu
    size_mb = out.getbuffer().nbytes / 1e6
    print(
        f"{label:<28} {sim.records_written:>9} records {elapsed:6.2f} s wall {rate:>9,.0f} records/s"
        f" | {cpu:6.2f} s CPU {cpu_rate:>9,.0f} records/s | {size_mb:6.1f} MB"
    )
    return cpu_rate


def main() -> None:
    """Print records/s for a bootstrap-heavy scenario, a fault storm and random faults."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions-per-topic", type=int, default=10_000)
    parser.add_argument("--brokers", type=int, default=30)
    parser.add_argument("--faults-records", type=int, default=200_000)
    args = parser.parse_args()
    shape = {
        "brokers": args.brokers,
        "topics": args.topics,
        "partitions": args.partitions_per_topic,
        "replication_factor": 3,
        "min_isr": 2,
        "seed": 7,
    }
    rates = [
        _run("broker-failure-storm", scenario="broker-failure-storm", **shape),
        _run("rolling-restart", scenario="rolling-restart", **{**shape, "brokers": 6, "partitions": 1000}),
        _run(
            "random faults (rate 0.5)",
            faults=0.5,
            records=args.faults_records,
            **{**shape, "topics": 4, "partitions": 500},
        ),
    ]
    print(f"slowest (CPU time, the machine may be shared): {min(rates):,.0f} records/s (target 100,000)")


if __name__ == "__main__":
    main()
