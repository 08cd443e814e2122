"""Election advice per partition (monitor-spec §5): Kafka's own outlook and elrwatch's recommendation.

* **Outlook** — what the controller will do by itself, computed with the controller model
  (:mod:`elrwatch.state.controller`): who it elects when each missing replica returns (cleanly, or after an
  unclean restart that costs its ELR seat), whether that is a clean, ELR, last-known-leader or unclean election
  (the last two mark the partition RECOVERING), and who takes over if the current leader fails.
* **Recommendation** — what an operator should do under KIP-966's strategies (``Aggressive``, ``Balanced``,
  ``None``; default from the topic's ``unclean.leader.election.enable``: true → Aggressive, false → Balanced),
  in the KIP's order: ISR member, live ELR member, wait for fenced ELR members (Aggressive: unclean recovery),
  no ELR (Aggressive: unclean recovery now; Balanced: once every LastKnownElr member is back; None: manual).
  Unclean recovery picks, among live replicas whose REPLICA_LOG_INFO_RECORD is current (its ``brokerEpoch``
  matches the registration), the highest last written leader epoch, then the longest log; what is missing is
  said. Commands are only ones Kafka accepts where they are shown: ``kafka-leader-election.sh`` with a
  ``--path-to-json-file`` document, a same-set replica reorder through ``kafka-reassign-partitions.sh`` when the
  chosen replica would not be Kafka's own unclean pick and every replica is live (the tool refuses a fenced broker's
  id: then ``elrwatch recover … --execute``, which reorders and elects through the Admin API), and
  ``kafka-transactions.sh find-hanging`` after a RECOVERING election (KAFKA-7408).

Both are JSON-able dicts; :func:`partition_advice` is the hook the report calls for every partition.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from elrwatch.state import controller
from elrwatch.state import metadata_version as mv
from elrwatch.state import next_start as starts
from elrwatch.state.cluster import ClusterState
from elrwatch.state.merge import merge_partition_change
from elrwatch.state.model import LRS_RECOVERING, NO_LEADER, BrokerState, PartitionState, TopicState
from elrwatch.state.recovery import recover_command

AGGRESSIVE = "Aggressive"
BALANCED = "Balanced"
NONE = "None"
STRATEGIES = (AGGRESSIVE, BALANCED, NONE)

RISK_NONE = "none"  # a clean leader: nothing committed is lost
RISK_UNCOMMITTED = "uncommitted_data"  # last known leader: acks=0/1 data written after the HWM froze may be lost
RISK_COMMITTED = "committed_data"  # unclean election of a replica outside ISR/ELR: committed data may be lost
RISK_UNKNOWN = "unknown"  # it depends on how stopped brokers restart, which nothing reported (next_start)

BOOTSTRAP = "$BOOTSTRAP"

_HOW_TEXT = {
    controller.CHOSEN_ISR: "from the ISR (clean)",
    controller.CHOSEN_ELR: "from the ELR (clean)",
    controller.CHOSEN_CURRENT: "keeps the current leader",
    controller.CHOSEN_LAST_KNOWN_LEADER: (
        "as last known leader (RECOVERING; acks=0/1 data since the HWM froze may be lost)"
    ),
    controller.CHOSEN_UNCLEAN: "by unclean election (RECOVERING; committed data may be lost)",
}


class _Live:
    """``broker in live``: an active broker by the cluster's view, plus/minus explicit overrides."""

    __slots__ = ("exclude", "include", "is_active")

    def __init__(self, is_active: Callable[[int], bool], include: int = NO_LEADER, exclude: int = NO_LEADER) -> None:
        self.is_active = is_active
        self.include = include
        self.exclude = exclude

    def __contains__(self, broker_id: object) -> bool:
        if broker_id == self.exclude:
            return False
        return broker_id == self.include or (isinstance(broker_id, int) and self.is_active(broker_id))


def topic_context(cluster: ClusterState, topic: TopicState) -> controller.TopicContext:
    """The controller's view of a topic: effective min ISR, ELR on/off, unclean on/off, metadata version."""
    level = cluster.metadata_version_level
    return controller.TopicContext(
        min_isr=cluster.effective_min_isr(topic),
        elr_enabled=cluster.elr_enabled,
        unclean_enabled=cluster.unclean_enabled(topic),
        metadata_version=mv.DEFAULT_LEVEL if level is None else level,
    )


def default_strategy(unclean_enabled: bool) -> str:
    """KIP-966's mapping: unclean.leader.election.enable=true → Aggressive, false → Balanced."""
    return AGGRESSIVE if unclean_enabled else BALANCED


def _risk(chosen: str) -> str:
    if chosen == controller.CHOSEN_LAST_KNOWN_LEADER:
        return RISK_UNCOMMITTED
    if chosen == controller.CHOSEN_UNCLEAN:
        return RISK_COMMITTED
    return RISK_NONE


def _election(result: controller.ElectionResult) -> dict[str, Any]:
    return {
        "elects": result.leader,
        "how": result.chosen,
        "recovering": result.unclean,
        "risk": _risk(result.chosen),
    }


def _broker_state_name(brokers: Mapping[int, BrokerState], broker_id: int) -> str:
    state = brokers.get(broker_id)
    return "unregistered" if state is None else state.state_name


def _unclean_return(
    p: PartitionState,
    broker_id: int,
    brokers: Mapping[int, BrokerState],
    ctx: controller.TopicContext,
    is_active: Callable[[int], bool],
) -> dict[str, Any]:
    """Who leads once ``broker_id`` re-registers after an unclean shutdown (losing its ISR/ELR seat) and is
    unfenced. The registration itself may already elect someone (e.g. the last known leader once the ELR is
    empty)."""
    copy = p.copy()
    for record in controller.register(copy, broker_id, False, brokers, ctx).records:
        kind = controller.record_leader_change_kind(copy, record)
        merge_partition_change(copy, record)
        if kind is not None and copy.leader != NO_LEADER:
            return {
                "elects": copy.leader,
                "how": kind,
                "recovering": copy.leader_recovery_state == LRS_RECOVERING,
                "risk": _risk(kind),
                "atRegistration": True,
            }
    return _election(
        controller.elect_leader(copy, _Live(is_active, include=broker_id), ctx, election=ctx.default_election)
    )


def _returned(brokers: Mapping[int, BrokerState], broker_id: int) -> dict[int, BrokerState]:
    """``brokers`` with ``broker_id`` registered again and unfenced (a copy; the others untouched)."""
    state = brokers.get(broker_id)
    back = (
        BrokerState(broker_id, fenced=False)
        if state is None
        else dataclasses.replace(state, fenced=False, in_controlled_shutdown=False, registered=True)
    )
    return {**brokers, broker_id: back}


def returns_as_predicted(
    p: PartitionState,
    returning: Sequence[int],
    clean: Callable[[int], bool],
    brokers: Mapping[int, BrokerState],
    ctx: controller.TopicContext,
) -> tuple[PartitionState, dict[str, Any] | None]:
    """The controller model run over the brokers ``returning`` (in that order), each registering again (cleanly
    when ``clean(broker)``, else uncleanly: it loses its ISR and ELR seats) and then unfenced: the partition as it
    is then, and the first election on the way (``{"elects", "how", "recovering", "risk", "at"}``, ``at`` the
    brokers back by then, the last one's return making it) or None."""
    copy = p.copy()
    live = dict(brokers)
    for index, broker_id in enumerate(returning):
        back = list(returning[: index + 1])
        for record in controller.register(copy, broker_id, clean(broker_id), live, ctx).records:
            elected = _merge_election(copy, record, back)
            if elected is not None:
                return copy, elected
        live = _returned(live, broker_id)
        unfenced = controller.unfence_change(copy, controller.acceptable_leaders(live), ctx)
        if unfenced is not None:
            elected = _merge_election(copy, unfenced, back)
            if elected is not None:
                return copy, elected
    return copy, None


def _merge_election(p: PartitionState, record: controller.Record, at: list[int]) -> dict[str, Any] | None:
    """Merge ``record`` into ``p``; the election it makes, if it elects a leader."""
    kind = controller.record_leader_change_kind(p, record)
    merge_partition_change(p, record)
    if kind is None or p.leader == NO_LEADER:
        return None
    return {
        "elects": p.leader,
        "how": kind,
        "recovering": p.leader_recovery_state == LRS_RECOVERING,
        "risk": _risk(kind),
        "at": at,
    }


def _predict(
    brokers: Mapping[int, BrokerState], broker_ids: Sequence[int], epochs_known: bool
) -> dict[int, starts.NextStart]:
    return {b: starts.next_start(brokers.get(b), epochs_known) for b in broker_ids}


def last_replica_standing(p: PartitionState, ctx: controller.TopicContext) -> str | None:
    """What the outlook says about a partition whose ISR is one replica while its min ISR is 2 or more (None for
    any other): with ELR off that replica, back after an unclean shutdown, leads again from the ISR and may have lost
    committed data (status.F_LAST_REPLICA_STANDING); with ELR on an unclean shutdown costs it its ELR seat instead."""
    if len(p.isr) != 1 or ctx.min_isr < 2:
        return None
    (only,) = p.isr
    if ctx.elr_enabled:
        return (
            f"ELR on: {only} is the last ISR member, but an unclean shutdown of it costs its ELR seat instead of "
            "making it leader again (no last-replica-standing exposure)"
        )
    return (
        f"last replica standing: ELR off and {only} is the only ISR member (min ISR {ctx.min_isr}); if it shuts "
        "down uncleanly it comes back as leader from the ISR and committed data may be lost (Kafka 4.x with "
        "eligible.leader.replicas.version=1 removes this exposure)"
    )


def outlook(
    p: PartitionState,
    brokers: Mapping[int, BrokerState],
    ctx: controller.TopicContext,
    is_active: Callable[[int], bool] | None = None,
    epochs_known: bool = True,
) -> dict[str, Any]:
    """Kafka's own outlook for ``p`` (what the controller does without an operator). A leaderless partition's
    stopped replicas return as their next start is predicted (`next_start`): one predicted unclean loses its ISR
    and ELR seats on the way back (``epochs_known``: whether registration epochs are Kafka's)."""
    if is_active is None:
        active_set = controller.active_brokers(brokers)
        is_active = active_set.__contains__
    live = _Live(is_active)
    election = ctx.default_election
    result: dict[str, Any] = {"leader": p.leader, "recovering": p.leader_recovery_state == LRS_RECOVERING}
    if p.leader != NO_LEADER:
        fail = controller.elect_leader(
            p,
            _Live(is_active, exclude=p.leader),
            ctx,
            election=election,
            target_isr=tuple(r for r in p.isr if r != p.leader),
        )
        result["ifLeaderFails"] = _election(fail)
        parts = [f"keeps leader {p.leader}"]
        if result["recovering"]:
            result["kind"] = "recovering"
            parts.append(
                "still RECOVERING after an unclean or last-known-leader election; "
                "the leader reports RECOVERED when done"
            )
        else:
            result["kind"] = "keeps_leader"
        if len(p.isr) < ctx.min_isr:
            parts.append(
                f"acks=all writes fail and the high watermark is frozen until the ISR grows back to {ctx.min_isr}"
            )
        if fail.leader == NO_LEADER:
            parts.append(f"if {p.leader} fails the partition goes offline")
        else:
            parts.append(f"if {p.leader} fails: elects {fail.leader} {_HOW_TEXT.get(fail.chosen, fail.chosen)}")
        stopped = [b for b in p.elr if not is_active(b)]
        if stopped and ctx.elr_active:
            predicted = _predict(brokers, stopped, epochs_known)
            losing = [b for b in stopped if predicted[b].clean is False]
            result["elrSeatsLost"] = losing
            if losing:
                parts.append(
                    f"{_names(losing)} will restart uncleanly and lose {'its' if len(losing) == 1 else 'their'} ELR "
                    f"seat{'' if len(losing) == 1 else 's'}"
                )
        _note_last_replica_standing(result, parts, p, ctx)
        result["summary"] = "; ".join(parts)
        return result

    now = controller.elect_leader(p, live, ctx, election=election)
    down = [b for b in p.replicas if not is_active(b)]
    predicted = _predict(brokers, down, epochs_known)
    returns: list[dict[str, Any]] = []
    for broker_id in down:
        start = predicted[broker_id]
        entry: dict[str, Any] = {
            "broker": broker_id,
            "state": _broker_state_name(brokers, broker_id),
            "nextStart": start.doc(),
        }
        unclean = _unclean_return(p, broker_id, brokers, ctx, is_active)
        if start.clean is False:
            # Kafka registers it uncleanly (killed, crashed, or no registration to match): it loses its seats
            entry.update(unclean)
        else:
            entry.update(
                _election(controller.elect_leader(p, _Live(is_active, include=broker_id), ctx, election=election))
            )
        entry["ifUncleanRestart"] = unclean
        returns.append(entry)
    result["whenBrokerReturns"] = returns
    if now.leader != NO_LEADER:
        result["kind"] = "elects_now"
        result["next"] = _election(now)
        result["summary"] = f"elects {now.leader} {_HOW_TEXT.get(now.chosen, now.chosen)} at its next election" + (
            " (periodic unclean election, every 5 minutes)" if now.chosen == controller.CHOSEN_UNCLEAN else ""
        )
        return result
    doomed = [b for b in down if predicted[b].clean is False]
    lost = [b for b in doomed if b in p.isr or b in p.elr]
    seats = (
        f"{_names(lost)} will restart uncleanly and lose {'its' if len(lost) == 1 else 'their'} "
        f"{'ELR' if not p.isr else 'ISR/ELR'} seat{'' if len(lost) == 1 else 's'}"
        if lost and ctx.elr_active
        else ""
    )
    helpful = [entry for entry in returns if entry["elects"] != NO_LEADER]
    clean = [entry for entry in helpful if entry["risk"] == RISK_NONE]
    if clean:
        first = clean[0]
        how = _HOW_TEXT.get(first["how"], first["how"])
        text = f"elects {first['elects']} {how} as soon as broker {first['broker']} is back"
        if first["nextStart"]["clean"] is None and first["ifUncleanRestart"]["elects"] != first["elects"]:
            seat = "ELR" if first["broker"] in p.elr else "ISR"
            text += f" (if {first['broker']} restarts uncleanly it loses its {seat} seat)"
        parts = [f"leaderless; {text}"] + ([seats] if seats else [])
        result["kind"] = "waits_for_broker"
        _note_last_replica_standing(result, parts, p, ctx)
        result["summary"] = "; ".join(parts)
        return result
    # No return gives a clean election: every stopped broker comes back as predicted (unknown ones cleanly), in
    # replica order; what Kafka does then.
    _, then = returns_as_predicted(p, down, lambda b: predicted[b].clean is not False, brokers, ctx)
    if then is None and helpful:
        first = helpful[0]
        then = {key: first[key] for key in ("elects", "how", "recovering", "risk")} | {"at": [first["broker"]]}
    if then is None:
        result["kind"] = "none"
        result["summary"] = (
            "nothing: "
            + (f"{seats}, then " if seats else "")
            + "no replica can be elected by Kafka itself"
            + ("" if ctx.unclean_enabled else " (unclean leader election disabled)")
            + "; an operator must act"
        )
        return result
    result["kind"] = "waits_for_broker"
    result["then"] = then
    how = _HOW_TEXT.get(then["how"], then["how"])
    parts = [
        "leaderless; "
        + (f"{seats}; then Kafka " if seats else "")
        + f"elects {then['elects']} {how} once {_names(then['at'])} {'is' if len(then['at']) == 1 else 'are'} back"
    ]
    _note_last_replica_standing(result, parts, p, ctx)
    result["summary"] = "; ".join(parts)
    return result


def _names(broker_ids: Sequence[int]) -> str:
    """ "broker 1" or "brokers 1, 2"."""
    return ("broker " if len(broker_ids) == 1 else "brokers ") + ", ".join(map(str, broker_ids))


def _note_last_replica_standing(
    result: dict[str, Any], parts: list[str], p: PartitionState, ctx: controller.TopicContext
) -> None:
    note = last_replica_standing(p, ctx)
    if note is not None:
        result["lastReplicaStanding"] = not ctx.elr_enabled
        parts.append(note)


# -----------------------------------------------------------------------------------------------------------
# recommendation


def _json_doc(document: Mapping[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"))


def _election_commands(topic: str, partition_id: int, election_type: str) -> list[str]:
    document = _json_doc({"partitions": [{"topic": topic, "partition": partition_id}]})
    return [
        f"echo '{document}' > elect.json",
        f"bin/kafka-leader-election.sh --bootstrap-server {BOOTSTRAP} --election-type {election_type} "
        "--path-to-json-file elect.json",
    ]


def _reorder_commands(topic: str, partition_id: int, replicas: tuple[int, ...]) -> list[str]:
    document = _json_doc(
        {"version": 1, "partitions": [{"topic": topic, "partition": partition_id, "replicas": list(replicas)}]}
    )
    return [
        f"echo '{document}' > reorder.json",
        f"bin/kafka-reassign-partitions.sh --bootstrap-server {BOOTSTRAP} "
        "--reassignment-json-file reorder.json --execute",
    ]


def _hanging_commands(topic: str, partition_id: int) -> list[str]:
    return [
        f"bin/kafka-transactions.sh --bootstrap-server {BOOTSTRAP} find-hanging "
        f"--topic {topic} --partition {partition_id}"
    ]


def _rank(info: Mapping[str, Any]) -> tuple[int, int]:
    """KIP-966's order of replicas' logs: last written leader epoch, then log end offset (missing: -1)."""
    epoch, end = info.get("lastWrittenLeaderEpoch"), info.get("logEndOffset")
    return (-1 if epoch is None else epoch, -1 if end is None else end)


def longest_log_choice(
    p: PartitionState,
    brokers: Mapping[int, BrokerState],
    log_info: Mapping[int, Mapping[str, Any]] | None,
    is_active: Callable[[int], bool],
) -> dict[str, Any]:
    """KIP-966 unclean recovery's pick among live replicas: highest last written leader epoch, then longest log.

    Only info whose ``brokerEpoch`` matches the broker's registration counts. Returns ``{"broker": id or None,
    "basis": "log_info" | "replica_order" | "none", "candidates": [...], "missing": [...], "notReported": [...]}``.
    With a log-info pick, each candidate says how its log compares with the chosen one (``recordsBehind``: what
    electing it instead would lose; ``truncatedIfChosenLeads``: its own records past the chosen log's end; both
    exact when its last written leader epoch equals the chosen one's (``exact``), lower bounds otherwise), and
    ``notReported`` lists the replicas without current info (down, or not reported yet) with their last, stale
    report if any and how many records past the chosen log it claimed (``recordsAhead``).
    """
    live = [r for r in p.replicas if is_active(r)]
    missing: list[str] = []
    candidates: list[dict[str, Any]] = []
    not_reported: list[dict[str, Any]] = []
    for broker_id in p.replicas:
        info = (log_info or {}).get(broker_id)
        registration = brokers.get(broker_id)
        current = info is not None and registration is not None and info.get("brokerEpoch") == registration.epoch
        if broker_id in live and current:
            assert info is not None
            candidates.append(
                {
                    "broker": broker_id,
                    "lastWrittenLeaderEpoch": info.get("lastWrittenLeaderEpoch"),
                    "logEndOffset": info.get("logEndOffset"),
                }
            )
            continue
        entry: dict[str, Any] = {
            "broker": broker_id,
            "state": _broker_state_name(brokers, broker_id),
            "lastReport": None,
        }
        if info is not None:
            entry["lastReport"] = {k: info.get(k) for k in ("brokerEpoch", "logEndOffset", "lastWrittenLeaderEpoch")}
        not_reported.append(entry)
        if broker_id not in live:
            continue
        if info is None:
            missing.append(f"no log info from broker {broker_id}")
        else:
            expected = registration.epoch if registration is not None and registration.epoch_known else "unknown"
            missing.append(
                f"stale log info from broker {broker_id} (brokerEpoch {info.get('brokerEpoch')}, registered {expected})"
            )
    if not live:
        return {
            "broker": None,
            "basis": "none",
            "candidates": [],
            "missing": ["no live replica"],
            "notReported": not_reported,
        }
    if candidates:
        best = max(candidates, key=lambda c: (*_rank(c), -live.index(c["broker"])))
        best_epoch, best_end = _rank(best)
        for c in candidates:
            epoch, end = _rank(c)
            c["recordsBehind"] = max(0, best_end - end)
            c["truncatedIfChosenLeads"] = max(0, end - best_end)
            c["exact"] = epoch == best_epoch
        for entry in not_reported:
            last = entry["lastReport"]
            entry["recordsAhead"] = (
                max(0, _rank(last)[1] - best_end) if last is not None and _rank(last) > (best_epoch, best_end) else 0
            )
        return {
            "broker": best["broker"],
            "basis": "log_info",
            "candidates": candidates,
            "missing": missing,
            "notReported": not_reported,
        }
    return {
        "broker": live[0],
        "basis": "replica_order",
        "candidates": [],
        "missing": missing,
        "notReported": not_reported,
    }


def _waiting_cost(choice: Mapping[str, Any]) -> str | None:
    """What waiting for the replicas without current log info would cost and could save (None: all reported)."""
    absent = choice.get("notReported") or []
    if not absent:
        return None
    parts = []
    for entry in absent:
        last = entry.get("lastReport")
        if last is None:
            parts.append(f"{entry['broker']} ({entry['state']}, never reported: its log is unknown)")
        elif entry.get("recordsAhead"):
            parts.append(
                f"{entry['broker']} ({entry['state']}, last reported {entry['recordsAhead']} records past "
                "the candidate, before its broker re-registered)"
            )
        else:
            parts.append(f"{entry['broker']} ({entry['state']}, last reported no more than the candidate)")
    return (
        "Not reported: " + "; ".join(parts) + ". Waiting for them keeps the partition offline until they are "
        "back and their agent reports; electing now loses whatever they hold past the candidate's log."
    )


def _unclean_plan(
    topic: str,
    p: PartitionState,
    chosen: int,
    ctx: controller.TopicContext,
    is_active: Callable[[int], bool],
    brokers: Mapping[int, BrokerState],
) -> tuple[list[str], tuple[int, ...] | None, int, list[int]]:
    """Commands that make ``chosen`` win an UNCLEAN election, the reorder they use (None if Kafka picks it
    anyway or a reorder is impossible), the broker that will actually be elected and the replicas of the reorder
    that are not live. ``kafka-reassign-partitions.sh`` refuses a reorder naming a fenced broker ("Unknown broker
    id": its verifyBrokerIds checks the ids against DescribeCluster's nodes, which omit fenced brokers) while the
    controller accepts it through the Admin API: then the commands are ``elrwatch recover … --execute``, which
    reorders, elects and puts the order back through the Admin API."""
    live = _Live(is_active)
    pick = controller.elect_leader(p, live, ctx, election=controller.UNCLEAN)
    commands: list[str] = []
    reorder: tuple[int, ...] | None = None
    elected = pick.leader
    # A reassignment needs every replica registered (validateManualPartitionAssignment).
    reorderable = all(r in brokers and brokers[r].registered for r in p.replicas)
    if pick.leader != chosen and reorderable:
        reorder = (chosen, *(r for r in p.replicas if r != chosen))
        reordered = p.copy()
        reordered.replicas = reorder
        if controller.elect_leader(reordered, live, ctx, election=controller.UNCLEAN).leader == chosen:
            elected = chosen
        else:  # something Kafka prefers (a live ISR/ELR member or the last known leader) wins anyway
            reorder = None
    not_live = [] if reorder is None else [r for r in reorder if not is_active(r)]
    if not_live:
        commands.append(recover_command(topic, p.partition_id))
    else:
        if reorder is not None:
            commands += _reorder_commands(topic, p.partition_id, reorder)
        commands += _election_commands(topic, p.partition_id, "unclean")
    commands += _hanging_commands(topic, p.partition_id)
    return commands, reorder, elected, not_live


def recommendation(
    topic: str,
    p: PartitionState,
    brokers: Mapping[int, BrokerState],
    ctx: controller.TopicContext,
    *,
    strategy: str | None = None,
    log_info: Mapping[int, Mapping[str, Any]] | None = None,
    is_active: Callable[[int], bool] | None = None,
    epochs_known: bool = True,
) -> dict[str, Any]:
    """What to do about ``p`` under a KIP-966 strategy (default from unclean.leader.election.enable). Stopped ISR and
    ELR members return as their next start is predicted (`next_start`): the risk is what the controller model then
    does, and a member predicted unclean is not waited for (it loses its seat)."""
    if is_active is None:
        active_set = controller.active_brokers(brokers)
        is_active = active_set.__contains__
    strategy = strategy or default_strategy(ctx.unclean_enabled)
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (Aggressive, Balanced or None)")
    rec: dict[str, Any] = {"strategy": strategy, "candidate": None, "risk": RISK_NONE, "commands": []}
    name, pid = topic, p.partition_id
    down_members = [b for b in dict.fromkeys((*p.isr, *p.elr)) if not is_active(b)]

    if p.leader != NO_LEADER:
        if p.leader_recovery_state == LRS_RECOVERING:
            rec.update(
                action="check_hanging_transactions",
                risk=RISK_COMMITTED,
                summary=f"Leader {p.leader} was elected uncleanly and is RECOVERING: after recovery, look for hanging "
                "transactions (KAFKA-7408) and abort them.",
                commands=_hanging_commands(name, pid),
            )
        elif len(p.isr) < ctx.min_isr:
            missing = [r for r in p.replicas if r not in p.isr]
            exposed = len(p.isr) == 1 and not ctx.elr_enabled
            rec.update(
                action="restore_replicas",
                # last replica standing: the partition is exposed (the summary says so), whatever the operator does
                risk=RISK_COMMITTED if exposed else RISK_NONE,
                summary=f"High watermark frozen (ISR {len(p.isr)} < min ISR {ctx.min_isr}): bring back or let catch "
                f"up replicas {missing}; acks=all writes fail until then."
                + (
                    f" Last replica standing (ELR off): keep {p.leader} from an unclean shutdown, which may lose "
                    "committed data."
                    if exposed
                    else ""
                ),
                waitFor=[r for r in missing if not is_active(r)],
                commands=[  # kafka-topics.sh has no --partition filter; this lists the topic's under-min-ISR ones
                    f"bin/kafka-topics.sh --bootstrap-server {BOOTSTRAP} --describe --topic {name} "
                    "--under-min-isr-partitions"
                ],
            )
        elif len(p.isr) < len(p.replicas):
            rec.update(action="none", summary="Leader and min ISR are fine; some replicas are out of the ISR.")
        else:
            rec.update(action="none", summary="Healthy: nothing to do.")
        return rec

    # Leaderless: the KIP's order.
    clean_pool = p.isr if p.isr else p.elr
    live_clean = [r for r in p.replicas if r in clean_pool and is_active(r)]
    if live_clean:
        result = controller.elect_leader(p, _Live(is_active), ctx, election=controller.PREFERRED)
        candidate = result.leader if result.leader != NO_LEADER else live_clean[0]
        source = "ISR" if p.isr else "ELR"
        rec.update(
            action="elect_clean",
            candidate=candidate,
            summary=f"A live {source} member can lead: a preferred election elects {candidate} cleanly "
            "(it never performs an unclean election).",
            commands=_election_commands(name, pid, "preferred"),
        )
        return rec

    choice = longest_log_choice(p, brokers, log_info, is_active)
    lke = p.last_known_elr
    prefix = ""
    if clean_pool:  # ISR or ELR members exist but all are down
        if strategy == AGGRESSIVE and choice["broker"] is not None:
            return _unclean(
                rec, name, p, choice, ctx, is_active, f"ISR/ELR members {down_members} are all down", brokers
            )
        predicted = _predict(brokers, down_members, epochs_known)
        pool = "ISR" if p.isr else "ELR"
        doomed = [b for b in down_members if predicted[b].clean is False]
        hopeful = [b for b in down_members if b not in doomed]
        if ctx.elr_active and hopeful:
            sure = [b for b in hopeful if predicted[b].clean]
            risk = RISK_NONE if sure else RISK_UNKNOWN
            rec.update(
                action="wait_for_broker",
                waitFor=hopeful,
                risk=risk,
                summary=f"Wait for {hopeful} ({pool}): Kafka elects the first of them that comes back, cleanly. "
                + (
                    f"The next start of {_names(sure)} is predicted clean."
                    if sure
                    else f"Restart them cleanly: an unclean restart (a crash, kill -9) costs an {pool} member its "
                    "seat, and whether they stopped cleanly is not known."
                )
                + (
                    f" {_names(doomed).capitalize()} will restart uncleanly and lose "
                    f"{'its' if len(doomed) == 1 else 'their'} seat."
                    if doomed
                    else ""
                ),
                logInfo=choice,
                nextStart={str(b): predicted[b].doc() for b in down_members},
            )
            return rec
        if not ctx.elr_active:
            unsafe = [b for b in down_members if predicted[b].clean is not True]
            risk = RISK_NONE if not unsafe else RISK_COMMITTED if doomed else RISK_UNKNOWN
            rec.update(
                action="wait_for_broker",
                waitFor=down_members,
                risk=risk,
                summary=f"Wait for {down_members} ({pool}): Kafka elects the first of them that comes back"
                + (
                    "; their next start is predicted clean."
                    if not unsafe
                    else "; with ELR off an ISR member that shut down uncleanly still leads again, and committed data "
                    "it lost is lost"
                    + (
                        f": {_names(doomed)} will restart uncleanly."
                        if doomed
                        else "; whether they stopped cleanly is not known."
                    )
                ),
                logInfo=choice,
                nextStart={str(b): predicted[b].doc() for b in down_members},
            )
            return rec
        # Every ISR/ELR member is predicted to restart uncleanly: each loses its seat when it returns.
        p, then = returns_as_predicted(p, doomed, lambda b: False, brokers, ctx)
        prefix = (
            f"{pool} members {doomed} will restart uncleanly (killed or crashed) and lose their seats when they "
            "return. "
        )
        rec["nextStart"] = {str(b): predicted[b].doc() for b in down_members}
        if then is not None:  # the last known leader, elected at a return
            how = _HOW_TEXT.get(then["how"], then["how"])
            rec.update(
                action="wait_for_last_known_leader"
                if then["how"] == controller.CHOSEN_LAST_KNOWN_LEADER
                else "wait_for_broker",
                waitFor=doomed,
                risk=then["risk"],
                summary=prefix
                + f"Kafka then elects {then['elects']} {how} once {_names(then['at'])} "
                + ("is back" if len(then["at"]) == 1 else "are back")
                + (", then check hanging transactions." if then["recovering"] else "."),
                commands=_hanging_commands(name, pid) if then["recovering"] else [],
                logInfo=choice,
            )
            return rec
        lke = p.last_known_elr

    # No ISR and no ELR.
    if ctx.elr_active and len(lke) == 1 and strategy == BALANCED:
        rec.update(
            action="wait_for_last_known_leader",
            waitFor=[lke[0]] if not is_active(lke[0]) else [],
            risk=RISK_UNCOMMITTED,
            summary=prefix
            + f"No ISR or ELR left: Kafka elects last known leader {lke[0]} when it is back (RECOVERING; "
            "acks=0/1 data written after the high watermark froze may be lost), then check hanging transactions.",
            commands=_hanging_commands(name, pid),
            logInfo=choice,
        )
        return rec
    if strategy == AGGRESSIVE or (strategy == BALANCED and not lke):
        if choice["broker"] is not None:
            reason = "no ISR or ELR member is left" if not prefix else f"{prefix}No ISR or ELR member is left then"
            return _unclean(rec, name, p, choice, ctx, is_active, reason, brokers)
        rec.update(
            action="wait_for_broker",
            waitFor=[r for r in p.replicas if not is_active(r)],
            risk=RISK_COMMITTED,
            summary=prefix + "No replica is live: bring any replica back, then run an unclean election (data may be "
            "lost).",
            logInfo=choice,
        )
        return rec
    rec.update(
        action="manual",
        waitFor=[r for r in p.replicas if not is_active(r)],
        risk=RISK_COMMITTED,
        summary=prefix + "Strategy None: no automatic recovery. Choose a replica (see logInfo) and run an unclean "
        "election yourself; committed data may be lost.",
        logInfo=choice,
    )
    return rec


def _unclean(
    rec: dict[str, Any],
    topic: str,
    p: PartitionState,
    choice: dict[str, Any],
    ctx: controller.TopicContext,
    is_active: Callable[[int], bool],
    reason: str,
    brokers: Mapping[int, BrokerState],
) -> dict[str, Any]:
    chosen = choice["broker"]
    commands, reorder, elected, not_live = _unclean_plan(topic, p, chosen, ctx, is_active, brokers)
    if elected != chosen:
        choice = {**choice, "missing": [*choice["missing"], f"cannot make {chosen} win: Kafka elects {elected}"]}
        chosen = elected
    candidate_log = next((c for c in choice["candidates"] if c["broker"] == chosen), None)
    if choice["basis"] == "log_info" and candidate_log is not None:
        basis = (
            f"highest last written leader epoch, then longest log: epoch "
            f"{candidate_log['lastWrittenLeaderEpoch']}, log end offset {candidate_log['logEndOffset']}"
        )
        others = [
            f"{c['broker']} {'' if c['exact'] else 'at least '}{c['recordsBehind']}"
            for c in choice["candidates"]
            if c["broker"] != chosen
        ]
        if others:
            basis += "; electing another loses (records): " + ", ".join(others)
    else:
        basis = "first live replica (no current log info)"
    how = (
        f" The reassignment only reorders the replicas ({list(reorder)}) so that {chosen} comes first: Kafka's "
        "unclean election takes the first live replica and cannot be told which one."
        if reorder is not None
        else ""
    )
    if not_live:
        fenced = ", ".join(map(str, not_live))
        how += (
            f' kafka-reassign-partitions.sh refuses this reorder ("Unknown broker id {not_live[0]}": it checks the '
            f"ids against DescribeCluster, which omits fenced brokers; {fenced} not live), while the controller "
            f"accepts it through the Admin API: {recover_command(topic, p.partition_id)} reorders, elects {chosen} "
            f"and puts the order back ({recover_command(topic, p.partition_id, execute=False)} prints the plan)."
        )
    waiting = _waiting_cost(choice)
    rec.update(
        action="unclean_recovery",
        candidate=chosen,
        candidateLog=None
        if candidate_log is None
        else {
            "logEndOffset": candidate_log["logEndOffset"],
            "lastWrittenLeaderEpoch": candidate_log["lastWrittenLeaderEpoch"],
        },
        risk=RISK_COMMITTED,
        summary=f"{reason}: elect {chosen} uncleanly ({basis}); committed data may be lost.{how} Afterwards the "
        "partition is RECOVERING: look for hanging transactions." + (f" {waiting}" if waiting else ""),
        commands=commands,
        reorder=list(reorder) if reorder is not None else None,
        recoverCommand=recover_command(topic, p.partition_id),
        logInfo=choice,
    )
    if waiting:
        rec["waiting"] = waiting
    return rec


def advice_of(
    topic_name: str,
    partition: PartitionState,
    brokers: Mapping[int, BrokerState],
    ctx: controller.TopicContext,
    is_active: Callable[[int], bool],
    log_info: Mapping[int, Mapping[str, Any]] | None = None,
    strategy: str | None = None,
    epochs_known: bool = True,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(outlook, recommendation) of one partition from its registration, the brokers and its topic's context:
    all the advice needs, so the status store can build it when a partition is read (report.StoreView)."""
    return (
        outlook(partition, brokers, ctx, is_active, epochs_known),
        recommendation(
            topic_name,
            partition,
            brokers,
            ctx,
            strategy=strategy,
            log_info=log_info,
            is_active=is_active,
            epochs_known=epochs_known,
        ),
    )


def partition_advice(
    cluster: ClusterState, topic: TopicState, partition: PartitionState, strategy: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(outlook, recommendation) of one partition of a replayed cluster (the report's advice hook)."""
    return advice_of(
        topic.name,
        partition,
        cluster.brokers,
        topic_context(cluster, topic),
        cluster.is_active,
        cluster.log_info.get((topic.topic_id, partition.partition_id)),
        strategy,
        cluster.epochs_known,
    )


def advise(cluster: ClusterState, topic_name: str, partition_id: int, strategy: str | None = None) -> dict[str, Any]:
    """The `elrwatch advise` document for one partition (KeyError if the topic or partition is unknown)."""
    topic = cluster.topic_by_name(topic_name) or cluster.topics.get(topic_name)
    if topic is None:
        raise KeyError(f"unknown topic {topic_name!r}")
    partition = cluster.partition(topic.topic_id, partition_id)
    if partition is None:
        raise KeyError(f"unknown partition {topic.name}-{partition_id}")
    view_outlook, view_recommendation = partition_advice(cluster, topic, partition, strategy)
    ctx = topic_context(cluster, topic)
    return {
        "topic": topic.name,
        "topicId": topic.topic_id,
        "partitionId": partition_id,
        "registration": partition.registration(),
        "status": partition.status,
        "effectiveMinIsr": ctx.min_isr,
        "elrEnabled": ctx.elr_enabled,
        "uncleanLeaderElectionEnable": ctx.unclean_enabled,
        "outlook": view_outlook,
        "recommendation": view_recommendation,
    }


__all__ = [
    "AGGRESSIVE",
    "BALANCED",
    "NONE",
    "STRATEGIES",
    "advice_of",
    "advise",
    "default_strategy",
    "longest_log_choice",
    "outlook",
    "partition_advice",
    "recommendation",
    "topic_context",
]
