"""Prometheus exporter of the streaming driver (DESIGN §6).

A custom collector serves, at scrape time, the latest aggregated gauges of the job (partition gauges summed
over buckets, broker gauges from bucket 0, pipeline counters; counters as ``CounterMetricFamily``) plus the
job's own health: ``elrwatch_batch_duration_seconds``, ``elrwatch_batch_input_rows``,
``elrwatch_source_lag_records`` (latest offsets − consumed, from Spark's progress), ``elrwatch_batches_total``,
``elrwatch_last_batch_completed_timestamp_seconds`` and ``elrwatch_up``. Its own registry (no process
collectors from other parts), served by ``prometheus_client.start_http_server``.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from elrwatch.state.gauges import HEALTH_METRICS, METRICS, Gauges, Metric, key, sample_name


def _family(metric: Metric, labels: list[str] | None = None, value: float | None = None) -> Any:
    """A metric family of ``metric``'s type, named and described by the metric table."""
    cls = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
    return cls(metric.name, metric.help, value=value, labels=labels)


class UnknownMetricError(LookupError):
    """A gauge whose name is not in ``elrwatch.state.gauges.METRICS``: it has no type or help to serve."""


def metric_of(name: str) -> Metric:
    """The table's entry of ``name``; an unknown name is an error naming it (the table is the one list)."""
    try:
        return METRICS[name]
    except KeyError:
        raise UnknownMetricError(f"metric {name!r} is not in elrwatch.state.gauges.METRICS; add it there") from None


def source_lag(progress_sources: list[Any]) -> int | None:
    """Sum over sources and partitions of latestOffset − endOffset (None if the source does not say)."""
    total = 0
    known = False
    for source in progress_sources:
        latest, end = _offsets(getattr(source, "latestOffset", None)), _offsets(getattr(source, "endOffset", None))
        if not isinstance(latest, dict) or not isinstance(end, dict):
            continue
        for topic, parts in latest.items():
            if not isinstance(parts, dict):
                continue
            for part, off in parts.items():
                done = end.get(topic, {}).get(part, 0) if isinstance(end.get(topic), dict) else 0
                if isinstance(off, int) and isinstance(done, int):
                    total += max(0, off - done)
                    known = True
    return total if known else None


def _offsets(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


class Health:
    """The job's state as the exporter sees it; updated by the sink and a StreamingQueryListener."""

    def __init__(self, aggregator: Any) -> None:
        self.aggregator = aggregator
        self.lock = threading.Lock()
        self.up = 0
        self.batches = 0  # in the store
        #: Micro-batches Spark ran (gauges served), the store may hold fewer: what keeps Python workers busy.
        self.batches_run = 0
        self.last_batch_id: int | None = None
        self.last_duration: float | None = None
        self.last_input_rows: int | None = None
        self.lag: int | None = None
        self.last_completed: float | None = None
        self.gauges: Gauges = aggregator.gauges() if aggregator is not None else {}
        self.batch_event = threading.Condition(self.lock)
        self._last_progress: tuple[Any, Any] | None = None  # (batchId, timestamp) of the progress taken last
        #: How many batches are not yet in the store (the job's `StoreWriter.behind`), None before it starts.
        self.store_behind: Any = None

    def gauges_ready(self, gauges: Gauges) -> None:
        """A micro-batch's buckets are merged: serve its gauges now, so that alerts do not wait for the store
        write (seconds for a storm's documents). A batch whose write then fails is re-run from the same state."""
        with self.lock:
            self.gauges = gauges
            self.batches_run += 1

    def batch_written(
        self, batch_id: int, gauges: Gauges | None, sink_seconds: float, input_events: int | None = None
    ) -> None:
        """A micro-batch is in the store: its input events (the events the buckets counted: Spark's numInputRows
        would count a broadcast record once per bucket when the source routes); ``gauges``: its gauges, None
        when they were served already (`gauges_ready`; the store is written behind the batches)."""
        with self.lock:
            if gauges is not None:
                self.gauges = gauges
            if input_events is not None:
                self.last_input_rows = input_events
            self.batches += 1
            self.last_batch_id = batch_id
            self.last_completed = time.time()
            if self.last_duration is None:
                self.last_duration = sink_seconds
            self.batch_event.notify_all()

    def progress_of(self, query: Any) -> None:
        """Take a running query's newest progress, if it is new (a stopped query's is ignored)."""
        try:
            progress = query.lastProgress
        except Exception:  # the query stopped meanwhile: its last batch was already taken
            return
        if progress is None:
            return
        key = (progress.batchId, progress.timestamp)
        if key != self._last_progress:
            self._last_progress = key
            self.progress(progress)

    def progress(self, progress: Any) -> None:
        """Take the batch duration and the source lag from a query's progress (``query.lastProgress``)."""
        with self.lock:
            duration_ms = (progress.durationMs or {}).get("triggerExecution")
            if duration_ms is not None:
                self.last_duration = duration_ms / 1000.0
            lag = source_lag(list(progress.sources or []))
            if lag is not None:
                self.lag = lag


class JobCollector:
    """Prometheus collector over a :class:`Health`."""

    def __init__(self, health: Health) -> None:
        self.health = health

    def collect(self) -> Any:
        health = self.health
        with health.lock:
            gauges = dict(health.gauges)
            health_values = {
                "elrwatch_batch_duration_seconds": health.last_duration,
                "elrwatch_batch_input_rows": health.last_input_rows,
                "elrwatch_source_lag_records": health.lag,
                "elrwatch_last_batch_completed_timestamp_seconds": health.last_completed,
                "elrwatch_batches_total": health.batches,
                "elrwatch_up": health.up,
                "elrwatch_store_behind_batches": health.store_behind() if health.store_behind else None,
            }
        families: dict[str, Any] = {}
        for (name, labels), value in gauges.items():
            family = families.get(name)
            if family is None:
                family = families[name] = _family(metric_of(name), labels=[label for label, _ in labels])
            family.add_metric([v for _, v in labels], float(value))
        yield from families.values()
        for name in HEALTH_METRICS:
            value = health_values[name]
            if value is not None:
                yield _family(metric_of(name), value=float(value))


class Exporter:
    """A running HTTP exporter; ``shutdown()`` stops it."""

    def __init__(self, server: Any, thread: Any, port: int) -> None:
        self.server, self.thread, self.port = server, thread, port

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_exporter(health: Health, port: int, host: str = "127.0.0.1") -> Exporter:
    """Serve the job's metrics on http://host:port/metrics (port 0 = any free port)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobCollector(health))
    server, thread = start_http_server(port, addr=host, registry=registry)
    return Exporter(server, thread, server.server_address[1])


def scrape(url: str, timeout: float = 5.0) -> dict[str, float]:
    """Fetch a /metrics page and return sample name → value, names as in the report's ``gauges``."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=timeout) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.endswith("_created"):
                out[sample_name(key(s.name, **s.labels))] = s.value
    return out
