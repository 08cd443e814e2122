"""`elrwatch recover`'s steps and refusals (bridge/recover.py, state/recovery.py) against a fake admin that behaves as
Kafka's controller does for these calls: a same-set reorder is applied, an unclean election takes the first live
replica. The real cluster's run is tests/test_recover_real.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson
import pytest
from test_advice import _cluster, _strand
from typer.testing import CliRunner

from elrwatch.bridge.recover import ERROR, RECOVERED, REFUSED, Described, Recovery, StepFailed, StoreView
from elrwatch.state import report
from elrwatch.state.recovery import check_store_age
from elrwatch.state.replay import replay_lines

#: Broker ids of the simulated cluster: partition topic-0-0 on [0, 1, 2]; 0 fenced, 1 and 2 back; 2 the longest log.
LOG_INFO = [(1, None, 100, 3), (2, None, 150, 3)]


def stranded_doc() -> dict[str, Any]:
    cluster, _ = _cluster(_strand, log_info=LOG_INFO)
    topic = cluster.topic_by_name("topic-0")
    return report.partition_doc(cluster, topic, cluster.partition(topic.topic_id, 0), report.load_advice())


class FakeAdmin:
    """A partition [0, 1, 2] with no leader, broker 0 fenced; ``fail``: the call that raises."""

    def __init__(self, topic_id: str, end: int = 150, fail: str = "", elects: int | None = None) -> None:
        self.state = Described(topic_id, -1, 5, (0, 1, 2), (), ())
        self.alive = {1, 2}
        self.end, self.fail, self.elects = end, fail, elects
        self.calls: list[str] = []

    def describe(self, topic: str, partition_id: int) -> Described:
        return self.state

    def alive_brokers(self) -> set[int]:
        return set(self.alive)

    def reorder(self, topic: str, partition_id: int, replicas: Sequence[int]) -> None:
        self.calls.append(f"reorder {list(replicas)}")
        if self.fail == "reorder" or (self.fail == "restore" and self.state.replicas != (0, 1, 2)):
            raise StepFailed("AlterPartitionReassignments refused: injected")
        self.state = replace(self.state, replicas=tuple(replicas))

    def elect_unclean(self, topic: str, partition_id: int) -> None:
        self.calls.append("elect")
        if self.fail == "elect":
            raise StepFailed("ElectLeaders(UNCLEAN) failed: injected")
        first_live = next(b for b in self.state.replicas if b in self.alive)
        leader = first_live if self.elects is None else self.elects
        self.state = replace(self.state, leader=leader, leader_epoch=self.state.leader_epoch + 1)

    def end_offset(self, topic: str, partition_id: int) -> int:
        return self.end if self.state.leader == 2 else {1: 100}.get(self.state.leader, 0)


def run(admin: FakeAdmin, doc: dict[str, Any], **kwargs: Any) -> tuple[int, list[str], list[dict[str, Any]]]:
    lines: list[str] = []
    published: list[dict[str, Any]] = []
    recovery = Recovery(admin, lines.append, published.append, timeout_s=1, poll_s=0.01)
    options = {"max_store_age_s": 60.0, **kwargs}
    store = StoreView(doc, options.pop("age_s", 1.0))
    return recovery.run("topic-0", 0, store, **options), lines, published


def test_execute_reorders_elects_verifies_and_restores() -> None:
    doc = stranded_doc()
    admin = FakeAdmin(doc["topicId"])
    code, lines, published = run(admin, doc, execute=True)
    assert code == RECOVERED, lines
    assert admin.calls == ["reorder [2, 0, 1]", "elect", "reorder [0, 1, 2]"]
    assert admin.state.leader == 2 and admin.state.replicas == (0, 1, 2)
    assert lines[0].startswith("plan for topic-0-0: elect 2 uncleanly")
    assert lines[1] == "records each other replica loses: unknown on 0 (fenced, not reported), 0 records on 1"
    assert lines[2] == "Kafka's own unclean election would elect 1 (first live replica, losing ≈ 50 records)"
    assert lines[-5:] == [
        "step 1/4 reorder: replicas [0, 1, 2] → [2, 0, 1] (same set, 2 first): done",
        "step 2/4 elect: electLeaders(UNCLEAN) for topic-0-0: accepted",
        "step 3/4 verify: leader 2 (leader epoch 6); end offset 150 = 2's reported log end offset 150",
        "step 4/4 restore: replicas [2, 0, 1] → [0, 1, 2] (preferred leadership as before): done",
        "recovered topic-0-0: elected 2, lost unknown on 0 (fenced, not reported), 0 records on 1; look for hanging "
        "transactions next",
    ]
    assert [(e["data"]["step"], e["data"]["outcome"]) for e in published] == [
        ("reorder", "done"),
        ("elect", "done"),
        ("verify", "done"),
        ("restore", "done"),
    ]
    # The records replay onto the partition: its document says what the operator did.
    events = [orjson.dumps(e) for e in published]
    cluster = replay_lines([*_cluster_lines(), *events]).cluster
    topic = cluster.topic_by_name("topic-0")
    recovered = report.partition_doc(cluster, topic, cluster.partition(topic.topic_id, 0))["operatorRecovery"]
    assert recovered["summary"] == (
        "recovered by operator: elected 2, lost unknown on 0, 0 records on 1; replica order restored to [0, 1, 2]"
    )


def _cluster_lines() -> list[bytes]:
    import io

    from test_advice import Simulator

    out = io.BytesIO()
    sim = Simulator(brokers=3, topics=1, partitions=1, replication_factor=3, min_isr=2, seed=4, out=out)
    sim.bootstrap()
    _strand(sim)
    sim.flush()
    return out.getvalue().splitlines()


def test_dry_run_changes_nothing_and_publishes_nothing() -> None:
    doc = stranded_doc()
    admin = FakeAdmin(doc["topicId"])
    code, lines, published = run(admin, doc)
    assert code == RECOVERED and admin.calls == [] and published == []
    assert lines[-1] == "dry run: nothing changed; carry it out with: elrwatch recover topic-0 0 --execute"


@pytest.mark.parametrize(
    ("change", "kwargs", "expected"),
    [
        ({"leader": 1}, {}, "refused: topic-0-0 has leader 1 (Kafka reports it): nothing to recover"),
        ({"isr": (0,)}, {}, "refused: topic-0-0's ISR [0] is not empty"),
        ({"elr": (0,)}, {}, "refused: topic-0-0's ELR [0] is not empty"),
        ({}, {"candidate": 0, "accept_unknown_log": True}, "refused: candidate 0 is not alive"),
        ({}, {"candidate": 7}, "refused: 7 is not a replica of topic-0-0"),
        ({}, {"age_s": 61.0}, "refused: the status store's view is 61 s old (bound 60 s, --max-store-age)"),
        ({}, {"age_s": None}, "refused: the status store has never been written"),
        ({}, {"candidate": 1, "age_s": 1.0}, None),  # 1 has reported: allowed
    ],
)
def test_refusals_name_their_reason_and_change_nothing(
    change: dict[str, Any], kwargs: dict[str, Any], expected: str | None
) -> None:
    doc = stranded_doc()
    admin = FakeAdmin(doc["topicId"])
    admin.state = replace(admin.state, **change)
    code, lines, published = run(admin, doc, execute=True, **kwargs)
    if expected is None:
        assert code == RECOVERED and admin.state.leader == 1, lines
        return
    assert code == REFUSED and len(lines) == 1 and lines[0].startswith(expected), lines
    assert admin.calls == [] and published == []


def test_unreported_candidate_log_is_refused_unless_accepted() -> None:
    cluster, _ = _cluster(_strand)  # no log info at all
    topic = cluster.topic_by_name("topic-0")
    doc = report.partition_doc(cluster, topic, cluster.partition(topic.topic_id, 0), report.load_advice())
    admin = FakeAdmin(doc["topicId"])
    code, lines, _ = run(admin, doc, execute=True, candidate=2)
    assert code == REFUSED and lines == [
        "refused: no current log info from candidate 2 (its agent has not reported since its broker registered): "
        "give --candidate 2 --accept-unknown-log to elect it anyway"
    ]
    code, lines, _ = run(admin, doc, execute=True)  # the recommendation itself has no log-info candidate
    assert code == REFUSED and "no current log info from candidate 1" in lines[0], lines
    code, lines, _ = run(admin, doc, execute=True, candidate=2, accept_unknown_log=True)
    assert code == RECOVERED and admin.state.leader == 2, lines
    assert "(2's log end offset was not reported)" in lines[-3]


def test_a_failed_election_puts_the_order_back_and_says_rerun() -> None:
    doc = stranded_doc()
    admin = FakeAdmin(doc["topicId"], fail="elect")
    code, lines, published = run(admin, doc, execute=True)
    assert code == ERROR and admin.state.replicas == (0, 1, 2)
    assert lines[-3:] == [
        "step 2/4 elect: failed: ElectLeaders(UNCLEAN) failed: injected",
        "step 4/4 restore: replicas → [0, 1, 2]: done",
        "error: topic-0-0: step elect failed; left: leader none, replica order [0, 1, 2] (original order "
        "[0, 1, 2]); re-run: elrwatch recover topic-0 0 --execute",
    ]
    assert [(e["data"]["step"], e["data"]["outcome"]) for e in published][-2:] == [
        ("elect", "failed"),
        ("restore", "done"),
    ]


def test_a_failed_restore_names_the_order_left_and_how_to_put_it_back() -> None:
    doc = stranded_doc()
    admin = FakeAdmin(doc["topicId"], fail="restore")
    code, lines, _ = run(admin, doc, execute=True)
    assert code == ERROR and admin.state.leader == 2 and admin.state.replicas == (2, 0, 1)
    assert lines[-1] == (
        "error: topic-0-0: step restore failed; left: leader 2, replica order [2, 0, 1] (original order [0, 1, 2]); "
        "put the order back with: elrwatch recover topic-0 0 --restore-order 0,1,2"
    )
    again = Recovery(FakeAdminAt(admin), lambda line: None)
    assert again.restore_order("topic-0", 0, [0, 1, 2]) == RECOVERED


class FakeAdminAt(FakeAdmin):
    """The same partition, the injected failure gone (a later run)."""

    def __init__(self, other: FakeAdmin) -> None:
        super().__init__(other.state.topic_id)
        self.state = other.state


def test_kafka_electing_another_replica_or_another_end_offset_is_an_error() -> None:
    doc = stranded_doc()
    code, lines, _ = run(FakeAdmin(doc["topicId"], elects=1), doc, execute=True)
    assert code == ERROR and "step 3/4 verify: failed: Kafka elected 1, not the candidate 2" in lines, lines
    assert lines[-1].endswith("the partition has a leader: look for hanging transactions")
    for end in (140, 0):  # an end offset of 0 is an answer too
        code, lines, _ = run(FakeAdmin(doc["topicId"], end=end), doc, execute=True)
        assert code == ERROR and lines[-1] == (
            f"error: topic-0-0 elected 2, but its end offset {end} is not 2's reported log end offset 150: its log "
            "changed after its agent reported"
        )


def test_a_failed_publish_is_said_and_the_recovery_goes_on() -> None:
    doc = stranded_doc()
    admin = FakeAdmin(doc["topicId"])
    lines: list[str] = []

    def broken(_envelope: dict[str, Any]) -> None:
        raise ConnectionError("event topic down")

    code = Recovery(admin, lines.append, broken, timeout_s=1, poll_s=0.01).run(
        "topic-0", 0, StoreView(doc, 1.0), max_store_age_s=60, execute=True
    )
    assert code == RECOVERED and admin.state.leader == 2
    assert (
        "warning: the verify step's record was not published to the event topic: ConnectionError: event topic down"
        in lines
    )


def test_store_age_bound() -> None:
    check_store_age(59.9, 60)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--accept-unknown-log"], "--accept-unknown-log needs --candidate N"),
        (["--execute", "--bootstrap-servers", "b:9092"], "--execute needs --topic"),
        (["--restore-order", "1,1"], "--restore-order takes distinct broker ids"),
        ([], "--bootstrap-servers (or --admin-bootstrap-servers) is required"),
    ],
)
def test_cli_usage_errors(args: list[str], expected: str) -> None:
    from elrwatch.cli import app

    result = CliRunner().invoke(app, ["recover", "t", "0", *args], env={"ELRWATCH_BOOTSTRAP_SERVERS": ""})
    assert result.exit_code == 2 and expected in result.output, result.output


def test_cli_connects_to_the_cluster_with_the_shared_tls_and_sasl_options(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`recover`'s admin client takes the Kafka connection options every command shares, on
    --admin-bootstrap-servers."""
    from elrwatch.cli import app
    from elrwatch.kafkaio import clients
    from elrwatch.kafkaio.config import SourceError

    seen: list[dict[str, str]] = []

    def make_admin(options: dict[str, str], **settings: Any) -> Any:
        seen.append(dict(options))
        raise SourceError("cannot reach a:9093 (stopped by the test)")

    monkeypatch.setattr(clients, "make_admin", make_admin)
    password = tmp_path / "sasl"
    password.write_text("s3cret\n")
    args = ["recover", "div", "0", "--bootstrap-servers", "ev:9093", "--admin-bootstrap-servers", "a:9093"]
    args += ["--security-protocol", "SASL_SSL", "--sasl-mechanism", "PLAIN", "--sasl-username", "ops"]
    args += ["--sasl-password-file", str(password), "--ssl-cafile", "/etc/kafka/ca.pem"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "stopped by the test" in result.output, result.output
    assert seen == [
        {
            "bootstrap.servers": "a:9093",
            "security.protocol": "SASL_SSL",
            "ssl.cafile": "/etc/kafka/ca.pem",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "ops",
            "sasl.password.file": str(password),
        }
    ]
