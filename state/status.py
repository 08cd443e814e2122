"""Derived status of a partition (monitor-spec §3): min-ISR position, electable sets and one status class.

`derive()` is called after every change of a partition and for partitions touched by a broker, config or feature
change, so it is written for speed: plain tuples and a bit mask (`flags`) that the cluster turns into gauges
incrementally (state/gauges.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from elrwatch.state.model import LRS_RECOVERING, NO_LEADER, PartitionState

# Status classes, most severe first (monitor-spec §3). The order is part of the API (severity sort).
MANUAL_ELECTION_REQUIRED = "MANUAL_ELECTION_REQUIRED"
RECOVERING = "RECOVERING"
LEADERLESS_WAITING = "LEADERLESS_WAITING"
LEADERLESS_ELECTING = "LEADERLESS_ELECTING"
UNDER_MIN_ISR = "UNDER_MIN_ISR"
AT_MIN_ISR = "AT_MIN_ISR"
UNDER_REPLICATED = "UNDER_REPLICATED"
HEALTHY = "HEALTHY"

STATUSES: tuple[str, ...] = (
    MANUAL_ELECTION_REQUIRED,
    RECOVERING,
    LEADERLESS_WAITING,
    LEADERLESS_ELECTING,
    UNDER_MIN_ISR,
    AT_MIN_ISR,
    UNDER_REPLICATED,
    HEALTHY,
)
SEVERITY: dict[str, int] = {name: rank for rank, name in enumerate(STATUSES)}
#: Statuses that need an operator's attention (the API's /v1/recommendations).
NEEDS_ATTENTION = frozenset(STATUSES[:5])

# Flag bits (one small int per partition; ints < 256 are shared objects, so most cost no memory).
F_UNDER_MIN_ISR = 1
F_AT_MIN_ISR = 2
F_LEADERLESS = 4
F_RECOVERING = 8
F_UNCLEAN_RECOVERY = 16  # leaderless and the only way back loses data, or RECOVERING
F_MANUAL = 32
F_UNDER_REPLICATED = 64
ELECTABLE_SHIFT = 7  # bits 7-8: min(|live electable|, 3)
ELECTABLE_MASK = 3 << ELECTABLE_SHIFT
#: Last replica standing: ELR off, |ISR| == 1 and effective min ISR >= 2. That replica, after an unclean shutdown,
#: comes back as leader from the ISR and may have lost committed data (what KIP-966's ELR removes).
F_LAST_REPLICA_STANDING = 1 << 9

FLAG_BITS = (
    F_UNDER_MIN_ISR,
    F_AT_MIN_ISR,
    F_LEADERLESS,
    F_RECOVERING,
    F_UNCLEAN_RECOVERY,
    F_MANUAL,
    F_UNDER_REPLICATED,
    F_LAST_REPLICA_STANDING,
)


def electable_bucket(flags: int) -> int:
    """0, 1, 2 or 3 (= 3 or more) live electable replicas, from a partition's flags."""
    return (flags & ELECTABLE_MASK) >> ELECTABLE_SHIFT


def derive(
    partition: PartitionState,
    min_isr: int,
    is_active: Callable[[int], bool],
    elr_enabled: bool,
    unclean_enabled: bool,
) -> tuple[str, int]:
    """Return (status, flags) of ``partition`` given the effective min ISR and broker liveness.

    Leaderless partitions are classified by what Kafka's controller would do once a candidate is active
    (elr-semantics §2.3, ONLINE/UNCLEAN election on unfence or periodic unclean election):
    ISR members; else ELR members when the ISR is empty; else the single last known leader (ELR enabled,
    RECOVERING, may lose data); else, with unclean.leader.election.enable, any replica (RECOVERING, loses data);
    else nobody: an operator must act (MANUAL_ELECTION_REQUIRED).
    """
    isr = partition.isr
    elr = partition.elr
    n_isr = len(isr)
    flags = 0
    if n_isr < min_isr:
        flags |= F_UNDER_MIN_ISR
    elif n_isr == min_isr:
        flags |= F_AT_MIN_ISR
    if n_isr < len(partition.replicas):
        flags |= F_UNDER_REPLICATED
    if n_isr == 1 and min_isr >= 2 and not elr_enabled:
        flags |= F_LAST_REPLICA_STANDING
    live = 0
    for broker in isr:
        if is_active(broker):
            live += 1
    for broker in elr:
        if broker not in isr and is_active(broker):
            live += 1
    flags |= (live if live < 3 else 3) << ELECTABLE_SHIFT
    recovering = partition.leader_recovery_state == LRS_RECOVERING
    if recovering:
        flags |= F_RECOVERING | F_UNCLEAN_RECOVERY

    if partition.leader == NO_LEADER:
        flags |= F_LEADERLESS
        clean = isr if isr else elr
        if clean:
            has_path = True
            live_path = any(is_active(b) for b in clean)
        else:
            lke = partition.last_known_elr
            if elr_enabled and len(lke) == 1:
                has_path = True
                live_path = is_active(lke[0])
                flags |= F_UNCLEAN_RECOVERY
            elif unclean_enabled and partition.replicas:
                has_path = True
                live_path = False
                flags |= F_UNCLEAN_RECOVERY
            else:
                has_path = False
                live_path = False
        if not live_path and unclean_enabled and any(is_active(r) for r in partition.replicas):
            # the periodic unclean election (every 5 min) picks any live replica when no clean candidate is live
            live_path = True
            flags |= F_UNCLEAN_RECOVERY
        if not has_path:
            flags |= F_MANUAL
            return MANUAL_ELECTION_REQUIRED, flags
        if recovering:
            return RECOVERING, flags
        return (LEADERLESS_ELECTING if live_path else LEADERLESS_WAITING), flags

    if recovering:
        return RECOVERING, flags
    if flags & F_UNDER_MIN_ISR:
        return UNDER_MIN_ISR, flags
    if flags & F_AT_MIN_ISR:
        return AT_MIN_ISR, flags
    if flags & F_UNDER_REPLICATED:
        return UNDER_REPLICATED, flags
    return HEALTHY, flags


@dataclass(frozen=True, slots=True)
class DerivedView:
    """The derived fields of a partition as reported (report documents, API)."""

    effective_min_isr: int
    under_min_isr: bool
    at_min_isr: bool
    leaderless: bool
    electable: list[int]
    live_electable: list[int]


def view(partition: PartitionState, min_isr: int, is_active: Callable[[int], bool]) -> DerivedView:
    """Derived fields for reporting (slower than `derive`, lists instead of flags)."""
    electable = sorted(set(partition.isr) | set(partition.elr))
    return DerivedView(
        effective_min_isr=min_isr,
        under_min_isr=len(partition.isr) < min_isr,
        at_min_isr=len(partition.isr) == min_isr,
        leaderless=partition.leader == NO_LEADER,
        electable=electable,
        live_electable=[b for b in electable if is_active(b)],
    )
