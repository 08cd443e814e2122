"""Gauge values of monitor-spec §4 (names in DESIGN.md §6), computed from the core's state, and the one table that
describes every metric elrwatch serves (the core's gauges, the streaming job's health, the API's requests, the
bridge's).

A gauge is keyed by ``(name, labels)`` (:data:`GaugeKey`, labels sorted), e.g.
``("elrwatch_electable_leaders_partitions", (("live_electable", "0"),))``. The exporter serves the key as it is;
documents and the status store name a sample in Prometheus' text form (:func:`sample_name`:
``elrwatch_electable_leaders_partitions{live_electable="0"}``), so a report document and a scrape of the metrics
endpoint compare directly. That text is only ever written, never parsed back. Cardinality is bounded: no
per-partition labels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from elrwatch.state import insight, next_start, status
from elrwatch.state import metadata_version as mv
from elrwatch.state.audit import VIOLATION_KINDS
from elrwatch.state.image.positions import polled_unknown
from elrwatch.state.records import QUARANTINE_REASONS
from elrwatch.state.status import STATUSES

ELECTABLE_LABELS = ("0", "1", "2", "3+")
#: The states of a registration (BrokerState.state_name), then ``unregistered``: a broker some partition names as a
#: replica without a registration (down on a ZooKeeper-mode cluster, unregistered, or never seen by the source).
REGISTRATION_STATES = ("active", "fenced", "controlled_shutdown")
BROKER_STATES = (*REGISTRATION_STATES, "unregistered")

#: A sample's key: (metric name, ((label, value), ...) sorted by label).
GaugeKey = tuple[str, tuple[tuple[str, str], ...]]
#: Sample values by key.
Gauges = dict[GaugeKey, float]


@dataclass(frozen=True)
class Metric:
    """One metric elrwatch serves: its help text and label names, ``values``: the known values of its label when
    they are a fixed set (the API reads those samples by them), and its type (``kind``: gauge, the most of them,
    counter or histogram)."""

    name: str
    help: str
    labels: tuple[str, ...] = ()
    values: tuple[str, ...] = ()
    kind: str = "gauge"


#: The core's gauges (state/gauges.py: the streaming job's /metrics, documents, the store, /v1/summary) and
#: counters.
_CORE = (
    Metric("elrwatch_global_under_min_isr_partitions", "Partitions with |ISR| < effective min ISR (HWM frozen)."),
    Metric("elrwatch_at_min_isr_partitions", "Partitions with |ISR| == effective min ISR (one failure from under)."),
    Metric("elrwatch_offline_partitions", "Partitions without a leader (Kafka's OfflinePartitionsCount)."),
    Metric(
        "elrwatch_electable_leaders_partitions",
        "Partitions by number of live electable replicas (ISR ∪ ELR).",
        ("live_electable",),
        ELECTABLE_LABELS,
    ),
    Metric(
        "elrwatch_unclean_recovery_partitions",
        "Leaderless partitions whose only way back may lose data, plus partitions RECOVERING.",
    ),
    Metric(
        "elrwatch_unclean_recovery_candidate_known_partitions",
        "Leaderless partitions needing a lossy election (unclean recovery or manual) for which a live replica "
        "reported its log (REPLICA_LOG_INFO_RECORD, current broker epoch): the advice names the longest log.",
    ),
    Metric(
        "elrwatch_unclean_restart_pending_partitions",
        "Leaderless partitions whose every ISR/ELR member is a stopped broker predicted to restart uncleanly "
        "(killed or crashed: its log dirs lack .kafka_cleanshutdown, or it is unregistered): they lose their last "
        "electable member when those brokers return.",
    ),
    Metric(
        "elrwatch_manual_leader_election_required_partitions",
        "Leaderless partitions Kafka will never elect a leader for by itself.",
    ),
    Metric("elrwatch_recovering_partitions", "Partitions with leaderRecoveryState RECOVERING."),
    Metric(
        "elrwatch_last_replica_standing_partitions",
        "Partitions with ELR off whose ISR is one replica while the effective min ISR is 2 or more (an unclean "
        "shutdown of that replica may lose committed data); 0 with ELR on.",
    ),
    Metric("elrwatch_partitions", "Partitions by status class (monitor-spec §3).", ("status",), STATUSES),
    Metric("elrwatch_partition_count", "Partitions known to elrwatch."),
    Metric("elrwatch_topic_count", "Topics known to elrwatch."),
    Metric(
        "elrwatch_invariant_violations",
        "Partitions currently breaking an invariant, by kind.",
        ("kind",),
        tuple(VIOLATION_KINDS),
    ),
    Metric("elrwatch_unclean_recovery_finished_total", "RECOVERING -> RECOVERED transitions observed.", kind="counter"),
    Metric(
        "elrwatch_elr_elections_total",
        "Leader elections from the ELR observed (Kafka's ElectionFromEligibleLeaderReplicasPerSec).",
        kind="counter",
    ),
    Metric(
        "elrwatch_unclean_elections_total",
        "Records setting leaderRecoveryState=RECOVERING (Kafka's UncleanLeaderElectionsPerSec).",
        kind="counter",
    ),
    Metric(
        "elrwatch_last_known_leader_elections_total",
        "Last-known-leader elections observed (ISR and ELR empty).",
        kind="counter",
    ),
    # operator insight (state/insight.py): per broker (every registered broker), per topic (non-zero ones only),
    # by cause of the missing replicas
    Metric(
        "elrwatch_broker_isr_missing_partitions",
        "Partitions that have the broker among their replicas but not in their ISR.",
        ("broker",),
    ),
    Metric(
        "elrwatch_broker_restart_blocking_partitions",
        "Partitions whose ISR holds the broker with |ISR| - 1 < effective min ISR: stopping it now leaves them "
        "under min ISR (acks=all writes fail), or keeps them there.",
        ("broker",),
    ),
    Metric(
        "elrwatch_broker_restart_offline_partitions",
        "Partitions with a leader whose only active member of ISR ∪ ELR is the broker: stopping it now leaves "
        "them without an electable leader.",
        ("broker",),
    ),
    Metric(
        "elrwatch_topic_under_min_isr_partitions",
        "Partitions of the topic with |ISR| < effective min ISR (only topics with some).",
        ("topic",),
    ),
    Metric(
        "elrwatch_topic_offline_partitions",
        "Partitions of the topic without a leader (only topics with some).",
        ("topic",),
    ),
    Metric(
        "elrwatch_topic_at_min_isr_partitions",
        "Partitions of the topic with |ISR| == effective min ISR (only topics with some).",
        ("topic",),
    ),
    Metric(
        "elrwatch_under_min_isr_partitions_by_cause",
        "Partitions under min ISR by the dominant cause of their missing replicas (unregistered > fenced > lagging "
        "> controlled_shutdown: controlled_shutdown means every missing replica is in a planned shutdown).",
        ("cause",),
        insight.CAUSES,
    ),
    Metric(
        "elrwatch_brokers",
        "Brokers by state: registered ones by their registration's state; unregistered: brokers some partition "
        "names as a replica without a registration (down on a ZooKeeper-mode cluster, or never seen).",
        ("state",),
        BROKER_STATES,
    ),
    Metric(
        "elrwatch_unregistered_broker_partitions",
        "Partitions whose replicas name a broker that has no registration, by broker (only such brokers).",
        ("broker",),
    ),
    Metric("elrwatch_elr_enabled", "1 when eligible.leader.replicas.version >= 1."),
    Metric("elrwatch_events_total", "Input events read, by record type.", ("type",), kind="counter"),
    Metric(
        "elrwatch_quarantined_records_total",
        "Input events quarantined, by reason.",
        ("reason",),
        tuple(QUARANTINE_REASONS),
        kind="counter",
    ),
    Metric("elrwatch_duplicate_records_total", "Input events skipped as already applied.", kind="counter"),
    Metric("elrwatch_skipped_records_total", "Well-formed records of types elrwatch does not use.", kind="counter"),
    Metric("elrwatch_last_event_timestamp_seconds", "Event time of the newest record applied (Unix seconds)."),
)

#: The streaming job's health (streaming/metrics.py; the driver's /metrics only), in the order the exporter serves
#: them.
_HEALTH = (
    Metric("elrwatch_batch_duration_seconds", "Wall time of the last micro-batch (Spark's batchDuration)."),
    Metric("elrwatch_batch_input_rows", "Input events of the last micro-batch."),
    Metric("elrwatch_source_lag_records", "Events in the source not yet consumed (latest - consumed)."),
    Metric("elrwatch_last_batch_completed_timestamp_seconds", "When the last micro-batch completed."),
    Metric("elrwatch_batches_total", "Micro-batches completed by this driver.", kind="counter"),
    Metric("elrwatch_up", "1 while the streaming query runs."),
    Metric(
        "elrwatch_store_behind_batches",
        "Micro-batches whose gauges are served and that are not yet in the status store (written behind them).",
    ),
)

#: The API's own (api/middleware.py; the API's /metrics).
_API = (
    Metric("elrwatch_api_requests", "API requests", ("method", "route", "status"), kind="counter"),
    Metric("elrwatch_api_request_duration_seconds", "API request latency", ("method", "route"), kind="histogram"),
)

#: elrwatch bridge's (bridge/runner.py; the bridge's /metrics).
_BRIDGE = (
    Metric("elrwatch_bridge_errors_total", "Bridge errors by reason (each also logged)", ("reason",), kind="counter"),
    Metric("elrwatch_bridge_published_records_total", "Records published to the event topic", kind="counter"),
    Metric("elrwatch_bridge_poll_duration_seconds", "Duration of the last poll (admin) or read (metadata log)"),
    Metric("elrwatch_bridge_last_published_offset", "Offset of the last record published"),
)

#: Every metric elrwatch serves, by name: the exporter, the API and the docs use this table.
METRICS: dict[str, Metric] = {m.name: m for m in (*_CORE, *_HEALTH, *_API, *_BRIDGE)}
#: The job-health metrics, in the order the exporter serves them.
HEALTH_METRICS = tuple(m.name for m in _HEALTH)


def key(name: str, **labels: str) -> GaugeKey:
    """The key of a sample: ``(name, ((label, value), ...))``, labels sorted."""
    return name, tuple(sorted(labels.items()))


def sample_name(sample: GaugeKey) -> str:
    """A key in Prometheus' text form: ``name{a="x",b="y"}`` (labels sorted), or ``name``."""
    name, labels = sample
    if not labels:
        return name
    inner = ",".join(f'{label}="{value}"' for label, value in labels)
    return f"{name}{{{inner}}}"


def sample(name: str, **labels: str) -> str:
    """Prometheus sample name of ``name`` with ``labels``: ``sample_name(key(name, **labels))``."""
    return sample_name(key(name, **labels))


def as_samples(gauges: Mapping[GaugeKey, float]) -> dict[str, float]:
    """Gauges by sample name, sorted (the form of documents and of the status store)."""
    return dict(sorted((sample_name(k), v) for k, v in gauges.items()))


def encode_gauges(gauges: Mapping[GaugeKey, float]) -> list[list[Any]]:
    """Gauges as JSON: ``[[name, [[label, value], ...], value], ...]`` (the job's payloads and driver file)."""
    return [[name, [list(pair) for pair in labels], value] for (name, labels), value in gauges.items()]


def decode_gauges(rows: Iterable[Any]) -> Gauges:
    """Inverse of :func:`encode_gauges`."""
    return {(name, tuple((label, value) for label, value in labels)): value for name, labels, value in rows}


def candidate_known_partitions(
    image: Any, log_info: Mapping[tuple[str, int], Mapping[int, Mapping[str, Any]]], partition: Any
) -> int:
    """Leaderless partitions flagged unclean recovery or manual election with current log info from at least one
    live replica (looks only at the partitions some replica reported on). ``partition(topic_id, partition_id)``: the
    store's partition or None."""
    known = 0
    brokers = image.brokers
    for (topic_id, partition_id), infos in log_info.items():
        p = partition(topic_id, partition_id)
        if p is None or p.leader >= 0 or not p.flags & (status.F_UNCLEAN_RECOVERY | status.F_MANUAL):
            continue
        for broker_id, info in infos.items():
            broker = brokers.by_id.get(broker_id)
            if (
                broker_id in p.replicas
                and broker is not None
                and brokers.is_active(broker_id)
                and info.get("brokerEpoch") == broker.epoch
            ):
                known += 1
                break
    return known


def restart_doomed(image: Any) -> frozenset[int]:
    """The stopped brokers whose next start is predicted unclean (`next_start.doomed`) when the controller applies
    ELR (an unclean registration costs seats only then); empty otherwise."""
    features = image.features
    level = features.metadata_version
    if not features.elr_enabled or (mv.DEFAULT_LEVEL if level is None else level) < mv.MV_4_0_IV1:
        return frozenset()
    polled = polled_unknown(image.positions.derived_from)
    return next_start.doomed(image.brokers.by_id, polled is None or next_start.epochs_known(polled[1]))


def loses_last_electable(p: Any, doomed: frozenset[int]) -> bool:
    """A leaderless partition whose ISR ∪ ELR is not empty and only holds ``doomed`` brokers (`restart_doomed`)."""
    if p.leader >= 0 or not (p.isr or p.elr):
        return False
    return all(b in doomed for b in p.isr) and all(b in doomed for b in p.elr)


def partition_gauges(cluster: Any) -> Gauges:
    """Gauges over the cluster's own partitions (a bucket's); summing these over buckets gives the cluster's."""
    return cluster.partitions.gauges()


def counted_partition_gauges(
    image: Any,
    *,
    flags: Mapping[int, int],
    electable: Iterable[int],
    statuses: Mapping[str, int],
    partitions: int,
    violations: Mapping[str, int],
    insight_counts: Mapping[Any, int],
    counters: Mapping[str, int],
    candidate_known: int,
    unregistered_replicas: Mapping[int, int],
    unclean_restart_pending: int = 0,
) -> Gauges:
    """The partition gauges from what a store counted: partitions per flag bit (``flags``), with 0, 1, 2 and 3+
    live electable replicas, per status, per violation kind, the insight counters, the election counters, the
    leaderless partitions whose best replica is known (`candidate_known_partitions`), by broker without a
    registration the partitions naming it as a replica (``unregistered_replicas``, `unregistered_brokers`), and the
    partitions that lose their last electable member when the stopped brokers return (``unclean_restart_pending``,
    `loses_last_electable`)."""
    out: Gauges = {
        key("elrwatch_global_under_min_isr_partitions"): flags.get(status.F_UNDER_MIN_ISR, 0),
        key("elrwatch_at_min_isr_partitions"): flags.get(status.F_AT_MIN_ISR, 0),
        key("elrwatch_offline_partitions"): flags.get(status.F_LEADERLESS, 0),
        key("elrwatch_unclean_recovery_partitions"): flags.get(status.F_UNCLEAN_RECOVERY, 0),
        key("elrwatch_unclean_recovery_candidate_known_partitions"): candidate_known,
        key("elrwatch_unclean_restart_pending_partitions"): unclean_restart_pending,
        key("elrwatch_manual_leader_election_required_partitions"): flags.get(status.F_MANUAL, 0),
        key("elrwatch_recovering_partitions"): flags.get(status.F_RECOVERING, 0),
        key("elrwatch_last_replica_standing_partitions"): flags.get(status.F_LAST_REPLICA_STANDING, 0),
        key("elrwatch_partition_count"): partitions,
    }
    for label, count in zip(ELECTABLE_LABELS, electable, strict=True):
        out[key("elrwatch_electable_leaders_partitions", live_electable=label)] = count
    for name in STATUSES:
        out[key("elrwatch_partitions", status=name)] = statuses.get(name, 0)
    for kind in VIOLATION_KINDS:
        out[key("elrwatch_invariant_violations", kind=kind)] = violations.get(kind, 0)
    out.update(insight_gauges(image, insight_counts))
    out[key("elrwatch_unclean_recovery_finished_total")] = counters.get("unclean_recovery_finished", 0)
    out[key("elrwatch_elr_elections_total")] = counters.get("elr_elections", 0)
    out[key("elrwatch_unclean_elections_total")] = counters.get("unclean_elections", 0)
    out[key("elrwatch_last_known_leader_elections_total")] = counters.get("last_known_leader_elections", 0)
    for broker_id in sorted(unregistered_replicas):
        if unregistered_replicas[broker_id]:
            out[key(UNREGISTERED_BROKER_PARTITIONS, broker=str(broker_id))] = unregistered_replicas[broker_id]
    return out


UNREGISTERED_BROKER_PARTITIONS = "elrwatch_unregistered_broker_partitions"


def unregistered_brokers(image: Any, named: Iterable[int]) -> list[int]:
    """Of the broker ids ``named`` (by some partition), those without a registration: never registered in the
    source, or unregistered (the ``unregistered`` state of ``elrwatch_brokers``)."""
    brokers = image.brokers.by_id
    return sorted(b for b in named if b not in brokers or not brokers[b].registered)


#: The per-topic insight gauges by counter kind (state/insight.py).
TOPIC_GAUGES = {
    insight.TOPIC_UNDER: "elrwatch_topic_under_min_isr_partitions",
    insight.TOPIC_OFFLINE: "elrwatch_topic_offline_partitions",
    insight.TOPIC_AT: "elrwatch_topic_at_min_isr_partitions",
}
#: The per-broker insight gauges by counter kind.
BROKER_GAUGES = {
    insight.MISSING: "elrwatch_broker_isr_missing_partitions",
    insight.BLOCKING: "elrwatch_broker_restart_blocking_partitions",
    insight.OFFLINE: "elrwatch_broker_restart_offline_partitions",
}


def insight_gauges(image: Any, counts: Mapping[Any, int]) -> Gauges:
    """The owned partitions' per-broker, per-topic and per-cause gauges (part of `partition_gauges`, summed over
    buckets) from their insight counters: one series per registered broker (0 included), one per topic with a
    non-zero count, all causes."""
    out: Gauges = {}
    brokers = image.brokers.by_id
    for broker_id in sorted(brokers):
        if brokers[broker_id].registered:
            label = str(broker_id)
            for kind, name in BROKER_GAUGES.items():
                out[key(name, broker=label)] = counts.get((kind, broker_id), 0)
    topics = image.topics.by_id
    per_topic = []
    for (kind, subject), value in counts.items():
        topic_gauge = TOPIC_GAUGES.get(kind)
        if topic_gauge is not None and subject in topics:
            per_topic.append((key(topic_gauge, topic=topics[subject].name), value))
    out.update(sorted(per_topic))  # the same order whatever the history of the counters
    for code, cause in enumerate(insight.CAUSES):
        out[key("elrwatch_under_min_isr_partitions_by_cause", cause=cause)] = counts.get((insight.CAUSE, code), 0)
    return out


def shared_gauges(cluster: Any) -> Gauges:
    """Gauges of state every bucket holds in full (brokers, topics, features): take them from one bucket. (The
    unregistered brokers are counted from the partitions: `with_unregistered_brokers`.)"""
    states = Counter(broker.state_name for broker in cluster.brokers.values())
    out: Gauges = {key("elrwatch_brokers", state=state): states[state] for state in REGISTRATION_STATES}
    out[key("elrwatch_elr_enabled")] = 1 if cluster.elr_enabled else 0
    out[key("elrwatch_topic_count")] = len(cluster.topics)
    return out


@dataclass
class PipelineCounts:
    """What the input pipeline saw, counted once per input event (before any routing)."""

    events_by_type: Counter[str] = field(default_factory=Counter)
    quarantined_by_reason: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    skipped_by_type: Counter[str] = field(default_factory=Counter)
    ignored_lines: int = 0
    applied: int = 0
    last_event_ms: int | None = None

    def merge(self, other: PipelineCounts) -> None:
        """Add another batch's counts."""
        self.events_by_type.update(other.events_by_type)
        self.quarantined_by_reason.update(other.quarantined_by_reason)
        self.skipped_by_type.update(other.skipped_by_type)
        self.duplicates += other.duplicates
        self.ignored_lines += other.ignored_lines
        self.applied += other.applied
        if other.last_event_ms is not None:
            self.last_event_ms = max(self.last_event_ms or 0, other.last_event_ms)

    def to_payload(self) -> dict[str, Any]:
        """The counts as a bucket payload's ``counts`` (plain JSON; `from_payload` reads it back)."""
        return {
            "eventsByType": dict(self.events_by_type),
            "quarantinedByReason": dict(self.quarantined_by_reason),
            "duplicates": self.duplicates,
            "skippedByType": dict(self.skipped_by_type),
            "ignoredLines": self.ignored_lines,
            "applied": self.applied,
            "lastEventMs": self.last_event_ms,
        }

    @classmethod
    def from_payload(cls, doc: Mapping[str, Any]) -> PipelineCounts:
        """The counts of a bucket payload's ``counts`` (`to_payload`)."""
        return cls(
            events_by_type=Counter(doc["eventsByType"]),
            quarantined_by_reason=Counter(doc["quarantinedByReason"]),
            duplicates=doc["duplicates"],
            skipped_by_type=Counter(doc["skippedByType"]),
            ignored_lines=doc["ignoredLines"],
            applied=doc["applied"],
            last_event_ms=doc.get("lastEventMs"),
        )


def pipeline_gauges(counts: PipelineCounts) -> Gauges:
    """Pipeline health gauges from the counts."""
    out: Gauges = {}
    for type_name, count in sorted(counts.events_by_type.items()):
        out[key("elrwatch_events_total", type=type_name)] = count
    for reason in QUARANTINE_REASONS:
        out[key("elrwatch_quarantined_records_total", reason=reason)] = counts.quarantined_by_reason[reason]
    out[key("elrwatch_duplicate_records_total")] = counts.duplicates
    out[key("elrwatch_skipped_records_total")] = sum(counts.skipped_by_type.values())
    if counts.last_event_ms is not None:
        out[key("elrwatch_last_event_timestamp_seconds")] = counts.last_event_ms / 1000.0
    return out


def sum_gauges(parts: Iterable[Mapping[GaugeKey, float]]) -> Gauges:
    """Sum per-bucket `partition_gauges` into the cluster's values."""
    total: Counter[GaugeKey] = Counter()
    for part in parts:
        total.update(part)
    return dict(total)


def with_unregistered_brokers(cluster_gauges: Gauges) -> Gauges:
    """``cluster_gauges`` (the partition gauges summed over buckets, and the shared ones) with
    ``elrwatch_brokers{state="unregistered"}``: the brokers with partitions in ``elrwatch_unregistered_broker_
    partitions`` (a broker named in several buckets counts once)."""
    named = sum(1 for (name, _), value in cluster_gauges.items() if name == UNREGISTERED_BROKER_PARTITIONS and value)
    return {**cluster_gauges, key("elrwatch_brokers", state="unregistered"): named}


def all_gauges(cluster: Any, counts: PipelineCounts | None = None) -> dict[str, float]:
    """Every gauge of a single (unbucketed) cluster state by sample name, sorted (a report's ``gauges``)."""
    out = with_unregistered_brokers({**partition_gauges(cluster), **shared_gauges(cluster)})
    if counts is not None:
        out.update(pipeline_gauges(counts))
    return as_samples(out)
