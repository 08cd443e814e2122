"""How a bucket's state (a `ClusterState` with the columnar store) is kept between micro-batches: as an immutable
Arrow snapshot file (`state.partitions.columnar.snapshot`, memory-mapped on load) plus the delta of records applied
since, in Spark's state row (``--state-mode snapshot``, the default), or as the whole snapshot in the state row
(``--state-mode blob``: no shared filesystem needed, rewritten every batch).

No Spark import: the functions run in Spark's Python workers.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import pickle
import time
import uuid
import zlib
from typing import Any

import numpy as np

from elrwatch.state.cluster import ClusterState
from elrwatch.state.gauges import PipelineCounts
from elrwatch.state.partitions.columnar import snapshot as columnar_snapshot
from elrwatch.state.partitions.columnar.lines import LineBlock, stretches
from elrwatch.state.partitions.columnar.parse import line_record, parse_partition_lines
from elrwatch.streaming.config import DELTA_MAX_RECORDS
from elrwatch.streaming.route import decode_record

SNAPSHOT_SUFFIX = ".snap"
SNAPSHOTS_KEPT = 3  # per bucket, besides the one the loaded (committed) state references
# Snapshot mode: when a bucket's delta (records applied since its snapshot) exceeds either bound, the worker
# writes a new snapshot. Rows (`config.DELTA_MAX_RECORDS`) bound the replay on a worker-cache miss (~10 µs per
# record); bytes bound what every micro-batch ships through Arrow into the state store (~15 B per compressed
# PartitionChangeRecord).
DELTA_MAX_BYTES = 4 << 20
# A batch of at most this many records is quiet: past `QUIET_DELTA` records of delta, a quiet batch writes a
# snapshot, so that a storm does not pay for it and a restart or a cache miss after it replays little. A
# 250k-partition bucket's Arrow snapshot takes ~0.1 s to write and 0.04 s to load, its delta ~8 µs a record to
# replay: past 20k records, the next quiet batch snapshots (a load then takes ≤ ~0.2 s).
QUIET_BATCH_RECORDS = 1_000
QUIET_DELTA = 20_000
# A quiet cluster's delta grows slowly and every batch's state row carries all of it: once the bytes the rows
# carried since the base snapshot reach that snapshot's size (at least `MIN_BASE_BYTES`), a quiet batch writes a new
# one. A row then carries at most ≈ sqrt(2 × snapshot size × bytes per batch): flat over time, not growing with the
# history (a 1 record/s cluster with a 64 KB snapshot: rows ≤ ≈ 2.5 KB of delta).
MIN_BASE_BYTES = 64 << 10
#: Delta records per ``apply_batch`` call when a delta is replayed (log order kept across calls).
CHUNK = 1 << 18
#: The first byte of a snapshot-mode state row, and of a blob-mode one (the rows of the object engine of older
#: versions start with ``S`` or a zlib header: refused, `_older_row`).
ROW_TAG = b"C"
BLOB_TAG = b"B"


class SnapshotError(RuntimeError):
    """A bucket's snapshot file cannot be read (missing, corrupt): one line, raised in the Python worker."""


class SnapshotDir:
    """A directory of immutable bucket snapshots (Arrow files, `columnar_snapshot.save`), shared by every executor.

    Names are ``<run>-b<bucket>-<time_ns>-<token>.snap``: unique per write (a retried batch writes another
    file, never over one a committed state row may reference), sortable by age within a bucket. ``run`` is
    drawn when the bucket's state is created, so two jobs sharing a directory never touch each other's files.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    @staticmethod
    def name(run: str, bucket: int, token: str) -> str:
        return f"{run}-b{bucket:04d}-{time.time_ns():020d}-{token}{SNAPSHOT_SUFFIX}"

    def write(self, name: str, cluster: ClusterState) -> None:
        """Write ``cluster`` as snapshot ``name`` (tmp file + fsync + atomic rename + directory fsync: a reader sees
        the whole file or none)."""
        os.makedirs(self.path, exist_ok=True)
        columnar_snapshot.save(cluster, os.path.join(self.path, name))

    def size(self, name: str) -> int:
        """Snapshot ``name``'s size in bytes (0 when it cannot be read: the next one is then sized again)."""
        try:
            return os.path.getsize(os.path.join(self.path, name))
        except OSError:
            return 0

    def existing(self, bucket: int, name: str) -> str:
        """The path of snapshot ``name``, or a one-line SnapshotError when it is missing."""
        path = os.path.join(self.path, name)
        if not os.path.exists(path):
            raise SnapshotError(
                f"bucket {bucket}: snapshot {path} referenced by the checkpoint is missing (--state-dir must be "
                "the same directory, shared by every executor, for the life of the checkpoint)"
            )
        return path

    def read(self, bucket: int, name: str) -> ClusterState:
        """The state of a snapshot (memory-mapped), or a one-line SnapshotError."""
        path = self.existing(bucket, name)
        try:
            return columnar_snapshot.load(path)
        except columnar_snapshot.SnapshotError as exc:
            raise SnapshotError(f"bucket {bucket}: {exc}") from None

    def of_token(self, run: str, bucket: int, token: str) -> str | None:
        """The name of a snapshot of the bucket's state at ``token`` (every snapshot is named by the token of the
        state it holds: `name`), or None."""
        prefix, suffix = f"{run}-b{bucket:04d}-", f"-{token}{SNAPSHOT_SUFFIX}"
        try:
            return next((n for n in os.listdir(self.path) if n.startswith(prefix) and n.endswith(suffix)), None)
        except FileNotFoundError:
            return None

    def rotate(self, run: str, bucket: int, keep: set[str]) -> None:
        """Delete the bucket's snapshots except ``keep`` and the newest SNAPSHOTS_KEPT (a retried or zombie
        attempt of the current batch may still commit a row referencing one of those)."""
        prefix = f"{run}-b{bucket:04d}-"
        try:
            names = sorted(n for n in os.listdir(self.path) if n.startswith(prefix) and n.endswith(SNAPSHOT_SUFFIX))
        except FileNotFoundError:
            return
        for name in names[:-SNAPSHOTS_KEPT]:
            if name not in keep:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.path, name))


class BucketState:
    """What one bucket keeps between micro-batches: its state, its pipeline counts, the owned partition count of
    each topic it last emitted, and (snapshot mode) where its state row stands.

    Blob mode: the whole state in the state row (``to_blob``). Snapshot mode: the state row holds ``run``, the
    ``snapshot`` file name (None: the empty initial state) and the ``delta``: the journalled records applied since
    that snapshot, in apply order, as zlib'd chunks (one per micro-batch), plus counts.
    """

    __slots__ = (
        "cluster",
        "counts",
        "emitted_topic_counts",
        "run",
        "snapshot",
        "delta",
        "delta_rows",
        "delta_bytes",
        "journal",
        "must_snapshot",
        "caught_up",
        "carried",
        "base_bytes",
    )

    def __init__(self, cluster: ClusterState, counts: Any, emitted_topic_counts: dict[str, int]) -> None:
        self.cluster = cluster
        self.counts = counts
        self.emitted_topic_counts = emitted_topic_counts
        self.run = uuid.uuid4().hex[:12]
        self.snapshot: str | None = None
        self.delta: list[bytes] = []
        self.delta_rows = 0
        self.delta_bytes = 0
        #: This micro-batch's records as applied (snapshot mode): encoded records, and (source, seq, line) for the
        #: lines applied as blocks (`journal_items` reads them back).
        self.journal: list[Any] = []
        self.must_snapshot = False  # the state does not derive from (snapshot, delta): e.g. read from a blob
        self.caught_up = False  # loaded by catching up a stale cached state (see from_row)
        self.carried = 0  # delta bytes the state rows carried since the base snapshot (one row per batch)
        self.base_bytes = 0  # the base snapshot file's size (0: none yet)

    @classmethod
    def new(cls, bucket: int, buckets: int, default_min_isr: int | None) -> BucketState:
        """An empty bucket."""
        return cls(_empty_state(default_min_isr, bucket, buckets), PipelineCounts(), {})

    def to_blob(self) -> bytes:
        """Blob mode's state row: the whole state (the snapshot file's bytes), counts and emitted topic counts."""
        body = (columnar_snapshot.to_bytes(self.cluster), self.counts, self.emitted_topic_counts)
        return BLOB_TAG + zlib.compress(pickle.dumps(body, protocol=pickle.HIGHEST_PROTOCOL), 1)

    @classmethod
    def from_blob(cls, blob: bytes, bucket: int) -> BucketState:
        """The state of a blob-mode row (`to_blob`)."""
        data, counts, emitted = pickle.loads(zlib.decompress(blob[1:]))
        try:
            cluster = columnar_snapshot.from_bytes(data, f"of bucket {bucket}'s state row")
        except columnar_snapshot.SnapshotError as exc:
            raise SnapshotError(f"bucket {bucket}: {exc}") from None
        bs = cls(cluster, counts, emitted)
        bs.must_snapshot = True
        return bs

    def to_row(
        self,
        snapshots: SnapshotDir,
        bucket: int,
        token: str,
        max_records: int = DELTA_MAX_RECORDS,
        max_bytes: int = DELTA_MAX_BYTES,
        quiet_allowed: bool = True,
    ) -> bytes:
        """Snapshot mode: append this batch's records to the delta, or write a new snapshot when it is big, or
        past `QUIET_DELTA` in a quiet batch when ``quiet_allowed`` (`_rebase`, old ones rotated); the state row,
        `ROW_TAG` + the pickled `_row_fields`."""
        journal, self.journal = self.journal, []
        if journal:
            chunk = zlib.compress(marshal.dumps(journal), 1)
            self.delta.append(chunk)
            self.delta_rows += len(journal)
            self.delta_bytes += len(chunk)
        self.carried += self.delta_bytes
        quiet = quiet_allowed and len(journal) <= QUIET_BATCH_RECORDS and self.delta_rows > 0
        quiet_snapshot = quiet and (
            self.delta_rows > QUIET_DELTA or self.carried >= max(self.base_bytes, MIN_BASE_BYTES)
        )
        if self.must_snapshot or quiet_snapshot or self.delta_rows > max_records or self.delta_bytes > max_bytes:
            self._rebase(snapshots, bucket, token)
            self.must_snapshot = False
        return ROW_TAG + pickle.dumps(self._row_fields(), protocol=pickle.HIGHEST_PROTOCOL)

    def compact(self, snapshots: SnapshotDir, bucket: int, token: str) -> bool:
        """Between batches (the job idle): write the state at ``token`` (the committed row's) as a snapshot of its
        own when its delta is past `QUIET_DELTA`, and make it this state's base. A load of that row then finds it
        (`from_row`: no delta replayed); the row's older snapshot stays until a row naming the new one commits.
        True if it wrote one."""
        if self.must_snapshot or self.delta_rows <= QUIET_DELTA:
            return False
        self._rebase(snapshots, bucket, token)
        return True

    def _rebase(self, snapshots: SnapshotDir, bucket: int, token: str) -> None:
        """Write the state at ``token`` as a snapshot, rotate the older ones (keeping the one this state was based
        on) and make the new one the base, with an empty delta."""
        name = SnapshotDir.name(self.run, bucket, token)
        snapshots.write(name, self.cluster)
        snapshots.rotate(self.run, bucket, keep={name, self.snapshot or ""})
        self.snapshot, self.delta, self.delta_rows, self.delta_bytes = name, [], 0, 0
        self.carried, self.base_bytes = 0, snapshots.size(name)

    def _row_fields(self) -> dict[str, Any]:
        """What the snapshot-mode state row holds (`from_row` reads it back)."""
        return {
            "run": self.run,
            "snapshot": self.snapshot,
            "minIsr": self.cluster.default_min_isr,
            "delta": self.delta,
            "deltaRows": self.delta_rows,
            "deltaBytes": self.delta_bytes,
            "carried": self.carried,
            "baseBytes": self.base_bytes,
            "counts": self.counts,
            "emitted": self.emitted_topic_counts,
        }

    @classmethod
    def from_row(
        cls,
        row: bytes,
        snapshots: SnapshotDir | None,
        bucket: int,
        buckets: int,
        stale: BucketState | None = None,
        token: str | None = None,
    ) -> BucketState:
        """Either format: a snapshot-mode row (snapshot file + delta replayed) or a whole blob (blob mode).

        ``stale``: this worker's cached state of an older row. When the row's delta extends the delta it was
        built from (same run and snapshot, same first chunks), only the newer chunks are applied to it: the
        batches another worker processed since (a cache "catch-up" instead of a snapshot read). Else, when a
        snapshot of the row's own ``token`` exists (`compact` wrote it while the job was idle), that one is
        read and the delta is not replayed.
        """
        if row[:1] == BLOB_TAG:
            return cls.from_blob(row, bucket)
        if row[:1] != ROW_TAG:
            raise SnapshotError(_older_row(bucket))
        data = pickle.loads(row[1:])
        name = data["snapshot"]
        delta = data["delta"]
        catching_up = stale is not None and stale.catches_up_to(data)
        compacted = None
        if not catching_up and delta and token is not None and snapshots is not None:
            compacted = snapshots.of_token(data["run"], bucket, token)
        if catching_up:
            assert stale is not None
            cluster = stale.cluster
            chunks = delta[len(stale.delta) :]
        elif compacted is not None:
            assert snapshots is not None
            cluster = snapshots.read(bucket, compacted)
            chunks = []
        else:
            if name is None:
                cluster = _empty_state(data["minIsr"], bucket, buckets)
            elif snapshots is None:
                raise SnapshotError(
                    f"bucket {bucket}: the checkpoint's state is in snapshot files: --state-dir is needed"
                )
            else:
                cluster = snapshots.read(bucket, name)
            chunks = delta
        _replay(cluster, chunks)
        bs = cls(cluster, data["counts"], data["emitted"])
        bs.run, bs.snapshot, bs.delta = data["run"], name, delta
        bs.delta_rows, bs.delta_bytes = data["deltaRows"], data["deltaBytes"]
        bs.carried, bs.base_bytes = data.get("carried", 0), data.get("baseBytes", 0)  # older rows: none kept
        if compacted is not None:
            bs.snapshot, bs.delta, bs.delta_rows, bs.delta_bytes = compacted, [], 0, 0
            bs.carried, bs.base_bytes = 0, snapshots.size(compacted) if snapshots is not None else 0
        bs.caught_up = catching_up
        return bs

    def catches_up_to(self, data: dict[str, Any]) -> bool:
        """Whether this state (snapshot + its delta) is a prefix of the row ``data`` (snapshot + delta)."""
        k = len(self.delta)
        return (
            not self.must_snapshot
            and self.run == data["run"]
            and self.snapshot == data["snapshot"]
            and k <= len(data["delta"])
            and data["delta"][:k] == self.delta
        )


def _empty_state(default_min_isr: int | None, bucket: int, buckets: int) -> ClusterState:
    """The state of a bucket that names no snapshot yet."""
    return ClusterState(default_min_isr=default_min_isr, bucket=(bucket, buckets))


def _replay(cluster: ClusterState, chunks: list[bytes]) -> None:
    """Apply delta chunks (journalled when first applied, `journal_items`) in bounded batches, and
    forget what they changed (it was emitted when they were first applied)."""
    entries: list[Any] = []
    for chunk in chunks:
        entries.extend(marshal.loads(zlib.decompress(chunk)))
        if len(entries) >= CHUNK:
            cluster.apply_batch(journal_items(entries), owned=True)  # journalled by the bucket: its own
            entries = []
    if entries:
        cluster.apply_batch(journal_items(entries), owned=True)
    cluster.partitions.forget_changes()  # type: ignore[attr-defined]
    cluster.drain_quarantined()
    cluster.image.brokers.drain()
    cluster.image.topics.drain()


def journal_items(entries: list[Any]) -> list[Any]:
    """Journal entries as `ClusterState.apply_batch` items: an encoded record decoded, a run of raw lines
    (``(source, seq, line)``, journalled from `LineBlock`s) as blocks again."""
    items: list[Any] = []
    i, n = 0, len(entries)
    while i < n:
        if entries[i].__class__ is not tuple:
            items.append(decode_record(entries[i]))
            i += 1
            continue
        j = i + 1
        while j < n and entries[j].__class__ is tuple:
            j += 1
        sources = [source for source, _, _ in entries[i:j]]
        seqs = [seq for _, seq, _ in entries[i:j]]
        lines = [line for _, _, line in entries[i:j]]
        parsed = parse_partition_lines(lines)
        blocks = parsed.certain & (parsed.column("partitionId").fill_null(0).to_numpy(zero_copy_only=False) != 0)
        for lo, hi in stretches(blocks):
            if blocks[lo]:
                picked = np.arange(lo, hi, dtype=np.int64)
                seq_array = np.array(seqs[lo:hi], dtype=np.int64)
                items.append(LineBlock(parsed, picked, lines[lo:hi], sources[lo:hi], seq_array))
            else:
                items.extend(line_record(lines[k], sources[k], seqs[k]) for k in range(lo, hi))
        i = j
    return items


def _older_row(bucket: int) -> str:
    return (
        f"bucket {bucket}: the checkpoint's state was written by an older elrwatch (its object engine): this "
        "version reads only its own state rows; start the job on a new checkpoint"
    )
