"""The streaming job's exporter serves only metrics of the table (``state.gauges.METRICS``): an unknown name is an
error naming it, and every gauge the core and the pipeline compute is in the table."""

from __future__ import annotations

import pytest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from elrwatch.state.eventgen import scenario
from elrwatch.state.gauges import METRICS, PipelineCounts, key, partition_gauges, pipeline_gauges
from elrwatch.state.gauges import shared_gauges as shared
from elrwatch.state.replay import replay_lines
from elrwatch.streaming.metrics import Health, JobCollector, UnknownMetricError, metric_of


def _collect(gauges: dict) -> list:
    health = Health(aggregator=None)
    health.gauges_ready(gauges)
    return list(JobCollector(health).collect())


def test_an_unknown_metric_is_an_error_naming_it() -> None:
    with pytest.raises(UnknownMetricError, match="elrwatch_no_such_gauge"):
        metric_of("elrwatch_no_such_gauge")
    with pytest.raises(UnknownMetricError, match="elrwatch_no_such_gauge"):
        _collect({key("elrwatch_no_such_gauge", topic="t"): 1.0})


def test_every_computed_gauge_is_served_with_its_table_type() -> None:
    cluster = replay_lines(scenario(topics=3, partitions=10, brokers=4, steps=20, churn=5), "scenario").cluster
    counts = PipelineCounts()
    gauges = {**partition_gauges(cluster), **shared(cluster), **pipeline_gauges(counts)}  # the insight ones within
    names = {name for name, _ in gauges}
    assert names and names <= set(METRICS), sorted(names - set(METRICS))
    families = {f.name: f for f in _collect(gauges)}
    for name in names:
        served = name.removesuffix("_total") if METRICS[name].kind == "counter" else name
        family = families[served]
        assert isinstance(family, CounterMetricFamily if METRICS[name].kind == "counter" else GaugeMetricFamily)
        assert family.documentation == METRICS[name].help


def test_batches_spark_ran_are_counted_apart_from_the_store_s() -> None:
    # the warm-ups (streaming/warm.py) watch the batches Spark ran: a store catching up behind them is not
    # Python work, and counting it as activity let Spark stop the idle state worker with the buckets cached in it
    health = Health(aggregator=None)
    health.gauges_ready({})
    health.gauges_ready({})
    assert (health.batches_run, health.batches) == (2, 0)
    health.batch_written(0, None, 1.0)
    assert (health.batches_run, health.batches) == (2, 1)
