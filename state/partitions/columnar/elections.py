"""Election counters and the last leader change kind of a columnar segment (the object store's
`ObjectPartitions._count_election` as vectors).

A segment's records are sorted by row (stable, so a row's records keep their log order); for each record the
state before it (``pre_*``: the previous record's state of its row, or the table's) and after it (``post_*``) are
known. A record counts as the core counts it: a PartitionRecord that replaces a partition, a
PartitionChangeRecord that sets the leader or the leader recovery state.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from elrwatch.state.model import (
    LEADER_CHANGE_CLEAN,
    LEADER_CHANGE_ELR,
    LEADER_CHANGE_LAST_KNOWN_LEADER,
    LEADER_CHANGE_LOST,
    LEADER_CHANGE_NONE,
    LEADER_CHANGE_UNCLEAN,
    LRS_RECOVERED,
    LRS_RECOVERING,
    NO_LEADER,
    NO_LEADER_CHANGE,
)

if TYPE_CHECKING:
    from elrwatch.state.partitions.columnar.view import ColumnarView

#: The last leader change kinds by code (the engine's ``llc`` column).
LEADER_CHANGES: Final = (
    LEADER_CHANGE_NONE,
    LEADER_CHANGE_CLEAN,
    LEADER_CHANGE_ELR,
    LEADER_CHANGE_LAST_KNOWN_LEADER,
    LEADER_CHANGE_UNCLEAN,
    LEADER_CHANGE_LOST,
)
K_NONE, K_CLEAN, K_ELR, K_LKL, K_UNCLEAN, K_LOST = range(len(LEADER_CHANGES))
#: A broker id no tuple holds (the tuple members' padding is -1).
_ABSENT: Final = -9


@dataclass
class Segment:
    """A segment's records sorted by row: what the election bookkeeping reads (tuple fields are tuple ids)."""

    is_pr: np.ndarray  # bool: PartitionRecord (else PartitionChangeRecord)
    created: np.ndarray  # bool: the PartitionRecord that created its row
    leader_field: np.ndarray  # the record's leader (a PartitionRecord's: its leader, never NO_LEADER_CHANGE)
    lrs_field: np.ndarray  # the record's leaderRecoveryState (-1 absent; a PartitionRecord's: its value)
    pre_leader: np.ndarray
    pre_lrs: np.ndarray
    pre_isr: np.ndarray
    pre_elr: np.ndarray
    pre_lke: np.ndarray
    post_leader: np.ndarray
    post_lrs: np.ndarray
    post_isr: np.ndarray


def _holds(members: np.ndarray, dense: np.ndarray, tuple_ids: np.ndarray) -> np.ndarray:
    """Whether each tuple holds its dense broker index."""
    return (members[tuple_ids] == dense[:, None]).any(axis=1)


def count(seg: Segment, members: np.ndarray, broker_index: dict[int, int], counters: Counter[str]) -> np.ndarray:
    """Add the segment's elections to ``counters``; each record's last leader change kind code when it sets one
    (`K_NONE` when it creates its row), else -1. ``members``: the tuple table's member matrix (dense broker
    indices padded with -1), ``broker_index``: broker id → dense index."""
    counted = (
        np.where(seg.is_pr, ~seg.created, (seg.leader_field != NO_LEADER_CHANGE) | (seg.lrs_field != -1)) & ~seg.created
    )
    kinds = np.full(len(counted), -1, dtype=np.int8)
    kinds[seg.created] = K_NONE
    if not counted.any():
        return kinds
    counters["unclean_elections"] += int((counted & (seg.lrs_field == LRS_RECOVERING)).sum())
    counters["unclean_recovery_finished"] += int(
        (counted & (seg.pre_lrs == LRS_RECOVERING) & (seg.post_lrs == LRS_RECOVERED)).sum()
    )
    elect = np.flatnonzero(counted & (seg.leader_field != NO_LEADER_CHANGE))
    if len(elect) == 0:
        return kinds
    winner = seg.post_leader[elect]
    values, inverse = np.unique(winner, return_inverse=True)
    dense = np.array([broker_index.get(int(v), _ABSENT) for v in values], dtype=np.int32)[inverse]
    in_elr = _holds(members, dense, seg.pre_elr[elect])
    counters["elr_elections"] += int(in_elr.sum())
    moved = winner != seg.pre_leader[elect]
    at, winner, dense, in_elr = elect[moved], winner[moved], dense[moved], in_elr[moved]
    if len(at) == 0:
        return kinds
    in_isr = _holds(members, dense, seg.pre_isr[at])
    no_clean = (members[seg.pre_isr[at], 0] < 0) & (members[seg.pre_elr[at], 0] < 0)
    last_known = no_clean & _holds(members, dense, seg.pre_lke[at])
    unclean = (seg.lrs_field[at] == LRS_RECOVERING) | ~_holds(members, dense, seg.post_isr[at])
    kind = np.select(
        [winner == NO_LEADER, in_isr, in_elr, last_known, unclean],
        [K_LOST, K_CLEAN, K_ELR, K_LKL, K_UNCLEAN],
        K_CLEAN,
    )
    counters["last_known_leader_elections"] += int((kind == K_LKL).sum())
    kinds[at] = kind
    return kinds


def count_segment(
    store: ColumnarView,
    rows: np.ndarray,
    kind: np.ndarray,
    starts: np.ndarray,
    start: np.ndarray,
    index: np.ndarray,
    created_from: int,
    leader: np.ndarray,
    lrs: np.ndarray,
    post: dict[str, np.ndarray],
    post_leader: np.ndarray,
    post_lrs: np.ndarray,
) -> np.ndarray:
    """Count a segment's elections into the store's counters; each record's last leader change kind code after it
    (records sorted by row, as the segment's flush sorts them; ``starts``: a row's first record, ``start``: the
    index of its row's first record, ``kind``: 0 for a PartitionRecord, rows from ``created_from`` on are new)."""
    cols = store.table.cols

    def before(after: np.ndarray, column: str) -> np.ndarray:
        out = np.empty_like(after)
        out[1:] = after[:-1]
        out[starts] = cols[column][rows[starts]]
        return out

    seg = Segment(
        is_pr=kind == 0,
        created=starts & (rows >= created_from),
        leader_field=leader,
        lrs_field=lrs,
        pre_leader=before(post_leader, "leader"),
        pre_lrs=before(post_lrs, "lrs"),
        pre_isr=before(post["isr"], "isr"),
        pre_elr=before(post["elr"], "elr"),
        pre_lke=before(post["lke"], "lke"),
        post_leader=post_leader,
        post_lrs=post_lrs,
        post_isr=post["isr"],
    )
    _, members = store.tuples.arrays()
    kinds = count(seg, members, store.tuples.broker_index, store.counters)
    last = np.maximum.accumulate(np.where(kinds >= 0, index, -1))
    return np.where(last >= start, kinds[np.maximum(last, 0)], cols["llc"][rows])
