"""Live alerting end to end: a real Kafka 4.4 cluster → `elrwatch bridge` → `elrwatch stream` (Spark) → a real
Prometheus (Debian's `prometheus`) with the chart's rules → a real Alertmanager (`prometheus-alertmanager`) → a
webhook receiver in this process (devtools/alerting.py).

The rules are the chart's, rendered by `helm template` with the values a user would set (short `for:` so that the
test takes seconds, a runbook base URL of our own): the same mechanism and file the chart deploys. One cluster,
pipeline and alerting stack for the module; every scenario restores the brokers it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.real_kafka, pytest.mark.slow, pytest.mark.timeout(900)]

RUNBOOK = "https://runbooks.example.test/elrwatch/RUNBOOK.md"
#: The test's chart values: alerts in seconds instead of minutes.
VALUES = [
    f"prometheusRule.runbookBaseUrl={RUNBOOK}",
    "prometheusRule.alerts.ElrwatchOfflinePartitions.for=3s",
]
#: How long the alert may take from the kill to the receiver (fence ~3 s, bridge, a micro-batch, scrape, `for:`).
ALERT_TIMEOUT = 120.0
#: "payments" (RF 2, cluster min ISR 2) lives on brokers 2 and 3; "solo" (RF 1) on broker 2. Broker 1 holds the
#: event topic and is never stopped.
TOPICS = (("payments", {0: [2, 3], 1: [3, 2]}), ("solo", {0: [2]}))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    from elrwatch.devtools.alerting import AlertingError, AlertingStack, Pipeline, render_rule_file, wait_until
    from elrwatch.devtools.kafka_cluster import ClusterError, KafkaCluster

    work = tmp_path_factory.mktemp("alerting")
    try:
        cluster = KafkaCluster(brokers=3, min_insync_replicas=2)
    except ClusterError as exc:  # no jars or no java: `make test` fetches them, so this is an error, never a skip
        pytest.fail(str(exc), pytrace=False)
    with cluster:
        for name, assignment in TOPICS:
            cluster.create_topic(name, replica_assignment=assignment)
        try:
            rules = render_rule_file(work / "rules.yaml", VALUES)
            with Pipeline(cluster, work / "pipeline") as pipeline, \
                    AlertingStack(rules, [f"127.0.0.1:{pipeline.metrics_port}"], work / "stack") as stack:
                # the job has applied the cluster's state: all four partitions (the event topic's too), none offline
                wait_until(lambda: stack.value("elrwatch_partition_count") == 4
                           and stack.value("elrwatch_offline_partitions") == 0, "Prometheus sees the cluster", 240)
                yield cluster, stack
        except AlertingError as exc:
            pytest.fail(str(exc), pytrace=False)


def test_the_chart_rules_are_loaded_with_the_values(live: tuple[Any, Any]) -> None:
    _, stack = live
    loaded = stack.rules_loaded()
    assert {"ElrwatchPartitionsUnderMinIsr", "ElrwatchPartitionsUnderMinIsrRestartTooLong",
            "ElrwatchRestartWouldBlockWrites", "ElrwatchOfflinePartitions"} <= set(loaded)
    assert stack.target_up()
    assert stack.receiver.alerts(status="firing") == []


def test_broker_kill_pages_with_labels_and_runbook_then_resolves(live: tuple[Any, Any]) -> None:
    from elrwatch.devtools.alerting import wait_until

    cluster, stack = live
    since = time.time()
    cluster.kill_broker(2)
    try:
        cluster.wait_for(lambda: 2 in cluster.fenced_brokers(), "broker 2 fenced")
        fired = wait_until(lambda: stack.receiver.alerts("ElrwatchOfflinePartitions", "firing", since),
                           "ElrwatchOfflinePartitions at the receiver", ALERT_TIMEOUT)
        alert = fired[0]
        assert alert["labels"] == {"alertname": "ElrwatchOfflinePartitions", "severity": "critical",
                                   "job": "elrwatch-stream", "elrwatch_component": "stream",
                                   "instance": alert["labels"]["instance"]}
        assert alert["labels"]["instance"].startswith("127.0.0.1:")
        assert alert["annotations"]["runbook_url"] == f"{RUNBOOK}#elrwatchofflinepartitions"
        assert alert["annotations"]["summary"] == "1 Kafka partition(s) without a leader for 3s"
        # what Prometheus scraped: "solo" offline, both "payments" partitions under min ISR (ISR [3])
        assert stack.value("elrwatch_offline_partitions") == 1
        assert stack.value("elrwatch_global_under_min_isr_partitions") >= 2
    finally:
        cluster.start_broker(2)
    resolved = wait_until(lambda: stack.receiver.alerts("ElrwatchOfflinePartitions", "resolved", since),
                          "ElrwatchOfflinePartitions resolved at the receiver", ALERT_TIMEOUT)
    assert resolved[0]["annotations"]["runbook_url"] == f"{RUNBOOK}#elrwatchofflinepartitions"
    assert resolved[0]["receivedAt"] > fired[0]["receivedAt"]
    wait_until(lambda: stack.value("elrwatch_global_under_min_isr_partitions") == 0, "ISR restored", ALERT_TIMEOUT)


def test_receiver_saw_only_what_the_rules_say(live: tuple[Any, Any]) -> None:
    """Every notification so far names an alert of the chart's rules and carries a runbook link to its section."""
    _, stack = live
    loaded = set(stack.rules_loaded())
    for alert in stack.receiver.alerts():
        name = alert["labels"]["alertname"]
        assert name in loaded
        assert alert["annotations"]["runbook_url"] == f"{RUNBOOK}#{name.lower()}"
