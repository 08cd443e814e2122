"""Conformance of elrwatch against a real Kafka controller's metadata log.

Three checks, shared by the real-cluster tests (tests/test_real_kafka_conformance.py) and the fast replay of their
saved fixtures (tests/test_real_kafka_golden.py):

* :func:`compare_partitions`: every partition of ``elrwatch replay`` equals what a broker answers to
  DescribeTopicPartitions (leader, leader epoch, replicas, ISR, ELR, LastKnownELR; topic ids converted from the
  UUID form to Kafka's base64url form).
* :func:`compare_brokers`: every broker's fenced state equals DescribeCluster v2. DescribeCluster lists the
  *registered* brokers with ``is_fenced`` = Kafka's ``BrokerRegistration.fenced()``, so elrwatch's states map as
  ``fenced`` → fenced, ``active`` and ``controlled_shutdown`` → not fenced (a broker in controlled shutdown is
  still unfenced: the flag is separate), ``unregistered`` → absent.
* :func:`check_controller`: every controller trigger in the log — a fence, unfence, controlled shutdown,
  re-registration (new incarnation) or unregistration — is predicted by the controller model
  (``state/controller.py``) from the state just before it: the PartitionChangeRecords Kafka wrote for it must equal
  the model's, field for field. Kafka 4.4 writes a trigger's records atomically in one batch: for a fence,
  re-registration and unregistration the PartitionChangeRecords come *before* the broker record, for an unfence and
  a controlled shutdown *after* it. Every other PartitionChangeRecord (an ISR change the leader asked for, an admin
  election, a reassignment) must be explained by one of the model's other call sites, and every
  ``min.insync.replicas`` ConfigRecord must come with the ClearElrRecord the model predicts.

And the core's advice (``state/advice.py``): at every re-registration, the leader its outlook
(``whenBrokerReturns``, or ``ifUncleanRestart`` for an unclean return) foresees for each leaderless partition of the
broker must be the partition's leader once Kafka has unfenced the broker (:attr:`ControllerReport.return_checks`).

Clean or unclean re-registration: the log does not carry the broker's ``previousBrokerEpoch``; a broker whose
previous incarnation had entered controlled shutdown (SIGTERM with ``controlled.shutdown.enable``) is taken as a
clean shutdown, any other (kill -9) as unclean. That is exactly what the harness does to brokers. A broker without
a registration (first start, or after UnregisterBroker) is always unclean for Kafka: it has no stored epoch.
"""

from __future__ import annotations

import base64
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from elrwatch.state import controller
from elrwatch.state.advice import outlook, topic_context
from elrwatch.state.cluster import ClusterState
from elrwatch.state.model import BrokerState, PartitionState
from elrwatch.state.records import Record, parse_line
from elrwatch.state.replay import Replayer

KAFKA_VERSION = "4.4.0"
#: Record types Kafka 4.4 writes that elrwatch counts and skips (none of them may be quarantined).
SKIPPED_OK = frozenset(
    {
        "BEGIN_TRANSACTION_RECORD",
        "END_TRANSACTION_RECORD",
        "REGISTER_CONTROLLER_RECORD",
        "NO_OP_RECORD",
        "PRODUCER_IDS_RECORD",
    }
)
PCR = "PARTITION_CHANGE_RECORD"
#: Record fields the model does not produce (conformance/README.md: directories are not modelled).
UNMODELLED = frozenset({"topicId", "partitionId", "directories"})

Key = tuple[str, int]


def kafka_topic_id(value: str) -> str:
    """A topic id in Kafka's JSON form (base64url, no padding) from DescribeTopicPartitions' UUID form."""
    if "-" not in value and len(value) == 22:
        return value
    return base64.urlsafe_b64encode(uuid.UUID(value).bytes).decode().rstrip("=")


# ----------------------------------------------------------------------------------------------------------
# replay vs DescribeTopicPartitions / DescribeCluster


def replay_dump(text: str, source: str = "dump") -> Replayer:
    """``elrwatch replay`` of a DumpLogSegments text (the core's API, as the CLI runs it)."""
    replayer = Replayer(track_changes=False)
    replayer.feed_lines(text.splitlines(), source)
    return replayer


def replay_problems(replayer: Replayer) -> list[str]:
    """Quarantined records, and skipped record types that are not known to be irrelevant."""
    problems = [f"quarantined {e.position}: {e.reason} {e.field}: {e.message}" for e in replayer.quarantined]
    for type_name, count in replayer.counts.skipped_by_type.items():
        if type_name not in SKIPPED_OK:
            problems.append(f"skipped {count} {type_name} record(s)")
    return problems


def compare_partitions(document: Mapping[str, Any], dtp: Iterable[Mapping[str, Any]]) -> list[str]:
    """Differences between the report's partitions and DescribeTopicPartitions answers (``dtp`` rows carry
    ``topic`` and ``partition`` plus the harness's fields). Every replayed partition of a described topic must be
    described and vice versa."""
    replayed = {(p["topic"], p["partitionId"]): p for p in document["partitions"]}
    described = {(row["topic"], row["partition"]): row for row in dtp}
    topics = {topic for topic, _ in described}
    out: list[str] = []
    for key in sorted(set(replayed) | set(described)):
        if key[0] not in topics:
            continue
        got, want = replayed.get(key), described.get(key)
        if got is None or want is None:
            out.append(f"{key[0]}-{key[1]}: {'not replayed' if got is None else 'not described'}")
            continue
        pairs = {
            "topicId": (got["topicId"], kafka_topic_id(want["topic_id"])),
            "leader": (got["leader"], want["leader"]),
            "leaderEpoch": (got["leaderEpoch"], want["leader_epoch"]),
            "replicas": (got["replicas"], want["replicas"]),
            "isr": (got["isr"], want["isr"]),
            "elr": (got["elr"], want["elr"]),
            "lastKnownElr": (got["lastKnownElr"], want["last_known_elr"]),
        }
        for name, (mine, kafka) in pairs.items():
            if mine != kafka:
                out.append(f"{key[0]}-{key[1]} {name}: elrwatch {mine} Kafka {kafka}")
    return out


def broker_fenced(state: str) -> bool | None:
    """DescribeCluster's ``is_fenced`` for an elrwatch broker state; None = not listed (unregistered)."""
    return {"fenced": True, "active": False, "controlled_shutdown": False}.get(state)


def compare_brokers(document: Mapping[str, Any], described: Mapping[int, bool]) -> list[str]:
    """Differences between the report's brokers and DescribeCluster v2 (broker id → fenced)."""
    replayed = {int(b["brokerId"]): broker_fenced(b["state"]) for b in document["brokers"]}
    replayed = {b: fenced for b, fenced in replayed.items() if fenced is not None}
    described = {int(b): bool(f) for b, f in described.items()}
    if replayed == described:
        return []
    return [f"brokers: elrwatch {dict(sorted(replayed.items()))} DescribeCluster {dict(sorted(described.items()))}"]


# ----------------------------------------------------------------------------------------------------------
# the controller model vs the records Kafka wrote


@dataclass
class Trigger:
    """A broker record that makes the controller write PartitionChangeRecords."""

    kind: str  # fence | unfence | controlled_shutdown | register | unregister
    broker: int
    offset: int | None
    clean: bool = True  # register only

    @property
    def records_before(self) -> bool:
        """Kafka writes this trigger's PartitionChangeRecords before the broker record (else after it)."""
        return self.kind in ("fence", "register", "unregister")


@dataclass
class TriggerCheck:
    """One trigger and how the model did."""

    trigger: Trigger
    predicted: int
    ok: bool
    detail: str = ""


@dataclass
class ControllerReport:
    """Every trigger checked, how the other PartitionChangeRecords were explained, and what differed."""

    checks: list[TriggerCheck] = field(default_factory=list)
    explained: Counter[str] = field(default_factory=Counter)
    config_checks: int = 0
    #: Triggers whose records held one partition twice (Kafka's stale ELR index, controller.ElrIndex).
    duplicate_elr_passes: int = 0
    #: Leaderless partitions whose leader after a broker's return the advice foresaw (and Kafka agreed).
    return_checks: int = 0
    mismatches: list[str] = field(default_factory=list)

    @property
    def predicted_records(self) -> int:
        """PartitionChangeRecords predicted by triggers (and found exactly in the log)."""
        return sum(c.predicted for c in self.checks if c.ok)


def _plain(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, list | tuple) else v for k, v in data.items() if k not in UNMODELLED}


def _key(record: Record) -> Key:
    return record.data["topicId"], record.data["partitionId"]


def _trigger(record: Record, cluster: ClusterState) -> Trigger | None:
    data, kind = record.data, record.type
    if kind == "BROKER_REGISTRATION_CHANGE_RECORD":
        broker = data["brokerId"]
        if data.get("fenced", 0) == 1:
            return Trigger("fence", broker, record.offset)
        if data.get("fenced", 0) == -1:
            return Trigger("unfence", broker, record.offset)
        if data.get("inControlledShutdown", 0) == 1:
            return Trigger("controlled_shutdown", broker, record.offset)
        return None
    if kind == "FENCE_BROKER_RECORD":
        return Trigger("fence", data["id"], record.offset)
    if kind == "UNFENCE_BROKER_RECORD":
        return Trigger("unfence", data["id"], record.offset)
    if kind == "UNREGISTER_BROKER_RECORD":
        return Trigger("unregister", data["brokerId"], record.offset)
    if kind == "REGISTER_BROKER_RECORD":
        existing = cluster.brokers.get(data["brokerId"])
        if existing is None or not existing.registered:  # no stored epoch to match: always an unclean shutdown
            return Trigger("register", data["brokerId"], record.offset, clean=False)
        if existing.incarnation_id == data.get("incarnationId"):
            return None
        return Trigger("register", data["brokerId"], record.offset, clean=existing.in_controlled_shutdown)
    return None


def _brokers(cluster: ClusterState) -> dict[int, BrokerState]:
    return {
        b: BrokerState(s.broker_id, s.epoch, s.incarnation_id, s.fenced, s.in_controlled_shutdown, s.registered)
        for b, s in cluster.brokers.items()
    }


def predict(
    trigger: Trigger,
    cluster: ClusterState,
    before: Mapping[Key, PartitionState],
    elr_index: controller.ElrIndex | None = None,
) -> list[tuple[Key, dict[str, Any]]]:
    """The model's PartitionChangeRecords for ``trigger`` over every partition, from ``before`` (a partition's state
    just before the trigger's records, when the replay has already applied them) or the replay's current state.
    ``elr_index``: Kafka's broker → ELR index, for the ELR passes of re-registrations and unregistrations."""
    brokers = _brokers(cluster)
    out: list[tuple[Key, dict[str, Any]]] = []
    for topic, current in cluster.iter_partitions():
        key = (topic.topic_id, current.partition_id)
        p = before.get(key, current).copy()
        ctx = topic_context(cluster, topic)
        b = trigger.broker
        if trigger.kind == "fence":
            decision = controller.fence(p, b, brokers, ctx)
        elif trigger.kind == "unfence":
            decision = controller.unfence(p, b, brokers, ctx)
        elif trigger.kind == "controlled_shutdown":
            decision = controller.controlled_shutdown(p, b, brokers, ctx)
        elif trigger.kind == "register":
            passes = None if elr_index is None else elr_index.passes(b, *key)
            decision = controller.register(p, b, trigger.clean, brokers, ctx, elr_passes=passes)
        else:
            passes = None if elr_index is None else elr_index.passes(b, *key)
            decision = controller.unregister(p, b, brokers, ctx, elr_passes=passes)
        out.extend((key, _plain(r)) for r in decision.records)
    return out


def _same(predicted: list[tuple[Key, dict[str, Any]]], actual: list[tuple[Key, dict[str, Any]]]) -> bool:
    """Equal per partition (each partition's records in order); Kafka's partition iteration order is free."""

    def by_key(items: list[tuple[Key, dict[str, Any]]]) -> dict[Key, list[dict[str, Any]]]:
        grouped: dict[Key, list[dict[str, Any]]] = {}
        for key, data in items:
            grouped.setdefault(key, []).append(data)
        return grouped

    return by_key(predicted) == by_key(actual)


def _show(items: list[tuple[Key, dict[str, Any]]]) -> str:
    return "; ".join(f"{k[0][:6]}-{k[1]} {d}" for k, d in sorted(items, key=lambda kv: kv[0])) or "nothing"


def explain(record: Record, before: PartitionState | None, cluster: ClusterState, elections: bool) -> str | None:
    """Which model call site writes exactly this PartitionChangeRecord from ``before`` (None: none does).

    Tried: AlterPartition by the leader (ISR / leader recovery state), a reassignment to the record's target, and
    (``elections``: only in batches without a broker trigger) an admin or periodic UNCLEAN or PREFERRED election.
    """
    if before is None:
        return None
    topic = next((t for t in cluster.topics.values() if t.topic_id == record.data["topicId"]), None)
    if topic is None:
        return None
    ctx = topic_context(cluster, topic)
    brokers = _brokers(cluster)
    want = _plain(record.data)
    data = record.data
    candidates: list[tuple[str, controller.Decision]] = []
    if before.leader >= 0:
        isr = tuple(before.isr if data.get("isr") is None else data["isr"])
        lrs = data.get("leaderRecoveryState", before.leader_recovery_state)
        # the ISR the leader asked for: the record's, or (a reassignment completed by it) the current one plus the
        # record's new members, the removed replicas then dropped by the completion
        requests = {isr, (*before.isr, *(r for r in isr if r not in before.isr))}
        for request in sorted(requests):
            new_isr = [(r, -1) for r in request]
            candidates.append(
                (
                    "alter_partition",
                    controller.alter_partition(
                        before.copy(), brokers, ctx, before.leader, new_isr, leader_recovery_state=lrs
                    ),
                )
            )
    if data.get("replicas") is not None:
        removing = data.get("removingReplicas") or ()
        target = [r for r in data["replicas"] if r not in removing]
        candidates.append(("reassign", controller.reassign(before.copy(), target, brokers, ctx)))
    if elections:
        candidates.append(("elect_unclean", controller.elect_leaders(before.copy(), controller.UNCLEAN, brokers, ctx)))
        candidates.append(
            ("elect_preferred", controller.elect_leaders(before.copy(), controller.PREFERRED, brokers, ctx))
        )
    for name, decision in candidates:
        if len(decision.records) == 1 and _plain(decision.records[0]) == want:
            return name
    return None


class _ControllerChecker:
    def __init__(self) -> None:
        self.replayer = Replayer(track_changes=False)
        self.cluster = self.replayer.cluster
        self.report = ControllerReport()
        self.elr_index = controller.ElrIndex()
        #: Brokers re-registered and not yet unfenced: the trigger and the leaders the advice expects.
        self.returning: dict[int, tuple[Trigger, dict[Key, int]]] = {}
        #: In the bootstrap batch (its ConfigRecords are the format's, written without a ClearElrRecord).
        self.bootstrap = False

    def feed(self, record: Record) -> None:
        """Apply one record to the replay, and keep Kafka's broker → ELR index in step with it."""
        kind = record.type
        if kind in (PCR, "PARTITION_RECORD"):
            key = _key(record)
            current = self.cluster.partition(*key)
            prev = current.elr if current is not None else ()
            self.replayer.feed_parsed(record)
            after = self.cluster.partition(*key)
            self.elr_index.update(key[0], key[1], prev, after.elr if after is not None else ())
            return
        if kind == "REMOVE_TOPIC_RECORD":
            self.elr_index.remove_topic(record.data["topicId"])
        self.replayer.feed_parsed(record)

    def batch(self, records: list[Record]) -> None:
        cluster = self.cluster
        has_trigger = any(_trigger(r, cluster) is not None for r in records)
        self._expect_returns(records)
        self._batch(records, has_trigger)
        self._check_returns(records)

    def _batch(self, records: list[Record], has_trigger: bool) -> None:
        cluster = self.cluster
        pending: list[tuple[Record, PartitionState | None]] = []  # PCRs not (yet) attributed to a trigger
        index_before = self.elr_index
        claiming: tuple[Trigger, list[tuple[Key, dict[str, Any]]]] | None = None
        claimed: list[tuple[Key, dict[str, Any]]] = []
        index = 0
        while index < len(records):
            record = records[index]
            index += 1
            if record.type == PCR:
                current = cluster.partition(*_key(record))
                before = current.copy() if current is not None else None
                if claiming is not None and len(claimed) < len(claiming[1]):
                    claimed.append((_key(record), _plain(record.data)))
                    self.feed(record)
                    if len(claimed) == len(claiming[1]):
                        self._verdict(claiming[0], claiming[1], claimed)
                        claiming, claimed = None, []
                    continue
                if not pending:  # Kafka's ELR index as it was before this run of records (a trigger's op)
                    index_before = self.elr_index.copy()
                pending.append((record, before))
                self.feed(record)
                continue
            trigger = _trigger(record, cluster)
            if trigger is not None and trigger.records_before:
                self._attribute_before(trigger, pending, has_trigger, index_before if pending else self.elr_index)
                pending = []
                self.feed(record)
                continue
            self._explain(pending, has_trigger)
            pending = []
            if claiming is not None:  # a trigger that predicted more records than Kafka wrote after it
                self._verdict(claiming[0], claiming[1], claimed)
                claiming, claimed = None, []
            if record.type == "CONFIG_RECORD":
                self._config(record, records[index] if index < len(records) else None)
            if trigger is not None:
                predicted = predict(trigger, cluster, {}, self.elr_index)
                self.feed(record)
                if predicted:
                    claiming, claimed = (trigger, predicted), []
                else:
                    self._verdict(trigger, predicted, [])
                continue
            self.feed(record)
        self._explain(pending, has_trigger)
        if claiming is not None:
            self._verdict(claiming[0], claiming[1], claimed)
        self.bootstrap = False

    def _attribute_before(
        self,
        trigger: Trigger,
        run: list[tuple[Record, PartitionState | None]],
        has_trigger: bool,
        index: controller.ElrIndex,
    ) -> None:
        """The last records of ``run`` are the trigger's; earlier ones are other operations of the same batch (an
        ISR change the leader asked for just before a fence, say). The split is the first one where the model's
        prediction, from the state after those other records, equals the rest; the others must then be explained
        by another call site. Without such a split, the prediction from before the whole run is reported."""

        def firsts(window: list[tuple[Record, PartitionState | None]]) -> dict[Key, PartitionState]:
            out: dict[Key, PartitionState] = {}
            for record, before in window:
                if before is not None:
                    out.setdefault(_key(record), before)
            return out

        def plain(window: list[tuple[Record, PartitionState | None]]) -> list[tuple[Key, dict[str, Any]]]:
            return [(_key(r), _plain(r.data)) for r, _ in window]

        for split in range(len(run) + 1):
            predicted = predict(trigger, self.cluster, firsts(run[split:]), index)
            if _same(predicted, plain(run[split:])):
                self._explain(run[:split], has_trigger)
                self._verdict(trigger, predicted, plain(run[split:]))
                return
        predicted = predict(trigger, self.cluster, firsts(run), index)
        self._verdict(trigger, predicted, plain(run))

    def _expect_returns(self, records: list[Record]) -> None:
        """At a re-registration: what the core's advice (``outlook.whenBrokerReturns``) says each leaderless
        partition with the broker as a replica will have as leader once it is back (clean or unclean return)."""
        for record in records:
            if record.type == "BROKER_REGISTRATION_CHANGE_RECORD" and record.data.get("fenced", 0) != 0:
                # another broker's fencing state changes while one is returning: the outlook assumed it did not
                for returning in list(self.returning):
                    if returning != record.data["brokerId"]:
                        del self.returning[returning]
            trigger = _trigger(record, self.cluster)
            if trigger is None or trigger.kind != "register":
                continue
            expected: dict[Key, int] = {}
            for topic, p in self.cluster.iter_partitions():
                if p.leader != -1 or trigger.broker not in p.replicas:
                    continue
                look = outlook(p, self.cluster.brokers, topic_context(self.cluster, topic), self.cluster.is_active)
                entry = next(e for e in look["whenBrokerReturns"] if e["broker"] == trigger.broker)
                expected[(topic.topic_id, p.partition_id)] = (entry if trigger.clean else entry["ifUncleanRestart"])[
                    "elects"
                ]
            self.returning[trigger.broker] = (trigger, expected)

    def _check_returns(self, records: list[Record]) -> None:
        """After the returning broker's unfence: each partition's leader is the one the advice foresaw."""
        for record in records:
            if record.type != "BROKER_REGISTRATION_CHANGE_RECORD" or record.data.get("fenced", 0) != -1:
                continue
            pending = self.returning.pop(record.data["brokerId"], None)
            if pending is None:
                continue
            trigger, expected = pending
            self.report.return_checks += len(expected)
            for key, elects in expected.items():
                p = self.cluster.partition(*key)
                if p is not None and p.leader != elects:
                    self.report.mismatches.append(
                        f"advice: broker {trigger.broker} returning ({'clean' if trigger.clean else 'unclean'}, "
                        f"registered at offset {trigger.offset}) was to make {key[0][:6]}-{key[1]} elect {elects}; "
                        f"Kafka's leader after its unfence at offset {record.offset} is {p.leader}"
                    )

    def _verdict(
        self, trigger: Trigger, predicted: list[tuple[Key, dict[str, Any]]], actual: list[tuple[Key, dict[str, Any]]]
    ) -> None:
        ok = _same(predicted, actual)
        keys = [key for key, _ in predicted]
        if ok and len(set(keys)) < len(keys):
            self.report.duplicate_elr_passes += 1
        detail = "" if ok else f"model {_show(predicted)} | Kafka {_show(actual)}"
        self.report.checks.append(TriggerCheck(trigger, len(predicted), ok, detail))
        if not ok:
            self.report.mismatches.append(
                f"{trigger.kind} of broker {trigger.broker} at offset {trigger.offset}"
                f"{'' if trigger.kind != 'register' else ' (clean)' if trigger.clean else ' (unclean)'}: {detail}"
            )

    def _explain(self, run: list[tuple[Record, PartitionState | None]], has_trigger: bool) -> None:
        for record, before in run:
            how = explain(record, before, self.cluster, elections=not has_trigger)
            if how is None:
                self.report.mismatches.append(
                    f"unexplained PartitionChangeRecord at offset {record.offset}: {_plain(record.data)} on {before!r}"
                )
                how = "unexplained"
            self.report.explained[how] += 1

    def _config(self, record: Record, following: Record | None) -> None:
        data = record.data
        if data["name"] != "min.insync.replicas" or not self.cluster.elr_enabled or self.bootstrap:
            return
        if data["resourceType"] == 2:
            topic = data["resourceName"]
        elif data["resourceType"] == 4 and data["resourceName"] == "":
            topic = ""
        else:
            return
        self.report.config_checks += 1
        if following is None or following.type != "CLEAR_ELR_RECORD" or following.data.get("topicName", "") != topic:
            self.report.mismatches.append(
                f"min.insync.replicas ConfigRecord at offset {record.offset} for {topic or 'the cluster'!r}: "
                f"expected a ClearElrRecord next, Kafka wrote {following.type if following else 'nothing'}"
            )


def check_controller(text: str, source: str = "dump") -> ControllerReport:
    """Check every controller trigger of a DumpLogSegments text against the model (see the module docstring)."""
    checker = _ControllerChecker()
    batch: list[Record] = []
    for seq, line in enumerate(text.splitlines(), start=1):
        if line.startswith("baseOffset:"):
            checker.batch(batch)
            batch = []
            continue
        parsed = parse_line(line, source, seq)
        if isinstance(parsed, Record):
            batch.append(parsed)
        else:  # not applied (skipped types, control records): only the bootstrap transaction matters here
            if "BEGIN_TRANSACTION_RECORD" in line and "Bootstrap records" in line:
                checker.bootstrap = True
            checker.replayer.feed_parsed(parsed)
    checker.batch(batch)
    return checker.report
