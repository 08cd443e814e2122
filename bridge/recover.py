"""``elrwatch recover TOPIC PARTITION``: carry out the unclean recovery of one leaderless partition through the Admin
API, with the candidate the status store's recommendation names (state/recovery.py has the plan and the refusals).

Before acting it asks the cluster itself (DescribeTopicPartitions, DescribeCluster) and refuses, one line each, a
partition with a leader or a non-empty ISR or ELR, a candidate that is not alive, a status store whose view is older
than a bound, and a candidate whose log info is not reported (unless chosen with ``--accept-unknown-log``). With
``execute`` it then:

1. puts the candidate first in the replica order (AlterPartitionReassignments, same replica set: the controller
   accepts fenced replicas; ``kafka-reassign-partitions.sh`` refuses them with "Unknown broker id", since its
   ``verifyBrokerIds`` checks the ids against DescribeCluster's nodes, which omit fenced brokers);
2. runs ElectLeaders(UNCLEAN) for the partition (Kafka elects the first live replica: the candidate);
3. waits until Kafka reports the candidate as leader and compares the partition's end offset (ListOffsets latest)
   with the candidate's reported log end offset;
4. puts the original replica order back (preferred leadership unchanged).

Each step prints one line and publishes one OPERATOR_RECOVERY_RECORD to the event topic. A step that fails puts the
original order back when it can, names the state it leaves and how to go on (re-run the command, or ``--restore-order``
when the order could not be put back). Exit codes: 0 recovered, 1 refused, 2 error.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from elrwatch.state import recovery
from elrwatch.state.recovery import DONE, FAILED, Plan, Refused

RECOVERED, REFUSED, ERROR = 0, 1, 2


class StepFailed(Exception):
    """A step that did not do what it should (the message is its line)."""


@dataclass(frozen=True)
class Described:
    """A partition as Kafka reports it now."""

    topic_id: str
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...]


class PartitionAdmin(Protocol):
    """The admin calls `recover` makes (`KafkaPartitionAdmin`; tests may fake it)."""

    def describe(self, topic: str, partition_id: int) -> Described: ...

    def alive_brokers(self) -> set[int]: ...

    def reorder(self, topic: str, partition_id: int, replicas: Sequence[int]) -> None: ...

    def elect_unclean(self, topic: str, partition_id: int) -> None: ...

    def end_offset(self, topic: str, partition_id: int) -> int: ...


class KafkaPartitionAdmin:
    """`PartitionAdmin` over kafka-python's KafkaAdminClient (3.x: alter_partition_reassignments, elect_leaders,
    describe_topic_partitions, list_partition_offsets)."""

    def __init__(self, admin: Any) -> None:
        self.admin = admin

    def describe(self, topic: str, partition_id: int) -> Described:
        """DescribeTopicPartitions where the brokers have it (KRaft 3.8+), else Metadata (no ELR then)."""
        from elrwatch.bridge.admin import API_DESCRIBE_TOPIC_PARTITIONS, kafka_uuid

        versions = self.admin._manager.broker_version_data.api_versions  # the raw table (see bridge/admin.py)
        if any(int(key) == API_DESCRIBE_TOPIC_PARTITIONS for key in versions):
            topics = self.admin.describe_topic_partitions([topic])["topics"]
        else:
            topics = self.admin.describe_topics([topic])
        for found in topics:
            if found.get("name") != topic:
                continue
            if found.get("error_code", 0):
                raise StepFailed(f"DescribeTopicPartitions: topic {topic} error {found['error_code']}")
            for p in found["partitions"]:
                if p["partition_index"] == partition_id:
                    return Described(
                        kafka_uuid(found["topic_id"]),
                        int(p["leader_id"]),
                        int(p["leader_epoch"]),
                        tuple(p["replica_nodes"]),
                        tuple(p["isr_nodes"]),
                        tuple(p.get("eligible_leader_replicas") or ()),
                    )
        raise StepFailed(f"Kafka does not know partition {topic}-{partition_id}")

    def alive_brokers(self) -> set[int]:
        result = self.admin.describe_cluster()
        return {int(b["broker_id"]) for b in result["brokers"] if not b.get("is_fenced", False)}

    def reorder(self, topic: str, partition_id: int, replicas: Sequence[int]) -> None:
        from kafka import TopicPartition

        tp = TopicPartition(topic, partition_id)
        errors = self.admin.alter_partition_reassignments({tp: list(replicas)})
        error = errors.get(tp)
        if error is not None:
            raise StepFailed(f"AlterPartitionReassignments refused {list(replicas)}: {error.__name__}")

    def elect_unclean(self, topic: str, partition_id: int) -> None:
        response = self.admin.elect_leaders(1, {topic: [partition_id]}, raise_errors=False)
        top = getattr(response, "error_code", 0)
        if top:
            raise StepFailed(f"ElectLeaders(UNCLEAN) failed: {_error_name(top)}")
        for result in response.replica_election_results:
            for p in result.partition_result:
                if p.partition_id == partition_id and p.error_code:
                    message = getattr(p, "error_message", None)
                    raise StepFailed(
                        f"ElectLeaders(UNCLEAN) failed: {_error_name(p.error_code)}"
                        + (f" ({message})" if message else "")
                    )

    def end_offset(self, topic: str, partition_id: int) -> int:
        from kafka import TopicPartition
        from kafka.admin import OffsetSpec

        tp = TopicPartition(topic, partition_id)
        return int(self.admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset)


def _error_name(code: int) -> str:
    from kafka import errors

    return f"{errors.for_code(code).__name__} ({code})"


@dataclass(frozen=True)
class StoreView:
    """What the status store says about the partition: its document (with the recommendation) and its age."""

    doc: Mapping[str, Any] | None
    age_s: float | None


@dataclass
class Recovery:
    """One run of `elrwatch recover` (a dry run unless ``execute``)."""

    admin: PartitionAdmin
    echo: Callable[[str], None]
    publish: Callable[[dict[str, Any]], None] | None = None
    timeout_s: float = 60.0
    poll_s: float = 0.2

    def run(
        self,
        topic: str,
        partition_id: int,
        store: StoreView,
        *,
        max_store_age_s: float,
        execute: bool = False,
        candidate: int | None = None,
        accept_unknown_log: bool = False,
    ) -> int:
        """Refuse (1), or print the plan and with ``execute`` carry it out (0, or 2 when a step failed)."""
        name = f"{topic}-{partition_id}"
        if store.doc is None:
            self.echo(f"error: the status store has no partition {name}")
            return ERROR
        try:
            now = self.admin.describe(topic, partition_id)
            alive = self.admin.alive_brokers()
        except Exception as exc:
            self.echo(f"error: cannot describe {name}: {_reason(exc)}")
            return ERROR
        if now.topic_id != store.doc.get("topicId"):
            self.echo(
                f"error: Kafka's topic id of {topic} ({now.topic_id}) is not the status store's "
                f"({store.doc.get('topicId')}): the topic was created again"
            )
            return ERROR
        try:
            recovery.check_kafka_view(name, now.leader, now.isr, now.elr)
            plan = recovery.plan_of(store.doc, now.replicas, alive, candidate=candidate)
            recovery.check_alive(plan.candidate, alive)
            recovery.check_store_age(store.age_s, max_store_age_s)
            recovery.check_log_reported(plan, accept_unknown_log)
        except Refused as exc:
            self.echo(str(exc))
            return REFUSED
        for line in plan.lines():
            self.echo(line)
        if not execute:
            self.echo(f"dry run: nothing changed; carry it out with: {recovery.recover_command(topic, partition_id)}")
            return RECOVERED
        return self._execute(plan)

    # --- the steps -------------------------------------------------------------------------------------------------

    def _execute(self, plan: Plan) -> int:
        moved = plan.order != plan.replicas
        failed_at = ""
        try:
            failed_at = recovery.STEP_REORDER
            if moved:
                self._set_order(plan, plan.order)
                self._step(
                    plan,
                    recovery.STEP_REORDER,
                    f"step 1/4 reorder: replicas {list(plan.replicas)} → "
                    f"{list(plan.order)} (same set, {plan.candidate} first): done",
                    order=plan.order,
                )
            else:
                self.echo(f"step 1/4 reorder: none needed ({plan.candidate} is already first)")
            failed_at = recovery.STEP_ELECT
            self.admin.elect_unclean(plan.topic, plan.partition_id)
            self._step(plan, recovery.STEP_ELECT, f"step 2/4 elect: electLeaders(UNCLEAN) for {plan.name}: accepted")
            failed_at = recovery.STEP_VERIFY
            leader, end = self._verify(plan)
        except Exception as exc:
            return self._fail(plan, failed_at, exc, moved)
        if moved:
            try:
                self._set_order(plan, plan.replicas)
            except Exception as exc:
                return self._fail(plan, recovery.STEP_RESTORE, exc, moved)
            self._step(
                plan,
                recovery.STEP_RESTORE,
                f"step 4/4 restore: replicas {list(plan.order)} → {list(plan.replicas)} (preferred leadership as "
                "before): done",
                order=plan.replicas,
                leader=leader,
                end_offset=end,
            )
        else:
            self.echo("step 4/4 restore: none needed (the order is unchanged)")
        if plan.candidate_log_end_offset is not None and end != plan.candidate_log_end_offset:
            self.echo(
                f"error: {plan.name} elected {leader}, but its end offset {end} is not {leader}'s reported log end "
                f"offset {plan.candidate_log_end_offset}: its log changed after its agent reported"
            )
            return ERROR
        losses = ", ".join(loss.text() for loss in plan.losses) or "nothing on the other replicas"
        self.echo(f"recovered {plan.name}: elected {leader}, lost {losses}; look for hanging transactions next")
        return RECOVERED

    def _set_order(self, plan: Plan, order: Sequence[int]) -> None:
        self.admin.reorder(plan.topic, plan.partition_id, order)
        self._wait(
            lambda: self.admin.describe(plan.topic, plan.partition_id).replicas == tuple(order),
            f"Kafka did not report the replica order {list(order)}",
        )

    def _verify(self, plan: Plan) -> tuple[int, int]:
        described = self._wait(
            lambda: (lambda d: d if d.leader >= 0 else None)(self.admin.describe(plan.topic, plan.partition_id)),
            f"Kafka reported no leader for {plan.name}",
        )
        if described.leader != plan.candidate:
            raise StepFailed(f"Kafka elected {described.leader}, not the candidate {plan.candidate}")
        end = self._wait(lambda: self._end_offset(plan), f"no end offset of {plan.name} from its leader")
        reported = plan.candidate_log_end_offset
        compared = (
            f"= {plan.candidate}'s reported log end offset {reported}"
            if end == reported
            else f"≠ {plan.candidate}'s reported log end offset {reported}"
            if reported is not None
            else f"({plan.candidate}'s log end offset was not reported)"
        )
        self._step(
            plan,
            recovery.STEP_VERIFY,
            f"step 3/4 verify: leader {described.leader} (leader epoch {described.leader_epoch}); end offset {end} "
            + compared,
            leader=described.leader,
            end_offset=end,
        )
        return described.leader, end

    def _end_offset(self, plan: Plan) -> int | None:
        try:
            return self.admin.end_offset(plan.topic, plan.partition_id)
        except Exception:  # the new leader is not serving yet (NOT_LEADER, LEADER_NOT_AVAILABLE): asked again
            return None

    def _wait(self, condition: Callable[[], Any], what: str) -> Any:
        """``condition()``'s first value other than None or False (an end offset may be 0), asked again until
        ``timeout_s``; StepFailed naming ``what`` then."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                value = condition()
            except Exception:  # a broker answering with stale metadata or a dropped connection: asked again
                value = None
            if value is not None and value is not False:
                return value
            if time.monotonic() >= deadline:
                raise StepFailed(f"{what} within {self.timeout_s:g} s")
            time.sleep(self.poll_s)

    def _step(
        self,
        plan: Plan,
        step: str,
        line: str,
        *,
        outcome: str = DONE,
        order: Sequence[int] = (),
        leader: int = -1,
        end_offset: int | None = None,
    ) -> None:
        """Print the step's line and publish its record (a failed publish is said, the recovery goes on)."""
        self.echo(line)
        if self.publish is None:
            return
        try:
            self.publish(plan.record(step, outcome, line, order=order, leader=leader, end_offset=end_offset))
        except Exception as exc:
            self.echo(f"warning: the {step} step's record was not published to the event topic: {_reason(exc)}")

    def _fail(self, plan: Plan, step: str, exc: Exception, moved: bool) -> int:
        """A failed step: its line, its record, the original order back when it can, the state left."""
        number = recovery.STEPS.index(step) + 1
        self._step(plan, step, f"step {number}/4 {step}: failed: {_reason(exc)}", outcome=FAILED)
        restored = not moved
        if moved and step != recovery.STEP_RESTORE:
            try:
                self._set_order(plan, plan.replicas)
                restored = True
                self._step(
                    plan,
                    recovery.STEP_RESTORE,
                    f"step 4/4 restore: replicas → {list(plan.replicas)}: done",
                    order=plan.replicas,
                )
            except Exception as again:
                self._step(plan, recovery.STEP_RESTORE, f"step 4/4 restore: failed: {_reason(again)}", outcome=FAILED)
        try:
            now: Described | None = self.admin.describe(plan.topic, plan.partition_id)
        except Exception:
            now = None
        state = (
            "unknown (Kafka did not answer)"
            if now is None
            else f"leader {now.leader if now.leader >= 0 else 'none'}, replica order {list(now.replicas)}"
        )
        if restored and (now is None or now.leader < 0):
            then = f"re-run: {recovery.recover_command(plan.topic, plan.partition_id)}"
        elif not restored:
            then = (
                f"put the order back with: {recovery.recover_command(plan.topic, plan.partition_id, execute=False)} "
                f"--restore-order {','.join(map(str, plan.replicas))}"
            )
        else:
            then = "the partition has a leader: look for hanging transactions"
        self.echo(
            f"error: {plan.name}: step {step} failed; left: {state} (original order {list(plan.replicas)}); {then}"
        )
        return ERROR

    def restore_order(self, topic: str, partition_id: int, order: Sequence[int]) -> int:
        """``--restore-order``: put a replica order back (same replica set) after a run that could not."""
        name = f"{topic}-{partition_id}"
        try:
            now = self.admin.describe(topic, partition_id)
        except Exception as exc:
            self.echo(f"error: cannot describe {name}: {_reason(exc)}")
            return ERROR
        if sorted(order) != sorted(now.replicas):
            self.echo(f"refused: {list(order)} is not the replica set of {name} ({list(now.replicas)})")
            return REFUSED
        try:
            self.admin.reorder(topic, partition_id, order)
            self._wait(
                lambda: self.admin.describe(topic, partition_id).replicas == tuple(order),
                f"Kafka did not report the replica order {list(order)}",
            )
        except Exception as exc:
            self.echo(f"error: restore of {name} to {list(order)} failed: {_reason(exc)}")
            return ERROR
        self.echo(f"restore: replicas of {name} {list(now.replicas)} → {list(order)}: done")
        return RECOVERED


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text if isinstance(exc, (StepFailed, Refused)) else f"{type(exc).__name__}: {text}".rstrip(": ")


def store_view(status_store: Any, topic: str, partition_id: int, now_ms: int | None = None) -> StoreView:
    """The partition's document and the store's age (since its last write)."""
    meta = status_store.get_meta()
    updated = meta.get("updatedAtMs")
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return StoreView(
        status_store.get_partition(topic, partition_id), None if updated is None else (now_ms - updated) / 1000
    )


__all__ = ["ERROR", "RECOVERED", "REFUSED", "KafkaPartitionAdmin", "Recovery", "StoreView", "store_view"]
