"""devtools/fault_injector.py against a fake cluster (no JVM): the schedule takes at most two brokers down, never
the controller, brings every broker back, logs one line per action, elects uncleanly a partition Kafka leaves
leaderless, and stops promptly."""

from __future__ import annotations

import threading
import time

import pytest

from elrwatch.devtools.fault_injector import EPISODES, FaultInjector


class FakeCluster:
    """The KafkaCluster calls the injector makes; fencing is immediate, one partition stays leaderless until an
    unclean election."""

    def __init__(self) -> None:
        self.brokers = {1: object(), 2: object(), 3: object()}
        self.up = {1, 2, 3}
        self.max_down = 0
        self.calls: list[tuple[str, int | str]] = []
        self.leader = -1  # "stuck-0" has no leader until elected
        self.lock = threading.Lock()

    def kill_broker(self, broker: int) -> None:
        self._down(broker, "kill")

    def stop_broker(self, broker: int, timeout: float = 60.0) -> None:
        self._down(broker, "stop")

    def _down(self, broker: int, how: str) -> None:
        with self.lock:
            self.up.discard(broker)
            self.max_down = max(self.max_down, 3 - len(self.up))
            self.calls.append((how, broker))

    def start_broker(self, broker: int, *, wait_unfenced: bool = True) -> None:
        with self.lock:
            self.up.add(broker)
            self.calls.append(("start", broker))

    def down_brokers(self) -> set[int]:
        return set(self.brokers) - self.up

    def describe_cluster(self) -> dict[int, bool]:
        return {b: b not in self.up for b in self.brokers}

    def describe_topic_partitions(self) -> dict[tuple[str, int], dict]:
        return {("stuck", 0): {"leader": self.leader}, ("fine", 0): {"leader": 1}}

    def elect_leaders(self, topic: str, partitions: list[int], *, unclean: bool) -> None:
        assert unclean and (topic, partitions) == ("stuck", [0])
        self.leader = 1
        self.calls.append(("elect", f"{topic}-{partitions[0]}"))


def test_schedule_brings_every_broker_back_and_logs_each_action():
    cluster = FakeCluster()
    lines: list[str] = []
    injector = FaultInjector(cluster, lines.append, first_delay=0, hold=0.05, pause=0.05, grace=0.2).start()
    deadline = time.monotonic() + 30
    while sum(1 for how, _ in cluster.calls if how in ("kill", "stop")) < 8:  # every episode at least once
        assert time.monotonic() < deadline, lines
        time.sleep(0.05)
    injector.stop()
    assert not injector._thread.is_alive()
    down = [b for how, b in cluster.calls if how in ("kill", "stop")]
    assert cluster.max_down <= 2 and set(down) <= {1, 2, 3}
    injector.stop(restore=True)  # brings back what the stop interrupted
    assert cluster.up == {1, 2, 3} and injector.down == {}
    assert ("elect", "stuck-0") in cluster.calls and cluster.calls.count(("elect", "stuck-0")) == 1
    assert len(lines) == len(cluster.calls)  # one line per action
    assert all(line.startswith("fault injector ") and "\n" not in line for line in lines)
    assert any("kill -9 broker" in line for line in lines) and any("SIGTERM" in line for line in lines)
    assert any("unclean election of stuck-0" in line for line in lines)


def test_stop_returns_within_a_step():
    cluster = FakeCluster()
    cluster.leader = 1
    injector = FaultInjector(cluster, lambda _line: None, first_delay=0, hold=60, pause=60).start()
    deadline = time.monotonic() + 10
    while not injector.down:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    began = time.monotonic()
    injector.stop(restore=True)
    assert time.monotonic() - began < 5 and cluster.up == {1, 2, 3}


def test_rejects_unknown_episodes_and_small_clusters():
    with pytest.raises(ValueError, match="unknown episodes"):
        FaultInjector(FakeCluster(), print, episodes=("explode",))
    small = FakeCluster()
    small.brokers = {1: object(), 2: object()}
    with pytest.raises(ValueError, match="at least 3 brokers"):
        FaultInjector(small, print)
    assert EPISODES[0] == "kill2"
