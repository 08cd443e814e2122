"""The job's Python stages without Spark: route → buckets → aggregate equals replay (fast regression test)."""

from __future__ import annotations

import json
import marshal
import os
import pickle
import sqlite3
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streaming_batches import routed_frame, two_batches_per_bucket

from elrwatch.state.eventgen import scenario
from elrwatch.state.gauges import PipelineCounts, as_samples
from elrwatch.state.gauges import key as gauge_key
from elrwatch.state.partitions.columnar import snapshot as columnar_snapshot
from elrwatch.state.replay import replay_lines
from elrwatch.store import StatusStore
from elrwatch.streaming import accelerators, query, route, sink
from elrwatch.streaming import bucket as bucket_module
from elrwatch.streaming import payload as payload_module
from elrwatch.streaming import snapshots as snapshot_module
from elrwatch.streaming.config import STATE_MODES, JobConfig, LocalTuning, parse_trigger


@pytest.mark.parametrize("buckets", [1, 3])
def test_buckets_aggregate_to_the_replay_document(buckets, tmp_path):
    lines = [x.decode() for x in scenario(3, 10, 4, steps=20, churn=60)]
    lines.insert(5, "not json")
    lines.insert(50, lines[40])  # a duplicate
    lines.insert(7, "Log starting offset: 0")  # not an event
    # two micro-batches per bucket, the state going through its blob in between
    first, second = two_batches_per_bucket(
        routed_frame(lines, buckets),
        buckets,
        lambda b, state: snapshot_module.BucketState.from_blob(state.to_blob(), b),
    )
    oracle = replay_lines(lines, "ev", store="objects").document()  # the specification
    # the buckets emit partition rows; the store rebuilds the documents (and their advice) from them
    store = StatusStore(f"sqlite:///{tmp_path}/s.db")
    store.create_schema()
    for batch_id, args in enumerate((first, second)):
        store.write_batch(batch_id, **{**args, "partitions": (), "partition_rows": args["partitions"]})
    docs = {(d["topicId"], d["partitionId"]): d for d in store.read_document()["partitions"]}
    store.dispose()
    strip = lambda d: {k: v for k, v in d.items() if k != "lastPosition"}  # noqa: E731
    assert [strip(docs[(p["topicId"], p["partitionId"])]) for p in oracle["partitions"]] == [
        strip(p) for p in oracle["partitions"]
    ]
    assert second["gauges"] == oracle["gauges"]
    # ... the per-broker, per-topic and by-cause ones included (summed over the buckets)
    insight = {k: v for k, v in oracle["gauges"].items() if k.startswith(("elrwatch_broker_", "elrwatch_topic_"))}
    assert any(v for k, v in insight.items() if "restart_blocking" in k) and any(
        v for k, v in insight.items() if "isr_missing" in k
    )
    assert (
        sum(v for k, v in oracle["gauges"].items() if "by_cause" in k)
        == oracle["gauges"]["elrwatch_global_under_min_isr_partitions"]
    )
    assert second["meta"]["counts"] == oracle["counts"]
    assert second["meta"]["cluster"] == oracle["cluster"]
    topics = {t["topicId"]: t for t in first["topics"] + second["topics"]}
    assert sorted(topics.values(), key=lambda t: t["topic"]) == oracle["topics"]
    assert len(first["quarantined"]) + len(second["quarantined"]) == oracle["quarantined"]["count"] == 1


def test_sink_serves_the_gauges_before_writing_the_store(tmp_path):
    """Alerts read /metrics: a batch's gauges are served once its buckets are merged, not after the store write
    (seconds for a storm's documents); the batch's health metrics follow the write."""
    from elrwatch.streaming.metrics import Health

    lines = [x.decode() for x in scenario(2, 8, 4, steps=10, churn=20)]
    routed = routed_frame(lines)
    state = snapshot_module.BucketState.new(0, 1, 1)
    payload = bucket_module.process_bucket(0, 1, bucket_module.ordered_rows(routed), state)
    bodies = payload_module.encode_payload(payload)
    aggregator = sink.Aggregator(1)
    health = Health(aggregator)
    assert gauge_key("elrwatch_partition_count") not in health.gauges
    seen_by_the_store_write: list[tuple[dict[str, float], int]] = []

    class WatchedStore(StatusStore):
        def write_batch(self, batch_id, **kwargs):
            seen_by_the_store_write.append((as_samples(health.gauges), health.batches))
            return super().write_batch(batch_id, **kwargs)

    class Batch:
        def collect(self):
            return [{"payload": body} for body in bodies]

    from elrwatch.streaming.store_writer import StoreWriter

    store = WatchedStore(f"sqlite:///{tmp_path}/s.db")
    store.create_schema()
    writer = StoreWriter(store, str(tmp_path / "wal"))
    try:
        sink.Sink(writer, aggregator, health)(Batch(), 0)
        assert writer.close(60)
    finally:
        store.dispose()
    oracle = replay_lines(lines, "ev", store="objects").document()["gauges"]
    [(gauges_during_write, batches_during_write)] = seen_by_the_store_write
    assert gauges_during_write == oracle and oracle["elrwatch_partition_count"] > 0
    assert batches_during_write == 0 and health.batches == 1 and health.last_batch_id == 0
    assert as_samples(health.gauges) == gauges_during_write


def test_pipeline_counts_cross_the_payload_whole_and_the_driver_sums_the_buckets():
    a = PipelineCounts(Counter({"X": 3, "Y": 1}), Counter({"conflict": 2}), 4, Counter({"Y": 1}), 5, 6, 1_000)
    b = PipelineCounts(Counter({"X": 1}), applied=1)
    wire = [json.loads(json.dumps(c.to_payload())) for c in (a, b)]  # the payload and the side file are JSON
    assert [PipelineCounts.from_payload(w) for w in wire] == [a, b]
    aggregator = sink.Aggregator(2)
    aggregator.bucket_counts = dict(enumerate(wire))
    assert aggregator.counts() == PipelineCounts(
        Counter({"X": 4, "Y": 1}), Counter({"conflict": 2}), 4, Counter({"Y": 1}), 5, 7, 1_000
    )


def test_trigger_parsing():
    assert parse_trigger("1s") == "1000 milliseconds"
    assert parse_trigger("250ms") == "250 milliseconds"
    assert parse_trigger("10 seconds") == "10 seconds"


def _stream_files_job(directory, store_url: str, checkpoint) -> subprocess.CompletedProcess:
    """`elrwatch stream --source files` over ``directory`` (for the errors it stops with before Spark starts)."""
    command = ["stream", "--source", "files", "--path", str(directory), "--store", store_url]
    return subprocess.run(
        [sys.executable, "-m", "elrwatch.cli", *command, "--checkpoint", str(checkpoint)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_fresh_checkpoint_with_a_used_store_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    store = StatusStore(url)
    store.create_schema()
    store.write_batch(0, gauges={"elrwatch_partition_count": 0})
    store.dispose()
    done = _stream_files_job(tmp_path, url, tmp_path / "new-ck")
    assert done.returncode == 1
    assert "already holds batches of another run" in done.stderr.splitlines()[-1]


def test_a_store_of_the_old_layout_is_refused_in_one_line(tmp_path):
    """A store written before partitions were kept in their compact form (a ``doc`` column of whole documents)
    is refused with what to do, not read as if it were the new layout."""
    database = tmp_path / "old.db"
    with sqlite3.connect(database) as conn:
        conn.execute("CREATE TABLE partitions (topic_id TEXT, partition_id INTEGER, topic TEXT, doc TEXT)")
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("INSERT INTO meta VALUES ('last_batch_id', '7')")
    done = _stream_files_job(tmp_path, f"sqlite:///{database}", tmp_path / "ck")
    assert done.returncode == 1, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith("elrwatch: error: the status store sqlite:///") and "has table layout 1" in last
    assert "new database" in last and "new --checkpoint" in last


# --------------------------------------------------------------------------- snapshot mode (snapshot file + delta)


class _State:
    """The part of pyspark's GroupState that the job's state function uses."""

    def __init__(self) -> None:
        self.row = None

    @property
    def exists(self) -> bool:
        return self.row is not None

    @property
    def get(self):
        return self.row

    def update(self, row) -> None:
        self.row = row


def _state_function(state_dir: Path, delta_max_records: int, buckets: int = 1, mode: str = "snapshot"):
    """The job's state function (`bucket.make_state_function`) with its cache, min ISR 1, the bucket states in
    ``state_dir`` (snapshot mode)."""
    settings = bucket_module.StateSettings(buckets, 1, True, mode, str(state_dir), delta_max_records=delta_max_records)
    return bucket_module.make_state_function(settings)


def _small_cluster_rows():
    """A small cluster's events (2 topics of 6 partitions, 3 brokers) routed to one bucket."""
    return routed_frame([x.decode() for x in scenario(2, 6, 3, steps=8, churn=40, seed=7)])


def _unbounded_delta(state_dir: Path) -> bucket_module.StateSettings:
    """Snapshot mode with min ISR 2, the cache on and no bound on the delta: a snapshot only when one is due for
    another reason."""
    return bucket_module.StateSettings(1, 2, True, "snapshot", str(state_dir), delta_max_records=10**9)


def _payload(frame) -> dict:
    """The bucket's output rows as one payload: the head + the documents of its partition-row chunks."""
    (head,), chunks = payload_module.decode_payloads(list(frame["payload"]))
    rows = list(payload_module.iter_partition_rows(chunks))
    assert len(rows) == head.pop("partitionCount")
    head["partitions"] = [{"topicId": r[0], "partitionId": r[1], "row": r} for r in rows]
    return head


def _run(fn, bucket: int, pdf, state: _State) -> dict:
    return _payload(next(fn((bucket,), iter([pdf]), state)))


def _plain(cluster) -> dict:
    """What a bucket's state keeps (`test_columnar_snapshot.state_fields`: the image, every partition with its
    derived fields, violations, log infos, election counters, status and flag counts, the topics of its table),
    without what depends on how the records were cut into segments (tuple ids, the broker order of the tuple table
    and the store's work counters: a replay of the delta applies the same records in other segments)."""
    from test_columnar_snapshot import state_fields

    fields = state_fields(cluster)
    for part in ("tuples", "brokers", "counters"):
        del fields[part]
    return fields


def test_bucket_rebuilt_from_snapshot_and_delta_equals_the_one_kept_in_memory(tmp_path):
    lines = [x.decode() for x in scenario(3, 12, 4, steps=30, churn=120, seed=5)]
    lines.insert(9, "not json")
    lines.insert(60, lines[44])  # a duplicate
    routed = routed_frame(lines, 2)
    fn = _state_function(tmp_path, delta_max_records=40, buckets=2)
    snapshots = snapshot_module.SnapshotDir(str(tmp_path))
    for b in range(2):
        part = routed[routed.bucket == b]
        state = _State()
        step = max(1, len(part) // 9)
        for i in range(0, len(part), step):
            _run(fn, b, part.iloc[i : i + step], state)
            token, row = state.row
            kept = bucket_module._CACHE[b][1]
            assert bucket_module._CACHE[b][0] == token
            rebuilt = snapshot_module.BucketState.from_row(row, snapshots, b, 2)
            assert _plain(rebuilt.cluster) == _plain(kept.cluster)
            assert rebuilt.counts == kept.counts and rebuilt.emitted_topic_counts == kept.emitted_topic_counts
            assert rebuilt.snapshot == kept.snapshot and rebuilt.delta_rows == kept.delta_rows <= 40 + step
        assert kept.snapshot is not None, "delta_max_records=40 must have forced snapshots"


def test_snapshot_mode_payloads_equal_blob_mode(tmp_path, monkeypatch):
    """Two Python workers taking turns (each with its cache), a restart in between: same output as blob mode."""
    lines = [x.decode() for x in scenario(3, 10, 4, steps=25, churn=100, seed=8)]
    routed = routed_frame(lines, 3)
    outputs = {}
    loads = []
    for mode in ("blob", "snapshot"):
        fn = _state_function(tmp_path / mode, delta_max_records=60, buckets=3, mode=mode)
        workers = [{}, {}]
        got = []
        for b in range(3):
            part = routed[routed.bucket == b]
            state = _State()
            for n, i in enumerate(range(0, len(part), 12)):
                if n == 7:  # a restart: every worker's cache is gone
                    workers = [{}, {}]
                monkeypatch.setattr(bucket_module, "_CACHE", workers[(n // 2) % 2])  # two batches per worker, in turn
                p = _run(fn, b, part.iloc[i : i + 12], state)
                loads.append((mode, p.pop("timing")["cache"]))
                # partitions touched by one broker record come from a set: their order is not part of the contract
                for key in ("partitions", "transitions", "violations"):
                    p[key].sort(key=lambda d: (d.get("offset", 0), d["topicId"], d["partitionId"], str(d)))
                got.append(p)
        outputs[mode] = got
    assert outputs["snapshot"] == outputs["blob"]
    assert {c for m, c in loads if m == "blob"} == {"hit", "miss"}
    assert {c for m, c in loads if m == "snapshot"} == {"hit", "miss", "catch-up"}


def test_snapshots_rotate_and_old_ones_are_deleted(tmp_path):
    lines = [x.decode() for x in scenario(2, 8, 4, steps=40, churn=200, seed=2)]
    routed = routed_frame(lines, 1)
    fn = _state_function(tmp_path, delta_max_records=20)
    state = _State()
    referenced = []
    for i in range(0, len(routed), 15):
        _run(fn, 0, routed.iloc[i : i + 15], state)
        referenced.append(bucket_module._CACHE[0][1].snapshot)
    written = [s for s in dict.fromkeys(referenced) if s]
    assert len(written) > snapshot_module.SNAPSHOTS_KEPT + 2
    files = sorted(os.listdir(tmp_path))
    snaps = [f for f in files if f.endswith(".snap")]
    assert snaps == sorted(written[-snapshot_module.SNAPSHOTS_KEPT :])  # the newest; no tmp files left behind
    assert all(f.endswith((".snap", ".delta")) and "-b0000-" in f for f in files)
    # the delta chunks left are the ones written since the oldest snapshot kept: older ones were deleted
    chunks = [f for f in files if f.endswith(".delta")]
    assert chunks and min(chunks) > snaps[0]
    # Spark re-runs a batch from the committed row after attempts whose rows never committed wrote snapshots:
    # the snapshot the committed row references survives the rotation, even when it is no longer among the newest
    committed = state.row
    base = bucket_module._CACHE[0][1].snapshot
    bucket_module._CACHE.clear()
    retry = _State()
    retry.row = committed
    for _ in range(
        snapshot_module.SNAPSHOTS_KEPT + 1
    ):  # abandoned attempts (a zombie task): none of their rows is committed
        retry.row = committed
        bucket_module._CACHE.clear()
        _run(fn, 0, routed.iloc[:25], retry)  # an old, already applied range: duplicates, still journaled
    assert base in os.listdir(tmp_path)
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".snap")]) == snapshot_module.SNAPSHOTS_KEPT + 1
    # and the committed row still loads: its snapshot and its chain of delta chunks survived the rotations
    bucket_module._CACHE.clear()
    retry.row = committed
    _run(fn, 0, routed.iloc[:1], retry)


def test_the_state_row_format_is_fixed_so_existing_checkpoints_load(tmp_path):
    routed = _small_cluster_rows()
    settings = _unbounded_delta(tmp_path)
    state = _State()
    _run(bucket_module.make_state_function(settings), 0, routed, state)
    kept = bucket_module._CACHE[0][1]
    row = state.row[1]
    # the batch's records went to a delta chunk file; the row names it and holds no records
    assert row[:1] == snapshot_module.ROW_TAG == b"C" and kept.snapshot is None and kept.delta == []
    assert kept.chunks == 1 and os.listdir(tmp_path) == [kept.tail] and kept.tail.endswith(".delta")
    previous, chunk = pickle.loads((tmp_path / kept.tail).read_bytes())
    assert previous is None and len(marshal.loads(zlib.decompress(chunk))) == len(routed)
    fields = {
        "run": kept.run,
        "snapshot": None,
        "minIsr": 2,
        "delta": [],
        "tail": kept.tail,
        "chunks": 1,
        "deltaRows": len(routed),
        "deltaBytes": len(chunk),
        "baseBytes": 0,
        "counts": kept.counts,
        "emitted": kept.emitted_topic_counts,
    }
    assert row == b"C" + pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL)
    snapshots = snapshot_module.SnapshotDir(str(tmp_path))
    with pytest.raises(snapshot_module.SnapshotError, match="--state-dir is needed"):
        snapshot_module.BucketState.from_row(row, None, 0, 1)
    # a row of an earlier version: the delta inline, and how many bytes the rows carried; it loads, and the next
    # save writes a snapshot, after which the bucket writes chunk files
    older = {k: v for k, v in fields.items() if k not in ("tail", "chunks")}
    older.update(delta=[chunk], carried=len(chunk))
    reloaded = snapshot_module.BucketState.from_row(b"C" + pickle.dumps(older), None, 0, 1)
    assert (reloaded.chunks, reloaded.base_bytes, reloaded.delta_rows) == (0, 0, len(routed))
    migrated = snapshot_module.BucketState.from_row(b"C" + pickle.dumps(older), snapshots, 0, 1)
    assert migrated.must_snapshot and _plain(migrated.cluster) == _plain(kept.cluster)
    migrated.to_row(snapshots, 0, "m")
    assert migrated.snapshot is not None and (migrated.delta, migrated.chunks, migrated.tail) == ([], 0, None)
    # a due snapshot: an Arrow snapshot file, the delta emptied, and the row still loads the same state
    row = kept.to_row(snapshots, 0, "t", max_records=0)
    size = os.path.getsize(tmp_path / kept.snapshot)
    assert pickle.loads(row[1:]) == {
        **fields,
        "snapshot": kept.snapshot,
        "tail": None,
        "chunks": 0,
        "deltaRows": 0,
        "deltaBytes": 0,
        "baseBytes": size,
    }
    assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".snap")) == sorted([kept.snapshot, migrated.snapshot])
    assert columnar_snapshot.load(tmp_path / kept.snapshot).partition_count == kept.cluster.partition_count
    loaded = snapshot_module.BucketState.from_row(row, snapshots, 0, 1)
    assert type(loaded) is type(kept) and loaded.counts == kept.counts
    # blob mode's row: the snapshot file's bytes, the counts and the emitted topic counts, pickled and compressed
    blob = kept.to_blob()
    assert blob[:1] == snapshot_module.BLOB_TAG == b"B"
    data, counts, emitted = pickle.loads(zlib.decompress(blob[1:]))
    assert columnar_snapshot.from_bytes(data).partition_count == kept.cluster.partition_count
    assert (counts, emitted) == (kept.counts, kept.emitted_topic_counts)
    from_blob = snapshot_module.BucketState.from_row(blob, None, 0, 1)
    after_load, after_blob, after_batch = (
        bucket_module.process_bucket(0, 1, iter(()), bs) for bs in (loaded, from_blob, kept)
    )
    assert after_load["gauges"] == after_blob["gauges"] == after_batch["gauges"]
    assert after_load["counts"] == after_blob["counts"] == after_batch["counts"]


def test_a_state_row_of_the_older_object_engine_is_refused_in_one_line(tmp_path):
    """Its snapshot-mode rows started with ``S``, its blob-mode rows were bare zlib data: neither is read."""
    snapshots = snapshot_module.SnapshotDir(str(tmp_path))
    older = [b"S" + pickle.dumps({"run": "r", "snapshot": None}), zlib.compress(pickle.dumps(("state", None, {})), 1)]
    for row in older:
        with pytest.raises(snapshot_module.SnapshotError) as err:
            snapshot_module.BucketState.from_row(row, snapshots, 3, 4)
        message = str(err.value)
        assert "\n" not in message and message.startswith("bucket 3: the checkpoint's state was written by an older")
        assert message.endswith("start the job on a new checkpoint")


def test_a_quiet_batch_snapshots_a_long_delta_and_a_busy_one_does_not(tmp_path, monkeypatch):
    routed = _small_cluster_rows()
    settings = _unbounded_delta(tmp_path)
    fn = bucket_module.make_state_function(settings)
    monkeypatch.setattr(snapshot_module, "QUIET_BATCH_RECORDS", 5)
    monkeypatch.setattr(snapshot_module, "QUIET_DELTA", 20)
    state = _State()
    bucket_module._CACHE.clear()
    _run(fn, 0, routed.iloc[:-3], state)  # a busy batch past the quiet bound: the storm does not pay for it
    kept = bucket_module._CACHE[0][1]
    assert kept.snapshot is None and kept.delta_rows == len(routed) - 3
    bucket_module._CACHE.clear()  # as after a restart: the next batch loads the bucket
    _run(fn, 0, routed.iloc[-3:-1], state)  # quiet, but it paid for a load: no snapshot yet
    kept = bucket_module._CACHE[0][1]
    assert kept.snapshot is None and kept.delta_rows == len(routed) - 1
    _run(fn, 0, routed.iloc[-1:], state)  # a quiet batch: it snapshots
    kept = bucket_module._CACHE[0][1]
    assert kept.snapshot is not None and kept.delta_rows == 0
    assert [f for f in os.listdir(tmp_path) if f.endswith(".snap")] == [kept.snapshot]
    bucket_module._CACHE.clear()
    loaded = snapshot_module.BucketState.from_row(state.row[1], snapshot_module.SnapshotDir(settings.state_dir), 0, 1)
    assert loaded.counts == kept.counts


def test_an_idle_worker_compacts_a_long_delta_and_a_load_of_that_row_reads_it(tmp_path, monkeypatch):
    from elrwatch.state.partitions.columnar.output import rows_of, transitions_of

    routed = _small_cluster_rows()
    settings = _unbounded_delta(tmp_path)
    fn = bucket_module.make_state_function(settings)
    monkeypatch.setattr(snapshot_module, "QUIET_DELTA", 20)
    state = _State()
    bucket_module._CACHE.clear()
    _run(fn, 0, routed.iloc[:-3], state)  # a busy batch: a long delta, no snapshot
    token, row = state.row
    snaps = lambda: [f for f in os.listdir(tmp_path) if f.endswith(".snap")]  # noqa: E731
    assert snaps() == [] and pickle.loads(row[1:])["deltaRows"] == len(routed) - 3
    assert bucket_module.on_idle() == 1  # the warm-up in the idle worker: the state at the row's token
    (name,) = snaps()
    assert name.endswith(f"-{token}.snap") and bucket_module._CACHE[0][1].snapshot == name
    assert bucket_module.on_idle() == 0  # nothing left to compact
    bucket_module._CACHE.clear()  # a restart: the row still names no snapshot and the long delta
    compacted = snapshot_module.BucketState.from_row(
        row, snapshot_module.SnapshotDir(settings.state_dir), 0, 1, token=token
    )
    assert compacted.snapshot == name and compacted.delta == [] and compacted.delta_rows == 0
    replayed = snapshot_module.BucketState.from_row(
        row, snapshot_module.SnapshotDir(settings.state_dir), 0, 1
    )  # no token: the delta replayed
    assert replayed.snapshot is None and replayed.delta_rows == len(routed) - 3
    after = [
        bucket_module.process_bucket(0, 1, bucket_module.ordered_rows(routed.iloc[-3:]), bs)
        for bs in (compacted, replayed)
    ]
    assert list(rows_of(after[0].pop("partitions"))) == list(rows_of(after[1].pop("partitions")))
    assert transitions_of(after[0].pop("transitions")) == transitions_of(after[1].pop("transitions"))
    assert after[0] == after[1]
    _run(fn, 0, routed.iloc[-3:], state)  # the job's own load after the restart: the next row builds on it
    assert pickle.loads(state.row[1][1:])["snapshot"] == name


def test_missing_or_corrupt_snapshot_is_a_one_line_error(tmp_path):
    lines = [x.decode() for x in scenario(2, 8, 4, steps=10, churn=50, seed=4)]
    routed = routed_frame(lines, 1)
    fn = _state_function(tmp_path, delta_max_records=10)
    state = _State()
    _run(fn, 0, routed, state)
    (name,) = os.listdir(tmp_path)
    committed = state.row
    _run(fn, 0, routed.iloc[:1], state)  # a small batch: its records in a delta chunk file
    (chunk,) = (f for f in os.listdir(tmp_path) if f.endswith(".delta"))
    bucket_module._CACHE.clear()
    os.remove(tmp_path / chunk)
    with pytest.raises(snapshot_module.SnapshotError) as err:
        _run(fn, 0, routed.iloc[:0], state)
    assert str(err.value).startswith(f"bucket 0: delta chunk {tmp_path / chunk} referenced by the checkpoint is")
    state.row = committed
    (tmp_path / name).write_bytes(b"Z" + b"\0" * 40)
    with pytest.raises(snapshot_module.SnapshotError, match=r"^bucket 0: columnar snapshot .*\.snap: corrupt \(.*\)$"):
        _run(fn, 0, routed.iloc[:0], state)
    os.remove(tmp_path / name)
    with pytest.raises(snapshot_module.SnapshotError) as err:
        _run(fn, 0, routed.iloc[:0], state)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"bucket 0: snapshot {tmp_path / name} referenced by")
    wrapped = f"org.apache.spark.api.python.PythonException: Traceback...\n  File x\nelrwatch.streaming.snapshots.SnapshotError: {message}\n\tat org..."
    assert query._one_line(wrapped) == message


def test_state_dir_defaults_next_to_a_local_checkpoint(tmp_path):
    config = JobConfig(checkpoint=str(tmp_path / "ck"))
    assert config.snapshot_dir() == str(tmp_path / "ck" / "bucket-snapshots")
    assert JobConfig(checkpoint=f"file://{tmp_path}/ck").snapshot_dir() == str(tmp_path / "ck" / "bucket-snapshots")
    assert JobConfig(checkpoint="s3a://b/ck", state_dir="/mnt/rwx/s").snapshot_dir() == "/mnt/rwx/s"
    assert JobConfig(checkpoint="s3a://b/ck", state_mode="blob").snapshot_dir() is None
    # blob mode still knows where an earlier snapshot-mode run of the checkpoint put its snapshots
    blob = JobConfig(checkpoint=str(tmp_path / "ck"), state_mode="blob")
    assert blob.snapshot_dir() == str(tmp_path / "ck" / "bucket-snapshots")
    with pytest.raises(ValueError, match="not a local path: give --state-dir"):
        JobConfig(checkpoint="s3a://b/ck").snapshot_dir()
    with pytest.raises(ValueError, match="--state-mode must be one of snapshot, blob"):
        JobConfig(state_mode="rocks").snapshot_dir()


def test_one_state_task_in_local_mode_one_per_bucket_on_a_cluster():
    config = JobConfig(buckets=4)
    assert query.state_tasks(config, "local[2]") == 1  # small batches: one task and one state store per batch
    assert query.state_tasks(config, "k8s://https://kubernetes.default.svc") == 4


def test_local_workers_run_this_interpreter_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert accelerators.local_worker_python(JobConfig(), "local[2]") == sys.executable
    assert accelerators.local_worker_python(JobConfig(), "k8s://https://kubernetes.default.svc") is None
    assert accelerators.local_worker_python(JobConfig(), None) is None  # spark-submit's cluster decides
    chosen = JobConfig(spark_conf={"spark.pyspark.python": "/opt/py/bin/python"})
    assert accelerators.local_worker_python(chosen, "local[2]") is None
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    assert accelerators.local_worker_python(JobConfig(), "local[2]") is None


# hash(cast(id as int)) from Spark 4 (`spark.range(-3, 5).selectExpr("hash(cast(id as int))")`)
SPARK_HASHES = {
    -3: -1573329414,
    -2: -1160545675,
    -1: -1604776387,
    0: 933211791,
    1: -559580957,
    2: 1765031574,
    3: -1823081949,
    4: -397064898,
}


def test_spark_hash_of_an_int_is_reproduced():
    assert {value: route.spark_hash_int(value) for value in SPARK_HASHES} == SPARK_HASHES


@pytest.mark.parametrize(("buckets", "partitions"), [(2, 2), (4, 2), (4, 4), (16, 3), (3, 1)])
def test_group_keys_spread_buckets_evenly_over_the_state_tasks(buckets, partitions):
    keys = route.group_keys(buckets, partitions)
    assert len(set(keys)) == buckets
    assert [route.lane_of(k, partitions) for k in keys] == [b % partitions for b in range(buckets)]


def test_grouping_by_bucket_number_would_not_spread_them():
    """Why group keys exist: Spark's hash puts buckets 0 and 1 (of 2) in the same one of 2 tasks."""
    assert route.lane_of(0, 2) == route.lane_of(1, 2)


def test_a_cached_state_newer_than_the_committed_row_is_not_used(tmp_path):
    """A batch whose Spark task failed after the worker applied it: the retry starts from the committed row,
    so the worker rebuilds the bucket instead of using its newer cached state, and gives the same output."""
    settings = bucket_module.StateSettings(1, state_mode="snapshot", state_dir=str(tmp_path), delta_max_records=50)
    lines = [x.decode() for x in scenario(3, 10, 4, steps=25, churn=100, seed=11)]
    routed = routed_frame(lines, 1)
    batches = [list(bucket_module.ordered_rows(routed.iloc[i : i + 40])) for i in range(0, 120, 40)]
    cache: dict = {}

    def apply(row, n):
        token, blob, bodies = bucket_module.run_bucket(0, settings, row, iter(batches[n]), len(batches[n]), cache)
        (head,), chunks = payload_module.decode_payloads(list(bodies))
        head["partitions"] = sorted(map(repr, payload_module.iter_partition_rows(chunks)))
        return (token, blob), head.pop("timing")["cache"], head

    committed, how, _ = apply(None, 0)
    assert how == "miss"
    _, how, first_try = apply(committed, 1)
    assert how == "hit"
    retried, how, retry = apply(committed, 1)  # the committed row, not the token the worker cached last
    assert how == "miss"
    assert retry == first_try
    _, how, _ = apply(retried, 2)
    assert how == "hit"


def test_a_background_thread_lowers_only_its_own_priority():
    """The store writer's thread yields the CPU to the batches; the thread that called it keeps its niceness."""
    import threading

    from elrwatch.streaming.priority import lower_current_thread_priority

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen: list[int] = []

    def background() -> None:
        lower_current_thread_priority(5)
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    thread = threading.Thread(target=background)
    thread.start()
    thread.join()
    assert seen == [min(19, before + 5)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before


def test_state_keys_are_fixed_for_the_checkpoint(tmp_path):
    ck = str(tmp_path / "ck")
    keys = query.state_keys(ck, True, 4, 2)
    assert keys == route.group_keys(4, 2)
    assert query.state_keys(ck, False, 4, 1) == keys  # a restart keeps them, whatever the session would choose
    with pytest.raises(query.JobError, match="started with --buckets 4, not 3"):
        query.state_keys(ck, False, 3, 2)
    assert query.state_keys(str(tmp_path / "old"), False, 4, 2) is None  # a checkpoint from before: bucket numbers
    assert query.state_keys(str(tmp_path / "submit"), True, 4, None) is None


def test_checkpoint_shuffle_partitions_read_from_the_offset_log(tmp_path):
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    assert query.checkpoint_shuffle_partitions(str(tmp_path)) is None
    meta = {"batchWatermarkMs": 0, "conf": {"spark.sql.shuffle.partitions": "3"}}
    (offsets / "0").write_text("v1\n" + json.dumps({**meta, "conf": {"spark.sql.shuffle.partitions": "1"}}) + "\n")
    (offsets / "7").write_text("v1\n" + json.dumps(meta) + "\n{}\n")
    (offsets / "12").write_text("v1\n")  # being written: skipped
    assert query.checkpoint_shuffle_partitions(f"file://{tmp_path}") == 3


def test_a_checkpoint_switches_state_modes(tmp_path):
    """snapshot -> blob -> snapshot on the same state rows (each mode reads both formats): same output as blob."""
    lines = [x.decode() for x in scenario(3, 10, 4, steps=20, churn=90, seed=6)]
    part = routed_frame(lines, 1)
    fns = {m: _state_function(tmp_path, delta_max_records=25, mode=m) for m in STATE_MODES}
    got = {}
    for plan in (["snapshot", "blob", "snapshot"], ["blob", "blob", "blob"]):
        state = _State()
        outs = []
        for n, i in enumerate(range(0, len(part), len(part) // 6 + 1)):
            bucket_module._CACHE.clear()  # every batch reads the row (as after a restart with another mode)
            p = _run(fns[plan[min(n // 2, 2)]], 0, part.iloc[i : i + len(part) // 6 + 1], state)
            p.pop("timing")
            for key in ("partitions", "transitions", "violations"):
                p[key].sort(key=lambda d: (d.get("offset", 0), d["topicId"], d["partitionId"], str(d)))
            outs.append(p)
        got[plan[0]] = outs
        assert state.row[1][:1] == (b"C" if plan[-1] == "snapshot" else b"B")
    assert got["snapshot"] == got["blob"]


class _Query:
    """The two properties of a StreamingQuery that wait_for_batch_end reads."""

    def __init__(self, active_polls: int | None) -> None:
        self.polls = 0
        self.active_polls = active_polls  # None: the batch never ends
        self.isActive = True

    @property
    def status(self) -> dict:
        self.polls += 1
        running = self.active_polls is None or self.polls <= self.active_polls
        return {"isTriggerActive": running}


def test_stop_waits_for_the_running_batch_then_gives_up_at_the_bound():
    finishing = _Query(active_polls=3)
    assert query.wait_for_batch_end(finishing, timeout_s=30) is True
    assert finishing.polls == 4  # polled until the batch ended, not beyond
    stuck = _Query(active_polls=None)
    started = time.monotonic()
    assert query.wait_for_batch_end(stuck, timeout_s=0.3) is False
    assert 0.3 <= time.monotonic() - started < 5
    idle = _Query(active_polls=0)
    assert query.wait_for_batch_end(idle, timeout_s=30) is True and idle.polls == 1


def test_health_takes_each_new_progress_of_the_query_once():
    from types import SimpleNamespace

    from elrwatch.streaming.metrics import Health

    def progress(batch_id: int, latest: int, end: int, duration_ms: int) -> SimpleNamespace:
        source = SimpleNamespace(latestOffset=f'{{"t":{{"0":{latest}}}}}', endOffset=f'{{"t":{{"0":{end}}}}}')
        return SimpleNamespace(
            batchId=batch_id, timestamp=f"ts{batch_id}", durationMs={"triggerExecution": duration_ms}, sources=[source]
        )

    class Query:
        lastProgress = None

    health, query = Health(None), Query()
    health.progress_of(query)  # no batch yet
    assert (health.lag, health.last_duration) == (None, None)
    query.lastProgress = progress(0, latest=120, end=100, duration_ms=800)
    health.progress_of(query)
    assert (health.lag, health.last_duration) == (20, 0.8)
    health.lag = 7  # not taken again while the query reports the same batch
    health.progress_of(query)
    assert health.lag == 7
    query.lastProgress = progress(1, latest=120, end=120, duration_ms=300)
    health.progress_of(query)
    assert (health.lag, health.last_duration) == (0, 0.3)

    class Stopped:
        @property
        def lastProgress(self):
            raise RuntimeError("the query stopped")

    health.progress_of(Stopped())  # ignored
    assert health.lag == 0


def test_the_driver_asks_the_jvm_for_its_unused_heap_every_interval_and_a_failure_is_logged_once(caplog):
    from elrwatch.streaming.memory import JvmHeapTrim

    now, calls, broken = [0.0], [], [False]

    def collect() -> None:
        if broken[0]:
            raise ConnectionError("the JVM is gone")
        calls.append(now[0])

    trim = JvmHeapTrim(collect, interval_s=300, clock=lambda: now[0])
    for t in range(0, 1300, 50):  # the driver's loop ticks far more often than the interval
        now[0] = float(t)
        trim.tick()
    assert calls == [300.0, 600.0, 900.0, 1200.0]
    broken[0] = True
    for t in (1500, 1800):
        now[0] = float(t)
        assert trim.tick() is False  # never raised
    assert sum("unused heap failed" in r.getMessage() for r in caplog.records) == 1
    # the JVM's options make that System.gc() a concurrent cycle (its remark shrinks the heap), not a full pause
    assert "-XX:+ExplicitGCInvokesConcurrent" in accelerators.G1_RETURN_HEAP_OPTIONS.split()


def test_driver_java_options_put_the_user_s_own_last():
    own = "-XX:TieredStopAtLevel=4 -Dcom.example=1"
    quick = accelerators.driver_java_options(JobConfig())
    assert quick.split() == [*accelerators.G1_RETURN_HEAP_OPTIONS.split(), accelerators.QUICK_START_OPTIONS]
    mine = accelerators.driver_java_options(JobConfig(spark_conf={"spark.driver.extraJavaOptions": own}))
    assert mine.endswith(own) and mine.startswith(quick), "later flags win in HotSpot: the user's come last"


def test_the_driver_jvm_runs_with_the_job_s_options_and_the_user_s(tmp_path):
    """A real local Spark started by build_spark (in a subprocess: a Python process launches one JVM for its
    lifetime, whatever session another test started first): the JVM's arguments hold the quick-start and G1
    options, then the user's --spark-conf value."""
    checkpoint = str(tmp_path / "ck")
    script = (
        "import json\n"
        "from elrwatch.streaming import query\n"
        "from elrwatch.streaming.config import JobConfig\n"
        f"config = JobConfig(checkpoint={checkpoint!r}, "
        "spark_conf={'spark.driver.extraJavaOptions': '-Delrwatch.probe=1'})\n"
        "spark = query.build_spark(config)\n"
        "bean = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()\n"
        "print(json.dumps(list(bean.getInputArguments())))\n"
        "spark.stop()\n"
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    arguments = json.loads(out.stdout.strip().splitlines()[-1])
    assert accelerators.QUICK_START_OPTIONS in arguments and "-XX:G1PeriodicGCInterval=15000" in arguments
    assert arguments.index("-Delrwatch.probe=1") > arguments.index(accelerators.QUICK_START_OPTIONS)


def test_a_class_archive_only_for_a_jvm_this_process_starts_in_local_mode(monkeypatch, tmp_path):
    from pyspark import SparkContext

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr(SparkContext, "_gateway", None)
    local = JobConfig(local=LocalTuning(jvm_class_archive_dir=str(tmp_path / "jvm")))
    archive = accelerators.class_archive_for(local)
    assert archive is not None and archive.path.startswith(str(tmp_path / "jvm"))
    assert accelerators.class_archive_for(JobConfig(spark_master="k8s://https://kubernetes.default.svc")) is None
    monkeypatch.setattr(SparkContext, "_gateway", object())  # a JVM already runs: its options are set
    assert accelerators.class_archive_for(local) is None


def _merge_reference(frame) -> list[tuple]:
    """The state stage's order by its definition: each source's rows in seq order (stable), the sources merged by
    metadata offset with `heapq.merge` (one source: seq order only)."""
    import heapq

    ordered = frame.sort_values(["src", "seq"], kind="stable")
    rows = list(zip(ordered["moff"], ordered["kind"], ordered["src"], ordered["seq"], ordered["rec"], strict=True))
    streams: dict[str, list[tuple]] = {}
    for row in rows:
        streams.setdefault(row[2], []).append(row)
    if len(streams) == 1:
        return [row[1:] for row in rows]
    merged = heapq.merge(*streams.values(), key=lambda row: row[0])
    return [row[1:] for row in merged]


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["ev/0", "ev/1", "ev/2", "ev/10"]),
            st.integers(0, 6),  # seq: ties happen (a broadcast line, a re-read)
            st.integers(-1, 12),  # moff: -1 for lines without one, falls within a source
            st.sampled_from([route.KIND_RAW, route.KIND_RAW_BROADCAST]),
        ),
        max_size=40,
    ),
    rising=st.booleans(),
)
def test_state_stage_orders_rows_as_the_merge_of_its_sources(rows: list[tuple], rising: bool) -> None:
    """`ordered_rows` (vectors when each source's offsets rise, else `heapq.merge`) gives the merge's order."""
    import pandas as pd

    if rising:  # the normal case: offsets rise with each source's sequence
        rows = [(src, seq, seq * 3 + int(src[3:]), kind) for src, seq, _, kind in rows]
    frame = pd.DataFrame(
        {
            "bucket": [0] * len(rows),
            "src": [r[0] for r in rows],
            "seq": pd.array([r[1] for r in rows], dtype="int64"),
            "moff": pd.array([r[2] for r in rows], dtype="int64"),
            "kind": pd.array([r[3] for r in rows], dtype="int8"),
            "rec": [f"line {i}".encode() for i in range(len(rows))],
        }
    )
    assert list(bucket_module.ordered_rows(frame)) == [(int(k), *rest) for k, *rest in _merge_reference(frame)]


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            "org.apache.spark.SparkException: Job aborted.\n  at x\nCaused by: java.io.IOException: No space left on device\n",
            "the disk is full: Caused by: java.io.IOException: No space left on device",
        ),
        (
            "StreamingQueryException: [STREAM_FAILED]\norg.apache.kafka.common.errors.TimeoutException: Timeout of "
            "60000ms expired before the position for partition ev-0 could be determined\n",
            "the event topic's Kafka cluster did not answer: org.apache.kafka.common.errors.TimeoutException: Timeout"
            " of 60000ms expired before the position for partition ev-0 could be determined",
        ),
        ("pyspark.errors.SourceError: topic t does not exist\nmore", "topic t does not exist"),
    ],
)
def test_a_stopped_query_is_one_line_naming_its_cause(error: str, line: str) -> None:
    from elrwatch.streaming.query import _one_line

    assert _one_line(error) == line


def test_spark_jvm_gone_line_names_how_it_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    from py4j.protocol import Py4JNetworkError

    from elrwatch.streaming import query

    class Killed:
        def wait(self, timeout: float) -> int:
            return -9

    monkeypatch.setattr(query, "launched_jvm", lambda: Killed())
    line = query.jvm_exit_line(Py4JNetworkError("Answer from Java side is empty"))
    assert line.startswith("Spark's JVM exited (killed by signal 9): Answer from Java side is empty")
    assert "\n" not in line


def test_a_quiet_clusters_state_writes_are_in_proportion_to_its_batches(tmp_path, monkeypatch):
    """One record per batch for many batches: each batch writes its records as one small delta chunk file and a
    state row of a fixed size (not growing with the history); a quiet batch writes a snapshot once `MAX_CHUNKS`
    chunks (or as many bytes as the snapshot holds) followed the last one. The last row loads to the same state,
    from the snapshot and the chain of chunks."""
    monkeypatch.setattr(snapshot_module, "MAX_CHUNKS", 200)
    routed = routed_frame([x.decode() for x in scenario(2, 6, 3, steps=8, churn=900, seed=5)])
    settings = _unbounded_delta(tmp_path)
    fn = bucket_module.make_state_function(settings)
    state = _State()
    bucket_module._CACHE.clear()
    boot = 60
    _run(fn, 0, routed.iloc[:boot], state)

    def files() -> dict[str, int]:
        return {f: os.path.getsize(tmp_path / f) for f in os.listdir(tmp_path)}

    seen = files()
    rows, chunk_bytes, snapshot_bytes, chunks_between = [], [], [], [0]
    for i in range(boot, len(routed)):
        _run(fn, 0, routed.iloc[i : i + 1], state)
        rows.append(len(state.row[1]))
        now = files()
        new = {f: size for f, size in now.items() if f not in seen}
        seen = now
        chunk_bytes += [size for f, size in new.items() if f.endswith(".delta")]
        snaps = [size for f, size in new.items() if f.endswith(".snap")]
        if snaps:
            snapshot_bytes += snaps
            chunks_between.append(0)
        chunks_between[-1] += sum(1 for f in new if f.endswith(".delta"))
    assert len(rows) > 500 and len(snapshot_bytes) >= 3, (len(rows), len(snapshot_bytes))
    assert max(rows) - min(rows) <= 128 and max(rows) < 1_000, (min(rows), max(rows))  # flat, a few hundred bytes
    assert max(chunk_bytes) < 1_000  # one record's chunk
    assert all(190 <= n < 200 for n in chunks_between[1:-1]), chunks_between  # a snapshot every MAX_CHUNKS batches
    # and the chunks of older snapshots were deleted: what is left is bounded by the snapshots kept
    assert sum(seen.values()) <= (snapshot_module.SNAPSHOTS_KEPT + 1) * 2 * max(snapshot_bytes)
    kept = bucket_module._CACHE[0][1]
    bucket_module._CACHE.clear()
    loaded = snapshot_module.BucketState.from_row(state.row[1], snapshot_module.SnapshotDir(settings.state_dir), 0, 1)
    assert _plain(loaded.cluster) == _plain(kept.cluster)
