"""What a bucket emits after a batch, built from the columnar store's columns: what `ClusterState.drain_changes`
and `gauges.partition_gauges` give of the object store, as columns.

* `drain`: the rows changed since the previous drain as an Arrow table (`changed_table`, no Python object per
  row; `rows_of` gives their `partition_row` lists, the stored form as `report.stored_partition` writes it), the
  removed partitions and topics, the status transitions, the changed brokers and topics;
* `partition_gauges`: `gauges.partition_gauges` of the bucket's partitions (status and flag counts, electable
  leaders, election counters, unclean recovery candidates, and the operator-insight gauges of `state/insight.py`
  as bincounts over the columns, `insight_counts`), without the invariant-violation gauges;
* `topic_documents`: `report.topic_doc` of the topics whose owned partition count changed or that changed.

Not built here: the invariant audit (violations; a row's stored violation kinds come from the ``violations``
callable given to `drain`, none by default).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from elrwatch.state import insight
from elrwatch.state.gauges import (
    Gauges,
    candidate_known_partitions,
    counted_partition_gauges,
    restart_doomed,
    unregistered_brokers,
)
from elrwatch.state.model import NO_LEADER, BrokerState
from elrwatch.state.partitions.columnar.derive import active_dense
from elrwatch.state.partitions.columnar.elections import LEADER_CHANGES
from elrwatch.state.partitions.columnar.table import NONE
from elrwatch.state.partitions.columnar.view import ColumnarView
from elrwatch.state.status import ELECTABLE_SHIFT, FLAG_BITS, STATUSES

#: A partition's violation kinds, by (topic id, partition id).
ViolationKinds = Callable[[str, int], list[str]]


@dataclass
class Output:
    """What changed since the previous `drain` (the parts of a bucket's payload that `drain_changes` feeds)."""

    partitions: Any = None  # the changed rows (`changed_table`, in row order; `rows_of` gives the lists)
    removed: list[list[Any]] = field(default_factory=list)  # [topic id, partition id]
    removed_topics: list[str] = field(default_factory=list)
    transitions: Any = None  # `transition_table` (in order; `transitions_of` gives the dicts)
    brokers: list[BrokerState] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)  # ids of live topics that changed, sorted


def _nullable(values: np.ndarray) -> Any:
    """An int64 Arrow array with `NONE` as null."""
    return pa.array(values, pa.int64(), mask=values == NONE)


def _names(codes: np.ndarray, names: tuple[str, ...] | list[str]) -> Any:
    """``names[code]`` per code (Python's indexing, negative codes included) as a dictionary array."""
    return pa.DictionaryArray.from_arrays(
        pa.array(np.asarray(codes, dtype=np.int64) % max(1, len(names)), pa.int32()), pa.array(list(names), pa.string())
    )


def _tuple_lists(state: ColumnarView, ids: np.ndarray) -> Any:
    """The interned broker-id tuples ``ids`` as a list<int32> array (vectorized over the tuple table)."""
    lengths, members = state.tuples.arrays()
    counts = lengths[ids]
    offsets = np.zeros(len(ids) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    picked = members[ids]
    dense = picked[np.arange(picked.shape[1]) < counts[:, None]]  # row-major: each tuple's members in order
    values = np.array(state.tuples.broker_ids, dtype=np.int32)[dense] if len(dense) else dense.astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, pa.int32()))


def changed_table(state: ColumnarView, violations: ViolationKinds | None = None) -> Any:
    """The live rows changed since the previous call as an Arrow table (one column per field of the row and of
    its stored form, in row order), built from the columns with no Python object per row; None when none changed.
    Clears the changed mask. `rows_of` turns it into `partition_row` lists (the store writer does, behind the
    gauges)."""
    table = state.table
    size = table.size
    c = table.cols
    mask = c["changed"][:size]
    rows = np.flatnonzero(mask & c["alive"][:size])
    mask[:] = False
    if len(rows) == 0:
        return None
    topics = c["topic"][rows]
    pids = c["pid"][rows]
    topic_ids = pa.DictionaryArray.from_arrays(pa.array(topics, pa.int32()), pa.array(state.topic_ids, pa.string()))
    columns: dict[str, Any] = {
        "topicId": topic_ids,
        "partitionId": pa.array(pids, pa.int32()),
        "topic": pa.DictionaryArray.from_arrays(pa.array(topics, pa.int32()), pa.array(state.topic_names, pa.string())),
        "status": _names(c["status"][rows], STATUSES),
        "leader": pa.array(c["leader"][rows], pa.int32()),
        "minIsr": pa.array(np.array(state.topic_min_isr, dtype=np.int64)[topics], pa.int64()),
        "sinceMs": _nullable(c["since_ms"][rows]),
        "replicas": _tuple_lists(state, c["replicas"][rows]),
        "isr": _tuple_lists(state, c["isr"][rows]),
        "elr": _tuple_lists(state, c["elr"][rows]),
        "lastKnownElr": _tuple_lists(state, c["lke"][rows]),
        "leaderEpoch": pa.array(c["le"][rows], pa.int64()),
        "partitionEpoch": pa.array(c["pe"][rows], pa.int64()),
        "leaderRecoveryState": pa.array(c["lrs"][rows], pa.int8()),
        "adding": _tuple_lists(state, c["adding"][rows]),
        "removing": _tuple_lists(state, c["removing"][rows]),
        "sinceOffset": _nullable(c["since_offset"][rows]),
        "lastLeaderChange": _names(c["llc"][rows], LEADER_CHANGES),
        "position": pa.array(c["position"][rows].tolist(), pa.string()),
        "lastOffset": _nullable(c["last_offset"][rows]),
        "lastTimestamp": _nullable(c["last_ts"][rows]),
    }
    if violations is not None:  # the audit's kinds: a Python call per row, only when some partition breaks one
        ids, names = topic_ids.to_pylist(), pids.tolist()
        columns["violations"] = pa.array(
            [violations(t, p) for t, p in zip(ids, names, strict=True)], pa.list_(pa.string())
        )
    if state.log_info:  # replicas' log end offsets, kept for the partitions that need an unclean election (few)
        at = {state.row_of(tid, pid): info for (tid, pid), info in state.log_info.items() if info}
        found = [(i, at[r]) for i, r in enumerate(rows.tolist()) if r in at] if at else []
        if found:
            texts: list[str | None] = [None] * len(rows)
            for i, info in found:
                texts[i] = orjson.dumps(info, option=orjson.OPT_NON_STR_KEYS).decode()
            columns["logInfo"] = pa.array(texts, pa.string())
    if state.operator_steps:  # an operator's recovery steps (`elrwatch recover`): rarer still
        by_row = {state.row_of(tid, pid): steps for (tid, pid), steps in state.operator_steps.items() if steps}
        picked = [(i, by_row[r]) for i, r in enumerate(rows.tolist()) if r in by_row]
        if picked:
            step_texts: list[str | None] = [None] * len(rows)
            for i, steps in picked:
                step_texts[i] = orjson.dumps(steps).decode()
            columns["operatorSteps"] = pa.array(step_texts, pa.string())
    return pa.table(columns)


def _pylist(column: Any) -> list[Any]:
    """A column's values as a list; a dictionary column through its indices (Arrow's own conversion of one is
    ~25x slower)."""
    if pa.types.is_dictionary(column.type):
        out: list[Any] = []
        for chunk in column.chunks:
            names = chunk.dictionary.to_pylist()
            if chunk.null_count:
                out.extend([None if i is None else names[i] for i in chunk.indices.to_pylist()])
            else:
                out.extend([names[i] for i in chunk.indices.to_pylist()])
        return out
    return column.to_pylist()


def rows_of(table: Any) -> Iterator[list[Any]]:
    """The `partition_row` lists of a `changed_table` (or of a table read back from its Arrow IPC form): what the
    object core's `report.stored_partition` gives for the same partitions, the stored form as JSON."""
    if table is None or table.num_rows == 0:
        return
    col = {name: _pylist(table.column(name)) for name in table.column_names}
    n = table.num_rows
    none_list: list[Any] = [None] * n
    kinds = col.get("violations") or [[]] * n
    infos = col.get("logInfo") or none_list
    operator = col.get("operatorSteps") or none_list
    dumps, loads, non_str = orjson.dumps, orjson.loads, orjson.OPT_NON_STR_KEYS
    for (
        topic_id, pid, name, status, leader, min_isr, ms, replicas, isr, elr, lke, le, pe, lrs, adding, removing,
        so, llc, pos, lo, lts, kind, info, steps,
    ) in zip(
        col["topicId"], col["partitionId"], col["topic"], col["status"], col["leader"], col["minIsr"],
        col["sinceMs"], col["replicas"], col["isr"], col["elr"], col["lastKnownElr"], col["leaderEpoch"],
        col["partitionEpoch"], col["leaderRecoveryState"], col["adding"], col["removing"], col["sinceOffset"],
        col["lastLeaderChange"], col["position"], col["lastOffset"], col["lastTimestamp"], kinds, infos,
        operator, strict=True,
    ):  # fmt: skip
        stored = (
            replicas, isr, elr, lke, leader, le, pe, lrs, adding, removing, status, ms, so, llc, pos, lo, lts,
            kind, None if info is None else loads(info),
        )  # fmt: skip
        if steps is not None:  # only a partition with operator steps has this last value (report.stored_partition)
            stored = (*stored, loads(steps))
        yield [
            topic_id,
            pid,
            name,
            status,
            leader,
            len(isr),
            min_isr,
            ms,
            dumps(stored, option=non_str).decode(),
            sorted({*replicas, *adding}),
        ]


def transition_table(state: ColumnarView) -> Any:
    """Every status transition since the previous call, in order, as an Arrow table (the store's transition
    fields, `Transition.to_dict`'s names); None if none. Forgets them. `transitions_of` gives the dicts."""
    columns = state.transition_columns()
    if columns is None:
        return None
    topics, pids, old, new, at_ms, offsets, positions = columns
    index = pa.array(topics, pa.int32())
    return pa.table(
        {
            "topic": pa.DictionaryArray.from_arrays(index, pa.array(state.topic_names, pa.string())),
            "topicId": pa.DictionaryArray.from_arrays(index, pa.array(state.topic_ids, pa.string())),
            "partitionId": pa.array(pids, pa.int32()),
            "from": pa.DictionaryArray.from_arrays(
                pa.array(np.maximum(old, 0), pa.int32(), mask=old < 0), pa.array(STATUSES, pa.string())
            ),
            "to": _names(new, STATUSES),
            "atMs": _nullable(at_ms),
            "offset": _nullable(offsets),
            "position": pa.array(positions.tolist(), pa.string()),
        }
    )


def transitions_of(table: Any) -> list[dict[str, Any]]:
    """The `Transition.to_dict` dicts of a `transition_table` (or one read back from its Arrow IPC form)."""
    if table is None or table.num_rows == 0:
        return []
    names = table.column_names
    columns = [_pylist(table.column(n)) for n in names]
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def drain(state: ColumnarView, violations: ViolationKinds | None = None) -> Output:
    """Return and forget what changed since the previous call (`ClusterState.drain_changes` + the payload's rows);
    ``violations``: each changed partition's violation kinds for its stored form (none by default)."""
    state.flush()
    changed_topics, removed_topics = state.image.topics.drain()
    out = Output(
        partitions=changed_table(state, violations),
        removed=[[tid, pid] for tid, pid, _name in state.removed_out],
        removed_topics=[tid for tid, _name in removed_topics],
        transitions=transition_table(state),
        brokers=state.image.brokers.drain(),
        topics=[t.topic_id for t in changed_topics],
    )
    state.forget_changes()
    return out


# --- gauges -----------------------------------------------------------------------------------------------------


def _live(state: ColumnarView) -> tuple[slice | np.ndarray, int]:
    """The live rows (a slice when every row is: the columns are then read as views, not copied) and their count."""
    size = state.table.size
    live = state.table.alive[:size] & (state.table.status[:size] >= 0)
    if live.all():
        return slice(0, size), size
    rows = np.flatnonzero(live)
    return rows, len(rows)


def _holds_each(holders: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each slot of ``wanted`` (k × w dense indices): whether the row's ``holders`` (k × w) hold it."""
    return (wanted[:, :, None] == holders[:, None, :]).any(axis=2)


def insight_counts(state: ColumnarView) -> Counter[Any]:
    """The insight counters (state/insight.py's definitions) from the columns, as bincounts."""
    state.flush()
    brokers = state.image.brokers.by_id
    c = state.table.cols
    live, n_live = _live(state)
    counts: Counter[Any] = Counter()
    if n_live == 0:
        return counts
    lengths, members = state.tuples.arrays()
    broker_ids = state.tuples.broker_ids
    n_dense = len(broker_ids)
    active = active_dense(state)
    causes = np.array([insight.broker_cause(brokers.get(b)) for b in broker_ids] + [-1], dtype=np.int8)
    rep, isr, elr = c["replicas"][live], c["isr"][live], c["elr"][live]
    leader, topics = c["leader"][live], c["topic"][live]
    min_isr = np.array(state.topic_min_isr, dtype=np.int64)[topics]
    n_isr = lengths[isr]

    def per_broker(kind: str, dense: np.ndarray) -> None:
        values = np.bincount(dense[dense >= 0], minlength=n_dense)
        for index in np.flatnonzero(values).tolist():
            counts[(kind, broker_ids[index])] = int(values[index])

    # missing: replicas not in the ISR (only rows whose replica and ISR tuples differ can have some)
    cand = np.flatnonzero(rep != isr)
    wanted, holders = members[rep[cand]], members[isr[cand]]
    missing = (wanted >= 0) & ~_holds_each(holders, wanted)
    per_broker(insight.MISSING, wanted[missing])
    # blocking: the ISR's members when |ISR| <= effective min ISR
    per_broker(insight.BLOCKING, members[isr[n_isr <= min_isr]].ravel())
    # critical: the only active member of ISR ∪ ELR of a partition with a leader
    act = active[members]
    low_t = np.where(act, members, n_dense + 1).min(axis=1)
    high_t = np.where(act, members, -1).max(axis=1)
    low, high = low_t[isr], high_t[isr]
    with_elr = np.flatnonzero(elr != 0)
    low[with_elr] = np.minimum(low[with_elr], low_t[elr[with_elr]])
    high[with_elr] = np.maximum(high[with_elr], high_t[elr[with_elr]])
    critical = np.where((low == high) & (leader != NO_LEADER), low, -1)
    per_broker(insight.OFFLINE, critical)
    # per topic
    under = n_isr < min_isr
    for kind, mask in (
        (insight.TOPIC_UNDER, under),
        (insight.TOPIC_OFFLINE, leader == NO_LEADER),
        (insight.TOPIC_AT, n_isr == min_isr),
    ):
        values = np.bincount(topics[mask], minlength=len(state.topic_ids))
        for t in np.flatnonzero(values).tolist():
            counts[(kind, state.topic_ids[t])] = int(values[t])
    # by cause: the highest cause among an under-min-ISR partition's missing replicas (lagging if none)
    u = np.flatnonzero(under)
    wanted, holders = members[rep[u]], members[isr[u]]
    missing = (wanted >= 0) & ~_holds_each(holders, wanted)
    cause = np.where(missing, causes[wanted], -1).max(axis=1, initial=-1)
    cause = np.where(cause >= 0, cause, insight.CAUSE_LAGGING)
    values = np.bincount(cause, minlength=len(insight.CAUSES))
    for code in np.flatnonzero(values).tolist():
        counts[(insight.CAUSE, code)] = int(values[code])
    return counts


def partition_gauges(state: ColumnarView, counts: Counter[Any] | None = None) -> Gauges:
    """`gauges.partition_gauges` of the store's partitions (``counts``: `insight_counts`, computed when not given)."""
    state.flush()
    live, n_live = _live(state)
    flags = state.table.flags[live].astype(np.int64)
    status = state.table.status[live]
    by_status = np.bincount(status, minlength=len(STATUSES)).tolist()
    return counted_partition_gauges(
        state.image,
        flags={bit: int(np.count_nonzero(flags & bit)) for bit in FLAG_BITS},
        electable=np.bincount((flags >> ELECTABLE_SHIFT) & 3, minlength=4).tolist(),
        statuses=dict(zip(STATUSES, by_status, strict=True)),
        partitions=n_live,
        violations=state.violations.counts,
        insight_counts=insight_counts(state) if counts is None else counts,
        counters=state.counters,
        candidate_known=candidate_known_partitions(state.image, state.log_info, state.partition),
        unregistered_replicas=unregistered_replica_counts(state, live),
        unclean_restart_pending=unclean_restart_pending(state, live),
    )


def unregistered_replica_counts(state: ColumnarView, live: slice | np.ndarray) -> dict[int, int]:
    """Broker id → the ``live`` partitions whose replicas name it, for each broker without a registration."""
    tuples = state.tuples
    brokers = unregistered_brokers(state.image, tuples.broker_index)
    if not brokers:
        return {}
    _, members = tuples.arrays()
    replicas = members[state.table.cols["replicas"][: state.table.size][live]]
    return {b: int(np.count_nonzero((replicas == tuples.broker_index[b]).any(axis=1))) for b in brokers}


def unclean_restart_pending(state: ColumnarView, live: slice | np.ndarray) -> int:
    """`gauges.loses_last_electable` over the live rows, as vectors: leaderless, ISR ∪ ELR not empty, each member a
    broker predicted to restart uncleanly (`gauges.restart_doomed`)."""
    doomed = restart_doomed(state.image)
    dense = [state.tuples.broker_index[b] for b in doomed if b in state.tuples.broker_index]
    if not dense:
        return 0
    lengths, members = state.tuples.arrays()
    only_doomed = (np.isin(members, dense) | (members < 0)).all(axis=1)  # per tuple; an empty one holds none
    c = state.table.cols
    size = state.table.size
    isr, elr = c["isr"][:size][live], c["elr"][:size][live]
    pending = (
        (c["leader"][:size][live] < 0) & only_doomed[isr] & only_doomed[elr] & ((lengths[isr] > 0) | (lengths[elr] > 0))
    )
    return int(np.count_nonzero(pending))


# --- topic documents --------------------------------------------------------------------------------------------


def _owned_counts(state: ColumnarView) -> Iterator[tuple[str, int]]:
    for topic_id, t in state.topic_index.items():
        yield topic_id, state._topic_size[t]


def topic_documents(state: ColumnarView, drained: Output, emitted: dict[str, int]) -> dict[str, dict[str, Any]]:
    """`report.topic_doc` of each live topic that changed (``drained``: the batch's `drain`) or whose owned
    partition count differs from ``emitted`` (topic id → count last emitted; updated, the removed topics dropped
    afterwards, as `bucket_payload` does)."""
    image = state.image
    owned = dict(_owned_counts(state))
    dirty = set(drained.topics)
    out: dict[str, dict[str, Any]] = {}
    for topic in image.topics.by_id.values():
        n = owned.get(topic.topic_id, 0)
        if topic.topic_id not in dirty and emitted.get(topic.topic_id) == n:
            continue
        emitted[topic.topic_id] = n
        t = state.topic_index.get(topic.topic_id)
        if t is not None:
            rf, min_isr, unclean = state._replication_factor(t), state.topic_min_isr[t], state.topic_unclean[t]
        else:
            rf, min_isr = state.replication_factor(topic.topic_id), state.effective_min_isr(topic)
            unclean = image.configs.unclean_enabled(topic.name)
        out[topic.topic_id] = {
            "topic": topic.name,
            "topicId": topic.topic_id,
            "partitionCount": n,
            "replicationFactor": rf,
            "configs": dict(sorted(image.configs.of_topic.get(topic.name, {}).items())),
            "effectiveMinIsr": min_isr,
            "uncleanLeaderElectionEnable": unclean,
        }
    for topic_id in drained.removed_topics:
        emitted.pop(topic_id, None)
    return out
