"""Real Kafka clusters for the tests (devtools/kafka_cluster.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest


@contextlib.contextmanager
def running_cluster(**options: Any) -> Iterator[Any]:
    """A `KafkaCluster` of ``options``, started, and stopped at the end. Without Kafka's jars or Java the test fails,
    never skips: `make test` fetches the jars, so a missing one is a real error."""
    from elrwatch.devtools.kafka_cluster import ClusterError, KafkaCluster

    try:
        cluster = KafkaCluster(**options)
    except ClusterError as exc:  # no jars (`make kafka-jars`) or no java
        pytest.fail(f"real Kafka unavailable: {exc}", pytrace=False)
    with cluster:
        yield cluster
