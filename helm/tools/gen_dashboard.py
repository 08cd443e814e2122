"""Generate helm/elrwatch/dashboards/elrwatch.json (the Grafana dashboard shipped in the chart).

Built with Grafana's own Python SDK, grafana-foundation-sdk (a dev extra, pinned in pyproject.toml): typed builders
for the dashboard, its variables and each panel type, so that option names and enum values are Grafana's, not
hand-typed dicts; the SDK lays the panels out left to right (each panel's width and height given here).
The JSON is committed; re-run after editing this file:  python3 helm/tools/gen_dashboard.py
tests/test_dashboard.py validates the result (ids, datasource variable, every PromQL through promtool) and checks
that every gauge of docs/DESIGN.md §6 has a panel.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import bargauge, common, prometheus
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import stat as stat_panel
from grafana_foundation_sdk.builders import timeseries as ts_panel
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

OUT = Path(__file__).resolve().parents[1] / "elrwatch" / "dashboards" / "elrwatch.json"
DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'namespace=~"$namespace"'

board = (
    dash.Dashboard("elrwatch: Kafka ISR / ELR safety")
    .uid("elrwatch-overview")
    .description("Partition safety (KIP-966 ISR / ELR), brokers, topics, and elrwatch's own pipeline health.")
    .tags(["kafka", "elrwatch", "kip-966"])
    .timezone("browser")
    .editable()
    .tooltip(dm.DashboardCursorSync.CROSSHAIR)
    .version(1)
    .refresh("30s")
    .time("now-6h", "now")
    .annotation(dash.AnnotationQuery().built_in(1).name("Annotations & Alerts").type("dashboard").enable(True)
                .hide(True).icon_color("rgba(0, 211, 255, 1)")
                .datasource(dm.DataSourceRef(type_val="grafana", uid="-- Grafana --")))
    .with_variable(dash.DatasourceVariable("datasource").label("Data source").type("prometheus"))
    .with_variable(
        dash.QueryVariable("namespace").label("Namespace").datasource(DS)
        .query("label_values(elrwatch_partition_count, namespace)")
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).include_all(True).all_value(".*").multi(True)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
    )
)
_next_id = [1]


def _id() -> int:
    i = _next_id[0]
    _next_id[0] += 1
    return i


def row(title: str) -> None:
    board.with_row(dash.Row(title).id(_id()))


def _targets(panel: Any, queries: list[tuple[str, str]], instant: bool = False) -> Any:
    """Add the queries to a panel builder: range queries, or instant ones (bar gauges of the current values)."""
    for i, (expr, legend) in enumerate(queries):
        query = prometheus.Dataquery().datasource(DS).ref_id(chr(ord("A") + i)).expr(expr).legend_format(legend)
        panel.with_target(query.instant() if instant else query.range())
    return panel


def _thresholds(steps: list[tuple[float | None, str]]) -> dash.ThresholdsConfig:
    return dash.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(
        [dm.Threshold(value=v, color=c) for v, c in steps])


def stat(title: str, queries: list[tuple[str, str]], w: int, h: int, description: str,
         thresholds: list[tuple[float | None, str]], unit: str = "none") -> None:
    panel = (stat_panel.Panel().id(_id()).title(title).description(description).datasource(DS).span(w).height(h)
             .unit(unit).mappings([]).color_scheme(dash.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
             .thresholds(_thresholds(thresholds))
             .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
             .color_mode(cm.BigValueColorMode.BACKGROUND).graph_mode(cm.BigValueGraphMode.AREA)
             .justify_mode(cm.BigValueJustifyMode.AUTO).orientation(cm.VizOrientation.AUTO)
             .text_mode(cm.BigValueTextMode.AUTO))
    board.with_panel(_targets(panel, queries))


def total(title: str, gauge: str, description: str, thresholds: list[tuple[float | None, str]],
          agg: str = "sum", labels: str = "") -> None:
    """A 4x4 stat of one gauge over the selected namespaces: the ``agg`` (sum, or max / min for a value each bucket
    repeats) of its samples, of those matching ``labels`` (``name="value"``) if given."""
    stat(title, [(f"{agg}({gauge}{{{','.join(filter(None, (SEL, labels)))}}})", "")], 4, 4, description, thresholds)


def timeseries(title: str, queries: list[tuple[str, str]], w: int, h: int, description: str,
               unit: str = "none", stack: bool = False) -> None:
    panel = (ts_panel.Panel().id(_id()).title(title).description(description).datasource(DS).span(w).height(h)
             .unit(unit).color_scheme(dash.FieldColor().mode(dm.FieldColorModeId.PALETTE_CLASSIC))
             .draw_style(cm.GraphDrawStyle.LINE).line_width(1).fill_opacity(20 if stack else 0)
             .stacking(common.StackingConfig().mode(cm.StackingMode.NORMAL if stack else cm.StackingMode.NONE)
                       .group("A"))
             .show_points(cm.VisibilityMode.NEVER).span_nulls(False)
             .legend(common.VizLegendOptions().display_mode(cm.LegendDisplayMode.TABLE)
                     .placement(cm.LegendPlacement.RIGHT).show_legend(True).calcs(["lastNotNull", "max"]))
             .tooltip(common.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING)))
    board.with_panel(_targets(panel, queries))


def bars(title: str, queries: list[tuple[str, str]], w: int, h: int, description: str,
         thresholds: list[tuple[float | None, str]]) -> None:
    """Horizontal bars, one per series of an instant query (e.g. per broker, the top topics)."""
    panel = (bargauge.Panel().id(_id()).title(title).description(description).datasource(DS).span(w).height(h)
             .unit("none").min(0).color_scheme(dash.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
             .thresholds(_thresholds(thresholds))
             .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
             .display_mode(cm.BarGaugeDisplayMode.BASIC).orientation(cm.VizOrientation.HORIZONTAL)
             .value_mode(cm.BarGaugeValueMode.COLOR).show_unfilled(True))
    board.with_panel(_targets(panel, queries, instant=True))


def per_broker(title: str, gauge: str, description: str, thresholds: list[tuple[float | None, str]]) -> None:
    """8x8 bars of a per-broker gauge, one per broker, the largest first."""
    bars(title, [(f"sort_desc(max by (broker) ({gauge}{{{SEL}}}))", "broker {{broker}}")], 8, 8, description,
         thresholds)


def top_topics(title: str, gauge: str, description: str, thresholds: list[tuple[float | None, str]]) -> None:
    """8x8 bars of a per-topic gauge: its 10 largest topics."""
    bars(title, [(f"topk(10, max by (topic) ({gauge}{{{SEL}}}))", "{{topic}}")], 8, 8, description, thresholds)


OK_RED = [(None, "green"), (1, "red")]
OK_ORANGE = [(None, "green"), (1, "orange")]

# ---------------------------------------------------------------------------------------------- safety
row("Partition safety (ISR / ELR)")
total("Under min ISR", "elrwatch_global_under_min_isr_partitions",
      "Partitions with |ISR| < effective min ISR: high watermark frozen, acks=all writes fail.", OK_RED)
total("At min ISR", "elrwatch_at_min_isr_partitions",
      "Partitions with |ISR| == effective min ISR: one more failure puts them under.", OK_ORANGE)
total("Offline (leaderless)", "elrwatch_offline_partitions",
      "Partitions with leader -1 (Kafka's OfflinePartitionsCount).", OK_RED)
total("No live electable leader", "elrwatch_electable_leaders_partitions",
      "Partitions with no active broker in ISR ∪ ELR.", OK_RED, labels='live_electable="0"')
total("Manual election required", "elrwatch_manual_leader_election_required_partitions",
      "Leaderless partitions Kafka will never elect a leader for by itself.", OK_RED)
total("Unclean recovery", "elrwatch_unclean_recovery_partitions",
      "Leaderless partitions whose only way back may lose data, plus partitions RECOVERING.", OK_RED)
total("Recovering", "elrwatch_recovering_partitions",
      "Partitions with leaderRecoveryState RECOVERING (after an unclean / last-known-leader election).", OK_ORANGE)
total("Invariant violations", "elrwatch_invariant_violations",
      "Partitions currently breaking an ISR/ELR invariant (all kinds).", OK_ORANGE)
total("Partitions", "elrwatch_partition_count", "Partitions known to elrwatch.", [(None, "blue")])
total("Topics", "elrwatch_topic_count", "Topics known to elrwatch.", [(None, "blue")])
total("ELR enabled", "elrwatch_elr_enabled", "1 when eligible.leader.replicas.version >= 1 (KIP-966 ELR active).",
      [(None, "orange"), (1, "green")], agg="max")
total("Monitor up", "elrwatch_up", "elrwatch_up of the streaming driver: 1 while the streaming query runs.",
      [(None, "red"), (1, "green")], agg="min")
timeseries("Partitions by status", [(f"sum by (status) (elrwatch_partitions{{{SEL}}})", "{{status}}")], 12, 8,
           "Partitions by derived status (most severe first: MANUAL_ELECTION_REQUIRED … HEALTHY).", stack=True)
timeseries("Partitions by live electable replicas",
           [(f"sum by (live_electable) (elrwatch_electable_leaders_partitions{{{SEL}}})", "{{live_electable}} live")],
           12, 8, "KIP-966's electable-leader distribution: partitions by |live ISR ∪ ELR| (0, 1, 2, 3+).",
           stack=True)
timeseries("Safety gauges", [
    (f"sum(elrwatch_last_replica_standing_partitions{{{SEL}}})", "last replica standing (ELR off)"),
    (f"sum(elrwatch_global_under_min_isr_partitions{{{SEL}}})", "under min ISR"),
    (f"sum(elrwatch_at_min_isr_partitions{{{SEL}}})", "at min ISR"),
    (f"sum(elrwatch_offline_partitions{{{SEL}}})", "offline"),
    (f"sum(elrwatch_unclean_recovery_partitions{{{SEL}}})", "unclean recovery"),
    (f"sum(elrwatch_manual_leader_election_required_partitions{{{SEL}}})", "manual election required"),
    (f"sum(elrwatch_unclean_restart_pending_partitions{{{SEL}}})", "unclean restart pending"),
    (f"sum(elrwatch_recovering_partitions{{{SEL}}})", "recovering"),
], 12, 8, "The partition safety gauges over time (unclean restart pending: leaderless partitions whose every "
   "ISR/ELR member is a stopped broker predicted to restart uncleanly, no .kafka_cleanshutdown).")
timeseries("Invariant violations by kind",
           [(f"sum by (kind) (elrwatch_invariant_violations{{{SEL}}})", "{{kind}}")], 12, 8,
           "Partitions currently violating each invariant (audit, never enforced).")
timeseries("Leader elections observed", [
    (f"sum(increase(elrwatch_elr_elections_total{{{SEL}}}[$__rate_interval]))", "from ELR"),
    (f"sum(increase(elrwatch_unclean_elections_total{{{SEL}}}[$__rate_interval]))", "unclean (RECOVERING)"),
    (f"sum(increase(elrwatch_last_known_leader_elections_total{{{SEL}}}[$__rate_interval]))", "last known leader"),
    (f"sum(increase(elrwatch_unclean_recovery_finished_total{{{SEL}}}[$__rate_interval]))", "recovery finished"),
], 24, 7, "Elections seen in the metadata log per interval (ELR, unclean, last-known-leader) and "
   "RECOVERING → RECOVERED transitions.")

# ---------------------------------------------------------------------------------------------- brokers
row("Brokers")
for state, colors, description in (
    ("active", [(None, "red"), (1, "green")], "Registered brokers that are active."),
    ("fenced", OK_RED, "Registered brokers that are fenced."),
    ("controlled_shutdown", OK_ORANGE, "Registered brokers in controlled shutdown."),
    ("unregistered", OK_RED, "Brokers some partition names as a replica that have no registration (down on a "
                             "ZooKeeper-mode cluster, or never seen)."),
):
    stat(f"Brokers {state.replace('_', ' ')}", [(f'max(elrwatch_brokers{{{SEL},state="{state}"}})', "")],
         3, 7, description, colors)
timeseries("Brokers by state", [(f"max by (state) (elrwatch_brokers{{{SEL}}})", "{{state}}")], 12, 7,
           "Brokers: active, fenced, in controlled shutdown, and unregistered ones that partitions still name.",
           stack=True)

# ---------------------------------------------------------------------------------------------- who and what
row("Brokers and topics: which broker is missing, is a restart safe, which topics")
per_broker("Brokers by missing partitions", "elrwatch_broker_isr_missing_partitions",
           "Per broker: partitions that have it among their replicas but not in their ISR (the replica that is "
           "missing, which Kafka's leader-side under-replicated counts do not name).", OK_ORANGE)
per_broker("Brokers by restart-blocking partitions", "elrwatch_broker_restart_blocking_partitions",
           "Per broker: partitions whose ISR holds it with |ISR| - 1 < effective min ISR. Stopping the broker now "
           "leaves them under min ISR (acks=all writes fail): do not restart a broker with a bar > 0.", OK_RED)
per_broker("Brokers by restart-offline partitions", "elrwatch_broker_restart_offline_partitions",
           "Per broker: partitions with a live electable leader now and none if it stopped (it is the only active "
           "member of ISR ∪ ELR).", OK_RED)
top_topics("Top topics under min ISR", "elrwatch_topic_under_min_isr_partitions",
           "The 10 topics with the most partitions under min ISR (only non-zero topics are exported).", OK_RED)
top_topics("Top topics offline", "elrwatch_topic_offline_partitions",
           "The 10 topics with the most partitions without a leader.", OK_RED)
top_topics("Top topics at min ISR", "elrwatch_topic_at_min_isr_partitions",
           "The 10 topics with the most partitions at min ISR (one more failure puts them under).", OK_ORANGE)
timeseries("Under min ISR by cause",
           [(f"max by (cause) (elrwatch_under_min_isr_partitions_by_cause{{{SEL}}})", "{{cause}}")], 12, 8,
           "Partitions under min ISR, each under its dominant cause (unregistered > fenced > lagging > "
           "controlled_shutdown). controlled_shutdown alone is a planned restart: its page is held up to a bound.",
           stack=True)
timeseries("Missing and restart-blocking partitions by broker", [
    (f"max by (broker) (elrwatch_broker_isr_missing_partitions{{{SEL}}})", "missing: broker {{broker}}"),
    (f"max by (broker) (elrwatch_broker_restart_blocking_partitions{{{SEL}}})", "blocking: broker {{broker}}"),
], 12, 8, "Per broker over time: partitions it is missing from, and partitions its restart would block.")
per_broker("Unregistered brokers by partitions", "elrwatch_unregistered_broker_partitions",
           "Per broker without a registration: partitions whose replicas name it (a broker that is down on a "
           "ZooKeeper-mode cluster, or that the source never saw).", OK_RED)

# ---------------------------------------------------------------------------------------------- pipeline
row("Pipeline health")
stat("Source lag", [(f"sum(elrwatch_source_lag_records{{{SEL}}})", "")], 6, 4,
     "Records in the event topic not yet processed.", [(None, "green"), (1000, "orange"), (10000, "red")])
stat("Age of last event", [(f"time() - max(elrwatch_last_event_timestamp_seconds{{{SEL}}})", "")], 6, 4,
     "Now minus the event time of the newest applied record (large on a quiet cluster; alert uses lag).",
     [(None, "green"), (600, "orange")], unit="s")
stat("Since last batch", [(f"time() - max(elrwatch_last_batch_completed_timestamp_seconds{{{SEL}}})", "")],
     6, 4, "Seconds since the streaming job completed a micro-batch (stale if lag > 0 too).",
     [(None, "green"), (300, "orange")], unit="s")
stat("Scrape targets up", [(f'sum by (elrwatch_component) (up{{{SEL},elrwatch_component=~"stream|api"}})',
                            "{{elrwatch_component}}")], 6, 4,
     "Prometheus scrape health of the streaming driver and the API.", [(None, "red"), (1, "green")])
timeseries("Source lag (records)", [(f"sum(elrwatch_source_lag_records{{{SEL}}})", "lag")], 8, 7,
           "Unprocessed records in the metadata event topic.")
timeseries("Batch duration and store behind", [
    (f"max(elrwatch_batch_duration_seconds{{{SEL}}})", "last batch (s)"),
    (f"max(elrwatch_store_behind_batches{{{SEL}}})", "batches not yet in the store"),
], 8, 7, "Duration of the last micro-batch, and the batches whose gauges are served but that the status store "
   "(REST) does not have yet: it is written behind the batches.")
timeseries("Batch input rows and batch rate", [
    (f"max(elrwatch_batch_input_rows{{{SEL}}})", "rows in last batch"),
    (f"sum(rate(elrwatch_batches_total{{{SEL}}}[$__rate_interval]))", "batches/s"),
], 8, 7, "Rows in the last micro-batch and completed micro-batches per second.")
timeseries("Events by type", [(f"sum by (type) (rate(elrwatch_events_total{{{SEL}}}[$__rate_interval]))",
                                "{{type}}")], 8, 8, "Input events read per second, by record type.",
           unit="ops", stack=True)
timeseries("Quarantined records by reason",
           [(f"sum by (reason) (increase(elrwatch_quarantined_records_total{{{SEL}}}[$__rate_interval]))",
             "{{reason}}")], 8, 8, "Records rejected per interval, by reason (never applied).")
timeseries("Duplicate and skipped records", [
    (f"sum(rate(elrwatch_duplicate_records_total{{{SEL}}}[$__rate_interval]))", "duplicates/s"),
    (f"sum(rate(elrwatch_skipped_records_total{{{SEL}}}[$__rate_interval]))", "skipped types/s"),
], 8, 8, "Records skipped as already applied (exactly-once) and records of types elrwatch does not use.",
   unit="ops")
timeseries("Event time and last batch", [
    (f"time() - max(elrwatch_last_event_timestamp_seconds{{{SEL}}})", "age of last event"),
    (f"time() - max(elrwatch_last_batch_completed_timestamp_seconds{{{SEL}}})", "since last batch"),
], 12, 7, "Freshness of the monitor's data.", unit="s")
timeseries("Streaming job up", [(f"min(elrwatch_up{{{SEL}}})", "elrwatch_up"),
                                (f'min(up{{{SEL},elrwatch_component="stream"}})', "scrape up")], 12, 7,
           "1 while the streaming query runs and its metrics are scraped.")

# ---------------------------------------------------------------------------------------------- API
row("API")
timeseries("API requests", [(f"sum by (route, status) (rate(elrwatch_api_requests_total{{{SEL}}}[$__rate_interval]))",
                             "{{route}} {{status}}")], 12, 8, "Requests per second by route and status.",
           unit="reqps")
timeseries("API latency p99", [(
    f"histogram_quantile(0.99, sum by (le, route) "
    f"(rate(elrwatch_api_request_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))", "{{route}}")],
    12, 8, "99th percentile request latency by route.", unit="s")

dashboard = json.loads(json.dumps(board.build(), cls=JSONEncoder))

if __name__ == "__main__":
    OUT.write_text(json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(dashboard['panels'])} panels)")
