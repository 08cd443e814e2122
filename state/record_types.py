"""The record types elrwatch knows, one entry each: what the parser, routing, the core, `produce` and the bridge
need to know about a type, in one place (DESIGN.md "Adding a Kafka record type").

Each `RecordType` says:

* its **scope**: the entity it is about (a partition, a topic, a broker, the cluster);
* its **route** in the streaming job (DESIGN.md §4): the partition's bucket (`ROUTE_OWNER`), the partition's bucket
  with partition 0 sent to every bucket (`ROUTE_OWNER_P0_EVERY`: each bucket keeps a shadow of partition 0, whose
  replica count sets the effective min ISR), every bucket (`ROUTE_EVERY`), or bucket 0 alone, which counts it
  (`ROUTE_SKIPPED`: Kafka types elrwatch does not apply);
* its **handler**: for a partition's record, one per partition store (`STORES`: the object store, the
  executable specification, and the columnar store, the runtime; state/partitions/), each the name of the store's
  method or a function ``(store, record) -> Outcome | RecordError``; for any other record, the image area that
  applies it and its method, ``"<area>.<method>"`` (state/image/), or a function ``(image, record)``; None for a
  type that is counted and skipped. A partition type without a handler for every store, or a name its store does
  not define, is refused when it is registered or when the store is imported (one line naming it);
* the **producer's key** (`ProducerKey`): which data field keys its Kafka message in ``elrwatch produce`` and the
  bridge, so that the records of one topic, or of one broker, keep their order (`message_key`);
* whether the **admin bridge** (bridge/admin.py) can derive it from the admin API;
* its **schema**: a file of ``kafka_schemas/`` (Kafka's own spec), or the spec itself (``schema``) for elrwatch's
  own record and for a type registered at run time (records.py validates against it).

The config names and resource types of ``CONFIG_RECORD`` and ``FEATURE_LEVEL_RECORD`` that the core and the bridge
read are defined here too. No elrwatch import: every other module reads this one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

# --- scopes, routes, keys -----------------------------------------------------------------------------------------

SCOPE_PARTITION: Final = "partition"
SCOPE_TOPIC: Final = "topic"
SCOPE_BROKER: Final = "broker"
SCOPE_CLUSTER: Final = "cluster"
SCOPES: Final = (SCOPE_PARTITION, SCOPE_TOPIC, SCOPE_BROKER, SCOPE_CLUSTER)

#: The partition's bucket only.
ROUTE_OWNER: Final = "owner"
#: The partition's bucket; partition 0's records to every bucket (its shadow).
ROUTE_OWNER_P0_EVERY: Final = "owner, partition 0 to every bucket"
#: Every bucket.
ROUTE_EVERY: Final = "every bucket"
#: Not applied: bucket 0 counts it (a Kafka type elrwatch skips).
ROUTE_SKIPPED: Final = "bucket 0, skipped"
ROUTES: Final = (ROUTE_OWNER, ROUTE_OWNER_P0_EVERY, ROUTE_EVERY, ROUTE_SKIPPED)
#: The routes that place a record in its partition's bucket (it has `TOPIC_ID` and `PARTITION_ID`).
PARTITION_ROUTES: Final = frozenset({ROUTE_OWNER, ROUTE_OWNER_P0_EVERY})

#: The data fields that name a record's partition.
TOPIC_ID: Final = "topicId"
PARTITION_ID: Final = "partitionId"

KEY_TOPIC_ID: Final = "topic id"  # ``topic:<topicId>``
KEY_TOPIC_NAME: Final = "topic name"  # ``topic:<id of the named topic>`` once known, else the type name
KEY_BROKER: Final = "broker"  # ``broker:<id>``
KEY_TYPE: Final = "type"  # the type name

# --- config names, resource types, features -----------------------------------------------------------------------

MIN_ISR: Final = "min.insync.replicas"
UNCLEAN_ENABLE: Final = "unclean.leader.election.enable"
#: The configs the core reads (and the admin bridge describes).
CONFIG_NAMES: Final = (MIN_ISR, UNCLEAN_ENABLE)
#: ConfigRecord.resourceType of a topic and of a broker (the cluster default: a broker with an empty name).
RESOURCE_TOPIC: Final = 2
RESOURCE_BROKER: Final = 4
ELR_FEATURE: Final = "eligible.leader.replicas.version"
METADATA_VERSION: Final = "metadata.version"
#: The features the core reads (and the admin bridge describes).
FEATURE_NAMES: Final = (METADATA_VERSION, ELR_FEATURE)

# --- type names ---------------------------------------------------------------------------------------------------

PARTITION_RECORD: Final = "PARTITION_RECORD"
PARTITION_CHANGE_RECORD: Final = "PARTITION_CHANGE_RECORD"
CLEAR_ELR_RECORD: Final = "CLEAR_ELR_RECORD"
TOPIC_RECORD: Final = "TOPIC_RECORD"
REMOVE_TOPIC_RECORD: Final = "REMOVE_TOPIC_RECORD"
REGISTER_BROKER_RECORD: Final = "REGISTER_BROKER_RECORD"
BROKER_REGISTRATION_CHANGE_RECORD: Final = "BROKER_REGISTRATION_CHANGE_RECORD"
UNREGISTER_BROKER_RECORD: Final = "UNREGISTER_BROKER_RECORD"
FENCE_BROKER_RECORD: Final = "FENCE_BROKER_RECORD"
UNFENCE_BROKER_RECORD: Final = "UNFENCE_BROKER_RECORD"
CONFIG_RECORD: Final = "CONFIG_RECORD"
FEATURE_LEVEL_RECORD: Final = "FEATURE_LEVEL_RECORD"
#: elrwatch's own record: what KIP-966's GetReplicaLogInfo would return for one replica (docs/INPUT.md "Input: events").
REPLICA_LOG_INFO_RECORD: Final = "REPLICA_LOG_INFO_RECORD"
#: elrwatch's own record: a config of one node's static layer (its ``server.properties``, DescribeConfigs source
#: STATIC_BROKER_CONFIG), which the metadata log never carries (docs/INPUT.md).
STATIC_BROKER_CONFIG_RECORD: Final = "STATIC_BROKER_CONFIG_RECORD"
#: elrwatch's own record: one step of an operator's unclean recovery by `elrwatch recover` (docs/INPUT.md).
OPERATOR_RECOVERY_RECORD: Final = "OPERATOR_RECOVERY_RECORD"
#: elrwatch's own record: what a broker's log dirs say of its next start (``.kafka_cleanshutdown``; docs/AGENT.md).
CLEAN_SHUTDOWN_RECORD: Final = "CLEAN_SHUTDOWN_RECORD"


@dataclass(frozen=True, slots=True)
class ProducerKey:
    """How a record's Kafka message is keyed: ``kind`` is one of the ``KEY_*`` constants, ``field`` the data field
    holding the topic id, topic name or broker id; ``when`` = (field, value) limits the rule to records with that
    value (else the type name keys it); ``names_topic``: the field naming the topic whose id the record gives (the
    key of that topic's later records that name it)."""

    kind: str
    field: str | None = None
    when: tuple[str, int] | None = None
    names_topic: str | None = None


BY_TYPE: Final = ProducerKey(KEY_TYPE)
BY_TOPIC_ID: Final = ProducerKey(KEY_TOPIC_ID, TOPIC_ID)

#: A handler given as a function: ``(store or image, Record) -> Outcome | RecordError``.
HandlerFunction = Callable[[Any, Any], Any]
#: A handler: a method name (``"<area>.<method>"`` for an image area) or a function.
Handler = str | HandlerFunction

#: The partition stores (state/partitions/): each partition record type names its handler in every one.
STORE_OBJECTS: Final = "objects"
STORE_COLUMNAR: Final = "columnar"
STORES: Final = (STORE_OBJECTS, STORE_COLUMNAR)
#: The image areas a non-partition type's handler may name (state/image/).
AREAS: Final = ("features", "brokers", "topics", "configs")


@dataclass(frozen=True, slots=True)
class RecordType:
    """One record type: its name (Kafka's MetadataRecordType constant), scope, route, its handler (an image area's,
    or ``handlers``: one per partition store), the producer's key, whether the admin bridge derives it, and its
    schema (a ``kafka_schemas/`` file or the spec)."""

    name: str
    scope: str
    route: str
    handler: Handler | None = None
    key: ProducerKey = BY_TYPE
    admin_derived: bool = False
    schema_file: str | None = None
    schema: dict[str, Any] | None = None
    #: A partition type's handler in each partition store (`STORES`).
    handlers: dict[str, Handler] | None = None

    @property
    def applied(self) -> bool:
        """Whether the core applies it (else it is counted and skipped)."""
        return self.handler is not None or self.handlers is not None

    def store_handler(self, store: str) -> Handler:
        """A partition type's handler in ``store``."""
        if self.handlers is None or store not in self.handlers:
            raise KeyError(f"record type {self.name}: no handler for the {store} store")
        return self.handlers[store]


def _check(entry: RecordType) -> None:
    """Refuse an inconsistent entry with a one-line ValueError."""
    where = f"record type {entry.name!r}"
    if not entry.name or not entry.name.endswith("_RECORD") or entry.name.upper() != entry.name:
        raise ValueError(f"{where}: a name is Kafka's MetadataRecordType constant, like PARTITION_RECORD")
    if entry.scope not in SCOPES:
        raise ValueError(f"{where}: scope {entry.scope!r} is not one of {', '.join(SCOPES)}")
    if entry.route not in ROUTES:
        raise ValueError(f"{where}: route {entry.route!r} is not one of {', '.join(ROUTES)}")
    if entry.route in PARTITION_ROUTES and entry.scope != SCOPE_PARTITION:
        raise ValueError(f"{where}: only a partition's records route to its bucket")
    if entry.applied == (entry.route == ROUTE_SKIPPED):
        raise ValueError(f"{where}: a type without a handler is skipped (route {ROUTE_SKIPPED!r}), and only then")
    if entry.scope == SCOPE_PARTITION and entry.applied:
        if entry.handler is not None or entry.handlers is None:
            raise ValueError(f"{where}: a partition's record names a handler per partition store (handlers=...)")
        missing = [store for store in STORES if store not in entry.handlers]
        if missing:
            raise ValueError(f"{where}: no handler for the {' and '.join(missing)} partition store")
        unknown = sorted(set(entry.handlers) - set(STORES))
        if unknown:
            raise ValueError(f"{where}: unknown partition store {', '.join(unknown)} (stores: {', '.join(STORES)})")
    elif entry.handlers is not None:
        raise ValueError(f"{where}: only a partition's record has a handler per partition store")
    elif isinstance(entry.handler, str) and entry.handler.partition(".")[0] not in AREAS:
        raise ValueError(f"{where}: handler {entry.handler!r} is not '<area>.<method>' of an area ({', '.join(AREAS)})")
    if entry.applied and (entry.schema_file is None) == (entry.schema is None):
        raise ValueError(f"{where}: an applied type has a schema: a kafka_schemas/ file or the spec, one of them")
    if entry.key.kind not in (KEY_TOPIC_ID, KEY_TOPIC_NAME, KEY_BROKER, KEY_TYPE):
        raise ValueError(f"{where}: unknown producer key kind {entry.key.kind!r}")
    if entry.key.kind != KEY_TYPE and not entry.key.field:
        raise ValueError(f"{where}: a {entry.key.kind} key names its data field")


def _partition(
    name: str,
    method: str,
    route: str = ROUTE_OWNER_P0_EVERY,
    *,
    admin_derived: bool = False,
    schema_file: str | None = None,
    schema: dict[str, Any] | None = None,
) -> RecordType:
    """A partition's record type: routed to its partition's bucket, applied by the method ``method`` of each
    partition store, its Kafka message keyed by the topic's id."""
    return RecordType(
        name,
        SCOPE_PARTITION,
        route,
        handlers={STORE_OBJECTS: method, STORE_COLUMNAR: method},
        key=BY_TOPIC_ID,
        admin_derived=admin_derived,
        schema_file=schema_file,
        schema=schema,
    )


def _topic(
    name: str, handler: str, schema_file: str, key: ProducerKey = BY_TOPIC_ID, admin_derived: bool = False
) -> RecordType:
    """A topic's record type: every bucket gets it."""
    return RecordType(
        name, SCOPE_TOPIC, ROUTE_EVERY, handler=handler, key=key, admin_derived=admin_derived, schema_file=schema_file
    )


def _broker(
    name: str,
    handler: str,
    id_field: str,
    schema_file: str | None = None,
    admin_derived: bool = False,
    *,
    schema: dict[str, Any] | None = None,
) -> RecordType:
    """A broker's record type: every bucket gets it, its Kafka message is keyed by the broker's id."""
    return RecordType(
        name,
        SCOPE_BROKER,
        ROUTE_EVERY,
        handler=handler,
        key=ProducerKey(KEY_BROKER, id_field),
        admin_derived=admin_derived,
        schema_file=schema_file,
        schema=schema,
    )


def _skipped(name: str) -> RecordType:
    return RecordType(name, SCOPE_CLUSTER, ROUTE_SKIPPED)


#: elrwatch's own record spec, in Kafka's schema format (documented in docs/INPUT.md).
REPLICA_LOG_INFO_SCHEMA: Final[dict[str, Any]] = {
    "name": "ReplicaLogInfoRecord",
    "validVersions": "0",
    "fields": [
        {"name": "TopicId", "type": "uuid", "versions": "0+"},
        {"name": "PartitionId", "type": "int32", "versions": "0+"},
        {"name": "BrokerId", "type": "int32", "versions": "0+", "entityType": "brokerId"},
        {"name": "BrokerEpoch", "type": "int64", "versions": "0+"},
        {"name": "LogEndOffset", "type": "int64", "versions": "0+"},
        {"name": "LastWrittenLeaderEpoch", "type": "int32", "versions": "0+"},
        {"name": "CurrentLeaderEpoch", "type": "int32", "versions": "0+"},
    ],
}

#: elrwatch's own record spec: a node's static config (a null value: the node's file does not set it, Kafka's
#: built-in default applies). The metadata-log bridge reads it from ``--server-properties``, the admin bridge from
#: DescribeConfigs sources 4 (STATIC_BROKER_CONFIG) and 5 (DEFAULT_CONFIG).
STATIC_BROKER_CONFIG_SCHEMA: Final[dict[str, Any]] = {
    "name": "StaticBrokerConfigRecord",
    "validVersions": "0",
    "fields": [
        {"name": "NodeId", "type": "int32", "versions": "0+"},
        {"name": "Name", "type": "string", "versions": "0+"},
        {"name": "Value", "type": "string", "versions": "0+", "nullableVersions": "0+"},
    ],
}

#: elrwatch's own record of one step of `elrwatch recover` (documented in docs/INPUT.md): the step (reorder, elect,
#: verify, restore), its outcome (done, failed), the candidate, the partition's original replica order and the order
#: the step set, the leader and end offset Kafka reported, the candidate's reported log end offset (-1: unknown), what
#: each other replica loses (records -1: unknown) and the line the command printed.
OPERATOR_RECOVERY_SCHEMA: Final[dict[str, Any]] = {
    "name": "OperatorRecoveryRecord",
    "validVersions": "0",
    "fields": [
        {"name": "TopicId", "type": "uuid", "versions": "0+"},
        {"name": "PartitionId", "type": "int32", "versions": "0+"},
        {"name": "Step", "type": "string", "versions": "0+"},
        {"name": "Outcome", "type": "string", "versions": "0+"},
        {"name": "Candidate", "type": "int32", "versions": "0+", "entityType": "brokerId"},
        {"name": "Replicas", "type": "[]int32", "versions": "0+", "entityType": "brokerId"},
        {"name": "Order", "type": "[]int32", "versions": "0+", "entityType": "brokerId"},
        {"name": "Leader", "type": "int32", "versions": "0+", "entityType": "brokerId"},
        {"name": "EndOffset", "type": "int64", "versions": "0+"},
        {"name": "CandidateLogEndOffset", "type": "int64", "versions": "0+"},
        {
            "name": "Losses",
            "type": "[]ReplicaLoss",
            "versions": "0+",
            "fields": [
                {"name": "BrokerId", "type": "int32", "versions": "0+", "entityType": "brokerId"},
                {"name": "Records", "type": "int64", "versions": "0+"},
                {"name": "Exact", "type": "bool", "versions": "0+"},
            ],
        },
        {"name": "Message", "type": "string", "versions": "0+"},
    ],
}

#: elrwatch's own record spec (docs/INPUT.md): what ``elrwatch agent`` read of its broker's ``.kafka_cleanshutdown``
#: files. ``RegistrationEpoch``: the broker's registration in its own metadata log when the files were read;
#: ``CleanShutdownEpoch``: the epoch every log dir's file agrees on, null when a dir has no file, a file cannot be
#: read, or they differ (Kafka's previousBrokerEpoch of -1); ``LogDirs`` checked, ``LogDirsWithFile``.
CLEAN_SHUTDOWN_SCHEMA: Final[dict[str, Any]] = {
    "name": "CleanShutdownRecord",
    "validVersions": "0",
    "fields": [
        {"name": "BrokerId", "type": "int32", "versions": "0+", "entityType": "brokerId"},
        {"name": "RegistrationEpoch", "type": "int64", "versions": "0+"},
        {"name": "CleanShutdownEpoch", "type": "int64", "versions": "0+", "nullableVersions": "0+"},
        {"name": "LogDirs", "type": "int32", "versions": "0+"},
        {"name": "LogDirsWithFile", "type": "int32", "versions": "0+"},
    ],
}

#: The types elrwatch ships with: those the core applies, then every other MetadataRecordType of Kafka trunk
#: (well-formed records of those are counted and skipped).
BUILTIN_TYPES: Final[tuple[RecordType, ...]] = (
    _partition(PARTITION_RECORD, "apply_partition_record", admin_derived=True, schema_file="PartitionRecord.json"),
    _partition(
        PARTITION_CHANGE_RECORD,
        "apply_partition_change",
        admin_derived=True,
        schema_file="PartitionChangeRecord.json",
    ),
    _partition(REPLICA_LOG_INFO_RECORD, "apply_replica_log_info", ROUTE_OWNER, schema=REPLICA_LOG_INFO_SCHEMA),
    _partition(OPERATOR_RECOVERY_RECORD, "apply_operator_recovery", ROUTE_OWNER, schema=OPERATOR_RECOVERY_SCHEMA),
    _topic(
        CLEAR_ELR_RECORD,
        "topics.apply_clear_elr",
        "ClearElrRecord.json",
        key=ProducerKey(KEY_TOPIC_NAME, "topicName"),
    ),
    _topic(
        TOPIC_RECORD,
        "topics.apply_topic",
        "TopicRecord.json",
        key=ProducerKey(KEY_TOPIC_ID, TOPIC_ID, names_topic="name"),
        admin_derived=True,
    ),
    _topic(REMOVE_TOPIC_RECORD, "topics.apply_remove_topic", "RemoveTopicRecord.json", admin_derived=True),
    _broker(
        REGISTER_BROKER_RECORD, "brokers.apply_register", "brokerId", "RegisterBrokerRecord.json", admin_derived=True
    ),
    _broker(
        BROKER_REGISTRATION_CHANGE_RECORD,
        "brokers.apply_change",
        "brokerId",
        "BrokerRegistrationChangeRecord.json",
        admin_derived=True,
    ),
    _broker(
        UNREGISTER_BROKER_RECORD,
        "brokers.apply_unregister",
        "brokerId",
        "UnregisterBrokerRecord.json",
        admin_derived=True,
    ),
    _broker(FENCE_BROKER_RECORD, "brokers.apply_fence", "id", "FenceBrokerRecord.json"),
    _broker(UNFENCE_BROKER_RECORD, "brokers.apply_fence", "id", "UnfenceBrokerRecord.json"),
    _broker(CLEAN_SHUTDOWN_RECORD, "brokers.apply_clean_shutdown", "brokerId", schema=CLEAN_SHUTDOWN_SCHEMA),
    RecordType(
        CONFIG_RECORD,
        SCOPE_CLUSTER,  # a topic's, a broker's or the cluster default's config
        ROUTE_EVERY,
        handler="configs.apply_config",
        key=ProducerKey(KEY_TOPIC_NAME, "resourceName", when=("resourceType", RESOURCE_TOPIC)),
        admin_derived=True,
        schema_file="ConfigRecord.json",
    ),
    RecordType(
        STATIC_BROKER_CONFIG_RECORD,
        SCOPE_CLUSTER,  # a node's file, applied as the cluster's static layer
        ROUTE_EVERY,
        handler="configs.apply_static",
        key=ProducerKey(KEY_BROKER, "nodeId"),
        admin_derived=True,
        schema=STATIC_BROKER_CONFIG_SCHEMA,
    ),
    RecordType(
        FEATURE_LEVEL_RECORD,
        SCOPE_CLUSTER,
        ROUTE_EVERY,
        handler="features.apply_feature_level",
        admin_derived=True,
        schema_file="FeatureLevelRecord.json",
    ),
    _skipped("ACCESS_CONTROL_ENTRY_RECORD"),
    _skipped("REMOVE_ACCESS_CONTROL_ENTRY_RECORD"),
    _skipped("DELEGATION_TOKEN_RECORD"),
    _skipped("REMOVE_DELEGATION_TOKEN_RECORD"),
    _skipped("USER_SCRAM_CREDENTIAL_RECORD"),
    _skipped("REMOVE_USER_SCRAM_CREDENTIAL_RECORD"),
    _skipped("CLIENT_QUOTA_RECORD"),
    _skipped("PRODUCER_IDS_RECORD"),
    _skipped("NO_OP_RECORD"),
    _skipped("ZK_MIGRATION_STATE_RECORD"),
    _skipped("ABORT_TRANSACTION_RECORD"),
    _skipped("BEGIN_TRANSACTION_RECORD"),
    _skipped("END_TRANSACTION_RECORD"),
    _skipped("REGISTER_CONTROLLER_RECORD"),
)

# --- the registry -------------------------------------------------------------------------------------------------

_TYPES: dict[str, RecordType] = {}
#: Checks every entry must pass besides `_check`: each partition store adds one (it defines the entry's handler),
#: run for the types registered so far when it is added and for each type registered after.
_CHECKS: list[Callable[[RecordType], None]] = []
#: Type name → whether partition 0's records go to every bucket, for the types routed to their partition's bucket
#: (routing's hot path reads it: one lookup).
PARTITION_ROUTED: dict[str, bool] = {}


def register(entry: RecordType) -> None:
    """Add a record type (checked; a name already registered is refused). The built-in types are registered at
    import; a type registered later is parsed with a validator built from its schema at first use (records.py)."""
    _check(entry)
    if entry.name in _TYPES:
        raise ValueError(f"record type {entry.name!r} is already registered")
    for check in _CHECKS:
        check(entry)
    _TYPES[entry.name] = entry
    if entry.route in PARTITION_ROUTES:
        PARTITION_ROUTED[entry.name] = entry.route == ROUTE_OWNER_P0_EVERY


def add_check(check: Callable[[RecordType], None]) -> None:
    """Run ``check`` on every type registered so far and on each one registered later (it raises a one-line
    ValueError for an entry it refuses; a partition store checks that it defines the entry's handler)."""
    for entry in _TYPES.values():
        check(entry)
    _CHECKS.append(check)


def unregister(name: str) -> None:
    """Remove a type registered with `register` (a test's own); the built-in types stay."""
    if any(entry.name == name for entry in BUILTIN_TYPES):
        raise ValueError(f"record type {name!r} is built in")
    _TYPES.pop(name, None)
    PARTITION_ROUTED.pop(name, None)


def get(name: str) -> RecordType | None:
    """The registered type of that name, or None."""
    return _TYPES.get(name)


def registered() -> tuple[RecordType, ...]:
    """Every registered type, built-in ones first."""
    return tuple(_TYPES.values())


def applied_names() -> tuple[str, ...]:
    """The types the core applies."""
    return tuple(entry.name for entry in _TYPES.values() if entry.applied)


def partition_routed_names() -> tuple[str, ...]:
    """The types routed to their partition's bucket (the JVM's routing places them, streaming/route.py)."""
    return tuple(entry.name for entry in _TYPES.values() if entry.route in PARTITION_ROUTES)


def admin_derivable_names() -> frozenset[str]:
    """The types the admin bridge can derive from the admin API."""
    return frozenset(entry.name for entry in _TYPES.values() if entry.admin_derived)


def message_key(type_name: str, data: dict[str, Any], topic_ids: dict[str, str] | None = None) -> bytes:
    """The Kafka message key of a record (its type's `ProducerKey`; an unknown type: its name).

    ``topic_ids``: topic name → id, learnt from the records that name a topic (updated here), used by the
    records that name a topic instead of giving its id."""
    entry = _TYPES.get(type_name)
    if entry is not None:
        key = entry.key
        field = key.field
        if field is not None and (key.when is None or data.get(key.when[0]) == key.when[1]):
            if key.kind == KEY_TOPIC_ID:
                if field in data:
                    if topic_ids is not None:
                        learn_topic_name(type_name, data, topic_ids)
                    return f"topic:{data[field]}".encode()
            elif key.kind == KEY_TOPIC_NAME:
                name = data.get(field)
                if topic_ids and isinstance(name, str) and name in topic_ids:
                    return f"topic:{topic_ids[name]}".encode()
            elif key.kind == KEY_BROKER and field in data:
                return f"broker:{data[field]}".encode()
    return type_name.encode()


def learn_topic_name(type_name: str, data: dict[str, Any], topic_ids: dict[str, str]) -> None:
    """Remember the topic name → id a record tells (a TOPIC_RECORD: its ``names_topic`` key rule) in ``topic_ids``."""
    entry = _TYPES.get(type_name)
    if entry is not None and entry.key.names_topic is not None and entry.key.field is not None:
        name = data.get(entry.key.names_topic)
        topic_id = data.get(entry.key.field)
        if isinstance(name, str) and topic_id is not None:
            topic_ids[name] = str(topic_id)


for _entry in BUILTIN_TYPES:
    register(_entry)
