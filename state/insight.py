"""Operator insight: which broker a partition waits for, which brokers are unsafe to stop, which topics suffer.

Each owned partition *contributes* to a few counters (the per-broker, per-topic and per-cause gauges of
state/gauges.py). `contribution` computes that contribution from plain values (replica tuples, the effective min
ISR, each broker's cause code, the set of active brokers), so that it can be vectorised later; `ClusterState`
calls it wherever it re-derives a partition (`ClusterState._refresh`) and updates its counters by difference
(`apply_delta`), like its flag histogram. Nothing here iterates all partitions except `recount`, the from-scratch
recomputation (tests, loading a state saved without these counters).

A partition's contribution:

* ``missing``: its replicas not in its ISR (each counts once for ``elrwatch_broker_isr_missing_partitions``);
* ``blocking``: its ISR members when ``|ISR| - 1 < effective min ISR`` (stopping one leaves the partition under
  min ISR, or keeps it there: ``elrwatch_broker_restart_blocking_partitions``);
* ``critical``: the broker that is the only active (registered, unfenced, not in controlled shutdown) member of
  ISR ∪ ELR of a partition that has a leader (stopping it leaves no electable leader:
  ``elrwatch_broker_restart_offline_partitions``), else -1;
* ``topic_bits``: under min ISR (``|ISR| < effective min ISR``, leaderless ones included), offline (leaderless)
  and at min ISR, counted per topic;
* ``cause``: for a partition under min ISR, the dominant cause of its missing replicas, else -1.

Causes of a missing replica come from its broker's registration (`broker_cause`), and a partition's dominant cause
is the highest by priority unregistered > fenced > lagging > controlled_shutdown, so ``controlled_shutdown`` means
every missing replica belongs to a broker in a planned shutdown. Kafka keeps ``inControlledShutdown`` set when
it fences a broker at the end of its controlled shutdown (BrokerRegistration.cloneWith keeps the flag; only a new
registration clears it), so a stopped broker of a rolling restart stays ``controlled_shutdown`` until it
registers again: then it is fenced until it has caught up with the metadata log, then lagging until it rejoins
the ISRs. A partition under min ISR without a missing replica (its replica count is below its topic's effective
min ISR, which partition 0's replica count sets) counts as ``lagging``: nothing planned explains it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final

from elrwatch.state.model import NO_LEADER, BrokerState

# Cause codes, ordered by priority: the highest code among a partition's missing replicas is its cause.
CAUSE_CONTROLLED_SHUTDOWN: Final = 0
CAUSE_LAGGING: Final = 1
CAUSE_FENCED: Final = 2
CAUSE_UNREGISTERED: Final = 3
#: Cause label values by code (the ``cause`` label of ``elrwatch_under_min_isr_partitions_by_cause``).
CAUSES: Final = ("controlled_shutdown", "lagging", "fenced", "unregistered")
NO_CAUSE: Final = -1

# Topic status bits of a contribution.
T_UNDER_MIN_ISR: Final = 1
T_OFFLINE: Final = 2
T_AT_MIN_ISR: Final = 4

# Counter keys (`ClusterState.insight_counts`): (kind, broker id | topic id | cause code).
MISSING: Final = "missing"
BLOCKING: Final = "blocking"
OFFLINE: Final = "offline"
TOPIC_UNDER: Final = "topic_under"
TOPIC_OFFLINE: Final = "topic_offline"
TOPIC_AT: Final = "topic_at"
CAUSE: Final = "cause"

#: (missing, blocking, critical, topic bits, cause); None for a partition that contributes nothing.
Contribution = tuple[tuple[int, ...], tuple[int, ...], int, int, int]
_EMPTY: tuple[int, ...] = ()


def broker_cause(broker: BrokerState | None) -> int:
    """Why a replica on this broker may be out of the ISR: its cause code (see the module docstring)."""
    if broker is None or not broker.registered:
        return CAUSE_UNREGISTERED
    if broker.in_controlled_shutdown:  # fenced at the end of a controlled shutdown: still a planned restart
        return CAUSE_CONTROLLED_SHUTDOWN
    if broker.fenced:
        return CAUSE_FENCED
    return CAUSE_LAGGING


def cause_codes(brokers: Iterable[BrokerState]) -> dict[int, int]:
    """Cause code of every known broker (unknown ones are unregistered)."""
    return {b.broker_id: broker_cause(b) for b in brokers}


def contribution(
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    elr: tuple[int, ...],
    leader: int,
    min_isr: int,
    causes: dict[int, int],
    active: set[int],
) -> Contribution | None:
    """A partition's contribution (module docstring) from its registration, its effective min ISR, the brokers'
    cause codes (`cause_codes`) and the active brokers; None when it contributes nothing (the common case)."""
    n_isr = len(isr)
    missing = _EMPTY
    if n_isr < len(replicas):
        missing = tuple([b for b in replicas if b not in isr])
    elif n_isr and replicas:
        for b in replicas:
            if b not in isr:
                missing = tuple([r for r in replicas if r not in isr])
                break
    blocking = isr if n_isr <= min_isr else _EMPTY
    critical = -1
    if leader != NO_LEADER:
        for b in isr:
            if b in active:
                if critical == -1:
                    critical = b
                elif b != critical:
                    critical = -2
                    break
        if critical != -2:
            for b in elr:
                if b in active and b != critical:
                    if critical == -1:
                        critical = b
                    else:
                        critical = -2
                        break
        if critical == -2:
            critical = -1
    bits = 0
    cause = NO_CAUSE
    if n_isr < min_isr:
        bits = T_UNDER_MIN_ISR
        cause = CAUSE_LAGGING if not missing else max([causes.get(b, CAUSE_UNREGISTERED) for b in missing])
    elif n_isr == min_isr:
        bits = T_AT_MIN_ISR
    if leader == NO_LEADER:
        bits |= T_OFFLINE
    if not missing and not blocking and critical == -1 and bits == 0:
        return None
    return missing, blocking, critical, bits, cause


def apply_delta(counts: Counter[Any], topic_id: str, part: Contribution, delta: int) -> None:
    """Add (``delta`` = 1) or remove (-1) one partition's contribution to ``counts``; keys at 0 are deleted
    (the per-topic gauges export only non-zero topics)."""
    missing, blocking, critical, bits, cause = part
    keys: list[tuple[str, Any]] = [(MISSING, b) for b in missing]
    keys.extend((BLOCKING, b) for b in blocking)
    if critical >= 0:
        keys.append((OFFLINE, critical))
    if bits & T_UNDER_MIN_ISR:
        keys.append((TOPIC_UNDER, topic_id))
    if bits & T_OFFLINE:
        keys.append((TOPIC_OFFLINE, topic_id))
    if bits & T_AT_MIN_ISR:
        keys.append((TOPIC_AT, topic_id))
    if cause >= 0:
        keys.append((CAUSE, cause))
    for k in keys:
        value = counts[k] + delta
        if value:
            counts[k] = value
        else:
            del counts[k]


def recount(cluster: Any) -> tuple[dict[tuple[str, int], Contribution], Counter[Any]]:
    """Every owned partition's contribution and the counters, computed from scratch (``cluster``: a
    ClusterState): what the incremental bookkeeping must equal."""
    causes = cause_codes(cluster.brokers.values())
    active = {b.broker_id for b in cluster.brokers.values() if b.active}
    parts: dict[tuple[str, int], Contribution] = {}
    counts: Counter[Any] = Counter()
    min_isr: dict[str, int] = {}
    for topic, p in cluster.iter_partitions():
        if topic.topic_id not in min_isr:
            min_isr[topic.topic_id] = cluster.effective_min_isr(topic)
        part = contribution(p.replicas, p.isr, p.elr, p.leader, min_isr[topic.topic_id], causes, active)
        if part is not None:
            parts[(topic.topic_id, p.partition_id)] = part
            apply_delta(counts, topic.topic_id, part, 1)
    return parts, counts


def missing_replicas(
    replicas: Iterable[int], isr: Iterable[int], brokers: Mapping[int, BrokerState]
) -> list[dict[str, Any]]:
    """The partition document's ``missingReplicas``: each replica not in the ISR with its cause."""
    in_isr = set(isr)
    return [{"brokerId": b, "cause": CAUSES[broker_cause(brokers.get(b))]} for b in replicas if b not in in_isr]


# --- "is it safe to stop this broker now?" (`elrwatch restart-check`, GET /v1/brokers/{id}/restart-check) ---------


def restart_verdict(broker_id: int, state: str, blocking: int, offline: int) -> tuple[bool, str]:
    """(safe, reason) of stopping the broker now, from its state name and its restart-blocking and
    restart-offline partition counts."""
    if blocking == 0 and offline == 0:
        if state == "active":
            return True, f"stopping broker {broker_id} now leaves no partition under min ISR or without a leader"
        return True, f"broker {broker_id} is {state.replace('_', ' ')}: stopping it changes no ISR"
    parts = []
    if blocking:
        parts.append(f"{blocking} partition(s) under min ISR (acks=all writes fail)")
    if offline:
        parts.append(f"{offline} partition(s) without an electable leader (offline)")
    return False, f"stopping broker {broker_id} now leaves {' and '.join(parts)}"


def blocks(part: Contribution | None, broker_id: int) -> bool:
    """Whether stopping the broker leaves this partition under min ISR (or keeps it there)."""
    return part is not None and broker_id in part[1]


def takes_offline(part: Contribution | None, broker_id: int) -> bool:
    """Whether stopping the broker leaves this partition without an electable leader."""
    return part is not None and part[2] == broker_id
