"""What a bucket emits after a batch, built from a `columnar.ColumnarState`'s columns: the object core's
`streaming.bucket.bucket_payload` parts that come from `ClusterState.drain_changes` and `gauges.partition_gauges`.

* `drain`: the rows changed since the previous drain as `partition_row` lists (their stored form as
  `report.stored_partition` writes it), the removed partitions and topics, the status transitions, the changed
  brokers and topics;
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
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson

from elrwatch.state import insight
from elrwatch.state.audit import VIOLATION_KINDS
from elrwatch.state.cluster import Transition
from elrwatch.state.columnar import NONE, ColumnarState
from elrwatch.state.columnar_elections import LEADER_CHANGES
from elrwatch.state.gauges import ELECTABLE_LABELS, Gauges, insight_gauges, key
from elrwatch.state.model import NO_LEADER, BrokerState
from elrwatch.state.status import (
    ELECTABLE_SHIFT,
    F_AT_MIN_ISR,
    F_LAST_REPLICA_STANDING,
    F_LEADERLESS,
    F_MANUAL,
    F_RECOVERING,
    F_UNCLEAN_RECOVERY,
    F_UNDER_MIN_ISR,
    STATUSES,
)

#: A partition's violation kinds, by (topic id, partition id).
ViolationKinds = Callable[[str, int], list[str]]


@dataclass
class Output:
    """What changed since the previous `drain` (the parts of a bucket's payload that `drain_changes` feeds)."""

    partitions: list[list[Any]] = field(default_factory=list)  # `partition_row` lists, in row order
    removed: list[list[Any]] = field(default_factory=list)  # [topic id, partition id]
    removed_topics: list[str] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    brokers: list[BrokerState] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)  # ids of live topics that changed, sorted


def _opt_list(values: np.ndarray) -> list[int | None]:
    return [None if v == NONE else v for v in values.tolist()]


def _no_violations(_topic_id: str, _partition_id: int) -> list[str]:
    return []


def changed_rows(state: ColumnarState, violations: ViolationKinds | None = None) -> list[list[Any]]:
    """The live rows changed since the previous call as `partition_row` lists; clears the changed mask."""
    table = state.table
    size = table.size
    c = table.cols
    mask = c["changed"][:size]
    rows = np.flatnonzero(mask & c["alive"][:size])
    mask[:] = False
    if len(rows) == 0:
        return []
    kinds_of = violations or _no_violations
    tup = state.tuples.tuples
    topic_ids, names = state.topic_ids, state.topic_names
    min_isr = state.topic_min_isr
    log_info = state.log_info
    brokers_of: dict[tuple[int, int], list[int]] = {}
    out = []
    columns = zip(
        c["topic"][rows].tolist(),
        c["pid"][rows].tolist(),
        c["replicas"][rows].tolist(),
        c["isr"][rows].tolist(),
        c["elr"][rows].tolist(),
        c["lke"][rows].tolist(),
        c["leader"][rows].tolist(),
        c["le"][rows].tolist(),
        c["pe"][rows].tolist(),
        c["lrs"][rows].tolist(),
        c["adding"][rows].tolist(),
        c["removing"][rows].tolist(),
        c["status"][rows].tolist(),
        _opt_list(c["since_ms"][rows]),
        _opt_list(c["since_offset"][rows]),
        c["llc"][rows].tolist(),
        c["position"][rows].tolist(),
        _opt_list(c["last_offset"][rows]),
        _opt_list(c["last_ts"][rows]),
        strict=True,
    )
    dumps, non_str = orjson.dumps, orjson.OPT_NON_STR_KEYS
    for t, pid, rep, isr, elr, lke, leader, le, pe, lrs, adding, removing, st, ms, so, llc, pos, lo, lts in columns:
        topic_id = topic_ids[t]
        status = STATUSES[st]
        replicas = tup[rep]
        isr_tuple = tup[isr]
        stored = (
            replicas,
            isr_tuple,
            tup[elr],
            tup[lke],
            leader,
            le,
            pe,
            lrs,
            tup[adding],
            tup[removing],
            status,
            ms,
            so,
            LEADER_CHANGES[llc],
            pos,
            lo,
            lts,
            kinds_of(topic_id, pid),
            log_info.get((topic_id, pid)) or None,
        )
        pair = (rep, adding)
        brokers = brokers_of.get(pair)
        if brokers is None:
            brokers = brokers_of[pair] = sorted({*replicas, *tup[adding]})
        out.append(
            [
                topic_id,
                pid,
                names[t],
                status,
                leader,
                len(isr_tuple),
                min_isr[t],
                ms,
                dumps(stored, option=non_str).decode(),
                list(brokers),
            ]
        )
    return out


def drain(state: ColumnarState, violations: ViolationKinds | None = None) -> Output:
    """Return and forget what changed since the previous call (`ClusterState.drain_changes` + the payload's rows);
    ``violations``: each changed partition's violation kinds for its stored form (none by default)."""
    core = state.core
    out = Output(
        partitions=changed_rows(state, violations),
        removed=[[tid, pid] for tid, pid, _name in state.removed_out],
        removed_topics=[tid for tid, _name in state.removed_topics_out],
        transitions=state.drain_transitions(),
        brokers=[core.brokers[b] for b in sorted(state.dirty_brokers) if b in core.brokers],
        topics=sorted(t for t in state.dirty_topics if t in core.topics),
    )
    state.forget_changes()
    return out


# --- gauges -----------------------------------------------------------------------------------------------------


def _live(state: ColumnarState) -> tuple[slice | np.ndarray, int]:
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


def insight_counts(state: ColumnarState) -> Counter[Any]:
    """`ClusterState.insight_counts` from the columns (state/insight.py's definitions, as bincounts)."""
    core = state.core
    c = state.table.cols
    live, n_live = _live(state)
    counts: Counter[Any] = Counter()
    if n_live == 0:
        return counts
    lengths, members = state.tuples.arrays()
    broker_ids = state.tuples.broker_ids
    n_dense = len(broker_ids)
    active = state._active_dense()
    causes = np.array([insight.broker_cause(core.brokers.get(b)) for b in broker_ids] + [-1], dtype=np.int8)
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


def candidate_known_partitions(state: ColumnarState) -> int:
    """`gauges.candidate_known_partitions` over the engine's log infos and rows."""
    core = state.core
    c = state.table.cols
    known = 0
    for (topic_id, partition_id), infos in state.log_info.items():
        row = state.row_of(topic_id, partition_id)
        if row is None or c["leader"][row] >= 0 or not int(c["flags"][row]) & (F_UNCLEAN_RECOVERY | F_MANUAL):
            continue
        replicas = state.tuples.tuples[c["replicas"][row]]
        for broker_id, info in infos.items():
            broker = core.brokers.get(broker_id)
            if (
                broker_id in replicas
                and broker is not None
                and core.is_active(broker_id)
                and info.get("brokerEpoch") == broker.epoch
            ):
                known += 1
                break
    return known


def partition_gauges(state: ColumnarState, counts: Counter[Any] | None = None) -> Gauges:
    """`gauges.partition_gauges` of the engine's partitions (``counts``: `insight_counts`, computed when not
    given); ``elrwatch_invariant_violations`` only from an engine that audits (one with ``violation_counts``)."""
    live, n_live = _live(state)
    flags = state.table.flags[live].astype(np.int64)
    status = state.table.status[live]

    def flagged(bit: int) -> int:
        return int(np.count_nonzero(flags & bit))

    out: Gauges = {
        key("elrwatch_global_under_min_isr_partitions"): flagged(F_UNDER_MIN_ISR),
        key("elrwatch_at_min_isr_partitions"): flagged(F_AT_MIN_ISR),
        key("elrwatch_offline_partitions"): flagged(F_LEADERLESS),
        key("elrwatch_unclean_recovery_partitions"): flagged(F_UNCLEAN_RECOVERY),
        key("elrwatch_unclean_recovery_candidate_known_partitions"): candidate_known_partitions(state),
        key("elrwatch_manual_leader_election_required_partitions"): flagged(F_MANUAL),
        key("elrwatch_recovering_partitions"): flagged(F_RECOVERING),
        key("elrwatch_last_replica_standing_partitions"): flagged(F_LAST_REPLICA_STANDING),
        key("elrwatch_partition_count"): n_live,
    }
    electable = np.bincount((flags >> ELECTABLE_SHIFT) & 3, minlength=4)
    for label, n in zip(ELECTABLE_LABELS, electable.tolist(), strict=True):
        out[key("elrwatch_electable_leaders_partitions", live_electable=label)] = n
    by_status = np.bincount(status, minlength=len(STATUSES))
    for name, n in zip(STATUSES, by_status.tolist(), strict=True):
        out[key("elrwatch_partitions", status=name)] = n
    violation_counts = getattr(state, "violation_counts", None)
    if violation_counts is not None:
        for kind in VIOLATION_KINDS:
            out[key("elrwatch_invariant_violations", kind=kind)] = violation_counts[kind]
    view = SimpleNamespace(
        insight_counts=insight_counts(state) if counts is None else counts,
        brokers=state.core.brokers,
        topics=state.core.topics,
    )
    out.update(insight_gauges(view))
    counters = state.counters
    out[key("elrwatch_unclean_recovery_finished_total")] = counters["unclean_recovery_finished"]
    out[key("elrwatch_elr_elections_total")] = counters["elr_elections"]
    out[key("elrwatch_unclean_elections_total")] = counters["unclean_elections"]
    out[key("elrwatch_last_known_leader_elections_total")] = counters["last_known_leader_elections"]
    return out


# --- topic documents --------------------------------------------------------------------------------------------


def _owned_counts(state: ColumnarState) -> Iterator[tuple[str, int]]:
    for topic_id, t in state.topic_index.items():
        yield topic_id, state._topic_size[t]


def topic_documents(state: ColumnarState, drained: Output, emitted: dict[str, int]) -> dict[str, dict[str, Any]]:
    """`report.topic_doc` of each live topic that changed (``drained``: the batch's `drain`) or whose owned
    partition count differs from ``emitted`` (topic id → count last emitted; updated, the removed topics dropped
    afterwards, as `bucket_payload` does)."""
    core = state.core
    owned = dict(_owned_counts(state))
    dirty = set(drained.topics)
    out: dict[str, dict[str, Any]] = {}
    for topic in core.topics.values():
        n = owned.get(topic.topic_id, 0)
        if topic.topic_id not in dirty and emitted.get(topic.topic_id) == n:
            continue
        emitted[topic.topic_id] = n
        t = state.topic_index.get(topic.topic_id)
        if t is not None:
            rf, min_isr, unclean = state._replication_factor(t), state.topic_min_isr[t], state.topic_unclean[t]
        else:
            rf, min_isr = core.replication_factor(topic), core.effective_min_isr(topic)
            unclean = core.unclean_enabled(topic)
        out[topic.topic_id] = {
            "topic": topic.name,
            "topicId": topic.topic_id,
            "partitionCount": n,
            "replicationFactor": rf,
            "configs": dict(sorted(core.topic_configs.get(topic.name, {}).items())),
            "effectiveMinIsr": min_isr,
            "uncleanLeaderElectionEnable": unclean,
        }
    for topic_id in drained.removed_topics:
        emitted.pop(topic_id, None)
    return out
