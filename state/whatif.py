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

from collections.abc import Callable, Iterable, Iterator, Mapping
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


def entry(topic: str, partition_id: int, p: PartitionState, before: PartitionState) -> dict[str, Any]:
    """A partition's line of a list: ``p`` its registration after, ``before`` before (both may be those of another
    partition with the same registration: the ids are given)."""
    return {
        "topic": topic,
        "partitionId": partition_id,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "elr": list(p.elr),
        "lastKnownElr": list(p.last_known_elr),
        "leader": p.leader,
        "leaderBefore": before.leader,
        "isrBefore": list(before.isr),
    }


def what_if(
    cluster: ClusterState,
    down: Iterable[int],
    *,
    unclean: bool = False,
    limit: int | None = None,
    check: Callable[[], None] | None = None,
    share: bool = True,
) -> dict[str, Any]:
    """Take ``down`` brokers down (in order) on copies of the cluster's partitions; count and list the outcome.

    ``limit`` caps each list (the counts are always complete). With no broker down nothing changes. ``check`` is
    called every few thousand partitions (the API's time limit raises from it). ``share=False`` takes every
    partition through the controller model on its own (the reference the shared pass is tested against).
    """
    contexts: dict[str, controller.TopicContext] = {}

    def partitions() -> Iterator[Candidate]:
        for topic, p in cluster.iter_partitions():
            ctx = contexts.get(topic.topic_id)
            if ctx is None:
                ctx = contexts[topic.topic_id] = topic_context(cluster, topic)
            yield topic.name, p.partition_id, registration_key(p), ctx, p

    return what_if_over(partitions(), cluster.brokers, down, unclean=unclean, limit=limit, check=check, share=share)


def registration_key(p: PartitionState) -> tuple[Any, ...]:
    """What the controller's answer for a partition depends on besides its topic's context: equal keys (and
    contexts), equal outcomes whatever its ids and epochs, so each distinct registration is taken down once."""
    return (
        p.replicas,
        p.isr,
        p.elr,
        p.last_known_elr,
        p.leader,
        p.leader_recovery_state,
        p.adding_replicas,
        p.removing_replicas,
    )


#: One partition for `what_if_over`: topic name, partition id, its `registration_key`, its topic's controller
#: context, and its PartitionState or a function that builds it (built only for a key not seen before).
Candidate = tuple[str, int, tuple[Any, ...], controller.TopicContext, PartitionState | Callable[[], PartitionState]]


#: One partition's outcome (`Outage.take_down`): its registration before and after, and its flags: the
#: `CATEGORIES` before, the same after, changed, leader moved.
Outcome = tuple[PartitionState, PartitionState, tuple[bool, ...]]
#: Where each flag sits in an `Outcome`'s flags.
BEFORE = slice(0, len(CATEGORIES))
AFTER = slice(len(CATEGORIES), 2 * len(CATEGORIES))
CHANGED = 2 * len(CATEGORIES)
MOVED = CHANGED + 1


class Outage:
    """Brokers going down, in order, fenced or (``unclean``) re-registered after an unclean shutdown: what it does
    to one partition through the controller model (`take_down`), and to a registration shared by many partitions
    (`outcome`: computed once per registration and topic context)."""

    def __init__(self, brokers_now: Mapping[int, BrokerState], down: Iterable[int], unclean: bool) -> None:
        self.down = list(dict.fromkeys(int(b) for b in down))
        self.unclean = unclean
        brokers: dict[int, BrokerState] = {
            b: BrokerState(s.broker_id, s.epoch, s.incarnation_id, s.fenced, s.in_controlled_shutdown, s.registered)
            for b, s in brokers_now.items()
        }
        self.unknown = [b for b in self.down if b not in brokers]
        # Broker states before each step (the controller sees earlier brokers as already down).
        self.steps: list[tuple[int, dict[int, BrokerState]]] = []
        for broker_id in self.down:
            self.steps.append((broker_id, {b: BrokerState(s.broker_id, s.epoch, s.incarnation_id, s.fenced,
                                                          s.in_controlled_shutdown, s.registered)
                                           for b, s in brokers.items()}))  # fmt: skip
            state = brokers.get(broker_id)
            if state is not None:
                state.fenced = True
                if unclean:
                    state.in_controlled_shutdown = False
        self.active_before = controller.active_brokers(brokers_now)
        self.active_after = controller.active_brokers(brokers)
        self._outcomes: dict[tuple[Any, ...], Outcome] = {}

    def take_down(self, p: PartitionState, ctx: controller.TopicContext) -> Outcome:
        """The partition before and after the brokers go down, and its flags."""
        after = p
        for broker_id, view in self.steps:
            if broker_id not in after.isr and not (self.unclean and broker_id in after.elr):
                continue
            decision = (
                controller.register(after, broker_id, False, view, ctx)
                if self.unclean
                else controller.fence(after, broker_id, view, ctx)
            )
            if decision.records:
                if after is p:
                    after = p.copy()
                for record in decision.records:
                    merge_partition_change(after, record)
        before_flags = _classify(p, ctx.min_isr, self.active_before)
        after_flags = _classify(after, ctx.min_isr, self.active_after)
        moved = after is not p and after.leader != p.leader and after.leader != NO_LEADER
        return p, after, (*before_flags, *after_flags, after is not p, moved)

    def outcome(
        self,
        registration: tuple[Any, ...],
        ctx: controller.TopicContext,
        state: PartitionState | Callable[[], PartitionState],
    ) -> Outcome:
        """`take_down` of a registration (`registration_key`) in a context, once: ``state`` (or what it builds) is
        the first partition seen with it."""
        key = (registration, ctx)
        known = self._outcomes.get(key)
        if known is None:
            known = self._outcomes[key] = self.take_down(state if isinstance(state, PartitionState) else state(), ctx)
        return known

    @property
    def distinct(self) -> int:
        """How many registration and context pairs went through the controller model."""
        return len(self._outcomes)

    def result(
        self,
        partitions: int,
        changed: int,
        moved: int,
        counts_before: dict[str, int],
        counts_after: dict[str, int],
        lists: dict[str, list[dict[str, Any]]],
    ) -> dict[str, Any]:
        """The what-if's answer from its tallies."""
        result: dict[str, Any] = {
            "down": self.down,
            "unclean": self.unclean,
            "partitions": partitions,
            "changedPartitions": changed,
            "leadersMoved": moved,
            "counts": counts_after,
            "countsBefore": counts_before,
            "newlyAffected": {name: counts_after[name] - counts_before[name] for name in CATEGORIES},
        }
        if self.unknown:
            result["unknownBrokers"] = self.unknown
        for name in CATEGORIES:
            result[name] = lists[name]
            result[f"{name}Truncated"] = counts_after[name] > len(lists[name])
        return result


def what_if_over(
    partitions: Iterable[Candidate],
    brokers_now: Mapping[int, BrokerState],
    down: Iterable[int],
    *,
    unclean: bool = False,
    limit: int | None = None,
    check: Callable[[], None] | None = None,
    share: bool = True,
) -> dict[str, Any]:
    """`what_if` over `Candidate` partitions and the brokers as they are now: the API gives the partitions a store
    holds. Partitions with the same registration and context share one pass through the controller model
    (`registration_key`), unless ``share=False``."""
    outage = Outage(brokers_now, down, unclean)
    counts_before = dict.fromkeys(CATEGORIES, 0)
    counts_after = dict.fromkeys(CATEGORIES, 0)
    lists: dict[str, list[dict[str, Any]]] = {name: [] for name in CATEGORIES}
    changed = 0
    moved = 0
    count = 0
    for topic_name, partition_id, registration, ctx, state in partitions:
        count += 1
        if check is not None and not count & 0xFFF:
            check()
        if share:
            before, after, flags = outage.outcome(registration, ctx, state)
        else:
            before, after, flags = outage.take_down(state if isinstance(state, PartitionState) else state(), ctx)
        changed += flags[CHANGED]
        moved += flags[MOVED]
        for name, flag in zip(CATEGORIES, flags[BEFORE], strict=True):
            counts_before[name] += flag
        for name, flag in zip(CATEGORIES, flags[AFTER], strict=True):
            if flag:
                counts_after[name] += 1
                if limit is None or len(lists[name]) < limit:
                    lists[name].append(entry(topic_name, partition_id, after, before))
    return outage.result(count, changed, moved, counts_before, counts_after, lists)
