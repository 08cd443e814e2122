"""`elrwatch demo`: noida-db, topic, API, simulator and job start, report where to look, stop cleanly (after
``--duration``, or on Ctrl-C)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_demo_runs_and_stops_cleanly(tmp_path):
    from elrwatch.streaming.local_kafka import free_port

    api_port = free_port()
    done = subprocess.run(
        [sys.executable, "-P", "-m", "elrwatch.cli", "demo", "--duration", "15", "--workdir", str(tmp_path),
         "--metrics-port", "0", "--api-port", str(api_port), "--rate", "300"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    err = done.stderr
    assert "streaming job running" in err and "stopped." in err
    assert f"http://127.0.0.1:{api_port}/" in err and "/metrics" in err and "elrwatch.db" in err
    status = subprocess.run(
        [sys.executable, "-P", "-m", "elrwatch.cli", "status", "--store", f"sqlite:///{tmp_path}/elrwatch.db", "--compact"],
        capture_output=True, text=True, timeout=60,
    )
    doc = json.loads(status.stdout)
    assert doc["counts"]["events"] > 0 and doc["partitions"]
    kafka_port = int(re.search(r"\(noida-db\) on 127\.0\.0\.1:(\d+)", err).group(1))
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", kafka_port), timeout=2):
        pass  # noida-db was stopped


def test_demo_stops_cleanly_on_ctrl_c():
    """What an operator does with `make demo`: wait for "Ctrl-C stops everything.", press Ctrl-C (SIGINT)."""
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "elrwatch.cli", "demo", "--metrics-port", "0", "--api-port", "0", "--rate", "300"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while not any("Ctrl-C stops everything." in line for line in lines):
            assert proc.poll() is None, "".join(lines)[-3000:]
            assert time.monotonic() < deadline, "the demo did not start within 240 s:\n" + "".join(lines)[-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0, "".join(lines)[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    err = "".join(lines)
    assert "elrwatch demo: stopped." in err and "Traceback" not in err, err[-3000:]
    workdir = re.search(r"workdir\s+: (\S+)", err).group(1)
    assert f"removed {workdir}" in err and not os.path.exists(workdir)  # its own temp dir, without --keep
    kafka_port = int(re.search(r"\(noida-db\) on 127\.0\.0\.1:(\d+)", err).group(1))
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", kafka_port), timeout=2):
        pass  # noida-db was stopped
