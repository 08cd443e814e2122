"""The status store's tables (SQLAlchemy Core, one schema for SQLite and PostgreSQL) and its meta keys.

* ``partitions`` — one row per partition: key and status columns (indexed for the API's filters and for cursor
  pagination by ``(topic, partition_id)``) plus ``state``, the partition's compact stored form
  (``state/report.py``: ``STORED_FIELDS``, ~100 bytes). Readers rebuild the document, its electable sets and its
  advice from it and the brokers, topics and cluster of the same batch (``report.StoreView``).
* ``partition_replicas`` — (broker, topic, partition) for the API's ``broker`` filter.
* ``brokers``, ``topics`` — their JSON documents.
* ``status_transitions`` — history of status changes per partition.
* ``quarantined`` — quarantined records with their reasons.
* ``gauges`` — Prometheus sample name (with labels) → value.
* ``gauge_history`` — the values of a few gauges over time (``TREND_GAUGES``: under min ISR, offline), one row
  each time one changes, kept ``TREND_KEEP_MS`` (the status page's trend).
* ``violations`` — current invariant violations.
* ``meta`` — key → JSON value: last committed batch id, last event time, updated_at, cluster, counts,
  quarantine summary.
"""

from __future__ import annotations

from sqlalchemy import (
    DDL,
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()


def _row_id() -> Column:
    """A history table's key: a BIGINT that autoincrements (an INTEGER on SQLite: only an INTEGER PRIMARY KEY is
    its rowid)."""
    return Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)


def _partition_of_row() -> tuple[Column, Column, Column]:
    """The partition a row is about: ``topic_id`` (null when unknown), ``topic``, ``partition_id``."""
    return (
        Column("topic_id", String(64), nullable=True),
        Column("topic", String(255), nullable=False),
        Column("partition_id", Integer, nullable=False),
    )


partitions_t = Table(
    "partitions",
    metadata,
    Column("topic_id", String(64), primary_key=True),
    Column("partition_id", Integer, primary_key=True, autoincrement=False),
    Column("topic", String(255), nullable=False),
    Column("status", String(32), nullable=False),
    Column("severity", Integer, nullable=False),
    Column("needs_action", Boolean, nullable=False),
    Column("under_min_isr", Boolean, nullable=False),
    Column("leaderless", Boolean, nullable=False),
    Column("leader", Integer, nullable=False),
    Column("effective_min_isr", Integer, nullable=True),
    Column("status_since_ms", BigInteger, nullable=True),
    Column("state", Text, nullable=False),
    Column("replica_brokers", Text, nullable=False),  # JSON list: the brokers of its partition_replicas rows
    # the batch that last wrote the row (null: before this column existed): readers that keep partitions in
    # memory (the API's what-if index) read only the rows written since they last looked
    Column("written_batch", BigInteger, nullable=True),
    Index("ix_partitions_topic_partition", "topic", "partition_id", unique=True),
    Index("ix_partitions_written_batch", "written_batch"),
    Index("ix_partitions_status", "status", "topic", "partition_id"),
)
# Partial indexes: only the partitions under min ISR / leaderless / needing an operator are in them, so the
# update of a partition that is none of these (most of a broker-failure storm: UNDER_REPLICATED, AT_MIN_ISR)
# does not touch them. A 100k-row storm upsert into 1M rows: 2.2-2.8 s instead of 4.0-4.6 s without them.
# The API's filters use the same `IS true` expressions, which is what lets SQLite and PostgreSQL use them.
UNDER_MIN_ISR_TRUE = partitions_t.c.under_min_isr.is_(True)
LEADERLESS_TRUE = partitions_t.c.leaderless.is_(True)
NEEDS_ACTION_TRUE = partitions_t.c.needs_action.is_(True)
for _name, _where, _columns in (
    ("ix_partitions_under_min_isr", UNDER_MIN_ISR_TRUE, ("topic", "partition_id")),
    ("ix_partitions_leaderless", LEADERLESS_TRUE, ("topic", "partition_id")),
    ("ix_partitions_action", NEEDS_ACTION_TRUE, ("severity", "topic", "partition_id")),
):
    Index(_name, *(partitions_t.c[c] for c in _columns), sqlite_where=_where, postgresql_where=_where)

partition_replicas_t = Table(
    "partition_replicas",
    metadata,
    Column("broker_id", Integer, primary_key=True, autoincrement=False),
    Column("topic", String(255), primary_key=True),
    Column("partition_id", Integer, primary_key=True, autoincrement=False),
    Column("topic_id", String(64), nullable=False),
    Index("ix_partition_replicas_partition", "topic_id", "partition_id"),
    sqlite_with_rowid=False,
)

brokers_t = Table(
    "brokers",
    metadata,
    Column("broker_id", Integer, primary_key=True, autoincrement=False),
    Column("state", String(32), nullable=False),
    Column("doc", Text, nullable=False),
)

topics_t = Table(
    "topics",
    metadata,
    Column("topic_id", String(64), primary_key=True),
    Column("topic", String(255), nullable=False),
    Column("doc", Text, nullable=False),
    Index("ix_topics_topic", "topic"),
)

status_transitions_t = Table(
    "status_transitions",
    metadata,
    _row_id(),
    Column("batch_id", BigInteger, nullable=True),
    *_partition_of_row(),
    Column("from_status", String(32), nullable=True),
    Column("to_status", String(32), nullable=True),
    Column("at_ms", BigInteger, nullable=True),
    Column("offset", BigInteger, nullable=True),
    Column("position", Text, nullable=True),
    Index("ix_status_transitions_partition", "topic", "partition_id", "id"),
)

quarantined_t = Table(
    "quarantined",
    metadata,
    _row_id(),
    Column("batch_id", BigInteger, nullable=True),
    Column("reason", String(64), nullable=False),
    Column("position", Text, nullable=True),
    Column("doc", Text, nullable=False),
    Index("ix_quarantined_reason", "reason"),
)

gauges_t = Table(
    "gauges",
    metadata,
    Column("name", String(512), primary_key=True),
    Column("value", Float, nullable=False),
)

violations_t = Table(
    "violations",
    metadata,
    _row_id(),
    *_partition_of_row(),
    Column("kind", String(64), nullable=False),
    Column("doc", Text, nullable=False),
    Index("ix_violations_partition", "topic", "partition_id", "kind"),
)

gauge_history_t = Table(
    "gauge_history",
    metadata,
    _row_id(),
    Column("name", String(512), nullable=False),
    Column("at_ms", BigInteger, nullable=False),
    Column("value", Float, nullable=False),
    Index("ix_gauge_history_name_at", "name", "at_ms"),
)

meta_t = Table(
    "meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

# meta keys
LAST_BATCH_ID = "last_batch_id"
LAST_EVENT_TIME_MS = "last_event_time_ms"
UPDATED_AT_MS = "updated_at_ms"
CLUSTER = "cluster"
COUNTS = "counts"
STORE_BEHIND = "store_behind"  # how far the store was behind the job's gauges when written (streaming/store_writer.py)
QUARANTINE_SUMMARY = "quarantined"
GENERATION = "generation"  # changes with every write: readers' cached StoreView is valid while it is the same
#: Changes when partitions are removed or the whole content replaced: an in-memory copy of the partitions read
#: incrementally (``written_batch``) is then read again whole.
PARTITION_SET = "partition_set"
SCHEMA_VERSION = "schema_version"
ALL_TOPICS = "\x00all"  # in a cached StoreView's loaded topics: every topic's settings are loaded

#: The gauges whose history the store keeps, and for how long (ms of wall time).
TREND_GAUGES = ("elrwatch_global_under_min_isr_partitions", "elrwatch_offline_partitions")
TREND_KEEP_MS = 24 * 3600 * 1000

#: 2: partitions keep their compact stored form (``state``), documents are rebuilt on read. 1 (no
#: ``schema_version`` row; a ``doc`` column): whole documents, as older elrwatch versions wrote them.
STORE_SCHEMA = 2


class StoreSchemaError(ValueError):
    """The store was written by an elrwatch with another table layout."""


#: SQLite keeps ``partition_replicas`` from ``partitions.replica_brokers`` itself: when a row is inserted, and
#: when an update changes the list (a reassignment), not on the updates that leave it as it was. (``NOT EXISTS``,
#: not ``INSERT OR IGNORE``: inside a trigger the outer upsert's conflict handling would override the IGNORE.)
SQLITE_REPLICA_TRIGGERS = (
    DDL(
        "CREATE TRIGGER IF NOT EXISTS partitions_replicas_insert AFTER INSERT ON partitions BEGIN "
        "INSERT INTO partition_replicas (broker_id, topic, partition_id, topic_id) "
        "SELECT value, new.topic, new.partition_id, new.topic_id FROM json_each(new.replica_brokers) "
        "WHERE NOT EXISTS (SELECT 1 FROM partition_replicas r WHERE r.broker_id = value AND r.topic = new.topic "
        "AND r.partition_id = new.partition_id); END"
    ),
    DDL(
        "CREATE TRIGGER IF NOT EXISTS partitions_replicas_update AFTER UPDATE OF replica_brokers ON partitions "
        "WHEN old.replica_brokers IS NOT new.replica_brokers BEGIN "
        "DELETE FROM partition_replicas WHERE topic_id = new.topic_id AND partition_id = new.partition_id "
        "AND broker_id NOT IN (SELECT value FROM json_each(new.replica_brokers)); "
        "INSERT INTO partition_replicas (broker_id, topic, partition_id, topic_id) "
        "SELECT value, new.topic, new.partition_id, new.topic_id FROM json_each(new.replica_brokers) "
        "WHERE NOT EXISTS (SELECT 1 FROM partition_replicas r WHERE r.broker_id = value AND r.topic = new.topic "
        "AND r.partition_id = new.partition_id); END"
    ),
)


#: The columns a partition's document is rebuilt from (``StoreView.document``'s arguments, in order).
DOC_COLUMNS = (
    partitions_t.c.topic,
    partitions_t.c.topic_id,
    partitions_t.c.partition_id,
    partitions_t.c.effective_min_isr,
    partitions_t.c.state,
)
DOC_SQL = f"SELECT {', '.join(c.name for c in DOC_COLUMNS)} FROM {partitions_t.name}"
