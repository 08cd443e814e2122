"""Benchmark the columnar store's audit (state/partitions/columnar/audit.py) and snapshots (.../snapshot.py).

On ``--partitions`` (default 1M) partitions of the EventGenerator (RF 3, min ISR 2, the ELR feature on):

1. the load (one PartitionRecord per partition, batches of 100k); then two storms, each one batch: the fence of
   broker 0 (ISR 3 → 2: no partition needs the audit) and the fence of broker 1 (the partitions of both go below
   min ISR, with an ELR: each needs the audit). Printed: CPU seconds (`time.process_time`, the GC paused as the job
   does) and the rows audited;
2. a snapshot of the state: save time (tmp + fsync + rename; the second save, and the process's first) and file
   size; load time with the file in the page cache, and after the file's pages were dropped
   (`posix_fadvise(DONTNEED)`, as after a restart); then a third storm (the unfence of broker 0) applied to the
   original and to the loaded state, which must agree.

Run: python bench/columnar_snapshot.py [--partitions 1000000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/columnar.py's parse, also under python -P

from columnar import parse

from elrwatch.state.cluster import ClusterState
from elrwatch.state.eventgen import EventGenerator
from elrwatch.state.outcome import Outcome
from elrwatch.state.partitions.columnar.snapshot import load, save
from elrwatch.state.records import Record

BATCH = 100_000
TOPICS = 100


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    """CPU seconds of ``action`` and its result."""
    started = time.process_time()
    result = action()
    return time.process_time() - started, result


def wall(action: Callable[[], Any]) -> tuple[float, Any]:
    """Wall seconds of ``action`` (I/O included) and its result."""
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def apply(state: ClusterState, batch: list[Record]) -> list[Any]:
    """Apply one batch (every record must apply) and drain its transitions."""
    outcomes, _ = state.apply_batch(batch)
    assert all(o is Outcome.APPLIED for o in outcomes)
    return state.partitions.drain_transitions()  # type: ignore[attr-defined]


def digest(transitions: Iterable[Any]) -> list[tuple[Any, ...]]:
    return sorted((t.topic_id, t.partition_id, t.from_status, t.to_status, t.offset) for t in transitions)


def main() -> None:
    """Print the audit's and the snapshot's figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, help="where to write the snapshot (default: a temporary directory)")
    args = parser.parse_args()
    partitions = args.partitions
    gen = EventGenerator(topics=TOPICS, partitions=partitions // TOPICS, brokers=max(3, 3 * partitions // 100_000))
    gc.disable()
    state = ClusterState(default_min_isr=2, bucket=(0, 1))
    store = state.partitions
    seq = 1
    spent = 0.0
    lines = list(gen.bootstrap())
    for start in range(0, len(lines), BATCH):
        batch = parse(lines[start : start + BATCH], seq)
        seq += len(batch)
        spent += timed(lambda b=batch: apply(state, b))[0]
    print(f"{state.partition_count:,} partitions ({len(lines):,} load records)")
    print(f"  load   : {spent:6.2f} s, audited rows {store.audited_rows:,}")  # type: ignore[attr-defined]
    del lines
    for name, storm_lines in (("fence 0", list(gen.fence(0))), ("fence 1", list(gen.fence(1)))):
        storm = parse(storm_lines, seq)
        seq += len(storm)
        before = store.audited_rows  # type: ignore[attr-defined]
        took, transitions = timed(lambda s=storm: apply(state, s))
        print(
            f"  {name}: {len(storm):,} records, {len(transitions):,} transitions: {took:6.3f} s, audited rows "
            f"{store.audited_rows - before:,}, violations {sum(store.violations.counts.values()):,}"  # type: ignore[attr-defined]
        )
    with tempfile.TemporaryDirectory(prefix="bench-colsnap-", dir=args.dir) as directory:
        path = Path(directory) / "bucket.arrow"
        first_s, size = wall(lambda: save(state, path))
        save_s, size = wall(lambda: save(state, path))  # the job saves again and again: the second is typical
        warm_s, loaded = wall(lambda: load(path))
        del loaded
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        cold_s, loaded = wall(lambda: load(path))
        print(
            f"  snapshot: {size / 2**20:,.1f} MB, save {save_s:.3f} s (fsync'd; the process's first {first_s:.3f} s), "
            f"load {warm_s:.3f} s from the page "
            f"cache, {cold_s:.3f} s after its pages were dropped"
        )
    storm = parse(list(gen.unfence(0)), seq)
    original = digest(apply(state, storm))
    again = digest(apply(loaded, storm))
    same = (
        original == again
        and state.status_counts == loaded.status_counts
        and state.partitions.flag_histogram() == loaded.partitions.flag_histogram()  # type: ignore[attr-defined]
        and state.violations == loaded.violations
    )
    print(f"  unfence 0 after the load: {len(original):,} transitions; loaded state equals the original: {same}")
    if not same:
        raise SystemExit("the loaded state differs from the original")


if __name__ == "__main__":
    main()
