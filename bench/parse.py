"""The parse of a storm's partition records: one Record per line (`records.parse_line`, what a bucket does today)
against the columnar parse with its proof (`state/partitions/columnar/parse.py`: Arrow's JSON reader, then vector checks that
each line would give the same Record).

The lines are a broker fence's PartitionChangeRecords (``--partitions`` partitions, RF 3, 30 brokers per 1M: ~10%
of them change) in runs of ``--run`` lines, a bucket's share of a storm batch. Printed per method: the best of
``--repeat`` runs in µs a line, the share of lines the columnar parse is certain of, and the ratio. The GC is paused,
as in the job's state stage.

Run: python bench/parse.py [--partitions 1000000] [--run 25000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

from elrwatch.state.eventgen import EventGenerator
from elrwatch.state.partitions.columnar.parse import parse_partition_lines
from elrwatch.state.records import parse_line


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    """The shortest of ``repeat`` runs of ``fn``, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1_000_000, help="cluster size")
    parser.add_argument("--run", type=int, default=25_000, help="lines parsed together (a bucket's share)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per method; the best is printed")
    args = parser.parse_args()
    topics = max(1, args.partitions // 10_000)
    brokers = max(4, round(30 * args.partitions / 1_000_000))
    gen = EventGenerator(topics=topics, partitions=args.partitions // topics, brokers=brokers, seed=3)
    print(f"generating a {args.partitions:,}-partition cluster and a broker fence...", flush=True)
    for _ in gen.bootstrap():
        pass
    storm = [x if isinstance(x, bytes) else x.encode() for x in gen.fence(0)]
    lines = storm[: args.run]
    print(f"{len(lines):,} lines of the fence's {len(storm):,}", flush=True)
    gc.disable()
    objects = best_of(args.repeat, lambda: [parse_line(x, "events/0", i, None) for i, x in enumerate(lines)])
    columns = best_of(args.repeat, lambda: parse_partition_lines(lines))
    certain = float(parse_partition_lines(lines).certain.mean())
    gc.enable()
    per_line = 1e6 / len(lines)
    print(f"object parse (parse_line)            {objects * per_line:6.2f} us a line")
    print(f"columnar parse + proof               {columns * per_line:6.2f} us a line   certain {certain:.1%}")
    print(f"ratio object / columnar              {objects / columns:6.2f}")


if __name__ == "__main__":
    main()
