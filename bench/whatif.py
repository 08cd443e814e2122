"""What-if benchmark: latency for 1, 2, 5 and 20 brokers down on a SQLite status store of 1M partitions, 33 brokers.

    python bench/whatif.py [--partitions 1000000] [--brokers 33] [--db DIR/whatif.db] [--reuse] [--reference]

In this process, on the same store, one after the other:

* **replayed** (``--reference``; what the API did before: the affected part of the store rebuilt through the core,
  replayed, taken down partition by partition) for 1 and 2 brokers down;
* **direct**: the store's registrations read without documents or advice, equal registrations sharing one pass
  through the controller model (what the API answers while its index is being built);
* **index**: the API's in-memory columns (api/whatif_index.py): its first build, its refresh after a batch that
  rewrote 10,000 partitions, then each what-if (median of 3).

Then over HTTP (`elrwatch api`, one uvicorn worker): each what-if's latency, and the lookup p50/p99 while
``--heavy-query-slots`` (2) clients send what-ifs without pause. Targets: 1 down <= 0.5 s, 20 down <= 1 s,
lookup p99 <= 50 ms while the slots of what-ifs run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from elrwatch.api.whatif import replayed_whatif, run_whatif
from elrwatch.api.whatif_index import WhatIfIndex
from elrwatch.devtools.generated_store import PARTITIONS_PER_TOPIC, generate_document, topic_name
from elrwatch.devtools.kafka_cluster import free_port
from elrwatch.store import StatusStore

DOWN_SETS = (1, 2, 5, 20)
TARGETS_S = {1: 0.5, 20: 1.0}
LOOKUP_P99_TARGET_MS = 50.0


def _timed(fn, repeat: int = 1) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def _serve(url: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELRWATCH_")}
    cmd = [sys.executable, "-P", "-m", "elrwatch.cli", "api", "--store", url, "--port", str(port)]
    server = subprocess.Popen([*cmd, "--log-level", "warning"], env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                return server, base
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            raise SystemExit("elrwatch api did not become ready")
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1_000_000)
    parser.add_argument("--brokers", type=int, default=33)
    parser.add_argument("--db", default=str(Path(tempfile.gettempdir()) / "elrwatch-bench" / "whatif.db"))
    parser.add_argument("--reuse", action="store_true", help="Reuse an existing store file at --db.")
    parser.add_argument("--reference", action="store_true", help="Also time the replayed path (slow).")
    parser.add_argument("--duration", type=float, default=10.0, help="Seconds of lookups under what-if load.")
    args = parser.parse_args()

    db = Path(args.db)
    url = f"sqlite:///{db}"
    if not (args.reuse and db.exists()):
        db.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        store = StatusStore(url)
        load_s, _ = _timed(lambda: store.load_document(generate_document(args.partitions, args.brokers), batch_id=1))
        store.dispose()
        print(f"load_document: {args.partitions:,} partitions, {args.brokers} brokers in {load_s:.1f} s", flush=True)
    store = StatusStore(url)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs", flush=True)
    downs = {k: list(range(k)) for k in DOWN_SETS}

    if args.reference:
        for k in (1, 2):
            seconds, result = _timed(lambda k=k: replayed_whatif(store, downs[k], unclean=False, limit=1000))
            print(f"replayed  {k:>2} down: {seconds:7.3f} s  ({result['partitions']:,} partitions)", flush=True)
    for k in DOWN_SETS:
        seconds, result = _timed(lambda k=k: run_whatif(store, downs[k], unclean=False, limit=1000))
        print(f"direct    {k:>2} down: {seconds:7.3f} s  ({result['partitions']:,} partitions)", flush=True)

    index = WhatIfIndex(store)
    build_s, rows = _timed(index.refresh)
    print(f"index build: {build_s:.1f} s for {rows:,} rows", flush=True)
    changed = [
        {**p, "isr": p["replicas"][:2], "status": "UNDER_REPLICATED"}
        for p in store.partitions_on_brokers([args.brokers - 1])[:10_000]
    ]
    store.write_batch(2, partitions=changed)
    refresh_s, rows = _timed(index.refresh)
    print(f"index refresh after a batch of {len(changed):,} partitions: {refresh_s * 1000:.0f} ms ({rows:,} rows)")
    for k in DOWN_SETS:
        seconds, result = _timed(lambda k=k: index.run(downs[k], unclean=False, limit=1000), repeat=3)
        target = TARGETS_S.get(k)
        verdict = f"  target {target} s: {'met' if seconds <= target else 'MISSED'}" if target else ""
        print(
            f"index     {k:>2} down: {seconds:7.3f} s  ({result['partitions']:,} partitions, "
            f"{result['distinctRegistrations']} registrations){verdict}",
            flush=True,
        )
    store.dispose()

    server, base = _serve(url)
    try:
        with httpx.Client(base_url=base, timeout=120) as client:
            first_s, _ = _timed(lambda: client.get("/v1/whatif", params={"down": "0"}))
            print(f"HTTP first what-if (direct; starts the index build): {first_s:.2f} s", flush=True)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # the index is built when a what-if answers in index time
                seconds, _ = _timed(lambda: client.get("/v1/whatif", params={"down": "0"}))
                if seconds < 0.5:
                    break
                time.sleep(1)
            for k in DOWN_SETS:
                down = ",".join(map(str, downs[k]))
                seconds, r = _timed(lambda down=down: client.get("/v1/whatif", params={"down": down}), repeat=3)
                print(f"HTTP what-if {k:>2} down: {seconds:7.3f} s (status {r.status_code})", flush=True)  # type: ignore[attr-defined]
        stop = time.monotonic() + args.duration
        statuses: list[int] = []
        lookups: list[float] = []

        def whatifs(k: int) -> None:
            with httpx.Client(base_url=base, timeout=120) as client:
                while time.monotonic() < stop:
                    down = ",".join(str((k * 7 + i) % args.brokers) for i in range(DOWN_SETS[k % len(DOWN_SETS)]))
                    statuses.append(client.get("/v1/whatif", params={"down": down, "limit": 100}).status_code)

        def lookup() -> None:
            n = args.partitions
            with httpx.Client(base_url=base, timeout=120) as client:
                i = 1
                while time.monotonic() < stop:
                    i = (i * 7919 + 13) % n
                    start = time.perf_counter()
                    client.get(f"/v1/partitions/{topic_name(i // PARTITIONS_PER_TOPIC)}/{i % PARTITIONS_PER_TOPIC}")
                    lookups.append((time.perf_counter() - start) * 1000)

        threads = [threading.Thread(target=whatifs, args=(k,)) for k in range(2)]
        threads.append(threading.Thread(target=lookup))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        q = statistics.quantiles(lookups, n=100)
        verdict = "met" if q[98] <= LOOKUP_P99_TARGET_MS else "MISSED"
        print(
            f"lookups while 2 what-if clients run: {len(lookups):,}, p50 {q[49]:.1f} ms, p99 {q[98]:.1f} ms "
            f"(target {LOOKUP_P99_TARGET_MS:.0f} ms: {verdict}); what-ifs {len(statuses)} "
            f"({statuses.count(200)} ok, {statuses.count(503)} 503)",
            flush=True,
        )
    finally:
        server.terminate()
        server.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
