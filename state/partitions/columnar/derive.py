"""Derived status as vectors: `status.derive` (the object store's, the specification) over a segment's or a set of
rows' columns, giving status codes (indices into `status.STATUSES`) and flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from elrwatch.state.model import NO_LEADER
from elrwatch.state.partitions.columnar.table import (
    S_AT,
    S_ELECTING,
    S_HEALTHY,
    S_MANUAL,
    S_RECOVERING,
    S_UNDER,
    S_UR,
    S_WAITING,
)
from elrwatch.state.status import (
    ELECTABLE_SHIFT,
    F_AT_MIN_ISR,
    F_LAST_REPLICA_STANDING,
    F_LEADERLESS,
    F_MANUAL,
    F_RECOVERING,
    F_UNCLEAN_RECOVERY,
    F_UNDER_MIN_ISR,
    F_UNDER_REPLICATED,
)

if TYPE_CHECKING:
    from elrwatch.state.partitions.columnar.view import ColumnarView


@dataclass
class Derived:
    """Per row: its status code and its flags."""

    status: np.ndarray
    flags: np.ndarray


def active_dense(store: ColumnarView) -> np.ndarray:
    """Whether each dense broker index (`TupleTable.broker_ids`) is active, with a False appended (the members'
    padding, -1, reads it). Kept until a broker changes (`ColumnarPartitions.react`)."""
    ids = store.tuples.broker_ids
    active = store._active
    if active is None or len(active) != len(ids) + 1:
        is_active = store.image.brokers.is_active
        active = np.append(np.fromiter((is_active(b) for b in ids), dtype=bool, count=len(ids)), False)
        store._active = active
    return active


def derive(
    store: ColumnarView,
    replicas: np.ndarray,
    isr: np.ndarray,
    elr: np.ndarray,
    lke: np.ndarray,
    leader: np.ndarray,
    lrs: np.ndarray,
    topics: np.ndarray,
) -> Derived:
    """`status.derive` of the given rows' states (tuple ids, leader, leader recovery state, topic index)."""
    lengths, members = store.tuples.arrays()
    active = active_dense(store)
    live_count = active[members].sum(axis=1)
    min_isr = np.array(store.topic_min_isr, dtype=np.int64)[topics]
    unclean = np.array(store.topic_unclean, dtype=bool)[topics]
    elr_on = store.image.features.elr_enabled
    n_isr = lengths[isr]
    n_rep = lengths[replicas]
    n_elr = lengths[elr]
    flags = np.where(n_isr < min_isr, F_UNDER_MIN_ISR, np.where(n_isr == min_isr, F_AT_MIN_ISR, 0))
    flags |= np.where(n_isr < n_rep, F_UNDER_REPLICATED, 0)
    if not elr_on:
        flags |= np.where((n_isr == 1) & (min_isr >= 2), F_LAST_REPLICA_STANDING, 0)
    live = live_count[isr] + live_count[elr]
    both = np.flatnonzero((n_elr > 0) & (n_isr > 0))
    if len(both):  # ELR members also in the ISR count once
        em = members[elr[both]]
        im = members[isr[both]]
        in_isr = (em[:, :, None] == im[:, None, :]).any(axis=2) & (em >= 0)
        live[both] -= (in_isr & active[em]).sum(axis=1)
    flags |= np.minimum(live, 3) << ELECTABLE_SHIFT
    recovering = lrs == 1
    flags |= np.where(recovering, F_RECOVERING | F_UNCLEAN_RECOVERY, 0)
    status = np.full(len(isr), S_HEALTHY, dtype=np.int8)
    status[(flags & F_UNDER_REPLICATED) != 0] = S_UR
    status[(flags & F_AT_MIN_ISR) != 0] = S_AT
    status[(flags & F_UNDER_MIN_ISR) != 0] = S_UNDER
    status[recovering] = S_RECOVERING
    leaderless = np.flatnonzero(leader == NO_LEADER)
    if len(leaderless):
        li = isr[leaderless]
        clean = np.where(lengths[li] > 0, li, elr[leaderless])
        has_clean = lengths[clean] > 0
        live_path = has_clean & (live_count[clean] > 0)
        lke_l = lke[leaderless]
        via_lke = ~has_clean & elr_on & (lengths[lke_l] == 1)
        live_path |= via_lke & active[members[lke_l, 0]]
        un = unclean[leaderless]
        via_unclean = ~has_clean & ~via_lke & un & (n_rep[leaderless] > 0)
        has_path = has_clean | via_lke | via_unclean
        extra = np.where(via_lke | via_unclean, F_UNCLEAN_RECOVERY, 0)
        periodic = ~live_path & un & (live_count[replicas[leaderless]] > 0)
        live_path |= periodic
        extra |= np.where(periodic, F_UNCLEAN_RECOVERY, 0)
        extra |= F_LEADERLESS
        extra |= np.where(~has_path, F_MANUAL, 0)
        flags[leaderless] |= extra
        sub = np.where(live_path, S_ELECTING, S_WAITING).astype(np.int8)
        sub[recovering[leaderless]] = S_RECOVERING
        sub[~has_path] = S_MANUAL
        status[leaderless] = sub
    return Derived(status, flags.astype(np.int16))
