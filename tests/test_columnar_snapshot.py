"""Snapshots of the columnar store (state/partitions/columnar/snapshot.py): save → load gives the same state, which
applies the next batches exactly like the original.

Every input of the differential harness (tests/test_columnar.py) runs again with the columnar store's state saved
and loaded before its batches 1 (empty), 2, 4, 8, …: the loaded state must equal the original field by field, then
replaces it, and the harness goes on comparing it after every batch with the object store's state fed the whole
stream (violations included). The same holds through `to_bytes` / `from_bytes` (the streaming job's blob mode). A
missing, truncated, foreign or other-version file is a one-line error naming it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import test_columnar as base
from pyarrow import ipc
from test_columnar import Parser, assert_same, buckets_of, held_partitions, kept_state, normal

from elrwatch.state.cluster import ClusterState
from elrwatch.state.eventgen import EventGenerator
from elrwatch.state.partitions.columnar import ColumnarPartitions
from elrwatch.state.partitions.columnar import snapshot as columnar_snapshot
from elrwatch.state.partitions.columnar.snapshot import SIDE_KEY, SnapshotError, load, save


def store_of(cluster: ClusterState) -> ColumnarPartitions:
    """The columnar store of a state."""
    store = cluster.partitions
    assert isinstance(store, ColumnarPartitions)
    return store


def state_fields(cluster: ClusterState) -> dict[str, Any]:
    """Everything a state with the columnar store keeps between batches, independent of its row numbers."""
    store = store_of(cluster)
    partitions = held_partitions(cluster)
    for (topic_id, partition_id), fields in partitions.items():
        row = store.row_of(topic_id, partition_id)
        assert row is not None and store.partition_at(row).status == fields["status"]
    return {
        "partitions": partitions,
        "kept": kept_state(cluster),
        "violations": normal(cluster.violations),
        "violation_counts": +store.violations.counts,
        "state": (cluster.default_min_isr, cluster.bucket, cluster.store, cluster.partition_count, cluster.log_info),
        "tuples": store.tuples.tuples,
        "brokers": (store.tuples.broker_ids, store.tuples.broker_index),
        "topics": (store.topic_ids, store.topic_names, store.topic_min_isr, store.topic_unclean),
        "topic_index": store.topic_index,
        "topic_size": [int(store._topic_size[t]) for t in sorted(store.topic_index.values())],  # of live topics
        "log_info": store.log_info,
        "counters": (store.fast_records, store.barrier_records, store.audited_rows, store.vector_admitted),
        "elections": +store.counters,
        "status_counts": store.status_counts(),
        "flag_histogram": store.flag_histogram(),
        "bucket": store.bucket,
    }


class _Run:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.loads = 0
        self.rows = 0


@pytest.mark.parametrize(("test", "kwargs"), base.input_runs())
def test_harness_input(reloaded: _Run, monkeypatch: pytest.MonkeyPatch, test: Any, kwargs: dict[str, Any]) -> None:
    base.run_input(test, kwargs, monkeypatch)
    if test is base.test_storm_on_a_large_cluster:
        assert reloaded.rows >= 3000 * base.STORM_TOPICS


@pytest.fixture
def reloaded(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[_Run]:
    """The harness's columnar state saved and loaded before its batches 1, 2, 4, 8, …, violations compared with
    the object store's after every batch. Through a file; ``"bytes"`` (indirect parameter): through `to_bytes` /
    `from_bytes`, as blob mode keeps it."""
    run = _Run(tmp_path)
    through_file = getattr(request, "param", "file") == "file"

    class Reloaded(base.TwinState):
        batch = 0  # the batches applied to the columnar store's state

        def apply_batch(self, items: Any, owned: bool = False) -> Any:
            if self.ref is None:
                return super().apply_batch(items, owned)
            self.batch += 1
            if self.batch & (self.batch - 1) == 0:
                if through_file:
                    path = run.directory / "bucket.arrow"
                    save(self, path)
                    loaded = load(path)
                else:
                    loaded = columnar_snapshot.from_bytes(columnar_snapshot.to_bytes(self))
                assert_same("loaded", state_fields(self), state_fields(loaded))
                # what the state reports quarantined is not part of a snapshot (a bucket drains it every batch):
                # the harness collects it over the whole run
                ref, batches, quarantined = self.ref, self.batch, self.drain_quarantined()
                self.__dict__.clear()
                self.__dict__.update(loaded.__dict__)
                self.ref, self.batch, self._quarantined = ref, batches, quarantined
                run.loads += 1
                run.rows = max(run.rows, store_of(self).table.size)
            out = super().apply_batch(items, owned)
            assert_same("violations", normal(self.ref.violations), normal(self.violations))
            assert_same("violation counts", +self.ref.partitions.violations.counts, +self.partitions.violations.counts)
            return out

    base.make_states_with(monkeypatch, Reloaded)
    yield run
    assert run.loads > 0


@pytest.mark.parametrize("reloaded", ["bytes"], indirect=True)
@pytest.mark.parametrize("as_lines", [False, True])
@pytest.mark.parametrize("bucket", buckets_of(2))
def test_corner_cases_through_bytes(reloaded: _Run, bucket: tuple[int, int] | None, as_lines: bool) -> None:
    base.test_corner_cases(bucket, 4, as_lines)


@pytest.mark.parametrize("reloaded", ["bytes"], indirect=True)
@pytest.mark.parametrize("names", base.DUMP_FORMATS)
def test_real_kafka_dump_formats_through_bytes(reloaded: _Run, names: tuple[str, ...]) -> None:
    base.test_real_kafka_dump_formats(names)


@pytest.mark.parametrize("reloaded", ["bytes"], indirect=True)
@pytest.mark.parametrize("seed", [1, 2])
def test_simulator_random_faults_through_bytes(reloaded: _Run, seed: int) -> None:
    base.test_simulator_random_faults(seed)


# --- files that cannot be loaded --------------------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    gen = EventGenerator(topics=2, partitions=50, brokers=4, seed=2)
    cluster = ClusterState(default_min_isr=2)
    cluster.apply_batch(Parser("s").records([*gen.bootstrap(), *gen.fence(1)]))
    store_of(cluster).drain_transitions()
    path = tmp_path / "bucket.arrow"
    assert save(cluster, path) == path.stat().st_size > 0
    assert load(path).status_counts == cluster.status_counts
    assert [p.name for p in tmp_path.iterdir()] == ["bucket.arrow"]  # no temporary file left
    return path


def one_line_error(path: Path, *expected: str) -> str:
    with pytest.raises(SnapshotError) as caught:
        load(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message, message
    for part in expected:
        assert part in message, message
    return message


def test_a_missing_file(tmp_path: Path) -> None:
    one_line_error(tmp_path / "gone.arrow", "missing")


@pytest.mark.parametrize("keep", [0, 0.5, 0.999])
def test_truncated_bytes(saved: Path, keep: float) -> None:
    data = saved.read_bytes()
    with pytest.raises(SnapshotError) as caught:
        columnar_snapshot.from_bytes(data[: int(len(data) * keep)], "of bucket 3's state row")
    message = str(caught.value)
    assert "\n" not in message and "of bucket 3's state row" in message and "corrupt" in message, message


def test_the_bytes_are_the_files_content(saved: Path) -> None:
    """`from_bytes` reads the file `save` writes, and `to_bytes` of a loaded state loads the same state again."""
    assert_same(
        "file as bytes", state_fields(load(saved)), state_fields(columnar_snapshot.from_bytes(saved.read_bytes()))
    )
    data = columnar_snapshot.to_bytes(load(saved))
    assert_same("from bytes", state_fields(load(saved)), state_fields(columnar_snapshot.from_bytes(data)))


def test_the_object_store_has_no_columnar_snapshot(tmp_path: Path) -> None:
    cluster = ClusterState(store="objects")
    with pytest.raises(TypeError, match="not the objects store"):
        save(cluster, tmp_path / "objects.arrow")
    with pytest.raises(TypeError, match="not the objects store"):
        columnar_snapshot.to_bytes(cluster)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.999])
def test_a_truncated_file(saved: Path, keep: float) -> None:
    data = saved.read_bytes()
    saved.write_bytes(data[: int(len(data) * keep)])
    one_line_error(saved, "corrupt")


def test_a_file_of_another_version(saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = load(saved)
    current = columnar_snapshot.VERSION
    monkeypatch.setattr(columnar_snapshot, "VERSION", current + 1)
    save(cluster, saved)
    monkeypatch.undo()
    one_line_error(saved, f"format version {current + 1}", f"reads {current}")


def test_a_file_that_is_not_a_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "other.arrow"
    path.write_text("elrwatch\n" * 100)
    one_line_error(path, "corrupt")
    table = pa.table({"x": [1, 2]})
    with ipc.new_file(str(path), table.schema) as writer:
        writer.write_table(table)
    one_line_error(path, "not an elrwatch columnar snapshot")


def rewrite_side(path: Path, change: Any) -> None:
    """The snapshot at ``path`` with its side document changed by ``change`` (columns kept)."""
    with pa.memory_map(str(path)) as source:
        reader = ipc.open_file(source)
        batch = reader.get_batch(0)
        metadata = dict(reader.schema.metadata)
    side = json.loads(metadata[SIDE_KEY])
    change(side)
    metadata[SIDE_KEY] = json.dumps(side).encode()
    sink = io.BytesIO()
    schema = batch.schema.with_metadata(metadata)
    with ipc.new_file(sink, schema) as writer:
        writer.write_batch(batch.replace_schema_metadata(metadata))
    path.write_bytes(sink.getvalue())


def test_a_corrupt_side_part(saved: Path) -> None:
    def flip(side: dict[str, Any]) -> None:
        image = side["image"]
        side["image"] = image[:40] + ("A" if image[40] != "A" else "B") + image[41:]

    rewrite_side(saved, flip)
    one_line_error(saved, "CRC-32")


def test_an_index_out_of_range(saved: Path) -> None:
    def drop_tuples(side: dict[str, Any]) -> None:
        side["tuples"] = side["tuples"][:2]

    rewrite_side(saved, drop_tuples)
    one_line_error(saved, "out of range")


def test_snapshot_refused_mid_batch(tmp_path: Path) -> None:
    """Transitions not drained yet: refused, and nothing is written (no file, no temporary file)."""
    gen = EventGenerator(topics=1, partitions=10, brokers=3, seed=1)
    cluster = ClusterState()
    cluster.apply_batch(Parser("s").records(list(gen.bootstrap())))
    with pytest.raises(ValueError, match="between batches"):
        save(cluster, tmp_path / "never-written.arrow")
    with pytest.raises(ValueError, match="between batches"):
        columnar_snapshot.to_bytes(cluster)
    assert list(tmp_path.iterdir()) == []
