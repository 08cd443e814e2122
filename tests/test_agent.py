"""`elrwatch agent` (bridge/agent.py) without Kafka: metadata events fed as lines, replicas as synthetic partition
directories. What it publishes, when, at what rate, keyed how, and that a restart publishes nothing twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from core_events import TOPIC_ID, change, envelope, partition, register, topic
from test_replica_log import batch, write_epochs, write_segment
from typer.testing import CliRunner

from elrwatch.bridge.agent import AgentError, ReplicaLogAgent
from elrwatch.bridge.runner import MemoryPublisher, Metrics, StateFile
from elrwatch.kafkaio.produce import EventKeys

NODE = 2


class Feed:
    """Metadata events handed to the agent at its next step, with increasing offsets."""

    def __init__(self) -> None:
        self.queue: list[bytes] = []
        self.offset = 0

    def add(self, *records: tuple[str, int, dict[str, Any]]) -> None:
        for type_name, version, data in records:
            self.queue.append(orjson.dumps(envelope(type_name, version, data, offset=self.offset)))
            self.offset += 1

    def __call__(self) -> list[bytes]:
        out, self.queue = self.queue, []
        return out


def node_dirs(tmp_path: Path, node_id: int = NODE) -> tuple[Path, Path]:
    data = tmp_path / "data"
    (data / "__cluster_metadata-0").mkdir(parents=True)
    (data / "meta.properties").write_text(f"version=1\nnode.id={node_id}\ncluster.id=x\n")
    return data, data / "__cluster_metadata-0"


def replica(data: Path, name: str, pid: int, *batches: bytes, topic_id: str = TOPIC_ID) -> Path:
    d = data / f"{name}-{pid}"
    d.mkdir(exist_ok=True)
    (d / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}\n")
    write_segment(d, 0, *batches)
    return d


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(
    tmp_path: Path,
    feed: Feed,
    state: StateFile | None = None,
    publisher: MemoryPublisher | None = None,
    max_rate: float = 100.0,
    clock: Clock | None = None,
) -> ReplicaLogAgent:
    data = tmp_path / "data"
    return ReplicaLogAgent(
        [data],
        data / "__cluster_metadata-0",
        publisher or MemoryPublisher(),
        state or StateFile(None),
        Metrics(),
        max_rate=max_rate,
        clock=clock or Clock(),
        wall_ms=lambda: 1_700_000_000_000,
        metadata_lines=feed,
    )


def published(publisher: MemoryPublisher, type_name: str = "REPLICA_LOG_INFO_RECORD") -> list[dict[str, Any]]:
    """The published events of one type (the replicas' log info by default)."""
    return [event for event in map(orjson.loads, publisher.lines) if event["type"] == type_name]


def stranded(feed: Feed, epoch: int = 100) -> None:
    """Topic t, partitions 0 and 1 on [1, 2, 3], node 2 registered; partition 0 loses its leader and ISR."""
    feed.add(
        register(1),
        register(NODE, epoch=epoch),
        register(3),
        topic("t"),
        partition(partition_id=0, replicas=[1, 2, 3], leader_epoch=4),
        partition(partition_id=1, replicas=[1, 2, 3]),
    )
    feed.add(change(partition_id=0, leader=-1, isr=[]))


def test_publishes_info_of_its_leaderless_replicas_keyed_like_their_partition(tmp_path: Path) -> None:
    data, _ = node_dirs(tmp_path)
    d = replica(data, "t", 0, batch(0, 10, 3), batch(10, 5, 4))
    write_epochs(d, (3, 0), (4, 10))
    replica(data, "t", 1, batch(0, 3, 0))
    feed = Feed()
    stranded(feed)
    publisher = MemoryPublisher()
    agent = make(tmp_path, feed, publisher=publisher)
    assert agent.node_id == NODE
    assert agent.step() == 2  # its log info and its clean-shutdown files (none: the broker runs)
    [event] = published(publisher)
    assert event == {
        "type": "REPLICA_LOG_INFO_RECORD",
        "version": 0,
        "timestamp": 1_700_000_000_000,
        "data": {
            "topicId": TOPIC_ID,
            "partitionId": 0,
            "brokerId": NODE,
            "brokerEpoch": 100,
            "logEndOffset": 15,
            "lastWrittenLeaderEpoch": 4,
            "currentLeaderEpoch": 5,
        },
    }
    assert EventKeys()(orjson.dumps(event)) == f"topic:{TOPIC_ID}".encode()
    assert agent.step() == 0  # nothing changed: nothing again

    # the core accepts it and the advice uses it
    from elrwatch.state.replay import replay_lines

    setup = [register(1), register(NODE), register(3), topic("t"), partition(partition_id=0, replicas=[1, 2, 3])]
    replayer = replay_lines([*(orjson.dumps(envelope(*r, offset=i)) for i, r in enumerate(setup)), *publisher.lines])
    assert replayer.quarantined == []
    assert replayer.cluster.log_info[(TOPIC_ID, 0)][NODE]["logEndOffset"] == 15


def test_republishes_when_the_log_end_offset_changes_or_the_broker_re_registers(tmp_path: Path) -> None:
    data, _ = node_dirs(tmp_path)
    d = replica(data, "t", 0, batch(0, 10, 3))
    feed = Feed()
    stranded(feed)
    publisher = MemoryPublisher()
    agent = make(tmp_path, feed, publisher=publisher)
    assert agent.step() == 2
    write_segment(d, 0, batch(0, 10, 3), batch(10, 2, 3))
    assert agent.step() == 1
    assert published(publisher)[-1]["data"]["logEndOffset"] == 12
    feed.add(register(NODE, epoch=250))  # the broker restarted: a new epoch, the old info is ignored by the core
    assert agent.step() == 2  # its info and its clean-shutdown report, both at the new epoch
    assert published(publisher)[-1]["data"]["brokerEpoch"] == 250
    # a leader again: nothing; leaderless again: published again although its info did not change
    feed.add(change(partition_id=0, leader=2, isr=[2]))
    assert agent.step() == 0
    feed.add(change(partition_id=0, leader=-1, isr=[]))
    assert agent.step() == 1
    assert published(publisher)[-1]["data"]["currentLeaderEpoch"] == 7


def test_no_registration_yet_no_replica_here_other_topic_same_name(tmp_path: Path) -> None:
    data, _ = node_dirs(tmp_path)
    replica(data, "t", 0, batch(0, 10, 3), topic_id="AAAAAAAAAAAAAAAAAAAAAQ")  # a deleted topic's directory
    feed = Feed()
    feed.add(topic("t"), partition(partition_id=0, replicas=[1, 2, 3], leader=-1, isr=[]))
    publisher = MemoryPublisher()
    agent = make(tmp_path, feed, publisher=publisher)
    assert agent.step() == 0  # its own registration not read yet
    feed.add(register(NODE))
    assert agent.step() == 1  # its clean-shutdown report only: the directory belongs to another topic id
    assert published(publisher) == []


def test_rate_is_bounded_and_the_rest_follows(tmp_path: Path) -> None:
    data, _ = node_dirs(tmp_path)
    feed = Feed()
    feed.add(register(NODE), topic("t"))
    for pid in range(10):
        replica(data, "t", pid, batch(0, pid + 1, 1))
        feed.add(partition(partition_id=pid, replicas=[2, 3], leader=-1, isr=[]))
    clock = Clock()
    publisher = MemoryPublisher()
    agent = make(tmp_path, feed, publisher=publisher, max_rate=4, clock=clock)
    assert agent.step() == 4  # its clean-shutdown report and 3 replicas
    assert agent.step() == 0  # no time passed: no token
    clock.now += 0.5
    assert agent.step() == 2
    clock.now += 10
    assert agent.step() == 4
    clock.now += 10
    assert agent.step() == 1
    assert sorted(e["data"]["partitionId"] for e in published(publisher)) == list(range(10))


def test_restart_publishes_nothing_twice_and_retries_pending(tmp_path: Path) -> None:
    data, _ = node_dirs(tmp_path)
    d = replica(data, "t", 0, batch(0, 10, 3))
    state = StateFile(tmp_path / "agent.json")
    feed = Feed()
    stranded(feed)
    first = MemoryPublisher()
    assert make(tmp_path, feed, state, first).step() == 2

    feed2 = Feed()
    stranded(feed2)  # a restarted agent reads the metadata log again from its start
    second = MemoryPublisher()
    assert make(tmp_path, feed2, state, second).step() == 0
    assert second.lines == []

    write_segment(d, 0, batch(0, 10, 3), batch(10, 1, 3))
    feed3 = Feed()
    stranded(feed3)
    failing = MemoryPublisher()
    failing.fail = 1
    assert make(tmp_path, feed3, state, failing).step() == 0  # not acknowledged: kept pending in the state file
    fourth = MemoryPublisher()
    feed4 = Feed()
    stranded(feed4)
    agent = make(tmp_path, feed4, state, fourth)
    assert agent.step() == 1  # the pending line, as it was
    assert published(fourth)[0]["data"]["logEndOffset"] == 11
    assert agent.step() == 0


def test_reads_the_clean_shutdown_files_as_kafka_does_and_publishes_what_changes(tmp_path: Path) -> None:
    data, _ = node_dirs(tmp_path)
    second = tmp_path / "data2"
    second.mkdir()
    (second / "meta.properties").write_text(f"node.id={NODE}\n")
    feed = Feed()
    feed.add(register(NODE, epoch=14))
    publisher = MemoryPublisher()
    agent = ReplicaLogAgent(
        [data, second],
        data / "__cluster_metadata-0",
        publisher,
        StateFile(None),
        Metrics(),
        clock=Clock(),
        wall_ms=lambda: 1_700_000_000_000,
        metadata_lines=feed,
    )

    def reports() -> list[dict[str, Any]]:
        return [e["data"] for e in published(publisher, "CLEAN_SHUTDOWN_RECORD")]

    running = {"brokerId": NODE, "registrationEpoch": 14, "cleanShutdownEpoch": None, "logDirs": 2}
    assert agent.step() == 1 and reports() == [running | {"logDirsWithFile": 0}]  # a running broker has none
    assert EventKeys()(publisher.lines[-1]) == f"broker:{NODE}".encode()
    assert agent.step() == 0  # unchanged: nothing again
    (data / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":14}')
    assert agent.step() == 1 and reports()[-1] == running | {"logDirsWithFile": 1}  # a dir without it: no epoch
    (second / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":13}')
    assert agent.step() == 1 and reports()[-1] == running | {"logDirsWithFile": 2}  # epochs differ: no epoch
    (second / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":14}')
    assert agent.step() == 1 and reports()[-1] == running | {"cleanShutdownEpoch": 14, "logDirsWithFile": 2}
    (second / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":"x"}')  # unreadable: Kafka's -1
    assert agent.step() == 1 and reports()[-1] == running | {"logDirsWithFile": 1}

    # the core keeps it: with the broker stopped (fenced at the end of a controlled shutdown), Kafka's rule applies
    from core_events import broker_change

    from elrwatch.state.replay import replay_lines

    (second / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":14}')
    agent.step()
    stop = broker_change(NODE, epoch=14, fenced=1, in_controlled_shutdown=1)
    meta = [orjson.dumps(envelope(*r, offset=i)) for i, r in enumerate([register(NODE, epoch=14), stop])]
    replayer = replay_lines([*meta, *publisher.lines])
    assert replayer.quarantined == []
    start = replayer.cluster.image.brokers.next_start(NODE)
    assert start.clean is True and "every log dir (2)" in start.basis
    killed = replay_lines([*meta, *publisher.lines[:-1]])  # the report before: one dir had no readable file
    assert killed.cluster.image.brokers.next_start(NODE).clean is False


def test_bad_setup_is_one_clear_error(tmp_path: Path) -> None:
    data, _ = node_dirs(tmp_path)
    with pytest.raises(AgentError, match="not a directory"):
        ReplicaLogAgent([tmp_path / "nope"], data, MemoryPublisher(), StateFile(None), Metrics())
    with pytest.raises(AgentError, match="no __cluster_metadata-0"):
        ReplicaLogAgent([data], tmp_path, MemoryPublisher(), StateFile(None), Metrics())
    other = tmp_path / "other"
    other.mkdir()
    (other / "meta.properties").write_text("node.id=7\n")
    with pytest.raises(AgentError, match="different nodes"):
        ReplicaLogAgent([data, other], data, MemoryPublisher(), StateFile(None), Metrics())
    state = tmp_path / "s.json"
    state.write_text('{"source": "agent", "nodeId": 9, "published": [], "pending": []}')
    with pytest.raises(AgentError, match="belongs to node 9"):
        ReplicaLogAgent([data], data, MemoryPublisher(), StateFile(state), Metrics())


def _agent_args(log_dirs: Path, metadata_log_dir: Path, *options: str) -> list[str]:
    """`elrwatch agent` publishing to topic ev at localhost:1, reading the replicas of ``log_dirs`` and the metadata
    log of ``metadata_log_dir``, with ``options``."""
    target = ["--bootstrap-servers", "localhost:1", "--topic", "ev"]
    return ["agent", *target, "--log-dirs", str(log_dirs), "--metadata-log-dir", str(metadata_log_dir), *options]


def test_cli_help_and_errors(tmp_path: Path) -> None:
    from elrwatch.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["agent", "--help"])
    assert result.exit_code == 0
    for flag in ("--log-dirs", "--metadata-log-dir", "--state-file", "--max-rate", "--security-protocol"):
        assert flag in result.output
    result = runner.invoke(app, _agent_args(tmp_path / "nope", tmp_path))
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "elrwatch: error:" in result.output


def test_cli_runs_the_agent_until_its_duration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`elrwatch agent` wires its options into run_agent: a node without stranded replicas publishes nothing, the
    state file is not written, and the command ends after --duration with exit 0."""
    from elrwatch.bridge import agent as agent_module
    from elrwatch.cli import app

    made: list[Any] = []

    class Fake(MemoryPublisher):
        def __init__(self, options: dict[str, str], topic: str) -> None:
            super().__init__()
            made.append((options, topic))

    monkeypatch.setattr(agent_module, "KafkaPublisher", Fake)
    data, _ = node_dirs(tmp_path)
    options = ["--state-file", str(tmp_path / "s.json"), "--interval", "0.05", "--duration", "0.3"]
    result = CliRunner().invoke(app, _agent_args(data, data, *options, "--security-protocol", "PLAINTEXT"))
    assert result.exit_code == 0, result.output
    assert made == [({"bootstrap.servers": "localhost:1", "topic": "ev", "security.protocol": "PLAINTEXT"}, "ev")]
    assert not (tmp_path / "s.json").exists()
