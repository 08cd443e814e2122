"""elrwatch against the REAL Kafka 4.4 controller: fault scenarios on a 3-broker cluster.

Every scenario drives the session's cluster (``real_kafka_cluster``: controller 0, brokers 1..3, ELR on, cluster
``min.insync.replicas`` 2) with fresh topics of a few partitions, and at each checkpoint waits until the cluster
has settled (metadata log quiet, DescribeTopicPartitions and DescribeCluster answers stable), dumps the controller's
metadata log with Kafka's DumpLogSegments, replays it through elrwatch and asserts (tests/real_kafka_check.py):

* every partition's leader, leader epoch, replicas, ISR, ELR and LastKnownELR equal DescribeTopicPartitions';
* every broker's fenced state equals DescribeCluster v2's;
* the controller model predicts exactly the PartitionChangeRecords Kafka wrote for every fence, unfence,
  controlled shutdown and re-registration, and explains every other one;
* the advice's outlook of every returning broker names the leader Kafka elected once it was back.

The scenario's last dump and every checkpoint's answers are saved under tests/data/real-kafka/<scenario>/ when
``ELRWATCH_REGEN_REAL_KAFKA=1`` (tests/test_real_kafka_golden.py replays them without a JVM).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from real_kafka_check import (
    KAFKA_VERSION,
    ControllerReport,
    check_controller,
    compare_brokers,
    compare_partitions,
    replay_dump,
    replay_problems,
)

pytestmark = [pytest.mark.real_kafka, pytest.mark.timeout(300)]

DATA = Path(__file__).parent / "data" / "real-kafka"
REGEN = os.environ.get("ELRWATCH_REGEN_REAL_KAFKA") == "1"
CLUSTER_MIN_ISR = "2"


def dump_end_offset(dump: str) -> int:
    """The offset after the last record batch of a DumpLogSegments text."""
    last = -1
    for line in dump.splitlines():
        if line.startswith("baseOffset:"):
            last = int(line.split()[3])  # "baseOffset: N lastOffset: M ..."
    return last + 1


@dataclass
class Scenario:
    """One scenario's checkpoints (label, answers, end offset) and its last dump; saved as a golden fixture."""

    name: str
    description: str
    cluster: Any
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    dump: str = ""
    report: ControllerReport | None = None  # the controller check of the last checkpoint
    cluster_min_isr: str = CLUSTER_MIN_ISR  # the last cluster-level min.insync.replicas this scenario set

    def topic(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def set_cluster_min_isr(self, value: str) -> None:
        """The cluster-level min.insync.replicas (restored to 2 after the scenario if it ends elsewhere)."""
        self.cluster.set_cluster_config("min.insync.replicas", value)
        self.cluster_min_isr = value

    def checkpoint(self, label: str, *, retries: int = 3) -> dict[str, Any]:
        """Settle, dump, replay, assert the three equalities; returns the replayed report document."""
        cluster = self.cluster
        for _ in range(retries):
            dtp, described = cluster.settle()
            size = cluster.metadata_log_size()
            dump = cluster.dump_metadata_log()
            if cluster.metadata_log_size() == size:
                break
        else:  # pragma: no cover - the log kept moving under the dump
            pytest.fail(f"{self.name}/{label}: the metadata log kept growing while it was dumped")
        rows = [{"topic": t, "partition": p, **answer} for (t, p), answer in sorted(dtp.items())]
        self.checkpoints.append(
            {
                "label": label,
                "endOffset": dump_end_offset(dump),
                "describeTopicPartitions": rows,
                "describeCluster": {str(b): fenced for b, fenced in sorted(described.items())},
            }
        )
        self.dump = dump
        replayer = replay_dump(dump, f"{self.name}/{label}")
        document = replayer.document(advice=False)
        problems = replay_problems(replayer)
        problems += compare_partitions(document, rows)
        problems += compare_brokers(document, described)
        report = self.report = check_controller(dump)
        problems += report.mismatches
        if problems:
            saved = Path(os.environ.get("ELRWATCH_REAL_KAFKA_FAILED", "/tmp/elrwatch-real-kafka-failed"))
            saved.mkdir(parents=True, exist_ok=True)
            (saved / f"{self.name}-{label}.dump").write_text(dump)
            pytest.fail(
                f"{self.name}/{label}: elrwatch differs from Kafka (dump saved in {saved}):\n" + "\n".join(problems)
            )
        return document

    def save(self) -> None:
        folder = DATA / self.name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "metadata.dump").write_text(self.dump)
        (folder / "answers.json").write_text(
            json.dumps(
                {
                    "kafkaVersion": KAFKA_VERSION,
                    "scenario": self.name,
                    "description": self.description,
                    "checkpoints": self.checkpoints,
                },
                indent=1,
            )
            + "\n"
        )


def restore(scenario: Scenario) -> None:
    """Every broker running and unfenced again, the cluster's min ISR back to 2 (if the scenario left it elsewhere),
    the log quiet."""
    cluster = scenario.cluster
    for broker_id, node in cluster.brokers.items():
        if node.stopped:
            cluster.resume_broker(broker_id)
        if not node.running:
            cluster.start_broker(broker_id)
    cluster.wait_for(
        lambda: not cluster.fenced_brokers() and len(cluster.describe_cluster()) == len(cluster.brokers),
        "every broker unfenced",
        timeout=60,
    )
    if scenario.cluster_min_isr != CLUSTER_MIN_ISR:
        scenario.set_cluster_min_isr(CLUSTER_MIN_ISR)
    cluster.wait_metadata_quiet(quiet_for=1.0)


@pytest.fixture
def scenario(real_kafka_cluster: Any, request: pytest.FixtureRequest) -> Iterator[Scenario]:
    """A scenario named after the test; every broker is restored after it, and its fixture saved when regenerating."""
    name = request.node.name.removeprefix("test_")
    doc = (request.node.function.__doc__ or "").strip().splitlines()[0]
    s = Scenario(name, doc, real_kafka_cluster)
    failed_before = request.session.testsfailed
    try:
        yield s
    finally:
        restore(s)
    if REGEN and s.checkpoints and request.session.testsfailed == failed_before:  # a passed scenario only
        s.save()


def wait_fenced(cluster: Any, broker_id: int) -> None:
    cluster.wait_for(lambda: broker_id in cluster.fenced_brokers(), f"broker {broker_id} fenced")


def wait_partition(
    cluster: Any,
    topic: str,
    partition: int,
    what: str,
    predicate: Callable[[dict[str, Any]], bool],
    timeout: float = 30,
) -> None:
    cluster.wait_for(
        lambda: predicate(cluster.describe_topic_partitions([topic])[(topic, partition)]),
        f"{topic}-{partition}: {what}",
        timeout=timeout,
    )


# -------------------------------------------------------------------------------------------------------------


def test_one_broker_killed(scenario: Scenario) -> None:
    """One broker hard-killed (kill -9) under a 3-partition RF-3 topic, then restarted."""
    c = scenario.cluster
    topic = scenario.topic("killed")
    c.create_topic(topic, partitions=3, replication_factor=3)
    scenario.checkpoint("created")
    c.kill_broker(2)
    wait_fenced(c, 2)
    doc = scenario.checkpoint("broker-2-killed")
    for p in (p for p in doc["partitions"] if p["topic"] == topic):
        assert 2 not in p["isr"] and p["leader"] in (1, 3) and not p["elr"], p
    c.start_broker(2)
    for partition in range(3):
        wait_partition(c, topic, partition, "2 back in the ISR", lambda d: 2 in d["isr"])
    scenario.checkpoint("broker-2-back")


def test_killed_until_leaderless(scenario: Scenario) -> None:
    """Brokers killed one by one (3 keeps answering) until partitions on 1 and 2 are leaderless: ELR and
    LastKnownELR appear."""
    c = scenario.cluster
    topic, wide = scenario.topic("leaderless"), scenario.topic("leaderless-rf3")
    c.create_topic(topic, replica_assignment={0: [1, 2], 1: [2, 1]})
    c.create_topic(wide, replica_assignment={0: [1, 2, 3]})
    c.kill_broker(2)
    wait_fenced(c, 2)
    scenario.checkpoint("broker-2-killed")
    c.kill_broker(1)
    wait_fenced(c, 1)
    doc = scenario.checkpoint("broker-1-killed")
    parts = {p["partitionId"]: p for p in doc["partitions"] if p["topic"] == topic}
    assert parts[0]["leader"] == parts[1]["leader"] == -1
    assert set(parts[0]["elr"]) == {1, 2} and parts[0]["lastKnownElr"] == [1]
    assert set(parts[1]["elr"]) == {1, 2} and parts[1]["lastKnownElr"] == [1]
    p = next(p for p in doc["partitions"] if p["topic"] == wide)
    assert p["leader"] == 3 and p["isr"] == [3] and set(p["elr"]) == {1}, p


def test_elr_member_unclean_restart(scenario: Scenario) -> None:
    """An ELR member comes back after an unclean shutdown (kill -9): it leaves the ELR at registration and is
    not elected; the other ELR member (also killed) then comes back and is removed too, so the last known
    leader is elected (RECOVERING)."""
    c = scenario.cluster
    topic, wide = scenario.topic("elr-unclean"), scenario.topic("elr-unclean-rf3")
    c.create_topic(topic, replica_assignment={0: [2, 3]})
    c.create_topic(wide, replica_assignment={0: [1, 2, 3]})
    c.kill_broker(3)
    wait_fenced(c, 3)
    c.kill_broker(2)
    wait_fenced(c, 2)
    doc = scenario.checkpoint("brokers-3-2-killed")
    parts = {p["partitionId"]: p for p in doc["partitions"] if p["topic"] == topic}
    assert parts[0]["leader"] == -1 and set(parts[0]["elr"]) == {2, 3} and parts[0]["lastKnownElr"] == [2]
    p = next(p for p in doc["partitions"] if p["topic"] == wide)
    assert p["leader"] == 1 and set(p["elr"]) == {2}, p
    c.start_broker(3)
    doc = scenario.checkpoint("broker-3-back-unclean")
    parts = {p["partitionId"]: p for p in doc["partitions"] if p["topic"] == topic}
    assert parts[0]["leader"] == -1 and parts[0]["elr"] == [2], parts[0]
    c.start_broker(2)
    wait_partition(c, topic, 0, "a leader", lambda d: d["leader"] >= 0)
    doc = scenario.checkpoint("broker-2-back-unclean")
    parts = {p["partitionId"]: p for p in doc["partitions"] if p["topic"] == topic}
    assert parts[0]["leader"] == 2 and parts[0]["elr"] == [] and parts[0]["lastKnownElr"] == []


def test_last_replica_standing_returns(scenario: Scenario) -> None:
    """The last replica standing (the last ISR member, min ISR 1) dies and comes back after kill -9: it is the
    last known leader and is elected, RECOVERING, until it reports recovery."""
    c = scenario.cluster
    topic = scenario.topic("last-standing")
    c.create_topic(topic, replica_assignment={0: [1, 2], 1: [2, 1]}, configs={"min.insync.replicas": "1"})
    c.kill_broker(2)
    wait_fenced(c, 2)
    c.kill_broker(1)
    wait_fenced(c, 1)
    c.start_broker(1)
    for partition in (0, 1):
        wait_partition(c, topic, partition, "led by 1", lambda d: d["leader"] == 1)
    doc = scenario.checkpoint("broker-1-back")
    parts = {p["partitionId"]: p for p in doc["partitions"] if p["topic"] == topic}
    for p in parts.values():
        assert p["leader"] == 1 and p["isr"] == [1] and p["elr"] == [] and p["lastKnownElr"] == [], p
    c.start_broker(2)
    for partition in (0, 1):
        wait_partition(c, topic, partition, "2 back in the ISR", lambda d: 2 in d["isr"])
    scenario.checkpoint("broker-2-back")


def test_min_isr_raised_and_lowered(scenario: Scenario) -> None:
    """min.insync.replicas raised and lowered at topic and cluster level while a partition has an ELR: every
    change writes a ClearElrRecord."""
    c = scenario.cluster
    topic = scenario.topic("min-isr")
    c.create_topic(topic, replica_assignment={0: [1, 2, 3], 1: [2, 1, 3]})
    c.kill_broker(3)
    wait_fenced(c, 3)
    c.kill_broker(2)
    wait_fenced(c, 2)
    doc = scenario.checkpoint("elr")
    assert all(set(p["elr"]) == {2} for p in doc["partitions"] if p["topic"] == topic)
    c.set_topic_config(topic, "min.insync.replicas", "3")
    doc = scenario.checkpoint("topic-raised")
    assert all(p["elr"] == [] for p in doc["partitions"] if p["topic"] == topic)
    c.set_topic_config(topic, "min.insync.replicas", "1")
    scenario.checkpoint("topic-lowered")
    c.set_topic_config(topic, "min.insync.replicas", None)
    scenario.set_cluster_min_isr("3")
    scenario.checkpoint("cluster-raised")
    scenario.set_cluster_min_isr("1")
    scenario.checkpoint("cluster-lowered")
    scenario.set_cluster_min_isr(CLUSTER_MIN_ISR)
    c.start_broker(2)
    c.start_broker(3)
    for partition in (0, 1):
        wait_partition(c, topic, partition, "full ISR", lambda d: len(d["isr"]) == 3)
    scenario.checkpoint("restored")


def test_unclean_election_admin(scenario: Scenario) -> None:
    """An unclean election through the admin API (ElectLeaders type 1): the only live replica is neither in the
    ISR nor in the ELR, so only an unclean election gives the partition a leader (RECOVERING)."""
    c = scenario.cluster
    topic = scenario.topic("unclean")
    c.create_topic(topic, replica_assignment={0: [1, 2, 3]})
    for broker in (3, 2, 1):
        c.kill_broker(broker)
        if broker != 1:
            wait_fenced(c, broker)
    c.start_broker(3)  # the admin client needs a live broker; 3 is neither in the ISR nor in the ELR
    wait_fenced_or_gone = lambda: 1 in c.fenced_brokers()  # noqa: E731
    c.wait_for(wait_fenced_or_gone, "broker 1 fenced")
    doc = scenario.checkpoint("leaderless")
    p = next(p for p in doc["partitions"] if p["topic"] == topic)
    assert p["leader"] == -1 and 3 not in p["elr"] and 3 not in p["isr"], p
    c.elect_leaders(topic, [0], unclean=True)
    wait_partition(c, topic, 0, "led by 3", lambda d: d["leader"] == 3)
    doc = scenario.checkpoint("unclean-elected")
    p = next(p for p in doc["partitions"] if p["topic"] == topic)
    assert p["leader"] == 3 and p["isr"] == [3] and p["elr"] == [] and p["lastKnownElr"] == [], p


def test_reassignment(scenario: Scenario) -> None:
    """A reassignment of one partition to other brokers ([1, 2] → [2, 3]) while another partition stays."""
    c = scenario.cluster
    topic = scenario.topic("reassign")
    c.create_topic(topic, replica_assignment={0: [1, 2], 1: [2, 3]})
    c.reassign(topic, 0, [2, 3])
    wait_partition(c, topic, 0, "reassigned, full ISR", lambda d: d["replicas"] == [2, 3] and len(d["isr"]) == 2)
    doc = scenario.checkpoint("reassigned")
    p = next(p for p in doc["partitions"] if p["topic"] == topic and p["partitionId"] == 0)
    assert p["addingReplicas"] == [] and p["removingReplicas"] == [] and p["leader"] in (2, 3)


def test_controlled_shutdown(scenario: Scenario) -> None:
    """A controlled shutdown (SIGTERM) of a broker that leads partitions, then its clean restart."""
    c = scenario.cluster
    topic = scenario.topic("shutdown")
    c.create_topic(topic, replica_assignment={0: [2, 1, 3], 1: [2, 3, 1], 2: [1, 3, 2]})
    c.stop_broker(2)
    wait_fenced(c, 2)
    doc = scenario.checkpoint("broker-2-stopped")
    parts = {p["partitionId"]: p for p in doc["partitions"] if p["topic"] == topic}
    assert parts[0]["leader"] in (1, 3) and parts[1]["leader"] == 3 and 2 not in parts[0]["isr"]
    c.start_broker(2)
    for partition in (0, 1):
        wait_partition(c, topic, partition, "2 back in the ISR", lambda d: 2 in d["isr"])
    scenario.checkpoint("broker-2-back")


def test_paused_broker(scenario: Scenario) -> None:
    """A broker frozen (SIGSTOP) until its session expires, then resumed (SIGCONT): fenced, then unfenced and back
    in the ISRs."""
    c = scenario.cluster
    topic = scenario.topic("paused")
    c.create_topic(topic, replica_assignment={0: [3, 1, 2], 1: [1, 3, 2]})
    c.pause_broker(3)
    wait_fenced(c, 3)
    doc = scenario.checkpoint("broker-3-paused")
    parts = {p["partitionId"]: p for p in doc["partitions"] if p["topic"] == topic}
    assert parts[0]["leader"] in (1, 2) and all(3 not in p["isr"] for p in parts.values()), parts
    c.resume_broker(3)
    c.wait_for(lambda: 3 not in c.fenced_brokers(), "broker 3 unfenced")
    for partition in (0, 1):
        wait_partition(c, topic, partition, "3 back in the ISR", lambda d: 3 in d["isr"])
    scenario.checkpoint("broker-3-resumed")


def test_last_isr_member_controlled_shutdown(scenario: Scenario) -> None:
    """The last ISR member shuts down cleanly (SIGTERM) while the other replica is dead: the partition is leaderless
    with both in the ELR; the member comes back cleanly and is elected from the ELR (clean, not RECOVERING)."""
    c = scenario.cluster
    topic = scenario.topic("last-clean")
    c.create_topic(topic, replica_assignment={0: [2, 1]})
    c.kill_broker(1)
    wait_fenced(c, 1)
    c.stop_broker(2)
    wait_fenced(c, 2)
    doc = scenario.checkpoint("leaderless")
    p = next(p for p in doc["partitions"] if p["topic"] == topic)
    assert p["leader"] == -1 and set(p["elr"]) == {1, 2} and p["lastKnownElr"] == [2], p
    c.start_broker(2)
    wait_partition(c, topic, 0, "led by 2", lambda d: d["leader"] == 2)
    doc = scenario.checkpoint("broker-2-back-clean")
    p = next(p for p in doc["partitions"] if p["topic"] == topic)
    assert p["leader"] == 2 and p["isr"] == [2] and p["elr"] == [1] and p["leaderRecoveryState"] == 0, p


def test_unclean_enabled_topic(scenario: Scenario) -> None:
    """unclean.leader.election.enable=true on a topic whose replicas all died: the first one back after kill -9
    leaves the ELR at registration and is elected uncleanly (RECOVERING) as soon as it is unfenced."""
    c = scenario.cluster
    topic = scenario.topic("unclean-on")
    c.create_topic(topic, replica_assignment={0: [1, 2], 1: [2, 1]})
    c.set_topic_config(topic, "unclean.leader.election.enable", "true")
    c.kill_broker(2)
    wait_fenced(c, 2)
    c.kill_broker(1)
    wait_fenced(c, 1)
    doc = scenario.checkpoint("leaderless")
    assert all(p["leader"] == -1 and set(p["elr"]) == {1, 2} for p in doc["partitions"] if p["topic"] == topic)
    c.start_broker(2)
    for partition in (0, 1):
        wait_partition(c, topic, partition, "led by 2", lambda d: d["leader"] == 2)
    doc = scenario.checkpoint("broker-2-back-unclean")
    for p in (p for p in doc["partitions"] if p["topic"] == topic):
        assert p["leader"] == 2 and p["isr"] == [2] and p["elr"] == [] and p["lastKnownElr"] == [], p


def test_unregistered_broker(scenario: Scenario) -> None:
    """A dead broker unregistered (UnregisterBroker): it leaves DescribeCluster, keeps its ELR seats (Kafka's ELR
    pass does not treat it as an unclean shutdown), and registers afresh when it starts again."""
    c = scenario.cluster
    topic = scenario.topic("unregistered")
    c.create_topic(topic, replica_assignment={0: [1, 3], 1: [3, 1]})
    c.kill_broker(3)
    wait_fenced(c, 3)
    c.unregister_broker(3)
    c.wait_for(lambda: 3 not in c.describe_cluster(), "broker 3 unregistered")
    doc = scenario.checkpoint("broker-3-unregistered")
    assert next(b for b in doc["brokers"] if b["brokerId"] == 3)["state"] == "unregistered"
    for p in (p for p in doc["partitions"] if p["topic"] == topic):
        assert p["leader"] == 1 and p["isr"] == [1] and p["elr"] == [3], p
    c.start_broker(3)
    for partition in (0, 1):
        wait_partition(c, topic, partition, "3 back in the ISR", lambda d: 3 in d["isr"])
    scenario.checkpoint("broker-3-back")


def test_stale_elr_index_after_min_isr_change(scenario: Scenario) -> None:
    """Kafka's broker → ELR index goes stale: min.insync.replicas changes clear broker 2's ELR seat (the index
    keeps it), 2 rejoins and leaves again (the index lists the partition twice), and its unclean restart then
    removes it from the ELR twice: two identical records (controller.ElrIndex)."""
    c = scenario.cluster
    topic = scenario.topic("stale-elr")
    c.create_topic(topic, replica_assignment={0: [1, 2, 3]}, configs={"min.insync.replicas": "3"})
    c.kill_broker(2)
    wait_fenced(c, 2)
    c.set_topic_config(topic, "min.insync.replicas", "2")  # a ClearElrRecord: ELR [] (the index keeps 2)
    wait_partition(c, topic, 0, "ELR cleared", lambda d: d["elr"] == [])
    c.set_topic_config(topic, "min.insync.replicas", "3")
    c.start_broker(2)
    wait_partition(c, topic, 0, "2 back in the ISR", lambda d: 2 in d["isr"])
    c.kill_broker(2)
    wait_fenced(c, 2)
    doc = scenario.checkpoint("elr-again")
    p = next(p for p in doc["partitions"] if p["topic"] == topic)
    assert p["elr"] == [2] and p["leader"] == 1, p
    assert scenario.report is not None
    doubled = scenario.report.duplicate_elr_passes
    c.start_broker(2)
    wait_partition(c, topic, 0, "2 back in the ISR", lambda d: 2 in d["isr"])
    doc = scenario.checkpoint("broker-2-back-unclean")
    p = next(p for p in doc["partitions"] if p["topic"] == topic)
    assert p["elr"] == [] and 2 in p["isr"], p
    assert scenario.report.duplicate_elr_passes > doubled  # the model predicted the doubled records
