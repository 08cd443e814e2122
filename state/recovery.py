"""An operator's unclean recovery of one partition (`elrwatch recover`), the pure part: the plan, the refusals, the
OPERATOR_RECOVERY_RECORD of each step and what the partition's document says about them.

The plan comes from the partition's document in the status store (its recommendation names the candidate from the
replicas' log info, KIP-966's order) and from what Kafka itself reports now (leader, ISR, ELR, the replica order, the
live brokers). Carrying it out (bridge/recover.py) is four steps through the Admin API: put the candidate first in
the replica order (same set), run an UNCLEAN election, check that Kafka elected the candidate and that the
partition's end offset is the candidate's reported log end offset, put the original order back. Each step is
published as one OPERATOR_RECOVERY_RECORD; the partition stores keep the last `KEEP_STEPS` of them and the document
shows them with a one-line summary ("recovered by operator: elected 2, lost ≈ 0 records on 1").
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elrwatch.state.record_types import OPERATOR_RECOVERY_RECORD

STEP_REORDER = "reorder"
STEP_ELECT = "elect"
STEP_VERIFY = "verify"
STEP_RESTORE = "restore"
STEPS = (STEP_REORDER, STEP_ELECT, STEP_VERIFY, STEP_RESTORE)
DONE = "done"
FAILED = "failed"
OUTCOMES = (DONE, FAILED)
#: The operator steps a partition keeps (the newest).
KEEP_STEPS = 12
#: A record's "unknown" offset or record count.
UNKNOWN = -1


def recover_command(topic: str, partition_id: int, execute: bool = True) -> str:
    """The `elrwatch recover` command line for a partition (its Kafka and store options from the environment)."""
    return f"elrwatch recover {shlex.quote(topic)} {partition_id}" + (" --execute" if execute else "")


@dataclass(frozen=True)
class Loss:
    """What electing the candidate costs one other replica: ``records`` past the candidate's log (None: unknown),
    ``exact`` when both logs end in the same leader epoch (else a lower bound), ``why`` when unknown."""

    broker: int
    records: int | None
    exact: bool
    why: str = ""

    def text(self) -> str:
        if self.records is None:
            return f"unknown on {self.broker} ({self.why})"
        return f"{'' if self.exact else '≈ '}{self.records} records on {self.broker}"


@dataclass(frozen=True)
class Plan:
    """What `elrwatch recover` does for one partition."""

    topic: str
    topic_id: str
    partition_id: int
    candidate: int
    why: str
    #: The candidate's reported log end offset and last written leader epoch (None: not reported).
    candidate_log_end_offset: int | None
    candidate_epoch: int | None
    #: The replica order Kafka reports now, and the order that puts the candidate first (same set).
    replicas: tuple[int, ...]
    order: tuple[int, ...]
    losses: tuple[Loss, ...] = field(default=())
    #: Who Kafka's own unclean election (first live replica) would elect, and what that would lose.
    kafka_pick: int | None = None
    kafka_pick_loses: int | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition_id}"

    def lines(self) -> list[str]:
        """The plan as printed (dry run and before executing)."""
        log = (
            f"log end offset {self.candidate_log_end_offset}, last written leader epoch {self.candidate_epoch}"
            if self.candidate_log_end_offset is not None
            else "log end offset not reported"
        )
        out = [
            f"plan for {self.name}: elect {self.candidate} uncleanly ({self.why}; {log})",
            "records each other replica loses: " + (", ".join(loss.text() for loss in self.losses) or "none"),
        ]
        if self.kafka_pick is not None and self.kafka_pick != self.candidate:
            loses = "" if self.kafka_pick_loses is None else f", losing ≈ {self.kafka_pick_loses} records"
            out.append(f"Kafka's own unclean election would elect {self.kafka_pick} (first live replica{loses})")
        moved = self.order != self.replicas
        out += [
            f"  1/4 reorder: replicas {list(self.replicas)} → {list(self.order)} (same set, candidate first)"
            if moved
            else f"  1/4 reorder: none needed ({self.candidate} is already first in {list(self.replicas)})",
            f"  2/4 elect: electLeaders(UNCLEAN) for {self.name}",
            f"  3/4 verify: wait for leader {self.candidate}, compare the end offset with "
            + (f"{self.candidate_log_end_offset}" if self.candidate_log_end_offset is not None else "(not reported)"),
            f"  4/4 restore: replicas → {list(self.replicas)}"
            if moved
            else "  4/4 restore: none needed (the order is unchanged)",
        ]
        return out

    def record(
        self,
        step: str,
        outcome: str,
        message: str,
        *,
        order: Sequence[int] = (),
        leader: int = -1,
        end_offset: int | None = None,
    ) -> dict[str, Any]:
        """The OPERATOR_RECOVERY_RECORD envelope of one step."""
        if step not in STEPS or outcome not in OUTCOMES:
            raise ValueError(f"unknown step {step!r} or outcome {outcome!r}")
        return {
            "type": OPERATOR_RECOVERY_RECORD,
            "version": 0,
            "data": {
                "topicId": self.topic_id,
                "partitionId": self.partition_id,
                "step": step,
                "outcome": outcome,
                "candidate": self.candidate,
                "replicas": list(self.replicas),
                "order": list(order),
                "leader": leader,
                "endOffset": UNKNOWN if end_offset is None else end_offset,
                "candidateLogEndOffset": UNKNOWN
                if self.candidate_log_end_offset is None
                else self.candidate_log_end_offset,
                "losses": [
                    {
                        "brokerId": loss.broker,
                        "records": UNKNOWN if loss.records is None else loss.records,
                        "exact": loss.exact,
                    }
                    for loss in self.losses
                ],
                "message": message,
            },
        }


class Refused(Exception):
    """A refusal: one line naming the reason (exit code 1)."""


def check_kafka_view(name: str, leader: int, isr: Sequence[int], elr: Sequence[int]) -> None:
    """Refuse a partition that Kafka reports with a leader or with a non-empty ISR or ELR."""
    if leader >= 0:
        raise Refused(f"refused: {name} has leader {leader} (Kafka reports it): nothing to recover")
    if isr:
        raise Refused(
            f"refused: {name}'s ISR {list(isr)} is not empty (Kafka reports it): Kafka elects an ISR member cleanly "
            "when it is back"
        )
    if elr:
        raise Refused(
            f"refused: {name}'s ELR {list(elr)} is not empty (Kafka reports it): Kafka elects an ELR member cleanly "
            "when it is back"
        )


def check_alive(candidate: int, alive: Collection[int]) -> None:
    """Refuse a candidate that is not a live (registered, unfenced) broker."""
    if candidate not in alive:
        raise Refused(
            f"refused: candidate {candidate} is not alive (not an unfenced broker in DescribeCluster): Kafka cannot "
            "elect it"
        )


def check_store_age(age_s: float | None, bound_s: float) -> None:
    """Refuse a status store whose view is older than ``bound_s`` (or was never written)."""
    if age_s is None:
        raise Refused("refused: the status store has never been written: its view of the replicas' logs is unknown")
    if age_s > bound_s:
        raise Refused(
            f"refused: the status store's view is {age_s:.0f} s old (bound {bound_s:g} s, --max-store-age): "
            "the replicas' logs may have changed since"
        )


def _log_of(recommendation: Mapping[str, Any], broker: int) -> Mapping[str, Any] | None:
    log_info = recommendation.get("logInfo") or {}
    if log_info.get("basis") != "log_info":
        return None
    return next((c for c in log_info.get("candidates") or () if c.get("broker") == broker), None)


def _rank(entry: Mapping[str, Any]) -> tuple[int, int]:
    epoch, end = entry.get("lastWrittenLeaderEpoch"), entry.get("logEndOffset")
    return (-1 if epoch is None else epoch, -1 if end is None else end)


def plan_of(
    doc: Mapping[str, Any],
    replicas: Sequence[int],
    alive: Collection[int],
    *,
    candidate: int | None = None,
) -> Plan:
    """The plan for the partition ``doc`` (its status-store document, with its recommendation), given the replica
    order Kafka reports now and the live brokers (``candidate``: the operator's choice instead of the
    recommendation's); `Refused` when there is no candidate or it is not a replica. Whether the candidate's log is
    reported is `check_log_reported`'s."""
    name = f"{doc['topic']}-{doc['partitionId']}"
    rec = doc.get("recommendation") or {}
    if candidate is None:
        if rec.get("action") != "unclean_recovery" or rec.get("candidate") is None:
            raise Refused(
                f"refused: the recommendation for {name} is {rec.get('action') or 'unknown'}, not an unclean "
                "recovery: give --candidate N to choose a replica yourself"
            )
        candidate = int(rec["candidate"])
        why = "the recommendation's candidate: highest last written leader epoch, then the longest log"
    else:
        why = "chosen with --candidate"
    if candidate not in replicas:
        raise Refused(f"refused: {candidate} is not a replica of {name} (replicas {list(replicas)})")
    chosen = _log_of(rec, candidate)
    losses = []
    log_info = rec.get("logInfo") or {}
    absent = {e["broker"]: e for e in log_info.get("notReported") or ()}
    end = None if chosen is None else chosen.get("logEndOffset")
    for broker in replicas:
        if broker == candidate:
            continue
        other = _log_of(rec, broker)
        if chosen is not None and other is not None:
            losses.append(Loss(broker, max(0, _rank(other)[1] - _rank(chosen)[1]), _rank(other)[0] == _rank(chosen)[0]))
        elif chosen is None:
            losses.append(Loss(broker, None, False, "the candidate's log is not reported"))
        else:
            state = absent.get(broker, {}).get("state") or ("live" if broker in alive else "down")
            losses.append(Loss(broker, None, False, f"{state}, not reported"))
    kafka_pick = next((b for b in replicas if b in alive), None)
    pick_log = None if kafka_pick is None else _log_of(rec, kafka_pick)
    pick_loses = None if chosen is None or pick_log is None else max(0, _rank(chosen)[1] - _rank(pick_log)[1])
    return Plan(
        topic=str(doc["topic"]),
        topic_id=str(doc["topicId"]),
        partition_id=int(doc["partitionId"]),
        candidate=candidate,
        why=why,
        candidate_log_end_offset=end,
        candidate_epoch=None if chosen is None else chosen.get("lastWrittenLeaderEpoch"),
        replicas=tuple(replicas),
        order=(candidate, *(b for b in replicas if b != candidate)),
        losses=tuple(losses),
        kafka_pick=kafka_pick,
        kafka_pick_loses=pick_loses,
    )


def check_log_reported(plan: Plan, accept_unknown_log: bool) -> None:
    """Refuse a candidate whose log info is not reported, unless the operator accepts an unknown log."""
    if plan.candidate_log_end_offset is None and not accept_unknown_log:
        raise Refused(
            f"refused: no current log info from candidate {plan.candidate} (its agent has not reported since its "
            f"broker registered): give --candidate {plan.candidate} --accept-unknown-log to elect it anyway"
        )


# --- what the partition's document shows ------------------------------------------------------------------------


def step_entry(data: Mapping[str, Any], timestamp_ms: int | None) -> dict[str, Any]:
    """One kept step (a record's data, its lists as lists, and when it was published)."""
    return {
        "step": data["step"],
        "outcome": data["outcome"],
        "candidate": data["candidate"],
        "replicas": list(data["replicas"]),
        "order": list(data["order"]),
        "leader": data["leader"],
        "endOffset": data["endOffset"],
        "candidateLogEndOffset": data["candidateLogEndOffset"],
        "losses": [dict(loss) for loss in data["losses"]],
        "message": data["message"],
        "timestampMs": timestamp_ms,
    }


def _loss_text(loss: Mapping[str, Any]) -> str:
    if loss["records"] < 0:
        return f"unknown on {loss['brokerId']}"
    return f"{'' if loss['exact'] else '≈ '}{loss['records']} records on {loss['brokerId']}"


def summary(steps: Sequence[Mapping[str, Any]]) -> str:
    """One line about a partition's operator steps (oldest first): the last recovery's result."""
    last = steps[-1]
    if last["outcome"] == FAILED:
        return f"operator recovery failed at step {last['step']}: {last['message']}"
    elected = next(
        (s for s in reversed(steps) if s["step"] == STEP_VERIFY and s["outcome"] == DONE),
        None,
    )
    if elected is None:
        return f"operator recovery in progress ({last['step']} done): {last['message']}"
    losses = ", ".join(_loss_text(loss) for loss in elected["losses"]) or "nothing on the other replicas"
    text = f"recovered by operator: elected {elected['leader']}, lost {losses}"
    if last is not elected and last["step"] == STEP_RESTORE:
        text += f"; replica order restored to {last['order']}"
    return text


def operator_recovery_doc(steps: Sequence[Mapping[str, Any]] | None) -> dict[str, Any] | None:
    """The partition document's ``operatorRecovery``: the summary line and the kept steps (None: no step)."""
    if not steps:
        return None
    return {"summary": summary(steps), "steps": [dict(s) for s in steps]}


__all__ = [
    "DONE",
    "FAILED",
    "KEEP_STEPS",
    "STEPS",
    "Loss",
    "Plan",
    "Refused",
    "check_alive",
    "check_kafka_view",
    "check_log_reported",
    "check_store_age",
    "operator_recovery_doc",
    "plan_of",
    "recover_command",
    "step_entry",
    "summary",
]
