"""Cluster simulator: drives the controller model and writes the metadata records Kafka would write.

Output is one envelope per line (json-format.md §1.2 payloads plus elrwatch's ``offset``/``timestamp`` keys):
``{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{...},"offset":412,"timestamp":1732100000000}``.
Offsets are strictly increasing from 0, timestamps never decrease, and everything follows from ``seed``.

Record order follows the controller (json-format.md §1.3): bootstrap FEATURE_LEVEL_RECORDs and the cluster
``min.insync.replicas`` CONFIG_RECORD, REGISTER_BROKER_RECORD (v3) + unfence per broker, then TOPIC_RECORD and
PARTITION_RECORDs per topic. Fencing writes the PartitionChangeRecords first and the
BROKER_REGISTRATION_CHANGE_RECORD (``fenced: 1``) after them; unfencing writes ``fenced: -1`` first and then the
elections it enables; controlled shutdown writes ``inControlledShutdown: 1`` first; a new incarnation's
shutdown cleanup comes before its REGISTER_BROKER_RECORD; a ``min.insync.replicas`` change is a CONFIG_RECORD
followed by a CLEAR_ELR_RECORD when ELR is on. A broker's epoch is the offset of its REGISTER_BROKER_RECORD.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from elrwatch.state import controller
from elrwatch.state import metadata_version as mv
from elrwatch.state.merge import clear_elr, merge_partition_change
from elrwatch.state.model import NO_LEADER, BrokerState, PartitionState
from elrwatch.state.record_types import MIN_ISR, UNCLEAN_ENABLE
from elrwatch.state.record_types import RESOURCE_BROKER as BROKER_RESOURCE
from elrwatch.state.record_types import RESOURCE_TOPIC as TOPIC_RESOURCE

BASE_TIMESTAMP_MS = 1_732_100_000_000

# PartitionChangeRecord fields in schema order (after partitionId, topicId).
_CHANGE_FIELDS = (
    "isr",
    "leader",
    "replicas",
    "removingReplicas",
    "addingReplicas",
    "leaderRecoveryState",
    "eligibleLeaderReplicas",
    "lastKnownElr",
)


# Envelope prefixes by (type, version): the line is the prefix, the data, then offset and timestamp.
_PREFIXES: dict[tuple[str, int], bytes] = {}


@dataclass(frozen=True, slots=True)
class ScenarioShape:
    """Cluster shape a scenario needs (None = take the command line's value) and whether ELR is on."""

    brokers: int | None = None
    replication_factor: int | None = None
    min_isr: int | None = None
    elr_enabled: bool = True
    description: str = ""


SCENARIOS: dict[str, ScenarioShape] = {
    "kip966-walkthrough": ScenarioShape(
        4, 4, 3, True, "KIP-966's 4-broker walkthrough: fence 3,2,1,0; 1 back uncleanly; 2 and 3 cleanly."
    ),
    "last-replica-standing-elr": ScenarioShape(
        3, 3, 2, True, "Followers drop out, the last ISR member dies uncleanly; ELR elects a safe replica."
    ),
    "last-replica-standing-no-elr": ScenarioShape(
        3, 3, 2, False, "The same without ELR: the last ISR member is re-elected after losing data."
    ),
    "broker-failure-storm": ScenarioShape(description="One broker of a big cluster is fenced."),
    "rolling-restart": ScenarioShape(description="Every broker: controlled shutdown, clean restart, catch-up."),
    "unclean-shutdown-elr-member": ScenarioShape(
        None, 3, 2, True, "An ELR member restarts uncleanly and loses its ELR seat; a clean one is elected."
    ),
    "min-isr-change": ScenarioShape(
        None, 3, 2, True, "min.insync.replicas changes with ELR populated: ClearElrRecord strands partitions."
    ),
}


@dataclass(slots=True)
class SimTopic:
    """A simulated topic: name, id, its configs and its partitions (index into the simulator's list)."""

    name: str
    topic_id: str
    configs: dict[str, str] = field(default_factory=dict)
    first: int = 0  # index of partition 0 in Simulator.partitions
    count: int = 0


class Simulator:
    """A KRaft cluster whose controller is :mod:`elrwatch.state.controller`; every change is written as a record.

    The simulator applies each record it writes with Kafka's replay rules, so :attr:`partitions` and
    :attr:`brokers` are exactly the state a replay of its output must reach.
    """

    def __init__(
        self,
        *,
        brokers: int,
        topics: int,
        partitions: int,
        replication_factor: int,
        min_isr: int,
        seed: int,
        elr_enabled: bool = True,
        metadata_version: int = mv.MV_4_1_IV0,
        out: IO[bytes] | None = None,
        unclean_topic_every: int = 0,
    ) -> None:
        if brokers < 1 or topics < 0 or partitions < 1:
            raise ValueError("need at least one broker and one partition per topic")
        if not 1 <= replication_factor <= brokers:
            raise ValueError(f"replication factor {replication_factor} must be between 1 and {brokers} brokers")
        if min_isr < 1:
            raise ValueError("min ISR must be >= 1")
        if elr_enabled and not mv.is_elr_supported(metadata_version):
            raise ValueError("ELR needs metadata.version >= 4.0-IV1")
        self.rng = random.Random(seed)
        self.broker_count = brokers
        self.replication_factor = replication_factor
        self.min_isr = min_isr
        self.elr_enabled = elr_enabled
        self.metadata_version = metadata_version
        self.out = out
        self.offset = 0
        self.timestamp_ms = BASE_TIMESTAMP_MS
        self.records_written = 0
        self.counts_by_type: dict[str, int] = {}
        self.brokers: dict[int, BrokerState] = {}
        self.log_dirs: dict[int, str] = {}
        self.cluster_configs: dict[str, str] = {}
        self.topics: list[SimTopic] = []
        self.partitions: list[PartitionState] = []
        self.topic_of: list[int] = []  # partition index -> topic index
        self.contexts: list[controller.TopicContext] = []
        self._chunks: list[bytes] = []
        self._chunk_bytes = 0
        self._topic_count = topics
        self._partition_count = partitions
        self._unclean_topic_every = unclean_topic_every
        self._pcr_version = mv.partition_change_record_version(metadata_version)

    # ----------------------------------------------------------------------------------------------------------
    # output

    def uuid(self) -> str:
        """A Kafka Uuid string from the seeded RNG (never starting with '-', like Uuid.randomUuid)."""
        while True:
            text = base64.urlsafe_b64encode(self.rng.getrandbits(128).to_bytes(16, "big")).decode()[:22]
            if not text.startswith("-") and text not in ("AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQ"):
                return text

    def tick(self, max_step_ms: int = 20) -> None:
        """Advance the clock before the next controller event (records of one event share a timestamp)."""
        self.timestamp_ms += self.rng.randint(1, max_step_ms)

    def emit(self, record_type: str, version: int, data: dict[str, Any]) -> int:
        """Write one envelope; returns its offset."""
        offset = self.offset
        self.offset = offset + 1
        self.records_written += 1
        counts = self.counts_by_type
        counts[record_type] = counts.get(record_type, 0) + 1
        if self.out is not None:
            prefix = _PREFIXES.get((record_type, version))
            if prefix is None:
                prefix = _PREFIXES[(record_type, version)] = (
                    f'{{"type":"{record_type}","version":{version},"data":'.encode()
                )
            line = b'%s%s,"offset":%d,"timestamp":%d}' % (prefix, orjson.dumps(data), offset, self.timestamp_ms)
            self._chunks.append(line)
            self._chunk_bytes += len(line)
            if self._chunk_bytes > 1 << 20:
                self.flush()
        return offset

    def flush(self) -> None:
        """Write buffered lines to the output."""
        if self.out is not None and self._chunks:
            self._chunks.append(b"")
            self.out.write(b"\n".join(self._chunks))
            self._chunks = []
            self._chunk_bytes = 0

    def _change(self, index: int, change: dict[str, Any]) -> None:
        p = self.partitions[index]
        data: dict[str, Any] = {"partitionId": p.partition_id, "topicId": p.topic_id}
        for name in _CHANGE_FIELDS:
            if name in change:
                data[name] = change[name]
        self.emit("PARTITION_CHANGE_RECORD", self._pcr_version, data)
        merge_partition_change(p, change)

    # ----------------------------------------------------------------------------------------------------------
    # cluster setup

    def bootstrap(self) -> None:
        """Features, cluster config, brokers (registered and unfenced), topics and their partitions."""
        self.tick()
        self.emit("FEATURE_LEVEL_RECORD", 0, {"name": mv.FEATURE_NAME, "featureLevel": self.metadata_version})
        if self.elr_enabled:
            self.emit("FEATURE_LEVEL_RECORD", 0, {"name": mv.ELR_FEATURE_NAME, "featureLevel": 1})
        self._config(BROKER_RESOURCE, "", MIN_ISR, str(self.min_isr))
        for broker_id in range(self.broker_count):
            self.log_dirs[broker_id] = self.uuid()
            self._register(broker_id)
        self.tick()
        for broker_id in range(self.broker_count):
            self._set_fenced(broker_id, False)
        for topic_index in range(self._topic_count):
            self.create_topic(f"topic-{topic_index}", self._partition_count)

    def _config(self, resource_type: int, resource_name: str, name: str, value: str | None) -> None:
        self.emit(
            "CONFIG_RECORD",
            0,
            {"resourceType": resource_type, "resourceName": resource_name, "name": name, "value": value},
        )
        if resource_type == BROKER_RESOURCE and resource_name == "":
            if value is None:
                self.cluster_configs.pop(name, None)
            else:
                self.cluster_configs[name] = value
        elif resource_type == TOPIC_RESOURCE:
            for index, topic in enumerate(self.topics):
                if topic.name == resource_name:
                    if value is None:
                        topic.configs.pop(name, None)
                    else:
                        topic.configs[name] = value
                    self.contexts[index] = self._context(topic)

    def _context(self, topic: SimTopic) -> controller.TopicContext:
        configured = topic.configs.get(MIN_ISR, self.cluster_configs.get(MIN_ISR, "1"))
        replicas = len(self.partitions[topic.first].replicas) if topic.count else self.replication_factor
        unclean = topic.configs.get(UNCLEAN_ENABLE, self.cluster_configs.get(UNCLEAN_ENABLE, "false"))
        return controller.TopicContext(
            min_isr=controller.effective_min_isr(int(configured), replicas),
            elr_enabled=self.elr_enabled,
            unclean_enabled=unclean.strip().lower() == "true",
            metadata_version=self.metadata_version,
        )

    def _register(self, broker_id: int) -> None:
        incarnation = self.uuid()
        offset = self.offset
        features = [{"name": mv.FEATURE_NAME, "minSupportedVersion": 7, "maxSupportedVersion": mv.LATEST_LEVEL}]
        if self.elr_enabled:
            features.append({"name": mv.ELR_FEATURE_NAME, "minSupportedVersion": 0, "maxSupportedVersion": 1})
        self.emit(
            "REGISTER_BROKER_RECORD",
            mv.register_broker_record_version(self.metadata_version),
            {
                "brokerId": broker_id,
                "isMigratingZkBroker": False,
                "incarnationId": incarnation,
                "brokerEpoch": offset,
                "endPoints": [
                    {"name": "PLAINTEXT", "host": f"broker-{broker_id}", "port": 9092, "securityProtocol": 0}
                ],
                "features": features,
                "rack": None,
                "fenced": True,
                "inControlledShutdown": False,
                "logDirs": [self.log_dirs[broker_id]],
            },
        )
        self.brokers[broker_id] = BrokerState(
            broker_id, epoch=offset, incarnation_id=incarnation, fenced=True, in_controlled_shutdown=False
        )

    def _set_fenced(self, broker_id: int, fenced: bool) -> None:
        state = self.brokers[broker_id]
        self.emit(
            "BROKER_REGISTRATION_CHANGE_RECORD",
            0,
            {"brokerId": broker_id, "brokerEpoch": state.epoch, "fenced": 1 if fenced else -1},
        )
        state.fenced = fenced

    def placement(self, topic_index: int, partition_id: int) -> tuple[int, ...]:
        """Replicas of a new partition: striped round-robin, the preferred leader rotating over brokers."""
        n = self.broker_count
        start = (topic_index * 7 + partition_id) % n
        step = 1 + (partition_id // n) % max(1, n - 1) if n > self.replication_factor else 1
        replicas: list[int] = []
        candidate = start
        while len(replicas) < self.replication_factor:
            if candidate not in replicas:
                replicas.append(candidate)
                candidate = (candidate + step) % n
            else:
                candidate = (candidate + 1) % n
        return tuple(replicas)

    def create_topic(self, name: str, partition_count: int, configs: dict[str, str] | None = None) -> SimTopic:
        """TOPIC_RECORD, topic CONFIG_RECORDs, then one PARTITION_RECORD per partition (ISR = active replicas)."""
        topic_index = len(self.topics)
        topic = SimTopic(name, self.uuid(), first=len(self.partitions))
        self.topics.append(topic)
        self.contexts.append(self._context(topic))
        self.tick()
        self.emit("TOPIC_RECORD", 0, {"name": name, "topicId": topic.topic_id})
        configs = dict(configs or {})
        if self._unclean_topic_every and topic_index % self._unclean_topic_every == self._unclean_topic_every - 1:
            configs.setdefault(UNCLEAN_ENABLE, "true")
        for key, value in configs.items():
            self._config(TOPIC_RESOURCE, name, key, value)
        active = controller.active_brokers(self.brokers)
        version = mv.partition_record_version(self.metadata_version)
        with_dirs = version >= 1
        replica_cache: dict[tuple[int, ...], tuple[tuple[int, ...], list[str]]] = {}
        for partition_id in range(partition_count):
            replicas = self.placement(topic_index, partition_id)
            cached = replica_cache.get(replicas)
            if cached is None:
                isr = tuple(r for r in replicas if r in active)
                if not isr:
                    raise ValueError(f"cannot create {name}-{partition_id}: no active replica")
                cached = replica_cache[replicas] = (isr, [self.log_dirs[r] for r in replicas])
            isr, dirs = cached
            data: dict[str, Any] = {
                "partitionId": partition_id,
                "topicId": topic.topic_id,
                "replicas": replicas,
                "isr": isr,
                "removingReplicas": (),
                "addingReplicas": (),
                "leader": isr[0],
                "leaderEpoch": 0,
                "partitionEpoch": 0,
            }
            if with_dirs:
                data["directories"] = dirs
            self.emit("PARTITION_RECORD", version, data)
            self.partitions.append(PartitionState(topic.topic_id, partition_id, replicas, isr, leader=isr[0]))
            self.topic_of.append(topic_index)
        topic.count = partition_count
        self.contexts[topic_index] = self._context(topic)
        return topic

    # ----------------------------------------------------------------------------------------------------------
    # controller events (whole cluster)

    def _each_partition(self, wanted: Callable[[PartitionState], bool]) -> Iterable[int]:
        return [index for index, p in enumerate(self.partitions) if wanted(p)]

    def fence(self, broker_id: int) -> None:
        """Heartbeat timeout: remove the broker from every ISR (elections), then the fence record."""
        self.tick()
        acceptable = controller.acceptable_leaders(self.brokers, exclude=broker_id)
        self._remove_from_isrs(broker_id, acceptable)
        self._set_fenced(broker_id, True)

    def _remove_from_isrs(self, broker_id: int, acceptable: controller.Acceptable, *, unclean: bool = False) -> None:
        contexts = self.contexts
        topic_of = self.topic_of
        for index, p in enumerate(self.partitions):
            if broker_id in p.isr:
                change = controller.remove_broker_change(
                    p, broker_id, acceptable, contexts[topic_of[index]], unclean_shutdown=unclean
                )
                if change is not None:
                    self._change(index, change)

    def controlled_shutdown(self, broker_id: int) -> None:
        """The broker asks to shut down: inControlledShutdown record, then it leaves every ISR."""
        self.tick()
        state = self.brokers[broker_id]
        if not state.in_controlled_shutdown:
            self.emit(
                "BROKER_REGISTRATION_CHANGE_RECORD",
                1,
                {"brokerId": broker_id, "brokerEpoch": state.epoch, "inControlledShutdown": 1},
            )
            state.in_controlled_shutdown = True
        acceptable = controller.acceptable_leaders(self.brokers, exclude=broker_id)
        self._remove_from_isrs(broker_id, acceptable)

    def restart(self, broker_id: int, clean: bool) -> None:
        """A new incarnation registers: shutdown cleanup records (unclean: ISR and ELR), then its registration."""
        self.tick()
        acceptable = controller.acceptable_leaders(self.brokers, exclude=broker_id)
        if clean or not self.elr_enabled:
            self._remove_from_isrs(broker_id, acceptable)
        else:
            in_elr = [index for index, p in enumerate(self.partitions) if broker_id in p.elr]
            self._remove_from_isrs(broker_id, acceptable, unclean=True)
            for index in in_elr:  # the ELR pass sees registrations as they were before the ISR pass
                p = self.partitions[index]
                change = controller.remove_broker_change(
                    p, broker_id, acceptable, self.contexts[self.topic_of[index]], unclean_shutdown=True
                )
                if change is not None:
                    self._change(index, change)
        self._register(broker_id)

    def unfence(self, broker_id: int) -> None:
        """The broker caught up: unfence record, then elections for every leaderless partition."""
        self.tick()
        self._set_fenced(broker_id, False)
        acceptable = controller.acceptable_leaders(self.brokers, include=broker_id)
        for index, p in enumerate(self.partitions):
            # Kafka runs the builder on every leaderless partition; one without this broker among its replicas
            # is a fixed point of the builder here (nobody else became live since its last election attempt),
            # so skipping it writes exactly the same records.
            if p.leader == NO_LEADER and broker_id in p.replicas:
                change = controller.unfence_change(p, acceptable, self.contexts[self.topic_of[index]])
                if change is not None:
                    self._change(index, change)

    def alter_partition(
        self,
        index: int,
        new_isr: tuple[int, ...],
        recovered: bool = False,
        active: controller.Acceptable | None = None,
    ) -> bool:
        """The leader's AlterPartition (v3, with broker epochs). Returns whether a record was written."""
        p = self.partitions[index]
        members = [(r, self.brokers[r].epoch if r in self.brokers else -1) for r in new_isr]
        decision = controller.alter_partition(
            p,
            self.brokers,
            self.contexts[self.topic_of[index]],
            p.leader,
            members,
            leader_recovery_state=0 if recovered else p.leader_recovery_state,
            active=active,
        )
        if decision.error is not None and decision.error != controller.NEW_LEADER_ELECTED:
            return False
        for record in decision.records:
            self._change(index, record)
        return bool(decision.records)

    def catch_up(self, broker_id: int) -> None:
        """Followers on ``broker_id`` caught up: each live leader adds it back to the ISR (and finishes recovery)."""
        self.tick()
        state = self.brokers.get(broker_id)
        if state is None or not state.active:
            return
        active = controller.active_brokers(self.brokers)
        for index, p in enumerate(self.partitions):
            if broker_id not in p.replicas or p.leader == NO_LEADER:
                continue
            if p.leader not in active:
                continue
            if p.leader_recovery_state == 1:
                self.alter_partition(index, p.isr, recovered=True, active=active)
            if broker_id not in p.isr:
                self.alter_partition(index, (*p.isr, broker_id), active=active)

    def shrink_isr(self, index: int, follower: int) -> bool:
        """A follower lags: its leader removes it from the ISR."""
        p = self.partitions[index]
        if follower == p.leader or follower not in p.isr:
            return False
        return self.alter_partition(index, tuple(r for r in p.isr if r != follower))

    def slow_follower(self, broker_id: int) -> None:
        """A broker falls behind: every live leader it follows drops it from the ISR (AlterPartition)."""
        self.tick()
        active = controller.active_brokers(self.brokers)
        for index, p in enumerate(self.partitions):
            if broker_id in p.isr and p.leader != broker_id and p.leader in active:
                self.alter_partition(index, tuple(r for r in p.isr if r != broker_id), active=active)

    def preferred_elections(self) -> None:
        """The periodic preferred-leader rebalance for every imbalanced partition."""
        self.tick()
        active = controller.active_brokers(self.brokers)
        for index, p in enumerate(self.partitions):
            if p.replicas and p.leader != p.replicas[0]:
                preferred = p.replicas[0]
                pool = p.isr or p.elr
                if p.leader != NO_LEADER and (preferred not in pool or preferred not in active):
                    continue  # the current leader stays: the builder would write nothing
                ctx = self.contexts[self.topic_of[index]]
                decision = controller.periodic_preferred_election(p, self.brokers, ctx, active)
                for record in decision.records:
                    self._change(index, record)

    def unclean_elections(self) -> None:
        """The periodic unclean election for leaderless partitions of topics with unclean election enabled."""
        self.tick()
        active = controller.active_brokers(self.brokers)
        for index, p in enumerate(self.partitions):
            if p.leader == NO_LEADER:
                ctx = self.contexts[self.topic_of[index]]
                if ctx.unclean_enabled:
                    for record in controller.periodic_unclean_election(p, self.brokers, ctx, active).records:
                        self._change(index, record)

    def operator_unclean_elections(self) -> None:
        """An operator runs ``kafka-leader-election.sh --election-type unclean`` for every leaderless partition
        (ElectLeaders UNCLEAN: ISR/ELR first, then the last known leader, then any live replica)."""
        self.tick()
        active = controller.active_brokers(self.brokers)
        if not active:
            return
        for index, p in enumerate(self.partitions):
            if p.leader == NO_LEADER and any(r in active for r in p.replicas):
                decision = controller.elect_leaders(
                    p, controller.UNCLEAN, self.brokers, self.contexts[self.topic_of[index]]
                )
                for record in decision.records:
                    self._change(index, record)

    def change_min_isr(self, value: int, topic: SimTopic | None = None) -> None:
        """A min.insync.replicas ConfigRecord (topic or cluster level) and, with ELR on, its ClearElrRecord."""
        self.tick()
        if topic is None:
            self._config(BROKER_RESOURCE, "", MIN_ISR, str(value))
            self.contexts = [self._context(t) for t in self.topics]
        else:
            self._config(TOPIC_RESOURCE, topic.name, MIN_ISR, str(value))
        if self.elr_enabled:
            self.emit("CLEAR_ELR_RECORD", 0, {"topicName": "" if topic is None else topic.name})
            for index, p in enumerate(self.partitions):
                if topic is None or self.topics[self.topic_of[index]] is topic:
                    clear_elr(p)

    # ----------------------------------------------------------------------------------------------------------
    # scenarios and random faults

    def run_scenario(self, name: str) -> None:
        """Run a named scenario (see :data:`SCENARIOS`) after :meth:`bootstrap`."""
        steps = {
            "kip966-walkthrough": self._kip966_walkthrough,
            "last-replica-standing-elr": self._last_replica_standing,
            "last-replica-standing-no-elr": self._last_replica_standing,
            "broker-failure-storm": lambda: self.fence(0),
            "rolling-restart": self._rolling_restart,
            "unclean-shutdown-elr-member": self._unclean_shutdown_elr_member,
            "min-isr-change": self._min_isr_change,
        }
        if name not in steps:
            raise ValueError(f"unknown scenario {name!r} (known: {', '.join(sorted(steps))})")
        steps[name]()
        self.flush()

    def _back(self, *brokers: tuple[int, bool]) -> None:
        """Restart each (broker id, clean) in turn, then unfence it."""
        for broker_id, clean in brokers:
            self.restart(broker_id, clean=clean)
            self.unfence(broker_id)

    def _kip966_walkthrough(self) -> None:
        for broker_id in (3, 2, 1, 0):
            self.fence(broker_id)
        self._back((1, False), (2, True), (3, True))
        self.catch_up(1)
        self.catch_up(3)

    def _last_replica_standing(self) -> None:
        for broker_id in (0, 1, 2):
            self.fence(broker_id)
        self._back((2, False))
        self.unfence(0)
        self.unfence(1)
        for broker_id in (0, 1, 2):
            self.catch_up(broker_id)

    def _rolling_restart(self) -> None:
        for broker_id in sorted(self.brokers):
            self.controlled_shutdown(broker_id)
            self.fence(broker_id)
            self._back((broker_id, True))
            self.catch_up(broker_id)
        self.preferred_elections()

    def _unclean_shutdown_elr_member(self) -> None:
        for broker_id in (0, 1, 2):
            self.fence(broker_id)
        self._back((1, False), (2, True), (0, True))
        for broker_id in (0, 1, 2):
            self.catch_up(broker_id)

    def _min_isr_change(self) -> None:
        self.fence(1)
        self.fence(2)
        if self.topics:
            self.change_min_isr(max(1, self.min_isr - 1), self.topics[0])
        self.change_min_isr(self.min_isr)
        self._back((1, True), (2, True))
        for broker_id in (1, 2):
            self.catch_up(broker_id)

    def run_faults(self, rate: float, records: int) -> None:
        """Random controller events until at least ``records`` records are written (stops at an event boundary).

        ``rate`` in [0, 1] is the chance that an event is a fault (fence, controlled shutdown, unclean restart,
        lagging followers, min ISR change) rather than a recovery (restart + unfence, catch-up, elections).
        While a third of the brokers (at least one) is down, only recoveries happen.
        """
        if not 0.0 <= rate <= 1.0:
            raise ValueError("fault rate must be between 0 and 1")
        rng = self.rng
        idle = 0
        while self.records_written < records:
            before = self.records_written
            down = sum(1 for state in self.brokers.values() if not state.active)
            if down < max(1, self.broker_count // 3) and rng.random() < rate:
                self._random_fault()
            else:
                self._random_recovery()
            idle = idle + 1 if self.records_written == before else 0
            if idle > 1000:  # nothing left to do (e.g. rate 0 on a healthy cluster): heartbeat-free no-ops
                break
        self.flush()

    def _random_fault(self) -> None:
        rng = self.rng
        active = sorted(b for b, s in self.brokers.items() if s.active)
        roll = rng.random()
        if roll < 0.35 and active:
            self.fence(rng.choice(active))
        elif roll < 0.5 and active:
            broker_id = rng.choice(active)
            self.controlled_shutdown(broker_id)
            self.fence(broker_id)
        elif roll < 0.65:
            broker_id = rng.choice(sorted(self.brokers))
            if not self.brokers[broker_id].fenced:
                self.fence(broker_id)
            self.restart(broker_id, clean=False)
        elif roll < 0.8 and active:
            self.slow_follower(rng.choice(active))
        elif roll < 0.97 and self.partitions:
            self.tick()
            for _ in range(rng.randint(1, 8)):
                index = rng.randrange(len(self.partitions))
                p = self.partitions[index]
                followers = [r for r in p.isr if r != p.leader]
                if followers and p.leader in self.brokers and self.brokers[p.leader].active:
                    self.shrink_isr(index, rng.choice(followers))
        elif self.topics:
            topic = rng.choice(self.topics) if rng.random() < 0.7 else None
            self.change_min_isr(rng.randint(1, self.replication_factor), topic)

    def _random_recovery(self) -> None:
        rng = self.rng
        fenced = sorted(b for b, s in self.brokers.items() if s.fenced)
        active = sorted(b for b, s in self.brokers.items() if s.active)
        roll = rng.random()
        if roll < 0.45 and fenced:
            broker_id = rng.choice(fenced)
            if self.brokers[broker_id].in_controlled_shutdown:  # it shut down: a new incarnation comes back
                self.restart(broker_id, clean=True)
            elif rng.random() < 0.5:
                self.restart(broker_id, clean=rng.random() < 0.7)
            self.unfence(broker_id)
        elif roll < 0.85 and active:
            self.catch_up(rng.choice(active))
        elif roll < 0.93:
            self.preferred_elections()
        elif roll < 0.97:
            self.unclean_elections()
        else:
            self.operator_unclean_elections()


def simulate(
    out: IO[bytes] | None,
    *,
    brokers: int,
    topics: int,
    partitions: int,
    replication_factor: int,
    min_isr: int,
    seed: int,
    scenario: str | None = None,
    faults: float | None = None,
    records: int | None = None,
    metadata_version: int = mv.MV_4_1_IV0,
) -> Simulator:
    """Build a cluster and run a scenario or random faults, writing envelopes to ``out``; returns the simulator.

    A scenario fixes the shape it needs (brokers, replication factor, min ISR, ELR on/off: see SCENARIOS);
    ``records`` bounds random-fault runs (default 10000).
    """
    if (scenario is None) == (faults is None):
        raise ValueError("give exactly one of a scenario or a fault rate")
    elr_enabled = True
    if scenario is not None:
        shape = SCENARIOS.get(scenario)
        if shape is None:
            raise ValueError(f"unknown scenario {scenario!r} (known: {', '.join(sorted(SCENARIOS))})")
        brokers = shape.brokers or brokers
        replication_factor = shape.replication_factor or replication_factor
        min_isr = shape.min_isr or min_isr
        elr_enabled = shape.elr_enabled
        if scenario in ("unclean-shutdown-elr-member", "min-isr-change"):
            brokers = max(brokers, 3)
    simulator = Simulator(
        brokers=brokers,
        topics=topics,
        partitions=partitions,
        replication_factor=replication_factor,
        min_isr=min_isr,
        seed=seed,
        elr_enabled=elr_enabled,
        metadata_version=metadata_version,
        out=out,
        unclean_topic_every=4 if faults is not None else 0,
    )
    simulator.bootstrap()
    if scenario is not None:
        simulator.run_scenario(scenario)
    else:
        simulator.run_faults(float(faults), 10_000 if records is None else records)  # type: ignore[arg-type]
    simulator.flush()
    return simulator
