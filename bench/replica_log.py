"""Benchmark `elrwatch agent`'s reader (bridge/replica_log.py): how long reading a replica's log end offset takes.

On a synthetic partition directory (one segment of ``--segment-mb`` MB of v2 batches of ``--batch-kb`` KB, as a
producer writes them), it times:

* ``read_replica_log`` as the agent calls it for a replica whose recovery point is unknown (the whole last segment
  checked batch by batch, CRC-32C over every batch's bytes: Kafka's recovery of that segment);
* the same with the recovery point at the last segment's start (the same work: the last segment is always checked);
* headers only (``scan_segment(validate=False)``: what reading a segment below the recovery point costs).

The file was just written, so every run reads it from the page cache (as the sidecar reads what the broker just
wrote or recovered); a replica read from disk is bounded by the disk instead.

Run: python bench/replica_log.py [--segment-mb 256] [--batch-kb 16] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import struct
import tempfile
import time
from pathlib import Path

import crc32c

from elrwatch.bridge import replica_log as rl


def batch(base_offset: int, count: int, epoch: int, payload: bytes) -> bytes:
    """A v2 batch of ``count`` records (opaque body)."""
    after_crc = struct.pack(">hiqqqhii", 0, count - 1, 1000, 1000, -1, -1, -1, count) + payload
    return struct.pack(">qiibI", base_offset, 9 + len(after_crc), epoch, 2, crc32c.crc32c(after_crc)) + after_crc


def build(directory: Path, segment_mb: int, batch_kb: int) -> tuple[int, int]:
    """Write one segment; (batches, records)."""
    payload = bytes(range(256)) * (batch_kb * 4)
    records_per_batch = max(1, batch_kb * 1024 // 100)  # ~100-byte records
    target = segment_mb << 20
    offset = batches = 0
    with open(directory / f"{0:020d}.log", "wb") as fh:
        written = 0
        while written < target:
            data = batch(offset, records_per_batch, 3, payload)
            fh.write(data)
            written += len(data)
            offset += records_per_batch
            batches += 1
    return batches, offset


def timed(fn, runs: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segment-mb", type=int, default=256)
    parser.add_argument("--batch-kb", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="elrwatch-bench-") as tmp:
        directory = Path(tmp) / "bench-0"
        directory.mkdir()
        batches, records = build(directory, args.segment_mb, args.batch_kb)
        info = rl.read_replica_log(directory)
        assert info.log_end_offset == records and info.stop is None
        segment = directory / f"{0:020d}.log"
        results = {
            "validate (no recovery point)": timed(lambda: rl.read_replica_log(directory), args.runs),
            "validate (recovery point 0)": timed(lambda: rl.read_replica_log(directory, 0), args.runs),
            "headers only": timed(lambda: rl.scan_segment(segment, 0, validate=False), args.runs),
        }
        print(f"segment: {args.segment_mb} MB, {batches} batches of {args.batch_kb} KB, {records} records")
        for name, seconds in results.items():
            median = statistics.median(seconds)
            print(
                f"  {name:30s} median {median:.3f} s  ({args.segment_mb / median:.0f} MB/s, "
                f"{batches / median:,.0f} batches/s)  runs: {', '.join(f'{s:.3f}' for s in seconds)}"
            )


if __name__ == "__main__":
    main()
