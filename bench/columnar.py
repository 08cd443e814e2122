"""Benchmark the columnar store (state/partitions/columnar/, the runtime's) against the object store (the
specification): a `ClusterState` of each.

For each cluster size (``--partitions``, default 100k and 1M), each store runs in a process of its own:

1. the load: the EventGenerator's bootstrap (features, brokers, topics, one PartitionRecord per partition), read
   from a file written beforehand, parsed and applied in batches of 100k records (the object store then builds its
   broker index, as a long-lived state does);
2. the storm: the fence of broker 0, one PartitionChangeRecord per partition whose ISR holds it (with RF 3 and
   ``3 × partitions / 100k`` brokers: 100k records), then the broker's own record, applied as one batch.

Printed per store: CPU seconds of the process (`time.process_time`: the machine is shared) to apply the storm
(records already parsed, the GC paused as the job does), with its transitions drained as `Transition` objects,
and the load's apply time; the time to build the bucket's output after the storm (its changed rows as
`partition_row` lists with their stored form, and the partition gauges: the object store's `drain_changes` rows
+ `gauges.partition_gauges`, the columnar store's `output.drain` (Arrow rows) + `output.partition_gauges`); the
state's memory (RSS added by the load once the parsed records are freed and ``malloc_trim`` ran, and for the
columnar store the bytes of its columns); then the ratio objects / columnar, and whether the two agree on the
storm's transitions, the status counts, the changed rows and the gauges.

Run: python bench/columnar.py [--partitions 100000 1000000]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from elrwatch.state.cluster import ClusterState
from elrwatch.state.eventgen import EventGenerator
from elrwatch.state.gauges import as_samples, partition_gauges
from elrwatch.state.outcome import Outcome
from elrwatch.state.partition_row import partition_row
from elrwatch.state.partitions.columnar import output
from elrwatch.state.records import Record, parse_line
from elrwatch.state.report import stored_partition

BATCH = 100_000
TOPICS = 100


def rss_mb() -> float:
    """This process's resident set size, MB (Linux)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def parse(lines: list[bytes], first_seq: int) -> list[Record]:
    """Parse envelope lines (every one must be a record)."""
    out = []
    for seq, line in enumerate(lines, first_seq):
        record = parse_line(line, "events", seq)
        assert isinstance(record, Record), record
        out.append(record)
    return out


def write_inputs(partitions: int, directory: Path) -> tuple[Path, Path]:
    """The load's and the storm's lines, one file each."""
    brokers = max(3, 3 * partitions // 100_000)
    gen = EventGenerator(topics=TOPICS, partitions=partitions // TOPICS, brokers=brokers, seed=1)
    load, storm = directory / f"load-{partitions}.jsonl", directory / f"storm-{partitions}.jsonl"
    with load.open("wb") as out:
        out.writelines(line + b"\n" for line in gen.bootstrap())
    with storm.open("wb") as out:
        out.writelines(line + b"\n" for line in gen.fence(0))
    return load, storm


def trimmed_rss_mb() -> float:
    """RSS after a full collection and glibc's malloc_trim (freed memory handed back where it can be)."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_mb()


def run(store: str, load_path: Path, storm_path: Path) -> dict[str, Any]:
    """Load then storm with one store ("objects" or "columnar"), from the files."""
    gc.disable()
    before = trimmed_rss_mb()
    cluster = ClusterState(default_min_isr=2, bucket=(0, 1), store=store)
    load_s = 0.0
    seq = 1
    n_load = 0

    def apply(batch: list[Record]) -> float:
        started = time.process_time()
        outcomes = cluster.apply_batch(batch)[0]
        elapsed = time.process_time() - started
        assert all(o is Outcome.APPLIED for o in outcomes)
        return elapsed

    with load_path.open("rb") as lines:
        while chunk := list(itertools.islice(lines, BATCH)):
            load_s += apply(parse(chunk, seq))
            seq += len(chunk)
            n_load += len(chunk)
    started = time.process_time()
    if store == "objects":
        cluster.partitions.index_brokers()  # type: ignore[attr-defined]
        cluster.drain_changes()
    else:
        cluster.partitions.drain_transitions()  # type: ignore[attr-defined]
    load_s += time.process_time() - started
    if store == "columnar":  # what the load changed, as the object store's drain forgot it (not timed)
        output.drain(cluster.partitions)  # type: ignore[arg-type]
    state_mb = trimmed_rss_mb() - before
    storm = parse(storm_path.read_bytes().splitlines(), seq)
    started = time.process_time()
    storm_apply_s = apply(storm)
    if store == "objects":
        changes = cluster.drain_changes()
        transitions = changes.transitions
    else:
        transitions = cluster.partitions.drain_transitions()  # type: ignore[attr-defined]
    counts = {k: v for k, v in cluster.status_counts.items() if v}
    storm_s = time.process_time() - started
    started = time.process_time()
    if store == "objects":
        stored, min_isr = stored_partition, cluster.effective_min_isr
        rows = [partition_row(t.name, p, min_isr(t), stored(cluster, t, p)) for t, p in changes.partitions]
        rows_s = time.process_time() - started
    else:
        table = output.drain(cluster.partitions).partitions  # type: ignore[arg-type]
        rows_s = time.process_time() - started  # the job's buckets emit the Arrow table; the store writer makes rows
        rows = list(output.rows_of(table)) if table is not None else []
    started = time.process_time()
    gauges = partition_gauges(cluster)
    gauges_s = time.process_time() - started
    rows.sort(key=lambda r: (r[0], r[1]))
    table_mb = cluster.partitions.table.nbytes() / 2**20 if store == "columnar" else None  # type: ignore[attr-defined]
    return {
        "n_load": n_load,
        "n_storm": len(storm),
        "load_s": load_s,
        "storm_apply_s": storm_apply_s,
        "storm_s": storm_s,
        "state_mb": state_mb,
        "table_mb": table_mb,
        "transitions": len(transitions),
        "transition_digest": sorted(
            (t.topic_id, t.partition_id, t.from_status, t.to_status, t.offset) for t in transitions
        )[:: max(1, len(transitions) // 1000)],
        "counts": counts,
        "fast_records": cluster.partitions.fast_records if store == "columnar" else 0,  # type: ignore[attr-defined]
        "rows_s": rows_s,
        "gauges_s": gauges_s,
        "n_rows": len(rows),
        "rows_digest": rows[:: max(1, len(rows) // 1000)],
        "gauges": as_samples(gauges),
    }


def main() -> None:
    """Run each size with each store in a process of its own and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--store", choices=("objects", "columnar"), help=argparse.SUPPRESS)
    parser.add_argument("--inputs", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if any(p % TOPICS for p in args.partitions):
        parser.error(f"--partitions must be multiples of {TOPICS}")
    if args.store is not None:
        print(json.dumps(run(args.store, *args.inputs)))
        return
    for partitions in args.partitions:
        with tempfile.TemporaryDirectory(prefix="bench-columnar-") as directory:
            inputs = write_inputs(partitions, Path(directory))
            results = compare(partitions, inputs)
        report(partitions, results)


def compare(partitions: int, inputs: tuple[Path, Path]) -> dict[str, dict[str, Any]]:
    """Each store's figures, each from a process of its own."""
    results = {}
    for store in ("objects", "columnar"):
        argv = [sys.executable, "-P", __file__, "--store", store, "--inputs", *map(str, inputs)]
        done = subprocess.run(argv, check=True, capture_output=True, text=True)
        results[store] = json.loads(done.stdout.splitlines()[-1])
    return results


def report(partitions: int, results: dict[str, dict[str, Any]]) -> None:
    """Print one size's figures and ratios."""
    core, fast = results["objects"], results["columnar"]
    print(
        f"{partitions:,} partitions: load {core['n_load']:,} records, storm {core['n_storm']:,} records "
        f"(fence of broker 0)"
    )
    for name, r in (("objects", core), ("columnar", fast)):
        table = f", columns {r['table_mb']:.0f} MB" if r["table_mb"] is not None else ""
        print(
            f"  {name:8}: storm apply {r['storm_apply_s']:6.3f} s ({r['storm_apply_s'] / r['n_storm'] * 1e6:5.2f}"
            f" µs/record), with transitions {r['storm_s']:6.3f} s | load {r['load_s']:6.2f} s | state "
            f"+{r['state_mb']:,.0f} MB RSS{table}"
        )
        print(
            f"          output: {r['n_rows']:,} changed rows {r['rows_s']:6.3f} s ({r['rows_s'] / r['n_rows'] * 1e6:5.2f}"
            f" µs/row) + partition gauges {r['gauges_s']:6.3f} s = {r['rows_s'] + r['gauges_s']:6.3f} s"
        )
    same = all(core[k] == fast[k] for k in ("transitions", "transition_digest", "counts"))
    same_output = all(core[k] == fast[k] for k in ("n_rows", "rows_digest", "gauges"))

    def output_s(r: dict[str, Any]) -> float:
        return r["rows_s"] + r["gauges_s"]

    print(
        f"  ratio objects/columnar: storm apply {core['storm_apply_s'] / fast['storm_apply_s']:.2f}x, with "
        f"transitions {core['storm_s'] / fast['storm_s']:.2f}x, load {core['load_s'] / fast['load_s']:.2f}x, "
        f"memory {core['state_mb'] / max(fast['state_mb'], 1):.2f}x | {core['transitions']:,} transitions; "
        f"transitions and status counts equal: {same}"
    )
    print(
        f"  ratio objects/columnar: output {output_s(core) / output_s(fast):.2f}x (rows {core['rows_s'] / fast['rows_s']:.2f}x,"
        f" gauges {core['gauges_s'] / max(fast['gauges_s'], 1e-6):.2f}x) | rows and gauges equal: {same_output}"
    )


if __name__ == "__main__":
    main()
