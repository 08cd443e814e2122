"""Gauge values of monitor-spec §4 (names in DESIGN.md §6), computed from the core's state.

Values are keyed by their Prometheus sample name with labels, e.g.
``elrwatch_electable_leaders_partitions{live_electable="0"}``, so a report document and a scrape of the
metrics endpoint compare directly. Cardinality is bounded: no per-partition labels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from elrwatch.state.audit import VIOLATION_KINDS
from elrwatch.state.records import QUARANTINE_REASONS
from elrwatch.state.status import (
    F_AT_MIN_ISR,
    F_LEADERLESS,
    F_MANUAL,
    F_RECOVERING,
    F_UNCLEAN_RECOVERY,
    F_UNDER_MIN_ISR,
    STATUSES,
)

ELECTABLE_LABELS = ("0", "1", "2", "3+")
BROKER_STATES = ("active", "fenced", "controlled_shutdown")

#: name → (type, help). Types: gauge or counter. The exporter and the docs use this table.
METRICS: dict[str, tuple[str, str]] = {
    "elrwatch_global_under_min_isr_partitions": (
        "gauge",
        "Partitions with |ISR| < effective min ISR (HWM frozen).",
    ),
    "elrwatch_at_min_isr_partitions": (
        "gauge",
        "Partitions with |ISR| == effective min ISR (one failure from under).",
    ),
    "elrwatch_offline_partitions": ("gauge", "Partitions without a leader (Kafka's OfflinePartitionsCount)."),
    "elrwatch_electable_leaders_partitions": (
        "gauge",
        "Partitions by number of live electable replicas (ISR ∪ ELR).",
    ),
    "elrwatch_unclean_recovery_partitions": (
        "gauge",
        "Leaderless partitions whose only way back may lose data, plus partitions RECOVERING.",
    ),
    "elrwatch_manual_leader_election_required_partitions": (
        "gauge",
        "Leaderless partitions Kafka will never elect a leader for by itself.",
    ),
    "elrwatch_recovering_partitions": ("gauge", "Partitions with leaderRecoveryState RECOVERING."),
    "elrwatch_partitions": ("gauge", "Partitions by status class (monitor-spec §3)."),
    "elrwatch_partition_count": ("gauge", "Partitions known to elrwatch."),
    "elrwatch_topic_count": ("gauge", "Topics known to elrwatch."),
    "elrwatch_invariant_violations": ("gauge", "Partitions currently breaking an invariant, by kind."),
    "elrwatch_unclean_recovery_finished_total": ("counter", "RECOVERING -> RECOVERED transitions observed."),
    "elrwatch_elr_elections_total": (
        "counter",
        "Leader elections from the ELR observed (Kafka's ElectionFromEligibleLeaderReplicasPerSec).",
    ),
    "elrwatch_unclean_elections_total": (
        "counter",
        "Records setting leaderRecoveryState=RECOVERING (Kafka's UncleanLeaderElectionsPerSec).",
    ),
    "elrwatch_last_known_leader_elections_total": (
        "counter",
        "Last-known-leader elections observed (ISR and ELR empty).",
    ),
    "elrwatch_brokers": ("gauge", "Registered brokers by state."),
    "elrwatch_elr_enabled": ("gauge", "1 when eligible.leader.replicas.version >= 1."),
    "elrwatch_events_total": ("counter", "Input events read, by record type."),
    "elrwatch_quarantined_records_total": ("counter", "Input events quarantined, by reason."),
    "elrwatch_duplicate_records_total": ("counter", "Input events skipped as already applied."),
    "elrwatch_skipped_records_total": ("counter", "Well-formed records of types elrwatch does not use."),
    "elrwatch_last_event_timestamp_seconds": (
        "gauge",
        "Event time of the newest record applied (Unix seconds).",
    ),
}


def sample(name: str, **labels: str) -> str:
    """Prometheus sample key: ``name{a="x",b="y"}`` (labels sorted), or ``name``."""
    if not labels:
        return name
    inner = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def partition_gauges(cluster) -> dict[str, float]:
    """Gauges over the cluster's owned partitions; summing these over buckets gives the cluster's values."""
    flags = cluster.flag_counts
    out: dict[str, float] = {
        "elrwatch_global_under_min_isr_partitions": flags[F_UNDER_MIN_ISR],
        "elrwatch_at_min_isr_partitions": flags[F_AT_MIN_ISR],
        "elrwatch_offline_partitions": flags[F_LEADERLESS],
        "elrwatch_unclean_recovery_partitions": flags[F_UNCLEAN_RECOVERY],
        "elrwatch_manual_leader_election_required_partitions": flags[F_MANUAL],
        "elrwatch_recovering_partitions": flags[F_RECOVERING],
        "elrwatch_partition_count": cluster.partition_count,
    }
    for label, count in zip(ELECTABLE_LABELS, cluster.electable_counts, strict=True):
        out[sample("elrwatch_electable_leaders_partitions", live_electable=label)] = count
    for status in STATUSES:
        out[sample("elrwatch_partitions", status=status)] = cluster.status_counts[status]
    for kind in VIOLATION_KINDS:
        out[sample("elrwatch_invariant_violations", kind=kind)] = cluster.violation_counts[kind]
    counters = cluster.counters
    out["elrwatch_unclean_recovery_finished_total"] = counters["unclean_recovery_finished"]
    out["elrwatch_elr_elections_total"] = counters["elr_elections"]
    out["elrwatch_unclean_elections_total"] = counters["unclean_elections"]
    out["elrwatch_last_known_leader_elections_total"] = counters["last_known_leader_elections"]
    return out


def shared_gauges(cluster) -> dict[str, float]:
    """Gauges of state every bucket holds in full (brokers, topics, features): take them from one bucket."""
    states = Counter(broker.state_name for broker in cluster.brokers.values())
    out: dict[str, float] = {
        sample("elrwatch_brokers", state=state): states[state] for state in BROKER_STATES
    }
    out["elrwatch_elr_enabled"] = 1 if cluster.elr_enabled else 0
    out["elrwatch_topic_count"] = len(cluster.topics)
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


def pipeline_gauges(counts: PipelineCounts) -> dict[str, float]:
    """Pipeline health gauges from the counts."""
    out: dict[str, float] = {}
    for type_name, count in sorted(counts.events_by_type.items()):
        out[sample("elrwatch_events_total", type=type_name)] = count
    for reason in QUARANTINE_REASONS:
        out[sample("elrwatch_quarantined_records_total", reason=reason)] = counts.quarantined_by_reason[
            reason
        ]
    out["elrwatch_duplicate_records_total"] = counts.duplicates
    out["elrwatch_skipped_records_total"] = sum(counts.skipped_by_type.values())
    if counts.last_event_ms is not None:
        out["elrwatch_last_event_timestamp_seconds"] = counts.last_event_ms / 1000.0
    return out


def sum_gauges(parts: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Sum per-bucket `partition_gauges` into the cluster's values."""
    total: Counter[str] = Counter()
    for part in parts:
        total.update(part)
    return dict(total)


def all_gauges(cluster, counts: PipelineCounts | None = None) -> dict[str, float]:
    """Every gauge of a single (unbucketed) cluster state, sorted by key."""
    out = {**partition_gauges(cluster), **shared_gauges(cluster)}
    if counts is not None:
        out.update(pipeline_gauges(counts))
    return dict(sorted(out.items()))
