"""API benchmark: p50/p99 latency and requests/s on a SQLite status store holding 1M partitions.

    python bench/api.py [--partitions 1000000] [--db DIR/api.db] [--reuse] [--duration 10]

Fills the store with ``load_document`` of a generated report document, starts ``elrwatch api`` (uvicorn, one
worker) and drives it with wrk (Debian package; falls back to an httpx client when wrk is missing) for:
a single-partition lookup (random topic/partition per request) and ``/v1/summary``.
Targets: lookup p99 <= 10 ms, summary p99 <= 50 ms, >= 1,000 requests/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from elrwatch.devtools.kafka_cluster import free_port
from elrwatch.state.status import STATUSES as STATUS_ORDER
from elrwatch.store import StatusStore

T0 = 1_763_700_000_000
BROKERS = 12
PARTITIONS_PER_TOPIC = 100


def _topic(t: int) -> str:
    return f"topic-{t:05d}"


def _topic_id(t: int) -> str:
    return f"T{t:021d}"


def generate_partitions(n: int, seed: int = 7) -> Iterator[dict[str, Any]]:
    """``n`` partition documents (DESIGN §5 shape), sorted by (topic, partition); ~0.5 % not healthy."""
    rng = random.Random(seed)
    weights = [0.0002, 0.0002, 0.0003, 0.0003, 0.001, 0.002, 0.001]
    for i in range(n):
        t, p = divmod(i, PARTITIONS_PER_TOPIC)
        replicas = [(i + k) % BROKERS for k in range(3)]
        roll, status, acc = rng.random(), "HEALTHY", 0.0
        for name, w in zip(STATUS_ORDER, weights, strict=False):
            acc += w
            if roll < acc:
                status = name
                break
        leaderless = status.startswith("LEADERLESS") or status == "MANUAL_ELECTION_REQUIRED"
        isr = {"HEALTHY": replicas, "UNDER_REPLICATED": replicas[:2], "AT_MIN_ISR": replicas[:2]}.get(
            status, [] if leaderless else replicas[:1]
        )
        elr = replicas[1:2] if status == "UNDER_MIN_ISR" else []
        needs = STATUS_ORDER.index(status) <= STATUS_ORDER.index("UNDER_MIN_ISR")
        yield {
            "topic": _topic(t),
            "topicId": _topic_id(t),
            "partitionId": p,
            "replicas": replicas,
            "isr": isr,
            "elr": elr,
            "lastKnownElr": [],
            "leader": -1 if leaderless else (isr[0] if isr else replicas[0]),
            "leaderEpoch": 3,
            "partitionEpoch": 7,
            "leaderRecoveryState": 1 if status == "RECOVERING" else 0,
            "addingReplicas": [],
            "removingReplicas": [],
            "effectiveMinIsr": 2,
            "underMinIsr": len(isr) < 2,
            "atMinIsr": len(isr) == 2,
            "leaderless": leaderless,
            "electable": sorted(set(isr) | set(elr)),
            "liveElectable": sorted(set(isr) | set(elr)),
            "status": status,
            "statusSinceMs": T0 - rng.randrange(86_400_000),
            "statusSinceOffset": i,
            "lastLeaderChange": "clean",
            "lastOffset": i,
            "lastTimestampMs": T0,
            "lastPosition": f"elrwatch-events/{i % 12}@{i}",
            "violations": [],
            "outlook": {"summary": "no election needed" if not leaderless else "waits for a fenced ELR member"},
            "recommendation": {
                "strategy": "Balanced",
                "action": "restore_replicas" if needs else "none",
                "summary": "Bring the missing replicas back." if needs else "No action needed.",
                "risk": "none",
                "commands": [f"kafka-topics.sh --bootstrap-server $BOOTSTRAP --describe --topic {_topic(t)}"]
                if needs
                else [],
            },
        }


def generate_document(n: int) -> dict[str, Any]:
    """A report document with ``n`` partitions (a generator: consumed once by ``load_document``)."""
    topics = (n + PARTITIONS_PER_TOPIC - 1) // PARTITIONS_PER_TOPIC
    counts = {s: 0 for s in STATUS_ORDER}
    for doc in generate_partitions(n):  # a first cheap pass for the gauges
        counts[doc["status"]] += 1
    gauges: dict[str, float] = {f'elrwatch_partitions{{status="{s}"}}': c for s, c in counts.items()}
    gauges.update(
        {
            "elrwatch_partition_count": n,
            "elrwatch_topic_count": topics,
            "elrwatch_elr_enabled": 1,
            'elrwatch_brokers{state="active"}': BROKERS,
            'elrwatch_brokers{state="fenced"}': 0,
            "elrwatch_last_event_timestamp_seconds": T0 / 1000,
        }
    )
    return {
        "partitions": generate_partitions(n),
        "brokers": [
            {
                "brokerId": b,
                "epoch": 100 + b,
                "incarnationId": None,
                "fenced": False,
                "inControlledShutdown": False,
                "registered": True,
                "rack": None,
                "state": "active",
            }
            for b in range(BROKERS)
        ],
        "topics": [
            {
                "topic": _topic(t),
                "topicId": _topic_id(t),
                "partitionCount": PARTITIONS_PER_TOPIC,
                "replicationFactor": 3,
                "configs": {},
            }
            for t in range(topics)
        ],
        "cluster": {"elrEnabled": True, "metadataVersion": 26, "features": {}, "configs": {}},
        "gauges": gauges,
        "violations": [],
        "quarantined": {"count": 0, "byReason": {}, "records": []},
        "counts": {},
    }


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}[unit]


LUA_LOOKUP = """
math.randomseed(42)
request = function()
  local i = math.random(0, {n} - 1)
  local t = math.floor(i / {ppt})
  return wrk.format("GET", string.format("/v1/partitions/topic-%05d/%d", t, i % {ppt}))
end
"""


def run_wrk(url: str, path: str, connections: int, duration: int, lua: str | None) -> dict[str, float]:
    """One wrk run: requests/s, p50, p99 (ms), non-2xx count."""
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency"]
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        if lua:
            script.write(lua)
            cmd += ["-s", script.name]
    out = subprocess.run([*cmd, url + path], capture_output=True, text=True, check=True).stdout
    os.unlink(script.name)
    latency = dict(re.findall(r"^\s+(50|99)(?:\.0+)?%\s+(\S+)$", out, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "p50": _ms(latency["50"]),
        "p99": _ms(latency["99"]),
        "errors": float(non2xx.group(1)) if non2xx else 0.0,
    }


def run_httpx(url: str, paths: list[str], connections: int, duration: int) -> dict[str, float]:
    """Fallback load generator (slower than wrk: the client competes with the server for CPU)."""

    async def main() -> dict[str, float]:
        latencies: list[float] = []
        errors = 0
        stop = time.perf_counter() + duration
        limits = httpx.Limits(max_connections=connections)
        async with httpx.AsyncClient(base_url=url, limits=limits) as client:

            async def worker(k: int) -> None:
                nonlocal errors
                rng = random.Random(k)
                while time.perf_counter() < stop:
                    start = time.perf_counter()
                    r = await client.get(rng.choice(paths))
                    latencies.append((time.perf_counter() - start) * 1000)
                    errors += r.status_code >= 300

            started = time.perf_counter()
            await asyncio.gather(*(worker(k) for k in range(connections)))
            elapsed = time.perf_counter() - started
        latencies.sort()
        return {
            "rps": len(latencies) / elapsed,
            "p50": latencies[len(latencies) // 2],
            "p99": latencies[int(len(latencies) * 0.99)],
            "errors": float(errors),
        }

    return asyncio.run(main())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1_000_000)
    parser.add_argument("--db", default=str(Path(tempfile.gettempdir()) / "elrwatch-bench" / "api.db"))
    parser.add_argument("--reuse", action="store_true", help="Reuse an existing store file at --db.")
    parser.add_argument("--duration", type=int, default=10, help="Seconds per measurement.")
    parser.add_argument("--connections", type=int, default=8, help="Concurrent connections (throughput runs).")
    args = parser.parse_args()

    db = Path(args.db)
    url = f"sqlite:///{db}"
    if not (args.reuse and db.exists()):
        db.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        store = StatusStore(url)
        start = time.perf_counter()
        store.load_document(generate_document(args.partitions))
        load_s = time.perf_counter() - start
        store.dispose()
        print(
            f"load_document: {args.partitions:,} partitions in {load_s:.1f} s "
            f"({args.partitions / load_s:,.0f} partitions/s), store {db.stat().st_size / 1e6:,.0f} MB"
        )

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELRWATCH_")}
    server = subprocess.Popen(
        [
            sys.executable,
            "-P",
            "-m",
            "elrwatch.cli",
            "api",
            "--store",
            url,
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:  # up; /readyz also wants fresh data
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("elrwatch api did not become ready")
            time.sleep(0.2)
        n = args.partitions
        sample = httpx.get(
            f"{base}/v1/partitions/{_topic((n - 1) // PARTITIONS_PER_TOPIC)}/{(n - 1) % PARTITIONS_PER_TOPIC}"
        )
        assert sample.status_code == 200, sample.text
        use_wrk = shutil.which("wrk") is not None
        print(f"load average before measuring: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(
            f"server: uvicorn, 1 worker, store {n:,} partitions; load generator: {'wrk' if use_wrk else 'httpx'}; "
            f"{os.cpu_count()} CPUs shared with the load generator"
        )
        lua = LUA_LOOKUP.format(n=n, ppt=PARTITIONS_PER_TOPIC)
        rng = random.Random(1)
        lookup_paths = [
            f"/v1/partitions/{_topic(i // PARTITIONS_PER_TOPIC)}/{i % PARTITIONS_PER_TOPIC}"
            for i in (rng.randrange(n) for _ in range(10_000))
        ]
        results = {}
        for name, path, targets in (
            ("lookup", "/v1/partitions/x/0", (10.0, 1000.0)),
            ("summary", "/v1/summary", (50.0, 1000.0)),
        ):
            for connections in (1, args.connections):
                if use_wrk:
                    r = run_wrk(base, path, connections, args.duration, lua if name == "lookup" else None)
                else:
                    r = run_httpx(base, lookup_paths if name == "lookup" else [path], connections, args.duration)
                results[name, connections] = r
                p99_target, rps_target = targets
                verdict = "OK" if r["p99"] <= p99_target and r["errors"] == 0 else "MISSED"
                print(
                    f"{name:8s} c={connections:<3d} p50 {r['p50']:6.2f} ms  p99 {r['p99']:6.2f} ms "
                    f"(target <= {p99_target:.0f} ms: {verdict})  {r['rps']:8,.0f} req/s "
                    f"(target >= {rps_target:,.0f}: {'OK' if r['rps'] >= rps_target else 'MISSED'})  "
                    f"non-2xx {r['errors']:.0f}"
                )
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
