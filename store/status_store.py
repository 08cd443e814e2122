"""The status store: the streaming job's sink and the API's source (DESIGN.md §7).

SQLAlchemy 2 Core over SQLite (embedded default, WAL mode so the API reads while the job writes) or
PostgreSQL (``postgresql+psycopg://…``). One schema for both (``schema.py``). No Spark here: the job hands the
buckets' domain rows and documents in the report-document shape (DESIGN.md §5) to
:meth:`StatusStore.write_batch`; ``rows.py`` maps them to SQL rows.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Engine,
    Table,
    and_,
    bindparam,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    or_,
    select,
    update,
)
from sqlalchemy.engine import URL, Connection
from sqlalchemy.pool import StaticPool

from elrwatch.state import insight
from elrwatch.state.controller import TopicContext
from elrwatch.state.gauges import BROKER_GAUGES, sample
from elrwatch.state.model import BrokerState
from elrwatch.state.report import StoreView, partition_from_stored, stored_registration_key
from elrwatch.state.whatif import Candidate
from elrwatch.store.rows import (
    PARTITION_COLUMNS,
    broker_row,
    dumps,
    gauge_value,
    key_of,
    last_event_ms,
    loads,
    partition_sql_row,
    partition_store_row,
    quarantine_row,
    topic_row,
    transition_row,
    violation_row,
)
from elrwatch.store.schema import (
    ALL_TOPICS,
    CLUSTER,
    COUNTS,
    DOC_COLUMNS,
    DOC_SQL,
    GENERATION,
    LAST_BATCH_ID,
    LAST_EVENT_TIME_MS,
    LEADERLESS_TRUE,
    NEEDS_ACTION_TRUE,
    PARTITION_SET,
    QUARANTINE_SUMMARY,
    SCHEMA_VERSION,
    SQLITE_REPLICA_TRIGGERS,
    STORE_BEHIND,
    STORE_SCHEMA,
    TREND_GAUGES,
    TREND_KEEP_MS,
    UNDER_MIN_ISR_TRUE,
    UPDATED_AT_MS,
    StoreSchemaError,
    brokers_t,
    gauge_history_t,
    gauges_t,
    meta_t,
    metadata,
    partition_replicas_t,
    partitions_t,
    quarantined_t,
    status_transitions_t,
    topics_t,
    violations_t,
)
from elrwatch.store.sql import WalCheckpointer, bulk_insert, chunks, upsert_partition_rows_sqlite
from elrwatch.store.urls import DEFAULT_URL, mask_url, resolve_url

log = logging.getLogger("elrwatch.store")

WAL_SIZE_LIMIT = 64 << 20  # SQLite truncates a WAL bigger than this after a complete checkpoint
QUARANTINE_RECORDS_LIMIT = 1000  # records listed in a document, as state/report.py's quarantine_doc


#: The per-broker counts of a broker document (``list_brokers``) and the gauges they come from.
BROKER_COUNT_FIELDS = {
    "isrMissingPartitions": BROKER_GAUGES[insight.MISSING],
    "restartBlockingPartitions": BROKER_GAUGES[insight.BLOCKING],
    "restartOfflinePartitions": BROKER_GAUGES[insight.OFFLINE],
}


class StatusStore:
    """The status store at ``url`` (SQLite file path URL or PostgreSQL URL)."""

    def __init__(
        self,
        url: str | URL = DEFAULT_URL,
        *,
        password: str | None = None,
        password_file: str | Path | None = None,
        busy_timeout_ms: int = 10_000,
        pool_size: int = 8,
    ) -> None:
        raw = url if isinstance(url, str) else url.render_as_string(hide_password=False)
        parsed = resolve_url(raw, password, password_file)
        self.url: URL = parsed
        self.masked_url = mask_url(parsed)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        kwargs: dict[str, Any] = {}
        if self.is_sqlite:
            database = parsed.database or ""
            if database and database != ":memory:" and not database.startswith("file:"):
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            kwargs["connect_args"] = {"timeout": busy_timeout_ms / 1000, "check_same_thread": False}
            if database in ("", ":memory:"):  # one in-memory database, shared by every user of this store
                kwargs["poolclass"] = StaticPool
            else:
                kwargs["pool_size"] = pool_size
                kwargs["max_overflow"] = 2 * pool_size
        else:
            kwargs["pool_size"] = pool_size
            kwargs["max_overflow"] = pool_size
            kwargs["pool_pre_ping"] = True
        database = parsed.database or ""
        # plain file databases only (not :memory: or URI forms), where a second connection sees the same data
        self._fast_sqlite = (
            self.is_sqlite
            and bool(database)
            and database != ":memory:"
            and not (database.startswith("file:") or parsed.query)
        )
        self._checkpointer: WalCheckpointer | None = None
        # hide_parameters: never put row data (or anything secret) into exception messages.
        self.engine: Engine = create_engine(parsed, hide_parameters=True, **kwargs)
        if self.is_sqlite:
            self._setup_sqlite(busy_timeout_ms)
        self._writer = self.engine.execution_options(elrwatch_write=True)
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._view: tuple[Any, StoreView, set[str]] | None = None  # (generation, view, topics it knows)

    def __repr__(self) -> str:
        return f"StatusStore({self.masked_url})"

    def _setup_sqlite(self, busy_timeout_ms: int) -> None:
        @event.listens_for(self.engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Let SQLAlchemy, not pysqlite, decide when transactions begin (so BEGIN IMMEDIATE works).
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cursor.execute("PRAGMA foreign_keys=OFF")
            cursor.execute("PRAGMA cache_size=-65536")
            if self._fast_sqlite:
                # Writers' commits do not copy the WAL back into the database file (a 100k-partition storm's
                # commit spent seconds there): a background thread does, after each batch (see write_batch).
                cursor.execute("PRAGMA wal_autocheckpoint=0")
                cursor.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")  # a storm's WAL does not stay on disk
            cursor.close()

        @event.listens_for(self.engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # Writers take the write lock up front: no SQLITE_BUSY on a read-to-write upgrade.
            if conn.get_execution_options().get("elrwatch_write"):
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                conn.exec_driver_sql("BEGIN")

    def dispose(self) -> None:
        """Close all pooled connections (after a last WAL checkpoint if this store wrote batches)."""
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        for conn in self._readers:
            conn.close()
        self._readers.clear()
        self._local = threading.local()
        self.engine.dispose()

    close = dispose

    # ------------------------------------------------------------------ schema
    def create_schema(self) -> None:
        """Create the tables and indexes if they do not exist (idempotent); StoreSchemaError when the store was
        written by an elrwatch with another layout."""
        with self._writer.begin() as conn:
            existing = set(inspect(conn).get_table_names())
            if partitions_t.name in existing:
                version = self._meta_get(conn, SCHEMA_VERSION) if meta_t.name in existing else None
                if version is None:  # a store of schema 1 has no schema_version row (and whole documents)
                    columns = {c["name"] for c in inspect(conn).get_columns(partitions_t.name)}
                    version = 1 if "doc" in columns else STORE_SCHEMA
                if version != STORE_SCHEMA:
                    raise StoreSchemaError(
                        f"the status store {self.masked_url} has table layout {version}, this elrwatch uses "
                        f"{STORE_SCHEMA} (compact partition rows): point --store at a new database and start "
                        "the job with a new --checkpoint (the store is rebuilt from the event topic)"
                    )
            if partitions_t.name in existing:  # a store from before written_batch: the column added in place
                columns = {c["name"] for c in inspect(conn).get_columns(partitions_t.name)}
                if "written_batch" not in columns:
                    conn.exec_driver_sql(f"ALTER TABLE {partitions_t.name} ADD COLUMN written_batch BIGINT")
                    conn.exec_driver_sql(
                        f"CREATE INDEX IF NOT EXISTS ix_partitions_written_batch ON {partitions_t.name} (written_batch)"
                    )
            metadata.create_all(conn, checkfirst=True)
            if conn.dialect.name == "sqlite":
                for trigger in SQLITE_REPLICA_TRIGGERS:
                    conn.execute(trigger)
            if conn.execute(select(meta_t.c.key).where(meta_t.c.key == LAST_BATCH_ID)).first() is None:
                conn.execute(insert(meta_t).values(key=LAST_BATCH_ID, value="null"))  # the row writers lock
            if conn.execute(select(meta_t.c.key).where(meta_t.c.key == SCHEMA_VERSION)).first() is None:
                conn.execute(insert(meta_t).values(key=SCHEMA_VERSION, value=str(STORE_SCHEMA)))

    def ping(self) -> bool:
        """True when the store answers a trivial query."""
        with self.engine.connect() as conn:
            conn.execute(select(1)).scalar()
        return True

    # ------------------------------------------------------------------ helpers
    def _meta_get(self, conn: Connection, key: str, default: Any = None, *, lock: bool = False) -> Any:
        stmt = select(meta_t.c.value).where(meta_t.c.key == key)
        if lock:  # PostgreSQL: concurrent writers of the same batch serialize here (SQLite: BEGIN IMMEDIATE)
            stmt = stmt.with_for_update()
        text = conn.execute(stmt).scalar()
        return default if text is None else loads(text)

    def _meta_put(self, conn: Connection, key: str, value: Any) -> None:
        text = dumps(value)
        result = conn.execute(update(meta_t).where(meta_t.c.key == key).values(value=text))
        if result.rowcount == 0:
            conn.execute(insert(meta_t).values(key=key, value=text))

    def _upsert(self, conn: Connection, table: Table, rows: list[dict[str, Any]], keys: Sequence[str]) -> None:
        if not rows:
            return
        dialect = conn.dialect.name
        if dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as dialect_insert
        elif dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as dialect_insert
        else:  # pragma: no cover - only SQLite and PostgreSQL are supported
            raise ValueError(f"unsupported store database: {dialect}")
        stmt = dialect_insert(table)
        stmt = stmt.on_conflict_do_update(
            index_elements=[table.c[k] for k in keys],
            set_={c.name: stmt.excluded[c.name] for c in table.columns if c.name not in keys},
        )
        for chunk in chunks(rows):
            conn.execute(stmt, chunk)

    def _delete_partitions(self, conn: Connection, keys: list[tuple[str, int]]) -> None:
        """Delete the rows of these partitions: one indexed delete per key, sent as executemany.

        (A row-value ``IN`` over a chunk of keys looks cheaper but SQLite runs it as a full table scan per chunk:
        at 1M partitions that dominated a 100k-partition storm.)
        """
        if not keys:
            return
        params = [{"k_topic": topic_id, "k_partition": partition_id} for topic_id, partition_id in keys]
        for table in (partitions_t, partition_replicas_t, violations_t):
            statement = delete(table).where(
                table.c.topic_id == bindparam("k_topic"), table.c.partition_id == bindparam("k_partition")
            )
            conn.execute(statement, params)

    # ------------------------------------------------------------------ writes
    def last_batch_id(self) -> int | None:
        """The last committed batch id (None before the first batch)."""
        with self.engine.connect() as conn:
            return self._meta_get(conn, LAST_BATCH_ID)

    def write_batch(
        self,
        batch_id: int,
        *,
        partitions: Iterable[Mapping[str, Any]] = (),
        partition_rows: Iterable[Sequence[Any]] = (),
        removed: Iterable[Any] = (),
        brokers: Iterable[Mapping[str, Any]] = (),
        topics: Iterable[Mapping[str, Any]] = (),
        removed_topics: Iterable[str] = (),
        transitions: Iterable[Mapping[str, Any]] = (),
        quarantined: Iterable[Mapping[str, Any]] = (),
        violations: Iterable[Mapping[str, Any]] | None = None,
        gauges: Mapping[str, float | None] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> bool:
        """Apply one micro-batch in one transaction; False (a no-op) if ``batch_id`` was already committed.

        * ``partitions``: partition documents (DESIGN §5 shape) to insert or replace; ``partition_rows``: the
          same as the buckets' ``state.partition_row`` rows (consumed lazily, chunk by chunk);
          ``removed``: ``(topicId, partitionId)`` pairs (or dicts with those keys) to delete.
        * ``brokers`` / ``topics``: documents to insert or replace; ``removed_topics``: topic ids to delete.
        * ``transitions``: ``{"topic","topicId","partitionId","from","to","atMs","offset","position"}`` dicts,
          appended to the history.
        * ``quarantined``: quarantined-record dicts (``position, field, reason, message``), appended; the
          quarantine summary (count, byReason) is incremented by them.
        * ``violations``: the complete current violations of every partition in ``partitions`` (those
          partitions' previous violations are replaced); ``None`` leaves violations untouched.
        * ``gauges``: the complete current gauge set (sample name → value), replacing the stored one;
          ``None`` leaves the gauges untouched.
        * ``meta``: ``lastEventTimeMs``, ``cluster``, ``counts`` (each optional) — stored as given.
        """
        partition_docs = list(partitions)
        removed_keys = [key_of(item) for item in removed]
        with self._writer.begin() as conn:
            last = self._meta_get(conn, LAST_BATCH_ID, lock=True)
            if last is not None and batch_id <= last:
                log.info("batch %s already committed (last %s): skipped", batch_id, last)
                return False
            if removed_keys:
                self._delete_partitions(conn, removed_keys)
                self._meta_put(conn, PARTITION_SET, uuid.uuid4().hex)
            rows = itertools.chain(
                (partition_store_row(d) for d in partition_docs), (partition_sql_row(r) for r in partition_rows)
            )
            self._write_partitions(conn, rows, batch_id)
            if violations is not None:
                for chunk in chunks(violation_row(v) for v in violations):
                    conn.execute(insert(violations_t), chunk)
            self._upsert(conn, brokers_t, [broker_row(b) for b in brokers], ["broker_id"])
            self._upsert(conn, topics_t, [topic_row(t) for t in topics], ["topic_id"])
            removed_topic_ids = list(removed_topics)
            if removed_topic_ids:
                conn.execute(delete(topics_t).where(topics_t.c.topic_id.in_(removed_topic_ids)))
            for chunk in chunks(transition_row(t, batch_id) for t in transitions):
                bulk_insert(conn, status_transitions_t, chunk)
            self._append_quarantined(conn, [quarantine_row(q, batch_id) for q in quarantined])
            if gauges is not None:  # the complete set: samples that disappeared must not linger
                conn.execute(delete(gauges_t))
                gauge_rows = [{"name": n, "value": float(v)} for n, v in gauges.items() if v is not None]
                for chunk in chunks(gauge_rows):
                    conn.execute(insert(gauges_t), chunk)
                self._record_trend(conn, gauges)
            meta_in = dict(meta or {})
            if "lastEventTimeMs" in meta_in:
                self._meta_put(conn, LAST_EVENT_TIME_MS, meta_in["lastEventTimeMs"])
            if "cluster" in meta_in:
                self._meta_put(conn, CLUSTER, meta_in["cluster"])
            if "counts" in meta_in:
                self._meta_put(conn, COUNTS, meta_in["counts"])
            if "storeBehind" in meta_in:
                self._meta_put(conn, STORE_BEHIND, meta_in["storeBehind"])
            self._meta_put(conn, LAST_BATCH_ID, int(batch_id))
            self._meta_put(conn, UPDATED_AT_MS, int(time.time() * 1000))
            self._meta_put(conn, GENERATION, uuid.uuid4().hex)
        self._request_checkpoint()
        return True

    def _write_partitions(self, conn: Connection, rows: Iterable[Sequence[Any]], batch_id: int | None) -> None:
        """Insert or replace partition rows (``rows.partition_sql_row``) written by ``batch_id``, chunk by chunk,
        with their replica rows (SQLite: in place, its triggers keep the replica rows; PostgreSQL: delete +
        insert)."""
        n = len(PARTITION_COLUMNS)
        for chunk in chunks(rows):
            if conn.dialect.name == "sqlite":
                upsert_partition_rows_sqlite(conn, chunk, batch_id)
                continue
            self._delete_partitions(conn, [(r[0], r[1]) for r in chunk])
            bulk_insert(
                conn,
                partitions_t,
                [{**dict(zip(PARTITION_COLUMNS, r[:n], strict=True)), "written_batch": batch_id} for r in chunk],
            )
            replicas = [
                {"broker_id": b, "topic": r[2], "partition_id": r[1], "topic_id": r[0]} for r in chunk for b in r[n]
            ]
            bulk_insert(conn, partition_replicas_t, replicas)

    def _append_quarantined(self, conn: Connection, q_rows: list[dict[str, Any]]) -> None:
        """Append quarantined-record rows and add them to the quarantine summary (count, byReason)."""
        if not q_rows:
            return
        for chunk in chunks(q_rows):
            conn.execute(insert(quarantined_t), chunk)
        summary = self._meta_get(conn, QUARANTINE_SUMMARY, {"count": 0, "byReason": {}})
        summary["count"] = int(summary.get("count", 0)) + len(q_rows)
        by_reason = summary.setdefault("byReason", {})
        for row in q_rows:
            by_reason[row["reason"]] = int(by_reason.get(row["reason"], 0)) + 1
        self._meta_put(conn, QUARANTINE_SUMMARY, summary)

    def _record_trend(self, conn: Connection, gauges: Mapping[str, float | None]) -> None:
        """A row in ``gauge_history`` for each TREND_GAUGES value that changed (wall time now); older rows than
        TREND_KEEP_MS are dropped."""
        now = int(time.time() * 1000)
        h = gauge_history_t
        for name in TREND_GAUGES:
            value = gauges.get(name)
            if value is None:
                continue
            last = conn.execute(
                select(h.c.value).where(h.c.name == name).order_by(h.c.at_ms.desc(), h.c.id.desc()).limit(1)
            ).first()
            if last is None or last[0] != float(value):
                conn.execute(insert(h), [{"name": name, "at_ms": now, "value": float(value)}])
            conn.execute(delete(h).where(h.c.name == name, h.c.at_ms < now - TREND_KEEP_MS))

    def trend(self, since_ms: int) -> dict[str, list[list[float]]]:
        """Each TREND_GAUGES gauge since ``since_ms`` (wall time): ``[[at_ms, value], ...]``, oldest first, starting
        with its value at ``since_ms`` when it was known then."""
        h = gauge_history_t
        out: dict[str, list[list[float]]] = {}
        with self.engine.connect() as conn:
            for name in TREND_GAUGES:
                before = conn.execute(
                    select(h.c.value)
                    .where(h.c.name == name, h.c.at_ms < since_ms)
                    .order_by(h.c.at_ms.desc(), h.c.id.desc())
                    .limit(1)
                ).first()
                points: list[list[float]] = [[since_ms, gauge_value(before[0])]] if before is not None else []
                rows = conn.execute(
                    select(h.c.at_ms, h.c.value)
                    .where(h.c.name == name, h.c.at_ms >= since_ms)
                    .order_by(h.c.at_ms, h.c.id)
                )
                points += [[int(at), gauge_value(value)] for at, value in rows]
                out[name] = points
        return out

    def _request_checkpoint(self) -> None:
        """Ask the background checkpointer to copy the WAL into the database file (SQLite files only)."""
        if not self._fast_sqlite:
            return
        if self._checkpointer is None:
            self._checkpointer = WalCheckpointer(str(self.url.database), self._busy_timeout_ms)
        self._checkpointer.request()

    def load_document(self, doc: Mapping[str, Any], *, batch_id: int | None = None) -> None:
        """Replace the store's content with a report document (DESIGN §5). Chunked: fine for 1M partitions."""
        self.create_schema()
        with self._writer.begin() as conn:
            for table in reversed(metadata.sorted_tables):
                conn.execute(delete(table))
            last_event: int | None = None
            # One pass over the partitions: ``doc["partitions"]`` may be a generator (1M in benchmarks).
            for chunk in chunks(doc.get("partitions", ())):
                rows = [partition_store_row(d) for d in chunk]
                n = len(PARTITION_COLUMNS)
                bulk_insert(
                    conn,
                    partitions_t,
                    [{**dict(zip(PARTITION_COLUMNS, r[:n], strict=True)), "written_batch": batch_id} for r in rows],
                )
                if conn.dialect.name != "sqlite":  # SQLite: the insert trigger adds them
                    replicas = [
                        {"broker_id": b, "topic": r[2], "partition_id": r[1], "topic_id": r[0]}
                        for r in rows
                        for b in r[n]
                    ]
                    bulk_insert(conn, partition_replicas_t, replicas)
                stamps = [d["lastTimestampMs"] for d in chunk if d.get("lastTimestampMs")]
                if stamps:
                    last_event = max(last_event or 0, *stamps)
            for chunk in chunks(broker_row(b) for b in doc.get("brokers", ())):
                conn.execute(insert(brokers_t), chunk)
            for chunk in chunks(topic_row(t) for t in doc.get("topics", ())):
                conn.execute(insert(topics_t), chunk)
            for chunk in chunks(violation_row(v) for v in doc.get("violations", ())):
                conn.execute(insert(violations_t), chunk)
            q = doc.get("quarantined") or {}
            for chunk in chunks(quarantine_row(r, batch_id) for r in q.get("records", ())):
                conn.execute(insert(quarantined_t), chunk)
            self._meta_put(
                conn,
                QUARANTINE_SUMMARY,
                {
                    "count": int(q.get("count", len(q.get("records", ())))),
                    "byReason": dict(q.get("byReason", {})),
                },
            )
            gauge_rows = [{"name": k, "value": float(v)} for k, v in (doc.get("gauges") or {}).items()]
            for chunk in chunks(gauge_rows):
                conn.execute(insert(gauges_t), chunk)
            self._record_trend(conn, doc.get("gauges") or {})
            if "cluster" in doc:
                self._meta_put(conn, CLUSTER, doc["cluster"])
            if "counts" in doc:
                self._meta_put(conn, COUNTS, doc["counts"])
            last_event = last_event_ms(doc, last_event)
            if last_event is not None:
                self._meta_put(conn, LAST_EVENT_TIME_MS, last_event)
            self._meta_put(conn, LAST_BATCH_ID, None if batch_id is None else int(batch_id))
            self._meta_put(conn, UPDATED_AT_MS, int(time.time() * 1000))
            self._meta_put(conn, GENERATION, uuid.uuid4().hex)
            self._meta_put(conn, PARTITION_SET, uuid.uuid4().hex)
            self._meta_put(conn, SCHEMA_VERSION, STORE_SCHEMA)
        self._request_checkpoint()
        if self.is_sqlite:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("ANALYZE")
                conn.commit()

    # ------------------------------------------------------------------ reading
    @contextlib.contextmanager
    def _reading(self) -> Iterator[Connection]:
        """A connection whose statements all read one snapshot (SQLite: one read transaction; PostgreSQL:
        REPEATABLE READ), so partition rows are rebuilt with the brokers and topics of the same batch."""
        with self.engine.connect() as conn:
            if not self.is_sqlite:
                conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    def _store_view(self, conn: Connection | sqlite3.Connection, topic: str | None = None) -> StoreView:
        """The StoreView of the store's current batch, cached until a write changes the generation. With
        ``topic`` (a point read) only that topic's document is read, not all of them: a point read that follows
        a batch stays cheap on a cluster with many topics."""

        def rows(sql: str, *params: Any) -> list[Any]:
            if isinstance(conn, sqlite3.Connection):
                return conn.execute(sql, params).fetchall()
            return conn.exec_driver_sql(sql, params).all() if params else conn.exec_driver_sql(sql).all()

        mark = "?" if self.is_sqlite else "%s"
        meta_sql = f"SELECT value FROM {meta_t.name} WHERE {meta_t.c.key.name} = {mark}"
        found = rows(meta_sql, GENERATION)
        generation = found[0][0] if found else None
        cached = self._view
        if cached is None or generation is None or cached[0] != generation:
            brokers = [loads(d) for (d,) in rows(f"SELECT doc FROM {brokers_t.name}")]
            cluster_text = rows(meta_sql, CLUSTER)
            fresh = StoreView.from_docs(brokers, loads(cluster_text[0][0]) if cluster_text else {}, [])
            cached = self._view = (generation, fresh, set())
        _generation, store_view, loaded = cached
        if ALL_TOPICS in loaded or (topic is not None and topic in loaded):
            return store_view
        if topic is None:
            store_view.learn_topics([loads(d) for (d,) in rows(f"SELECT doc FROM {topics_t.name}")])
            loaded.add(ALL_TOPICS)
        else:
            store_view.learn_topics(
                [loads(d) for (d,) in rows(f"SELECT doc FROM {topics_t.name} WHERE topic = {mark}", topic)]
            )
            loaded.add(topic)
        return store_view

    # ------------------------------------------------------------------ document
    def read_document(self) -> dict[str, Any]:
        """The whole store as one report document in the DESIGN §5 shape (same as ``elrwatch replay``)."""
        with self._reading() as conn:
            store_view = self._store_view(conn)
            ordered = select(*DOC_COLUMNS).order_by(partitions_t.c.topic, partitions_t.c.partition_id)
            parts = [store_view.document(*row) for row in conn.execute(ordered)]
            broker_docs = [loads(d) for (d,) in conn.execute(select(brokers_t.c.doc).order_by(brokers_t.c.broker_id))]
            topic_docs = [loads(d) for (d,) in conn.execute(select(topics_t.c.doc).order_by(topics_t.c.topic))]
            gauge_map = {
                n: gauge_value(v)
                for n, v in conn.execute(select(gauges_t.c.name, gauges_t.c.value).order_by(gauges_t.c.name))
            }
            violation_docs = [
                loads(d)
                for (d,) in conn.execute(
                    select(violations_t.c.doc).order_by(
                        violations_t.c.topic,
                        violations_t.c.partition_id,
                        violations_t.c.kind,
                        violations_t.c.id,
                    )
                )
            ]
            q_records = [
                loads(d)
                for (d,) in conn.execute(
                    select(quarantined_t.c.doc).order_by(quarantined_t.c.id).limit(QUARANTINE_RECORDS_LIMIT)
                )
            ]
            summary = self._meta_get(conn, QUARANTINE_SUMMARY) or {"count": len(q_records), "byReason": {}}
            cluster = self._meta_get(conn, CLUSTER, {})
            counts = self._meta_get(conn, COUNTS, {})
        return {
            "partitions": parts,
            "brokers": broker_docs,
            "topics": topic_docs,
            "cluster": cluster,
            "gauges": gauge_map,
            "violations": violation_docs,
            "quarantined": {
                "count": summary.get("count", len(q_records)),
                "byReason": summary.get("byReason", {}),
                "records": q_records,
            },
            "counts": counts,
        }

    # ------------------------------------------------------------------ queries for the API
    def get_meta(self) -> dict[str, Any]:
        """Small meta values: lastBatchId, lastEventTimeMs, updatedAtMs, and storeBehind (``{"batches": N,
        "newestBatchId": M}``: how many batches the job had served on its gauges and not yet written when it
        wrote this one; the store is written behind the batches, streaming/store_writer.py)."""
        with self.engine.connect() as conn:
            rows = dict(
                conn.execute(
                    select(meta_t.c.key, meta_t.c.value).where(
                        meta_t.c.key.in_([LAST_BATCH_ID, LAST_EVENT_TIME_MS, UPDATED_AT_MS, STORE_BEHIND])
                    )
                ).all()
            )
        return {
            "lastBatchId": loads(rows[LAST_BATCH_ID]) if LAST_BATCH_ID in rows else None,
            "lastEventTimeMs": loads(rows[LAST_EVENT_TIME_MS]) if LAST_EVENT_TIME_MS in rows else None,
            "updatedAtMs": loads(rows[UPDATED_AT_MS]) if UPDATED_AT_MS in rows else None,
            "storeBehind": loads(rows[STORE_BEHIND]) if STORE_BEHIND in rows else None,
        }

    def summary(self) -> dict[str, Any]:
        """Gauges, meta and cluster info: reads only the small gauges and meta tables (never partitions)."""
        with self.engine.connect() as conn:
            gauge_map = {n: gauge_value(v) for n, v in conn.execute(select(gauges_t.c.name, gauges_t.c.value))}
            rows = dict(
                conn.execute(
                    select(meta_t.c.key, meta_t.c.value).where(
                        meta_t.c.key.in_(
                            [LAST_BATCH_ID, LAST_EVENT_TIME_MS, UPDATED_AT_MS, CLUSTER, QUARANTINE_SUMMARY]
                        )
                    )
                ).all()
            )
        values = {k: loads(v) for k, v in rows.items()}
        return {
            "gauges": gauge_map,
            "lastBatchId": values.get(LAST_BATCH_ID),
            "lastEventTimeMs": values.get(LAST_EVENT_TIME_MS),
            "updatedAtMs": values.get(UPDATED_AT_MS),
            "cluster": values.get(CLUSTER) or {},
            "quarantined": values.get(QUARANTINE_SUMMARY) or {"count": 0, "byReason": {}},
        }

    def _sqlite_reader(self) -> sqlite3.Connection:
        """A per-thread read-only sqlite3 connection for point lookups (skips SQLAlchemy's per-call overhead).

        Autocommit (no open transaction), so every statement sees the latest committed batch (WAL)."""
        conn = getattr(self._local, "reader", None)
        if conn is None:
            conn = sqlite3.connect(
                self.url.database or "",
                timeout=self._busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")
            conn.execute("PRAGMA query_only=ON")
            self._local.reader = conn
            self._readers.append(conn)
        return conn

    def get_partition_json(self, topic: str, partition_id: int) -> str | None:
        """One partition's document as JSON text, or None (the API's hot path: a SQLite file is read with a
        plain sqlite3 connection, the row and its StoreView in one read transaction)."""
        doc = self.get_partition(topic, partition_id)
        return None if doc is None else dumps(doc)

    def get_partition(self, topic: str, partition_id: int) -> dict[str, Any] | None:
        """One partition's full document, or None."""
        if self._fast_sqlite:
            conn = self._sqlite_reader()
            conn.execute("BEGIN")  # one snapshot: the row and the brokers/topics/cluster it is read with
            try:
                row = conn.execute(f"{DOC_SQL} WHERE topic = ? AND partition_id = ?", (topic, partition_id)).fetchone()
                if row is None:
                    return None
                return self._store_view(conn, topic).document(*row)
            finally:
                conn.execute("COMMIT")
        with self._reading() as conn:
            row = conn.execute(
                select(*DOC_COLUMNS).where(partitions_t.c.topic == topic, partitions_t.c.partition_id == partition_id)
            ).first()
            return None if row is None else self._store_view(conn, topic).document(*row)

    def partitions_on_brokers(self, broker_ids: Sequence[int]) -> list[dict[str, Any]]:
        """Documents of every partition with a replica on one of ``broker_ids`` (by topic, partition)."""
        p, r = partitions_t, partition_replicas_t
        keys = select(r.c.topic_id, r.c.partition_id).where(r.c.broker_id.in_(list(broker_ids))).distinct().subquery()
        stmt = (
            select(*DOC_COLUMNS)
            .join(keys, and_(p.c.topic_id == keys.c.topic_id, p.c.partition_id == keys.c.partition_id))
            .order_by(p.c.topic, p.c.partition_id)
        )
        with self._reading() as conn:
            store_view = self._store_view(conn)
            return [store_view.document(*row) for row in conn.execute(stmt)]

    def whatif_inputs(
        self, broker_ids: Sequence[int], check: Callable[[], None] | None = None
    ) -> tuple[dict[int, BrokerState], list[Candidate]]:
        """The brokers, and every partition with a replica on one of ``broker_ids`` as the what-if takes it
        (`elrwatch.state.whatif.Candidate`: its registration key and topic context; its PartitionState built only
        when asked: no documents, no advice). ``check`` is called every few thousand rows (a caller's time limit
        raises from it)."""
        p, r = partitions_t, partition_replicas_t
        keys = select(r.c.topic_id, r.c.partition_id).where(r.c.broker_id.in_(list(broker_ids))).distinct().subquery()
        stmt = (
            select(p.c.topic, p.c.topic_id, p.c.partition_id, p.c.effective_min_isr, p.c.state)
            .join(keys, and_(p.c.topic_id == keys.c.topic_id, p.c.partition_id == keys.c.partition_id))
            .order_by(p.c.topic, p.c.partition_id)
        )
        out: list[Candidate] = []
        with self._reading() as conn:
            store_view = self._store_view(conn)
            contexts: dict[tuple[str, int], TopicContext] = {}
            for topic, topic_id, partition_id, stored_min_isr, stored in conn.execute(stmt):
                ctx = contexts.get((topic, stored_min_isr))
                if ctx is None:
                    min_isr = 1 if stored_min_isr is None else stored_min_isr  # unknown (no replicas): Kafka's least
                    ctx = contexts[(topic, stored_min_isr)] = store_view.topic_context(topic, min_isr)
                values = loads(stored)
                build = functools.partial(partition_from_stored, topic_id, partition_id, values)
                out.append((topic, partition_id, stored_registration_key(values), ctx, build))
                if check is not None and not len(out) & 0xFFF:
                    check()
            return dict(store_view.brokers), out

    def scan_registrations(
        self,
        consume: Callable[[list[tuple[str, str, int, int | None, tuple[Any, ...]]]], None],
        since: tuple[str | None, int | None] | None = None,
        reset: Callable[[], None] = lambda: None,
        chunk: int = 20_000,
    ) -> tuple[tuple[str | None, int | None], bool, StoreView]:
        """Give ``consume`` the partition rows as (topic, topic ID, partition ID, stored effective min ISR,
        `stored_registration_key`), chunk by chunk, all read in one snapshot: with ``since`` (what an earlier scan
        returned) only those written after it, else, or when partitions were removed or the content replaced
        since, every row (``reset`` is called first). Returns the position to pass next time, whether every row
        was read, and the StoreView (brokers, every topic's settings, cluster) of the same snapshot."""
        p = partitions_t
        columns = select(p.c.topic, p.c.topic_id, p.c.partition_id, p.c.effective_min_isr, p.c.state)
        with self._reading() as conn:
            position = (self._meta_get(conn, PARTITION_SET), self._meta_get(conn, LAST_BATCH_ID))
            whole = since is None or since[0] != position[0] or since[1] is None
            stmt = columns if whole else columns.where(p.c.written_batch > since[1])  # type: ignore[index]
            if whole:
                reset()
            result = conn.execute(stmt)
            while True:
                rows = result.fetchmany(chunk)
                if not rows:
                    break
                consume([(t, tid, pid, m, stored_registration_key(loads(st))) for t, tid, pid, m, st in rows])
            return position, whole, self._store_view(conn)  # with every topic's settings

    def topic_exists(self, topic: str) -> bool:
        """True when the store knows the topic (from its topic record or any partition)."""
        with self.engine.connect() as conn:
            if conn.execute(select(topics_t.c.topic_id).where(topics_t.c.topic == topic).limit(1)).first():
                return True
            return (
                conn.execute(select(partitions_t.c.partition_id).where(partitions_t.c.topic == topic).limit(1)).first()
                is not None
            )

    def list_partitions(
        self,
        *,
        status: Sequence[str] | None = None,
        topic: str | None = None,
        broker: int | None = None,
        under_min_isr: bool | None = None,
        leaderless: bool | None = None,
        after: tuple[str, int] | None = None,
        limit: int = 100,
    ) -> tuple[list[dict[str, Any]], tuple[str, int] | None]:
        """A page of partition documents ordered by (topic, partition), starting at cursor key ``after``
        (inclusive, like DescribeTopicPartitions' cursor); returns the page and the next page's cursor key."""
        p = partitions_t
        if broker is not None:
            r = partition_replicas_t
            stmt = (
                select(*DOC_COLUMNS)
                .select_from(r.join(p, and_(p.c.topic_id == r.c.topic_id, p.c.partition_id == r.c.partition_id)))
                .where(r.c.broker_id == broker)
            )
            order_topic, order_partition = r.c.topic, r.c.partition_id
        else:
            stmt = select(*DOC_COLUMNS)
            order_topic, order_partition = p.c.topic, p.c.partition_id
        if status:
            stmt = stmt.where(p.c.status.in_(list(status)) if len(status) > 1 else p.c.status == status[0])
        if topic is not None:
            stmt = stmt.where(order_topic == topic)
        if under_min_isr is not None:  # true: the partial index; false: most partitions, in (topic, partition) order
            stmt = stmt.where(UNDER_MIN_ISR_TRUE if under_min_isr else p.c.under_min_isr.is_(False))
        if leaderless is not None:
            stmt = stmt.where(LEADERLESS_TRUE if leaderless else p.c.leaderless.is_(False))
        if after is not None:
            a_topic, a_partition = after
            stmt = stmt.where(or_(order_topic > a_topic, and_(order_topic == a_topic, order_partition >= a_partition)))
        stmt = stmt.order_by(order_topic, order_partition).limit(limit + 1)
        with self._reading() as conn:
            rows = conn.execute(stmt).all()
            store_view = self._store_view(conn)
        nxt = (rows[limit][0], rows[limit][2]) if len(rows) > limit else None
        return [store_view.document(*row) for row in rows[:limit]], nxt

    def recommendations(
        self, *, after: tuple[int, str, int] | None = None, limit: int = 100
    ) -> tuple[list[dict[str, Any]], tuple[int, str, int] | None]:
        """Partitions that need an operator, most severe status first, then by (topic, partition)."""
        p = partitions_t
        stmt = select(*DOC_COLUMNS, p.c.severity).where(NEEDS_ACTION_TRUE)
        if after is not None:
            sev, a_topic, a_partition = after
            stmt = stmt.where(
                or_(
                    p.c.severity > sev,
                    and_(p.c.severity == sev, p.c.topic > a_topic),
                    and_(p.c.severity == sev, p.c.topic == a_topic, p.c.partition_id >= a_partition),
                )
            )
        stmt = stmt.order_by(p.c.severity, p.c.topic, p.c.partition_id).limit(limit + 1)
        with self._reading() as conn:
            rows = conn.execute(stmt).all()
            store_view = self._store_view(conn)
        nxt = (rows[limit][5], rows[limit][0], rows[limit][2]) if len(rows) > limit else None
        return [store_view.document(*row[:5]) for row in rows[:limit]], nxt

    def count_needing_action(self) -> int:
        """How many partitions need an operator (index-only count)."""
        with self.engine.connect() as conn:
            return int(
                conn.execute(select(func.count()).select_from(partitions_t).where(NEEDS_ACTION_TRUE)).scalar() or 0
            )

    def history(self, topic: str, partition_id: int, *, limit: int = 1000) -> list[dict[str, Any]]:
        """Status transitions of one partition, oldest first (the newest ``limit``)."""
        t = status_transitions_t
        stmt = (
            select(t.c.from_status, t.c.to_status, t.c.at_ms, t.c.offset, t.c.position, t.c.batch_id, t.c.id)
            .where(t.c.topic == topic, t.c.partition_id == partition_id)
            .order_by(t.c.id.desc())
            .limit(limit)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [
            {"from": r[0], "to": r[1], "atMs": r[2], "offset": r[3], "position": r[4], "batchId": r[5]}
            for r in reversed(rows)
        ]

    def list_topics(self) -> list[dict[str, Any]]:
        """Topic documents, by name."""
        with self.engine.connect() as conn:
            return [loads(d) for (d,) in conn.execute(select(topics_t.c.doc).order_by(topics_t.c.topic))]

    def list_brokers(self, counts: bool = True) -> list[dict[str, Any]]:
        """Broker documents, by id, each with its partition counts: ``leaderPartitions`` (partitions it leads: a
        scan of the partitions' leader column), ``isrMissingPartitions``, ``restartBlockingPartitions``,
        ``restartOfflinePartitions`` (the per-broker gauges of the same batch; null when the store has no such
        gauge, e.g. for an unregistered broker). ``counts=False``: the documents only."""
        p = partitions_t
        with self._reading() as conn:
            docs = [loads(d) for (d,) in conn.execute(select(brokers_t.c.doc).order_by(brokers_t.c.broker_id))]
            if not counts:
                return docs
            per_broker = self._broker_counts(conn, [int(d["brokerId"]) for d in docs])
            led = select(p.c.leader, func.count()).where(p.c.leader >= 0).group_by(p.c.leader)
            leaders = {int(leader): int(n) for leader, n in conn.execute(led)}
        return [
            {**d, "leaderPartitions": leaders.get(int(d["brokerId"]), 0), **per_broker[int(d["brokerId"])]}
            for d in docs
        ]

    def _broker_counts(self, conn: Connection, broker_ids: Sequence[int]) -> dict[int, dict[str, int | None]]:
        """The per-broker gauges of these brokers (by their sample names: nothing is parsed back)."""
        names = {
            sample(gauge, broker=str(b)): (b, field) for b in broker_ids for field, gauge in BROKER_COUNT_FIELDS.items()
        }
        out: dict[int, dict[str, int | None]] = {b: dict.fromkeys(BROKER_COUNT_FIELDS) for b in broker_ids}
        for chunk in chunks(list(names)):
            stmt = select(gauges_t.c.name, gauges_t.c.value).where(gauges_t.c.name.in_(chunk))
            for name, value in conn.execute(stmt):
                b, field = names[name]
                out[b][field] = int(value)
        return out

    def restart_check(
        self,
        broker_id: int,
        *,
        blocking_after: tuple[str, int] | None = None,
        offline_after: tuple[str, int] | None = None,
        limit: int = 100,
    ) -> dict[str, Any] | None:
        """Is it safe to stop this broker now? None for an unknown broker. The counts and the verdict come from
        the per-broker gauges of the last batch; the partitions (pages from the cursor keys ``blocking_after`` /
        ``offline_after``, by topic and partition) are found among the broker's replicas and re-derived from their
        stored state with the same rules (state/insight.py)."""
        with self._reading() as conn:
            row = conn.execute(select(brokers_t.c.doc).where(brokers_t.c.broker_id == broker_id)).first()
            if row is None:
                return None
            broker = loads(row[0])
            counts = self._broker_counts(conn, [broker_id])[broker_id]
            store_view = self._store_view(conn)
            pages = {}
            for kind, after, test in (
                ("blocking", blocking_after, insight.blocks),
                ("offline", offline_after, insight.takes_offline),
            ):
                count = counts["restartBlockingPartitions" if kind == "blocking" else "restartOfflinePartitions"]
                if count == 0:
                    pages[kind] = {"items": [], "nextCursor": None, "limit": limit}
                else:
                    pages[kind] = self._restart_page(
                        conn, store_view, broker_id, test, after, limit, full_count=count is None
                    )
        state = broker.get("state", "unknown")
        n_blocking = counts["restartBlockingPartitions"]
        n_offline = counts["restartOfflinePartitions"]
        if n_blocking is None or n_offline is None:  # a store without these gauges: the pages' own counts
            n_blocking, n_offline = pages["blocking"]["count"], pages["offline"]["count"]
        for page in pages.values():
            page.pop("count", None)
        safe, reason = insight.restart_verdict(broker_id, state, n_blocking, n_offline)
        return {
            "brokerId": broker_id,
            "state": state,
            "safe": safe,
            "reason": reason,
            "blockingCount": n_blocking,
            "offlineCount": n_offline,
            **pages,
        }

    def _restart_page(
        self,
        conn: Connection,
        store_view: StoreView,
        broker_id: int,
        test: Any,
        after: tuple[str, int] | None,
        limit: int,
        full_count: bool,
    ) -> dict[str, Any]:
        """A page of the broker's partitions that ``test`` (insight.blocks / takes_offline) selects, and how many
        there are from ``after`` on (with ``full_count``; else the scan stops at the next page's first)."""
        p, r = partitions_t, partition_replicas_t
        stmt = (
            select(*DOC_COLUMNS)
            .select_from(r.join(p, and_(p.c.topic_id == r.c.topic_id, p.c.partition_id == r.c.partition_id)))
            .where(r.c.broker_id == broker_id)
        )
        if after is not None:
            stmt = stmt.where(or_(r.c.topic > after[0], and_(r.c.topic == after[0], r.c.partition_id >= after[1])))
        stmt = stmt.order_by(r.c.topic, r.c.partition_id)
        causes = insight.cause_codes(store_view.brokers.values())
        active = {b for b, broker in store_view.brokers.items() if broker.active}
        items: list[dict[str, Any]] = []
        nxt = None
        count = 0
        for topic, topic_id, partition_id, min_isr, state in conn.execute(stmt):
            values = loads(state)
            part = insight.contribution(
                tuple(values[0]), tuple(values[1]), tuple(values[2]), values[4], min_isr or 1, causes, active
            )
            if not test(part, broker_id):
                continue
            count += 1
            if len(items) < limit:
                items.append(store_view.document(topic, topic_id, partition_id, min_isr, state, advice=False))
            elif nxt is None:
                nxt = (topic, partition_id)
                if not full_count:
                    break
        return {"items": items, "nextCursor": nxt, "limit": limit, "count": count}
