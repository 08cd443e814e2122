"""``elrwatch bridge --source admin``: poll a live cluster through the admin API and derive metadata records.

One poll reads (``ClusterReader``): DescribeFeatures (ApiVersions' finalized ``metadata.version`` and
``eligible.leader.replicas.version``), DescribeCluster v2 with fenced brokers, DescribeTopicPartitions for every
topic (paged by cursor) and DescribeConfigs for ``min.insync.replicas`` and ``unclean.leader.election.enable`` of
every topic and of the cluster default, and, for a broker seen (re)started, DescribeConfigs of that broker with
synonyms: its static layer (``server.properties``, source 4; source 5 = Kafka's default) of the same configs, which
the metadata log never carries (published as STATIC_BROKER_CONFIG_RECORD). `diff` compares it with the previous
poll's `View` and returns the records Kafka's controller would have written to get from one to the other, in
elrwatch's envelope with offsets of the bridge's own and ``"source": "admin-poll"``.

What this mode cannot know (and the core reports as unknown, see ``POLLED_UNKNOWN`` in state/cluster.py):

* **broker epochs and incarnation ids**: a derived REGISTER_BROKER_RECORD uses its own offset as the broker epoch
  (Kafka's rule for real epochs), and every later record about that broker repeats it, so the core's broker-epoch
  checks pass; a broker restarted between two polls keeps its derived epoch. Its incarnation id is Kafka's zero
  UUID, which Kafka never assigns: the core reads it as "epoch and incarnation unknown"
  (``BrokerState.epoch_known``) and its documents and the API show both as null;
* **partition epochs**: counted by the bridge as the core counts them (one per derived change record);
* **transitions between two polls**: only the net change is published (an ISR shrink and re-expansion within one
  interval is invisible); a leader epoch that moved by more than one election is published as a PARTITION_RECORD
  that replaces the registration, so the leader epoch stays exact;
* adding/removing replicas of a reassignment, the leader recovery state, log directories and broker endpoints.

On a cluster older than Kafka 4.0 (any from 3.0, KRaft or ZooKeeper mode) ApiVersions decides what is asked:

* DescribeTopicPartitions where it is advertised (KRaft brokers from 3.8), else Metadata, which shows the same
  leader, leader epoch, replicas, ISR and offline replicas (no ELR: these versions have none);
* DescribeCluster v2 with its fenced brokers where advertised (4.0+), else the live brokers only (DescribeCluster
  v1, or Metadata's broker list). A broker seen live that leaves that list is published as **fenced** on a KRaft
  cluster (the controller fences a broker whose session expired or that shut down; only an explicit UnregisterBroker
  removes its registration) and as **unregistered** on a ZooKeeper-mode cluster (its ephemeral ``/brokers/ids/<id>``
  znode is gone, and the ZooKeeper controller drops it from the live brokers: no fenced state exists there). A broker
  down since before the bridge started is not shown. This is ``fencedBrokers`` in the report's unknown facts: the
  records carry ``"source": "admin-poll:fencedBrokers"``, whose part after the colon lists what is unknown on top of
  ``POLLED_UNKNOWN``.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from elrwatch.state.model import UNKNOWN_INCARNATION_ID
from elrwatch.state.record_types import (
    BROKER_REGISTRATION_CHANGE_RECORD,
    CONFIG_NAMES,
    CONFIG_RECORD,
    FEATURE_LEVEL_RECORD,
    FEATURE_NAMES,
    PARTITION_CHANGE_RECORD,
    PARTITION_RECORD,
    REGISTER_BROKER_RECORD,
    REMOVE_TOPIC_RECORD,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    STATIC_BROKER_CONFIG_RECORD,
    TOPIC_RECORD,
    UNREGISTER_BROKER_RECORD,
    admin_derivable_names,
)

log = logging.getLogger("elrwatch.bridge")

SOURCE_ADMIN = "admin-poll"
#: The configs and features described: those the core reads.
CONFIG_KEYS = CONFIG_NAMES
FEATURES = FEATURE_NAMES
#: The record types `diff` derives: those the registry marks as derivable from the admin API.
DERIVED_TYPES = admin_derivable_names()
#: DirectoryId.UNASSIGNED: the log directory of a derived partition's replicas is not known.
UNASSIGNED_DIR = "AAAAAAAAAAAAAAAAAAAAAQ"
#: The incarnation id of a derived registration: the core's mark of an unknown epoch and incarnation.
ZERO_UUID = UNKNOWN_INCARNATION_ID
UNKNOWN_TOPIC_OR_PARTITION = 3
#: Partition errors of a Metadata answer whose leader, replicas and ISR are still complete: LEADER_NOT_AVAILABLE (a
#: leaderless partition) and REPLICA_NOT_AVAILABLE (a replica offline, Metadata v0 only).
METADATA_COMPLETE_ERRORS = (5, 9)
API_DESCRIBE_TOPIC_PARTITIONS = 75
API_DESCRIBE_CLUSTER = 60
#: An unknown fact of clusters without DescribeCluster v2 (see the module docstring).
UNKNOWN_FENCED_BROKERS = "fencedBrokers"
#: DescribeConfigs sources (DescribeConfigsResponse.ConfigSource) that mean "set on this resource": TOPIC_CONFIG (1)
#: and DYNAMIC_DEFAULT_BROKER_CONFIG (3, the cluster-wide default; 4 is STATIC_BROKER_CONFIG, a node's file).
CONFIG_SOURCE_TOPIC = 1
CONFIG_SOURCE_CLUSTER_DEFAULT = 3
#: STATIC_BROKER_CONFIG (4): the node's server.properties; DEFAULT_CONFIG (5): Kafka's built-in default.
CONFIG_SOURCE_STATIC = 4


class ConfigRefused(Exception):
    """A DescribeConfigs the broker answered with an error (not a connection failure)."""


class PollError(Exception):
    """A poll that could not see the whole cluster: nothing of it is published. ``reason`` labels the counter."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Partition:
    """One partition as DescribeTopicPartitions shows it, plus the bridge's own partition epoch."""

    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    elr: list[int]
    last_known_elr: list[int]
    partition_epoch: int = 0

    def same(self, other: Partition) -> bool:
        """Equal in everything DescribeTopicPartitions shows."""
        return (self.leader, self.leader_epoch, self.replicas, self.isr, self.elr, self.last_known_elr) == (
            other.leader,
            other.leader_epoch,
            other.replicas,
            other.isr,
            other.elr,
            other.last_known_elr,
        )


@dataclass
class Topic:
    topic_id: str  # Kafka's base64url form
    partitions: dict[int, Partition] = field(default_factory=dict)


@dataclass
class Broker:
    fenced: bool
    rack: str | None = None
    epoch: int = -1  # the derived epoch (offset of its derived registration); -1 before it is published


@dataclass
class View:
    """What one poll saw (and, for epochs, what the bridge published)."""

    features: dict[str, int] = field(default_factory=dict)
    brokers: dict[int, Broker] = field(default_factory=dict)
    cluster_configs: dict[str, str] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    topics: dict[str, Topic] = field(default_factory=dict)
    #: Broker id → its static configs (None: its file does not set the config), described once per (re)start.
    static: dict[int, dict[str, str | None]] = field(default_factory=dict)
    #: What this cluster's APIs cannot show on top of POLLED_UNKNOWN (older clusters): part of the records' source.
    unknown: tuple[str, ...] = ()

    @property
    def origin(self) -> str:
        """The envelopes' ``"source"``: ``admin-poll``, or ``admin-poll:<unknown facts>`` on an older cluster."""
        return f"{SOURCE_ADMIN}:{','.join(self.unknown)}" if self.unknown else SOURCE_ADMIN

    def to_json(self) -> dict[str, Any]:
        """JSON-able form (the bridge's state file)."""
        return {
            "unknown": list(self.unknown),
            "features": self.features,
            "brokers": {str(b): [v.fenced, v.rack, v.epoch] for b, v in self.brokers.items()},
            "clusterConfigs": self.cluster_configs,
            "topicConfigs": self.topic_configs,
            "static": {str(b): c for b, c in self.static.items()},
            "topics": {
                name: [
                    t.topic_id,
                    {
                        str(p): [
                            v.leader,
                            v.leader_epoch,
                            v.replicas,
                            v.isr,
                            v.elr,
                            v.last_known_elr,
                            v.partition_epoch,
                        ]
                        for p, v in t.partitions.items()
                    },
                ]
                for name, t in self.topics.items()
            },
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> View:
        """Inverse of `to_json`."""
        view = cls(
            features=dict(doc["features"]),
            cluster_configs=dict(doc["clusterConfigs"]),
            topic_configs={k: dict(v) for k, v in doc["topicConfigs"].items()},
            unknown=tuple(doc.get("unknown", ())),
            static={int(b): dict(c) for b, c in (doc.get("static") or {}).items()},
        )
        view.brokers = {int(b): Broker(f, r, e) for b, (f, r, e) in doc["brokers"].items()}
        view.topics = {
            name: Topic(tid, {int(p): Partition(*v) for p, v in parts.items()})
            for name, (tid, parts) in doc["topics"].items()
        }
        return view


def kafka_uuid(value: Any) -> str:
    """A topic id from kafka-python (uuid.UUID or its text) in Kafka's base64url form."""
    if isinstance(value, uuid.UUID):
        raw = value.bytes
    else:
        text = str(value)
        if len(text) == 22:
            return text
        raw = uuid.UUID(text).bytes
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


# --- reading a cluster ---------------------------------------------------------------------------------------------


class ClusterReader(Protocol):
    """The four admin calls one poll makes (`KafkaClusterReader`; tests use fakes)."""

    def features(self) -> dict[str, int]: ...

    def brokers(self) -> dict[int, Broker]: ...

    def partitions_page(self, cursor: tuple[str, int] | None, limit: int) -> dict[str, Any]:
        """``{"topics": [{"name", "topic_id", "error_code", "partitions": [...]}], "next_cursor": (t, p) | None}``
        with kafka-python's partition dicts (``partition_index``, ``leader_id``, ``isr_nodes``, …)."""
        ...

    def configs(self, topics: list[str]) -> dict[tuple[int, str], tuple[int, dict[str, str]]]:
        """(resource type, name) → (error code, {key: value set on that resource}); name "" = cluster default."""
        ...

    def static_configs(self, broker_id: int) -> dict[str, str | None]:
        """The broker's static layer of `CONFIG_KEYS` (None: its file does not set the config); raises on error."""
        ...


class KafkaClusterReader:
    """`ClusterReader` over kafka-python's KafkaAdminClient (one client, re-created after a failure)."""

    def __init__(self, config: dict[str, Any], config_batch: int = 1000) -> None:
        self.config = {k: v for k, v in config.items() if k != "bootstrap_timeout_ms"}
        self.config_batch = config_batch
        self._admin: Any = None
        self._versions: dict[int, tuple[int, int]] | None = None

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """API key → (min, max) version the connected broker advertises (ApiVersions; asked again after reset)."""
        if self._versions is None:
            # kafka-python's api_versions() fails on a key its ApiKey enum lacks (Kafka 4.4 has some): the raw table.
            table = self.admin()._manager.broker_version_data.api_versions
            self._versions = {int(k): (int(v[0]), int(v[1])) for k, v in table.items()}
        return self._versions

    def shows_fenced_brokers(self) -> bool:
        """DescribeCluster v2 (Kafka 4.0+) lists fenced brokers; older versions list live brokers only."""
        return self.api_versions().get(API_DESCRIBE_CLUSTER, (0, -1))[1] >= 2

    def admin(self) -> Any:
        if self._admin is None:
            from kafka import KafkaAdminClient

            self._admin = KafkaAdminClient(**self.config)
        return self._admin

    def reset(self) -> None:
        """Drop the client (after an error: the next call reconnects)."""
        if self._admin is not None:
            try:
                self._admin.close()
            except Exception:
                log.debug("closing the admin client failed", exc_info=True)
            self._admin = None
        self._versions = None

    def close(self) -> None:
        self.reset()

    def features(self) -> dict[str, int]:
        found = self.admin().describe_features()
        return {name: int(info["finalized"][1]) for name, info in found.items() if "finalized" in info}

    def brokers(self) -> dict[int, Broker]:
        result = self.admin().describe_cluster()
        return {int(b["broker_id"]): Broker(bool(b.get("is_fenced", False)), b.get("rack")) for b in result["brokers"]}

    def partitions_page(self, cursor: tuple[str, int] | None, limit: int) -> dict[str, Any]:
        if API_DESCRIBE_TOPIC_PARTITIONS not in self.api_versions():
            return metadata_page(self.admin().describe_topics(None))
        cur = {"topic_name": cursor[0], "partition_index": cursor[1]} if cursor else None
        page = self.admin().describe_topic_partitions([], limit, cur)
        nxt = page.get("next_cursor")
        return {"topics": page["topics"], "next_cursor": (nxt["topic_name"], nxt["partition_index"]) if nxt else None}

    def configs(self, topics: list[str]) -> dict[tuple[int, str], tuple[int, dict[str, str]]]:
        from kafka.protocol.admin import DescribeConfigsRequest

        admin = self.admin()
        resources = [(RESOURCE_BROKER, "")] + [(RESOURCE_TOPIC, t) for t in topics]
        out: dict[tuple[int, str], tuple[int, dict[str, str]]] = {}
        for start in range(0, len(resources), self.config_batch):
            chunk = resources[start : start + self.config_batch]
            request = DescribeConfigsRequest(
                resources=[(rt, name, list(CONFIG_KEYS)) for rt, name in chunk], include_synonyms=False, min_version=1
            )

            async def send(req: Any = request) -> Any:
                return await admin._manager.send(req)

            response = admin._manager.run(send)
            for result in response.results:
                topic_level = result.resource_type == RESOURCE_TOPIC
                wanted = CONFIG_SOURCE_TOPIC if topic_level else CONFIG_SOURCE_CLUSTER_DEFAULT
                values = {
                    c.name: c.value
                    for c in result.configs
                    if c.config_source == wanted and c.value is not None and c.name in CONFIG_KEYS
                }
                out[(result.resource_type, result.resource_name)] = (result.error_code, values)
        return out

    def static_configs(self, broker_id: int) -> dict[str, str | None]:
        from kafka.protocol.admin import DescribeConfigsRequest

        admin = self.admin()
        request = DescribeConfigsRequest(
            resources=[(RESOURCE_BROKER, str(broker_id), list(CONFIG_KEYS))], include_synonyms=True, min_version=1
        )

        async def send() -> Any:  # a broker's own configs are described by that broker only
            return await admin._manager.send(request, node_id=broker_id)

        (result,) = admin._manager.run(send).results
        if result.error_code:
            raise ConfigRefused(f"error {result.error_code}: {result.error_message}")
        return static_layer(result.configs)


def static_layer(configs: Any) -> dict[str, str | None]:
    """`CONFIG_KEYS` → the value of their STATIC_BROKER_CONFIG synonym (None: no static value: Kafka's default or
    a dynamic layer alone sets it) in one DescribeConfigs answer with synonyms."""
    out: dict[str, str | None] = {}
    for entry in configs:
        if entry.name in CONFIG_KEYS:
            synonyms = [entry.synonyms] if not isinstance(entry.synonyms, list) else entry.synonyms
            static = [s.value for s in synonyms if s.source == CONFIG_SOURCE_STATIC]
            if not static and entry.config_source == CONFIG_SOURCE_STATIC:
                static = [entry.value]
            out[entry.name] = static[0] if static else None
    return out


def metadata_page(topics: list[dict[str, Any]]) -> dict[str, Any]:
    """A Metadata answer (kafka-python's ``describe_topics``: every topic, one page) as a DescribeTopicPartitions
    page: the same partition fields, no ELRs; a partition error that leaves its data complete (a leaderless partition)
    is no error here."""
    out = []
    for topic in topics:
        partitions = [
            {**p, "error_code": 0 if p.get("error_code", 0) in METADATA_COMPLETE_ERRORS else p["error_code"]}
            for p in topic.get("partitions") or []
        ]
        out.append({**topic, "partitions": partitions})
    return {"topics": out, "next_cursor": None}


def poll_view(
    reader: ClusterReader, previous: View | None, page_size: int, on_error: Callable[[str, str], None]
) -> View:
    """Read the whole cluster once. Raises PollError when the view would be incomplete as a whole (a broker
    unreachable, paging broken off); a topic that is incomplete or gone mid-poll keeps its previous state (and is
    reported through ``on_error``), so that nothing wrong is published."""
    view = View()
    try:
        features = reader.features()
        view.features = {name: level for name, level in features.items() if name in FEATURES}
        view.brokers = reader.brokers()
        shows_fenced = getattr(reader, "shows_fenced_brokers", lambda: True)()
    except Exception as exc:
        message = f"DescribeCluster/ApiVersions failed: {type(exc).__name__}: {exc}"
        raise PollError("broker_unreachable", message) from exc
    if not shows_fenced:
        _keep_down_brokers(view, previous)
    old_topics = previous.topics if previous is not None else {}
    seen: dict[str, Topic] = {}
    broken: set[str] = set()
    cursor: tuple[str, int] | None = None
    cursors: set[tuple[str, int]] = set()
    pages = 0
    while True:
        try:
            page = reader.partitions_page(cursor, page_size)
        except Exception as exc:
            reason = "partial_page" if pages else "broker_unreachable"
            raise PollError(
                reason,
                f"DescribeTopicPartitions page {pages + 1} (cursor {cursor}) failed: {type(exc).__name__}: {exc}",
            ) from exc
        pages += 1
        for entry in page["topics"]:
            name = entry["name"]
            if entry.get("error_code", 0):
                if entry["error_code"] == UNKNOWN_TOPIC_OR_PARTITION:
                    on_error(
                        "topic_deleted",
                        f"topic {name} is unknown to the answering broker (deleted during the poll, or that broker's "
                        "metadata lags the controller): its last state is kept",
                    )
                else:
                    on_error("topic_error", f"topic {name}: DescribeTopicPartitions error {entry['error_code']}")
                broken.add(name)
                continue
            topic_id = kafka_uuid(entry["topic_id"])
            topic = seen.setdefault(name, Topic(topic_id))
            if topic.topic_id != topic_id:
                on_error("partial_page", f"topic {name} changed its id while paging: {topic.topic_id} -> {topic_id}")
                broken.add(name)
                continue
            for p in entry["partitions"]:
                if p.get("error_code", 0):
                    on_error("partial_page", f"{name}-{p['partition_index']}: partition error {p['error_code']}")
                    broken.add(name)
                    continue
                topic.partitions[int(p["partition_index"])] = Partition(
                    int(p["leader_id"]),
                    int(p["leader_epoch"]),
                    list(p["replica_nodes"]),
                    list(p["isr_nodes"]),
                    list(p.get("eligible_leader_replicas") or []),
                    list(p.get("last_known_elr") or []),
                )
        cursor = page.get("next_cursor")
        if not cursor:
            break
        if cursor in cursors:
            raise PollError("partial_page", f"DescribeTopicPartitions returned cursor {cursor} twice")
        cursors.add(cursor)
    for name, topic in seen.items():
        if name in broken:
            continue
        ids = sorted(topic.partitions)
        old = old_topics.get(name)
        if ids != list(range(len(ids))) or not ids:
            on_error("partial_page", f"topic {name}: partitions {ids[:5]}… are not 0..n-1 (a partial page)")
            broken.add(name)
        elif old is not None and old.topic_id == topic.topic_id and len(ids) < len(old.partitions):
            on_error("partial_page", f"topic {name}: {len(ids)} partitions, {len(old.partitions)} before")
            broken.add(name)
    for name in broken:  # keep what was known: neither a removal nor a half topic is published
        seen.pop(name, None)
        if name in old_topics:
            seen[name] = old_topics[name]
    view.topics = seen
    _describe_static(reader, view, previous, on_error)
    try:
        configs = reader.configs(sorted(seen))
    except Exception as exc:
        raise PollError("broker_unreachable", f"DescribeConfigs failed: {type(exc).__name__}: {exc}") from exc
    old_configs = previous.topic_configs if previous is not None else {}
    for (rtype, name), (error, values) in configs.items():
        if rtype == RESOURCE_BROKER:
            if error:
                raise PollError("config_error", f"DescribeConfigs of the cluster default failed: error {error}")
            view.cluster_configs = values
        elif error == UNKNOWN_TOPIC_OR_PARTITION:
            on_error(
                "topic_deleted",
                f"topic {name} is unknown to the broker describing its configs (deleted during the poll, or that "
                "broker's metadata lags the controller): its last configs are kept",
            )
            if name in old_configs:
                view.topic_configs[name] = old_configs[name]
        elif error:
            on_error("config_error", f"DescribeConfigs of topic {name}: error {error}")
            if name in old_configs:
                view.topic_configs[name] = old_configs[name]
        elif values:
            view.topic_configs[name] = values
    return view


def _describe_static(
    reader: ClusterReader, view: View, previous: View | None, on_error: Callable[[str, str], None]
) -> None:
    """The brokers' static configs: kept from the previous poll, described again for a live broker that is new or
    came back (a static config changes only with a restart). A failed describe keeps what was known and is tried
    again at the next poll: an answered error is a ``config_error``; no answer (a broker going down while still
    listed) a ``broker_unreachable``."""
    describe = getattr(reader, "static_configs", None)
    known = dict(previous.static) if previous is not None else {}
    before = previous.brokers if previous is not None else {}
    for broker_id, broker in sorted(view.brokers.items()):
        was = before.get(broker_id)
        restarted = was is None or was.fenced
        if describe is None or broker.fenced or (broker_id in known and not restarted):
            continue
        try:
            known[broker_id] = describe(broker_id)
        except ConfigRefused as exc:
            on_error("config_error", f"DescribeConfigs of broker {broker_id}: {exc}")
        except Exception as exc:
            on_error("broker_unreachable", f"DescribeConfigs of broker {broker_id}: {type(exc).__name__}: {exc}")
    view.static = known


def _keep_down_brokers(view: View, previous: View | None) -> None:
    """A cluster that lists live brokers only: a broker seen before and missing now is fenced on a KRaft cluster
    (``metadata.version`` finalized) and gone (unregistered) on a ZooKeeper-mode one (see the module docstring)."""
    view.unknown = (UNKNOWN_FENCED_BROKERS,)
    if previous is None or "metadata.version" not in view.features:
        return
    for broker_id, before in previous.brokers.items():
        if broker_id not in view.brokers:
            view.brokers[broker_id] = Broker(True, before.rack)


# --- deriving records ------------------------------------------------------------------------------------------------


class _Out:
    """Collects envelopes with increasing offsets."""

    def __init__(self, next_offset: int, timestamp_ms: int, origin: str = SOURCE_ADMIN) -> None:
        self.next_offset = next_offset
        self.timestamp_ms = timestamp_ms
        self.origin = origin
        self.events: list[dict[str, Any]] = []

    def add(self, type_name: str, version: int, data: dict[str, Any]) -> int:
        if type_name not in DERIVED_TYPES:
            raise ValueError(f"{type_name} is not derivable from the admin API (state/record_types.py)")
        offset = self.next_offset
        self.next_offset += 1
        self.events.append(
            {
                "type": type_name,
                "version": version,
                "data": data,
                "offset": offset,
                "timestamp": self.timestamp_ms,
                "source": self.origin,
            }
        )
        return offset


def _partition_record(topic_id: str, pid: int, p: Partition) -> dict[str, Any]:
    data: dict[str, Any] = {
        "partitionId": pid,
        "topicId": topic_id,
        "replicas": p.replicas,
        "isr": p.isr,
        "removingReplicas": [],
        "addingReplicas": [],
        "leader": p.leader,
        "leaderEpoch": p.leader_epoch,
        "partitionEpoch": p.partition_epoch,
        "directories": [UNASSIGNED_DIR] * len(p.replicas),
    }
    if p.elr:
        data["eligibleLeaderReplicas"] = p.elr
    if p.last_known_elr:
        data["lastKnownElr"] = p.last_known_elr
    return data


def _partition_events(out: _Out, topic_id: str, pid: int, old: Partition | None, new: Partition) -> None:
    """A PARTITION_RECORD for a new partition; for a changed one a PARTITION_CHANGE_RECORD of the changed fields
    when the core's merge then lands on the same leader epoch, else a PARTITION_RECORD replacing it."""
    if old is None:
        new.partition_epoch = 0
        out.add(PARTITION_RECORD, 2, _partition_record(topic_id, pid, new))
        return
    new.partition_epoch = old.partition_epoch
    if old.same(new):
        return
    new.partition_epoch = old.partition_epoch + 1
    bump = new.leader_epoch - old.leader_epoch
    if bump not in (0, 1) or (bump == 0 and new.leader != old.leader):
        out.add(PARTITION_RECORD, 2, _partition_record(topic_id, pid, new))
        return
    data: dict[str, Any] = {"partitionId": pid, "topicId": topic_id}
    if new.isr != old.isr:
        data["isr"] = new.isr
    if bump == 1:
        data["leader"] = new.leader
    if new.replicas != old.replicas:
        data["replicas"] = new.replicas
        data["directories"] = [UNASSIGNED_DIR] * len(new.replicas)
    if new.elr != old.elr:
        data["eligibleLeaderReplicas"] = new.elr
    if new.last_known_elr != old.last_known_elr:
        data["lastKnownElr"] = new.last_known_elr
    out.add(PARTITION_CHANGE_RECORD, 2, data)


def diff(old: View | None, new: View, next_offset: int, timestamp_ms: int | None = None) -> list[dict[str, Any]]:
    """The records that take the core from ``old`` (None: nothing published yet) to ``new``, offsets from
    ``next_offset``. Sets ``new``'s derived broker and partition epochs. Order: features, the cluster default
    config, registrations and unfences, topics (removals, creations with their configs and partitions, changes),
    then fences and unregistrations (Kafka writes a fence after the ISR changes it causes)."""
    old = old or View()
    out = _Out(next_offset, int(time.time() * 1000) if timestamp_ms is None else timestamp_ms, new.origin)
    for name in FEATURES:
        if name in new.features and new.features[name] != old.features.get(name):
            out.add(FEATURE_LEVEL_RECORD, 0, {"name": name, "featureLevel": new.features[name]})
        elif name not in new.features and name in old.features:
            out.add(FEATURE_LEVEL_RECORD, 0, {"name": name, "featureLevel": 0})
    _config_events(out, RESOURCE_BROKER, "", old.cluster_configs, new.cluster_configs)
    for node in sorted(new.static):
        was = old.static.get(node, {})
        for key, value in sorted(new.static[node].items()):
            if key not in was or was[key] != value:
                out.add(STATIC_BROKER_CONFIG_RECORD, 0, {"nodeId": node, "name": key, "value": value})
    later: list[tuple[str, int, dict[str, Any]]] = []
    for broker_id in sorted(new.brokers):
        broker, before = new.brokers[broker_id], old.brokers.get(broker_id)
        if before is None or before.epoch < 0:
            broker.epoch = out.next_offset
            out.add(
                REGISTER_BROKER_RECORD,
                1,
                {
                    "brokerId": broker_id,
                    "incarnationId": ZERO_UUID,
                    "brokerEpoch": broker.epoch,
                    "endPoints": [],
                    "features": [],
                    "rack": broker.rack,
                    "fenced": broker.fenced,
                    "inControlledShutdown": False,
                },
            )
            continue
        broker.epoch = before.epoch
        if before.fenced and not broker.fenced:
            out.add(
                BROKER_REGISTRATION_CHANGE_RECORD, 0, {"brokerId": broker_id, "brokerEpoch": broker.epoch, "fenced": -1}
            )
        elif broker.fenced and not before.fenced:
            later.append(
                (
                    BROKER_REGISTRATION_CHANGE_RECORD,
                    0,
                    {"brokerId": broker_id, "brokerEpoch": broker.epoch, "fenced": 1},
                )
            )
    for broker_id in sorted(set(old.brokers) - set(new.brokers)):
        if old.brokers[broker_id].epoch >= 0:
            later.append(
                (UNREGISTER_BROKER_RECORD, 0, {"brokerId": broker_id, "brokerEpoch": old.brokers[broker_id].epoch})
            )
    for name in sorted(old.topics):
        if name not in new.topics or new.topics[name].topic_id != old.topics[name].topic_id:
            out.add(REMOVE_TOPIC_RECORD, 0, {"topicId": old.topics[name].topic_id})
    for name in sorted(new.topics):
        topic = new.topics[name]
        before = old.topics.get(name)
        if before is not None and before.topic_id != topic.topic_id:
            before = None
        if before is None:
            out.add(TOPIC_RECORD, 0, {"name": name, "topicId": topic.topic_id})
            _config_events(out, RESOURCE_TOPIC, name, {}, new.topic_configs.get(name, {}))
        else:
            _config_events(out, RESOURCE_TOPIC, name, old.topic_configs.get(name, {}), new.topic_configs.get(name, {}))
        for pid in sorted(topic.partitions):
            _partition_events(
                out, topic.topic_id, pid, before.partitions.get(pid) if before else None, topic.partitions[pid]
            )
    for name in sorted(set(old.topic_configs) - set(new.topics)):  # configs of removed topics: deleted
        if name in old.topics and name not in new.topics:
            continue  # Kafka deletes a removed topic's configs with it (no CONFIG_RECORD)
        _config_events(out, RESOURCE_TOPIC, name, old.topic_configs[name], {})
    for type_name, version, data in later:
        out.add(type_name, version, data)
    return out.events


def _config_events(out: _Out, rtype: int, name: str, old: dict[str, str], new: dict[str, str]) -> None:
    for key in CONFIG_KEYS:
        if new.get(key) != old.get(key):
            out.add(CONFIG_RECORD, 0, {"resourceType": rtype, "resourceName": name, "name": key, "value": new.get(key)})
