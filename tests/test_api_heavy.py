"""Heavy queries cannot pin the API: at most --heavy-query-slots what-ifs run at once (one more: 503 problem+json
with Retry-After, at once), each stops at --heavy-query-timeout-seconds (a one-line 503, its thread freed), and a
load test on a generated 100k-partition store: many concurrent what-ifs plus lookups, nothing fails but the
documented 503 and lookups stay quick."""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from test_api import scenario_lines
from test_status_page import ApiServer

from elrwatch.api import whatif as api_whatif
from elrwatch.api.app import create_app
from elrwatch.api.errors import PROBLEM
from elrwatch.api.settings import Settings
from elrwatch.devtools.generated_store import PARTITIONS_PER_TOPIC, generate_document, topic_name
from elrwatch.state.replay import replay_lines
from elrwatch.store import StatusStore


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[StatusStore]:
    s = StatusStore(f"sqlite:///{tmp_path}/heavy.db")
    s.load_document(replay_lines(scenario_lines(), "scenario.jsonl").document(advice=False), batch_id=1)
    yield s
    s.dispose()


def test_past_the_slots_a_whatif_gets_503_with_retry_after_at_once(
    store: StatusStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, started = threading.Event(), threading.Event()
    real = api_whatif.run_whatif

    def slow(*args: Any, **kwargs: Any) -> Any:
        started.set()
        assert release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr("elrwatch.api.routers.whatif.run_whatif", slow)
    app = create_app(Settings(store=str(store.url), heavy_query_slots=1), store=store)
    with TestClient(app) as client:
        first: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: first.update(r=client.get("/v1/whatif", params={"down": "1"})))
        thread.start()
        assert started.wait(30)
        t0 = time.monotonic()
        busy = client.get("/v1/whatif", params={"down": "2"})
        assert time.monotonic() - t0 < 5  # answered at once, not queued behind the running one
        assert busy.status_code == 503 and busy.headers["content-type"] == PROBLEM
        assert int(busy.headers["retry-after"]) >= 1
        assert "--heavy-query-slots" in busy.json()["detail"] and "\n" not in busy.json()["detail"]
        assert client.get("/v1/summary").status_code == 200  # light requests are not held
        release.set()
        thread.join(30)
        assert first["r"].status_code == 200
        assert client.get("/v1/whatif", params={"down": "2"}).status_code == 200  # the slot came back
        assert app.state.heavy_queries.rejected == 1


def test_a_whatif_past_its_time_limit_ends_with_one_line_and_frees_its_slot(store: StatusStore) -> None:
    app = create_app(Settings(store=str(store.url), heavy_query_slots=1, heavy_query_timeout_seconds=1e-6), store=store)
    with TestClient(app) as client:
        for _ in range(3):  # the one slot is freed each time
            r = client.get("/v1/whatif", params={"down": "0,1,2"})
            assert r.status_code == 503 and r.headers["content-type"] == PROBLEM
            body = r.json()
            assert body["title"] == "Time limit reached" and "--heavy-query-timeout-seconds" in body["detail"]
            assert "\n" not in body["detail"]
        assert app.state.heavy_queries.timed_out == 3


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_load_many_whatifs_and_lookups_on_100k_partitions(tmp_path: Path) -> None:
    partitions = 100_000
    url = f"sqlite:///{tmp_path}/load.db"
    store = StatusStore(url)
    store.load_document(generate_document(partitions), batch_id=1)
    store.dispose()
    server = ApiServer(url, {"ELRWATCH_HEAVY_QUERY_SLOTS": "2"})
    try:
        server.wait_ready()
        statuses: Counter[int] = Counter()
        bad: list[str] = []
        lookups: list[float] = []
        stop = time.monotonic() + 8

        def whatifs(k: int) -> None:
            with httpx.Client(base_url=server.url, timeout=60) as client:
                while time.monotonic() < stop:
                    down = ",".join(str((k + i) % 12) for i in range(1 + k % 4))
                    r = client.get("/v1/whatif", params={"down": down, "limit": 50})
                    statuses[r.status_code] += 1
                    if r.status_code == 503 and "retry-after" not in r.headers:
                        bad.append(f"503 without Retry-After: {r.text}")
                    elif r.status_code not in (200, 503):
                        bad.append(f"{r.status_code}: {r.text[:300]}")

        def lookup(k: int) -> None:
            with httpx.Client(base_url=server.url, timeout=60) as client:
                n = k
                while time.monotonic() < stop:
                    n = (n * 7919 + 13) % partitions
                    t0 = time.monotonic()
                    r = client.get(f"/v1/partitions/{topic_name(n // PARTITIONS_PER_TOPIC)}/{n % PARTITIONS_PER_TOPIC}")
                    lookups.append(time.monotonic() - t0)
                    if r.status_code != 200:
                        bad.append(f"lookup {r.status_code}: {r.text[:300]}")

        threads = [threading.Thread(target=whatifs, args=(k,)) for k in range(8)]
        threads += [threading.Thread(target=lookup, args=(k,)) for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not bad, bad[:5]
        assert statuses[200] > 0, statuses
        p99 = statistics.quantiles(lookups, n=100)[98]
        print(
            f"\nwhat-ifs {dict(statuses)}; lookups {len(lookups)}, p50 {statistics.median(lookups) * 1000:.1f} ms, "
            f"p99 {p99 * 1000:.1f} ms, max {max(lookups) * 1000:.1f} ms"
        )
        assert len(lookups) > 100 and max(lookups) < 2.0, (len(lookups), max(lookups))  # never held by what-ifs
    finally:
        server.stop()
