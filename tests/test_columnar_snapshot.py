"""Snapshots of the columnar engine (state/columnar_snapshot.py): save → load gives the same engine, which applies
the next batches exactly like the original.

Every input of the differential harness (tests/test_columnar.py) runs again with the audited engine saved and
loaded before its batches 1 (empty), 2, 4, 8, …: the loaded engine must equal the original field by field, then replaces
it, and the harness goes on comparing it after every batch with the object core fed the whole stream (violations
included). A missing, truncated, foreign or other-version file is a one-line error naming it.
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
from test_columnar import Parser, assert_same, buckets_of, fast_partitions, kept_state, normal

from elrwatch.state import columnar_snapshot
from elrwatch.state.cluster import ClusterState
from elrwatch.state.columnar import ColumnarState
from elrwatch.state.columnar_audit import AuditedColumnarState
from elrwatch.state.columnar_snapshot import SIDE_KEY, SnapshotError, load, save
from elrwatch.state.eventgen import EventGenerator


def engine_fields(engine: ColumnarState) -> dict[str, Any]:
    """Everything an engine keeps between batches, independent of its row numbers."""
    partitions = fast_partitions(engine)
    for (topic_id, partition_id), fields in partitions.items():
        found = engine.partition(topic_id, partition_id)
        assert found is not None and found.status == fields["status"]
    core = engine.core
    return {
        "partitions": partitions,
        "kept": kept_state(core),
        "violations": normal(core.violations),
        "violation_counts": +core.violation_counts,
        "core": (core.default_min_isr, core.bucket, core.track_changes, core.partition_count, core.log_info),
        "tuples": engine.tuples.tuples,
        "brokers": (engine.tuples.broker_ids, engine.tuples.broker_index),
        "topics": (engine.topic_ids, engine.topic_names, engine.topic_min_isr, engine.topic_unclean),
        "topic_index": engine.topic_index,
        "topic_size": [int(engine._topic_size[t]) for t in sorted(engine.topic_index.values())],  # of live topics
        "log_info": engine.log_info,
        "quarantined": [e.to_dict() for e in engine.quarantined],
        "counters": (engine.fast_records, engine.barrier_records, getattr(engine, "audited_rows", None)),
        "status_counts": engine.status_counts(),
        "flag_histogram": engine.flag_histogram(),
        "bucket": engine.bucket,
    }


class _Run:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.refs: list[ClusterState] = []
        self.loads = 0
        self.rows = 0


@pytest.fixture
def reloaded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[_Run]:
    """The harness's engine saved and loaded before its batches 1, 2, 4, 8, …, violations compared."""
    run = _Run(tmp_path)

    def reference(*args: Any, **kwargs: Any) -> ClusterState:  # the core as made, kept for the comparison
        made = ClusterState(*args, **kwargs)
        run.refs.append(made)
        return made

    class Reloaded(AuditedColumnarState):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.ref = run.refs[-1]
            self.batch = 0

        def apply_batch(self, batch: Any) -> Any:
            self.batch += 1
            if self.batch & (self.batch - 1) == 0:
                path = run.directory / "bucket.arrow"
                save(self, path)
                loaded = load(path, Reloaded)
                assert_same("loaded", engine_fields(self), engine_fields(loaded))
                ref, batches = self.ref, self.batch
                self.__dict__.clear()
                self.__dict__.update(loaded.__dict__)
                self.ref, self.batch = ref, batches
                run.loads += 1
                run.rows = max(run.rows, self.table.size)
            out = super().apply_batch(batch)
            assert_same("violations", normal(self.ref.violations), normal(self.core.violations))
            assert_same("violation counts", +self.ref.violation_counts, +self.core.violation_counts)
            return out

    monkeypatch.setattr(base, "ClusterState", reference)
    monkeypatch.setattr(base, "ColumnarState", Reloaded)
    yield run
    assert run.loads > 0


@pytest.mark.parametrize("as_lines", [False, True])
@pytest.mark.parametrize("bucket", buckets_of(3))
def test_event_generator_load_storms_and_churn(reloaded: _Run, bucket: tuple[int, int] | None, as_lines: bool) -> None:
    base.test_event_generator_load_storms_and_churn(bucket, as_lines)


def test_event_generator_in_random_batches(reloaded: _Run) -> None:
    base.test_event_generator_in_random_batches()


def test_storm_on_a_large_cluster(reloaded: _Run) -> None:
    base.test_storm_on_a_large_cluster()
    assert reloaded.rows >= 150_000


@pytest.mark.parametrize("scenario", base.REAL)
def test_real_kafka_logs(reloaded: _Run, scenario: str) -> None:
    base.test_real_kafka_logs(scenario)


@pytest.mark.parametrize("names", base.DUMP_FORMATS)
def test_real_kafka_dump_formats(reloaded: _Run, names: tuple[str, ...]) -> None:
    base.test_real_kafka_dump_formats(names)


def test_conformance_corpus(reloaded: _Run, monkeypatch: pytest.MonkeyPatch) -> None:
    base.test_conformance_corpus(monkeypatch)


@pytest.mark.parametrize("scenario", sorted(base.SCENARIOS))
def test_simulator_scenarios(reloaded: _Run, scenario: str) -> None:
    base.test_simulator_scenarios(scenario)


@pytest.mark.parametrize("seed", [1, 2])
def test_simulator_random_faults(reloaded: _Run, seed: int) -> None:
    base.test_simulator_random_faults(seed)


def test_random_faulty_streams(reloaded: _Run) -> None:
    base.test_random_faulty_streams()


@pytest.mark.parametrize("as_lines", [False, True])
@pytest.mark.parametrize("batch", [1, 4, 10_000])
@pytest.mark.parametrize("bucket", buckets_of(2))
def test_corner_cases(reloaded: _Run, bucket: tuple[int, int] | None, batch: int, as_lines: bool) -> None:
    base.test_corner_cases(bucket, batch, as_lines)


# --- files that cannot be loaded --------------------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    gen = EventGenerator(topics=2, partitions=50, brokers=4, seed=2)
    engine = ColumnarState(default_min_isr=2)
    engine.apply_batch(Parser("s").records([*gen.bootstrap(), *gen.fence(1)]))
    engine.drain_transitions()
    path = tmp_path / "bucket.arrow"
    assert save(engine, path) == path.stat().st_size > 0
    assert load(path).status_counts() == engine.status_counts()
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


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.999])
def test_a_truncated_file(saved: Path, keep: float) -> None:
    data = saved.read_bytes()
    saved.write_bytes(data[: int(len(data) * keep)])
    one_line_error(saved, "corrupt")


def test_a_file_of_another_version(saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = load(saved)
    current = columnar_snapshot.VERSION
    monkeypatch.setattr(columnar_snapshot, "VERSION", current + 1)
    save(engine, saved)
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
        core = side["core"]
        side["core"] = core[:40] + ("A" if core[40] != "A" else "B") + core[41:]

    rewrite_side(saved, flip)
    one_line_error(saved, "CRC-32")


def test_an_index_out_of_range(saved: Path) -> None:
    def drop_tuples(side: dict[str, Any]) -> None:
        side["tuples"] = side["tuples"][:2]

    rewrite_side(saved, drop_tuples)
    one_line_error(saved, "out of range")


def test_snapshot_refused_mid_batch() -> None:
    gen = EventGenerator(topics=1, partitions=10, brokers=3, seed=1)
    engine = ColumnarState()
    engine.apply_batch(Parser("s").records(list(gen.bootstrap())))
    with pytest.raises(ValueError, match="between batches"):
        save(engine, "/nonexistent/never-written.arrow")
