"""A generated status store for the API's benchmark and load test: a report document of ``n`` partitions (12 brokers,
100 partitions a topic, RF 3, ~0.5 % not healthy), cheap to make at 1M partitions (`generate_document`, loaded with
``StatusStore.load_document``)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from elrwatch.state.status import STATUSES as STATUS_ORDER

T0 = 1_763_700_000_000
BROKERS = 12
PARTITIONS_PER_TOPIC = 100


def topic_name(t: int) -> str:
    return f"topic-{t:05d}"


def topic_id_of(t: int) -> str:
    return f"T{t:021d}"


def generate_partitions(n: int, seed: int = 7, brokers: int = BROKERS) -> Iterator[dict[str, Any]]:
    """``n`` partition documents (DESIGN §5 shape) over ``brokers`` brokers, sorted by (topic, partition); ~0.5 %
    not healthy."""
    rng = random.Random(seed)
    weights = [0.0002, 0.0002, 0.0003, 0.0003, 0.001, 0.002, 0.001]
    for i in range(n):
        t, p = divmod(i, PARTITIONS_PER_TOPIC)
        replicas = [(i + k) % brokers for k in range(3)]
        roll, status, acc = rng.random(), "HEALTHY", 0.0
        for name, w in zip(STATUS_ORDER, weights, strict=False):
            acc += w
            if roll < acc:
                status = name
                break
        leaderless = status.startswith("LEADERLESS") or status == "MANUAL_ELECTION_REQUIRED"
        isr = {"HEALTHY": replicas, "UNDER_REPLICATED": replicas[:2], "AT_MIN_ISR": replicas[:2]}.get(
            status, [] if leaderless else replicas[:1]
        )
        elr = replicas[1:2] if status == "UNDER_MIN_ISR" else []
        needs = STATUS_ORDER.index(status) <= STATUS_ORDER.index("UNDER_MIN_ISR")
        yield {
            "topic": topic_name(t),
            "topicId": topic_id_of(t),
            "partitionId": p,
            "replicas": replicas,
            "isr": isr,
            "elr": elr,
            "lastKnownElr": [],
            "leader": -1 if leaderless else (isr[0] if isr else replicas[0]),
            "leaderEpoch": 3,
            "partitionEpoch": 7,
            "leaderRecoveryState": 1 if status == "RECOVERING" else 0,
            "addingReplicas": [],
            "removingReplicas": [],
            "effectiveMinIsr": 2,
            "underMinIsr": len(isr) < 2,
            "atMinIsr": len(isr) == 2,
            "leaderless": leaderless,
            "electable": sorted(set(isr) | set(elr)),
            "liveElectable": sorted(set(isr) | set(elr)),
            "status": status,
            "statusSinceMs": T0 - rng.randrange(86_400_000),
            "statusSinceOffset": i,
            "lastLeaderChange": "clean",
            "lastOffset": i,
            "lastTimestampMs": T0,
            "lastPosition": f"elrwatch-events/{i % 12}@{i}",
            "violations": [],
            "outlook": {"summary": "no election needed" if not leaderless else "waits for a fenced ELR member"},
            "recommendation": {
                "strategy": "Balanced",
                "action": "restore_replicas" if needs else "none",
                "summary": "Bring the missing replicas back." if needs else "No action needed.",
                "risk": "none",
                "commands": [f"kafka-topics.sh --bootstrap-server $BOOTSTRAP --describe --topic {topic_name(t)}"]
                if needs
                else [],
            },
        }


def generate_document(n: int, brokers: int = BROKERS) -> dict[str, Any]:
    """A report document with ``n`` partitions (a generator: consumed once by ``load_document``)."""
    topics = (n + PARTITIONS_PER_TOPIC - 1) // PARTITIONS_PER_TOPIC
    counts = {s: 0 for s in STATUS_ORDER}
    for doc in generate_partitions(n, brokers=brokers):  # a first cheap pass for the gauges
        counts[doc["status"]] += 1
    gauges: dict[str, float] = {f'elrwatch_partitions{{status="{s}"}}': c for s, c in counts.items()}
    gauges.update(
        {
            "elrwatch_partition_count": n,
            "elrwatch_topic_count": topics,
            "elrwatch_elr_enabled": 1,
            'elrwatch_brokers{state="active"}': brokers,
            'elrwatch_brokers{state="fenced"}': 0,
            "elrwatch_last_event_timestamp_seconds": T0 / 1000,
        }
    )
    return {
        "partitions": generate_partitions(n, brokers=brokers),
        "brokers": [
            {
                "brokerId": b,
                "epoch": 100 + b,
                "incarnationId": None,
                "fenced": False,
                "inControlledShutdown": False,
                "registered": True,
                "rack": None,
                "state": "active",
            }
            for b in range(brokers)
        ],
        "topics": [
            {
                "topic": topic_name(t),
                "topicId": topic_id_of(t),
                "partitionCount": PARTITIONS_PER_TOPIC,
                "replicationFactor": 3,
                "configs": {},
            }
            for t in range(topics)
        ],
        "cluster": {"elrEnabled": True, "metadataVersion": 26, "features": {}, "configs": {}},
        "gauges": gauges,
        "violations": [],
        "quarantined": {"count": 0, "byReason": {}, "records": []},
        "counts": {},
    }
