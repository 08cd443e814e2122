"""How a bucket's state (a `ClusterState` with the columnar store) is kept between micro-batches: as an immutable
Arrow snapshot file (`state.partitions.columnar.snapshot`, memory-mapped on load) plus the delta of records applied
since (``--state-mode snapshot``, the default), or as the whole snapshot in the state row (``--state-mode blob``: no
shared filesystem needed, rewritten every batch).

Snapshot mode writes in proportion to the batch: each micro-batch's applied records go to a delta file of their
own (a *chunk*, immutable, naming the chunk before it), and Spark's state row holds only the snapshot's name, the
newest chunk's name and counts, a few hundred bytes whatever the history. A new snapshot is written when the chunks
since the last one hold as many bytes as it does (so a snapshot's cost is spread over at least as many bytes of
batches), past `QUIET_DELTA` records or `MAX_CHUNKS` chunks, in a quiet batch or between batches.

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
#: A delta chunk file: one micro-batch's applied records (`SnapshotDir.write_chunk`).
CHUNK_SUFFIX = ".delta"
SNAPSHOTS_KEPT = 3  # per bucket, besides the one the loaded (committed) state references
# Snapshot mode: when a bucket's delta (records applied since its snapshot) would exceed either bound, the worker
# writes a new snapshot. Rows (`config.DELTA_MAX_RECORDS`) bound the replay on a worker-cache miss (~10 µs per
# record); bytes bound the delta chunk files a load reads (~15 B per compressed PartitionChangeRecord).
DELTA_MAX_BYTES = 4 << 20
# A batch of at most this many records is quiet: past `QUIET_DELTA` records of delta, a quiet batch writes a
# snapshot, so that a storm does not pay for it and a restart or a cache miss after it replays little. A
# 250k-partition bucket's Arrow snapshot takes ~0.1 s to write and 0.04 s to load, its delta ~8 µs a record to
# replay: past 20k records, the next quiet batch snapshots (a load then takes ≤ ~0.2 s).
QUIET_BATCH_RECORDS = 1_000
QUIET_DELTA = 20_000
# Once the chunks since the base snapshot hold as many bytes as that snapshot (at least `MIN_BASE_BYTES`), a quiet
# batch writes a new one: what the batches write, chunks and snapshots together, is then at most twice their
# records' bytes on average.
MIN_BASE_BYTES = 64 << 10
# ... or once they are this many files (a quiet cluster's one record a second: a snapshot every ~30 minutes; a load
# reads at most this many small files).
MAX_CHUNKS = 2_000
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

    def existing(self, bucket: int, name: str, what: str = "snapshot") -> str:
        """The path of snapshot (or ``what``) ``name``, or a one-line SnapshotError when it is missing."""
        path = os.path.join(self.path, name)
        if not os.path.exists(path):
            raise SnapshotError(
                f"bucket {bucket}: {what} {path} referenced by the checkpoint is missing (--state-dir must be "
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

    def write_chunk(self, run: str, bucket: int, token: str, previous: str | None, chunk: bytes) -> str:
        """Write one micro-batch's delta ``chunk`` (zlib'd journal) as a chunk file naming ``previous`` (the chunk
        before it since the base snapshot, None for the first); its name. Named like a snapshot (`name`): unique
        per attempt, sortable by age within the bucket. tmp + fsync + rename: whole or absent."""
        name = f"{run}-b{bucket:04d}-{time.time_ns():020d}-{token}{CHUNK_SUFFIX}"
        os.makedirs(self.path, exist_ok=True)
        path = os.path.join(self.path, name)
        tmp = os.path.join(self.path, f".{name}.tmp-{os.getpid()}")
        try:
            with open(tmp, "wb") as out:
                out.write(pickle.dumps((previous, chunk), protocol=pickle.HIGHEST_PROTOCOL))
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
        return name

    def chain(self, bucket: int, newest: str | None, count: int, oldest_previous: str | None = None) -> list[bytes]:
        """The ``count`` delta chunks ending with chunk ``newest``, oldest first; the chunk before the oldest must
        be ``oldest_previous`` (a one-line SnapshotError otherwise, or when a file is missing or unreadable)."""
        chunks: list[bytes] = []
        name = newest
        for _ in range(count):
            if name is None:
                raise SnapshotError(f"bucket {bucket}: its delta chain ends before its {count} chunks")
            path = self.existing(bucket, name, "delta chunk")
            try:
                with open(path, "rb") as fh:
                    name, chunk = pickle.loads(fh.read())
            except (OSError, pickle.UnpicklingError, ValueError, EOFError, TypeError) as exc:
                raise SnapshotError(f"bucket {bucket}: delta chunk {path} cannot be read: {exc}") from None
            chunks.append(chunk)
        if name != oldest_previous:
            raise SnapshotError(f"bucket {bucket}: its delta chain does not start where its state row says")
        chunks.reverse()
        return chunks

    def rotate(self, run: str, bucket: int, keep: set[str], prune_chunks: bool = True) -> None:
        """Delete the bucket's snapshots except ``keep`` and the newest SNAPSHOTS_KEPT (a retried or zombie
        attempt of the current batch may still commit a row referencing one of those), and with ``prune_chunks``
        the delta chunks written before the oldest snapshot kept (only a row based on an older snapshot can
        reference them; ``keep`` must then hold the snapshot the committed row is based on)."""
        prefix = f"{run}-b{bucket:04d}-"
        try:
            names = sorted(n for n in os.listdir(self.path) if n.startswith(prefix))
        except FileNotFoundError:
            return
        snapshots = [n for n in names if n.endswith(SNAPSHOT_SUFFIX)]
        kept = snapshots[-SNAPSHOTS_KEPT:] + [n for n in snapshots if n in keep]
        for name in snapshots[:-SNAPSHOTS_KEPT]:
            if name not in keep:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.path, name))
        if not kept or not prune_chunks:
            return
        oldest = min(_written_ns(n) for n in kept)
        for name in names:
            if name.endswith(CHUNK_SUFFIX) and _written_ns(name) < oldest:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.path, name))


def _written_ns(name: str) -> int:
    """The write time in a snapshot's or chunk's name (``<run>-b<bucket>-<time_ns>-<token><suffix>``)."""
    try:
        return int(name.split("-")[2])
    except (IndexError, ValueError):
        return 0


class BucketState:
    """What one bucket keeps between micro-batches: its state, its pipeline counts, the owned partition count of
    each topic it last emitted, and (snapshot mode) where its state row stands.

    Blob mode: the whole state in the state row (``to_blob``). Snapshot mode: the state row holds ``run``, the
    ``snapshot`` file name (None: the empty initial state), the newest delta chunk file (``tail``) and how many
    chunks lead to it from the snapshot (``chunks``): the journalled records applied since that snapshot, in apply
    order, one zlib'd chunk per micro-batch. ``delta`` holds the chunks inline instead in rows of earlier versions
    (read, never written).
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
        "tail",
        "chunks",
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
        self.tail: str | None = None  # the newest delta chunk file since the base snapshot
        self.chunks = 0  # delta chunk files since the base snapshot
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
        """Snapshot mode: write this batch's records as a delta chunk file, or a new snapshot when the delta is
        big, or in a quiet batch when ``quiet_allowed`` and the delta is past `QUIET_DELTA` records, `MAX_CHUNKS`
        files or the snapshot's size (`_rebase`, old ones rotated); the state row, `ROW_TAG` + the pickled
        `_row_fields`."""
        journal, self.journal = self.journal, []
        chunk = zlib.compress(marshal.dumps(journal), 1) if journal else b""
        rows, size, chunks = self.delta_rows + len(journal), self.delta_bytes + len(chunk), self.chunks + bool(journal)
        quiet = quiet_allowed and len(journal) <= QUIET_BATCH_RECORDS and rows > 0
        quiet_snapshot = quiet and (
            rows > QUIET_DELTA or chunks >= MAX_CHUNKS or size >= max(self.base_bytes, MIN_BASE_BYTES)
        )
        if self.must_snapshot or quiet_snapshot or rows > max_records or size > max_bytes:
            self._rebase(snapshots, bucket, token)  # the batch's records are in the snapshot: no chunk for them
            self.must_snapshot = False
        elif journal:
            if self.delta:  # a row of an earlier version: its delta stays inline until the next snapshot
                self.delta.append(chunk)
            else:
                self.tail = snapshots.write_chunk(self.run, bucket, token, self.tail, chunk)
                self.chunks = chunks
            self.delta_rows, self.delta_bytes = rows, size
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
        # a committed row based on no snapshot yet references chunks older than every snapshot: kept this time
        snapshots.rotate(self.run, bucket, keep={name, self.snapshot or ""}, prune_chunks=self.snapshot is not None)
        self.snapshot, self.delta, self.delta_rows, self.delta_bytes = name, [], 0, 0
        self.tail, self.chunks, self.base_bytes = None, 0, snapshots.size(name)

    def _row_fields(self) -> dict[str, Any]:
        """What the snapshot-mode state row holds (`from_row` reads it back)."""
        return {
            "run": self.run,
            "snapshot": self.snapshot,
            "minIsr": self.cluster.default_min_isr,
            "delta": self.delta,
            "tail": self.tail,
            "chunks": self.chunks,
            "deltaRows": self.delta_rows,
            "deltaBytes": self.delta_bytes,
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
        inline: list[bytes] = data["delta"]  # rows of earlier versions: the chunks inline
        tail, count = data.get("tail"), data.get("chunks", 0)
        if count and snapshots is None:
            raise SnapshotError(f"bucket {bucket}: the checkpoint's state is in snapshot files: --state-dir is needed")
        chunks: list[bytes] = []
        cluster: ClusterState | None = None
        if stale is not None and stale.catches_up_to(data):
            try:
                if inline:
                    chunks = inline[len(stale.delta) :]
                elif count > stale.chunks:
                    assert snapshots is not None
                    chunks = snapshots.chain(bucket, tail, count - stale.chunks, stale.tail)
                elif tail != stale.tail:
                    raise SnapshotError("another chain")
                cluster = stale.cluster
            except SnapshotError:  # the row's chain does not extend the cached state's: a full load
                chunks = []
        catching_up = cluster is not None
        compacted = None
        if not catching_up and (inline or count) and token is not None and snapshots is not None:
            compacted = snapshots.of_token(data["run"], bucket, token)
        if catching_up:
            pass
        elif compacted is not None:
            assert snapshots is not None
            cluster = snapshots.read(bucket, compacted)
        else:
            if name is None:
                cluster = _empty_state(data["minIsr"], bucket, buckets)
            elif snapshots is None:
                raise SnapshotError(
                    f"bucket {bucket}: the checkpoint's state is in snapshot files: --state-dir is needed"
                )
            else:
                cluster = snapshots.read(bucket, name)
            if count:
                assert snapshots is not None
                chunks = snapshots.chain(bucket, tail, count)
            else:
                chunks = inline
        assert cluster is not None
        _replay(cluster, chunks)
        bs = cls(cluster, data["counts"], data["emitted"])
        bs.run, bs.snapshot, bs.delta, bs.tail, bs.chunks = data["run"], name, list(inline), tail, count
        bs.delta_rows, bs.delta_bytes = data["deltaRows"], data["deltaBytes"]
        bs.base_bytes = data.get("baseBytes", 0)  # older rows: none kept
        if compacted is not None:
            bs.snapshot, bs.delta, bs.tail, bs.chunks, bs.delta_rows, bs.delta_bytes = compacted, [], None, 0, 0, 0
            bs.base_bytes = snapshots.size(compacted) if snapshots is not None else 0
        elif inline and snapshots is not None:
            bs.must_snapshot = True  # an earlier version's row: the next save starts a chain on a new snapshot
        bs.caught_up = catching_up
        return bs

    def catches_up_to(self, data: dict[str, Any]) -> bool:
        """Whether this state (snapshot + its delta) can be a prefix of the row ``data``: same run and snapshot, and
        an inline delta that starts the row's, or no more chunks than the row's (`from_row` then follows the row's
        chain back to this state's newest chunk)."""
        if self.must_snapshot or self.run != data["run"] or self.snapshot != data["snapshot"]:
            return False
        inline = data["delta"]
        if inline or self.delta:
            k = len(self.delta)
            return not data.get("chunks") and k <= len(inline) and inline[:k] == self.delta
        return self.chunks <= data.get("chunks", 0)


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
