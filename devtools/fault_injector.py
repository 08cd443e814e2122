"""Kills and restarts a :class:`~elrwatch.devtools.kafka_cluster.KafkaCluster`'s brokers on a schedule (developer
tooling: `make demo` runs it against its 3-broker cluster so that ISR shrinks, ELR, LastKnownELR, leaderless
partitions and their recovery appear on the status page as they happen).

The schedule is a cycle of episodes, each on brokers chosen by a seeded RNG:

* ``kill2``: kill -9 two brokers at once (RF-2 partitions on both go leaderless, RF-3 ones keep one ISR member and
  an ELR), restart them one after the other (unclean restarts: Kafka removes each from the ELR when it registers;
  a leaderless partition gets its last known leader back, RECOVERING);
* ``stop1``: stop one broker cleanly (SIGTERM, controlled shutdown), restart it;
* ``mixed``: stop one broker cleanly and kill -9 another (the clean one stays an eligible leader);
* ``kill1``: kill -9 one broker, restart it;
* ``stop2``: stop two brokers cleanly (both stay in the ELR), restart them one after the other.

Bounds: at most two brokers are down at once (the controller is never touched), every episode restarts what it
took down within ``hold`` seconds per step, and a partition still leaderless ``grace`` seconds after every broker is
back (Kafka found no replica it may elect: it waits for an operator) gets an unclean election, so that no
data stays unavailable for longer than one episode. Every action is logged on one line through ``log``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Plan:
    """An episode: how each of its brokers goes down (``kill``: kill -9, ``stop``: SIGTERM), in that order, and the
    order they come back in (indexes into ``downs``); ``coin_flip``: which picked broker takes which role is
    random."""

    downs: tuple[str, ...]
    back: tuple[int, ...]
    coin_flip: bool = False


_PLANS = {
    "kill2": _Plan(("kill", "kill"), (0, 1)),
    "stop1": _Plan(("stop",), (0,)),
    "mixed": _Plan(("stop", "kill"), (1, 0), coin_flip=True),
    "kill1": _Plan(("kill",), (0,)),
    "stop2": _Plan(("stop", "stop"), (1, 0)),
}
#: The episodes, in the order the schedule cycles through them (the most telling one first).
EPISODES = tuple(_PLANS)


class FaultInjector:
    """Runs the schedule in a daemon thread: ``start()``, then ``stop()`` (returns within about a step)."""

    def __init__(
        self,
        cluster: Any,
        log: Callable[[str], None],
        *,
        seed: int = 7,
        first_delay: float = 5.0,
        hold: float = 8.0,
        pause: float = 10.0,
        grace: float = 6.0,
        episodes: tuple[str, ...] = EPISODES,
    ) -> None:
        unknown = set(episodes) - set(EPISODES)
        if unknown or not episodes:
            raise ValueError(f"unknown episodes {sorted(unknown)}; known: {', '.join(EPISODES)}")
        if len(cluster.brokers) < 3:
            raise ValueError("the fault injector needs at least 3 brokers (it takes up to two down at once)")
        self.cluster = cluster
        self.log = log
        self.rng = random.Random(seed)
        self.first_delay, self.hold, self.pause, self.grace = first_delay, hold, pause, grace
        self.episodes = episodes
        self.actions = 0  # actions taken so far (tests wait on it)
        self._down: dict[int, str] = {}  # broker id -> "kill" | "stop"
        self._stop = threading.Event()
        self._lock = threading.Lock()  # held during one cluster action: stop() waits for it
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FaultInjector:
        self._thread = threading.Thread(target=self._run, name="fault-injector", daemon=True)
        self._thread.start()
        return self

    def stop(self, restore: bool = False, timeout: float = 30.0) -> None:
        """Stop the schedule (no new action starts); with ``restore``, start every broker it left down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if restore:
            with self._lock:
                for broker in sorted(self._down):
                    self.cluster.start_broker(broker, wait_unfenced=False)
                    self._say(f"restart broker {broker} (restore on stop)")
                self._down.clear()

    @property
    def down(self) -> dict[int, str]:
        """Brokers this injector has down right now, and how it took them down."""
        return dict(self._down)

    # ------------------------------------------------------------------ schedule

    def _run(self) -> None:
        if self._stop.wait(self.first_delay):
            return
        for episode in self._cycle():
            try:
                self._play(episode)
                self._recover_leaderless()
            except _Stopped:
                return
            except Exception as exc:  # one line, then bring everything back and go on
                self._say(f"{episode} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                try:
                    self._restart_all()
                except _Stopped:
                    return
                except Exception as again:
                    self._say(
                        f"restart after the failure failed: {type(again).__name__}: "
                        f"{str(again).splitlines()[0] if str(again) else ''}"
                    )
            if self._stop.wait(self.pause):
                return

    def _cycle(self) -> Iterator[str]:
        while True:
            yield from self.episodes

    def _pick(self, n: int) -> list[int]:
        return sorted(self.rng.sample(sorted(self.cluster.brokers), n))

    def _play(self, episode: str) -> None:
        """Take the episode's brokers down (`_take_down`), then bring them back one by one, each after ``hold``
        s."""
        plan = _PLANS[episode]
        brokers = self._pick(len(plan.downs))
        if plan.coin_flip and self.rng.random() >= 0.5:
            brokers.reverse()
        self._take_down(list(zip(brokers, plan.downs, strict=True)))
        for index in plan.back:
            self._hold()
            self._bring_up(brokers[index])

    # ------------------------------------------------------------------ actions

    def _take_down(self, plan: list[tuple[int, str]]) -> None:
        """kill -9 (``kill``) or SIGTERM (``stop``) each broker of ``plan`` back to back, then wait until the
        controller has fenced them all (Kafka 3.x: until DescribeCluster no longer lists them live)."""
        with self._lock:
            self._check_stop()
            for broker, how in plan:
                if how == "kill":
                    self.cluster.kill_broker(broker)
                    self._say(f"kill -9 broker {broker} (unclean shutdown)")
                else:
                    self.cluster.stop_broker(broker, timeout=20.0)
                    self._say(f"stop broker {broker} (SIGTERM: clean, controlled shutdown)")
                self._down[broker] = how
                self.actions += 1
        brokers = [b for b, _ in plan]
        self._poll(
            lambda: set(brokers) <= self.cluster.down_brokers(),
            f"broker{'s' if len(brokers) > 1 else ''} {_and(brokers)} down for the controller",
            timeout=20.0,
        )

    def _bring_up(self, broker: int) -> None:
        """Start a broker this injector took down; wait until the controller unfences it."""
        with self._lock:
            self._check_stop()
            how = self._down.pop(broker, "kill")
            self.cluster.start_broker(broker, wait_unfenced=False)
            self.actions += 1
            elr = getattr(self.cluster, "elr", True)
            self._say(
                f"restart broker {broker} ("
                + (
                    (
                        "unclean: it was killed, Kafka removes it from the ELR as it registers"
                        if elr
                        else "unclean: it was killed"
                    )
                    if how == "kill"
                    else "clean: it shut down cleanly, it stays an eligible leader"
                    if elr
                    else "clean: it shut down cleanly"
                )
                + ")"
            )
        self._poll(
            lambda: self.cluster.describe_cluster().get(broker) is False, f"broker {broker} unfenced", timeout=60.0
        )

    def _restart_all(self) -> None:
        for broker in sorted(self._down):
            self._bring_up(broker)

    def _recover_leaderless(self) -> None:
        """Every broker is back: a partition that found no leader within ``grace`` s gets an unclean election
        (its ISR and ELR are empty: Kafka waits for an operator, this injector plays one)."""

        def leaderless() -> list[tuple[str, int]]:
            described = self.cluster.describe_topic_partitions()
            return sorted(tp for tp, p in described.items() if p["leader"] < 0)

        deadline = time.monotonic() + self.grace
        stuck = leaderless()
        while stuck and time.monotonic() < deadline:
            if self._stop.wait(0.5):
                raise _Stopped
            stuck = leaderless()
        for topic, partition in stuck:
            with self._lock:
                self._check_stop()
                self.cluster.elect_leaders(topic, [partition], unclean=True)
                self.actions += 1
                self._say(
                    f"unclean election of {topic}-{partition} (leaderless {self.grace:g} s after every "
                    "broker came back: empty ISR and ELR, Kafka waits for an operator)"
                )

    # ------------------------------------------------------------------ helpers

    def _hold(self) -> None:
        if self._stop.wait(self.hold):
            raise _Stopped

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise _Stopped

    def _poll(self, condition: Callable[[], bool], what: str, timeout: float) -> None:
        """Poll ``condition`` (admin errors count as not yet) until true; log one line if ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if condition():
                    return
            except Exception:  # brokers coming and going: poll on
                pass
            if time.monotonic() >= deadline:
                self._say(f"still waiting for {what} after {timeout:g} s; going on")
                return
            if self._stop.wait(0.3):
                raise _Stopped

    def _say(self, message: str) -> None:
        self.log(f"fault injector {time.strftime('%H:%M:%S')}: {message}")


class _Stopped(Exception):
    """``stop()`` was called: the schedule ends where it is."""


def _and(items: list[int]) -> str:
    return " and ".join(str(i) for i in items)
