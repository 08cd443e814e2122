"""The store written behind the micro-batches (streaming/store_writer.py): a batch's gauges never wait for an
earlier batch's store write, every batch reaches the store once and in order, and a job that dies with batches
unwritten writes them at its next start from the write-ahead list."""

from __future__ import annotations

import os
import sqlite3
import threading

import pytest
from streaming_batches import routed_frame

from elrwatch.state.cluster import ClusterState
from elrwatch.state.eventgen import scenario
from elrwatch.state.gauges import PipelineCounts
from elrwatch.state.partitions.columnar import output as columnar_output
from elrwatch.state.replay import replay_lines
from elrwatch.store import StatusStore
from elrwatch.streaming import bucket as bucket_module
from elrwatch.streaming import bucket_input, sink
from elrwatch.streaming import payload as payload_module
from elrwatch.streaming import snapshots as snapshot_module
from elrwatch.streaming.metrics import Health
from elrwatch.streaming.store_writer import WAL_SUFFIX, StoreWriteError, StoreWriter, read_wal, wal_name


class _Batch:
    def __init__(self, bodies: list[bytes]) -> None:
        self.bodies = bodies

    def collect(self) -> list[dict[str, bytes]]:
        return [{"payload": body} for body in self.bodies]


def _micro_batches(lines: list[str], n: int) -> list[list[bytes]]:
    """The payload bodies of ``n`` consecutive micro-batches of ``lines`` through one bucket."""
    routed = routed_frame(lines)
    state = snapshot_module.BucketState.new(0, 1, 1)
    size = -(-len(routed) // n)
    out = []
    for i in range(0, len(routed), size):
        payload = bucket_module.process_bucket(0, 1, bucket_module.ordered_rows(routed.iloc[i : i + size]), state)
        out.append(payload_module.encode_payload(payload))
    return out


@pytest.fixture
def lines() -> list[str]:
    return [x.decode() for x in scenario(3, 10, 4, steps=30, churn=80)]


def _partitions(doc: dict) -> list[dict]:
    """A document's partitions without their transport-specific ``lastPosition``."""
    return [{k: v for k, v in p.items() if k != "lastPosition"} for p in doc["partitions"]]


def _assert_partitions_as_replayed(store: StatusStore, lines: list[str]) -> None:
    """The store's partitions equal the replay's of ``lines`` with the object store (the specification)."""
    assert _partitions(store.read_document()) == _partitions(replay_lines(lines, "ev", store="objects").document())


class SlowStore(StatusStore):
    """A store whose writes wait until released (a big batch's write in progress)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.release = threading.Event()
        self.writing = threading.Event()
        self.written: list[int] = []

    def write_batch(self, batch_id, **kwargs):
        self.writing.set()
        assert self.release.wait(60)
        self.written.append(batch_id)
        return super().write_batch(batch_id, **kwargs)


def _new_store(url: str, store_class: type[StatusStore] = StatusStore) -> StatusStore:
    """A store at ``url`` with its tables."""
    store = store_class(url)
    store.create_schema()
    return store


def _sink_to(store: StatusStore, wal: str, rows_dir: str | None = None) -> tuple[StoreWriter, sink.Sink]:
    """A store writer (its write-ahead list in ``wal``) and the sink of a one-bucket job that hands it the batches."""
    aggregator = sink.Aggregator(1)
    writer = StoreWriter(store, wal, rows_dir=rows_dir)
    return writer, sink.Sink(writer, aggregator, Health(aggregator))


def _die_with_batches_pending(
    url: str, wal: str, batches: list[list[bytes]], rows_dir: str | None = None
) -> tuple[SlowStore, StoreWriter]:
    """A job whose store writes do not finish takes ``batches`` and stops (or dies) with all of them unwritten: each
    has its entry in the write-ahead list. Its store (released by the caller) and its writer, still waiting."""
    store = _new_store(url, SlowStore)
    writer, the_sink = _sink_to(store, wal, rows_dir)
    for batch_id, bodies in enumerate(batches):
        the_sink(_Batch(bodies), batch_id)
    assert not writer.close(0.2)
    return store, writer


def test_a_batch_is_served_while_an_earlier_one_is_still_being_written(tmp_path, lines):
    bodies = _micro_batches(lines, 3)
    store = _new_store(f"sqlite:///{tmp_path}/s.db", SlowStore)
    aggregator = sink.Aggregator(1)
    health = Health(aggregator)
    writer = StoreWriter(store, str(tmp_path / "wal"))
    health.store_behind = writer.behind
    the_sink = sink.Sink(writer, aggregator, health)
    try:
        the_sink(_Batch(bodies[0]), 0)
        assert store.writing.wait(30)  # batch 0's write is in progress and cannot finish
        the_sink(_Batch(bodies[1]), 1)
        the_sink(_Batch(bodies[2]), 2)
        # every batch's gauges are served, none is in the store yet, and all three are durable
        assert health.gauges == aggregator.gauges() and health.batches == 0
        assert writer.behind() == 3
        assert sorted(os.listdir(tmp_path / "wal")) == [wal_name(b) for b in range(3)]
        store.release.set()
        assert writer.close(60)
        assert store.written == [0, 1, 2] and health.batches == 3 and writer.behind() == 0
        assert os.listdir(tmp_path / "wal") == []
        _assert_partitions_as_replayed(store, lines)
        assert store.get_meta()["lastBatchId"] == 2
        assert store.get_meta()["storeBehind"] == {"batches": 0, "newestBatchId": 2}
    finally:
        store.release.set()
        store.dispose()


def test_the_writer_gives_a_big_batch_s_memory_back_after_writing_it(tmp_path, lines, monkeypatch):
    """After writing a batch of at least TRIM_AFTER_ROWS changed partitions (the 1M load), the writer thread gives
    the freed heap back to the OS; after a small batch it does not."""
    from elrwatch.streaming import memory

    released: list[str] = []
    monkeypatch.setattr(memory, "release_memory", lambda: released.append(threading.current_thread().name))
    bodies = _micro_batches(lines, 2)
    store = _new_store(f"sqlite:///{tmp_path}/s.db")
    writer, the_sink = _sink_to(store, str(tmp_path / "wal"))
    main = threading.current_thread().name
    try:
        monkeypatch.setattr(memory, "TRIM_AFTER_ROWS", 10**9)  # a small batch
        the_sink(_Batch(bodies[0]), 0)
        assert writer.drain(60)
        assert released == []
        monkeypatch.setattr(memory, "TRIM_AFTER_ROWS", 1)  # a big one
        the_sink(_Batch(bodies[1]), 1)
        assert writer.drain(60)
        assert main in released and any(name != main for name in released), released  # the sink's, the writer's
    finally:
        writer.close(60)
        store.dispose()


def test_batches_left_unwritten_are_written_at_the_next_start(tmp_path, lines):
    url, wal = f"sqlite:///{tmp_path}/s.db", str(tmp_path / "wal")
    store, writer = _die_with_batches_pending(url, wal, _micro_batches(lines, 3))
    assert sorted(os.listdir(wal)) == [wal_name(b) for b in range(3)]
    # the next run: the same batches from the write-ahead list, before any new one, each once
    again = StatusStore(url)
    try:
        recovering = StoreWriter(again, wal)
        assert recovering.recover() == [0, 1, 2]
        assert recovering.close(60)
        assert os.listdir(wal) == []
        _assert_partitions_as_replayed(again, lines)
        assert again.get_meta()["lastBatchId"] == 2
        store.release.set()  # the first run's writer, still waiting, now finds its batch committed: a no-op
        assert writer.drain(30)
        _assert_partitions_as_replayed(again, lines)
    finally:
        store.release.set()
        again.dispose()
        store.dispose()


def test_a_corrupt_write_ahead_file_is_a_one_line_error_naming_it(tmp_path, lines):
    wal = tmp_path / "wal"
    wal.mkdir()
    bad = wal / f"{7:020d}{WAL_SUFFIX}"
    bad.write_bytes(b"\x00not a batch")
    store = _new_store(f"sqlite:///{tmp_path}/s.db")
    try:
        with pytest.raises(StoreWriteError, match=str(bad)) as caught:
            StoreWriter(store, str(wal)).recover()
        assert "\n" not in str(caught.value)
        with pytest.raises(StoreWriteError):
            read_wal(str(bad))
    finally:
        store.dispose()


def test_a_store_that_keeps_failing_stops_the_job_at_its_next_batch(tmp_path, lines, monkeypatch):
    from elrwatch.streaming import store_writer

    monkeypatch.setattr(store_writer, "RETRY_BACKOFF_S", 0.01)
    bodies = _micro_batches(lines, 2)

    class BrokenStore(StatusStore):
        calls = 0

        def write_batch(self, batch_id, **kwargs):
            BrokenStore.calls += 1
            raise RuntimeError("database is locked")

    store = _new_store(f"sqlite:///{tmp_path}/s.db", BrokenStore)
    writer, the_sink = _sink_to(store, str(tmp_path / "wal"))
    try:
        the_sink(_Batch(bodies[0]), 0)
        assert not writer.drain(30)  # returns once the writer gave up
        assert BrokenStore.calls == store_writer.RETRIES + 1
        with pytest.raises(StoreWriteError, match="database is locked"):
            the_sink(_Batch(bodies[1]), 1)
        assert os.listdir(tmp_path / "wal") == [wal_name(0)]  # kept for the next start
    finally:
        store.dispose()


def test_the_job_stops_in_one_line_on_a_corrupt_write_ahead_file_before_spark_starts(tmp_path):
    from elrwatch.streaming import query
    from elrwatch.streaming.config import JobConfig, StoreSettings
    from elrwatch.streaming.store_writer import WAL_DIR

    events = tmp_path / "events"
    events.mkdir()
    wal = tmp_path / "ck" / WAL_DIR
    wal.mkdir(parents=True)
    bad = wal / wal_name(3)
    bad.write_bytes(b"torn")
    config = JobConfig(
        source="files",
        path=str(events),
        store=StoreSettings(f"sqlite:///{tmp_path}/s.db"),
        checkpoint=str(tmp_path / "ck"),
    )
    with pytest.raises(query.JobError, match=str(bad)) as caught:
        query.run(config)
    assert "\n" not in str(caught.value)
    assert bad.exists()  # nothing rebuilt from less: the file stays for the operator


# --- rows files: the store lists beside Spark's state, named by the state token ---------------------------------


def _file_batches(lines: list[str], n: int, rows_dir: str) -> list[list[bytes]]:
    """The output bodies of ``n`` micro-batches of ``lines`` through `run_bucket` with a rows directory (heads only:
    the lists are in the rows files)."""
    settings = bucket_module.StateSettings(1, state_dir=f"{rows_dir}-state", rows_dir=rows_dir)
    routed = routed_frame(lines)
    size = -(-len(routed) // n)
    row = None
    out = []
    cache: dict = {}
    for i in range(0, len(routed), size):
        frame = routed.iloc[i : i + size]
        token, blob, bodies = bucket_module.run_bucket(
            0, settings, row, bucket_module.ordered_rows(frame), len(frame), cache
        )
        row = (token, blob)
        out.append(bodies)
    return out


def _named_files(bodies: list[bytes]) -> list[str]:
    heads, _ = payload_module.decode_payloads(bodies)
    return [h[payload_module.ROWS_FILE] for h in heads if h.get(payload_module.ROWS_FILE)]


def _transition_count(db: str) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("select count(*) from status_transitions").fetchone()[0]


def _emitted_transitions(lines: list[str], n: int) -> int:
    """Transitions of the same batches, the reference: what the object store records for them, and what the bucket
    emits with the lists inline (equal)."""
    state = snapshot_module.BucketState.new(0, 1, 1)
    reference = snapshot_module.BucketState(ClusterState(bucket=(0, 1), store="objects"), PipelineCounts(), {})
    routed = routed_frame(lines)
    size = -(-len(routed) // n)
    total = expected = 0
    for i in range(0, len(routed), size):
        rows = list(bucket_module.ordered_rows(routed.iloc[i : i + size]))
        payload = bucket_module.process_bucket(0, 1, iter(rows), state)
        total += len(columnar_output.transitions_of(payload["transitions"]))
        bucket_input.apply_rows(0, 1, iter(rows), reference)
        expected += len(reference.cluster.drain_changes().transitions)
    assert total == expected > 0
    return total


def test_a_bucket_returns_only_its_head_and_its_rows_file_is_durable_before(tmp_path, lines):
    rows_dir = tmp_path / "rows"
    (bodies,) = _file_batches(lines, 1, str(rows_dir))
    assert len(bodies) == 1 and bodies[0][:1] == payload_module.PAYLOAD_HEAD  # no partition-row chunks
    (head,), _ = payload_module.decode_payloads(bodies)
    assert not any(k in head for k in ("partitions", *payload_module.STORE_LISTS))
    assert head["partitionCount"] > 0 and head["transitionCount"] > 0
    assert os.listdir(rows_dir) == [head[payload_module.ROWS_FILE]]
    lists, chunks = payload_module.read_rows_file(str(rows_dir / head[payload_module.ROWS_FILE]))
    assert len(lists["transitions"]) == head["transitionCount"]
    assert sum(1 for _ in payload_module.iter_partition_rows(chunks)) == head["partitionCount"]


def test_rows_files_are_deleted_once_the_store_has_the_batch_and_spark_committed_it(tmp_path, lines):
    rows_dir = str(tmp_path / "rows")
    batches = _file_batches(lines, 3, rows_dir)
    store = _new_store(f"sqlite:///{tmp_path}/s.db")
    writer, the_sink = _sink_to(store, str(tmp_path / "wal"), rows_dir)
    try:
        the_sink(_Batch(batches[0]), 0)
        assert writer.drain(30)
        # in the store, but Spark has not committed batch 0 yet (it does before it starts batch 1)
        assert sorted(os.listdir(rows_dir)) == sorted(f for b in batches for f in _named_files(b))
        the_sink(_Batch(batches[1]), 1)
        the_sink(_Batch(batches[2]), 2)
        assert writer.close(60)
        assert os.listdir(rows_dir) == _named_files(batches[2])
        _assert_partitions_as_replayed(store, lines)
        assert _transition_count(f"{tmp_path}/s.db") == _emitted_transitions(lines, 3)  # every one, once
    finally:
        store.dispose()


def test_rows_files_named_by_pending_entries_survive_a_restart_and_are_written_once(tmp_path, lines):
    rows_dir = str(tmp_path / "rows")
    batches = _file_batches(lines, 3, rows_dir)
    url, wal = f"sqlite:///{tmp_path}/s.db", str(tmp_path / "wal")
    # the job dies with its batches unwritten: their entries name their files
    store, writer = _die_with_batches_pending(url, wal, batches, rows_dir)
    named = sorted(f for b in batches for f in _named_files(b))
    # an attempt of batch 3 whose entry was never written (the driver died in it): Spark never committed it
    settings = bucket_module.StateSettings(1, state_dir=f"{rows_dir}-state", rows_dir=rows_dir)
    _, _, orphan = bucket_module.run_bucket(0, settings, None, bucket_module.ordered_rows(routed_frame(lines)), 1, {})
    torn = os.path.join(rows_dir, ".b0000-x.rows.1.tmp")
    open(torn, "wb").close()
    assert sorted(os.listdir(rows_dir)) == sorted([*named, *_named_files(orphan), os.path.basename(torn)])
    written: list[int] = []

    class CountingStore(StatusStore):
        def write_batch(self, batch_id, **kwargs):
            written.append(batch_id)
            return super().write_batch(batch_id, **kwargs)

    again = CountingStore(url)
    try:
        recovering = StoreWriter(again, wal, rows_dir=rows_dir)
        assert recovering.recover() == [0, 1, 2]
        assert recovering.drain(60)
        assert written == [0, 1, 2]
        # the garbage went at start; the named files stay until Spark commits their batches
        assert sorted(os.listdir(rows_dir)) == named
        recovering.spark_committed(2)
        assert os.listdir(rows_dir) == []
        assert recovering.close(60)
        _assert_partitions_as_replayed(again, lines)
        assert _transition_count(f"{tmp_path}/s.db") == _emitted_transitions(lines, 3)
        store.release.set()  # the first run's writer, still waiting on batch 0, finds it committed: a no-op
        assert writer.drain(30)
        assert _transition_count(f"{tmp_path}/s.db") == _emitted_transitions(lines, 3)
    finally:
        store.release.set()
        again.dispose()
        store.dispose()


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_missing_or_corrupt_rows_file_of_a_pending_entry_is_a_one_line_error_naming_it(tmp_path, lines, damage):
    rows_dir = str(tmp_path / "rows")
    batches = _file_batches(lines, 2, rows_dir)
    url, wal = f"sqlite:///{tmp_path}/s.db", str(tmp_path / "wal")
    store, _ = _die_with_batches_pending(url, wal, batches, rows_dir)  # the job dies with both batches pending
    bad = os.path.join(rows_dir, _named_files(batches[1])[0])
    if damage == "missing":
        os.remove(bad)
    else:
        with open(bad, "r+b") as fh:
            data = bytearray(fh.read())
            data[len(data) // 2] ^= 0xFF
            fh.seek(0)
            fh.write(bytes(data))
    again = StatusStore(url)
    try:
        with pytest.raises(StoreWriteError, match=bad) as caught:
            StoreWriter(again, wal, rows_dir=rows_dir).recover()
        assert "\n" not in str(caught.value) and damage in str(caught.value)
        assert sorted(os.listdir(wal)) == [wal_name(0), wal_name(1)]  # nothing rebuilt from less, nothing dropped
        assert again.last_batch_id() is None
        kept = [f for b in batches for f in _named_files(b) if damage == "corrupt" or f != os.path.basename(bad)]
        assert sorted(os.listdir(rows_dir)) == sorted(kept)  # no file of a pending entry removed
    finally:
        store.release.set()
        again.dispose()
        store.dispose()


def test_a_rows_file_lost_behind_the_batches_stops_the_job_in_one_line(tmp_path, lines):
    rows_dir = str(tmp_path / "rows")
    batches = _file_batches(lines, 2, rows_dir)
    store = _new_store(f"sqlite:///{tmp_path}/s.db", SlowStore)
    writer, the_sink = _sink_to(store, str(tmp_path / "wal"), rows_dir)
    try:
        the_sink(_Batch(batches[0]), 0)
        assert store.writing.wait(30)
        the_sink(_Batch(batches[1]), 1)
        lost = os.path.join(rows_dir, _named_files(batches[1])[0])
        os.remove(lost)
        store.release.set()
        assert not writer.drain(30)
        with pytest.raises(StoreWriteError, match=lost) as caught:
            writer.raise_error()
        assert "\n" not in str(caught.value)
        assert store.last_batch_id() == 0
    finally:
        store.release.set()
        store.dispose()


def test_each_checkpoint_has_its_own_rows_directory_in_the_state_directory(tmp_path):
    from elrwatch.streaming.config import JobConfig

    shared = str(tmp_path / "state")
    one = JobConfig(checkpoint=str(tmp_path / "a"), state_dir=shared)
    other = JobConfig(checkpoint=str(tmp_path / "b"), state_dir=shared)
    assert os.path.dirname(one.rows_dir()) == shared and one.rows_dir() != other.rows_dir()
    assert one.state_settings().rows_dir == one.rows_dir()
    assert JobConfig(checkpoint="hdfs://nn/ck", state_mode="blob").rows_dir() is None  # rows in Spark's output


def test_a_batch_spark_re_runs_while_its_first_attempt_is_pending_keeps_the_first_attempts_entry(tmp_path, lines):
    from elrwatch.streaming.store_writer import FILES

    rows_dir = str(tmp_path / "rows")
    batches = _file_batches(lines, 2, rows_dir)
    url, wal = f"sqlite:///{tmp_path}/s.db", str(tmp_path / "wal")
    # the driver dies before Spark committed batch 1
    store, _ = _die_with_batches_pending(url, wal, batches, rows_dir)
    again = SlowStore(url)
    try:
        recovering = StoreWriter(again, wal, rows_dir=rows_dir)
        assert recovering.recover() == [0, 1]
        rerun = _file_batches(lines, 2, rows_dir)  # Spark re-runs batch 1 under new tokens
        restarted = sink.Sink(recovering, sink.Aggregator(1), None)
        restarted(_Batch(rerun[1]), 1)
        # the durable entry still names the first attempt's files (the ones the writer reads)
        assert read_wal(os.path.join(wal, wal_name(1)))[1][FILES] == _named_files(batches[1])
        again.release.set()
        assert recovering.drain(60)
        assert again.written == [0, 1]
        recovering.spark_committed(1)
        leftover = set(_named_files(rerun[0]))  # the re-run's batch 0 attempt (never submitted): garbage at start
        assert set(os.listdir(rows_dir)) == leftover
        _assert_partitions_as_replayed(again, lines)
        assert _transition_count(f"{tmp_path}/s.db") == _emitted_transitions(lines, 2)
    finally:
        store.release.set()
        again.release.set()
        again.dispose()
        store.dispose()


def test_a_new_checkpoint_starts_without_an_earlier_ones_rows_files(tmp_path):
    from elrwatch.streaming import query
    from elrwatch.streaming.config import JobConfig

    config = JobConfig(checkpoint=str(tmp_path / "ck"))
    rows_dir = config.rows_dir()
    os.makedirs(rows_dir)
    open(os.path.join(rows_dir, "b0000-old.rows"), "wb").close()
    open(os.path.join(config.snapshot_dir(), "run-b0000-1-t.snap"), "wb").close()
    store = _new_store(f"sqlite:///{tmp_path}/s.db")
    try:
        query.start_fresh(config, store, str(tmp_path / "ck" / "driver.json"), config.snapshot_dir())
        assert os.listdir(config.snapshot_dir()) == []
    finally:
        store.dispose()
