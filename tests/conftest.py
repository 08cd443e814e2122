"""Shared pytest fixtures. Keep each fixture small; several engineers add to this file."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # tests/ helpers (kafka_harness, ...) importable by name


@pytest.fixture(scope="session")
def kafka_server():
    """A noida-db Kafka-wire server on a free loopback port with a fresh data dir (stopped at the end)."""
    from kafka_harness import KafkaServer

    server = KafkaServer().start()
    try:
        yield server
    finally:
        server.stop()
