"""Does a bucket's snapshot stop growing? Churn (with metadata offsets) applied one record a batch, as a quiet
cluster's buckets apply it, to a 2k-partition state; the snapshot's bytes and the conflict ring's filled slots every
2,000 records. The snapshot holds the ring of the last `RECENT_OFFSETS` records: it grows until the ring is full,
then stays flat (docs/PERFORMANCE.md, "Running for weeks").

    python bench/snapshot_bound.py [--records 20000]
"""

from __future__ import annotations

import argparse

from elrwatch.state.cluster import ClusterState
from elrwatch.state.eventgen import EventGenerator
from elrwatch.state.image.positions import RECENT_OFFSETS
from elrwatch.state.partitions.columnar import snapshot
from elrwatch.state.records import Record, parse_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000, help="churn records after the bootstrap")
    args = parser.parse_args()
    gen = EventGenerator(topics=4, partitions=500, brokers=6, seed=1)
    cluster = ClusterState()
    seq = 0

    def apply(line: bytes) -> None:
        nonlocal seq
        seq += 1
        record = parse_line(line, "events/0", seq, f"events/0@{seq}")
        if isinstance(record, Record):
            cluster.apply_batch([record], owned=True)

    for line in gen.bootstrap():
        apply(line)
    print(f"ring of {RECENT_OFFSETS:,} records; snapshot bytes every 2,000 churn records", flush=True)
    sizes = []
    for i, line in enumerate(gen.churn(args.records), 1):
        apply(line)
        if i % 2000 == 0:
            cluster.drain_quarantined()
            cluster.partitions.forget_changes()  # type: ignore[attr-defined]
            size = len(snapshot.to_bytes(cluster))
            filled = sum(r is not None for r in cluster.image.positions.recent_records)
            sizes.append((filled, size))
            print(f"  {i:>7,} records: snapshot {size:>10,} B, ring {filled:,} filled", flush=True)
    full = [size for filled, size in sizes if filled == RECENT_OFFSETS]
    if len(full) >= 2:
        print(f"ring full: snapshot {min(full):,}–{max(full):,} B ({(max(full) - min(full)) / min(full):.1%} apart)")


if __name__ == "__main__":
    main()
