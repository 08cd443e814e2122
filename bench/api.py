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
from pathlib import Path

import httpx

from elrwatch.devtools.generated_store import PARTITIONS_PER_TOPIC, generate_document, topic_name
from elrwatch.devtools.kafka_cluster import free_port
from elrwatch.store import StatusStore


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
            f"{base}/v1/partitions/{topic_name((n - 1) // PARTITIONS_PER_TOPIC)}/{(n - 1) % PARTITIONS_PER_TOPIC}"
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
            f"/v1/partitions/{topic_name(i // PARTITIONS_PER_TOPIC)}/{i % PARTITIONS_PER_TOPIC}"
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
