"""Generate helm/elrwatch/dashboards/elrwatch.json (the Grafana dashboard shipped in the chart).

The JSON is committed; re-run after editing this file:  python3 helm/tools/gen_dashboard.py
tests/test_dashboard.py validates the result (ids, datasource variable, every PromQL through promtool) and checks
that every gauge of docs/DESIGN.md §6 has a panel.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "elrwatch" / "dashboards" / "elrwatch.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'namespace=~"$namespace"'

panels: list[dict] = []
_next_id = [1]
_y = [0]


def _id() -> int:
    i = _next_id[0]
    _next_id[0] += 1
    return i


def row(title: str) -> None:
    panels.append({"id": _id(), "type": "row", "title": title, "collapsed": False,
                   "gridPos": {"h": 1, "w": 24, "x": 0, "y": _y[0]}, "panels": []})
    _y[0] += 1


def _targets(queries: list[tuple[str, str]]) -> list[dict]:
    return [{"datasource": DS, "refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend,
             "range": True, "instant": False} for i, (expr, legend) in enumerate(queries)]


def stat(title: str, queries: list[tuple[str, str]], x: int, w: int, h: int, description: str,
         thresholds: list[tuple[float | None, str]], unit: str = "none") -> None:
    panels.append({
        "id": _id(), "type": "stat", "title": title, "description": description, "datasource": DS,
        "gridPos": {"h": h, "w": w, "x": x, "y": _y[0]},
        "targets": _targets(queries),
        "fieldConfig": {"defaults": {"unit": unit, "mappings": [], "color": {"mode": "thresholds"},
                                     "thresholds": {"mode": "absolute", "steps": [
                                         {"color": c, "value": v} for v, c in thresholds]}},
                        "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "colorMode": "background", "graphMode": "area", "justifyMode": "auto",
                    "orientation": "auto", "textMode": "auto"},
    })


def timeseries(title: str, queries: list[tuple[str, str]], x: int, w: int, h: int, description: str,
               unit: str = "none", stack: bool = False) -> None:
    panels.append({
        "id": _id(), "type": "timeseries", "title": title, "description": description, "datasource": DS,
        "gridPos": {"h": h, "w": w, "x": x, "y": _y[0]},
        "targets": _targets(queries),
        "fieldConfig": {"defaults": {"unit": unit, "color": {"mode": "palette-classic"},
                                     "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 20 if stack else 0,
                                                "stacking": {"mode": "normal" if stack else "none",
                                                             "group": "A"},
                                                "showPoints": "never", "spanNulls": False}},
                        "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "right", "showLegend": True,
                               "calcs": ["lastNotNull", "max"]},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
    })


def advance(h: int) -> None:
    _y[0] += h


OK_RED = [(None, "green"), (1, "red")]
OK_ORANGE = [(None, "green"), (1, "orange")]

# ---------------------------------------------------------------------------------------------- safety
row("Partition safety (ISR / ELR)")
stat("Under min ISR", [(f"sum(elrwatch_global_under_min_isr_partitions{{{SEL}}})", "")], 0, 4, 4,
     "Partitions with |ISR| < effective min ISR: high watermark frozen, acks=all writes fail.", OK_RED)
stat("At min ISR", [(f"sum(elrwatch_at_min_isr_partitions{{{SEL}}})", "")], 4, 4, 4,
     "Partitions with |ISR| == effective min ISR: one more failure puts them under.", OK_ORANGE)
stat("Offline (leaderless)", [(f"sum(elrwatch_offline_partitions{{{SEL}}})", "")], 8, 4, 4,
     "Partitions with leader -1 (Kafka's OfflinePartitionsCount).", OK_RED)
stat("No live electable leader", [(f'sum(elrwatch_electable_leaders_partitions{{{SEL},live_electable="0"}})', "")],
     12, 4, 4, "Partitions with no active broker in ISR ∪ ELR.", OK_RED)
stat("Manual election required", [(f"sum(elrwatch_manual_leader_election_required_partitions{{{SEL}}})", "")],
     16, 4, 4, "Leaderless partitions Kafka will never elect a leader for by itself.", OK_RED)
stat("Unclean recovery", [(f"sum(elrwatch_unclean_recovery_partitions{{{SEL}}})", "")], 20, 4, 4,
     "Leaderless partitions whose only way back may lose data, plus partitions RECOVERING.", OK_RED)
advance(4)
stat("Recovering", [(f"sum(elrwatch_recovering_partitions{{{SEL}}})", "")], 0, 4, 4,
     "Partitions with leaderRecoveryState RECOVERING (after an unclean / last-known-leader election).", OK_ORANGE)
stat("Invariant violations", [(f"sum(elrwatch_invariant_violations{{{SEL}}})", "")], 4, 4, 4,
     "Partitions currently breaking an ISR/ELR invariant (all kinds).", OK_ORANGE)
stat("Partitions", [(f"sum(elrwatch_partition_count{{{SEL}}})", "")], 8, 4, 4, "Partitions known to elrwatch.",
     [(None, "blue")])
stat("Topics", [(f"sum(elrwatch_topic_count{{{SEL}}})", "")], 12, 4, 4, "Topics known to elrwatch.",
     [(None, "blue")])
stat("ELR enabled", [(f"max(elrwatch_elr_enabled{{{SEL}}})", "")], 16, 4, 4,
     "1 when eligible.leader.replicas.version >= 1 (KIP-966 ELR active).", [(None, "orange"), (1, "green")])
stat("Monitor up", [(f"min(elrwatch_up{{{SEL}}})", "")], 20, 4, 4,
     "elrwatch_up of the streaming driver: 1 while the streaming query runs.", [(None, "red"), (1, "green")])
advance(4)
timeseries("Partitions by status", [(f"sum by (status) (elrwatch_partitions{{{SEL}}})", "{{status}}")], 0, 12, 8,
           "Partitions by derived status (most severe first: MANUAL_ELECTION_REQUIRED … HEALTHY).", stack=True)
timeseries("Partitions by live electable replicas",
           [(f"sum by (live_electable) (elrwatch_electable_leaders_partitions{{{SEL}}})", "{{live_electable}} live")],
           12, 12, 8, "KIP-966's electable-leader distribution: partitions by |live ISR ∪ ELR| (0, 1, 2, 3+).",
           stack=True)
advance(8)
timeseries("Safety gauges", [
    (f"sum(elrwatch_global_under_min_isr_partitions{{{SEL}}})", "under min ISR"),
    (f"sum(elrwatch_at_min_isr_partitions{{{SEL}}})", "at min ISR"),
    (f"sum(elrwatch_offline_partitions{{{SEL}}})", "offline"),
    (f"sum(elrwatch_unclean_recovery_partitions{{{SEL}}})", "unclean recovery"),
    (f"sum(elrwatch_manual_leader_election_required_partitions{{{SEL}}})", "manual election required"),
    (f"sum(elrwatch_recovering_partitions{{{SEL}}})", "recovering"),
], 0, 12, 8, "The partition safety gauges over time.")
timeseries("Invariant violations by kind",
           [(f"sum by (kind) (elrwatch_invariant_violations{{{SEL}}})", "{{kind}}")], 12, 12, 8,
           "Partitions currently violating each invariant (audit, never enforced).")
advance(8)
timeseries("Leader elections observed", [
    (f"sum(increase(elrwatch_elr_elections_total{{{SEL}}}[$__rate_interval]))", "from ELR"),
    (f"sum(increase(elrwatch_unclean_elections_total{{{SEL}}}[$__rate_interval]))", "unclean (RECOVERING)"),
    (f"sum(increase(elrwatch_last_known_leader_elections_total{{{SEL}}}[$__rate_interval]))", "last known leader"),
    (f"sum(increase(elrwatch_unclean_recovery_finished_total{{{SEL}}}[$__rate_interval]))", "recovery finished"),
], 0, 24, 7, "Elections seen in the metadata log per interval (ELR, unclean, last-known-leader) and "
   "RECOVERING → RECOVERED transitions.")
advance(7)

# ---------------------------------------------------------------------------------------------- brokers
row("Brokers")
for i, (state, colors) in enumerate([("active", [(None, "red"), (1, "green")]),
                                     ("fenced", OK_RED), ("controlled_shutdown", OK_ORANGE)]):
    stat(f"Brokers {state.replace('_', ' ')}", [(f'max(elrwatch_brokers{{{SEL},state="{state}"}})', "")],
         i * 4, 4, 7, f"Registered brokers in state {state} (same in every bucket: max, not sum).", colors)
timeseries("Brokers by state", [(f"max by (state) (elrwatch_brokers{{{SEL}}})", "{{state}}")], 12, 12, 7,
           "Registered brokers: active, fenced, in controlled shutdown.", stack=True)
advance(7)

# ---------------------------------------------------------------------------------------------- pipeline
row("Pipeline health")
stat("Source lag", [(f"sum(elrwatch_source_lag_records{{{SEL}}})", "")], 0, 6, 4,
     "Records in the event topic not yet processed.", [(None, "green"), (1000, "orange"), (10000, "red")])
stat("Age of last event", [(f"time() - max(elrwatch_last_event_timestamp_seconds{{{SEL}}})", "")], 6, 6, 4,
     "Now minus the event time of the newest applied record (large on a quiet cluster; alert uses lag).",
     [(None, "green"), (600, "orange")], unit="s")
stat("Since last batch", [(f"time() - max(elrwatch_last_batch_completed_timestamp_seconds{{{SEL}}})", "")],
     12, 6, 4, "Seconds since the streaming job completed a micro-batch (stale if lag > 0 too).",
     [(None, "green"), (300, "orange")], unit="s")
stat("Scrape targets up", [(f'sum by (elrwatch_component) (up{{{SEL},elrwatch_component=~"stream|api"}})',
                            "{{elrwatch_component}}")], 18, 6, 4,
     "Prometheus scrape health of the streaming driver and the API.", [(None, "red"), (1, "green")])
advance(4)
timeseries("Source lag (records)", [(f"sum(elrwatch_source_lag_records{{{SEL}}})", "lag")], 0, 8, 7,
           "Unprocessed records in the metadata event topic.")
timeseries("Batch duration", [(f"max(elrwatch_batch_duration_seconds{{{SEL}}})", "last batch")], 8, 8, 7,
           "Duration of the last micro-batch.", unit="s")
timeseries("Batch input rows and batch rate", [
    (f"max(elrwatch_batch_input_rows{{{SEL}}})", "rows in last batch"),
    (f"sum(rate(elrwatch_batches_total{{{SEL}}}[$__rate_interval]))", "batches/s"),
], 16, 8, 7, "Rows in the last micro-batch and completed micro-batches per second.")
advance(7)
timeseries("Events by type", [(f"sum by (type) (rate(elrwatch_events_total{{{SEL}}}[$__rate_interval]))",
                                "{{type}}")], 0, 8, 8, "Input events read per second, by record type.",
           unit="ops", stack=True)
timeseries("Quarantined records by reason",
           [(f"sum by (reason) (increase(elrwatch_quarantined_records_total{{{SEL}}}[$__rate_interval]))",
             "{{reason}}")], 8, 8, 8, "Records rejected per interval, by reason (never applied).")
timeseries("Duplicate and skipped records", [
    (f"sum(rate(elrwatch_duplicate_records_total{{{SEL}}}[$__rate_interval]))", "duplicates/s"),
    (f"sum(rate(elrwatch_skipped_records_total{{{SEL}}}[$__rate_interval]))", "skipped types/s"),
], 16, 8, 8, "Records skipped as already applied (exactly-once) and records of types elrwatch does not use.",
   unit="ops")
advance(8)
timeseries("Event time and last batch", [
    (f"time() - max(elrwatch_last_event_timestamp_seconds{{{SEL}}})", "age of last event"),
    (f"time() - max(elrwatch_last_batch_completed_timestamp_seconds{{{SEL}}})", "since last batch"),
], 0, 12, 7, "Freshness of the monitor's data.", unit="s")
timeseries("Streaming job up", [(f"min(elrwatch_up{{{SEL}}})", "elrwatch_up"),
                                (f'min(up{{{SEL},elrwatch_component="stream"}})', "scrape up")], 12, 12, 7,
           "1 while the streaming query runs and its metrics are scraped.")
advance(7)

# ---------------------------------------------------------------------------------------------- API
row("API")
timeseries("API requests", [(f"sum by (route, status) (rate(elrwatch_api_requests_total{{{SEL}}}[$__rate_interval]))",
                             "{{route}} {{status}}")], 0, 12, 8, "Requests per second by route and status.",
           unit="reqps")
timeseries("API latency p99", [(
    f"histogram_quantile(0.99, sum by (le, route) "
    f"(rate(elrwatch_api_request_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))", "{{route}}")],
    12, 12, 8, "99th percentile request latency by route.", unit="s")
advance(8)

dashboard = {
    "uid": "elrwatch-overview",
    "title": "elrwatch: Kafka ISR / ELR safety",
    "description": "Partition safety (KIP-966 ISR / ELR), brokers, and elrwatch's own pipeline health.",
    "tags": ["kafka", "elrwatch", "kip-966"],
    "timezone": "browser",
    "editable": True,
    "graphTooltip": 1,
    "schemaVersion": 39,
    "version": 1,
    "refresh": "30s",
    "time": {"from": "now-6h", "to": "now"},
    "timepicker": {},
    "fiscalYearStartMonth": 0,
    "liveNow": False,
    "weekStart": "",
    "links": [],
    "annotations": {"list": [{
        "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"}]},
    "templating": {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0, "includeAll": False, "multi": False, "options": [], "refresh": 1,
         "regex": "", "skipUrlSync": False},
        {"name": "namespace", "label": "Namespace", "type": "query", "datasource": DS,
         "definition": "label_values(elrwatch_partition_count, namespace)",
         "query": {"query": "label_values(elrwatch_partition_count, namespace)", "refId": "namespace"},
         "current": {}, "hide": 0, "includeAll": True, "allValue": ".*", "multi": True, "options": [],
         "refresh": 2, "regex": "", "skipUrlSync": False, "sort": 1},
    ]},
    "panels": panels,
}

if __name__ == "__main__":
    OUT.write_text(json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(panels)} panels)")
