"""A small, fast generator of plausible KRaft metadata events (envelope lines with offset + timestamp).

The events of ``elrwatch produce --simulate`` (a steady load for an event topic, ``--sim-loop`` for as long as
wanted), of the streaming tests and the benchmarks, and the demo's fallback when ``elrwatch simulate`` fails. Pure
Python (orjson only), next to the controller model it is lighter than (``simulator.py``). It models what the
controller writes when brokers fail and return (json-format.md §1.3): on a fence, PartitionChangeRecords remove the
broker from ISRs (moving it to the ELR when the ISR falls below min ISR, ELR enabled) and elect a new leader from
the ISR, then the fence record; on an unfence, the unfence record first, then the broker rejoins ISRs and
leaderless partitions elect it. It is not a controller model: the oracle is `elrwatch replay` of the same lines.
"""

from __future__ import annotations

import base64
import random
import time
from collections.abc import Iterator

import orjson

DIR0 = "AAAAAAAAAAAAAAAAAAAAAA"


def uuid22(rng: random.Random) -> str:
    """A Kafka Uuid string (22 chars URL-safe base64, no padding), never a reserved one."""
    raw = bytearray(rng.getrandbits(8) for _ in range(16))
    raw[0] |= 0x40
    return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


def new_partition(topic_id: str, partition: int, replicas: list[int], isr: list[int], leader: int) -> dict:
    """The data of a new partition's PARTITION_RECORD (version 2): epochs 0, no reassignment, every replica's
    directory ``DIR0``."""
    return {
        "partitionId": partition,
        "topicId": topic_id,
        "replicas": replicas,
        "isr": isr,
        "removingReplicas": [],
        "addingReplicas": [],
        "leader": leader,
        "leaderEpoch": 0,
        "partitionEpoch": 0,
        "directories": [DIR0] * len(replicas),
    }


class EventGenerator:
    """Cluster of ``brokers`` brokers, ``topics`` topics of ``partitions`` partitions each (RF ``rf``)."""

    def __init__(
        self,
        topics: int = 3,
        partitions: int = 10,
        brokers: int = 4,
        rf: int = 3,
        min_isr: int = 2,
        seed: int = 7,
        start_offset: int = 0,
        start_ms: int = 1_732_100_000_000,
        elr: bool = True,
        wallclock: bool = False,
    ) -> None:
        self.rng = random.Random(seed)
        self.wallclock = wallclock  # timestamps = time of generation (freshness benchmarks)
        self.n_brokers = brokers
        self.rf = rf
        self.min_isr = min_isr
        self.elr = elr
        self.offset = start_offset
        self.now_ms = start_ms
        self.topic_ids = [uuid22(self.rng) for _ in range(topics)]
        self.topic_names = [f"topic-{i}" for i in range(topics)]
        self.partitions_per_topic = partitions
        self.epochs = {b: 100 + b for b in range(brokers)}
        self.fenced: set[int] = set()
        # per partition: [replicas, isr, elr, leader]
        self.parts: dict[tuple[int, int], list] = {}
        self.by_broker: dict[int, set[tuple[int, int]]] = {b: set() for b in range(brokers)}

    # ------------------------------------------------------------------------------------------ helpers
    def _line(self, type_: str, version: int, data: dict) -> bytes:
        self.offset += 1
        self.now_ms = max(self.now_ms + 1, int(time.time() * 1000)) if self.wallclock else self.now_ms + 1
        return orjson.dumps(
            {"type": type_, "version": version, "data": data, "offset": self.offset, "timestamp": self.now_ms}
        )

    def _pcr(self, t: int, p: int, **fields: object) -> bytes:
        data = {"partitionId": p, "topicId": self.topic_ids[t], **fields}
        return self._line("PARTITION_CHANGE_RECORD", 2, data)

    # ------------------------------------------------------------------------------------------ events
    def bootstrap(self) -> Iterator[bytes]:
        """Features, cluster min ISR, brokers registered and unfenced, topics and their partitions."""
        yield self._line("FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": 26})
        yield self._line(
            "CONFIG_RECORD",
            0,
            {"resourceType": 4, "resourceName": "", "name": "min.insync.replicas", "value": str(self.min_isr)},
        )
        if self.elr:
            yield self._line("FEATURE_LEVEL_RECORD", 0, {"name": "eligible.leader.replicas.version", "featureLevel": 1})
        for b in range(self.n_brokers):
            yield self._line(
                "REGISTER_BROKER_RECORD",
                3,
                {
                    "brokerId": b,
                    "isMigratingZkBroker": False,
                    "incarnationId": uuid22(self.rng),
                    "brokerEpoch": self.epochs[b],
                    "endPoints": [{"name": "PLAINTEXT", "host": f"b{b}", "port": 9092, "securityProtocol": 0}],
                    "features": [{"name": "metadata.version", "minSupportedVersion": 7, "maxSupportedVersion": 26}],
                    "rack": None,
                    "fenced": True,
                    "inControlledShutdown": False,
                    "logDirs": [DIR0],
                },
            )
            yield self._line(
                "BROKER_REGISTRATION_CHANGE_RECORD", 0, {"brokerId": b, "brokerEpoch": self.epochs[b], "fenced": -1}
            )
        for t, tid in enumerate(self.topic_ids):
            yield self._line("TOPIC_RECORD", 0, {"name": self.topic_names[t], "topicId": tid})
            for p in range(self.partitions_per_topic):
                first = (t + p) % self.n_brokers
                replicas = [(first + i) % self.n_brokers for i in range(self.rf)]
                isr = [r for r in replicas if r not in self.fenced]
                leader = isr[0] if isr else -1
                self.parts[(t, p)] = [replicas, isr, [], leader]
                for r in replicas:
                    self.by_broker[r].add((t, p))
                yield self._line("PARTITION_RECORD", 2, new_partition(tid, p, replicas, isr, leader))

    def fence(self, b: int) -> Iterator[bytes]:
        """Broker ``b`` fails: leave ISRs (to the ELR below min ISR), leaders move, then the fence record."""
        if b in self.fenced:
            return
        for key in sorted(self.by_broker[b]):
            replicas, isr, elr, leader = self.parts[key]
            if b not in isr:
                continue
            new_isr = [r for r in isr if r != b]
            fields: dict[str, object] = {}
            new_elr = list(elr)
            if self.elr and len(new_isr) < self.min_isr:
                # below min ISR: the removed member (and the others that leave) keep their eligibility
                new_elr = sorted(set(elr) | {b})
            new_leader = leader
            if leader == b:
                new_leader = new_isr[0] if new_isr else -1
                fields["leader"] = new_leader
            if not new_isr and self.elr:
                new_isr = []
            fields["isr"] = new_isr
            if new_elr != elr:
                fields["eligibleLeaderReplicas"] = new_elr
            self.parts[key] = [replicas, new_isr, new_elr, new_leader]
            yield self._pcr(key[0], key[1], **fields)
        self.fenced.add(b)
        yield self._line(
            "BROKER_REGISTRATION_CHANGE_RECORD", 0, {"brokerId": b, "brokerEpoch": self.epochs[b], "fenced": 1}
        )

    def unfence(self, b: int) -> Iterator[bytes]:
        """Broker ``b`` returns: the unfence record, then it rejoins ISRs and leaderless partitions elect it."""
        if b not in self.fenced:
            return
        self.fenced.discard(b)
        yield self._line(
            "BROKER_REGISTRATION_CHANGE_RECORD", 0, {"brokerId": b, "brokerEpoch": self.epochs[b], "fenced": -1}
        )
        for key in sorted(self.by_broker[b]):
            replicas, isr, elr, leader = self.parts[key]
            if b in isr:
                continue
            new_isr = [r for r in replicas if r in isr or r == b]
            fields: dict[str, object] = {"isr": new_isr}
            new_elr = [r for r in elr if r not in new_isr]
            if len(new_isr) >= self.min_isr:
                new_elr = []
            if new_elr != elr:
                fields["eligibleLeaderReplicas"] = new_elr
            new_leader = leader
            if leader == -1:
                new_leader = b
                fields["leader"] = b
            self.parts[key] = [replicas, new_isr, new_elr, new_leader]
            yield self._pcr(key[0], key[1], **fields)

    def steps(self, n: int) -> Iterator[bytes]:
        """``n`` random broker failures / recoveries (at least one broker stays up)."""
        for _ in range(n):
            down = sorted(self.fenced)
            up = [b for b in range(self.n_brokers) if b not in self.fenced]
            if down and (len(up) <= 1 or self.rng.random() < 0.5):
                yield from self.unfence(self.rng.choice(down))
            else:
                yield from self.fence(self.rng.choice(up))

    def churn(self, n: int) -> Iterator[bytes]:
        """``n`` single-partition leader moves inside the ISR (steady background traffic)."""
        keys = list(self.parts)
        for _ in range(n):
            key = keys[self.rng.randrange(len(keys))]
            replicas, isr, elr, leader = self.parts[key]
            if len(isr) < 2:
                yield self._pcr(key[0], key[1])  # an epoch bump with no change
                continue
            new_leader = isr[(isr.index(leader) + 1) % len(isr)] if leader in isr else isr[0]
            self.parts[key] = [replicas, isr, elr, new_leader]
            yield self._pcr(key[0], key[1], leader=new_leader)


def scenario(
    topics: int = 3, partitions: int = 10, brokers: int = 4, steps: int = 20, churn: int = 0, seed: int = 7
) -> list[bytes]:
    """Bootstrap + ``steps`` broker failures/recoveries + ``churn`` leader moves, as a list of lines."""
    gen = EventGenerator(topics=topics, partitions=partitions, brokers=brokers, seed=seed)
    lines = list(gen.bootstrap())
    lines.extend(gen.steps(steps))
    lines.extend(gen.churn(churn))
    return lines


def simulated_lines(
    topics: int, partitions: int, brokers: int, steps: int, churn: int, seed: int, loop: bool = False
) -> Iterator[bytes]:
    """Events of the built-in generator: bootstrap, broker failures/recoveries, leader churn (``loop``: forever)."""
    gen = EventGenerator(topics=topics, partitions=partitions, brokers=brokers, seed=seed)
    yield from gen.bootstrap()
    while True:
        yield from gen.steps(steps)
        yield from gen.churn(churn)
        if not loop:
            return
