"""How a bucket's state is kept between micro-batches: in Spark's state row as a whole blob (``--state-mode
blob``), or as an immutable snapshot file plus the delta of records applied since (``snapshot``, the default).

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

from elrwatch.state.cluster import ClusterState
from elrwatch.streaming.config import DELTA_MAX_RECORDS
from elrwatch.streaming.route import decode_record

SNAPSHOT_SUFFIX = ".snap"
SNAPSHOTS_KEPT = 3  # per bucket, besides the one the loaded (committed) state references
# Snapshot mode: when a bucket's delta (records applied since its snapshot) exceeds either bound, the worker
# writes a new snapshot. Rows (`config.DELTA_MAX_RECORDS`) bound the replay on a worker-cache miss (~10 µs per
# record); bytes bound what every micro-batch ships through Arrow into the state store (~15 B per compressed
# PartitionChangeRecord).
DELTA_MAX_BYTES = 4 << 20
# A batch of at most this many records is quiet: an engine whose snapshots are cheap (`BucketState.QUIET_DELTA`)
# writes one then, once its delta is past its quiet bound, so that a storm does not pay for it and a restart or
# a cache miss after it replays little.
QUIET_BATCH_RECORDS = 1_000


class SnapshotError(RuntimeError):
    """A bucket's snapshot file cannot be read (missing, corrupt): one line, raised in the Python worker."""


class SnapshotDir:
    """A directory of immutable bucket snapshots (``ClusterState.to_bytes()``), shared by every executor.

    Names are ``<run>-b<bucket>-<time_ns>-<token>.snap``: unique per write (a retried batch writes another
    file, never over one a committed state row may reference), sortable by age within a bucket. ``run`` is
    drawn when the bucket's state is created, so two jobs sharing a directory never touch each other's files.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    @staticmethod
    def name(run: str, bucket: int, token: str) -> str:
        return f"{run}-b{bucket:04d}-{time.time_ns():020d}-{token}{SNAPSHOT_SUFFIX}"

    def write(self, name: str, data: bytes) -> None:
        """tmp file + fsync + atomic rename (+ directory fsync): a reader sees the whole file or none."""
        os.makedirs(self.path, exist_ok=True)
        final = os.path.join(self.path, name)
        tmp = os.path.join(self.path, f".{name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        dir_fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def existing(self, bucket: int, name: str) -> str:
        """The path of snapshot ``name``, or a one-line SnapshotError when it is missing."""
        path = os.path.join(self.path, name)
        if not os.path.exists(path):
            raise SnapshotError(
                f"bucket {bucket}: snapshot {path} referenced by the checkpoint is missing (--state-dir must be "
                "the same directory, shared by every executor, for the life of the checkpoint)"
            )
        return path

    def read(self, bucket: int, name: str) -> Any:
        """The ClusterState of a snapshot, or a one-line SnapshotError."""
        path = self.existing(bucket, name)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise SnapshotError(f"bucket {bucket}: cannot read snapshot {path}: {exc.strerror or exc}") from None
        try:
            return ClusterState.from_bytes(data)
        except Exception as exc:
            raise SnapshotError(
                f"bucket {bucket}: snapshot {path} is corrupt ({type(exc).__name__}: {str(exc)[:80]})"
            ) from None

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
    """What one bucket keeps between micro-batches.

    Blob mode: the whole state, pickled + zlib'd, in the state row (``to_blob``). Snapshot mode: the state row
    holds ``run``, the ``snapshot`` file name (None: the empty initial state) and the ``delta``: the encoded
    records applied since that snapshot, in apply order, as zlib'd chunks (one per micro-batch), plus counts.
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
    )

    def __init__(self, cluster: Any, counts: Any, emitted_topic_counts: dict[str, int]) -> None:
        self.cluster = cluster
        self.counts = counts
        self.emitted_topic_counts = emitted_topic_counts
        self.run = uuid.uuid4().hex[:12]
        self.snapshot: str | None = None
        self.delta: list[bytes] = []
        self.delta_rows = 0
        self.delta_bytes = 0
        self.journal: list[bytes] = []  # this micro-batch's records, as applied (snapshot mode)
        self.must_snapshot = False  # the state does not derive from (snapshot, delta): e.g. read from a blob
        self.caught_up = False  # loaded by catching up a stale cached state (see from_row)

    def to_blob(self) -> bytes:
        body = pickle.dumps(
            (self.cluster.to_bytes(compress=False), self.counts, self.emitted_topic_counts),
            protocol=pickle.HIGHEST_PROTOCOL,
        )
        return zlib.compress(body, 1)

    @classmethod
    def from_blob(cls, blob: bytes) -> BucketState:
        cluster_bytes, counts, emitted = pickle.loads(zlib.decompress(blob))
        bs = cls(ClusterState.from_bytes(cluster_bytes), counts, emitted)
        bs.must_snapshot = True
        return bs

    #: The first byte of this engine's snapshot-mode state row (a blob row starts with anything else).
    ROW_TAG = b"S"
    #: Delta records past which a quiet batch (`QUIET_BATCH_RECORDS`) writes a snapshot; None: only the
    #: ``max_*`` bounds do (the object engine's pickled snapshots take seconds at 250k partitions).
    QUIET_DELTA: int | None = None

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
        past `QUIET_DELTA` in a quiet batch when ``quiet_allowed`` (`_write_snapshot`, old ones rotated); the
        state row, ``ROW_TAG`` + the pickled `_row_fields`."""
        journal, self.journal = self.journal, []
        if journal:
            chunk = zlib.compress(marshal.dumps(journal), 1)
            self.delta.append(chunk)
            self.delta_rows += len(journal)
            self.delta_bytes += len(chunk)
        quiet_snapshot = (
            quiet_allowed
            and self.QUIET_DELTA is not None
            and self.delta_rows > self.QUIET_DELTA
            and len(journal) <= QUIET_BATCH_RECORDS
        )
        if self.must_snapshot or quiet_snapshot or self.delta_rows > max_records or self.delta_bytes > max_bytes:
            self._rebase(snapshots, bucket, token)
            self.must_snapshot = False
        return self.ROW_TAG + pickle.dumps(self._row_fields(), protocol=pickle.HIGHEST_PROTOCOL)

    def compact(self, snapshots: SnapshotDir, bucket: int, token: str) -> bool:
        """Between batches (the job idle): write the state at ``token`` (the committed row's) as a snapshot of its
        own when its delta is past `QUIET_DELTA`, and make it this state's base. A load of that row then finds it
        (`from_row`: no delta replayed); the row's older snapshot stays until a row naming the new one commits.
        True if it wrote one."""
        if self.QUIET_DELTA is None or self.must_snapshot or self.delta_rows <= self.QUIET_DELTA:
            return False
        self._rebase(snapshots, bucket, token)
        return True

    def _rebase(self, snapshots: SnapshotDir, bucket: int, token: str) -> None:
        """Write the state at ``token`` as a snapshot, rotate the older ones (keeping the one this state was based
        on) and make the new one the base, with an empty delta."""
        name = SnapshotDir.name(self.run, bucket, token)
        self._write_snapshot(snapshots, name)
        snapshots.rotate(self.run, bucket, keep={name, self.snapshot or ""})
        self.snapshot, self.delta, self.delta_rows, self.delta_bytes = name, [], 0, 0

    def _write_snapshot(self, snapshots: SnapshotDir, name: str) -> None:
        """Write the state as snapshot ``name`` in ``snapshots`` (the engine's snapshot format)."""
        snapshots.write(name, self.cluster.to_bytes())

    def _default_min_isr(self) -> int:
        """The state's default min.insync.replicas (the empty state of a row without snapshot gets it)."""
        return self.cluster.default_min_isr

    def _row_fields(self) -> dict[str, Any]:
        """What the snapshot-mode state row holds (`from_row` reads it back)."""
        return {
            "run": self.run,
            "snapshot": self.snapshot,
            "minIsr": self._default_min_isr(),
            "delta": self.delta,
            "deltaRows": self.delta_rows,
            "deltaBytes": self.delta_bytes,
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
        if row[:1] != cls.ROW_TAG:
            return cls._from_other_row(row, bucket)
        data = pickle.loads(row[1:])
        name = data["snapshot"]
        delta = data["delta"]
        catching_up = stale is not None and type(stale) is cls and stale.catches_up_to(data)
        compacted = None
        if not catching_up and delta and token is not None and snapshots is not None:
            compacted = snapshots.of_token(data["run"], bucket, token)
        if catching_up:
            assert stale is not None
            cluster = stale.cluster
            chunks = delta[len(stale.delta) :]
        elif compacted is not None:
            assert snapshots is not None
            cluster = cls._read_snapshot(snapshots, bucket, compacted)
            chunks = []
        else:
            if name is None:
                cluster = cls._empty_state(data["minIsr"], bucket, buckets)
            elif snapshots is None:
                raise SnapshotError(
                    f"bucket {bucket}: the checkpoint's state is in snapshot files: --state-dir is needed"
                )
            else:
                cluster = cls._read_snapshot(snapshots, bucket, name)
            chunks = delta
        cls._replay(cluster, chunks)
        bs = cls(cluster, data["counts"], data["emitted"])
        bs.run, bs.snapshot, bs.delta = data["run"], name, delta
        bs.delta_rows, bs.delta_bytes = data["deltaRows"], data["deltaBytes"]
        if compacted is not None:
            bs.snapshot, bs.delta, bs.delta_rows, bs.delta_bytes = compacted, [], 0, 0
        bs.caught_up = catching_up
        return bs

    # What each engine says in `from_row` (the columnar one, `columnar_bucket.ColumnarBucketState`, overrides them).

    @classmethod
    def _from_other_row(cls, row: bytes, bucket: int) -> BucketState:
        """A row without this engine's snapshot-mode tag: a blob-mode row."""
        return cls.from_blob(row)

    @staticmethod
    def _empty_state(default_min_isr: int, bucket: int, buckets: int) -> Any:
        """The state of a row that names no snapshot yet."""
        return ClusterState(default_min_isr=default_min_isr, bucket=(bucket, buckets))

    @staticmethod
    def _read_snapshot(snapshots: SnapshotDir, bucket: int, name: str) -> Any:
        """The state of snapshot ``name``, or a one-line SnapshotError."""
        return snapshots.read(bucket, name)

    @staticmethod
    def _replay(cluster: Any, chunks: list[bytes]) -> None:
        """Apply delta chunks (records journalled when first applied) without emitting their changes again."""
        apply = cluster.apply
        tracking, cluster.track_changes = cluster.track_changes, False  # changes were emitted when first applied
        try:
            for chunk in chunks:
                for rec in marshal.loads(zlib.decompress(chunk)):
                    apply(decode_record(rec))
        finally:
            cluster.track_changes = tracking
        cluster.drain_changes()

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
