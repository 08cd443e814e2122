"""Response models of the API (pydantic 2), with OpenAPI examples."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from elrwatch.state.insight import CAUSES
from elrwatch.state.status import STATUSES

Status = Literal[STATUSES]  # type: ignore[valid-type] - the status classes of state/status.py, most severe first
Cause = Literal[CAUSES]  # type: ignore[valid-type] - why a replica is out of the ISR (state/insight.py)

_OUTLOOK_EXAMPLE = {"summary": "keeps leader 2; acks=all writes fail until the ISR grows back to 2"}
_RECOMMENDATION_EXAMPLE = {
    "strategy": "Balanced",
    "action": "restore_replicas",
    "summary": "High watermark frozen: bring broker 1 back or let broker 0 catch up.",
    "risk": "none",
    "commands": ["kafka-topics.sh --bootstrap-server $BOOTSTRAP --describe --topic orders --under-min-isr-partitions"],
}
_PARTITION_EXAMPLE = {
    "topic": "orders",
    "topicId": "Yk3R8bYFQxGk1Ggd1vQ2Aw",
    "partitionId": 1,
    "replicas": [1, 2, 0],
    "isr": [2],
    "elr": [0],
    "lastKnownElr": [],
    "leader": 2,
    "leaderEpoch": 7,
    "partitionEpoch": 15,
    "leaderRecoveryState": 0,
    "addingReplicas": [],
    "removingReplicas": [],
    "effectiveMinIsr": 2,
    "underMinIsr": True,
    "atMinIsr": False,
    "leaderless": False,
    "electable": [0, 2],
    "liveElectable": [0, 2],
    "missingReplicas": [{"brokerId": 1, "cause": "fenced"}, {"brokerId": 0, "cause": "lagging"}],
    "status": "UNDER_MIN_ISR",
    "statusSinceMs": 1732100004000,
    "statusSinceOffset": 405,
    "lastLeaderChange": "clean",
    "lastOffset": 405,
    "lastTimestampMs": 1732100004000,
    "lastPosition": "elrwatch-events/0@1234",
    "violations": [],
    "outlook": _OUTLOOK_EXAMPLE,
    "recommendation": _RECOMMENDATION_EXAMPLE,
}


def _examples(*examples: dict[str, Any], **config: Any) -> ConfigDict:
    """A model's configuration (``config``) with its OpenAPI examples."""
    return ConfigDict(json_schema_extra={"examples": list(examples)}, **config)


class Problem(BaseModel):
    """An RFC 9457 problem document (``application/problem+json``)."""

    model_config = _examples(
        {
            "type": "about:blank",
            "title": "Not Found",
            "status": 404,
            "detail": "topic 'orders' has no partition 7",
            "instance": "/v1/partitions/orders/7",
        },
        extra="allow",
    )
    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None


class MissingReplica(BaseModel):
    """A replica not in the ISR and why, from its broker's registration: ``fenced`` (crash or network),
    ``controlled_shutdown`` (a planned restart, also once fenced at its end until the broker registers again),
    ``unregistered``, or ``lagging`` (registered and unfenced but out of sync)."""

    brokerId: int
    cause: Cause


class PartitionSummary(BaseModel):
    """A partition's registration and derived status (list view; no advice)."""

    model_config = _examples(
        {k: v for k, v in _PARTITION_EXAMPLE.items() if k not in ("outlook", "recommendation", "violations")},
        extra="ignore",
    )
    topic: str
    topicId: str
    partitionId: int
    replicas: list[int]
    isr: list[int]
    elr: list[int] = []
    lastKnownElr: list[int] = []
    leader: int
    leaderEpoch: int
    partitionEpoch: int
    leaderRecoveryState: int = 0
    addingReplicas: list[int] = []
    removingReplicas: list[int] = []
    effectiveMinIsr: int | None = None
    underMinIsr: bool
    atMinIsr: bool = False
    leaderless: bool
    electable: list[int] = []
    liveElectable: list[int] = []
    missingReplicas: list[MissingReplica] = []
    status: Status
    statusSinceMs: int | None = Field(None, description="When the partition entered its status (ms epoch).")
    statusSinceOffset: int | None = None
    lastLeaderChange: str | None = None
    lastOffset: int | None = None
    lastTimestampMs: int | None = None


class Partition(PartitionSummary):
    """Full registration, derived status, since when, Kafka's outlook and elrwatch's recommendation."""

    model_config = _examples(_PARTITION_EXAMPLE, extra="allow")
    lastPosition: str | None = None
    violations: list[Any] = []
    outlook: dict[str, Any] | None = Field(None, description="What Kafka's controller will do by itself.")
    recommendation: dict[str, Any] | None = Field(
        None, description="What the operator should do: action, data-loss risk, runnable commands."
    )


class PartitionPage(BaseModel):
    """One page of partitions ordered by (topic, partition); pass ``nextCursor`` as ``cursor`` for the next."""

    model_config = _examples({"items": [_PARTITION_EXAMPLE], "nextCursor": "WyJvcmRlcnMiLDJd", "limit": 1})
    items: list[PartitionSummary]
    nextCursor: str | None = Field(None, description="Opaque cursor (topic, partition) of the next page.")
    limit: int


class Transition(BaseModel):
    """One status change of a partition."""

    model_config = ConfigDict(populate_by_name=True)
    from_: str | None = Field(None, alias="from")
    to: str | None = None
    atMs: int | None = None
    offset: int | None = None
    position: str | None = None
    batchId: int | None = None


class History(BaseModel):
    """A partition's status transitions, oldest first."""

    model_config = _examples(
        {
            "topic": "orders",
            "partitionId": 1,
            "transitions": [
                {
                    "from": "AT_MIN_ISR",
                    "to": "UNDER_MIN_ISR",
                    "atMs": 1732100004000,
                    "offset": 405,
                    "position": "elrwatch-events/0@1234",
                    "batchId": 17,
                }
            ],
        }
    )
    topic: str
    partitionId: int
    transitions: list[Transition]
    operatorRecovery: dict[str, Any] | None = Field(
        None,
        description="What an operator's `elrwatch recover` did: a summary line (\"recovered by operator: elected 2, "
        'lost ≈ 0 records on 1") and its steps, oldest first; null when no operator recovered the partition.',
    )


class Topic(BaseModel):
    """A topic: name, id, partition count, replication factor, dynamic configs."""

    model_config = _examples(
        {
            "topic": "orders",
            "topicId": "Yk3R8bYFQxGk1Ggd1vQ2Aw",
            "partitionCount": 3,
            "replicationFactor": 3,
            "configs": {"min.insync.replicas": "2"},
        },
        extra="allow",
    )
    topic: str
    topicId: str
    partitionCount: int | None = None
    replicationFactor: int | None = None
    configs: dict[str, Any] = {}


class NextStart(BaseModel):
    """Will the broker's next start be clean (Kafka's ``.kafka_cleanshutdown`` rule, docs/AGENT.md)?"""

    clean: bool | None = Field(
        None, description="true: clean; false: unclean (it loses its ISR and ELR seats); null: not known."
    )
    basis: str = Field(description="What the prediction rests on: the agent's reading of the files, or the metadata.")


class Broker(BaseModel):
    """A broker registration as the controller sees it."""

    model_config = _examples(
        {
            "brokerId": 1,
            "epoch": 101,
            "incarnationId": "Q2tU8wXhR3e7N5sB1fYpLA",
            "fenced": True,
            "inControlledShutdown": False,
            "registered": True,
            "rack": "rack-b",
            "state": "fenced",
            "nextStart": {
                "clean": False,
                "basis": "agent: 1 of 1 log dirs have no .kafka_cleanshutdown (the broker was killed or crashed, or "
                "has not finished stopping): Kafka registers it uncleanly and it loses its ELR seats",
            },
        },
        extra="allow",
    )
    brokerId: int
    epoch: int | None = Field(
        None,
        description="The registration's broker epoch; null when the source does not know it (a registration derived "
        "by `elrwatch bridge --source admin`: the admin API shows no epochs).",
    )
    incarnationId: str | None = Field(None, description="The registration's incarnation id; null when not known.")
    fenced: bool = False
    inControlledShutdown: bool = False
    registered: bool = True
    rack: str | None = None
    state: str
    leaderPartitions: int | None = Field(None, description="Partitions this broker leads.")
    isrMissingPartitions: int | None = Field(
        None, description="Partitions with this broker among their replicas but not in their ISR."
    )
    restartBlockingPartitions: int | None = Field(
        None, description="Partitions that stopping this broker now leaves under min ISR (or keeps there)."
    )
    restartOfflinePartitions: int | None = Field(
        None, description="Partitions that stopping this broker now leaves without an electable leader."
    )
    nextStart: NextStart | None = Field(None, description="Will its next start be clean?")
    cleanShutdown: dict[str, Any] | None = Field(
        None,
        description="Its agent's last CLEAN_SHUTDOWN_RECORD (registrationEpoch, cleanShutdownEpoch, logDirs, "
        "logDirsWithFile, timestampMs), or null.",
    )


class RestartPartitions(BaseModel):
    """One page of partitions (by topic and partition); pass ``nextCursor`` as this list's cursor."""

    items: list[PartitionSummary]
    nextCursor: str | None = None
    limit: int


class RestartCheck(BaseModel):
    """Is it safe to stop this broker now?"""

    model_config = _examples(
        {
            "brokerId": 2,
            "state": "active",
            "safe": False,
            "reason": "stopping broker 2 now leaves 1 partition(s) under min ISR (acks=all writes fail)",
            "blockingCount": 1,
            "offlineCount": 0,
            "blocking": {"items": [], "nextCursor": None, "limit": 100},
            "offline": {"items": [], "nextCursor": None, "limit": 100},
        }
    )
    brokerId: int
    state: str
    safe: bool
    reason: str
    blockingCount: int = Field(description="Partitions whose ISR holds the broker with |ISR| - 1 < min ISR.")
    offlineCount: int = Field(description="Partitions whose only active electable replica is the broker.")
    blocking: RestartPartitions
    offline: RestartPartitions


class Trend(BaseModel):
    """Under-min-ISR and offline partition counts over a window (the store's gauge history): each series is
    ``[[atMs, value], ...]``, oldest first, a step function (a value holds until the next point)."""

    model_config = _examples(
        {
            "fromMs": 1732100000000,
            "toMs": 1732103600000,
            "underMinIsr": [[1732100000000, 0], [1732101000000, 12], [1732101300000, 0]],
            "offline": [[1732100000000, 0]],
        }
    )
    fromMs: int
    toMs: int
    underMinIsr: list[list[int | float]] = Field(description="[atMs, count] points, oldest first.")
    offline: list[list[int | float]] = Field(description="[atMs, count] points, oldest first.")


class Freshness(BaseModel):
    """How current the store is."""

    lastEventTimeMs: int | None = Field(None, description="Timestamp of the last applied record (ms epoch).")
    dataAgeSeconds: float | None = Field(None, description="Now minus the last applied record's timestamp.")
    updatedAtMs: int | None = Field(None, description="When the job last committed a batch (ms epoch).")
    updatedAgeSeconds: float | None = None
    lastBatchId: int | None = None


class Summary(BaseModel):
    """Gauge values (monitor-spec §4) and data freshness; never scans the partition table."""

    model_config = _examples(
        {
            "partitions": 1000000,
            "topics": 2000,
            "partitionsByStatus": {"UNDER_MIN_ISR": 12, "AT_MIN_ISR": 40, "HEALTHY": 999948},
            "underMinIsr": 12,
            "atMinIsr": 40,
            "offline": 0,
            "needingAction": 12,
            "brokersByState": {"active": 5, "fenced": 1, "controlled_shutdown": 0, "unregistered": 0},
            "elrEnabled": True,
            "quarantined": {"count": 2, "byReason": {"invalid_json": 2}},
            "freshness": {
                "lastEventTimeMs": 1732100009000,
                "dataAgeSeconds": 1.2,
                "updatedAtMs": 1732100009500,
                "updatedAgeSeconds": 0.7,
                "lastBatchId": 42,
            },
            "gauges": {"elrwatch_global_under_min_isr_partitions": 12},
        }
    )
    partitions: int
    topics: int
    partitionsByStatus: dict[str, int]
    underMinIsr: int
    atMinIsr: int
    offline: int
    needingAction: int
    brokersByState: dict[str, int]
    elrEnabled: bool | None = None
    defaultMinIsr: int | None = Field(
        None, description="min.insync.replicas of a topic without its own config or a dynamic cluster default."
    )
    defaultMinIsrSource: str | None = Field(
        None,
        description='Where defaultMinIsr comes from: "dynamic cluster default", "--default-min-isr", '
        '"static config (server.properties)" or "Kafka\'s default".',
    )
    derivedFrom: str | None = Field(None, description='"admin-poll": derived by `elrwatch bridge --source admin`.')
    unknownFacts: list[str] = Field([], description="What the data's source cannot know (e.g. partition epochs).")
    quarantined: dict[str, Any]
    freshness: Freshness
    gauges: dict[str, float]


class RecommendationItem(BaseModel):
    """A partition that needs an operator, with Kafka's outlook and the recommended action."""

    model_config = ConfigDict(extra="ignore")
    topic: str
    topicId: str
    partitionId: int
    status: Status
    severity: int = Field(description="0 = most severe (status order of monitor-spec §3).")
    statusSinceMs: int | None = None
    leader: int
    replicas: list[int]
    isr: list[int]
    elr: list[int] = []
    lastKnownElr: list[int] = []
    liveElectable: list[int] = []
    missingReplicas: list[MissingReplica] = []
    outlook: dict[str, Any] | None = None
    recommendation: dict[str, Any] | None = None
    operatorRecovery: dict[str, Any] | None = Field(
        None, description="What an operator's `elrwatch recover` did: its summary line and steps (none: absent)."
    )


class RecommendationPage(BaseModel):
    """Partitions needing an operator, most severe first; pass ``nextCursor`` as ``cursor`` for more."""

    model_config = _examples(
        {
            "items": [
                {
                    "topic": "orders",
                    "topicId": "Yk3R8bYFQxGk1Ggd1vQ2Aw",
                    "partitionId": 1,
                    "status": "UNDER_MIN_ISR",
                    "severity": 4,
                    "statusSinceMs": 1732100004000,
                    "leader": 2,
                    "replicas": [1, 2, 0],
                    "isr": [2],
                    "elr": [0],
                    "lastKnownElr": [],
                    "liveElectable": [0, 2],
                    "outlook": _OUTLOOK_EXAMPLE,
                    "recommendation": _RECOMMENDATION_EXAMPLE,
                }
            ],
            "nextCursor": None,
            "limit": 100,
        }
    )
    items: list[RecommendationItem]
    nextCursor: str | None = None
    limit: int


class Health(BaseModel):
    """Liveness / readiness."""

    status: str
    detail: str | None = None
    tokenRequired: bool | None = Field(None, description="/healthz: whether the other endpoints ask for a token.")
    updatedAgeSeconds: float | None = None
    storeBehindBatches: int | None = None


class WhatIf(BaseModel):
    """What happens if the given brokers go down now (``elrwatch.state.whatif`` over the store's state)."""

    model_config = _examples({
        "down": [1, 2], "unclean": False, "partitions": 420, "changedPartitions": 260,
        "counts": {"underMinIsr": 140, "leaderless": 3, "uncleanElectionNeeded": 1},
        "countsBefore": {"underMinIsr": 0, "leaderless": 0, "uncleanElectionNeeded": 0},
        "newlyAffected": {"underMinIsr": 140, "leaderless": 3, "uncleanElectionNeeded": 1},
        "underMinIsr": [], "leaderless": [], "uncleanElectionNeeded": [],
        "underMinIsrTruncated": False, "leaderlessTruncated": False, "uncleanElectionNeededTruncated": False,
        "scope": "partitions with a replica on a broker that goes down (others cannot change)",
    }, extra="allow")  # fmt: skip
    down: list[int]
    unclean: bool
    partitions: int = Field(description="Partitions examined (those with a replica on a down broker).")
    counts: dict[str, int] = Field(description="Partitions per outcome after the brokers go down.")
    countsBefore: dict[str, int] = {}
    newlyAffected: dict[str, int] = {}
    underMinIsr: list[dict[str, Any]] = []
    leaderless: list[dict[str, Any]] = []
    uncleanElectionNeeded: list[dict[str, Any]] = []
    unknownBrokers: list[int] = []
