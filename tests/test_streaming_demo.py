"""`elrwatch demo --duration`: noida-db, topic, API, simulator and job start, report where to look, stop cleanly."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_demo_runs_and_stops_cleanly(tmp_path):
    from elrwatch.streaming.local_kafka import free_port

    api_port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "elrwatch.cli", "demo", "--duration", "15", "--workdir", str(tmp_path),
         "--metrics-port", "0", "--api-port", str(api_port), "--rate", "300"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    err = done.stderr
    assert "streaming job running" in err and "stopped." in err
    assert f"http://127.0.0.1:{api_port}/" in err and "/metrics" in err and "elrwatch.db" in err
    status = subprocess.run(
        [sys.executable, "-m", "elrwatch.cli", "status", "--store", f"sqlite:///{tmp_path}/elrwatch.db", "--compact"],
        capture_output=True, text=True, timeout=60,
    )
    doc = json.loads(status.stdout)
    assert doc["counts"]["events"] > 0 and doc["partitions"]
    kafka_port = int(re.search(r"\(noida-db\) on 127\.0\.0\.1:(\d+)", err).group(1))
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", kafka_port), timeout=2):
        pass  # noida-db was stopped
