"""A real Spark standalone cluster on loopback (one master, N workers), for tests and benchmarks.

Started from pyspark's own jars with ``bin/spark-class`` (no Spark download): ``org.apache.spark.deploy.master.Master``
and ``org.apache.spark.deploy.worker.Worker``, each its own JVM in its own process group, so that
:meth:`SparkCluster.kill_worker` takes a worker with its executor and Python workers, as when a machine is lost.
The workers share this machine's filesystem: the job's checkpoint and ``--state-dir`` are the "shared volume" the
chart's SparkApplication mounts (a ReadWriteMany PVC).

Usage::

    with SparkCluster(workers=2) as cluster:
        run(["elrwatch", "stream", "--spark-master", cluster.url, ...])
        cluster.kill_worker(0)            # kill -9 of the worker, its executor and Python workers
        cluster.restart_worker(0)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from elrwatch.devtools.kafka_cluster import free_port


class SparkClusterError(RuntimeError):
    """The cluster did not start (or a node died): the message holds the node's last log lines."""


def spark_home() -> Path:
    """pyspark's folder: its jars and bin/spark-class are a Spark distribution."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkCluster:
    """A standalone master and ``workers`` workers (``cores`` and ``memory`` each) on 127.0.0.1."""

    def __init__(
        self,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1536m",
        base_dir: str | os.PathLike[str] | None = None,
        start_timeout: float = 90.0,
        daemon_heap: str = "256m",
    ) -> None:
        self.worker_count = workers
        self.cores = cores
        self.memory = memory
        self.start_timeout = start_timeout
        self.daemon_heap = daemon_heap
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="elrwatch-spark-"))
        self.port = free_port()
        self.webui_port = free_port()
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes] | None] = [None] * workers
        self._logs: dict[str, Path] = {}

    # ------------------------------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        """The master URL for ``--spark-master``."""
        return f"spark://127.0.0.1:{self.port}"

    def __enter__(self) -> SparkCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_DAEMON_MEMORY": self.daemon_heap,
            "SPARK_LOG_DIR": str(self.base_dir / "logs"),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_NO_DAEMONIZE": "1",
            # the executors' Python workers: this interpreter (elrwatch installed), like the driver's
            "PYSPARK_PYTHON": sys.executable,
        }
        env.pop("PYSPARK_GATEWAY_PORT", None)
        return env

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = self.base_dir / f"{name}.log"
        self._logs[name] = log
        with open(log, "ab") as out:
            return subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env(),
                cwd=self.base_dir,
                start_new_session=True,
            )

    def start(self) -> None:
        """Start the master, then the workers; wait until the master counts them all alive."""
        (self.base_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.master = self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.webui_port),
        )
        try:
            self.wait_for(lambda: self.status() is not None, "the master's web UI")
            for index in range(self.worker_count):
                self.start_worker(index, wait=False)
            self.wait_for(lambda: self.alive_workers() == self.worker_count, f"{self.worker_count} alive workers")
        except BaseException:
            self.stop()
            raise

    def start_worker(self, index: int, wait: bool = True) -> None:
        """Start worker ``index`` (again); with ``wait``, until the master counts it alive."""
        before = self.alive_workers() if wait else 0
        work_dir = self.base_dir / f"worker-{index}"
        work_dir.mkdir(exist_ok=True)
        self.workers[index] = self._spawn(
            f"worker-{index}",
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--webui-port",
            "0",
            "--work-dir",
            str(work_dir),
            self.url,
        )
        if wait:
            self.wait_for(lambda: self.alive_workers() > before, f"worker {index} alive")

    def kill_worker(self, index: int) -> None:
        """kill -9 of worker ``index`` with its executor and the executor's Python workers (its process group)."""
        proc = self.workers[index]
        if proc is None:
            return
        _kill_tree(proc)
        self.workers[index] = None

    def restart_worker(self, index: int) -> None:
        """A killed worker back (a new worker id; the master forgets the dead one after its timeout)."""
        self.kill_worker(index)
        self.start_worker(index)

    def stop(self) -> None:
        """End every process the cluster started (workers and their executors first); remove its folder."""
        for index in range(len(self.workers)):
            self.kill_worker(index)
        if self.master is not None:
            _kill_tree(self.master)
            self.master = None
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    # ------------------------------------------------------------------------------------------ state
    def status(self) -> dict[str, Any] | None:
        """The master's JSON status (workers, applications), None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=2) as response:
                return json.load(response)
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> int:
        """Workers the master counts alive."""
        status = self.status() or {}
        return sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")

    def executors_running(self) -> int:
        """Executor processes running under the workers (CoarseGrainedExecutorBackend), counted from /proc."""
        count = 0
        for proc in self.workers:
            if proc is None:
                continue
            count += sum(1 for pid in _session_pids(proc.pid) if "CoarseGrainedExecutorBackend" in _cmdline(pid))
        return count

    def wait_for(self, condition: Callable[[], Any], what: str, timeout: float | None = None) -> Any:
        """Poll ``condition`` until truthy; a node that exited or the timeout is a SparkClusterError with its log."""
        deadline = time.monotonic() + (timeout or self.start_timeout)
        while True:
            value = condition()
            if value:
                return value
            for name, proc in (("master", self.master), *((f"worker-{i}", p) for i, p in enumerate(self.workers))):
                if proc is not None and proc.poll() is not None:
                    raise SparkClusterError(
                        f"Spark {name} exited ({proc.returncode}) waiting for {what}:\n{self.log_tail(name)}"
                    )
            if time.monotonic() > deadline:
                raise SparkClusterError(f"timed out waiting for {what}:\n{self.log_tail('master')}")
            time.sleep(0.2)

    def log_tail(self, name: str, lines: int = 30) -> str:
        """The last lines of a node's log."""
        path = self._logs.get(name)
        if path is None or not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _session_pids(leader: int) -> list[int]:
    """Processes of the session (process group) ``leader`` started."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == leader or int(fields[4]) == leader:  # process group or session
            pids.append(int(entry))
    return pids


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 of every process in ``proc``'s session (the node, its executor and Python workers)."""
    for pid in _session_pids(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)
