"""kafka-python clients (producer, consumer, admin) from string options (`config.KafkaSettings.options`): a client
that cannot connect is a one-line SourceError naming the cause kafka-python logged."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from elrwatch.kafkaio.config import SourceError, kafka_python_config
from elrwatch.kafkaio.failures import connection_failures, unreachable_error

__all__ = ["SourceError", "connect", "create_topic", "make_admin", "make_consumer", "make_producer"]


def create_topic(options: Mapping[str, str], topic: str, partitions: int, timeout_s: float = 15.0) -> bool:
    """Create ``topic`` if missing; True if it was created."""
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = make_admin(options)
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


def connect(client_class: Any, options: Mapping[str, str], **settings: Any) -> Any:
    """A kafka-python client of ``client_class`` with the options' connection and security settings; a client that
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


def make_producer(options: Mapping[str, str], **extra: Any) -> Any:
    """A KafkaProducer that keeps order and waits for every replica (``extra`` overrides its settings)."""
    from kafka import KafkaProducer

    settings = {"acks": "all", "linger_ms": 20, "batch_size": 512 * 1024, "max_in_flight_requests_per_connection": 1}
    settings.update(extra)
    return connect(KafkaProducer, options, **settings)


def make_consumer(options: Mapping[str, str], **settings: Any) -> Any:
    """A KafkaConsumer (``settings``: group, offsets, fetch sizes...)."""
    from kafka import KafkaConsumer

    return connect(KafkaConsumer, options, **settings)


def make_admin(options: Mapping[str, str], **settings: Any) -> Any:
    """A KafkaAdminClient."""
    from kafka import KafkaAdminClient

    return connect(KafkaAdminClient, options, **settings)
