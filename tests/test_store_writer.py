"""The store written behind the micro-batches (streaming/store_writer.py): a batch's gauges never wait for an
earlier batch's store write, every batch reaches the store once and in order, and a job that dies with batches
unwritten writes them at its next start from the write-ahead list."""

from __future__ import annotations

import os
import threading

import pyarrow as pa
import pytest

from elrwatch.state.cluster import ClusterState
from elrwatch.state.eventgen import scenario
from elrwatch.state.gauges import PipelineCounts
from elrwatch.state.replay import replay_lines
from elrwatch.store import StatusStore
from elrwatch.streaming import bucket as bucket_module
from elrwatch.streaming import payload as payload_module
from elrwatch.streaming import route, sink
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
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(lines),
            pa.array(["ev"] * len(lines)),
            pa.array([0] * len(lines), pa.int32()),
            pa.array(range(len(lines)), pa.int64()),
            pa.array([None] * len(lines), pa.timestamp("us", tz="UTC")),
        ],
        names=["value", "topic", "partition", "offset", "timestamp"],
    )
    routed = pa.Table.from_batches(list(route.route_batches(iter([batch]), 1))).to_pandas()
    state = snapshot_module.BucketState(ClusterState(bucket=(0, 1)), PipelineCounts(), {})
    size = -(-len(routed) // n)
    out = []
    for i in range(0, len(routed), size):
        payload = bucket_module.process_bucket(0, 1, bucket_module._ordered_rows(routed.iloc[i : i + size]), state)
        out.append(payload_module.encode_payload(payload))
    return out


@pytest.fixture
def lines() -> list[str]:
    return [x.decode() for x in scenario(3, 10, 4, steps=30, churn=80)]


def _document(store: StatusStore) -> dict:
    doc = store.read_document()
    doc["partitions"] = [{k: v for k, v in p.items() if k != "lastPosition"} for p in doc["partitions"]]
    return doc


def _oracle(lines: list[str]) -> dict:
    doc = replay_lines(lines, "ev").document()
    doc["partitions"] = [{k: v for k, v in p.items() if k != "lastPosition"} for p in doc["partitions"]]
    return doc


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


def test_a_batch_is_served_while_an_earlier_one_is_still_being_written(tmp_path, lines):
    bodies = _micro_batches(lines, 3)
    store = SlowStore(f"sqlite:///{tmp_path}/s.db")
    store.create_schema()
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
        assert _document(store)["partitions"] == _oracle(lines)["partitions"]
        assert store.get_meta()["lastBatchId"] == 2
        assert store.get_meta()["storeBehind"] == {"batches": 0, "newestBatchId": 2}
    finally:
        store.release.set()
        store.dispose()


def test_batches_left_unwritten_are_written_at_the_next_start(tmp_path, lines):
    bodies = _micro_batches(lines, 3)
    url = f"sqlite:///{tmp_path}/s.db"
    wal = str(tmp_path / "wal")
    store = SlowStore(url)
    store.create_schema()
    aggregator = sink.Aggregator(1)
    writer = StoreWriter(store, wal)
    the_sink = sink.Sink(writer, aggregator, Health(aggregator))
    for batch_id, body in enumerate(bodies):
        the_sink(_Batch(body), batch_id)
    assert not writer.close(0.2)  # the job stops (or dies) with its batches unwritten
    assert sorted(os.listdir(wal)) == [wal_name(b) for b in range(3)]
    # the next run: the same batches from the write-ahead list, before any new one, each once
    again = StatusStore(url)
    try:
        recovering = StoreWriter(again, wal)
        assert recovering.recover() == [0, 1, 2]
        assert recovering.close(60)
        assert os.listdir(wal) == []
        assert _document(again)["partitions"] == _oracle(lines)["partitions"]
        assert again.get_meta()["lastBatchId"] == 2
        store.release.set()  # the first run's writer, still waiting, now finds its batch committed: a no-op
        assert writer.drain(30)
        assert _document(again)["partitions"] == _oracle(lines)["partitions"]
    finally:
        store.release.set()
        again.dispose()
        store.dispose()


def test_a_corrupt_write_ahead_file_is_a_one_line_error_naming_it(tmp_path, lines):
    wal = tmp_path / "wal"
    wal.mkdir()
    bad = wal / f"{7:020d}{WAL_SUFFIX}"
    bad.write_bytes(b"\x00not a batch")
    store = StatusStore(f"sqlite:///{tmp_path}/s.db")
    store.create_schema()
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

    store = BrokenStore(f"sqlite:///{tmp_path}/s.db")
    store.create_schema()
    aggregator = sink.Aggregator(1)
    writer = StoreWriter(store, str(tmp_path / "wal"))
    the_sink = sink.Sink(writer, aggregator, Health(aggregator))
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
