"""The controller model: what Kafka's KRaft controller writes for one partition, as a pure function.

This is ``PartitionChangeBuilder.build()`` plus the ``ReplicationControlManager`` call sites that drive it
(shared/reference/elr-semantics.md §2–§6, Kafka trunk d79bd502ec). Nothing here does I/O or mutates its
inputs: every function takes a partition registration, broker registrations and the topic's settings and
returns the PartitionChangeRecord data Kafka would write (camelCase, only the non-default fields, lists as
tuples, without ``topicId``/``partitionId``) or ``None`` for "no record", plus the per-partition error.

Callers apply the records with :func:`elrwatch.state.merge.merge_partition_change`
(see :func:`apply_decision`).

Main entry points:

* :func:`build_partition_change` — the builder itself (election type, acceptable leaders, targets).
* :func:`elect_leader` — "whom would Kafka elect, and how" without building a record (status, advice).
* call sites: :func:`fence`, :func:`controlled_shutdown`, :func:`unfence`, :func:`register`,
  :func:`unregister`, :func:`alter_partition`, :func:`elect_leaders`, :func:`periodic_preferred_election`,
  :func:`periodic_unclean_election`, :func:`reassign`, :func:`cancel_reassignment`,
  :func:`min_isr_config_change`.
* :func:`decide` — one input in the conformance format (shared/reference/conformance/README.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Protocol

from elrwatch.state import metadata_version as mv
from elrwatch.state.merge import CLEAR_ELR_CHANGE, merge_partition_change
from elrwatch.state.model import (
    EMPTY,
    LRS_RECOVERED,
    LRS_RECOVERING,
    NO_LEADER,
    NO_LEADER_CHANGE,
    BrokerState,
    PartitionState,
)

PREFERRED = "PREFERRED"
ONLINE = "ONLINE"
UNCLEAN = "UNCLEAN"
ELECTION_TYPES = (PREFERRED, ONLINE, UNCLEAN)

# How a leader was (or would be) chosen; mirrors model.LEADER_CHANGE_* where they overlap.
CHOSEN_NONE = "none"  # nobody: -1
CHOSEN_CURRENT = "current"  # the current leader stays
CHOSEN_ISR = "isr"  # a clean election from the ISR
CHOSEN_ELR = "elr"  # a clean election from the ELR (ISR empty)
CHOSEN_LAST_KNOWN_LEADER = "last_known_leader"  # ISR and ELR empty: LastKnownElr[0], marked RECOVERING
CHOSEN_UNCLEAN = "unclean"  # classic unclean pick: first acceptable replica, marked RECOVERING

# Per-partition errors (Kafka's Errors names).
UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"
NOT_CONTROLLER = "NOT_CONTROLLER"
FENCED_LEADER_EPOCH = "FENCED_LEADER_EPOCH"
INVALID_REQUEST = "INVALID_REQUEST"
INVALID_UPDATE_VERSION = "INVALID_UPDATE_VERSION"
INELIGIBLE_REPLICA = "INELIGIBLE_REPLICA"
NEW_LEADER_ELECTED = "NEW_LEADER_ELECTED"
STALE_BROKER_EPOCH = "STALE_BROKER_EPOCH"
ELECTION_NOT_NEEDED = "ELECTION_NOT_NEEDED"
PREFERRED_LEADER_NOT_AVAILABLE = "PREFERRED_LEADER_NOT_AVAILABLE"
ELIGIBLE_LEADERS_NOT_AVAILABLE = "ELIGIBLE_LEADERS_NOT_AVAILABLE"
INVALID_REPLICA_ASSIGNMENT = "INVALID_REPLICA_ASSIGNMENT"
NO_REASSIGNMENT_IN_PROGRESS = "NO_REASSIGNMENT_IN_PROGRESS"

Record = dict[str, Any]


class Acceptable(Protocol):
    """Who may become leader: anything supporting ``broker_id in acceptable`` (a set, :data:`ANY_BROKER`)."""

    def __contains__(self, broker_id: object) -> bool: ...


class _AnyBroker:
    """Every broker is acceptable (PartitionChangeBuilderTest's ``r -> true``)."""

    __slots__ = ()

    def __contains__(self, broker_id: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "ANY_BROKER"


class AllExcept:
    """Every broker but the listed ones is acceptable."""

    __slots__ = ("excluded",)

    def __init__(self, excluded: Iterable[int]) -> None:
        self.excluded = frozenset(excluded)

    def __contains__(self, broker_id: object) -> bool:
        return broker_id not in self.excluded


ANY_BROKER: Acceptable = _AnyBroker()
NO_BROKER: Acceptable = frozenset()


@dataclass(frozen=True, slots=True)
class TopicContext:
    """What the controller knows about a partition's topic and cluster when it builds a change.

    ``min_isr`` is the *effective* min ISR (elr-semantics §4, see :func:`effective_min_isr`);
    ``metadata_version`` a feature level (see :mod:`elrwatch.state.metadata_version`).
    """

    min_isr: int = 1
    elr_enabled: bool = False
    unclean_enabled: bool = False
    metadata_version: int = mv.DEFAULT_LEVEL

    @property
    def elr_active(self) -> bool:
        """ELR as the controller applies it: the feature is on and the MV supports it (RCM.isElrEnabled)."""
        return self.elr_enabled and self.metadata_version >= mv.MV_4_0_IV1

    @property
    def default_election(self) -> str:
        """UNCLEAN when the topic's unclean.leader.election.enable is true, else ONLINE (call sites of §5)."""
        return UNCLEAN if self.unclean_enabled else ONLINE


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """The builder's election: ``leader`` (-1 = nobody), whether it is unclean, and how it was chosen."""

    leader: int
    unclean: bool
    chosen: str


@dataclass(slots=True)
class Decision:
    """The controller's answer to one input for one partition: records in write order, and the error."""

    records: list[Record] = field(default_factory=list)
    error: str | None = None
    effective_min_isr: int | None = None  # effective_min_isr queries and min ISR changes
    new_min_isr: int | None = None  # min_isr_config_change: the new effective min ISR for later inputs

    @property
    def record(self) -> Record | None:
        """The single record (the last one when a call site wrote several), or None."""
        return self.records[-1] if self.records else None


# ----------------------------------------------------------------------------------------------------
# Java HashSet iteration order (ELR and LastKnownElr come out of a HashSet<Integer>)


def _java_spread(value: int) -> int:
    h = value & 0xFFFFFFFF
    return h ^ (h >> 16)


def _table_size_for(capacity: int) -> int:
    size = 1
    while size < capacity:
        size <<= 1
    return size


def java_hash_set_order(initial: Sequence[int], *added: Iterable[int]) -> list[int]:
    """The iteration order of ``s = new HashSet<>(initial); s.addAll(a) for a in added`` for Integer ids.

    Buckets are ``spread(id) & (capacity - 1)``; within a bucket, insertion order. For ids 0..15 in a set of
    at most 12 this is ascending order.
    """
    distinct: dict[int, None] = dict.fromkeys(initial)
    for group in added:
        distinct.update(dict.fromkeys(group))
    items = list(distinct)
    if len(items) <= 12 and all(0 <= value < 16 for value in items):
        return sorted(items)
    capacity = _table_size_for(max(int(len(initial) / 0.75) + 1, 16))
    while len(items) > int(capacity * 0.75):
        capacity <<= 1
    mask = capacity - 1
    decorated = sorted((_java_spread(value) & mask, index, value) for index, value in enumerate(items))
    return [value for _, _, value in decorated]


# ----------------------------------------------------------------------------------------------------
# PartitionChangeBuilder


def _complete_reassignment(
    isr: tuple[int, ...], replicas: tuple[int, ...], removing: tuple[int, ...], adding: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """§2.1: the (isr, replicas) after completing the reassignment, or None when it cannot complete yet."""
    if removing:
        new_isr = tuple(r for r in isr if r not in removing)
        new_replicas = tuple(r for r in replicas if r not in removing)
        if not new_isr or not new_replicas:
            return None
    else:
        new_isr, new_replicas = isr, replicas
    if any(r not in new_isr for r in adding):
        return None
    if len(adding) < len(removing) and any(r not in new_isr for r in new_replicas):
        return None
    return new_isr, new_replicas


@lru_cache(maxsize=1 << 16)
def _candidate_order(elr: tuple[int, ...], isr: tuple[int, ...], lke: tuple[int, ...]) -> tuple[int, ...]:
    """HashSet order of ``new HashSet<>(elr)`` + isr (+ lke): the ELR candidates of §2.2 (memoized)."""
    return tuple(java_hash_set_order(elr, isr, lke))


def _populate_elr(
    p: PartitionState,
    target_isr: tuple[int, ...],
    min_isr: int,
    unclean_shutdown: Sequence[int] | None,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """§2.2: target (ELR, LastKnownElr) when ELR is enabled."""
    if len(target_isr) >= min_isr:
        return EMPTY, EMPTY
    current_elr = p.elr
    current_isr = p.isr
    if not current_elr and not current_isr:
        elr: tuple[int, ...] = EMPTY
    else:
        order = _candidate_order(current_elr, current_isr, EMPTY)
        if unclean_shutdown:
            elr = tuple(r for r in order if r not in target_isr and r not in unclean_shutdown)
        else:
            elr = tuple(r for r in order if r not in target_isr)
    lke_source = p.last_known_elr
    if lke_source:
        order = _candidate_order(current_elr, current_isr, lke_source)
    elif not current_elr and not current_isr:
        return elr, EMPTY
    lke = tuple(r for r in order if r not in target_isr and r not in elr)
    return elr, lke


def _elect(
    p: PartitionState,
    acceptable: Acceptable,
    ctx: TopicContext,
    election: str,
    target_isr: tuple[int, ...],
    target_replicas: tuple[int, ...],
    target_elr: tuple[int, ...],
    use_last_known_leader: bool,
) -> tuple[int, bool, str]:
    """§2.3: PartitionChangeBuilder.electLeader → (leader, unclean, CHOSEN_* kind)."""
    pool = target_isr if target_isr else target_elr  # valid(r) := r in pool and acceptable(r)
    clean_kind = CHOSEN_ISR if target_isr else CHOSEN_ELR
    current = p.leader
    if pool:
        if election == PREFERRED:
            if target_replicas:
                first = target_replicas[0]
                if first in pool and first in acceptable:
                    return first, False, CHOSEN_CURRENT if first == current else clean_kind
            if current in pool and current in acceptable:
                return current, False, CHOSEN_CURRENT
            for r in target_replicas[1:]:
                if r in pool and r in acceptable:
                    return r, False, clean_kind
        else:
            if current in pool and current in acceptable:
                return current, False, CHOSEN_CURRENT
            for r in target_replicas:
                if r in pool and r in acceptable:
                    return r, False, clean_kind
    else:  # ISR and ELR empty: the last known leader may be elected
        lke = p.last_known_elr
        if use_last_known_leader and len(lke) == 1 and ctx.elr_active and lke[0] in acceptable:
            return lke[0], True, CHOSEN_LAST_KNOWN_LEADER
    if election == UNCLEAN:
        for r in target_replicas:
            if r in acceptable:
                return r, True, CHOSEN_UNCLEAN
    return NO_LEADER, False, CHOSEN_NONE


def _as_tuple(values: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if values is None else tuple(values)


def build_partition_change(
    p: PartitionState,
    acceptable: Acceptable,
    ctx: TopicContext,
    *,
    election: str = ONLINE,
    target_isr: Iterable[int] | None = None,
    target_replicas: Iterable[int] | None = None,
    target_removing: Iterable[int] | None = None,
    target_adding: Iterable[int] | None = None,
    unclean_shutdown_replicas: Sequence[int] | None = None,
    target_leader_recovery_state: int | None = None,
    use_last_known_leader: bool = True,
) -> Record | None:
    """PartitionChangeBuilder.build(): the PartitionChangeRecord data Kafka writes, or None (no-op).

    Targets default to the partition's current values; ``acceptable`` says who may lead (§5 per call site).
    """
    record = _build(
        p,
        acceptable,
        ctx,
        election,
        _as_tuple(target_isr),
        _as_tuple(target_replicas),
        _as_tuple(target_removing),
        _as_tuple(target_adding),
        unclean_shutdown_replicas,
        target_leader_recovery_state,
        use_last_known_leader,
    )
    return record


def _build(
    p: PartitionState,
    acceptable: Acceptable,
    ctx: TopicContext,
    election: str,
    target_isr: tuple[int, ...] | None,
    target_replicas: tuple[int, ...] | None,
    target_removing: tuple[int, ...] | None,
    target_adding: tuple[int, ...] | None,
    unclean_shutdown: Sequence[int] | None,
    target_lrs: int | None,
    use_lkl: bool,
) -> Record | None:
    isr = p.isr if target_isr is None else target_isr
    replicas = p.replicas if target_replicas is None else target_replicas
    removing = p.removing_replicas if target_removing is None else target_removing
    adding = p.adding_replicas if target_adding is None else target_adding
    lrs = p.leader_recovery_state if target_lrs is None else target_lrs
    elr_on = ctx.elr_active
    record: Record = {}

    # 2.1 complete a reassignment
    if removing or adding:
        completed = _complete_reassignment(isr, replicas, removing, adding)
        if completed is not None:
            isr, replicas = completed
            removing = adding = EMPTY

    # 2.2 target ELR / LastKnownElr
    if elr_on:
        elr, lke = _populate_elr(p, isr, ctx.min_isr, unclean_shutdown)
    else:
        elr, lke = p.elr, p.last_known_elr

    # 2.3 election
    winner, unclean, _ = _elect(p, acceptable, ctx, election, isr, replicas, elr, use_lkl)
    if winner != p.leader:
        if winner in elr:
            isr = (winner,)
            elr = tuple(r for r in elr if r != winner)
        record["leader"] = winner
        if unclean:
            record["isr"] = (winner,)
            if p.leader_recovery_state != LRS_RECOVERING and mv.is_leader_recovery_supported(ctx.metadata_version):
                record["leaderRecoveryState"] = LRS_RECOVERING

    # 2.4 reassignment epoch bump
    if "leader" not in record and replicas is not p.replicas and any(r not in replicas for r in p.replicas):
        record["leader"] = p.leader

    # 2.5 ELR (and LastKnownElr in the test-only mode)
    if "isr" in record or not elr_on:
        elr = lke = EMPTY
    if elr != p.elr:
        record["eligibleLeaderReplicas"] = elr
    if not use_lkl:
        record_leader = record.get("leader", NO_LEADER_CHANGE)
        if len(p.last_known_elr) == 1 and (
            record_leader == NO_LEADER or (record_leader == NO_LEADER_CHANGE and p.leader == NO_LEADER)
        ):
            lke = p.last_known_elr
        if lke != p.last_known_elr:
            record["lastKnownElr"] = lke

    # 2.6 ISR
    if "isr" not in record and (isr or elr_on) and isr != p.isr:
        record["isr"] = isr

    # 2.7 ISR-shrink epoch bump before 3.6-IV0
    if (
        ctx.metadata_version < mv.MV_3_6_IV0
        and "leader" not in record
        and "isr" in record
        and any(r not in record["isr"] for r in p.isr)
    ):
        record["leader"] = p.leader

    # 2.8 LastKnownElr = last known leader (production mode)
    if elr_on and use_lkl:
        record_leader = record.get("leader", NO_LEADER_CHANGE)
        if record_leader == NO_LEADER and not p.last_known_elr:
            record["lastKnownElr"] = (p.leader,)
        elif record_leader >= 0 and p.last_known_elr:
            record["lastKnownElr"] = EMPTY

    # 2.9 assignment
    if replicas and replicas != p.replicas:
        record["replicas"] = replicas
    if removing != p.removing_replicas:
        record["removingReplicas"] = removing
    if adding != p.adding_replicas:
        record["addingReplicas"] = adding

    # 2.10 leader recovery state
    if lrs != p.leader_recovery_state:
        record["leaderRecoveryState"] = lrs

    return record or None


def elect_leader(
    p: PartitionState,
    acceptable: Acceptable,
    ctx: TopicContext,
    *,
    election: str = ONLINE,
    target_isr: Iterable[int] | None = None,
    unclean_shutdown_replicas: Sequence[int] | None = None,
) -> ElectionResult:
    """What Kafka would elect for ``p`` if the builder ran now (steps §2.1–§2.3, nothing written).

    ``chosen`` is CHOSEN_CURRENT when the current leader stays valid, CHOSEN_NONE when nobody can lead.
    """
    isr = p.isr if target_isr is None else tuple(target_isr)
    replicas = p.replicas
    if p.removing_replicas or p.adding_replicas:
        completed = _complete_reassignment(isr, replicas, p.removing_replicas, p.adding_replicas)
        if completed is not None:
            isr, replicas = completed
    elr = _populate_elr(p, isr, ctx.min_isr, unclean_shutdown_replicas)[0] if ctx.elr_active else p.elr
    return ElectionResult(*_elect(p, acceptable, ctx, election, isr, replicas, elr, True))


def record_leader_change_kind(p: PartitionState, record: Mapping[str, Any]) -> str | None:
    """How a record (about to be merged into ``p``) changes the leader: a CHOSEN_* kind, or None if unchanged.

    Derived from the record alone (as a monitor sees it): -1 -> none; a leader from the ISR -> isr; from the
    ELR with an empty ISR -> elr; the single LastKnownElr with the ISR forced to it -> last_known_leader;
    ISR forced to the new leader with RECOVERING -> unclean.
    """
    leader = record.get("leader", NO_LEADER_CHANGE)
    if leader is None or leader == NO_LEADER_CHANGE or leader == p.leader:
        return None
    if leader == NO_LEADER:
        return CHOSEN_NONE
    if leader in p.isr:
        return CHOSEN_ISR
    if leader in p.elr and not p.isr:
        return CHOSEN_ELR
    if p.last_known_elr == (leader,) and record.get("isr") == (leader,):
        return CHOSEN_LAST_KNOWN_LEADER
    if record.get("isr") == (leader,) and (
        record.get("leaderRecoveryState") == LRS_RECOVERING or p.leader_recovery_state == LRS_RECOVERING
    ):
        return CHOSEN_UNCLEAN
    return CHOSEN_ISR


# ----------------------------------------------------------------------------------------------------
# Broker registrations → acceptable leaders


def active_brokers(brokers: Mapping[int, BrokerState]) -> frozenset[int]:
    """Ids of the brokers that may lead: registered, not fenced, not in controlled shutdown (§5)."""
    return frozenset(b for b, state in brokers.items() if state.active)


def acceptable_leaders(
    brokers: Mapping[int, BrokerState], *, exclude: int = NO_LEADER, include: int = NO_LEADER
) -> frozenset[int]:
    """RCM's ``isAcceptableLeader``: active brokers, minus ``exclude`` (broker leaving), plus ``include``."""
    active = set(active_brokers(brokers))
    active.discard(exclude)
    if include != NO_LEADER and include != exclude:
        active.add(include)
    return frozenset(active)


def effective_min_isr(min_insync_replicas: int, replica_count: int) -> int:
    """RCM.getTopicEffectiveMinIsr: min(min.insync.replicas, replicas of the topic's partition 0)."""
    return min(min_insync_replicas, replica_count) if replica_count > 0 else min_insync_replicas


# ----------------------------------------------------------------------------------------------------
# Call sites (elr-semantics §5). Each returns a Decision for one partition; broker changes are the caller's.


def remove_broker_change(
    p: PartitionState,
    broker_id: int,
    acceptable: Acceptable,
    ctx: TopicContext,
    *,
    unclean_shutdown: bool = False,
) -> Record | None:
    """generateLeaderAndIsrUpdates removing ``broker_id`` from the ISR (fence, controlled shutdown, clean or
    unclean re-registration, unregister). ``acceptable`` must already exclude ``broker_id``."""
    isr = p.isr
    target_isr = tuple(r for r in isr if r != broker_id) if broker_id in isr else isr
    record = _build(
        p,
        acceptable,
        ctx,
        ctx.default_election,
        target_isr,
        None,
        None,
        None,
        (broker_id,) if unclean_shutdown else None,
        None,
        True,
    )
    return record


def fence(p: PartitionState, broker_id: int, brokers: Mapping[int, BrokerState], ctx: TopicContext) -> Decision:
    """Heartbeat timeout (handleBrokerFenced): only partitions with the broker in the ISR change."""
    if broker_id not in p.isr:
        return Decision()
    acceptable = acceptable_leaders(brokers, exclude=broker_id)
    return _decision(remove_broker_change(p, broker_id, acceptable, ctx))


def controlled_shutdown(
    p: PartitionState, broker_id: int, brokers: Mapping[int, BrokerState], ctx: TopicContext
) -> Decision:
    """handleBrokerInControlledShutdown: the same partition changes as fencing (broker leaves every ISR)."""
    return fence(p, broker_id, brokers, ctx)


def unfence_change(p: PartitionState, acceptable: Acceptable, ctx: TopicContext) -> Record | None:
    """handleBrokerUnfenced for one partition: an election for a leaderless partition (``acceptable`` includes
    the broker being unfenced)."""
    if p.leader != NO_LEADER:
        return None
    record = _build(p, acceptable, ctx, ctx.default_election, None, None, None, None, None, None, True)
    return record


def unfence(p: PartitionState, broker_id: int, brokers: Mapping[int, BrokerState], ctx: TopicContext) -> Decision:
    """handleBrokerUnfenced: each leaderless partition gets an election where ``broker_id`` counts as live."""
    if p.leader != NO_LEADER:
        return Decision()
    return _decision(unfence_change(p, acceptable_leaders(brokers, include=broker_id), ctx))


def register(
    p: PartitionState,
    broker_id: int,
    clean_shutdown: bool,
    brokers: Mapping[int, BrokerState],
    ctx: TopicContext,
    *,
    elr_passes: int | None = None,
) -> Decision:
    """A new incarnation registers (CCM.registerBroker → RCM.handleBrokerShutdown).

    ``clean_shutdown`` is Kafka's ``previousBrokerEpoch == stored epoch``: a broker without a current registration
    (its first start, or after UnregisterBroker) has no stored epoch, so its registration is always unclean (seen on
    a real Kafka 4.4 controller: the re-registration of an unregistered ELR member removed it from the ELR).
    Clean (or ELR off): like fencing. Unclean with ELR on: remove the broker from the ISR, and separately from
    the ELR, as ``uncleanShutdownReplicas``. ``elr_passes``: how often Kafka's broker → ELR index lists this
    partition for the broker (:class:`ElrIndex`; default: once if the broker is in the ELR, else never).
    """
    acceptable = acceptable_leaders(brokers, exclude=broker_id)
    if clean_shutdown or not ctx.elr_active:
        if broker_id not in p.isr:
            return Decision()
        return _decision(remove_broker_change(p, broker_id, acceptable, ctx))
    decision = Decision()
    if broker_id in p.isr:
        record = remove_broker_change(p, broker_id, acceptable, ctx, unclean_shutdown=True)
        if record is not None:
            decision.records.append(record)
    # every pass sees the registration as it was before the op (records apply after it): identical records
    for _ in range(_elr_passes(p, broker_id, elr_passes)):
        record = remove_broker_change(p, broker_id, acceptable, ctx, unclean_shutdown=True)
        if record is not None:
            decision.records.append(record)
    return decision


def unregister(
    p: PartitionState,
    broker_id: int,
    brokers: Mapping[int, BrokerState],
    ctx: TopicContext,
    *,
    elr_passes: int | None = None,
) -> Decision:
    """handleBrokerUnregistered: partitions with the broker in the ISR, then those with it in the ELR
    (``elr_passes`` as for :func:`register`).

    The ELR pass does not pass the broker as unclean-shutdown replica, so an ELR-only member stays in the ELR.
    """
    acceptable = acceptable_leaders(brokers, exclude=broker_id)
    decision = Decision()
    if broker_id in p.isr:
        record = remove_broker_change(p, broker_id, acceptable, ctx)
        if record is not None:
            decision.records.append(record)
    for _ in range(_elr_passes(p, broker_id, elr_passes)):
        record = remove_broker_change(p, broker_id, acceptable, ctx)
        if record is not None:
            decision.records.append(record)
    return decision


def _elr_passes(p: PartitionState, broker_id: int, elr_passes: int | None) -> int:
    if elr_passes is not None:
        return elr_passes
    return 1 if broker_id in p.elr else 0


class ElrIndex:
    """Kafka's ``BrokersToElrs`` (broker → topic → partition ids whose ELR holds it), as the controller keeps it.

    The ELR passes of an unclean re-registration and of an unregistration iterate this index, not the partitions'
    ELRs, and it can differ from them (seen on a real Kafka 4.4 controller, tests/data/real-kafka/):

    * replaying a ``ClearElrRecord`` (any ``min.insync.replicas`` change) empties the ELRs but does not update the
      index (``RCM.removeTopicElrs`` merges without ``updatePartitionInfo``), so the broker stays listed;
    * a later PartitionChangeRecord that puts the broker into that partition's ELR again appends the partition a
      second time (``add`` does not deduplicate);
    * ``remove`` drops every occurrence into an array one shorter, padded with partition id 0.

    A listed partition gets one builder pass per occurrence, each from the registration before the op, so Kafka
    writes the same PartitionChangeRecord twice (and bumps the epochs twice), and a partition whose ELR was cleared
    still gets an election pass. Feed it every PartitionRecord / PartitionChangeRecord replay (the ELR before and
    after) and topic removal; :meth:`passes` is then the ``elr_passes`` of :func:`register` and :func:`unregister`.
    """

    __slots__ = ("_members",)

    def __init__(self) -> None:
        self._members: dict[int, dict[str, list[int]]] = {}

    def update(self, topic_id: str, partition_id: int, prev_elr: Iterable[int], next_elr: Iterable[int]) -> None:
        """``BrokersToElrs.update``: the partition's ELR went from ``prev_elr`` to ``next_elr`` (a replayed record)."""
        prev, new = set(prev_elr), set(next_elr)
        for broker_id in sorted(prev - new):
            self._remove(broker_id, topic_id, partition_id)
        for broker_id in sorted(new - prev):
            self._members.setdefault(broker_id, {}).setdefault(topic_id, []).append(partition_id)

    def _remove(self, broker_id: int, topic_id: str, partition_id: int) -> None:
        topics = self._members.get(broker_id)
        if topics is None or topic_id not in topics:
            return  # Kafka throws here (an index out of step): nothing to remove
        parts = topics[topic_id]
        if len(parts) == 1:
            del topics[topic_id]
            if not topics:
                del self._members[broker_id]
            return
        kept = [p for p in parts if p != partition_id]
        topics[topic_id] = (kept + [0] * len(parts))[: len(parts) - 1]

    def copy(self) -> ElrIndex:
        """An independent copy (the index as it was before an op's records are replayed)."""
        other = ElrIndex()
        other._members = {b: {t: list(parts) for t, parts in topics.items()} for b, topics in self._members.items()}
        return other

    def remove_topic(self, topic_id: str) -> None:
        """A RemoveTopicRecord: the topic leaves every broker's entry."""
        for broker_id in list(self._members):
            topics = self._members[broker_id]
            topics.pop(topic_id, None)
            if not topics:
                del self._members[broker_id]

    def passes(self, broker_id: int, topic_id: str, partition_id: int) -> int:
        """How often the broker's entry lists the partition (the ELR passes it gets)."""
        return self._members.get(broker_id, {}).get(topic_id, []).count(partition_id)


def alter_partition(
    p: PartitionState | None,
    brokers: Mapping[int, BrokerState],
    ctx: TopicContext,
    requester: int,
    new_isr: Sequence[tuple[int, int]],
    *,
    leader_epoch: int | None = None,
    partition_epoch: int | None = None,
    leader_recovery_state: int = LRS_RECOVERED,
    request_broker_epoch: int | None = None,
    active: Acceptable | None = None,
) -> Decision:
    """RCM.alterPartition for one partition, with validateAlterPartitionData's checks in Kafka's order.

    ``new_isr`` is ``[(broker_id, broker_epoch), ...]``; epoch -1 skips the KIP-903 check (AlterPartition
    <= v2).
    ``leader_epoch`` / ``partition_epoch`` default to the partition's current values; ``active`` may pass
    :func:`active_brokers` precomputed.
    """
    if request_broker_epoch is not None:
        requester_state = brokers.get(requester)
        if requester_state is None or not requester_state.registered or requester_state.epoch != request_broker_epoch:
            return Decision(error=STALE_BROKER_EPOCH)
    if p is None:
        return Decision(error=UNKNOWN_TOPIC_OR_PARTITION)
    leader_epoch = p.leader_epoch if leader_epoch is None else leader_epoch
    partition_epoch = p.partition_epoch if partition_epoch is None else partition_epoch
    if leader_epoch > p.leader_epoch or partition_epoch > p.partition_epoch:
        return Decision(error=NOT_CONTROLLER)
    if leader_epoch < p.leader_epoch:
        return Decision(error=FENCED_LEADER_EPOCH)
    if requester != p.leader:
        return Decision(error=INVALID_REQUEST)
    if partition_epoch < p.partition_epoch:
        return Decision(error=INVALID_UPDATE_VERSION)
    isr_ids = tuple(member for member, _ in new_isr)
    if len(set(isr_ids)) != len(isr_ids) or any(r not in p.replicas for r in isr_ids):
        return Decision(error=INVALID_REQUEST)
    if p.leader not in isr_ids:
        return Decision(error=INVALID_REQUEST)
    if leader_recovery_state == LRS_RECOVERING and len(isr_ids) > 1:
        return Decision(error=INVALID_REQUEST)
    if p.leader_recovery_state == LRS_RECOVERED and leader_recovery_state == LRS_RECOVERING:
        return Decision(error=INVALID_REQUEST)
    for member, epoch in new_isr:
        state = brokers.get(member)
        if (
            state is None
            or not state.registered
            or state.in_controlled_shutdown
            or state.fenced
            or (epoch != -1 and state.epoch >= 0 and state.epoch != epoch)
        ):
            return Decision(error=INELIGIBLE_REPLICA)
    record = _build(
        p,
        active_brokers(brokers) if active is None else active,
        ctx,
        ctx.default_election,
        isr_ids,
        None,
        None,
        None,
        None,
        leader_recovery_state,
        True,
    )
    if record is None:
        return Decision()
    leader = record.get("leader", NO_LEADER_CHANGE)
    error = NEW_LEADER_ELECTED if leader not in (NO_LEADER_CHANGE, requester) else None
    return Decision([record], error)


def elect_leaders(
    p: PartitionState | None, election_type: str, brokers: Mapping[int, BrokerState], ctx: TopicContext
) -> Decision:
    """The ElectLeaders API (RCM.electLeader) for one partition: PREFERRED or UNCLEAN."""
    if p is None:
        return Decision(error=UNKNOWN_TOPIC_OR_PARTITION)
    election_type = election_type.upper()
    if election_type not in (PREFERRED, UNCLEAN):
        return Decision(error=INVALID_REQUEST)
    if (election_type == PREFERRED and p.replicas and p.leader == p.replicas[0]) or (
        election_type == UNCLEAN and p.leader != NO_LEADER
    ):
        return Decision(error=ELECTION_NOT_NEEDED)
    record = _build(p, active_brokers(brokers), ctx, election_type, None, None, None, None, None, None, True)
    if record is None:
        if election_type == PREFERRED:
            return Decision(error=PREFERRED_LEADER_NOT_AVAILABLE)
        return Decision(error=ELIGIBLE_LEADERS_NOT_AVAILABLE)
    return Decision([record])


def periodic_preferred_election(
    p: PartitionState,
    brokers: Mapping[int, BrokerState],
    ctx: TopicContext,
    active: Acceptable | None = None,
) -> Decision:
    """maybeBalancePartitionLeaders: a PREFERRED election for a partition whose leader is not replicas[0]."""
    if p.replicas and p.leader == p.replicas[0]:
        return Decision()
    acceptable = active_brokers(brokers) if active is None else active
    record = _build(p, acceptable, ctx, PREFERRED, None, None, None, None, None, None, True)
    return _decision(record)


def periodic_unclean_election(
    p: PartitionState,
    brokers: Mapping[int, BrokerState],
    ctx: TopicContext,
    active: Acceptable | None = None,
) -> Decision:
    """maybeElectUncleanLeaders: an UNCLEAN election for a leaderless partition whose topic allows unclean.

    Errors of the periodic task are not reported to anyone, so none is returned.
    """
    if p.leader != NO_LEADER or not ctx.unclean_enabled:
        return Decision()
    acceptable = active_brokers(brokers) if active is None else active
    record = _build(p, acceptable, ctx, UNCLEAN, None, None, None, None, None, None, True)
    return _decision(record)


def reassign(
    p: PartitionState | None,
    target: Sequence[int],
    brokers: Mapping[int, BrokerState],
    ctx: TopicContext,
) -> Decision:
    """AlterPartitionReassignments with a replica list (changePartitionReassignment): stage 1, or all at once
    for a pure reorder. Election ONLINE, never UNCLEAN."""
    if p is None:
        return Decision(error=UNKNOWN_TOPIC_OR_PARTITION)
    target = tuple(target)
    if not target or len(set(target)) != len(target):
        return Decision(error=INVALID_REPLICA_ASSIGNMENT)
    for broker_id in target:
        state = brokers.get(broker_id)
        if state is None or not state.registered:
            return Decision(error=INVALID_REPLICA_ASSIGNMENT)
    current = p.replicas
    removing = tuple(sorted(set(current) - set(target)))
    adding = tuple(sorted(set(target) - set(current)))
    replicas = target + removing
    record = _build(
        p,
        active_brokers(brokers),
        ctx,
        ONLINE,
        None,
        replicas if replicas != current else None,
        removing or None,
        adding or None,
        None,
        None,
        True,
    )
    return _decision(record)


def cancel_reassignment(p: PartitionState | None, brokers: Mapping[int, BrokerState], ctx: TopicContext) -> Decision:
    """AlterPartitionReassignments with replicas=null (cancelPartitionReassignment + its Revert)."""
    if p is None:
        return Decision(error=UNKNOWN_TOPIC_OR_PARTITION)
    if not p.removing_replicas and not p.adding_replicas:
        return Decision(error=NO_REASSIGNMENT_IN_PROGRESS)
    adding = p.adding_replicas
    replicas = tuple(r for r in p.replicas if r not in adding)
    isr = tuple(r for r in p.isr if r not in adding)
    if not isr:
        if not replicas:
            return Decision(error=INVALID_REPLICA_ASSIGNMENT)
        isr = (replicas[0],)
        if not ctx.unclean_enabled:
            return Decision(error=INVALID_REPLICA_ASSIGNMENT)
    record = _build(
        p, active_brokers(brokers), ctx, ctx.default_election, isr, replicas, EMPTY, EMPTY, None, None, True
    )
    return _decision(record)


def min_isr_config_change(p: PartitionState, ctx: TopicContext, *, applies_to_topic: bool = True) -> Decision:
    """A min.insync.replicas ConfigRecord: with ELR on, its ClearElrRecord wipes ELR and LastKnownElr.

    Returns the change replay of the ClearElrRecord merges into ``p`` (None when both are already empty).
    """
    if not ctx.elr_active or not applies_to_topic:
        return Decision()
    if not p.elr and not p.last_known_elr:
        return Decision()
    return Decision([dict(CLEAR_ELR_CHANGE)])


def _decision(record: Record | None) -> Decision:
    return Decision([record] if record is not None else [])


def apply_decision(p: PartitionState, decision: Decision) -> None:
    """Merge a decision's records into ``p`` in order (Kafka's replay, merge.merge_partition_change)."""
    for record in decision.records:
        merge_partition_change(p, record)


# ----------------------------------------------------------------------------------------------------
# One input in the conformance format


def _ids(values: Iterable[Any] | None) -> tuple[int, ...] | None:
    return None if values is None else tuple(int(v) for v in values)


def parse_acceptable(spec: Any) -> Acceptable:
    """The ``acceptable`` field of a builder input: "all", "none", {"type":"only"|"allExcept","ids":[..]}."""
    if spec is None or spec == "all":
        return ANY_BROKER
    if spec == "none":
        return NO_BROKER
    if isinstance(spec, Mapping):
        kind = spec.get("type")
        ids = _ids(spec.get("ids")) or EMPTY
        if kind == "only":
            return frozenset(ids)
        if kind == "allExcept":
            return AllExcept(ids)
    if isinstance(spec, list | tuple):
        return frozenset(_ids(spec) or EMPTY)
    raise ValueError(f"invalid acceptable {spec!r}")


def decide(
    p: PartitionState,
    brokers: Mapping[int, BrokerState],
    ctx: TopicContext,
    inp: Mapping[str, Any],
) -> Decision:
    """The controller's decision for one input of the conformance format (conformance/README.md).

    Pure: neither ``p`` nor ``brokers`` is changed; see :func:`update_brokers` and :func:`apply_decision`.
    """
    kind = inp.get("kind")
    handler = _HANDLERS.get(kind)  # type: ignore[arg-type]
    if handler is None:
        raise ValueError(f"unknown input kind {kind!r}")
    return handler(p, brokers, ctx, inp)


def _broker(inp: Mapping[str, Any]) -> int:
    value = inp.get("broker", inp.get("brokerId"))
    if value is None:
        raise ValueError(f"{inp.get('kind')}: missing broker")
    return int(value)


def _builder_input(p: PartitionState, brokers: Mapping[int, BrokerState], ctx: TopicContext, inp: Mapping) -> Decision:
    election = str(inp.get("election", ONLINE)).upper()
    if election not in ELECTION_TYPES:
        raise ValueError(f"invalid election {election!r}")
    lrs = inp.get("targetLeaderRecoveryState")
    record = build_partition_change(
        p,
        parse_acceptable(inp.get("acceptable", "all")),
        ctx,
        election=election,
        target_isr=_ids(inp.get("targetIsr")),
        target_replicas=_ids(inp.get("targetReplicas")),
        target_removing=_ids(inp.get("targetRemoving")),
        target_adding=_ids(inp.get("targetAdding")),
        unclean_shutdown_replicas=_ids(inp.get("uncleanShutdownReplicas")),
        target_leader_recovery_state=None if lrs is None else int(lrs),
        use_last_known_leader=bool(inp.get("useLastKnownLeader", True)),
    )
    return _decision(record)


def _alter_partition_input(p, brokers, ctx, inp) -> Decision:  # type: ignore[no-untyped-def]
    if inp.get("newIsrWithEpochs") is not None:
        new_isr = [(int(member), int(epoch)) for member, epoch in inp["newIsrWithEpochs"]]
    else:
        new_isr = [(int(member), -1) for member in inp.get("newIsr") or ()]
    requester = inp.get("brokerId", inp.get("broker"))
    return alter_partition(
        p,
        brokers,
        ctx,
        int(requester) if requester is not None else p.leader,
        new_isr,
        leader_epoch=inp.get("leaderEpoch"),
        partition_epoch=inp.get("partitionEpoch"),
        leader_recovery_state=int(inp.get("leaderRecoveryState", LRS_RECOVERED)),
        request_broker_epoch=inp.get("requestBrokerEpoch"),
    )


def _min_isr_change_input(p, brokers, ctx, inp) -> Decision:  # type: ignore[no-untyped-def]
    scope = inp.get("scope", "this_topic")
    applies = scope in ("this_topic", "cluster")
    decision = min_isr_config_change(p, ctx, applies_to_topic=applies)
    new_value = inp.get("newMinIsr")
    if applies and new_value is not None:
        decision.new_min_isr = effective_min_isr(int(new_value), len(p.replicas))
    return decision


_Handler = Callable[[PartitionState, Mapping[int, BrokerState], TopicContext, Mapping], Decision]
_HANDLERS: dict[str, _Handler] = {
    "builder": _builder_input,
    "alter_partition": _alter_partition_input,
    "fence": lambda p, b, c, i: fence(p, _broker(i), b, c),
    "controlled_shutdown": lambda p, b, c, i: controlled_shutdown(p, _broker(i), b, c),
    "unfence": lambda p, b, c, i: unfence(p, _broker(i), b, c),
    "register": lambda p, b, c, i: register(p, _broker(i), bool(i.get("cleanShutdown", True)), b, c),
    "unregister": lambda p, b, c, i: unregister(p, _broker(i), b, c),
    "elect": lambda p, b, c, i: elect_leaders(p, str(i.get("electionType", PREFERRED)), b, c),
    "periodic_preferred_election": lambda p, b, c, i: periodic_preferred_election(p, b, c),
    "periodic_unclean_election": lambda p, b, c, i: periodic_unclean_election(p, b, c),
    "min_isr_config_change": _min_isr_change_input,
    "reassign": lambda p, b, c, i: reassign(p, _ids(i.get("targetReplicas")) or EMPTY, b, c),
    "cancel_reassign": lambda p, b, c, i: cancel_reassignment(p, b, c),
    "effective_min_isr": lambda p, b, c, i: Decision(
        effective_min_isr=effective_min_isr(int(i["minInsyncReplicas"]), len(p.replicas))
    ),
    "set_broker": lambda p, b, c, i: Decision(),
}

INPUT_KINDS = frozenset(_HANDLERS)


def update_brokers(brokers: dict[int, BrokerState], inp: Mapping[str, Any]) -> None:
    """The broker registration changes an input implies (conformance/README.md "brokers"), in place."""
    kind = inp.get("kind")
    if kind not in ("fence", "controlled_shutdown", "unfence", "register", "unregister", "set_broker"):
        return
    broker_id = _broker(inp)
    if kind == "unregister":
        brokers.pop(broker_id, None)
        return
    state = brokers.get(broker_id)
    if state is None:
        state = brokers[broker_id] = BrokerState(broker_id, fenced=kind not in ("unfence", "set_broker"))
    if kind == "fence":
        state.fenced = True
    elif kind == "controlled_shutdown":
        state.in_controlled_shutdown = True
    elif kind == "unfence":
        state.fenced = False
        state.in_controlled_shutdown = False
    elif kind == "register":
        state.fenced = True
        state.in_controlled_shutdown = False
        state.registered = True
        if inp.get("newEpoch") is not None:
            state.epoch = int(inp["newEpoch"])
    else:  # set_broker
        if "fenced" in inp:
            state.fenced = bool(inp["fenced"])
        if "inControlledShutdown" in inp:
            state.in_controlled_shutdown = bool(inp["inControlledShutdown"])
        if inp.get("epoch") is not None:
            state.epoch = int(inp["epoch"])
        if "registered" in inp:
            state.registered = bool(inp["registered"])


def with_min_isr(ctx: TopicContext, min_isr: int) -> TopicContext:
    """A copy of ``ctx`` with another effective min ISR."""
    return replace(ctx, min_isr=min_isr)
