"""A columnar segment applied as vectors (`ColumnarPartitions.flush`): the partition records gathered in log order
(`ColumnarPartitions.stage`, `stage_lines`) sorted by row (stable: a row's records keep their order), and per field
the last value present for a row wins (a forward fill), epochs counted with cumulative sums, the derived status and
flags computed for the state after every record (`derive`), so a partition changed twice in a segment yields both
of its transitions, each with its record's offset; the elections counted (`elections`); the rows written back."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from elrwatch.state.model import NO_LEADER_CHANGE
from elrwatch.state.partitions.columnar.derive import derive
from elrwatch.state.partitions.columnar.elections import count_segment
from elrwatch.state.partitions.columnar.table import NONE, TUPLE_FIELDS, segment_inputs

if TYPE_CHECKING:
    from elrwatch.state.partitions.columnar.view import ColumnarView


def apply_segment(store: ColumnarView) -> None:
    """Apply the store's segment to its table, and start a new one."""
    m = len(store._seg_rows)
    rows_in = np.array(store._seg_rows, dtype=np.int64)
    order = np.argsort(rows_in, kind="stable")
    rows = rows_in[order]
    pieces = store._seg_pieces
    table = store.table
    cols = table.cols
    new = slice(store._segment_start, table.size)
    created_from = new.start
    cols["topic"][new] = store._seg_new_topic
    cols["pid"][new] = store._seg_new_pid
    cols["alive"][new] = True
    store._segment_reset()
    store.fast_records += m
    inputs = segment_inputs(pieces, store.tuples)
    kind = np.where(inputs.is_pr, 0, 1).astype(np.int8)[order]
    fields = {name: ids[order] for name, ids in inputs.tuples.items()}
    leader = inputs.leader[order]
    le = inputs.le[order]
    pe = inputs.pe[order]
    lrs = inputs.lrs[order]
    offsets = inputs.offsets[order]
    ts = inputs.ts[order]
    positions = inputs.positions

    index = np.arange(m)
    starts = np.ones(m, dtype=bool)
    starts[1:] = rows[1:] != rows[:-1]
    ends = np.ones(m, dtype=bool)
    ends[:-1] = starts[1:]
    start = np.maximum.accumulate(np.where(starts, index, 0))

    def fill(present: np.ndarray, values: np.ndarray, column: str) -> np.ndarray:
        last = np.maximum.accumulate(np.where(present, index, -1))
        has = last >= start
        return np.where(has, values[np.maximum(last, 0)], cols[column][rows])

    is_pr = kind == 0
    post = {name: fill(fields[name] >= 0, fields[name], name) for name in TUPLE_FIELDS}
    post_leader = fill(is_pr | (leader != NO_LEADER_CHANGE), leader, "leader")
    post_lrs = fill(is_pr | (lrs != -1), lrs, "lrs")
    post_offset = fill(is_pr | (offsets != NONE), offsets, "last_offset")
    post_ts = fill(is_pr | (ts != NONE), ts, "last_ts")
    # epochs: the last PartitionRecord's, or the table's, plus the changes since
    last_pr = np.maximum.accumulate(np.where(is_pr, index, -1))
    has_pr = last_pr >= start
    anchor = np.maximum(last_pr, 0)
    changes = np.cumsum(kind == 1)
    before_start = changes[start] - (kind[start] == 1)
    pe_post = np.where(has_pr, pe[anchor] + (changes - changes[anchor]), cols["pe"][rows] + (changes - before_start))
    bumps = np.cumsum((kind == 1) & (leader != NO_LEADER_CHANGE))
    bumps_before = bumps[start] - ((kind[start] == 1) & (leader[start] != NO_LEADER_CHANGE))
    le_post = np.where(has_pr, le[anchor] + (bumps - bumps[anchor]), cols["le"][rows] + (bumps - bumps_before))

    topics = cols["topic"][rows]
    derived = derive(store, post["replicas"], post["isr"], post["elr"], post["lke"], post_leader, post_lrs, topics)
    llc = count_segment(store, rows, kind, starts, start, index, created_from, leader, lrs, post, post_leader, post_lrs)
    previous = np.empty(m, dtype=np.int8)
    previous[1:] = derived.status[:-1]
    previous[starts] = cols["status"][rows[starts]]
    changed = derived.status != previous
    if changed.any():
        where = np.flatnonzero(changed)
        log_order = np.argsort(order[where], kind="stable")
        picked = where[log_order]
        store._transitions.append((rows[picked], previous[picked], derived.status[picked], ts[picked], offsets[picked]))
        original = order[picked]
        store._positions.append([positions[i] for i in original.tolist()])
        last_change = np.maximum.accumulate(np.where(changed, index, -1))
        stamped = ends & (last_change >= start)
        at = last_change[stamped]
        cols["since_ms"][rows[stamped]] = ts[at]
        cols["since_offset"][rows[stamped]] = offsets[at]
    final = rows[ends]
    for name in TUPLE_FIELDS:
        cols[name][final] = post[name][ends]
    cols["leader"][final] = post_leader[ends]
    cols["lrs"][final] = post_lrs[ends]
    cols["le"][final] = le_post[ends]
    cols["pe"][final] = pe_post[ends]
    cols["last_offset"][final] = post_offset[ends]
    cols["last_ts"][final] = post_ts[ends]
    cols["status"][final] = derived.status[ends]
    cols["flags"][final] = derived.flags[ends]
    cols["changed"][final] = True
    cols["llc"][final] = llc[ends]
    position_of = order[ends]
    cols["position"][final] = np.array([positions[i] for i in position_of.tolist()], dtype=object)
