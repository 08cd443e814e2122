"""Invariant audit of partition state (monitor-spec §6): reported, never enforced.

Each violation names the record that caused it (metadata offset and source position). A violation that persists
across later records keeps the record that first caused it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from elrwatch.state.model import NO_LEADER, PartitionState

#: Every violation kind, in report order (bounded label values for `elrwatch_invariant_violations`).
VIOLATION_KINDS: tuple[str, ...] = (
    "isr_elr_overlap",
    "elr_not_under_min_isr",
    "isr_not_in_replicas",
    "elr_not_in_replicas",
    "leader_not_in_isr",
    "ineligible_broker_in_isr",
    "epoch_decreased",
    "durability_margin_lost",
)
(
    ISR_ELR_OVERLAP,
    ELR_NOT_UNDER_MIN_ISR,
    ISR_NOT_IN_REPLICAS,
    ELR_NOT_IN_REPLICAS,
    LEADER_NOT_IN_ISR,
    INELIGIBLE_BROKER_IN_ISR,
    EPOCH_DECREASED,
    DURABILITY_MARGIN_LOST,
) = VIOLATION_KINDS


@dataclass(frozen=True, slots=True)
class Violation:
    """One invariant a partition currently breaks, and the record that broke it."""

    kind: str
    detail: str
    offset: int | None
    position: str | None

    def to_dict(self) -> dict[str, object]:
        """JSON-able form (without the partition key)."""
        return {"kind": self.kind, "detail": self.detail, "offset": self.offset, "position": self.position}


def check(
    partition: PartitionState,
    min_isr: int,
    elr_enabled: bool,
    is_ineligible: Callable[[int], bool],
    epoch_note: str | None = None,
) -> list[tuple[str, str]]:
    """Return (kind, detail) for every invariant ``partition`` breaks now.

    ``is_ineligible(b)`` is true for a broker that is known to be fenced or unregistered (KIP-903: such a broker
    must not be in the ISR). ``epoch_note`` is set when the record just applied decreased an epoch.
    """
    found: list[tuple[str, str]] = []
    isr = partition.isr
    elr = partition.elr
    if elr:
        overlap = set(isr) & set(elr)
        if overlap:
            found.append((ISR_ELR_OVERLAP, f"brokers {sorted(overlap)} are in both ISR and ELR"))
        if elr_enabled and len(isr) >= min_isr:
            found.append(
                (
                    ELR_NOT_UNDER_MIN_ISR,
                    f"ELR {sorted(elr)} non-empty while |ISR|={len(isr)} >= min ISR {min_isr}",
                )
            )
    replicas = partition.replicas
    outside = [b for b in isr if b not in replicas]
    if outside:
        found.append((ISR_NOT_IN_REPLICAS, f"ISR members {outside} are not replicas {list(replicas)}"))
    outside = [b for b in elr if b not in replicas]
    if outside:
        found.append((ELR_NOT_IN_REPLICAS, f"ELR members {outside} are not replicas {list(replicas)}"))
    if partition.leader != NO_LEADER and partition.leader not in isr:
        found.append((LEADER_NOT_IN_ISR, f"leader {partition.leader} is not in ISR {list(isr)}"))
    ineligible = [b for b in isr if is_ineligible(b)]
    if ineligible:
        found.append((INELIGIBLE_BROKER_IN_ISR, f"fenced or unregistered brokers {ineligible} in ISR {list(isr)}"))
    if epoch_note:
        found.append((EPOCH_DECREASED, epoch_note))
    electable = len(set(isr) | set(elr))
    if electable < min_isr:
        found.append((DURABILITY_MARGIN_LOST, f"|ISR ∪ ELR| = {electable} < min ISR {min_isr}"))
    return found
