"""What-if: "if brokers X (and Y) go down now, which partitions go under min ISR, leaderless, or need an unclean
election?" (monitor-spec §5).

The listed brokers are taken down one after another through the controller model on copies of the partitions
(the replayed cluster is never changed): fenced (heartbeat timeout, ``handleBrokerFenced``) or, with
``unclean=True``, re-registered after an unclean shutdown (they also lose their ELR seats). Each partition's
outcome is then classified:

* ``underMinIsr`` — |ISR| < effective min ISR (acks=all fails, the high watermark is frozen);
* ``leaderless`` — no leader;
* ``uncleanElectionNeeded`` — leaderless and no live ISR/ELR member: getting a leader now needs an unclean or
  last-known-leader election (or waiting for the lost replicas).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from elrwatch.state import controller
from elrwatch.state.advice import topic_context
from elrwatch.state.cluster import ClusterState
from elrwatch.state.merge import merge_partition_change
from elrwatch.state.model import NO_LEADER, BrokerState, PartitionState

CATEGORIES = ("underMinIsr", "leaderless", "uncleanElectionNeeded")


def _classify(p: PartitionState, min_isr: int, active: frozenset[int]) -> tuple[bool, bool, bool]:
    under = len(p.isr) < min_isr
    leaderless = p.leader == NO_LEADER
    pool = p.isr if p.isr else p.elr
    unclean_needed = leaderless and not any(r in active for r in pool)
    return under, leaderless, unclean_needed


def _entry(topic: str, p: PartitionState, before: PartitionState) -> dict[str, Any]:
    return {
        "topic": topic,
        "partitionId": p.partition_id,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "elr": list(p.elr),
        "lastKnownElr": list(p.last_known_elr),
        "leader": p.leader,
        "leaderBefore": before.leader,
        "isrBefore": list(before.isr),
    }


def what_if(
    cluster: ClusterState, down: Iterable[int], *, unclean: bool = False, limit: int | None = None
) -> dict[str, Any]:
    """Take ``down`` brokers down (in order) on copies of the cluster's partitions; count and list the outcome.

    ``limit`` caps each list (the counts are always complete). With no broker down nothing changes.
    """
    down_ids = list(dict.fromkeys(int(b) for b in down))
    brokers: dict[int, BrokerState] = {
        b: BrokerState(s.broker_id, s.epoch, s.incarnation_id, s.fenced, s.in_controlled_shutdown, s.registered)
        for b, s in cluster.brokers.items()
    }
    unknown = [b for b in down_ids if b not in brokers]
    # Broker states after each step (the controller sees earlier brokers as already down).
    steps: list[tuple[int, dict[int, BrokerState]]] = []
    for broker_id in down_ids:
        steps.append((broker_id, {b: BrokerState(s.broker_id, s.epoch, s.incarnation_id, s.fenced,
                                                 s.in_controlled_shutdown, s.registered)
                                  for b, s in brokers.items()}))  # fmt: skip
        state = brokers.get(broker_id)
        if state is not None:
            state.fenced = True
            if unclean:
                state.in_controlled_shutdown = False
    active_before = controller.active_brokers(cluster.brokers)
    active_after = controller.active_brokers(brokers)
    counts_before = dict.fromkeys(CATEGORIES, 0)
    counts_after = dict.fromkeys(CATEGORIES, 0)
    lists: dict[str, list[dict[str, Any]]] = {name: [] for name in CATEGORIES}
    changed = 0
    moved = 0
    partitions = 0
    for topic, p in cluster.iter_partitions():
        partitions += 1
        ctx = topic_context(cluster, topic)
        before_flags = _classify(p, ctx.min_isr, active_before)
        for name, flag in zip(CATEGORIES, before_flags, strict=True):
            counts_before[name] += flag
        after = p
        for broker_id, view in steps:
            if broker_id not in after.isr and not (unclean and broker_id in after.elr):
                continue
            decision = (
                controller.register(after, broker_id, False, view, ctx)
                if unclean
                else controller.fence(after, broker_id, view, ctx)
            )
            if decision.records:
                if after is p:
                    after = p.copy()
                for record in decision.records:
                    merge_partition_change(after, record)
        if after is not p:
            changed += 1
            if after.leader != p.leader and after.leader != NO_LEADER:
                moved += 1
        after_flags = _classify(after, ctx.min_isr, active_after)
        for name, flag in zip(CATEGORIES, after_flags, strict=True):
            if flag:
                counts_after[name] += 1
                if limit is None or len(lists[name]) < limit:
                    lists[name].append(_entry(topic.name, after, p))
    result: dict[str, Any] = {
        "down": down_ids,
        "unclean": unclean,
        "partitions": partitions,
        "changedPartitions": changed,
        "leadersMoved": moved,
        "counts": counts_after,
        "countsBefore": counts_before,
        "newlyAffected": {name: counts_after[name] - counts_before[name] for name in CATEGORIES},
    }
    if unknown:
        result["unknownBrokers"] = unknown
    for name in CATEGORIES:
        result[name] = lists[name]
        result[f"{name}Truncated"] = counts_after[name] > len(lists[name])
    return result
