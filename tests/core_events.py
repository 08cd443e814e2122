"""Helpers for the core's tests: build event lines (dump-log envelope or whole dump-log lines) and feed them.

Only the public input format (json-format.md §1, DESIGN.md §1) is produced here; nothing is copied from the
implementation.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any

from elrwatch.state.replay import Replayer


def uuid_of(n: int) -> str:
    """A valid Kafka Uuid string (22 chars, URL-safe base64 without padding) derived from ``n``."""
    return base64.urlsafe_b64encode(n.to_bytes(16, "big")).decode().rstrip("=")


TOPIC_ID = "FbrrdcfiR-KC2CPSTHaJrg"  # json-format.md §1.2's test Uuid
OTHER_TOPIC_ID = uuid_of(0x5EED_0001)
DIR = "AAAAAAAAAAAAAAAAAAAAAA"  # DirectoryId.MIGRATING


def envelope(
    type_name: str, version: int, data: dict[str, Any], offset: int | None = None, timestamp: int | None = None
) -> dict[str, Any]:
    """The envelope object (optionally with elrwatch's offset/timestamp keys)."""
    env: dict[str, Any] = {"type": type_name, "version": version, "data": data}
    if offset is not None:
        env["offset"] = offset
    if timestamp is not None:
        env["timestamp"] = timestamp
    return env


def line(env: dict[str, Any]) -> str:
    """Compact JSON, as Kafka's ObjectNode.toString() prints it."""
    return json.dumps(env, separators=(",", ":"))


def dump_line(env: dict[str, Any], offset: int = 412, create_time: int = 1732100000000) -> str:
    """A whole `kafka-dump-log.sh --cluster-metadata-decoder` record line around ``env``."""
    payload = line(env)
    return (
        f"| offset: {offset} CreateTime: {create_time} keySize: -1 valueSize: {len(payload)} sequence: -1 "
        f"headerKeys: [] payload: {payload}"
    )


def skip_metadata_line(env: dict[str, Any]) -> str:
    """The `--skip-record-metadata` form: ``| payload: {...}``."""
    return f"| payload: {line(env)}"


# --- record builders (data dicts) ------------------------------------------------------------------------------


def topic(name: str, topic_id: str = TOPIC_ID) -> tuple[str, int, dict[str, Any]]:
    return "TOPIC_RECORD", 0, {"name": name, "topicId": topic_id}


def partition(
    topic_id: str = TOPIC_ID,
    partition_id: int = 0,
    replicas: list[int] | tuple[int, ...] = (0, 1, 2),
    isr: list[int] | tuple[int, ...] | None = None,
    leader: int | None = None,
    leader_epoch: int = 0,
    partition_epoch: int = 0,
    elr: list[int] | None = None,
    last_known_elr: list[int] | None = None,
    leader_recovery_state: int | None = None,
    adding: list[int] | tuple[int, ...] = (),
    removing: list[int] | tuple[int, ...] = (),
    version: int = 2,
) -> tuple[str, int, dict[str, Any]]:
    replicas = list(replicas)
    isr = list(replicas if isr is None else isr)
    if leader is None:
        leader = isr[0] if isr else -1
    data: dict[str, Any] = {
        "partitionId": partition_id,
        "topicId": topic_id,
        "replicas": replicas,
        "isr": isr,
        "removingReplicas": list(removing),
        "addingReplicas": list(adding),
        "leader": leader,
    }
    if leader_recovery_state is not None:
        data["leaderRecoveryState"] = leader_recovery_state
    data["leaderEpoch"] = leader_epoch
    data["partitionEpoch"] = partition_epoch
    if version >= 1:
        data["directories"] = [DIR] * len(replicas)
    if version >= 2:
        if elr is not None:
            data["eligibleLeaderReplicas"] = list(elr)
        if last_known_elr is not None:
            data["lastKnownElr"] = list(last_known_elr)
    return "PARTITION_RECORD", version, data


def change(
    topic_id: str = TOPIC_ID, partition_id: int = 0, version: int = 2, **fields: Any
) -> tuple[str, int, dict[str, Any]]:
    """PartitionChangeRecord with exactly ``fields`` (camelCase keys) besides the key."""
    data: dict[str, Any] = {"partitionId": partition_id, "topicId": topic_id}
    data.update({k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()})
    return "PARTITION_CHANGE_RECORD", version, data


def clear_elr(topic_name: str = "") -> tuple[str, int, dict[str, Any]]:
    return "CLEAR_ELR_RECORD", 0, {"topicName": topic_name}


def remove_topic(topic_id: str = TOPIC_ID) -> tuple[str, int, dict[str, Any]]:
    return "REMOVE_TOPIC_RECORD", 0, {"topicId": topic_id}


def register(
    broker_id: int,
    epoch: int = 100,
    fenced: bool = False,
    in_controlled_shutdown: bool = False,
    version: int = 3,
    rack: str | None = None,
) -> tuple[str, int, dict[str, Any]]:
    data: dict[str, Any] = {"brokerId": broker_id}
    if version >= 2:
        data["isMigratingZkBroker"] = False
    data["incarnationId"] = uuid_of(0xB0 + broker_id * 1000 + epoch)
    data["brokerEpoch"] = epoch
    data["endPoints"] = [{"name": "PLAINTEXT", "host": "localhost", "port": 9092 + broker_id, "securityProtocol": 0}]
    data["features"] = [{"name": "metadata.version", "minSupportedVersion": 7, "maxSupportedVersion": 33}]
    data["rack"] = rack
    data["fenced"] = fenced
    if version >= 1:
        data["inControlledShutdown"] = in_controlled_shutdown
    if version >= 3:
        data["logDirs"] = [DIR]
    return "REGISTER_BROKER_RECORD", version, data


def broker_change(
    broker_id: int,
    epoch: int = 100,
    fenced: int | None = None,
    in_controlled_shutdown: int | None = None,
    version: int = 1,
) -> tuple[str, int, dict[str, Any]]:
    data: dict[str, Any] = {"brokerId": broker_id, "brokerEpoch": epoch}
    if fenced is not None:
        data["fenced"] = fenced
    if in_controlled_shutdown is not None:
        data["inControlledShutdown"] = in_controlled_shutdown
    return "BROKER_REGISTRATION_CHANGE_RECORD", version, data


def fence(broker_id: int, epoch: int = 100) -> tuple[str, int, dict[str, Any]]:
    return "FENCE_BROKER_RECORD", 0, {"id": broker_id, "epoch": epoch}


def unfence(broker_id: int, epoch: int = 100) -> tuple[str, int, dict[str, Any]]:
    return "UNFENCE_BROKER_RECORD", 0, {"id": broker_id, "epoch": epoch}


def unregister(broker_id: int, epoch: int = 100) -> tuple[str, int, dict[str, Any]]:
    return "UNREGISTER_BROKER_RECORD", 0, {"brokerId": broker_id, "brokerEpoch": epoch}


def config(resource_type: int, resource_name: str, name: str, value: str | None) -> tuple[str, int, dict[str, Any]]:
    return (
        "CONFIG_RECORD",
        0,
        {"resourceType": resource_type, "resourceName": resource_name, "name": name, "value": value},
    )


def topic_min_isr(topic_name: str, value: str | None) -> tuple[str, int, dict[str, Any]]:
    return config(2, topic_name, "min.insync.replicas", value)


def cluster_min_isr(value: str | None) -> tuple[str, int, dict[str, Any]]:
    return config(4, "", "min.insync.replicas", value)


def static_config(node: int, name: str, value: str | None) -> tuple[str, int, dict[str, Any]]:
    """elrwatch's STATIC_BROKER_CONFIG_RECORD: a node's server.properties value (None: the file does not set it)."""
    return "STATIC_BROKER_CONFIG_RECORD", 0, {"nodeId": node, "name": name, "value": value}


def static_min_isr(node: int, value: str | None) -> tuple[str, int, dict[str, Any]]:
    return static_config(node, "min.insync.replicas", value)


def feature(name: str, level: int) -> tuple[str, int, dict[str, Any]]:
    return "FEATURE_LEVEL_RECORD", 0, {"name": name, "featureLevel": level}


def elr_feature(enabled: bool = True) -> tuple[str, int, dict[str, Any]]:
    return feature("eligible.leader.replicas.version", 1 if enabled else 0)


# --- feeding ---------------------------------------------------------------------------------------------------


class Feeder:
    """A `Replayer` fed built records as envelope lines with increasing line numbers and metadata offsets."""

    def __init__(
        self,
        source: str = "events.jsonl",
        default_min_isr: int = 1,
        replayer: Replayer | None = None,
        first_offset: int = 100,
        first_seq: int = 1,
        timestamp0: int = 1_732_100_000_000,
    ) -> None:
        self.replayer = replayer if replayer is not None else Replayer(default_min_isr=default_min_isr)
        self.source = source
        self.seq = first_seq - 1
        self.offset = first_offset - 1
        self.timestamp0 = timestamp0

    @property
    def cluster(self):
        return self.replayer.cluster

    def next_line(self, rec: tuple[str, int, dict[str, Any]], with_offset: bool = True) -> tuple[str, int]:
        """The envelope line for ``rec`` at the next offset, and that offset."""
        self.offset += 1
        type_name, version, data = rec
        env = envelope(
            type_name, version, data, self.offset if with_offset else None, self.timestamp0 + self.offset * 1000
        )
        return line(env), self.offset

    def feed(self, *recs: tuple[str, int, dict[str, Any]], with_offset: bool = True):
        """Feed records in order; returns the outcome of the last one."""
        outcome = None
        for rec in recs:
            text, _ = self.next_line(rec, with_offset)
            outcome = self.feed_raw(text)
        return outcome

    def feed_raw(self, text: str | bytes):
        """Feed one raw line at the next line number."""
        self.seq += 1
        return self.replayer.feed_line(text, self.source, self.seq)

    def part(self, topic_id: str = TOPIC_ID, partition_id: int = 0):
        return self.cluster.partition(topic_id, partition_id)

    def doc(self, topic_name: str, partition_id: int = 0) -> dict[str, Any]:
        """The report document's entry for one partition."""
        for p in self.replayer.document(advice=False)["partitions"]:
            if p["topic"] == topic_name and p["partitionId"] == partition_id:
                return p
        raise KeyError((topic_name, partition_id))


def base_cluster(
    brokers: tuple[int, ...] = (0, 1, 2, 3), elr: bool = True, metadata_version: int = 26
) -> list[tuple[str, int, dict[str, Any]]]:
    """Features and active brokers."""
    recs = [feature("metadata.version", metadata_version)]
    if elr:
        recs.append(elr_feature(True))
    recs += [register(b) for b in brokers]
    return recs


# --- valid event streams: generated (the bucket and property tests) and hand-made (the differential harness) ---


def random_stream(seed: int, steps: int = 60, brokers: int = 5) -> list[str]:
    """A valid, reproducible event stream: features, brokers, topics, partitions, then ``steps`` random changes
    (ISR/ELR/leader changes, fences, controlled shutdowns, re-registrations, ClearElr, config changes, ELR toggles,
    partition re-creation, topic deletion and creation). Every line is an envelope with a metadata ``offset``."""
    import random

    rng = random.Random(seed)
    feeder_offset = [0]
    out: list[str] = []

    def emit(rec: tuple[str, int, dict[str, Any]]) -> None:
        feeder_offset[0] += 1
        type_name, version, data = rec
        out.append(line(envelope(type_name, version, data, feeder_offset[0], 1_732_100_000_000 + feeder_offset[0])))

    epochs = dict.fromkeys(range(brokers), 100)
    elr_on = rng.random() < 0.7
    emit(feature("metadata.version", 26))
    if elr_on:
        emit(elr_feature(True))
    for b in range(brokers):
        emit(register(b, epochs[b]))
    if rng.random() < 0.5:
        emit(cluster_min_isr(str(rng.randint(1, 3))))
    topics: dict[str, tuple[str, dict[int, list[int]]]] = {}  # id -> (name, {pid: replicas})
    next_topic = [0]

    def new_topic() -> None:
        next_topic[0] += 1
        n = next_topic[0]
        topic_id, name = uuid_of(0xA000 + n), f"t{n}"
        emit(topic(name, topic_id))
        if rng.random() < 0.6:
            emit(topic_min_isr(name, str(rng.randint(1, 4))))
        parts: dict[int, list[int]] = {}
        for pid in range(rng.randint(1, 4)):
            replicas = rng.sample(range(brokers), rng.randint(1, min(4, brokers)))
            parts[pid] = replicas
            isr = [r for r in replicas if rng.random() < 0.8] or replicas[:1]
            emit(partition(topic_id, pid, replicas, isr, isr[0]))
        topics[topic_id] = (name, parts)

    for _ in range(rng.randint(1, 3)):
        new_topic()
    for _ in range(steps):
        action = rng.random()
        if not topics:
            new_topic()
            continue
        topic_id = rng.choice(sorted(topics))
        name, parts = topics[topic_id]
        pid = rng.choice(sorted(parts))
        replicas = parts[pid]
        if action < 0.45:
            fields: dict[str, Any] = {}
            isr = [r for r in replicas if rng.random() < 0.6]
            if rng.random() < 0.8:
                fields["isr"] = isr
            if rng.random() < 0.6:
                fields["leader"] = rng.choice([*isr, -1]) if isr else -1
            if elr_on and rng.random() < 0.5:
                rest = [r for r in replicas if r not in isr]
                fields["eligibleLeaderReplicas"] = [r for r in rest if rng.random() < 0.6]
                fields["lastKnownElr"] = rng.choice([[], rest[:1]])
            if rng.random() < 0.1:
                fields["leaderRecoveryState"] = rng.choice([0, 1])
            if rng.random() < 0.08:
                new_replicas = rng.sample(range(brokers), rng.randint(1, min(4, brokers)))
                parts[pid] = new_replicas
                fields["replicas"] = new_replicas
                fields["isr"] = new_replicas[:1]
                fields["leader"] = new_replicas[0]
            emit(change(topic_id, pid, **fields))
        elif action < 0.62:
            b = rng.randrange(brokers)
            kind = rng.random()
            if kind < 0.4:
                emit(broker_change(b, epochs[b], fenced=rng.choice([1, -1])))
            elif kind < 0.55:
                emit(broker_change(b, epochs[b], in_controlled_shutdown=1))
            elif kind < 0.7:
                emit(rng.choice([fence, unfence])(b, epochs[b]))
            else:
                epochs[b] += 1
                emit(register(b, epochs[b], fenced=rng.random() < 0.5))
        elif action < 0.68:
            emit(clear_elr(rng.choice([name, ""])))
        elif action < 0.78:
            value = rng.choice([None, "1", "2", "3", "4"])
            emit(
                rng.choice(
                    [
                        topic_min_isr(name, value),
                        cluster_min_isr(value),
                        config(2, name, "unclean.leader.election.enable", rng.choice(["true", "false"])),
                        static_min_isr(pid % brokers, value),
                    ]
                )
            )
        elif action < 0.82:
            elr_on = not elr_on
            emit(elr_feature(elr_on))
        elif action < 0.9:
            new_pid = pid if rng.random() < 0.5 else max(parts) + 1
            new_replicas = rng.sample(range(brokers), rng.randint(1, min(4, brokers)))
            parts[new_pid] = new_replicas
            emit(
                partition(
                    topic_id,
                    new_pid,
                    new_replicas,
                    new_replicas,
                    new_replicas[0],
                    leader_epoch=rng.randint(0, 3),
                    partition_epoch=rng.randint(0, 5),
                )
            )
        elif action < 0.94:
            emit(remove_topic(topic_id))
            del topics[topic_id]
        else:
            new_topic()
    return out


def offset_lines(recs: Iterable[tuple[tuple[str, int, dict[str, Any]], int | None]]) -> list[str]:
    """Envelope lines of records with their metadata offsets (None: a line without one); each line's timestamp is
    the last offset given so far, in ms after the test clock's start."""
    out: list[str] = []
    offset = 0
    for (type_name, version, data), at in recs:
        offset = at if at is not None else offset
        out.append(line(envelope(type_name, version, data, at, 1_732_100_000_000 + offset)))
    return out


def corner_stream() -> list[str]:
    """Hand-made corners: an ELR that overlaps the ISR, a ClearElr below a partition's last offset, a
    PartitionRecord that replaces a partition with lower epochs, partition 0's replica count changing amid other
    changes, unclean election enabled per topic and per cluster, the ELR feature off and on, records without an
    offset, a topic removed and created again."""
    t, o = "FbrrdcfiR-KC2CPSTHaJrg", OTHER_TOPIC_ID
    recs: list[tuple[Any, int | None]] = [(r, None) for r in base_cluster((0, 1, 2, 3))]
    recs += [(topic("t", t), None), (topic("o", o), None), (topic_min_isr("t", "2"), None)]
    recs += [(partition(t, p, replicas=(0, 1, 2)), None) for p in range(5)]
    recs += [(partition(o, p, replicas=(1, 2, 3), isr=(1,)), None) for p in range(3)]
    recs += [
        (change(t, 1, isr=[0, 1], eligibleLeaderReplicas=[1, 2], leader=-1), 100),  # ELR overlaps the ISR
        (change(t, 2, isr=[0], eligibleLeaderReplicas=[3], leader=0), 200),
        (change(t, 3, isr=[0], eligibleLeaderReplicas=[1, 2], lastKnownElr=[2], leader=-1), 120),
        (fence(1), 210),
        (clear_elr("t"), 150),  # below partition 2's last offset: partition 2 keeps its ELR
        (change(t, 4, isr=[2]), 220),
        (change(t, 0, replicas=[0, 1], isr=[0, 1]), 221),  # partition 0's replica count caps the min ISR
        (change(t, 4, isr=[2, 0], leader=2), 222),
        (partition(t, 4, replicas=(0, 1, 2), isr=(0,), leader_epoch=0, partition_epoch=0), 223),
        (change(t, 4, leader=-1, isr=[]), 224),
        (change(o, 1, leader=-1, isr=[]), 225),
        (config(2, "o", "unclean.leader.election.enable", "true"), 226),
        (change(o, 2, leader=-1, isr=[], lastKnownElr=[3]), 227),
        (elr_feature(False), 228),
        (change(t, 2, isr=[0, 3]), None),
        (elr_feature(True), 229),
        (cluster_min_isr("3"), 230),
        (config(4, "", "unclean.leader.election.enable", "true"), 231),
        (unfence(1), 232),
        (change(t, 1, leaderRecoveryState=1, leader=1), 233),
        (change(t, 1, leaderRecoveryState=0), 234),
        (remove_topic(o), 235),
        (change(o, 1, isr=[1]), 236),  # the topic is gone
        (topic("o", o), 237),
        (partition(o, 1, replicas=(1, 2, 3)), 238),
        (partition(o, 0, replicas=(1, 2)), 239),
        (config(4, "", "unclean.leader.election.enable", None), 240),
        (topic_min_isr("t", None), 241),
        (topic("late", uuid_of(77)), 242),
        (topic_min_isr("late", "2"), 243),
        (partition(uuid_of(77), 1, replicas=(0, 1, 2), isr=(0, 1)), 244),  # before partition 0: min ISR 2
        (partition(uuid_of(77), 2, replicas=(0, 1, 2)), 245),
        (partition(uuid_of(77), 0, replicas=(3,)), 246),  # one replica: the topic's min ISR drops to 1
        (change(uuid_of(77), 2, isr=[1]), 247),
        (change(uuid_of(77), 0, replicas=[3, 0], isr=[3, 0]), 248),  # two replicas: min ISR 2 again
    ]
    return offset_lines(recs)


def valid_stream(kind: str) -> list[bytes]:
    """A valid stream: ``random-N`` (random_stream N: deletions, re-creations, ClearElr, configs), ``faults``
    (the simulator's random faults) or a simulator scenario's name."""
    import io

    from elrwatch.state.simulator import simulate

    if kind.startswith("random-"):
        return [text.encode() for text in random_stream(int(kind.removeprefix("random-")), steps=300)]
    out = io.BytesIO()
    shape = {"brokers": 6, "topics": 3, "partitions": 8, "replication_factor": 3, "min_isr": 2, "seed": 3}
    if kind == "faults":
        simulate(out, **shape, faults=0.5, records=3000)  # type: ignore[arg-type]
    else:
        simulate(out, **shape, scenario=kind)  # type: ignore[arg-type]
    return out.getvalue().splitlines()
