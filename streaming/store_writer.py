"""The status store written behind the micro-batches, so that a batch (a storm's gauges) never waits for an earlier
batch's store write (seconds for a storm's rows, half a minute after a 1M-partition load).

The sink serves a batch's gauges, then hands the batch to the `StoreWriter` and returns to Spark at once. Before
it returns, the batch is in the write-ahead list: one file per batch in ``<checkpoint>/store-wal/``, holding the
buckets' output bodies as Spark returned them (their heads, which name the buckets' rows files) and the driver's
merged topic documents, gauges and meta; written to a temporary name, fsynced and renamed. A thread reads the
batch's rows files (``payload.read_rows_file``) and writes the batches to the store in batch order
(``StatusStore.write_batch`` is idempotent per batch id), then deletes the write-ahead file. A job that stops or
dies with batches still unwritten writes them at its next start, before any new batch: nothing is lost and
nothing is written twice.

Rows files (``<state dir>/rows-<checkpoint key>/``, see ``JobConfig.rows_dir``) are immutable, named by the
bucket's new state token, and fsynced by the bucket before its state row goes back to Spark. A batch's files are
deleted only once the store has the batch AND Spark committed it (the sink's next batch says so,
`StoreWriter.spark_committed`). At start, before any batch runs, `StoreWriter.recover` removes every rows file no
pending write-ahead entry names: such a file is either of a batch the store already has (Spark commits a batch
only after the sink returned, i.e. after its entry was durable; the entry goes once the store has the batch), or
of an attempt whose entry was never written, which Spark never committed and re-runs under new tokens. A missing
or corrupt file a pending entry names is a one-line error naming it; nothing is rebuilt from less.

At most ``max_pending`` batches wait for the store; a batch beyond that waits in the sink (bounded memory), and
the log says so. A store error is retried (``RETRIES`` times, with backoff); one that persists stops the job at
its next batch with the error, its batches left in the write-ahead list.
"""

from __future__ import annotations

import contextlib
import logging
import marshal
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from elrwatch.streaming.memory import trim_after_big_batch
from elrwatch.streaming.payload import (
    ROWS_FILE,
    ROWS_SUFFIX,
    ROWS_TAGS,
    RowsFileError,
    check_rows_file,
    concat_payloads,
    decode_payloads,
    iter_partition_rows,
    read_rows_file,
)
from elrwatch.streaming.priority import lower_current_thread_priority

log = logging.getLogger("elrwatch.stream")

WAL_DIR = "store-wal"
WAL_SUFFIX = ".batch"
WAL_VERSION = 2  # 2: the heads may name rows files (`payload.ROWS_FILE`); 1 (bodies only) is still read
WAL_VERSIONS = (1, 2)
RETRIES = 3
WRITER_NICENESS = 10  # the writer thread's priority below the batches'
RETRY_BACKOFF_S = 1.0


class StoreWriteError(RuntimeError):
    """The store refused a batch after retries (one line); the batch stays in the write-ahead list."""


def wal_name(batch_id: int) -> str:
    """The write-ahead file of a batch (sortable by batch id)."""
    return f"{batch_id:020d}{WAL_SUFFIX}"


#: What the driver adds to the buckets' lists (from its merged state), kept in the write-ahead file as JSON.
DRIVER_ARGS = ("topics", "removed_topics", "gauges", "meta")
#: The buckets' lists put together (`payload.concat_payloads`), rebuilt from the payload bodies on recovery.
LIST_ARGS = ("partitions", "removed", "transitions", "quarantined", "violations", "brokers")
#: The store's meta entry saying how far behind the gauges it was when written (``StatusStore.get_meta``).
STORE_BEHIND = "storeBehind"
CHUNKS = "_chunks"
FILES = "_files"  # the batch's rows files, in bucket order


def rows_files(heads: list[dict[str, Any]]) -> list[str]:
    """The rows files the buckets' heads name, in bucket order."""
    return [h[ROWS_FILE] for h in sorted(heads, key=lambda h: h["bucket"]) if h.get(ROWS_FILE)]


def store_args(lists: dict[str, list[Any]], chunks: list[bytes], driver_args: dict[str, Any]) -> dict[str, Any]:
    """`StatusStore.write_batch`'s arguments of a batch: the buckets' lists (`payload.concat_payloads`), the
    driver's `DRIVER_ARGS`, the partition rows as their compressed chunks."""
    return {**{k: lists[k] for k in LIST_ARGS}, **{k: driver_args[k] for k in DRIVER_ARGS}, CHUNKS: chunks}


class StoreWriter:
    """Writes micro-batches to the store in order, in a thread, behind a write-ahead list of files."""

    def __init__(
        self,
        store: Any,
        wal_dir: str,
        on_written: Callable[[int, bool, float, dict[str, Any]], None] | None = None,
        max_pending: int = 2,
        rows_dir: str | None = None,
    ) -> None:
        """``on_written(batch_id, written, store_seconds, info)`` runs in the writer thread after each batch;
        ``rows_dir``: where the buckets write their rows files (None: the rows come in the bodies)."""
        self.store = store
        self.wal_dir = wal_dir
        self.rows_dir = rows_dir
        self._files: dict[int, list[str]] = {}  # rows files of batches the store has, until Spark committed them
        self._rerun_files: dict[int, list[str]] = {}  # files of a re-run of a batch still pending
        self._committed = -1  # the newest batch id Spark committed, as far as the sink told
        self.on_written = on_written
        self._queue: queue.Queue[tuple[int, dict[str, Any], dict[str, Any]] | None] = queue.Queue(max_pending)
        self._lock = threading.Lock()
        self._pending: list[int] = []  # submitted, not yet in the store, in order
        self._error: BaseException | None = None
        self._idle = threading.Condition(self._lock)
        self._closed = False
        os.makedirs(wal_dir, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="elrwatch-store-writer", daemon=True)
        self._thread.start()

    # --- the sink's side --------------------------------------------------------------------------------------

    def recover(self) -> list[int]:
        """Queue the batches a previous run left in the write-ahead list (before any new batch); their ids."""
        found = sorted(n for n in os.listdir(self.wal_dir) if n.endswith(WAL_SUFFIX))
        entries = []
        for name in found:
            batch_id, args = read_wal(os.path.join(self.wal_dir, name))
            if not self._in_store(batch_id):  # the store has it: its files are not needed (nor read)
                for file in args[FILES]:
                    self._check_rows_file(file)
            entries.append((batch_id, args))
        self.remove_garbage({f for _, args in entries for f in args[FILES]})
        for batch_id, args in entries:
            log.info("batch %s: in the write-ahead list of an earlier run, writing it to the store first", batch_id)
            self._enqueue(batch_id, args, {"recovered": True})
        return [batch_id for batch_id, _ in entries]

    def remove_garbage(self, referenced: set[str]) -> list[str]:
        """Delete the rows files (and torn temporary files) that ``referenced`` (the pending entries' files) does
        not hold; only at start, before any batch runs (see the module's docstring for why that is safe)."""
        if not self.rows_dir or not os.path.isdir(self.rows_dir):
            return []
        removed = []
        for name in os.listdir(self.rows_dir):
            garbage = name.endswith(ROWS_SUFFIX) and name not in referenced
            if garbage or (name.startswith(".") and name.endswith(".tmp")):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.rows_dir, name))
                removed.append(name)
        if removed:
            log.info("removed %d rows files no pending batch names from %s", len(removed), self.rows_dir)
        return removed

    def spark_committed(self, batch_id: int) -> None:
        """Spark committed every batch up to ``batch_id``: delete the rows files of those the store has."""
        with self._lock:
            self._committed = max(self._committed, batch_id)
            done = [b for b in self._files if b <= self._committed]
            files = [f for b in done for f in self._files.pop(b)]
        self._delete_rows_files(files)

    def _rows_path(self, name: str) -> str:
        if not self.rows_dir:
            raise StoreWriteError(f"a batch names rows file {name} but the job has no rows directory")
        return os.path.join(self.rows_dir, name)

    def _check_rows_file(self, name: str) -> None:
        try:
            check_rows_file(self._rows_path(name))
        except RowsFileError as exc:
            raise StoreWriteError(_rows_error(exc)) from None

    def _delete_rows_files(self, files: list[str]) -> None:
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._rows_path(name))

    def _written_files(self, batch_id: int, files: list[str]) -> None:
        """The store has the batch: its files go now if Spark committed it, else once it has (lock held)."""
        if batch_id > self._committed:
            if files:
                self._files.setdefault(batch_id, []).extend(files)
        else:
            self._delete_rows_files(files)

    def submit(
        self,
        batch_id: int,
        bodies: list[bytes],
        merged: dict[str, Any],
        info: dict[str, Any],
    ) -> None:
        """Put a batch in the write-ahead list (durable on return), then queue its store write.

        ``bodies``: the buckets' payload bodies as Spark returned them; ``merged``: the driver's merge of them
        (``Aggregator.absorb``: `LIST_ARGS` and `DRIVER_ARGS`). Raises `StoreWriteError` if an earlier batch
        could not be written."""
        self.raise_error()
        files = list(merged.get(FILES, ()))
        with self._lock:
            if batch_id in self._pending:
                # Spark re-ran a batch whose first attempt is still pending (a restart): the store takes the first
                # attempt, whose durable entry names its own files; the re-run's files go with them once written
                self._rerun_files.setdefault(batch_id, []).extend(files)
                return
        write_wal(os.path.join(self.wal_dir, wal_name(batch_id)), batch_id, bodies, merged)
        args = store_args(merged, [b for b in bodies if b[:1] in ROWS_TAGS], merged)
        args[FILES] = files
        self._enqueue(batch_id, args, info)

    def _enqueue(self, batch_id: int, args: dict[str, Any], info: dict[str, Any]) -> None:
        with self._lock:
            if batch_id in self._pending:
                return  # a batch Spark re-ran while its first attempt still waits: the store takes it once
            self._pending.append(batch_id)
        if self._queue.full():
            log.info("batch %s waits for the store (%d batches behind)", batch_id, self.behind())
        while True:
            try:
                self._queue.put((batch_id, args, info), timeout=1.0)
                return
            except queue.Full:
                self.raise_error()

    def behind(self) -> int:
        """Batches whose gauges are served and that are not yet in the store."""
        with self._lock:
            return len(self._pending)

    def raise_error(self) -> None:
        """Raise the writer's error, if it stopped on one."""
        if self._error is not None:
            raise StoreWriteError(str(self._error)) from None

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every submitted batch is in the store (True), or the timeout passed / the writer failed."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._idle:
            while self._pending and self._error is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(0.5 if left is None else min(left, 0.5))
            return not self._pending

    def close(self, timeout_s: float | None = None) -> bool:
        """Drain (bounded) and stop the thread; batches left unwritten stay in the write-ahead list for the next
        start. True if every batch is in the store. Idempotent."""
        if self._closed:
            return not self._pending
        self._closed = True
        drained = self.drain(timeout_s)
        if not drained:
            log.warning(
                "stopping with %d batches not yet in the store: they stay in %s and are written at the next start",
                self.behind(),
                self.wal_dir,
            )
            return False  # the (daemon) thread dies with the process; its batch's transaction is not committed
        self._queue.put(None)
        self._thread.join(timeout=5.0)
        return True

    # --- the writer thread ------------------------------------------------------------------------------------

    def _run(self) -> None:
        # the store is behind the gauges by design: the batches (Spark, the buckets, the sink) get the cores first
        lower_current_thread_priority(WRITER_NICENESS)
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch_id, args, info = item
            started = time.monotonic()
            files = args.pop(FILES)
            try:
                if self._in_store(batch_id):  # e.g. a batch Spark re-ran after its first attempt was written
                    written = False
                else:
                    self._load_rows_files(args, files)
                    written = self._write(batch_id, args)
            except BaseException as exc:  # reported to the sink, which stops the job
                log.error("batch %s: the store refused it: %s", batch_id, _one_line(exc))
                with self._idle:
                    self._error = exc
                    self._idle.notify_all()
                return
            took = time.monotonic() - started
            del args
            # the rows of a big batch (the 1M load: ≈ 0.2 GB of the driver's heap) back to the OS, not kept after it
            trim_after_big_batch(info.get("changed", 0), collect_first=False)
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(self.wal_dir, wal_name(batch_id)))
            with self._idle:
                self._written_files(batch_id, files + self._rerun_files.pop(batch_id, []))
                self._pending.remove(batch_id)
                self._idle.notify_all()
            if self.on_written is not None:
                self.on_written(batch_id, written, took, info)

    def _in_store(self, batch_id: int) -> bool:
        last = self.store.last_batch_id()
        return last is not None and batch_id <= last

    def _load_rows_files(self, args: dict[str, Any], files: list[str]) -> None:
        """Add the batch's rows files' lists and partition-row chunks to its store arguments, in bucket order."""
        for name in files:
            try:
                lists, chunks = read_rows_file(self._rows_path(name))
            except RowsFileError as exc:
                raise StoreWriteError(_rows_error(exc)) from None
            args["removed"].extend(tuple(r) for r in lists["removed"])
            for k in ("transitions", "quarantined", "violations", "brokers"):
                args[k].extend(lists[k])
            args[CHUNKS].extend(chunks)

    def _write(self, batch_id: int, args: dict[str, Any]) -> bool:
        behind = {"batches": self.behind() - 1, "newestBatchId": self._newest()}
        meta = {**(args.pop("meta", None) or {}), STORE_BEHIND: behind}
        chunks = args.pop(CHUNKS)
        for attempt in range(RETRIES + 1):
            try:  # a failed write rolls its transaction back: a retry writes the whole batch again
                return bool(
                    self.store.write_batch(
                        batch_id, **args, meta=meta, partition_rows=iter_partition_rows(list(chunks))
                    )
                )
            except Exception as exc:
                if attempt == RETRIES:
                    raise
                log.warning("batch %s: store write failed (%s), retrying", batch_id, _one_line(exc))
                time.sleep(RETRY_BACKOFF_S * 2**attempt)
        raise AssertionError("unreachable")

    def _newest(self) -> int | None:
        with self._lock:
            return self._pending[-1] if self._pending else None


def _rows_error(exc: RowsFileError) -> str:
    return (
        f"store write-ahead entry names {exc}: its batch is not in the store; restore the file or start over with "
        "a new checkpoint and store"
    )


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:500]


def write_wal(path: str, batch_id: int, bodies: list[bytes], driver_args: dict[str, Any]) -> None:
    """A batch's write-ahead file: tmp + fsync + rename (+ directory fsync)."""
    driver = orjson.dumps({k: driver_args[k] for k in DRIVER_ARGS}, option=orjson.OPT_NON_STR_KEYS)
    data = marshal.dumps((WAL_VERSION, batch_id, driver, list(bodies)))
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_wal(path: str) -> tuple[int, dict[str, Any]]:
    """(batch id, `StatusStore.write_batch` arguments) of a write-ahead file, or a one-line StoreWriteError."""
    try:
        with open(path, "rb") as fh:
            version, batch_id, driver, bodies = marshal.loads(fh.read())
        if version not in WAL_VERSIONS:
            raise ValueError(f"version {version}, expected one of {WAL_VERSIONS}")
        payloads, chunks = decode_payloads(bodies)
        args = store_args(concat_payloads(payloads), chunks, orjson.loads(driver))
        args[FILES] = rows_files(payloads)
    except (OSError, EOFError, ValueError, TypeError, KeyError) as exc:
        raise StoreWriteError(
            f"store write-ahead file {path} cannot be read ({exc}): its batch is not in the store; restore the file "
            "or start over with a new checkpoint and store"
        ) from None
    return int(batch_id), args
