"""The nodes' static configs (server.properties): elrwatch's STATIC_BROKER_CONFIG_RECORD, resolved in Kafka's order
(topic config, dynamic cluster default, ``--default-min-isr``, static config, Kafka's built-in 1) by both partition
stores alike (the differential harness)."""

from __future__ import annotations

from typing import Any

import pytest
from core_events import (
    base_cluster,
    cluster_min_isr,
    config,
    envelope,
    line,
    partition,
    static_config,
    static_min_isr,
    topic,
    topic_min_isr,
)
from test_columnar import run_both

from elrwatch.state.cluster import ClusterState
from elrwatch.state.outcome import Outcome
from elrwatch.state.records import RecordError, parse_line
from elrwatch.state.report import cluster_doc

TOPIC_A = "AAAAAAAAAAAAAAAAAAAAAQ"
TOPIC_B = "AAAAAAAAAAAAAAAAAAAAAg"


def _lines(*records: tuple[str, int, dict[str, Any]]) -> list[str]:
    return [line(envelope(*r)) for r in records]


def _setup() -> list[str]:
    """Brokers 0-2 with ELR off; topic a (no config, RF 3, ISR 2), topic b (its own min ISR 1, ISR 1)."""
    return _lines(
        *base_cluster(brokers=(0, 1, 2), elr=False),
        topic("a", TOPIC_A),
        partition(TOPIC_A, 0, (0, 1, 2), (0, 1), 0),
        topic("b", TOPIC_B),
        topic_min_isr("b", "1"),
        partition(TOPIC_B, 0, (0, 1, 2), (0,), 0),
    )


def _status(state: ClusterState, topic_id: str) -> tuple[int, str]:
    p = state.partition(topic_id, 0)
    assert p is not None
    return state.effective_min_isr(state.topics[topic_id]), p.status


@pytest.mark.parametrize("bucket", [None, (0, 2), (1, 2)])
def test_both_stores_resolve_static_configs_alike(bucket: tuple[int, int] | None) -> None:
    """Every layer set, changed and removed in turn: both stores agree after every record, whole and bucketed."""
    steps = _lines(
        static_min_isr(2, "2"),  # a: 2 (static), AT_MIN_ISR
        static_min_isr(1, "3"),  # the lowest node that sets it wins: 3
        cluster_min_isr("2"),  # the dynamic default wins over static
        cluster_min_isr(None),
        static_min_isr(1, None),  # node 1 unsets: node 2's 2
        static_config(2, "unclean.leader.election.enable", "true"),
        static_config(2, "log.retention.ms", "1000"),  # not a config elrwatch reads: applied, nothing changes
        static_min_isr(2, None),  # back to Kafka's 1
    )
    result = run_both([_setup(), *([s] for s in steps)], bucket=bucket)
    assert result.outcomes.get("applied", 0) >= len(steps)


def _apply(state: ClusterState, lines: list[str], start: int = 0) -> list[Outcome]:
    out = []
    for seq, text in enumerate(lines, start):
        parsed = parse_line(text, "ev", seq)
        assert not isinstance(parsed, RecordError), parsed
        out.append(state.apply(parsed))  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("store", ["objects", "columnar"])
def test_kafka_order_topic_dynamic_static_builtin(store: str) -> None:
    state = ClusterState(store=store)
    _apply(state, _setup())
    assert _status(state, TOPIC_A) == (1, "UNDER_REPLICATED")
    _apply(state, _lines(static_min_isr(0, "2")), 100)
    assert _status(state, TOPIC_A) == (2, "AT_MIN_ISR")
    assert _status(state, TOPIC_B) == (1, "AT_MIN_ISR")  # the topic's own config wins
    assert cluster_doc(state)["defaultMinIsr"] == 2
    assert cluster_doc(state)["defaultMinIsrSource"] == "static config (server.properties)"
    assert cluster_doc(state)["staticConfigs"] == {"0": {"min.insync.replicas": "2"}}
    _apply(state, _lines(static_min_isr(0, "3")), 200)
    assert _status(state, TOPIC_A) == (3, "UNDER_MIN_ISR")
    _apply(state, _lines(cluster_min_isr("1")), 300)  # the dynamic cluster default wins over the static file
    assert _status(state, TOPIC_A) == (1, "UNDER_REPLICATED")
    assert cluster_doc(state)["defaultMinIsrSource"] == "dynamic cluster default"
    _apply(state, _lines(cluster_min_isr(None), static_min_isr(0, None)), 400)
    assert _status(state, TOPIC_A) == (1, "UNDER_REPLICATED")
    assert cluster_doc(state)["defaultMinIsrSource"] == "Kafka's default"


@pytest.mark.parametrize("store", ["objects", "columnar"])
def test_default_min_isr_option_overrides_the_static_layer_only(store: str) -> None:
    state = ClusterState(default_min_isr=3, store=store)
    _apply(state, [*_setup(), *_lines(static_min_isr(0, "2"))])
    assert _status(state, TOPIC_A) == (3, "UNDER_MIN_ISR")
    assert cluster_doc(state)["defaultMinIsrSource"] == "--default-min-isr"
    _apply(state, _lines(cluster_min_isr("2")), 100)
    assert _status(state, TOPIC_A) == (2, "AT_MIN_ISR")  # Kafka applies its dynamic default over any static value


@pytest.mark.parametrize("store", ["objects", "columnar"])
def test_static_unclean_election_resolves_below_the_topic(store: str) -> None:
    state = ClusterState(store=store)
    _apply(state, _setup())
    topic_a = state.topics[TOPIC_A]
    assert state.unclean_enabled(topic_a) is False
    _apply(state, _lines(static_config(1, "unclean.leader.election.enable", "true")), 100)
    assert state.unclean_enabled(topic_a) is True
    _apply(state, _lines(config(2, "a", "unclean.leader.election.enable", "false")), 200)
    assert state.unclean_enabled(topic_a) is False


@pytest.mark.parametrize(
    "data,field",
    [
        ({"nodeId": 1, "name": "min.insync.replicas", "value": "0"}, "value"),
        ({"nodeId": 1, "name": "min.insync.replicas", "value": "two"}, "value"),
        ({"nodeId": -1, "name": "min.insync.replicas", "value": "2"}, "nodeId"),
        ({"nodeId": 1, "name": "unclean.leader.election.enable", "value": "yes"}, "value"),
        ({"nodeId": 1, "value": "2"}, "name"),
    ],
)
def test_a_bad_static_config_is_quarantined_with_its_field(data: dict[str, Any], field: str) -> None:
    parsed = parse_line(line(envelope("STATIC_BROKER_CONFIG_RECORD", 0, data)), "ev", 1)
    assert isinstance(parsed, RecordError) and parsed.field == field, parsed
