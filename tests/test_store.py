"""The status store (store/) on SQLite and on a real PostgreSQL server started here."""

from __future__ import annotations

import copy
import glob
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from elrwatch.devtools.kafka_cluster import free_port
from elrwatch.store import STORE_SCHEMA, WAL_SIZE_LIMIT, StatusStore, StoreSchemaError, mask_url

DATA = Path(__file__).parent / "data" / "report_small.json"


def small_doc() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


class PostgresServer:
    """A throw-away PostgreSQL server from Debian's binaries (initdb + pg_ctl, free loopback port)."""

    USER = "elrwatch"

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            pytest.fail("PostgreSQL binaries missing: run `make install-system` (apt-get install postgresql)")
        self.bin = Path(found[-1]).parent
        self.tmp = Path(tempfile.mkdtemp(prefix="elrwatch-pg-"))
        self.data = self.tmp / "data"
        self.port = free_port()
        self.password = "s3cret-Pw!"
        self.password_file = self.tmp / "password"
        self.password_file.write_text(self.password + "\n", encoding="utf-8")
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root
            self.as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.tmp, "postgres")
            shutil.chown(self.password_file, "postgres")
            os.chmod(self.tmp, 0o700)

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> PostgresServer:
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            self.USER,
            "-A",
            "scram-sha-256",
            f"--pwfile={self.password_file}",
            "--no-sync",
            "-E",
            "UTF8",
        )
        options = f"-p {self.port} -k {self.tmp} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.tmp / "log"),
            "-w",
            "-t",
            "60",
            "start",
        )
        return self

    @property
    def url(self) -> str:
        """URL without the password (it comes from the password file)."""
        return f"postgresql+psycopg://{self.USER}@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StatusStore]:
    """An empty store with its schema, on each backend."""
    if request.param == "sqlite":
        s = StatusStore(f"sqlite:///{tmp_path}/store.db")
    else:
        pg: PostgresServer = request.getfixturevalue("postgres")
        s = StatusStore(pg.url, password_file=pg.password_file)
        from elrwatch.store.schema import metadata

        metadata.drop_all(s.engine)
    s.create_schema()
    try:
        yield s
    finally:
        s.dispose()


def _key(p: dict) -> tuple[str, int]:
    return p["topic"], p["partitionId"]


def test_load_and_read_document_round_trip(store: StatusStore) -> None:
    doc = small_doc()
    store.load_document(doc)
    assert store.read_document() == doc
    store.load_document(doc)  # replaces, does not duplicate
    assert store.read_document() == doc


def test_read_document_of_empty_store_has_the_report_shape(store: StatusStore) -> None:
    out = store.read_document()
    assert set(out) == {
        "partitions",
        "brokers",
        "topics",
        "cluster",
        "gauges",
        "violations",
        "quarantined",
        "counts",
    }
    assert out["partitions"] == [] and out["quarantined"]["count"] == 0


def _batches_from(doc: dict) -> list[dict]:
    """Split a document into three write_batch calls that together build it."""
    parts = doc["partitions"]
    first, second = parts[:4], parts[4:]
    q = doc["quarantined"]["records"]
    gauges = doc["gauges"]
    half = dict(list(gauges.items())[: len(gauges) // 2])
    return [
        {
            "partitions": first,
            "brokers": doc["brokers"][:2],
            "topics": doc["topics"],
            "quarantined": q[:1],
            "violations": [],
            "gauges": {**half, "stale_gauge": 5},
            "meta": {"cluster": doc["cluster"]},
        },
        {
            "partitions": second,
            "brokers": doc["brokers"][2:],
            "quarantined": q[1:],
            "violations": doc["violations"],
            "gauges": {**gauges, "stale_gauge": None},
            "transitions": [
                {
                    "topic": "payments",
                    "topicId": p["topicId"],
                    "partitionId": 0,
                    "from": "HEALTHY",
                    "to": "MANUAL_ELECTION_REQUIRED",
                    "atMs": 1,
                    "offset": 418,
                }
                for p in parts[4:5]
            ],
            "meta": {"counts": doc["counts"], "lastEventTimeMs": 1732100009000},
        },
    ]


def test_write_batches_build_the_same_document_and_are_idempotent(store: StatusStore) -> None:
    doc = small_doc()
    b1, b2 = _batches_from(doc)
    assert store.write_batch(1, **b1) is True
    assert store.write_batch(2, **b2) is True
    assert store.read_document() == doc
    assert store.last_batch_id() == 2
    # Spark re-runs batch 2 (and an older one): nothing changes, nothing is appended twice.
    assert store.write_batch(2, **b2) is False
    assert store.write_batch(1, **b1) is False
    assert store.read_document() == doc
    assert len(store.history("payments", 0)) == 1
    assert store.summary()["quarantined"] == {"count": 2, "byReason": {"invalid_json": 1, "unknown_topic": 1}}


def test_write_batch_replaces_removes_and_records_history(store: StatusStore) -> None:
    doc = small_doc()
    store.load_document(doc, batch_id=10)
    p = copy.deepcopy(next(x for x in doc["partitions"] if _key(x) == ("orders", 1)))
    p.update(
        isr=[2, 0],
        elr=[],
        missingReplicas=[{"brokerId": 1, "cause": "fenced"}],  # broker 0 rejoined the ISR
        status="AT_MIN_ISR",
        underMinIsr=False,
        atMinIsr=True,
        partitionEpoch=16,
        statusSinceMs=1732100010000,
    )
    before = next(x for x in doc["partitions"] if _key(x) == ("orders", 1))
    assert json.loads(store.get_partition_json("orders", 1)) == before  # opens the fast reader (SQLite)
    gone = next(x for x in doc["partitions"] if _key(x) == ("orders", 2))
    ok = store.write_batch(
        11,
        partitions=[p],
        removed=[(gone["topicId"], gone["partitionId"])],
        transitions=[
            {
                "topic": "orders",
                "topicId": p["topicId"],
                "partitionId": 1,
                "from": "UNDER_MIN_ISR",
                "to": "AT_MIN_ISR",
                "atMs": 1732100010000,
                "offset": 430,
                "position": "ev/0@77",
            }
        ],
        gauges={'elrwatch_partitions{status="AT_MIN_ISR"}': 2, "elrwatch_elr_enabled": None},
        meta={"lastEventTimeMs": 1732100010000},
    )
    assert ok
    out = store.read_document()
    keys = [_key(x) for x in out["partitions"]]
    assert ("orders", 2) not in keys and len(keys) == len(doc["partitions"]) - 1
    # The advice is rebuilt from the written state: ISR back at min ISR, nothing left to restore.
    assert before["recommendation"]["action"] == "restore_replicas"
    written = store.get_partition("orders", 1)
    assert written is not None and written["recommendation"]["action"] == "none"
    assert "acks=all writes fail" not in written["outlook"]["summary"]
    p.update(outlook=written["outlook"], recommendation=written["recommendation"])
    assert written == p
    assert json.loads(store.get_partition_json("orders", 1)) == p  # the cached reader sees the new batch
    assert store.get_partition_json("orders", 2) is None
    assert store.get_partition("orders", 2) is None
    assert out["gauges"]['elrwatch_partitions{status="AT_MIN_ISR"}'] == 2
    assert "elrwatch_elr_enabled" not in out["gauges"]
    assert store.history("orders", 1) == [
        {
            "from": "UNDER_MIN_ISR",
            "to": "AT_MIN_ISR",
            "atMs": 1732100010000,
            "offset": 430,
            "position": "ev/0@77",
            "batchId": 11,
        }
    ]
    assert [_key(x) for x in store.list_partitions(broker=1)[0]] == [
        _key(x) for x in out["partitions"] if 1 in x["replicas"]
    ]
    meta = store.get_meta()
    assert meta["lastBatchId"] == 11 and meta["lastEventTimeMs"] == 1732100010000


def test_failed_batch_leaves_the_store_unchanged(store: StatusStore) -> None:
    doc = small_doc()
    store.load_document(doc, batch_id=3)
    broken = {"topic": "orders", "partitionId": 9}  # no topicId: the batch must fail as a whole
    good = copy.deepcopy(doc["partitions"][1])
    good["status"] = "HEALTHY"
    with pytest.raises(KeyError):
        store.write_batch(4, partitions=[good, broken], gauges={"elrwatch_partition_count": 99})
    assert store.read_document() == doc
    assert store.last_batch_id() == 3
    assert store.write_batch(4, partitions=[good]) is True


def test_pagination_visits_every_partition_once_under_every_filter(store: StatusStore) -> None:
    doc = small_doc()
    store.load_document(doc)
    everything = sorted(doc["partitions"], key=_key)
    cases = {
        "all": ({}, everything),
        "status": (
            {"status": ["AT_MIN_ISR", "HEALTHY"]},
            [p for p in everything if p["status"] in ("AT_MIN_ISR", "HEALTHY")],
        ),
        "topic": ({"topic": "payments"}, [p for p in everything if p["topic"] == "payments"]),
        "broker": ({"broker": 3}, [p for p in everything if 3 in p["replicas"]]),
        "under": ({"under_min_isr": True}, [p for p in everything if p["underMinIsr"]]),
        "leaderless": ({"leaderless": True}, [p for p in everything if p["leaderless"]]),
        "not leaderless+broker": (
            {"leaderless": False, "broker": 0},
            [p for p in everything if not p["leaderless"] and 0 in p["replicas"]],
        ),
    }
    for name, (filters, expected) in cases.items():
        seen, cursor, pages = [], None, 0
        while True:
            page, cursor = store.list_partitions(**filters, after=cursor, limit=2)
            pages += 1
            seen.extend(page)
            assert len(page) <= 2
            if cursor is None:
                break
        assert seen == expected, name
        assert pages == max(1, (len(expected) + 1) // 2), name


def test_recommendations_most_severe_first_with_cursor(store: StatusStore) -> None:
    store.load_document(small_doc())
    first, cursor = store.recommendations(limit=3)
    rest, end = store.recommendations(after=cursor, limit=3)
    assert end is None
    statuses = [p["status"] for p in first + rest]
    assert statuses == ["MANUAL_ELECTION_REQUIRED", "RECOVERING", "LEADERLESS_WAITING", "UNDER_MIN_ISR"]
    assert store.count_needing_action() == 4


def test_summary_reads_gauges_and_freshness(store: StatusStore) -> None:
    doc = small_doc()
    store.load_document(doc, batch_id=7)
    s = store.summary()
    assert s["gauges"] == doc["gauges"]
    assert s["lastBatchId"] == 7
    assert s["lastEventTimeMs"] == 1732100009000
    assert s["cluster"]["elrEnabled"] is True


def test_password_is_masked_and_taken_from_file(postgres: PostgresServer) -> None:
    with_pw = postgres.url.replace(f"{postgres.USER}@", f"{postgres.USER}:{postgres.password}@")
    assert postgres.password not in mask_url(with_pw)
    s = StatusStore(with_pw)
    assert postgres.password not in repr(s) and postgres.password not in s.masked_url
    assert s.ping()
    s.dispose()
    s = StatusStore(postgres.url, password_file=postgres.password_file)
    assert s.ping()
    s.dispose()
    bad = StatusStore(postgres.url, password="wrong")
    with pytest.raises(Exception) as info:
        bad.ping()
    assert "wrong" not in str(info.value)
    bad.dispose()


def test_sqlite_reader_is_not_blocked_by_an_open_write_transaction(tmp_path: Path) -> None:
    s = StatusStore(f"sqlite:///{tmp_path}/wal.db")
    doc = small_doc()
    s.load_document(doc)
    with s.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    writer = s._writer.connect()
    tx = writer.begin()  # BEGIN IMMEDIATE: holds the write lock
    writer.exec_driver_sql("DELETE FROM partitions")
    result: dict = {}

    def read() -> None:
        result["doc"] = s.read_document()

    t = threading.Thread(target=read)
    t.start()
    t.join(timeout=5)
    assert not t.is_alive(), "reader blocked by the writer"
    assert result["doc"] == doc  # readers see the last committed state
    tx.rollback()
    writer.close()
    s.dispose()


def _main_file_batch_id(db: Path, tmp_path: Path) -> int | None:
    """The last batch id as the database file alone holds it (a copy without its WAL): what was checkpointed."""
    import sqlite3

    alone = tmp_path / f"alone-{time.monotonic_ns()}.db"
    shutil.copyfile(db, alone)
    conn = sqlite3.connect(alone)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'last_batch_id'").fetchone()
    except sqlite3.OperationalError:  # not even the schema is in the file yet
        row = None
    finally:
        conn.close()
    return json.loads(row[0]) if row else None


def test_sqlite_commits_leave_the_wal_and_a_background_checkpoint_copies_it(tmp_path: Path) -> None:
    """Writers run with wal_autocheckpoint=0 (a commit only appends to the WAL); after each batch a background
    thread copies the WAL into the database file, and dispose() runs a last checkpoint."""
    db = tmp_path / "ck.db"
    s = StatusStore(f"sqlite:///{db}")
    s.create_schema()
    with s.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
    b1, b2 = _batches_from(small_doc())
    assert s.write_batch(1, **b1) is True
    deadline = time.monotonic() + 20
    while _main_file_batch_id(db, tmp_path) != 1:
        assert time.monotonic() < deadline, "batch 1 never reached the database file"
        time.sleep(0.05)
    assert s.write_batch(2, **b2) is True
    s.dispose()  # the last checkpoint
    assert _main_file_batch_id(db, tmp_path) == 2
    wal = db.with_name(db.name + "-wal")
    assert not wal.exists() or wal.stat().st_size <= WAL_SIZE_LIMIT
    assert StatusStore(f"sqlite:///{db}").read_document() == small_doc()


def test_quarantine_lists_at_most_1000_records_but_counts_all(store: StatusStore) -> None:
    records = [
        {"position": f"ev/0@{i}", "field": None, "reason": "invalid_json", "message": "bad"} for i in range(1005)
    ]
    assert store.write_batch(1, quarantined=records[:600])
    assert store.write_batch(2, quarantined=records[600:])
    q = store.read_document()["quarantined"]
    assert q["count"] == 1005 and q["byReason"] == {"invalid_json": 1005}
    assert q["records"] == records[:1000]


def test_gauges_are_replaced_as_a_whole(store: StatusStore) -> None:
    assert store.write_batch(1, gauges={'elrwatch_invariant_violations{kind="x"}': 1, "elrwatch_partition_count": 3})
    assert store.write_batch(2, gauges={"elrwatch_partition_count": 4})
    assert store.read_document()["gauges"] == {"elrwatch_partition_count": 4}
    assert store.write_batch(3, gauges=None)
    assert store.read_document()["gauges"] == {"elrwatch_partition_count": 4}


def test_concurrent_writers_of_one_batch_apply_it_once(store: StatusStore) -> None:
    """A re-run batch racing the original (e.g. a restarted driver): exactly one commits it."""
    doc = small_doc()
    store.load_document(doc, batch_id=1)
    p = doc["partitions"][0]
    transition = {"topic": p["topic"], "topicId": p["topicId"], "partitionId": p["partitionId"], "from": "HEALTHY",
                  "to": p["status"], "atMs": 1, "offset": 2}  # fmt: skip
    barrier = threading.Barrier(4)
    results: list[bool] = []

    def write() -> None:
        barrier.wait()
        results.append(store.write_batch(2, partitions=[p], transitions=[transition]))

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(results) == [False, False, False, True]
    assert len(store.history(p["topic"], p["partitionId"])) == 1
    assert store.read_document() == doc


def test_the_store_records_its_layout_and_refuses_another(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    store = StatusStore(url)
    store.create_schema()
    store.create_schema()  # idempotent
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT value FROM meta WHERE key = 'schema_version'").scalar() == str(STORE_SCHEMA)
        conn.exec_driver_sql("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
        conn.commit()
    with pytest.raises(StoreSchemaError, match="has table layout 3, this elrwatch uses 2"):
        store.create_schema()
    store.dispose()


def test_the_api_filters_read_the_partial_indexes(tmp_path: Path) -> None:
    """Only the partitions under min ISR / leaderless / needing an operator are in these indexes (a storm's
    updates of the other partitions skip them); the API's filters must still be answered from them."""
    from sqlalchemy import select
    from sqlalchemy.dialects import sqlite

    from elrwatch.store import schema as S

    store = StatusStore(f"sqlite:///{tmp_path}/s.db")
    store.load_document(small_doc())
    p = S.partitions_t
    queries = {
        "ix_partitions_under_min_isr": select(p.c.topic).where(S.UNDER_MIN_ISR_TRUE).order_by(p.c.topic),
        "ix_partitions_leaderless": select(p.c.topic).where(S.LEADERLESS_TRUE).order_by(p.c.topic),
        "ix_partitions_action": select(p.c.topic).where(S.NEEDS_ACTION_TRUE).order_by(p.c.severity, p.c.topic),
    }
    with store.engine.connect() as conn:
        for index, query in queries.items():
            sql = str(query.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}))
            plan = " ".join(row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
            assert f"USING INDEX {index}" in plan or f"USING COVERING INDEX {index}" in plan, plan
    under, _ = store.list_partitions(under_min_isr=True, limit=1000)
    everything = store.read_document()["partitions"]
    assert under == [d for d in everything if d["underMinIsr"]] and under
    not_under, _ = store.list_partitions(under_min_isr=False, limit=1000)
    assert not_under == [d for d in everything if not d["underMinIsr"]]
    store.dispose()


def test_replica_rows_follow_a_reassignment_and_nothing_else(store: StatusStore) -> None:
    """The broker filter's rows follow `replicas` + `addingReplicas` when they change (SQLite: triggers on
    `replica_brokers`; PostgreSQL: rewritten with the row), and are left alone by updates that keep them."""
    doc = small_doc()
    store.load_document(doc, batch_id=1)
    p = copy.deepcopy(next(x for x in doc["partitions"] if _key(x) == ("orders", 0)))

    def on_broker(broker: int) -> set[tuple[str, int]]:
        items, _ = store.list_partitions(broker=broker, limit=1000)
        return {_key(x) for x in items}

    before = {b: on_broker(b) for b in range(5)}
    assert ("orders", 0) in before[0] and ("orders", 0) not in before[4]
    p.update(isr=p["replicas"][:1], partitionEpoch=p["partitionEpoch"] + 1)  # the same replicas: no change
    assert store.write_batch(2, partitions=[p])
    assert {b: on_broker(b) for b in range(5)} == before
    old = set(p["replicas"])
    p.update(replicas=[*p["replicas"][1:], 4], addingReplicas=[4], partitionEpoch=p["partitionEpoch"] + 1)
    assert store.write_batch(3, partitions=[p])
    after = {b: on_broker(b) for b in range(5)}
    for broker in range(5):
        expected = set(before[broker])
        if broker in old and broker not in p["replicas"]:
            expected.discard(("orders", 0))
        if broker in p["replicas"]:
            expected.add(("orders", 0))
        assert after[broker] == expected, broker
    assert store.write_batch(4, removed=[(p["topicId"], p["partitionId"])])
    assert all(("orders", 0) not in on_broker(b) for b in range(5))


def test_a_point_read_rebuilds_the_advice_with_the_topic_settings_of_the_latest_batch(store: StatusStore) -> None:
    """Documents are rebuilt on read with the brokers and topic settings of the same batch: a batch that turns on
    unclean.leader.election.enable for a topic changes the strategy of its partitions' next reads."""
    doc = small_doc()
    store.load_document(doc, batch_id=1)
    topic = next(t for t in doc["topics"] if t["topic"] == "payments")
    assert not topic.get("uncleanLeaderElectionEnable")
    before = store.get_partition("payments", 0)
    assert before is not None and before["recommendation"]["strategy"] == "Balanced"
    store.list_partitions(limit=5)  # a multi-row read loads every topic's settings into the cached view
    changed = {**topic, "configs": {**topic.get("configs", {}), "unclean.leader.election.enable": "true"}}
    changed["uncleanLeaderElectionEnable"] = True
    assert store.write_batch(2, topics=[changed])
    after = store.get_partition("payments", 0)
    assert after is not None and after["recommendation"]["strategy"] == "Aggressive"
    assert json.loads(store.get_partition_json("payments", 0))["recommendation"]["strategy"] == "Aggressive"
    items, _ = store.list_partitions(topic="payments", limit=10)
    assert {p["recommendation"]["strategy"] for p in items} == {"Aggressive"}
    other = store.get_partition("orders", 0)
    assert other is not None and other["recommendation"]["strategy"] == "Balanced"
