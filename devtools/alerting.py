"""Live alerting on one machine, for tests and benchmarks (never the product's runtime): a real Prometheus server
scraping elrwatch's streaming job with the chart's rules, a real Alertmanager, and a webhook receiver in this
process that records every notification.

* :func:`render_rule_file`: the chart's rules as a Prometheus rule file, through `helm template` with ``--set``
  values (helm/tools/render_rules.py), i.e. exactly what the chart deploys with those values;
* :class:`Pipeline`: ``elrwatch bridge --source metadata-log`` on a :class:`~elrwatch.devtools.kafka_cluster.
  KafkaCluster`'s controller log, publishing to an event topic on that cluster, and ``elrwatch stream`` serving its
  gauges on ``/metrics``;
* :class:`AlertingStack`: Debian's ``prometheus`` and ``prometheus-alertmanager`` (``make install-system``) on
  loopback ports with temporary data dirs, evaluating every second, and a :class:`WebhookReceiver`.

Every process is started in a session of its own and ended by ``stop()`` (SIGTERM, then SIGKILL), by the context
managers and at interpreter exit.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from elrwatch.devtools.kafka_cluster import REPO_ROOT, free_port
from elrwatch.devtools.processes import elrwatch_command, end

RENDER_RULES = REPO_ROOT / "helm" / "tools" / "render_rules.py"
#: Binaries and the Debian package that has them.
PROMETHEUS = ("prometheus", "prometheus")
ALERTMANAGER = ("prometheus-alertmanager", "prometheus-alertmanager")
JOB = "elrwatch-stream"
_LIVE: set[subprocess.Popen] = set()


class AlertingError(RuntimeError):
    """A component of the live alerting stack could not start or answer (one line, naming its log)."""


@atexit.register
def _end_all() -> None:
    for proc in list(_LIVE):
        _end(proc)


def _end(proc: subprocess.Popen | None, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` s."""
    if proc is not None:
        end(proc, timeout)
        _LIVE.discard(proc)


def _spawn(args: Sequence[str], log: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    with open(log, "w") as out:
        proc = subprocess.Popen(
            list(args),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=None if env is None else {**os.environ, **env},
        )
    _LIVE.add(proc)
    return proc


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def binary(name: str, package: str) -> str:
    """The path of a system binary, or an :class:`AlertingError` naming the Debian package to install."""
    path = shutil.which(name)
    if path is None:
        raise AlertingError(f"{name} not found: install the Debian package {package} (make install-system)")
    return path


def wait_until(
    condition: Callable[[], Any],
    what: str,
    timeout: float,
    interval: float = 0.25,
    state: Callable[[], Any] | None = None,
) -> Any:
    """Poll ``condition`` until it returns something truthy (returned); :class:`TimeoutError` after ``timeout``,
    naming what ``state()`` returns then."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout:g}s" + (f" (state: {state()})" if state else ""))
        time.sleep(interval)


def _get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def render_rule_file(dest: Path, sets: Iterable[str] = ()) -> Path:
    """Write the chart's rules rendered with ``sets`` (helm ``--set`` assignments) to ``dest``."""
    args = [sys.executable, str(RENDER_RULES), "-o", str(dest)]
    for assignment in sets:
        args += ["--set", assignment]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise AlertingError(f"cannot render the chart's rules: {done.stderr.strip()}")
    return dest


class WebhookReceiver:
    """An Alertmanager webhook receiver on a loopback port: every notification it gets, with the time it came."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notifications: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                payload = json.loads(body)
                payload["receivedAt"] = time.time()
                with receiver._lock:
                    receiver._notifications.append(payload)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook-receiver", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The URL Alertmanager posts to."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/alerts"

    def notifications(self) -> list[dict[str, Any]]:
        """Every notification received so far (Alertmanager's webhook payload plus ``receivedAt``)."""
        with self._lock:
            return list(self._notifications)

    def alerts(
        self, alertname: str | None = None, status: str | None = None, since: float = 0.0
    ) -> list[dict[str, Any]]:
        """The alerts of the notifications received at or after ``since`` (Unix s), each with its
        notification's ``receivedAt``; filtered by alert name and status (``firing`` / ``resolved``)."""
        found = []
        for note in self.notifications():
            if note["receivedAt"] < since:
                continue
            for alert in note.get("alerts", []):
                if alertname is not None and alert["labels"].get("alertname") != alertname:
                    continue
                if status is not None and alert["status"] != status:
                    continue
                found.append({**alert, "receivedAt": note["receivedAt"]})
        return found

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


class AlertingStack:
    """Prometheus (scraping ``targets`` as job ``elrwatch-stream`` with ``elrwatch_component="stream"``, like the
    chart's ServiceMonitor, and evaluating ``rule_file``) → Alertmanager → :class:`WebhookReceiver`. Scrapes and
    evaluations every ``interval``; Alertmanager groups each alert alone and notifies at once."""

    def __init__(self, rule_file: Path, targets: Sequence[str], workdir: Path, interval: str = "1s") -> None:
        self.rule_file = rule_file
        self.targets = list(targets)
        self.workdir = workdir
        self.interval = interval
        self.receiver: WebhookReceiver | None = None
        self.prometheus: subprocess.Popen | None = None
        self.alertmanager: subprocess.Popen | None = None
        self.prometheus_url = ""
        self.alertmanager_url = ""

    def __enter__(self) -> AlertingStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> AlertingStack:
        """Start the receiver, Alertmanager and Prometheus; return when both servers are ready."""
        prometheus = binary(*PROMETHEUS)
        alertmanager = binary(*ALERTMANAGER)
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self.receiver = WebhookReceiver()
            am_port, prom_port = free_port(), free_port()
            am_config = {
                "route": {
                    "receiver": "webhook",
                    "group_by": ["..."],
                    "group_wait": "0s",
                    "group_interval": "1s",
                    "repeat_interval": "1h",
                },
                "receivers": [
                    {"name": "webhook", "webhook_configs": [{"url": self.receiver.url, "send_resolved": True}]}
                ],
            }
            self.alertmanager, self.alertmanager_url = self._serve(
                "alertmanager", alertmanager, am_config, "--storage.path", am_port, "--cluster.listen-address="
            )
            prom_config = {
                "global": {
                    "scrape_interval": self.interval,
                    "scrape_timeout": self.interval,
                    "evaluation_interval": self.interval,
                },
                "rule_files": [str(self.rule_file)],
                "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
                "scrape_configs": [
                    {
                        "job_name": JOB,
                        "static_configs": [{"targets": self.targets, "labels": {"elrwatch_component": "stream"}}],
                    }
                ],
            }
            self.prometheus, self.prometheus_url = self._serve(
                "prometheus", prometheus, prom_config, "--storage.tsdb.path", prom_port, "--rules.alert.resend-delay=1s"
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _serve(
        self, name: str, command: str, config: dict[str, Any], storage_flag: str, port: int, *flags: str
    ) -> tuple[subprocess.Popen, str]:
        """Start Prometheus or Alertmanager (``name``) on ``port`` with ``config`` (<name>.yml in the work dir), its
        data in <name>-data and its log in <name>.log; its process and URL once it is ready (it is ended when it
        does not get ready)."""
        config_file = self.workdir / f"{name}.yml"
        config_file.write_text(yaml.safe_dump(config))
        log = self.workdir / f"{name}.log"
        url = f"http://127.0.0.1:{port}"
        proc = _spawn(
            [
                command,
                f"--config.file={config_file}",
                f"{storage_flag}={self.workdir / f'{name}-data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                *flags,
                "--log.level=warn",
            ],
            log,
        )
        try:
            self._wait_ready(proc, f"{url}/-/ready", name, log)
        except BaseException:
            _end(proc)
            raise
        return proc, url

    def _wait_ready(self, proc: subprocess.Popen, url: str, what: str, log: Path, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not _answers(url):
            if proc.poll() is not None:
                raise AlertingError(f"{what} exited ({proc.returncode}): {_tail(log)} (log: {log})")
            if time.monotonic() >= deadline:
                raise AlertingError(f"{what} not ready within {timeout:g}s: {_tail(log)} (log: {log})")
            time.sleep(0.2)

    def stop(self) -> None:
        """End Prometheus, Alertmanager and the receiver (their data dirs stay in the work dir)."""
        _end(self.prometheus)
        _end(self.alertmanager)
        if self.receiver is not None:
            self.receiver.close()
            self.receiver = None

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        """An instant query: (labels, value) per series."""
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        data = _get_json(url)["data"]["result"]
        return [(item["metric"], float(item["value"][1])) for item in data]

    def value(self, expr: str) -> float | None:
        """The value of a query that yields one series (None: no series)."""
        result = self.query(expr)
        return result[0][1] if result else None

    def rule_alerts(self, state: str | None = None) -> list[dict[str, Any]]:
        """Prometheus' active alerts (pending and firing), optionally of one state."""
        alerts = _get_json(f"{self.prometheus_url}/api/v1/alerts")["data"]["alerts"]
        return [a for a in alerts if state is None or a["state"] == state]

    def rules_loaded(self) -> list[str]:
        """The alert names Prometheus loaded from the rule file."""
        groups = _get_json(f"{self.prometheus_url}/api/v1/rules")["data"]["groups"]
        return [r["name"] for g in groups for r in g["rules"] if r["type"] == "alerting"]

    def target_up(self) -> bool:
        """Whether every scrape target is up."""
        targets = _get_json(f"{self.prometheus_url}/api/v1/targets")["data"]["activeTargets"]
        return bool(targets) and all(t["health"] == "up" for t in targets)


class Pipeline:
    """The monitor on a cluster: ``elrwatch bridge --source metadata-log`` on the controller's metadata log,
    publishing to ``topic`` (created on ``event_broker``, which the caller must never stop), and ``elrwatch stream``
    with its gauges on ``metrics_port``."""

    def __init__(self, cluster: Any, workdir: Path, topic: str = "elrwatch-events", event_broker: int = 1) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.topic = topic
        self.event_broker = event_broker
        self.metrics_port = free_port()
        self.bridge: subprocess.Popen | None = None
        self.stream: subprocess.Popen | None = None

    @property
    def metrics_url(self) -> str:
        """The streaming job's /metrics."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def __enter__(self) -> Pipeline:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 300.0) -> Pipeline:
        """Start the bridge and the job; return when the job's /metrics answers."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cluster.create_topic(self.topic, replica_assignment={0: [self.event_broker]})
        env = {"PYTHONUNBUFFERED": "1"}
        try:
            self.bridge = _spawn(
                elrwatch_command(
                    "bridge",
                    source="metadata-log",
                    log_dir=self.cluster.controller.metadata_dir,
                    bootstrap_servers=self.cluster.bootstrap,
                    topic=self.topic,
                    interval=0.2,
                    state_file=self.workdir / "bridge.json",
                ),
                self.workdir / "bridge.log",
                env,
            )
            self.stream = _spawn(
                elrwatch_command(
                    "stream",
                    bootstrap_servers=self.cluster.bootstrap,
                    topic=self.topic,
                    store=f"sqlite:///{self.workdir / 'elrwatch.db'}",
                    checkpoint=self.workdir / "checkpoint",
                    metrics_port=self.metrics_port,
                    trigger="1s",
                    buckets=1,
                    starting_offsets="earliest",
                ),
                self.workdir / "stream.log",
                env,
            )
            deadline = time.monotonic() + timeout
            while not _answers(self.metrics_url):
                for proc, name in ((self.bridge, "bridge"), (self.stream, "stream")):
                    if proc.poll() is not None:
                        log = self.workdir / f"{name}.log"
                        raise AlertingError(f"elrwatch {name} exited ({proc.returncode}): {_tail(log)} (log: {log})")
                if time.monotonic() >= deadline:
                    raise AlertingError(
                        f"elrwatch stream's /metrics not up within {timeout:g}s (log: {self.workdir / 'stream.log'})"
                    )
                time.sleep(0.5)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM the job and the bridge (SIGKILL after 30 s)."""
        _end(self.stream, timeout=30)
        _end(self.bridge)
        self.stream = self.bridge = None
