"""Property tests of the core: bad input never raises and never changes state; replay is resumable from a persisted
state (`ClusterState.to_bytes` of either partition store, the columnar store's Arrow snapshot); re-delivered events
change nothing, in either store (DESIGN.md §2)."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from typing import Any

import pytest
from core_events import random_stream
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from elrwatch.state import report
from elrwatch.state.cluster import STORES, ClusterState
from elrwatch.state.gauges import PipelineCounts
from elrwatch.state.outcome import Outcome
from elrwatch.state.partitions.objects import ObjectPartitions
from elrwatch.state.records import Ignored, Record, RecordError, Skipped, parse_line
from elrwatch.state.replay import Replayer

# No shrink phase: a failing example is reported as generated (seeds do not shrink usefully), and each test stays
# well under 10 s whether it passes or fails.
_PHASES = (Phase.explicit, Phase.reuse, Phase.generate)
FAST = settings(max_examples=60, deadline=None, phases=_PHASES, suppress_health_check=[HealthCheck.too_slow])
STREAMS = settings(max_examples=25, deadline=None, phases=_PHASES, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def state_of(cluster: ClusterState) -> dict[str, Any]:
    """The report document of a state, independent of the pipeline counts."""
    doc = report.build_document(cluster, PipelineCounts(), [])
    del doc["counts"], doc["quarantined"]
    return doc


def state_without_positions(cluster: ClusterState) -> dict[str, Any]:
    """`state_of` without the transport-specific positions (DESIGN.md §5: comparisons ignore lastPosition)."""
    doc = state_of(cluster)
    for p in doc["partitions"]:
        del p["lastPosition"]
    for v in doc["violations"]:
        del v["position"]
    return doc


_BASE_LINES = random_stream(1, steps=40)


def _base() -> Replayer:
    replayer = Replayer()
    replayer.feed_lines(_BASE_LINES, "base.jsonl")
    return replayer


_BASE_STATE = state_of(_base().cluster)


# --- bad input never raises, is never applied ----------------------------------------------------------------------


@FAST
@given(st.binary(max_size=400))
def test_arbitrary_bytes_are_quarantined_or_ignored(raw: bytes) -> None:
    replayer = _base()
    parsed = parse_line(raw, "fuzz", 1)
    assert isinstance(parsed, Record | RecordError | Ignored | Skipped)
    outcome = replayer.feed_line(raw, "fuzz", 1)
    assert outcome in (None, Outcome.QUARANTINED)
    assert state_of(replayer.cluster) == _BASE_STATE


@FAST
@given(json_values, st.sampled_from(["plain", "dump", "skip-metadata"]))
def test_arbitrary_json_values_are_quarantined_or_ignored(value: Any, form: str) -> None:
    text = json.dumps(value)
    if form == "dump":
        text = f"| offset: 7 CreateTime: 1 keySize: -1 valueSize: 3 sequence: -1 headerKeys: [] payload: {text}"
    elif form == "skip-metadata":
        text = f"| payload: {text}"
    replayer = _base()
    outcome = replayer.feed_line(text, "fuzz", 1)
    assert outcome in (None, Outcome.QUARANTINED)
    assert state_of(replayer.cluster) == _BASE_STATE
    counts = replayer.counts
    assert counts.ignored_lines + sum(counts.skipped_by_type.values()) + len(replayer.quarantined) >= 1


@FAST
@given(st.text(max_size=200))
def test_arbitrary_text_never_raises(text: str) -> None:
    replayer = _base()
    assert replayer.feed_line(text, "fuzz", 1) in (None, Outcome.QUARANTINED)
    assert state_of(replayer.cluster) == _BASE_STATE


@FAST
@given(
    st.integers(0, len(_BASE_LINES) - 1),
    st.sampled_from(["set", "delete", "version", "type"]),
    st.text(min_size=1, max_size=20),
    json_values,
    st.integers(-3, 9),
)
def test_mutated_records_never_raise_and_only_apply_when_valid(
    index: int, how: str, key: str, value: Any, version: int
) -> None:
    env = json.loads(_BASE_LINES[index])
    data = env["data"]
    fields = sorted(data)
    if how == "set":
        data[fields[hash(key) % len(fields)]] = value
    elif how == "delete":
        del data[fields[hash(key) % len(fields)]]
    elif how == "version":
        env["version"] = version
    else:
        env["type"] = key
    env["offset"] = 10_000  # a new record, not a re-delivery
    replayer = _base()
    outcome = replayer.feed_line(json.dumps(env), "fuzz", 1)
    if outcome is not Outcome.APPLIED:
        assert state_of(replayer.cluster) == _BASE_STATE


# --- prefix + rest == whole ------------------------------------------------------------------------------------------

#: (store, how its state is persisted): `ClusterState.to_bytes` of either store, the columnar store's Arrow snapshot.
PERSISTED = [("objects", "pickle"), ("columnar", "pickle"), ("columnar", "arrow")]


def restored(cluster: ClusterState, how: str) -> ClusterState:
    """The state persisted and loaded again (between batches: its pending changes were emitted)."""
    if how == "pickle":
        return ClusterState.from_bytes(cluster.to_bytes())
    from elrwatch.state.partitions.columnar import snapshot as columnar_snapshot

    cluster.partitions.forget_changes()  # type: ignore[attr-defined]
    return columnar_snapshot.from_bytes(columnar_snapshot.to_bytes(cluster))


@pytest.mark.parametrize(("store", "how"), PERSISTED)
@STREAMS
@given(st.integers(0, 10**6), st.integers(0, 120), st.floats(0, 1))
def test_prefix_then_rest_from_bytes_equals_whole(store: str, how: str, seed: int, steps: int, cut: float) -> None:
    lines = random_stream(seed, steps=steps)
    k = int(len(lines) * cut)
    whole = Replayer(store=store)
    whole.feed_lines(lines, "events.jsonl")
    prefix = Replayer(store=store)
    prefix.feed_lines(lines[:k], "events.jsonl")
    rest = Replayer(cluster=restored(prefix.cluster, how))
    assert rest.cluster.store == store
    rest.feed_lines(lines[k:], "events.jsonl", first_seq=k + 1)
    assert state_of(rest.cluster) == state_of(whole.cluster)
    assert not whole.quarantined and not rest.quarantined
    assert prefix.counts.applied + rest.counts.applied == whole.counts.applied


@pytest.mark.parametrize(("store", "how"), PERSISTED)
@STREAMS
@given(st.integers(0, 10**6), st.lists(st.floats(0, 1), min_size=1, max_size=4))
def test_many_checkpoints_equal_whole(store: str, how: str, seed: int, cuts: list[float]) -> None:
    lines = random_stream(seed, steps=80)
    whole = Replayer(store=store)
    whole.feed_lines(lines, "events.jsonl")
    points = sorted({int(len(lines) * c) for c in cuts} | {0, len(lines)})
    cluster = ClusterState(store=store)
    for start, end in itertools.pairwise(points):
        replayer = Replayer(cluster=restored(cluster, how))
        replayer.feed_lines(lines[start:end], "events.jsonl", first_seq=start + 1)
        cluster = replayer.cluster
    assert state_of(cluster) == state_of(whole.cluster)


# --- re-delivery changes nothing -------------------------------------------------------------------------------------


@pytest.mark.parametrize("store", STORES)
@STREAMS
@given(st.integers(0, 10**6), st.integers(1, 120), st.randoms(use_true_random=False))
def test_redelivering_applied_positions_changes_nothing(store: str, seed: int, steps: int, rnd: random.Random) -> None:
    lines = random_stream(seed, steps=steps)
    replayer = Replayer(store=store)
    replayer.feed_lines(lines, "events.jsonl")
    expected = state_of(replayer.cluster)
    picks = [rnd.randrange(len(lines)) for _ in range(10)]
    # same source and line number: duplicates by position
    for i in picks:
        assert replayer.feed_line(lines[i], "events.jsonl", i + 1) is Outcome.DUPLICATE
    assert state_of(replayer.cluster) == expected
    # same records (same metadata offsets) at new positions, e.g. a producer retry or another event partition
    for n, i in enumerate(picks):
        outcome = replayer.feed_line(lines[i], "retry", n + 1)
        assert outcome in (Outcome.DUPLICATE, Outcome.APPLIED)  # ClearElr may find nothing left to do
        assert state_of(replayer.cluster) == expected, lines[i]
    assert not replayer.quarantined


@pytest.mark.parametrize("store", STORES)
@STREAMS
@given(st.integers(0, 10**6), st.integers(1, 100), st.randoms(use_true_random=False))
def test_duplicates_interleaved_in_the_stream_change_nothing(
    store: str, seed: int, steps: int, rnd: random.Random
) -> None:
    lines = random_stream(seed, steps=steps)
    clean = Replayer(store=store)
    clean.feed_lines(lines, "events.jsonl")
    # every line of the generated stream is a record that applies: each re-delivery must come back a duplicate
    assert clean.counts.applied == len(lines) and clean.counts.duplicates == 0 and not clean.quarantined
    noisy: list[str] = []
    redelivered: list[str] = []
    for i, text in enumerate(lines):
        noisy.append(text)
        if i and rnd.random() < 0.3:
            again = lines[rnd.randrange(i + 1)]  # an earlier record delivered again, at a new position
            noisy.append(again)
            redelivered.append(again)
    replayer = Replayer(store=store)
    replayer.feed_lines(noisy, "events.jsonl")
    assert state_without_positions(replayer.cluster) == state_without_positions(clean.cluster)
    assert not replayer.quarantined
    # exactly once: each re-delivered record is counted as a duplicate, none is applied a second time
    assert replayer.counts.duplicates == len(redelivered)
    assert replayer.counts.applied == clean.counts.applied
    # and every re-delivered record was still read and counted as an event of its type
    extra = Counter(json.loads(text)["type"] for text in redelivered)
    assert replayer.counts.events_by_type == clean.counts.events_by_type + extra


@STREAMS
@given(seed=st.integers(0, 10_000), steps=st.integers(20, 150), index_at=st.integers(0, 400))
def test_an_eagerly_built_broker_index_changes_nothing(seed: int, steps: int, index_at: int) -> None:
    """The object store's `index_brokers` (a long-lived state builds the broker → partitions index once it has
    loaded, before any broker change) gives the same states, changes and transitions as the index built lazily by
    the first broker change, wherever in the stream it is built, and the index stays exact as partitions change."""
    lines = random_stream(seed, steps=steps)
    lazy, eager = ClusterState(store="objects"), ClusterState(store="objects")
    index = eager.partitions
    assert isinstance(index, ObjectPartitions)
    for i, text in enumerate(lines):
        if i == min(index_at, len(lines) - 1):
            index.index_brokers()
        for cluster in (lazy, eager):
            record = parse_line(text, "events/0", i, f"events/0@{i}")
            if isinstance(record, Record):
                cluster.apply(record)
        if i % 25 == 0:
            a, b = lazy.drain_changes(), eager.drain_changes()
            assert sorted((t.topic_id, p.partition_id) for t, p in a.partitions) == sorted(
                (t.topic_id, p.partition_id) for t, p in b.partitions
            )
            # a broker change visits its partitions in the index's set order (by object identity) either way
            assert sorted(map(str, (t.to_dict() for t in a.transitions))) == sorted(
                map(str, (t.to_dict() for t in b.transitions))
            )
    assert state_of(lazy) == state_of(eager)
    index.index_brokers()
    for broker in eager.brokers:  # the maintained index holds exactly the partitions that name the broker
        expected = {
            (p.topic_id, p.partition_id)
            for _, p in eager.iter_partitions()
            if broker in {*p.replicas, *p.isr, *p.elr, *p.last_known_elr}
        }
        assert {(p.topic_id, p.partition_id) for p in index.index_brokers().get(broker, ())} == expected
