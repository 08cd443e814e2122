"""`elrwatch produce`: publish metadata event lines to a Kafka topic, keyed so per-entity order is kept.

Keys (Kafka's default partitioner hashes the key, so one key always lands in one partition, in order), each type's
from its registry entry (state/record_types.py, ``message_key``):
* TOPIC_RECORD, PARTITION_RECORD, PARTITION_CHANGE_RECORD, REPLICA_LOG_INFO_RECORD, REMOVE_TOPIC_RECORD:
  ``topic:<topicId>`` (a partition record can never overtake the creation of its topic);
* a topic's CONFIG_RECORD and CLEAR_ELR_RECORD, which name the topic instead of giving its id: the same
  ``topic:<topicId>`` once a TOPIC_RECORD told the name's id (:class:`EventKeys`, which `produce` and the bridge use;
  the stateless :func:`key_of` and an unknown name key them by type name);
* broker records (register, change, fence, unfence, unregister): ``broker:<id>``;
* every other type: the type name; lines that are not valid events: ``invalid``.
Records of one topic (hence of one partition) and of one broker therefore keep their order; across keys the job
re-orders each micro-batch by metadata offset (``"offset"`` in the envelope, always set by the simulator and the
generator). A topic's min ISR change and the ELR clearing that follows it must stay in order with its partition
changes: applied after a later change of a partition, the clearing would be skipped there as already applied
(found on a 2-partition event topic with capped batches: a partition epoch one short).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from elrwatch.state.record_types import message_key
from elrwatch.streaming.sources import connection_failures, kafka_python_config, unreachable_error


def key_of(line: bytes | str, topic_ids: dict[str, str] | None = None) -> bytes:
    """The Kafka message key of one event line (envelope or kafka-dump-log line); never raises.

    ``topic_ids``: topic name -> id, learnt from TOPIC_RECORDs (updated here) and used for the records that name a
    topic (`EventKeys`)."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes | bytearray) else line
    stripped = text.strip()
    if stripped.startswith("|"):
        marker = stripped.find("payload:")
        if marker < 0:
            return b"other"
        stripped = stripped[marker + len("payload:") :].strip()
    try:
        envelope = orjson.loads(stripped)
        type_name = envelope["type"]
        data = envelope.get("data") or {}
    except (orjson.JSONDecodeError, TypeError, KeyError, AttributeError):
        return b"invalid"
    if not isinstance(type_name, str) or not isinstance(data, dict):
        return b"invalid"
    return message_key(type_name, data, topic_ids)


class EventKeys:
    """`key_of` with a memory of topic names: a topic's CONFIG_RECORD and CLEAR_ELR_RECORD get its partitions' key
    once its TOPIC_RECORD was keyed (or `learn` was told), so they keep their order with its partition changes."""

    def __init__(self) -> None:
        self.topic_ids: dict[str, str] = {}

    def learn(self, name: str, topic_id: str) -> None:
        """A topic known from elsewhere (a restarted bridge's state)."""
        self.topic_ids[name] = topic_id

    def __call__(self, line: bytes | str) -> bytes:
        return key_of(line, self.topic_ids)


@dataclass
class ProduceResult:
    sent: int
    seconds: float


def create_topic(options: dict[str, str], topic: str, partitions: int, timeout_s: float = 15.0) -> bool:
    """Create ``topic`` if missing; True if it was created."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = _connect(KafkaAdminClient, options)
    try:
        if topic in admin.list_topics():
            return False
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
        except TopicAlreadyExistsError:
            return False
        deadline = time.monotonic() + timeout_s
        while topic not in admin.list_topics():
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic} not visible {timeout_s:g}s after creation")
            time.sleep(0.05)
        return True
    finally:
        admin.close()


def _connect(client_class: Any, options: dict[str, str], **settings: Any) -> Any:
    """A kafka-python client (admin or producer) with the options' connection and security settings; a client that
    cannot connect (refused, TLS, SASL authentication) is a SourceError naming the cause kafka-python logged."""
    from kafka.errors import KafkaError

    cfg = kafka_python_config(options)
    if "bootstrap_timeout_ms" not in client_class.DEFAULT_CONFIG:  # kafka-python < 3: no bounded bootstrap
        cfg.pop("bootstrap_timeout_ms", None)
    with connection_failures() as failures:
        try:
            return client_class(**cfg, **settings)
        except KafkaError as exc:
            timeout_s = cfg.get("bootstrap_timeout_ms", cfg["request_timeout_ms"]) / 1000
            servers = options.get("bootstrap.servers")
            raise unreachable_error(servers, timeout_s, exc, failures.last, cfg["security_protocol"]) from None


def make_producer(options: dict[str, str], **extra: Any) -> Any:
    from kafka import KafkaProducer

    settings = {"acks": "all", "linger_ms": 20, "batch_size": 512 * 1024, "max_in_flight_requests_per_connection": 1}
    settings.update(extra)
    return _connect(KafkaProducer, options, **settings)


def produce_lines(
    options: dict[str, str],
    topic: str,
    lines: Iterable[bytes | str],
    *,
    rate: float = 0.0,
    progress_every: float = 2.0,
    out: Any = sys.stderr,
    producer: Any = None,
) -> ProduceResult:
    """Send every non-blank line (value = the line, key = `EventKeys`). ``rate`` > 0 paces to events/s."""
    own = producer is None
    producer = producer or make_producer(options)
    started = last_report = time.monotonic()
    sent = 0
    keys = EventKeys()
    try:
        for line in lines:
            value = line.encode() if isinstance(line, str) else bytes(line)
            value = value.rstrip(b"\r\n")
            if not value.strip():
                continue
            producer.send(topic, key=keys(value), value=value)
            sent += 1
            if rate > 0:
                ahead = started + sent / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            now = time.monotonic()
            if out is not None and now - last_report >= progress_every:
                last_report = now
                out.write(f"elrwatch produce: {sent} events sent to {topic} ({sent / (now - started):.0f}/s)\n")
                out.flush()
        producer.flush(60)
    finally:
        if own:
            producer.close(10)
    seconds = time.monotonic() - started
    if out is not None:
        out.write(f"elrwatch produce: done, {sent} events sent to {topic} in {seconds:.1f}s\n")
        out.flush()
    return ProduceResult(sent, seconds)
