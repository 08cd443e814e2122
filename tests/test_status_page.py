"""The status page at `/`, served by `elrwatch api`, driven in Debian Chromium through Playwright."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from elrwatch.devtools.kafka_cluster import free_port
from elrwatch.state.status import STATUSES as STATUS_ORDER
from elrwatch.store import StatusStore

ROOT = Path(__file__).resolve().parent.parent
#: The statuses the page's overall line counts as "without a safe leader" (app.js `renderSummary`).
CRITICAL_STATUSES = {"MANUAL_ELECTION_REQUIRED", "RECOVERING", "LEADERLESS_WAITING", "LEADERLESS_ELECTING"}
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TOKEN = "page-test-token"


class ApiServer:
    """`elrwatch api` in a subprocess on a free loopback port."""

    def __init__(self, store_url: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable,
            "-m",
            "elrwatch.cli",
            "api",
            "--store",
            store_url,
            "--port",
            str(self.port),
            "--log-level",
            "warning",
        ]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("ELRWATCH_")}
        full_env.update(env or {})
        self.proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                out = self.proc.stdout.read().decode() if self.proc.stdout else ""
                raise RuntimeError(f"elrwatch api exited early: {out}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError("elrwatch api did not become ready")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def document() -> dict:
    """`elrwatch replay` of the API tests' scenario: real statuses, outlooks and recommendations."""
    from test_api import scenario_lines

    from elrwatch.state.replay import replay_lines

    t0 = int(time.time() * 1000) - 2 * 3_600_000 - 41 * 60_000  # the incident began ~2 h 41 min ago
    return replay_lines(scenario_lines(t0), "scenario.jsonl").document(advice=True)


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory, document: dict) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('page')}/store.db"
    store = StatusStore(url)
    store.load_document(document, batch_id=3)
    store.dispose()
    return url


def _server(store_url: str, env: dict[str, str] | None = None) -> Iterator[ApiServer]:
    server = ApiServer(store_url, env)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server(store_url: str) -> Iterator[ApiServer]:
    yield from _server(store_url)


@pytest.fixture(scope="module")
def secured_server(store_url: str) -> Iterator[ApiServer]:
    yield from _server(store_url, {"ELRWATCH_API_TOKEN": TOKEN})


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian chromium missing: run `make install-system` (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def test_status_page_shows_summary_risks_and_brokers(browser, server: ApiServer, document: dict) -> None:
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    external: list[str] = []
    page.on(
        "request",
        lambda r: None if r.url.startswith(server.url) or r.url.startswith("data:") else external.append(r.url),
    )
    page.goto(server.url + "/?refresh=1")
    page.wait_for_selector("body[data-loaded=true]", timeout=15_000)

    cards = page.inner_text("#cards")
    assert "Partitions" in cards and str(len(document["partitions"])) in cards
    assert page.locator("#token-button").is_hidden()  # this API asks for no token
    overall = page.inner_text("#overall")
    assert "CRITICAL" in overall
    without = sum(p["status"] in CRITICAL_STATUSES for p in document["partitions"])
    assert f"{without} partition{'' if without == 1 else 's'} without a safe leader" in overall, overall

    severity = {s: i for i, s in enumerate(STATUS_ORDER)}
    urgent = sorted(
        (p for p in document["partitions"] if severity[p["status"]] <= severity["UNDER_MIN_ISR"]),
        key=lambda p: (severity[p["status"]], p["topic"], p["partitionId"]),
    )
    rows = page.locator("#risk-table tbody tr")
    assert rows.count() == len(urgent)
    for i, p in enumerate(urgent):  # most severe first, each with Kafka's outlook and the recommendation
        row = rows.nth(i).inner_text()
        assert p["status"].replace("_", " ") in row and f"{p['topic']}-{p['partitionId']}" in row
        assert p["outlook"]["summary"] in row
        assert p["recommendation"]["summary"] in row
        for command in p["recommendation"]["commands"]:
            assert command in row
        for m in p["missingReplicas"]:  # which replicas are missing, and why
            assert f"{m['brokerId']} ({m['cause'].replace('_', ' ')})" in row
        cells = rows.nth(i).locator("td").all_inner_texts()
        headers = page.locator("#risk-table thead th").all_inner_texts()
        as_list = "[{}]".format
        assert cells[headers.index("ELR")] == as_list(",".join(map(str, p["elr"])))
        assert cells[headers.index("Last known ELR")] == as_list(",".join(map(str, p["lastKnownElr"])))
    assert any(p["lastKnownElr"] for p in urgent)  # the scenario has one to show
    assert "--election-type unclean" in rows.nth(0).inner_text()
    assert "committed data may be lost" in rows.nth(0).inner_text()

    broker_rows = page.locator("#broker-table tbody tr")
    assert broker_rows.count() == len(document["brokers"])
    gauges = document["gauges"]
    for i, b in enumerate(document["brokers"]):
        cells = broker_rows.nth(i).locator("td").all_inner_texts()
        assert b["state"].replace("_", " ") == cells[1]
        led = sum(p["leader"] == b["brokerId"] for p in document["partitions"])
        per_broker = [
            gauges[f'elrwatch_broker_{name}_partitions{{broker="{b["brokerId"]}"}}']
            for name in ("isr_missing", "restart_blocking", "restart_offline")
        ]
        assert cells[2:6] == [str(led), *(str(int(v)) for v in per_broker)]
        headers = page.locator("#broker-table thead th").all_inner_texts()
        next_start = broker_rows.nth(i).locator("td").nth(headers.index("Next start"))
        clean = b["nextStart"]["clean"]
        expected = {True: "clean", False: "unclean"}.get(clean, "running" if b["state"] == "active" else "unknown")
        assert next_start.inner_text() == expected and next_start.get_attribute("title") == b["nextStart"]["basis"]
    assert "unclean" in page.inner_text("#broker-table")  # broker 1's agent found no .kafka_cleanshutdown
    # the trend of the last hour: one point per series (the store was loaded once), the values of the gauges
    legend = page.inner_text("#trend-legend")
    assert f"under min ISR: now {int(gauges['elrwatch_global_under_min_isr_partitions'])}" in legend
    assert f"offline: now {int(gauges['elrwatch_offline_partitions'])}" in legend
    assert page.locator("#trend svg path[data-series=underMinIsr]").count() == 1
    assert page.locator("#token-form").is_hidden()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "status-page.png"), full_page=True)
    assert (ARTIFACTS / "status-page.png").stat().st_size > 10_000

    # it refreshes itself: a new batch shows up without reloading the page
    store = StatusStore(server_store_url(server))
    healthy = [
        dict(p, status="HEALTHY", leader=3, leaderless=False, recommendation=None)
        for p in document["partitions"]
        if p["topic"] == "audit-log"
    ]
    assert store.write_batch(4, partitions=healthy)
    store.dispose()
    page.wait_for_function(
        f"document.querySelectorAll('#risk-table tbody tr').length === {len(urgent) - 1}", timeout=15_000
    )
    assert external == [], f"the page must work offline, it fetched {external}"

    page.close()


def server_store_url(server: ApiServer) -> str:
    args = server.proc.args
    return args[args.index("--store") + 1]


def test_status_page_asks_for_the_token(browser, secured_server: ApiServer) -> None:
    page = browser.new_page()
    page.goto(secured_server.url + "/")
    page.wait_for_selector("#token-form:not([hidden])", timeout=15_000)
    assert "bearer token" in page.inner_text("#error")
    assert page.locator("#token-button").is_visible()
    page.fill("#token-input", TOKEN)
    page.click("#token-form button[type=submit]")
    page.wait_for_selector("body[data-loaded=true]", timeout=15_000)
    assert page.locator("#risk-table tbody tr").count() > 0
    assert page.evaluate("sessionStorage.getItem('elrwatch.token')") == TOKEN
    page.close()


def test_chromium_is_debian_s() -> None:
    assert shutil.which("chromium") == CHROMIUM or Path(CHROMIUM).exists()
