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
    page.wait_for_function("!document.getElementById('access').textContent.includes('checking')")
    assert "open, no token required" in page.inner_text("#access")  # and the page says so
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
        # the outlook and the recommendation show once for the rows that share them (cells spanning the group)
        group = page.locator(f"#risk-table tbody tr[data-group='{rows.nth(i).get_attribute('data-group')}']")
        group_text = "\n".join(group.all_inner_texts())
        assert p["outlook"]["summary"] in group_text
        assert p["recommendation"]["summary"] in group_text
        for command in p["recommendation"]["commands"]:
            assert command in group_text
        if p["recommendation"]["action"] == "unclean_recovery":  # the plan and the elrwatch recover command to copy
            assert f"Plan: elect {p['recommendation']['candidate']}" in group_text
            assert p["recommendation"]["recoverCommand"] in group_text
        for m in p["missingReplicas"]:  # which replicas are missing, and why
            assert f"{m['brokerId']} ({m['cause'].replace('_', ' ')})" in row
        cells = rows.nth(i).locator("td").all_inner_texts()
        headers = page.locator("#risk-table thead th").all_inner_texts()
        as_list = "[{}]".format
        assert cells[headers.index("ELR")] == as_list(",".join(map(str, p["elr"])))
        assert cells[headers.index("Last known ELR")] == as_list(",".join(map(str, p["lastKnownElr"])))
    assert any(p["lastKnownElr"] for p in urgent)  # the scenario has one to show
    assert "--election-type unclean" in rows.nth(0).inner_text()
    assert "elrwatch recover ledger 0 --execute" in rows.nth(0).inner_text()
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
    page.wait_for_function(
        f"document.querySelectorAll('#risk-table tbody tr').length === {len(urgent) - 1}", timeout=15_000
    )
    # an operator's `elrwatch recover` run shows on its partition's row
    from test_api import LEDGER_RECOVERED, recovered_ledger_row, scenario_lines

    assert store.write_batch(5, partition_rows=[recovered_ledger_row(scenario_lines())])
    store.dispose()
    page.wait_for_function(
        "[...document.querySelectorAll('#risk-table tbody tr .recovered')].some((e) => e.textContent === "
        f"{LEDGER_RECOVERED!r})",
        timeout=15_000,
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
    page.wait_for_function("!document.getElementById('access').textContent.includes('checking')")
    assert "bearer token is required" in page.inner_text("#access")
    page.fill("#token-input", TOKEN)
    page.click("#token-form button[type=submit]")
    page.wait_for_selector("body[data-loaded=true]", timeout=15_000)
    assert page.locator("#risk-table tbody tr").count() > 0
    assert page.evaluate("sessionStorage.getItem('elrwatch.token')") == TOKEN
    page.close()


def test_chromium_is_debian_s() -> None:
    assert shutil.which("chromium") == CHROMIUM or Path(CHROMIUM).exists()


# --- a wide incident: long topic names, rows sharing Kafka's outlook, brokers down in every way -------------------

LONG_TOPICS = (
    "com.example.payments.settlement.ledger-events-v2-eu-west-1",
    "orders",
    "com.example.inventory.stock-level-changes-compacted",
)
#: The outlook of a partition that keeps leader 0 with brokers 1 and 2 in controlled shutdown (state/advice.py).
SHARED_OUTLOOK_START = "keeps leader 0; acks=all writes fail"


def wide_incident_lines() -> list[str]:
    """5 brokers (broker 4's registration derived by the admin bridge: epoch unknown), 3 topics of 4 partitions
    over replicas (0, 1, 2) or (3, 1, 2), min ISR 2; brokers 1 and 2 in controlled shutdown, so 12 partitions are
    under min ISR with "1 (controlled shutdown), 2 (controlled shutdown)" missing and one of two outlooks; broker 5,
    never registered, holds a replica of orders-4 and the only one of orders-5 (leaderless)."""
    from core_events import (
        broker_change,
        change,
        cluster_min_isr,
        elr_feature,
        envelope,
        feature,
        line,
        partition,
        register,
        topic,
        uuid_of,
    )

    from elrwatch.state.model import UNKNOWN_INCARNATION_ID

    def topic_id(index: int) -> str:
        return uuid_of(0x7000 + index)

    derived = register(4, epoch=1_795_868_477_268_000, rack="rack-1")
    derived[2]["incarnationId"] = UNKNOWN_INCARNATION_ID
    records = [feature("metadata.version", 26), elr_feature(True), cluster_min_isr("2")]
    records += [register(b, rack=f"rack-{b % 3}") for b in range(4)] + [derived]
    for t, name in enumerate(LONG_TOPICS):
        records.append(topic(name, topic_id(t)))
        for pid in range(4):
            replicas = (0, 1, 2) if pid % 2 == 0 else (3, 1, 2)
            records.append(partition(topic_id(t), pid, replicas=replicas, elr=[], last_known_elr=[]))
    records.append(partition(topic_id(1), 4, replicas=(5, 3, 0), isr=(3, 0), elr=[], last_known_elr=[]))
    records.append(partition(topic_id(1), 5, replicas=(5,), isr=(5,), leader=-1, elr=[], last_known_elr=[]))
    records += [broker_change(1, in_controlled_shutdown=1), broker_change(2, in_controlled_shutdown=1)]
    for t in range(len(LONG_TOPICS)):
        for pid in range(4):
            leader = 0 if pid % 2 == 0 else 3
            records.append(change(topic_id(t), pid, isr=[leader], leader=leader, eligibleLeaderReplicas=[1, 2]))
    t0 = int(time.time() * 1000) - 3_600_000
    return [line(envelope(*r, offset=100 + i, timestamp=t0 + i * 1000)) for i, r in enumerate(records)]


@pytest.fixture(scope="module")
def wide_document() -> dict:
    from elrwatch.state.replay import replay_lines

    return replay_lines(wide_incident_lines(), "wide.jsonl").document(advice=True)


@pytest.fixture(scope="module")
def wide_server(tmp_path_factory: pytest.TempPathFactory, wide_document: dict) -> Iterator[ApiServer]:
    url = f"sqlite:///{tmp_path_factory.mktemp('wide')}/store.db"
    store = StatusStore(url)
    store.load_document(wide_document, batch_id=1)
    store.dispose()
    yield from _server(url)


def _loaded(browser, server: ApiServer, width: int) -> object:
    page = browser.new_page(viewport={"width": width, "height": 1000})
    page.goto(server.url + "/")
    page.wait_for_selector("body[data-loaded=true]", timeout=15_000)
    return page


#: What overflows or is clipped: the page wider than the window, a table scrolling inside its frame, a cell or a
#: part of one (a copy button, a command) outside the window, its frame or its cell.
OVERFLOW_PROBLEMS = """() => {
  const width = window.innerWidth, problems = [];
  const root = document.documentElement;
  if (root.scrollWidth > width) problems.push(`page scrollWidth ${root.scrollWidth} > viewport ${width}`);
  const name = (node) => `${node.tagName.toLowerCase()}.${node.className} "${node.textContent.trim().slice(0, 50)}"`;
  for (const wrap of document.querySelectorAll(".table-wrap")) {
    if (wrap.offsetParent === null) continue;
    const frame = wrap.getBoundingClientRect();
    if (wrap.scrollWidth > wrap.clientWidth) {
      problems.push(`#${wrap.querySelector("table").id} scrolls: ${wrap.scrollWidth} > ${wrap.clientWidth}`);
    }
    for (const cell of wrap.querySelectorAll("th, td")) {
      const box = cell.getBoundingClientRect();
      if (box.left < frame.left - 0.5 || box.right > Math.min(frame.right, width) + 0.5) {
        problems.push(`cell outside its table's frame: ${name(cell)}`);
      }
      if (cell.scrollWidth > cell.clientWidth + 1) problems.push(`cell content wider than the cell: ${name(cell)}`);
      for (const part of cell.querySelectorAll("*")) {
        const r = part.getBoundingClientRect();
        if (r.width && (r.left < box.left - 0.5 || r.right > box.right + 0.5)) {
          problems.push(`${name(part)} sticks out of its cell ${name(cell)}`);
        }
      }
    }
  }
  for (const button of document.querySelectorAll(".cmds button")) {
    const r = button.getBoundingClientRect();
    if (r.left < 0 || r.right > width || r.width === 0) problems.push(`copy button off-screen at ${r.left}-${r.right}`);
  }
  return problems;
}"""


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_page_fits_the_window(browser, wide_server: ApiServer, wide_document: dict, width: int) -> None:
    """No horizontal overflow and nothing clipped, long rows included; a screenshot at each width."""
    page = _loaded(browser, wide_server, width)
    severity = {s: i for i, s in enumerate(STATUS_ORDER)}
    urgent = [p for p in wide_document["partitions"] if severity[p["status"]] <= severity["UNDER_MIN_ISR"]]
    assert page.locator("#risk-table tbody tr").count() == len(urgent) == 13
    assert page.locator(".cmds button").count() > 0
    assert "1 (controlled shutdown)" in page.inner_text("#risk-table")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"status-page-{width}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    problems = page.evaluate(OVERFLOW_PROBLEMS)
    assert problems == [], "\n".join(problems)
    page.close()


def test_the_overflow_check_catches_a_cell_wider_than_the_page(browser, wide_server: ApiServer) -> None:
    """The check above fails where it should: a row made wider than the window is reported."""
    page = _loaded(browser, wide_server, 1280)
    page.evaluate(
        """() => { const code = document.querySelector('.cmds code');
        code.style.whiteSpace = 'pre'; code.style.overflowWrap = 'normal'; code.textContent = 'x'.repeat(400); }"""
    )
    assert page.evaluate(OVERFLOW_PROBLEMS)
    page.close()


def test_a_shared_outlook_shows_once_for_its_partitions(browser, wide_server: ApiServer, wide_document: dict) -> None:
    page = _loaded(browser, wide_server, 1280)
    shared = [p for p in wide_document["partitions"] if p["outlook"]["summary"].startswith(SHARED_OUTLOOK_START)]
    assert len(shared) == 6  # partitions 0 and 2 of each topic
    sentence = shared[0]["outlook"]["summary"]
    assert all(p["outlook"]["summary"] == sentence for p in shared)
    table = page.inner_text("#risk-table")
    assert table.count(sentence) == 1, table
    group = page.locator("#risk-table td.outlook", has_text=sentence)
    assert group.get_attribute("rowspan") == "6"
    assert "6 partitions:" in group.inner_text()
    rows = page.locator(f"#risk-table tbody tr[data-group='{group.get_attribute('data-group')}']")
    assert sorted(rows.locator("td.partition").all_inner_texts()) == sorted(
        f"{p['topic']}-{p['partitionId']}" for p in shared
    )
    # the recommendation shows once for the partitions of one topic in the group, whose commands are the same
    for name in LONG_TOPICS:
        command = f"--topic {name} --under-min-isr-partitions"
        assert sum(command in c for c in rows.locator("td.advice").all_inner_texts()) == 1, name
    page.close()


def test_counts_read_in_the_singular_and_the_plural(
    browser, server: ApiServer, wide_server: ApiServer, wide_document: dict
) -> None:
    """No "1 partitions" anywhere on the page; "1 partition" where there is one."""
    import re

    for srv in (server, wide_server):
        page = _loaded(browser, srv, 1440)
        body = page.inner_text("body")
        assert re.findall(r"(?<![\d.,/])1 [a-z]+s\b", body) == [], body  # "/": acks=0/1 writes
        if srv is wide_server:
            assert "1 partition without a safe leader" in page.inner_text("#overall")
        page.close()


def test_brokers_card_counts_brokers_down_and_unknown_values(
    browser, wide_server: ApiServer, wide_document: dict
) -> None:
    """Brokers named by partitions without a registration count as down; an epoch the source does not know shows as
    unknown, not the admin bridge's own number."""
    page = _loaded(browser, wide_server, 1280)
    card = page.locator(".card", has_text="Brokers").inner_text()
    assert "3 / 6" in card and "active · 2 shutting down · 1 down (unregistered)" in card, card
    row = page.locator("#broker-table tbody tr[data-broker='4']").locator("td").all_inner_texts()
    headers = page.locator("#broker-table thead th").all_inner_texts()
    assert row[headers.index("Epoch")] == "unknown" and row[headers.index("Incarnation")] == "unknown", row
    assert "1795868477268000" not in page.inner_text("body")
    known = page.locator("#broker-table tbody tr[data-broker='0']").locator("td").all_inner_texts()
    assert known[headers.index("Epoch")] == "100"
    page.close()
