"""SQL helpers of the store's writes: chunked executemany, SQLite's in-place partition upsert, and the
background WAL checkpointer of a SQLite file store."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import Table, insert
from sqlalchemy.engine import Connection

from elrwatch.store.rows import PARTITION_COLUMNS
from elrwatch.store.schema import partitions_t, violations_t

log = logging.getLogger("elrwatch.store")

CHUNK = 10_000  # rows per executemany


def chunks(rows: Iterable[Any], size: int = CHUNK) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def bulk_insert(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """executemany of same-shaped rows; on SQLite straight to the driver (SQLAlchemy's per-row parameter
    processing costs more than SQLite's insert itself)."""
    if not rows:
        return
    if conn.dialect.name != "sqlite":
        conn.execute(insert(table), rows)
        return
    columns = list(rows[0])
    sql = f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    conn.exec_driver_sql(sql, [tuple(row[c] for c in columns) for row in rows])


def upsert_partition_rows_sqlite(conn: Connection, rows: list[list[Any]], batch_id: int | None = None) -> None:
    """Insert or update partition rows (``rows.partition_sql_row``) in place (SQLite, straight to the driver).

    An update rewrites only the indexes whose columns changed (a storm changes ISR and status, rarely the
    replicas), where delete + insert rewrote all of ``partitions``' indexes. The replica rows follow the
    ``replica_brokers`` column by triggers (``schema.SQLITE_REPLICA_TRIGGERS``), only when it changes: a storm's
    updates leave them alone (keeping them from Python cost 1.1-1.4 s of a 100k-partition storm's write).
    Violations of these partitions are deleted (the caller inserts their current ones).
    """
    if not rows:
        return
    n = len(PARTITION_COLUMNS)
    # The key and the topic name never change for a (topic id, partition): leaving ``topic`` out of the update
    # spares its unique index (a 100k-row storm upsert into 1M rows: 2.9-3.4 s instead of 3.4-3.8 s).
    fixed = ("topic_id", "partition_id", "topic")
    columns = (*PARTITION_COLUMNS, "written_batch")
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in fixed)
    conn.exec_driver_sql(
        f"INSERT INTO {partitions_t.name} ({', '.join(columns)}) VALUES ({', '.join('?' * (n + 1))}) "
        f"ON CONFLICT (topic_id, partition_id) DO UPDATE SET {updates}",
        [(*r[:n], batch_id) for r in rows],
    )
    conn.exec_driver_sql(
        f"DELETE FROM {violations_t.name} WHERE topic = ? AND partition_id = ?", [(r[2], r[1]) for r in rows]
    )


class WalCheckpointer:
    """A daemon thread running ``PRAGMA wal_checkpoint(PASSIVE)`` on its own connection when asked.

    The store's writer connections run with ``wal_autocheckpoint=0``: a commit only appends to the WAL, and this
    thread copies the WAL into the database file while the job computes its next batch (SQLite releases the GIL).
    PASSIVE never blocks readers or the writer; what a checkpoint leaves, the next one copies. ``stop()`` runs a
    last checkpoint, so a stopped job leaves a short WAL.
    """

    def __init__(self, database: str, busy_timeout_ms: int) -> None:
        self.database = database
        self.busy_timeout_ms = busy_timeout_ms
        self.wanted = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="elrwatch-wal-checkpoint", daemon=True)
        self.thread.start()

    def request(self) -> None:
        self.wanted.set()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        started = time.monotonic()
        busy, wal_frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        log.debug(
            "WAL checkpoint: %s of %s frames copied in %.2fs%s",
            copied,
            wal_frames,
            time.monotonic() - started,
            " (busy)" if busy else "",
        )

    def _run(self) -> None:
        conn = sqlite3.connect(self.database, timeout=self.busy_timeout_ms / 1000, isolation_level=None)
        try:
            while True:
                self.wanted.wait()
                self.wanted.clear()
                if self.stopping:
                    break
                try:
                    self._checkpoint(conn)
                except sqlite3.Error as exc:  # e.g. busy: the next request retries
                    log.warning("WAL checkpoint of %s failed: %s", self.database, exc)
            self._checkpoint(conn)
        except sqlite3.Error as exc:
            log.warning("WAL checkpoint of %s failed: %s", self.database, exc)
        finally:
            conn.close()

    def stop(self, timeout: float = 60.0) -> None:
        """Run a last checkpoint and end the thread (bounded wait)."""
        self.stopping = True
        self.wanted.set()
        self.thread.join(timeout)
