"""The demo (`make demo`: `python -m elrwatch.devtools.demo`): the real-cluster demo (a 3-broker KRaft cluster with
ELR, the metadata-log bridge, the fault injector, the job, the API) starts, shows the real cluster's partitions going leaderless / into the ELR as the
injector acts, and stops on Ctrl-C leaving no process behind; the simulated demo (`--simulated`) runs for
``--duration`` and stops cleanly too."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from test_streaming_e2e import _cli

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


KAFKA_LINE = re.compile(r"Apache Kafka \S+ on 127\.0\.0\.1:(\d+) \(logs: (\S+)\)")


def _kafka_processes(folder: str) -> list[int]:
    """Live processes whose command line names ``folder`` (the Kafka JVMs under it; the bridge and the API when it
    is the demo's work dir)."""
    found = []
    for proc in os.listdir("/proc"):
        if proc.isdigit():
            try:
                with open(f"/proc/{proc}/cmdline", "rb") as fh:
                    if folder.encode() in fh.read():
                        found.append(int(proc))
            except OSError:
                pass
    return found


def _assert_kafka_stopped(err: str) -> None:
    match = KAFKA_LINE.search(err)
    assert match, err[-3000:]
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", int(match.group(1))), timeout=2):
        pass  # the broker was stopped
    assert _kafka_processes(match.group(2)) == []


def test_demo_runs_and_stops_cleanly(tmp_path):
    from elrwatch.devtools.kafka_cluster import free_port
    from elrwatch.store import StatusStore

    api_port = free_port()
    began_ms = time.time() * 1000
    done = subprocess.run(
        [
            sys.executable,
            "-P",
            "-m",
            "elrwatch.devtools.demo",
            "--simulated",
            "--duration",
            "10",
            "--workdir",
            str(tmp_path),
            "--metrics-port",
            "0",
            "--api-port",
            str(api_port),
            "--rate",
            "300",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    err = done.stderr
    assert "streaming job running" in err and "stopped." in err
    assert f"http://127.0.0.1:{api_port}/" in err and "/metrics" in err and "elrwatch.db" in err
    status = _cli("status", "--store", f"sqlite:///{tmp_path}/elrwatch.db", "--compact", timeout=60)
    doc = json.loads(status.stdout)
    assert doc["counts"]["events"] > 0 and doc["partitions"]
    # the events carry the time they were published (not the simulator's 2024 clock)
    store = StatusStore(f"sqlite:///{tmp_path}/elrwatch.db")
    try:
        last_event_ms = store.get_meta()["lastEventTimeMs"]
    finally:
        store.dispose()
    assert began_ms <= last_event_ms <= time.time() * 1000
    _assert_kafka_stopped(err)


def _get_json(url: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def _poll(condition, what: str, timeout: float, lines: list[str], proc: subprocess.Popen):
    """Poll ``condition`` (errors count as not yet) until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"the demo exited while waiting for {what}:\n" + "".join(lines)[-3000:]
        try:
            value = condition()
            if value:
                return value
        except OSError:
            pass
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s:\n" + "".join(lines)[-3000:]
        time.sleep(0.5)


@contextlib.contextmanager
def _demo(*options: str) -> Iterator[tuple[subprocess.Popen, list[str]]]:
    """`python -m elrwatch.devtools.demo` with ``options``, from the moment it says "Ctrl-C stops everything.": the
    process and its stderr lines so far (a thread gathers them). At the end it is stopped if it still runs (a failed
    assertion) with SIGINT, so that it stops its Kafka JVMs and API (a kill would orphan them), and the list holds its
    whole output."""
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "elrwatch.devtools.demo", *options],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        _poll(lambda: any("Ctrl-C stops everything." in line for line in lines), "start", 150, lines, proc)
        yield proc, lines
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        reader.join(10)


def test_real_cluster_demo_shows_elr_and_stops_cleanly_on_ctrl_c():
    """What an operator does with `make demo`: wait for "Ctrl-C stops everything.", watch the real cluster's
    partitions on the API while the fault injector kills brokers, press Ctrl-C (SIGINT)."""
    from elrwatch.devtools.kafka_cluster import free_port

    api = f"http://127.0.0.1:{free_port()}"
    with _demo("--metrics-port", "0", "--api-port", api.rsplit(":")[-1]) as (proc, lines):
        began_ms = time.time() * 1000
        # the real cluster's topics, as the metadata-log bridge publishes them
        topics = {"orders": 6, "payments": 3, "clicks": 3}

        def real_partitions() -> list[dict] | None:
            items = _get_json(f"{api}/v1/partitions?limit=100")["items"]
            seen = {t: sum(1 for p in items if p["topic"] == t) for t in topics}
            return items if seen == topics else None

        _poll(real_partitions, "partitions of the real cluster on the API", 60, lines, proc)

        def injected() -> list[dict]:
            items = _get_json(f"{api}/v1/partitions?limit=100")["items"]
            return [p for p in items if p["leaderless"] or p["elr"]]

        hit = _poll(injected, "leaderless or ELR partition after the fault injector acted", 90, lines, proc)
        assert any("fault injector" in line and "kill -9 broker" in line for line in lines), "".join(lines)[-3000:]
        # real CreateTimes: the partitions' last records are from now, not a simulator's clock
        assert all(began_ms - 120_000 <= p["lastTimestampMs"] <= time.time() * 1000 + 5000 for p in hit), hit
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0, "".join(lines)[-3000:]
    err = "".join(lines)
    assert "elrwatch demo: stopped." in err and "Traceback" not in err, err[-3000:]
    assert "metadata-log on the controller's" in err and "bridge metrics:" in err and "status page  :" in err
    workdir = re.search(r"workdir\s+: (\S+)", err).group(1)
    assert f"removed {workdir}" in err and not os.path.exists(workdir)  # its own temp dir, without --keep
    _assert_kafka_stopped(err)
    watched = re.search(r"watched cluster on 127\.0\.0\.1:(\d+)", err)
    assert watched, err[-3000:]
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", int(watched.group(1))), timeout=2):
        pass  # the watched cluster's first broker was stopped
    assert _kafka_processes(workdir) == []  # no JVM, bridge or API left


def test_kafka_39_zookeeper_demo_shows_last_replica_standing_and_stops_cleanly():
    """`make demo KAFKA=3.9`: the watched cluster is Kafka 3.9.1 in ZooKeeper mode, polled by the admin bridge;
    once the fault injector has two brokers down, partitions of "orders" (RF 3, min ISR 2) have their last replica
    standing, on the job's gauge and in their outlook on the API."""
    from elrwatch.devtools.kafka_cluster import free_port
    from elrwatch.streaming.metrics import scrape

    api = f"http://127.0.0.1:{free_port()}"
    metrics_port = free_port()
    options = ("--kafka", "3.9", "--metrics-port", str(metrics_port), "--api-port", api.rsplit(":")[-1])
    with _demo(*options) as (proc, lines):
        gauge = "elrwatch_last_replica_standing_partitions"
        _poll(
            lambda: scrape(f"http://127.0.0.1:{metrics_port}/metrics").get(gauge, 0) >= 1,
            f"{gauge} >= 1 after the fault injector acted",
            120,
            lines,
            proc,
        )

        def exposed() -> dict | None:
            items = _get_json(f"{api}/v1/partitions?limit=100")["items"]
            for p in items:
                if p["topic"] == "orders" and len(p["isr"]) == 1:
                    one = _get_json(f"{api}/v1/partitions/orders/{p['partitionId']}")
                    if one["outlook"].get("lastReplicaStanding"):
                        return one
            return None

        one = _poll(exposed, "an orders partition whose outlook says last replica standing", 60, lines, proc)
        assert "last replica standing: ELR off" in one["outlook"]["summary"], one["outlook"]
        summary = _get_json(f"{api}/v1/summary")
        assert summary["derivedFrom"] == "admin-poll" and "fencedBrokers" in summary["unknownFacts"], summary
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0, "".join(lines)[-3000:]
    err = "".join(lines)
    assert "elrwatch demo: stopped." in err and "Traceback" not in err, err[-3000:]
    assert "Apache Kafka 3.9.1, ZooKeeper mode" in err and "bridge --source admin on the watched cluster" in err
    workdir = re.search(r"workdir\s+: (\S+)", err).group(1)
    assert not os.path.exists(workdir) and _kafka_processes(workdir) == []


def test_demo_stamps_events_with_the_time_they_are_published():
    """The simulator's clock starts in 2024: the demo re-stamps each event when it publishes it (never backwards)."""
    import orjson

    from elrwatch.devtools.demo import stamped_now

    lines = [
        b'{"type":"FENCE_BROKER_RECORD","version":0,"data":{"id":1,"epoch":5},"offset":7,"timestamp":1732100000000}',
        b"not json",
        b'{"type":"X","version":0,"data":{}}',
        b'{"type":"UNFENCE_BROKER_RECORD","version":0,"data":{"id":1,"epoch":5},"offset":8,"timestamp":1732100000001}',
    ]
    clock = iter([1_800_000_000.0, 1_799_999_999.0])  # the wall clock steps back between the two events
    out = list(stamped_now(lines, clock=lambda: next(clock)))
    assert out[1:3] == lines[1:3]  # not an envelope with a timestamp: unchanged
    first, second = orjson.loads(out[0]), orjson.loads(out[3])
    assert (first["timestamp"], second["timestamp"]) == (1_800_000_000_000, 1_800_000_000_000)
    assert {k: v for k, v in first.items() if k != "timestamp"} == {
        k: v for k, v in orjson.loads(lines[0]).items() if k != "timestamp"
    }
