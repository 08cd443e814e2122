"""The columnar store's lines (state/partitions/columnar/lines.py): a segment's inputs from parsed lines equal those
`table.inputs_of_records` builds from the lines' Records (tuple ids compared by value: each side interns into its
own table)."""

from __future__ import annotations

import io
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_columnar_parse import _mutate, _valid_envelopes

from elrwatch.state.eventgen import EventGenerator
from elrwatch.state.partitions.columnar.lines import inputs_of_lines, intern_lists
from elrwatch.state.partitions.columnar.parse import parse_partition_lines
from elrwatch.state.partitions.columnar.table import TupleTable, inputs_of_records
from elrwatch.state.records import parse_line
from elrwatch.state.simulator import SCENARIOS, simulate


def assert_inputs_alike(lines: list[bytes]) -> int:
    parsed = parse_partition_lines(lines)
    picked = np.flatnonzero(parsed.certain)
    seqs = picked + 1000
    mine, theirs = TupleTable(), TupleTable()
    got = inputs_of_lines(parsed, picked, ["events/0"] * len(picked), seqs, mine)
    records = [
        parse_line(lines[i], "events/0", int(s), f"events/0@{int(s)}") for i, s in zip(picked, seqs, strict=True)
    ]
    want = inputs_of_records(records, theirs)
    for name in ("is_pr", "leader", "le", "pe", "lrs", "offsets", "ts"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    for name, ids in want.tuples.items():
        assert [theirs.tuples[i] if i >= 0 else None for i in ids] == [
            mine.tuples[i] if i >= 0 else None for i in got.tuples[name]
        ], name
    assert got.positions == want.positions
    return len(picked)


def test_generated_load_and_storm() -> None:
    gen = EventGenerator(topics=4, partitions=300, brokers=6, seed=2)
    boot = [x if isinstance(x, bytes) else x.encode() for x in gen.bootstrap()]
    storm = [x if isinstance(x, bytes) else x.encode() for x in gen.fence(1)]
    assert assert_inputs_alike(boot) > 1000
    assert assert_inputs_alike(storm) > 100


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_simulator_scenarios(scenario: str) -> None:
    out = io.BytesIO()
    simulate(out, brokers=6, topics=2, partitions=5, replication_factor=3, min_isr=2, seed=5, scenario=scenario)
    assert assert_inputs_alike(out.getvalue().splitlines()) > 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.integers(1, 30))
def test_random_faulty_lines(rnd: random.Random, size: int) -> None:
    import json

    lines = []
    for _ in range(size):
        for env in _valid_envelopes(rnd):
            text = _mutate(env, rnd) if rnd.random() < 0.3 else json.dumps(env, separators=(",", ":"))
            lines.append(text.encode())
    assert_inputs_alike(lines)


def test_intern_lists_by_value() -> None:
    table = TupleTable()
    column = pa.array([[1, 2], [2, 1], None, [], [1, 2], [3], [1, 2, 3], [3]], pa.list_(pa.int64()))
    ids = intern_lists(table, column)
    assert [table.tuples[i] if i >= 0 else None for i in ids] == [
        (1, 2),
        (2, 1),
        None,
        (),
        (1, 2),
        (3,),
        (1, 2, 3),
        (3,),
    ]
    assert ids[0] == ids[4] and ids[5] == ids[7] and ids[3] == 0


def test_intern_lists_survives_hash_collisions(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a hash that sees only the length, lists of one length all collide: each is still its own value."""
    from elrwatch.state.partitions.columnar import lines as columnar_lines

    monkeypatch.setattr(columnar_lines, "_MIX_VALUE", np.uint64(0))
    table = TupleTable()
    rows = [[1, 2], [2, 1], [1, 2], [5, 6], [7], [8]]
    ids = intern_lists(table, pa.array(rows, pa.list_(pa.int64())))
    assert [table.tuples[i] for i in ids] == [tuple(r) for r in rows]
