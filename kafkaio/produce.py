"""`elrwatch produce`: publish metadata event lines to a Kafka topic, keyed so per-entity order is kept.

Keys (Kafka's default partitioner hashes the key, so one key always lands in one partition, in order), each type's
from its registry entry (state/record_types.py, ``message_key``):
* TOPIC_RECORD, PARTITION_RECORD, PARTITION_CHANGE_RECORD, REPLICA_LOG_INFO_RECORD, OPERATOR_RECOVERY_RECORD,
  REMOVE_TOPIC_RECORD: ``topic:<topicId>`` (a partition record can never overtake the creation of its topic);
* a topic's CONFIG_RECORD and CLEAR_ELR_RECORD, which name the topic instead of giving its id: the same
  ``topic:<topicId>`` once a TOPIC_RECORD told the name's id (:class:`EventKeys`, which `produce` and the bridge use;
  the stateless :func:`key_of` and an unknown name key them by type name);
* broker records (register, change, fence, unfence, unregister): ``broker:<id>``;
* every other type: the type name; lines that are not valid events: ``invalid``.

Every valid event line also carries the routing headers of the event topic's contract (kafkaio/headers.py), from
the same parse (`key_and_headers`): the job places the line from them without reading its JSON.
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

from elrwatch.kafkaio.clients import make_producer
from elrwatch.kafkaio.headers import Headers, routing_headers
from elrwatch.state.record_types import message_key


def key_of(line: bytes | str, topic_ids: dict[str, str] | None = None) -> bytes:
    """The Kafka message key of one event line (envelope or kafka-dump-log line); never raises.

    ``topic_ids``: topic name -> id, learnt from TOPIC_RECORDs (updated here) and used for the records that name a
    topic (`EventKeys`)."""
    return key_and_headers(line, topic_ids)[0]


def key_and_headers(line: bytes | str, topic_ids: dict[str, str] | None = None) -> tuple[bytes, Headers]:
    """The Kafka message key and headers of one event line, from one parse; never raises.

    The headers (`kafkaio.headers`: what the job's routing needs) are set on a valid envelope line only: a
    kafka-dump-log text line and a line that is not a valid event get none (the job reads their JSON)."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes | bytearray) else line
    stripped = text.strip()
    dump_line = stripped.startswith("|")
    if dump_line:
        marker = stripped.find("payload:")
        if marker < 0:
            return b"other", []
        stripped = stripped[marker + len("payload:") :].strip()
    try:
        envelope = orjson.loads(stripped)
        type_name = envelope["type"]
        data = envelope.get("data") or {}
    except (orjson.JSONDecodeError, TypeError, KeyError, AttributeError):
        return b"invalid", []
    if not isinstance(type_name, str) or not isinstance(data, dict):
        return b"invalid", []
    key = message_key(type_name, data, topic_ids)
    return key, [] if dump_line else routing_headers(envelope, type_name, data)


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

    def with_headers(self, line: bytes | str) -> tuple[bytes, Headers]:
        """The line's key and its routing headers (`key_and_headers`)."""
        return key_and_headers(line, self.topic_ids)


@dataclass
class ProduceResult:
    sent: int
    seconds: float


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
    """Send every non-blank line (value = the line, key and headers = `EventKeys.with_headers`). ``rate`` > 0
    paces to events/s."""
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
            key, headers = keys.with_headers(value)
            producer.send(topic, key=key, value=value, headers=headers)
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
