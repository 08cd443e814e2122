"""A local Kafka-wire server: noida-db (PyPI ``noida-db``) on a free loopback port with a fresh data dir.

Used by the tests (``tests/kafka_harness.py``), the benchmarks and ``elrwatch demo``.
``KafkaServer.start()`` runs ``noida-db start --only kafka --kafka-port P --host 127.0.0.1 --data-dir D``
in the foreground in its own process group, polls until a kafka-python metadata request answers (bounded), and
``stop()`` sends SIGINT (SIGKILL after a bound) and removes the data dir it created.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def noida_executable() -> str:
    """The noida-db binary shipped inside the PyPI package (not the Python wrapper script)."""
    import noida_db

    exe = Path(noida_db.__file__).parent / "noida-db"
    if not exe.is_file():
        found = shutil.which("noida-db")
        if not found:
            raise RuntimeError("noida-db is not installed (pip install noida-db==0.2.3)")
        return found
    if not os.access(exe, os.X_OK):
        exe.chmod(0o755)
    return str(exe)


class KafkaServer:
    """One noida-db Kafka listener; use as a context manager or call start()/stop()."""

    def __init__(self, port: int | None = None, data_dir: str | None = None, start_timeout: float = 30.0):
        self.port = port or free_port()
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="elrwatch-noida-")
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(self.data_dir, "noida.log")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> KafkaServer:
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [
                noida_executable(),
                "start",
                "--only",
                "kafka",
                "--kafka-port",
                str(self.port),
                "--host",
                "127.0.0.1",
                "--data-dir",
                os.path.join(self.data_dir, "db"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        try:
            self.wait_ready(self.start_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float) -> None:
        """Poll with a kafka-python metadata request until the broker answers (bounded)."""
        from kafka import KafkaAdminClient

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"noida-db exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
                admin = KafkaAdminClient(
                    bootstrap_servers=self.bootstrap, request_timeout_ms=3000
                )
                try:
                    admin.list_topics()
                    return
                finally:
                    admin.close()
            except Exception as exc:  # not up yet
                last = exc
                time.sleep(0.1)
        raise TimeoutError(
            f"noida-db Kafka on {self.bootstrap} not ready in {timeout}s: {last}; {self.log_tail()}"
        )

    def log_tail(self, n: int = 2000) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 15.0) -> None:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000)
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])
            deadline = time.monotonic() + timeout
            while name not in admin.list_topics():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"topic {name} not visible after {timeout}s")
                time.sleep(0.05)
        finally:
            admin.close()

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> KafkaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
