"""The bridge's loop: read (admin poll or metadata log) → publish envelopes → remember what was published.

Exactly-once across restarts (docs/BRIDGE.md): every publish goes through a small JSON **state file**
written atomically (temp file + rename):

1. the records about to be published are written to the state file as ``pending``, with their offsets, together
   with what the bridge will have published after them (the admin view, or the log position);
2. they are published (the producer is flushed, every send acknowledged);
3. the state file is written again without ``pending``.

On start, ``pending`` records of a crashed run are published again *with the same offsets*: the core applies each
metadata offset once per entity (DESIGN.md §2), so a record that made it before the crash is a duplicate and one
that did not is applied — no change is lost or applied twice. Without a state file the admin mode starts from an
empty view (everything is published again, with offsets above any it used before: offsets are never lower than
``epoch ms × 1000``), and the metadata-log mode from the log's beginning (real offsets: the core drops what it has).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from elrwatch.bridge.admin import ClusterReader, KafkaClusterReader, PollError, View, diff, poll_view
from elrwatch.bridge.logtail import MetadataLogTail, TailRecord, TailState
from elrwatch.bridge.static_config import PropertiesError, read_server_properties
from elrwatch.kafkaio.clients import make_producer
from elrwatch.kafkaio.config import kafka_python_config
from elrwatch.kafkaio.produce import EventKeys
from elrwatch.state.gauges import METRICS
from elrwatch.state.record_types import learn_topic_name

log = logging.getLogger("elrwatch.bridge")

#: Bounded label values of elrwatch_bridge_errors_total.
ERROR_REASONS = (
    "broker_unreachable",
    "topic_deleted",
    "topic_error",
    "partial_page",
    "config_error",
    "unknown_record_type",
    "unknown_record_version",
    "decode_error",
    "crc_mismatch",
    "unsupported_compression",
    "diverged_log",
    "log_gap",
    "log_unreadable",
    "properties_unreadable",
    "publish_failed",
    "replica_log_unreadable",
)


class Metrics:
    """The bridge's Prometheus metrics, in a registry of its own (served by `serve`)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Gauge
        from prometheus_client import Counter as PromCounter

        def described(cls: Any, name: str) -> Any:  # named and described by the metric table
            metric = METRICS[name]
            return cls(metric.name, metric.help, metric.labels, registry=self.registry)

        self.registry = CollectorRegistry()
        self.errors = described(PromCounter, "elrwatch_bridge_errors_total")
        for reason in ERROR_REASONS:
            self.errors.labels(reason)
        self.published = described(PromCounter, "elrwatch_bridge_published_records_total")
        self.poll_seconds = described(Gauge, "elrwatch_bridge_poll_duration_seconds")
        self.last_offset = described(Gauge, "elrwatch_bridge_last_published_offset")
        self.counts: Counter[str] = Counter()  # the same error counts, for tests and the exit summary

    def error(self, reason: str, message: str) -> None:
        """One clear log line and one count."""
        log.warning("elrwatch bridge: %s: %s", reason, message)
        self.errors.labels(reason).inc()
        self.counts[reason] += 1

    def serve(self, port: int, addr: str = "0.0.0.0") -> Any:
        from prometheus_client import start_http_server

        return start_http_server(port, addr=addr, registry=self.registry)


class Publisher(Protocol):
    def publish(self, lines: list[bytes]) -> None:
        """Send and wait until every line is acknowledged; raise on failure."""
        ...

    def close(self) -> None: ...


class KafkaPublisher:
    """Publishes to the event topic with ``elrwatch produce``'s keys (per-topic and per-broker order kept) and
    routing headers (kafkaio/headers.py)."""

    def __init__(self, options: dict[str, str], topic: str, timeout_s: float = 30.0) -> None:
        self.topic = topic
        self.timeout_s = timeout_s
        self.producer = make_producer(options, linger_ms=5)
        self.keys = EventKeys()

    def learn_topic(self, name: str, topic_id: str) -> None:
        """A topic published before a restart: its config records keep its partitions' key."""
        self.keys.learn(name, topic_id)

    def publish(self, lines: list[bytes]) -> None:
        futures = []
        for line in lines:
            key, headers = self.keys.with_headers(line)
            futures.append(self.producer.send(self.topic, key=key, value=line, headers=headers))
        self.producer.flush(self.timeout_s)
        for future in futures:
            future.get(timeout=self.timeout_s)  # raises the send's error

    def close(self) -> None:
        self.producer.close(10)


class MemoryPublisher:
    """Keeps what was published (tests); ``fail`` > 0 makes that many next publishes fail."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.fail = 0

    def publish(self, lines: list[bytes]) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("injected publish failure")
        self.lines.extend(lines)

    def close(self) -> None:
        pass


class StateFile:
    """The bridge's JSON state (atomic writes); ``None`` path keeps it in memory only."""

    def __init__(self, path: str | os.PathLike | None) -> None:
        self.path = Path(path) if path else None
        self.memory: dict[str, Any] | None = None

    def load(self) -> dict[str, Any] | None:
        if self.path is None:
            return self.memory
        try:
            return orjson.loads(self.path.read_bytes())
        except FileNotFoundError:
            return None

    def save(self, doc: dict[str, Any]) -> None:
        if self.path is None:
            self.memory = json.loads(orjson.dumps(doc))
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(orjson.dumps(doc))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _lines(events: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(e) for e in events]


class _Delivery(ABC):
    """Publishing with the state file, shared by both bridges: pending first (a crash re-publishes these exact
    lines), then the acknowledged publish, then the state without pending."""

    publisher: Publisher
    metrics: Metrics
    pending: list[bytes]
    steps: int  # how many times `step` ran (tests wait for polls with it)

    @abstractmethod
    def _save(self, pending: list[bytes]) -> None:
        """Write the state file: this bridge's position and ``pending``."""

    @abstractmethod
    def _poll(self) -> Any:
        """Read what changed since the last step; None when the read failed (counted and logged)."""

    @abstractmethod
    def _publish_changes(self, polled: Any) -> int:
        """Publish what `_poll` read; returns how many records were published."""

    def step(self) -> int:
        """One step: publish what is pending, else poll (its time is the poll-duration gauge) and publish what
        changed; returns how many records were published (0 when nothing changed or the poll failed)."""
        self.steps += 1
        if self.pending:
            return self._retry_pending()
        started = time.monotonic()
        try:
            polled = self._poll()
        finally:
            self.metrics.poll_seconds.set(time.monotonic() - started)
        return 0 if polled is None else self._publish_changes(polled)

    def _retry_pending(self) -> int:
        """Publish what a failed publish or a crashed run left pending (same lines, same offsets)."""
        if not self._publish(self.pending):
            return 0
        sent, self.pending = len(self.pending), []
        self._save([])
        return sent

    def _deliver(self, lines: list[bytes]) -> int:
        """Publish ``lines``; their count, or 0 when not acknowledged (kept pending, retried)."""
        self._save(lines)
        if not self._publish(lines):
            self.pending = lines
            return 0
        self._save([])
        return len(lines)

    def _publish(self, lines: list[bytes]) -> bool:
        try:
            self.publisher.publish(lines)
        except Exception as exc:
            self.metrics.error("publish_failed", f"{len(lines)} records not acknowledged: {type(exc).__name__}: {exc}")
            return False
        self.metrics.published.inc(len(lines))
        offset = orjson.loads(lines[-1]).get("offset")
        if offset is not None:  # the agent's records are not in the metadata log: no offset
            self.metrics.last_offset.set(offset)
        return True


class AdminBridge(_Delivery):
    """Polls with a `ClusterReader` and publishes what changed (see admin.py)."""

    def __init__(
        self,
        reader: ClusterReader,
        publisher: Publisher,
        state: StateFile,
        metrics: Metrics,
        page_size: int = 2000,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.reader, self.publisher, self.state, self.metrics = reader, publisher, state, metrics
        self.page_size = page_size
        self.clock_ms = clock_ms
        doc = state.load() or {}
        if doc and doc.get("source") != "admin":
            raise ValueError(f"state file {state.path} belongs to a --source {doc.get('source')} bridge")
        self.view: View | None = View.from_json(doc["view"]) if doc.get("view") else None
        self.next_offset: int = int(doc.get("nextOffset", 0))
        self.pending: list[bytes] = [line.encode() for line in doc.get("pending", [])]
        self.steps = 0  # how many times `step` ran (tests wait for polls with it)
        learn = getattr(publisher, "learn_topic", None)
        if learn is not None and self.view is not None:  # a restart: keep keying the known topics' configs
            for name, topic in self.view.topics.items():
                learn(name, topic.topic_id)

    def _save(self, pending: list[bytes]) -> None:
        self.state.save(
            {
                "source": "admin",
                "nextOffset": self.next_offset,
                "view": self.view.to_json() if self.view is not None else None,
                "pending": [line.decode() for line in pending],
            }
        )

    def _poll(self) -> View | None:
        """The cluster's view now (one admin poll)."""
        try:
            return poll_view(self.reader, self.view, self.page_size, self.metrics.error)
        except PollError as exc:
            self.metrics.error(exc.reason, str(exc))
            reset = getattr(self.reader, "reset", None)
            if reset is not None:
                reset()
            return None

    def _publish_changes(self, new: View) -> int:
        """Publish the difference between the last view and ``new``."""
        now = self.clock_ms()
        first = max(self.next_offset, now * 1000)
        events = diff(self.view, new, first, now)
        if not events:
            self.view = new
            return 0
        old_topics = self.view.topics if self.view is not None else {}
        for name in sorted(old_topics):
            if name not in new.topics or new.topics[name].topic_id != old_topics[name].topic_id:
                self.metrics.error(
                    "topic_deleted",
                    f"topic {name} ({old_topics[name].topic_id}) was deleted since "
                    "the last poll: REMOVE_TOPIC_RECORD published",
                )
        lines = _lines(events)
        self.view, self.next_offset = new, events[-1]["offset"] + 1
        return self._deliver(lines)


class LogBridge(_Delivery):
    """Follows a metadata log directory (`MetadataLogTail`) and publishes its records with their real offsets."""

    def __init__(
        self,
        log_dir: str | os.PathLike,
        publisher: Publisher,
        state: StateFile,
        metrics: Metrics,
        server_properties: str | os.PathLike | None = None,
    ) -> None:
        """``server_properties``: the node's file, whose static configs are published (STATIC_BROKER_CONFIG_RECORD)
        at start and whenever they change (a static config applies from the node's next start)."""
        self.publisher, self.state, self.metrics = publisher, state, metrics
        self.server_properties = server_properties
        self._properties_seen: tuple[Any, ...] | None = None  # the file's (mtime, size) or its error, last read
        doc = state.load() or {}
        if doc and doc.get("source") != "metadata-log":
            raise ValueError(f"state file {state.path} belongs to a --source {doc.get('source')} bridge")
        tail_state = TailState.from_json(doc["tail"]) if doc.get("tail") else TailState()
        self.tail = MetadataLogTail(log_dir, tail_state, metrics.error)
        self.pending: list[bytes] = [line.encode() for line in doc.get("pending", [])]
        self.steps = 0  # how many times `step` ran (tests wait for polls with it)
        # topic name -> id of every TOPIC_RECORD published: a restart resumes the log past them, and the publisher
        # still needs them to key a topic's config and ELR-clearing records with its partitions
        self.topic_ids: dict[str, str] = {str(k): str(v) for k, v in (doc.get("topics") or {}).items()}
        #: The static configs published ({"nodeId": n, "values": {...}}), None: none yet.
        self.static_published: dict[str, Any] | None = doc.get("static")
        learn = getattr(publisher, "learn_topic", None)
        if learn is not None:  # a restart: keep keying the known topics' configs
            for name, topic_id in self.topic_ids.items():
                learn(name, topic_id)

    def _save(self, pending: list[bytes]) -> None:
        self.state.save(
            {
                "source": "metadata-log",
                "tail": self.tail.state.to_json(),
                "topics": self.topic_ids,
                "static": self.static_published,
                "pending": [line.decode() for line in pending],
            }
        )

    def _poll(self) -> list[TailRecord] | None:
        """The records appended to the log since the last step."""
        try:
            return self.tail.poll()
        except OSError as exc:
            self.metrics.error("log_unreadable", f"{self.tail.log_dir}: {exc}")
            return None

    def _static_events(self) -> list[dict[str, Any]]:
        """The node's static configs that differ from those published (all of them first); none when the file is
        unreadable (an error counted and logged once per step, the last published values stay)."""
        if self.server_properties is None:
            return []
        try:
            stat = os.stat(self.server_properties)
            seen: tuple[Any, ...] = (stat.st_mtime_ns, stat.st_size)
        except OSError as exc:
            seen = ("error", exc.strerror)
        if seen == self._properties_seen:
            return []  # unchanged since the last read (an error is reported once, until the file changes)
        self._properties_seen = seen
        try:
            found = read_server_properties(self.server_properties)
        except PropertiesError as exc:
            self.metrics.error("properties_unreadable", str(exc))
            return []
        was = self.static_published
        published = was["values"] if was is not None and was.get("nodeId") == found.node_id else None
        events = found.events(published)
        if events:
            self.static_published = {"nodeId": found.node_id, "values": dict(found.values)}
        return events

    def _publish_changes(self, records: list[TailRecord]) -> int:
        """Publish the node's changed static configs, then ``records`` with their offsets."""
        events = self._static_events()
        if not records and not events:
            return 0
        for rec in records:
            extra: dict[str, Any] = {}
            if rec.from_snapshot:
                extra["snapshotEnd"] = rec.offset + 1  # the core applies it as a snapshot's record
            if rec.diverged:
                extra["diverged"] = True
                self.metrics.error(
                    "diverged_log",
                    f"offset {rec.offset} came back with other content: "
                    f"{rec.decoded.type} (published again, marked diverged)",
                )
            event = rec.decoded.envelope(**extra) | {"offset": rec.offset}
            if isinstance(event.get("data"), dict):
                learn_topic_name(str(event.get("type")), event["data"], self.topic_ids)
            events.append(event)
        return self._deliver(_lines(events))


class Stepper(Protocol):
    """A bridge or an agent: one ``step()`` publishes what changed since the last one and returns its count."""

    def step(self) -> int: ...


def run(
    bridge: Stepper,
    interval_s: float,
    duration_s: float = 0.0,
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """Step every ``interval_s`` until ``duration_s`` (0 = forever) or ``stop()``."""
    deadline = time.monotonic() + duration_s if duration_s > 0 else None
    while not stop():
        started = time.monotonic()
        sent = bridge.step()
        if sent:
            log.info("elrwatch bridge: published %d records", sent)
        if deadline is not None and time.monotonic() >= deadline:
            return
        time.sleep(max(0.0, interval_s - (time.monotonic() - started)))


def run_until_signalled(stepper: Stepper, interval_s: float, duration_s: float, close: Callable[[], None]) -> None:
    """`run` until SIGTERM/SIGINT (handlers installed when called from the main thread) or ``duration_s``; then
    ``close()`` (the publisher and whatever else the command opened), also when a step raised."""
    stopping = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stopping.set())
    try:
        run(stepper, interval_s, duration_s, stopping.is_set)
    finally:
        close()


def zookeeper_broker_dir(log_dir: str | os.PathLike) -> Path | None:
    """The ``meta.properties`` of a ZooKeeper-mode broker in ``log_dir`` or its parent (a log directory's
    ``__cluster_metadata-0`` would be there), or None. ZooKeeper mode writes ``broker.id`` and no ``node.id``."""
    path = Path(log_dir)
    for folder in (path, path.parent):
        meta = folder / "meta.properties"
        try:
            keys = {line.split("=", 1)[0].strip() for line in meta.read_text().splitlines() if "=" in line}
        except OSError:
            continue
        if "broker.id" in keys and "node.id" not in keys:
            return meta
    return None


@dataclass(frozen=True)
class SidecarSettings:
    """What `elrwatch bridge` and `elrwatch agent` both take: the event topic (its Kafka client ``options`` and
    name), the state file (None: in memory), the seconds between two steps, the metrics endpoint (no port: none)
    and how long to run (0: until SIGTERM/SIGINT)."""

    options: dict[str, str]
    topic: str
    state_file: str | None = None
    interval_s: float = 2.0
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    duration_s: float = 0.0


def run_bridge(
    settings: SidecarSettings,
    *,
    source: str,
    admin_options: dict[str, str] | None = None,
    log_dir: str | None = None,
    page_size: int = 2000,
    server_properties: str | None = None,
) -> Metrics:
    """What ``elrwatch bridge`` runs: build the bridge for ``source`` and step it until SIGTERM/SIGINT or the
    settings' duration. ``admin_options``: the Kafka settings of the cluster polled (default: the event topic's).
    ``server_properties`` (metadata-log only): the node's file, its static configs published."""
    if source not in ("admin", "metadata-log"):
        raise ValueError(f"--source must be admin or metadata-log, not {source!r}")
    if server_properties is not None:
        if source != "metadata-log":
            raise ValueError("--server-properties is for --source metadata-log (the admin bridge asks each broker)")
        read_server_properties(server_properties)  # refuse a file that cannot be read or names no node, at once
    if source == "metadata-log":
        if not log_dir:
            raise ValueError("--source metadata-log needs --log-dir (a node's __cluster_metadata-0 directory)")
        zookeeper = zookeeper_broker_dir(log_dir)
        if zookeeper is not None:
            raise ValueError(
                f"--log-dir {log_dir}: {zookeeper} is a ZooKeeper-mode broker's (broker.id, no "
                "node.id): a ZooKeeper-mode cluster has no metadata log, use --source admin"
            )
        if not Path(log_dir).is_dir():
            raise ValueError(f"--log-dir {log_dir} is not a directory")
    metrics = Metrics()
    if settings.metrics_port is not None:
        metrics.serve(settings.metrics_port, settings.metrics_host)
    publisher = KafkaPublisher(settings.options, settings.topic)
    state = StateFile(settings.state_file)
    bridge: AdminBridge | LogBridge
    if source == "admin":
        reader = KafkaClusterReader(kafka_python_config(admin_options or settings.options))
        bridge = AdminBridge(reader, publisher, state, metrics, page_size=page_size)
    else:
        bridge = LogBridge(log_dir, publisher, state, metrics, server_properties)  # type: ignore[arg-type]
    log.warning(
        "elrwatch bridge: --source %s → topic %s (state file: %s)",
        source,
        settings.topic,
        settings.state_file or "none",
    )

    def close() -> None:
        publisher.close()
        if isinstance(bridge, AdminBridge):
            bridge.reader.close()

    run_until_signalled(bridge, settings.interval_s, settings.duration_s, close)
    return metrics
