"""State servers: long-lived processes of the job's driver that keep the buckets' state (local mode).

Why: Spark hands a task any idle Python worker of its pool and stops a worker idle for 60 s, so a bucket cached
in a Python worker is lost whenever another worker gets its task, after a quiet minute, and at every restart; with
two state tasks the workers would swap buckets at every batch. Here the driver starts one server process per state
task (``--state-tasks``; `route.group_keys` spreads the buckets evenly over the tasks), each owning the buckets of
its task (`lane_of`). The state function in the Spark worker only forwards a group's rows and the bucket's
committed state row (token, blob) to its server and stores the row the server returns: every bucket stays cached
in one process, whichever worker Spark picks, and two tasks' servers apply their buckets in parallel.

Exactly-once is unchanged: a server applies a batch to its cached state only when the committed token matches
(`bucket.run_bucket`), otherwise it rebuilds the bucket from the row (snapshot + delta). After each batch a server
writes the row it returned to ``<state-dir>/lane-bucket-<nnnn>.last``; a restarted job's servers preload those while
Spark starts, and the first batch hits them if Spark committed that row (a token mismatch just means a reload).

Transport: `multiprocessing.connection` over a Unix socket in a private directory, authenticated with a random key
passed to the servers in their environment (never on the command line, never logged). One request per connection.
The driver restarts a server that died (`StateService.check`); its buckets are then rebuilt from their rows.
No Spark import here.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import marshal
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Listener

from elrwatch.streaming.bucket import StateSettings, index_kept_state, load_row, run_bucket
from elrwatch.streaming.local.memory import gc_paused, keep_out_of_gc
from elrwatch.streaming.priority import lower_current_thread_priority
from elrwatch.streaming.route import lane_of
from elrwatch.streaming.snapshots import BucketState, SnapshotError

log = logging.getLogger("elrwatch.state-service")

KEY_ENV = "ELRWATCH_STATE_SERVICE_KEY"
LAST_ROW_PREFIX = "lane-bucket-"  # the restart hints in the snapshot directory
LAST_ROW_SUFFIX = ".last"
CONNECT_TIMEOUT_S = 120.0  # a restarting server (driver's check every few seconds) or one still preloading
_PR_SET_PDEATHSIG = 1


def last_row_path(state_dir: str, bucket: int) -> str:
    """The restart hint of ``bucket``: the state row its server returned last."""
    return os.path.join(state_dir, f"{LAST_ROW_PREFIX}{bucket:04d}{LAST_ROW_SUFFIX}")


def remove_restart_hints(state_dir: str) -> None:
    """Delete the restart hints in ``state_dir`` (a new checkpoint would only preload them for nothing)."""
    for name in os.listdir(state_dir):
        if name.startswith(LAST_ROW_PREFIX):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(state_dir, name))


class ServiceError(RuntimeError):
    """A state server failed a request (its one-line reason), or could not be reached."""


class ServiceClient:
    """What the state function (in a Spark worker) needs to reach the servers: picklable, holds the key."""

    def __init__(self, addresses: list[str], key: bytes) -> None:
        self.addresses = addresses
        self.key = key

    def __repr__(self) -> str:  # never show the key
        return f"ServiceClient({self.addresses})"

    def call(
        self, bucket: int, key: int, row: tuple[str, bytes] | None, rows: list[tuple[str, str, int, bytes | None]]
    ) -> tuple[str, bytes, list[bytes]]:
        """Apply a group (``key``: its group key) at the bucket's server: (new token, new state row, bodies)."""
        address = self.addresses[lane_of(key, len(self.addresses))]
        request = marshal.dumps((bucket, row, rows))
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while True:
            try:
                with Client(address, family="AF_UNIX", authkey=self.key) as conn:
                    conn.send_bytes(request)
                    reply = marshal.loads(conn.recv_bytes())
                break
            except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, BrokenPipeError, EOFError) as exc:
                # not started yet, or died (the driver restarts it): a retry is safe, the committed row decides
                if time.monotonic() > deadline:
                    raise ServiceError(f"state server {address} unreachable for bucket {bucket}: {exc!r}") from None
                time.sleep(0.2)
        if reply[0] != "ok":
            raise ServiceError(f"state server, bucket {bucket}: {reply[1]}")
        return reply[1], reply[2], reply[3]


def _die_with_parent(parent: int) -> None:
    """Linux: get SIGKILL when the driver dies (even by SIGKILL), so no server outlives its job."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the driver died before prctl took effect
        os._exit(1)


def _write_last_row(state_dir: str, bucket: int, token: str, blob: bytes) -> None:
    """The row just returned (a restart hint, not a commit: no fsync; tmp + rename so it is whole or absent)."""
    os.makedirs(state_dir, exist_ok=True)  # the first snapshot creates it, which may come after many batches
    path = last_row_path(state_dir, bucket)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(marshal.dumps((token, blob)))
    os.replace(tmp, path)


def _preload(
    settings: StateSettings, lane: int, lanes: int, keys: list[int], cache: dict[int, tuple[str, BucketState]]
) -> None:
    """Rebuild this lane's buckets from their last returned rows (snapshot + delta) before the first request."""
    if settings.state_mode != "snapshot" or not settings.state_dir or not settings.use_cache:
        return
    snapshots = settings.snapshots()
    for bucket in range(settings.buckets):
        if lane_of(keys[bucket], lanes) != lane:
            continue
        path = last_row_path(settings.state_dir, bucket)
        try:
            with open(path, "rb") as fh:
                token, blob = marshal.loads(fh.read())
            started = time.perf_counter()
            bs = load_row(blob, snapshots, bucket, settings.buckets, settings.engine)
        except FileNotFoundError:
            continue
        except (SnapshotError, ValueError, EOFError, TypeError) as exc:
            log.warning("lane %d: bucket %d not preloaded (%s); it loads from Spark's state", lane, bucket, exc)
            continue
        index_kept_state(bs)  # as run_bucket leaves a cached state (a storm's fence record needs it)
        cache[bucket] = (token, bs)
        log.info("lane %d: bucket %d preloaded in %.1fs", lane, bucket, time.perf_counter() - started)


# The preload shares the machine with the restarting JVM and Spark's Python planners, which the first batch waits
# for in a row; at a lower priority it takes the CPU they leave (at 1M partitions it is seconds of CPU, which on
# 2 cores would delay Spark's start by as much). The buckets are needed only at the first batch's state stage.
PRELOAD_NICENESS = 10  # added to the server's own


def preload_at_low_priority(
    settings: StateSettings, lane: int, lanes: int, keys: list[int], cache: dict[int, tuple[str, BucketState]]
) -> None:
    """`_preload` in a thread of lower CPU priority, waited for (Linux sets a niceness per thread, and raising
    one's own needs no privilege; the serving thread keeps its own). An error is raised here as if in-line."""
    errors: list[BaseException] = []

    def run() -> None:
        lower_current_thread_priority(PRELOAD_NICENESS)
        try:
            _preload(settings, lane, lanes, keys, cache)
        except BaseException as exc:  # re-raised in the serving thread: the driver restarts a failed server
            errors.append(exc)

    thread = threading.Thread(target=run, name=f"preload-lane-{lane}")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def serve(address: str, key: bytes, settings: StateSettings, lane: int, lanes: int, keys: list[int]) -> None:
    """Serve requests on ``address`` forever (one per connection, in order)."""
    cache: dict[int, tuple[str, BucketState]] = {}
    hint_warned = False
    with Listener(address, family="AF_UNIX", authkey=key) as listener:
        with gc_paused():
            preload_at_low_priority(settings, lane, lanes, keys, cache)
        keep_out_of_gc()
        while True:
            try:
                conn = listener.accept()
            except (OSError, EOFError, AuthenticationError) as exc:  # e.g. a client without the key
                log.warning("lane %d: refused a connection: %s", lane, exc)
                continue
            with conn:
                try:
                    bucket, row, rows = marshal.loads(conn.recv_bytes())
                except (OSError, EOFError, ValueError) as exc:
                    log.warning("lane %d: bad request: %s", lane, exc)
                    continue
                try:
                    token, blob, bodies = run_bucket(bucket, settings, row, iter(rows), len(rows), cache)
                    del rows
                    reply = marshal.dumps(("ok", token, blob, bodies))
                    del bodies
                except SnapshotError as exc:  # an operational error, already one line
                    log.error("lane %d: %s", lane, exc)
                    reply = marshal.dumps(("error", f"SnapshotError: {exc}"))
                    token = None
                except Exception as exc:  # reported to the Spark task, which fails the batch (as in-worker)
                    log.exception("lane %d: bucket %d failed", lane, bucket)
                    reply = marshal.dumps(("error", f"{type(exc).__name__}: {exc}"))
                    token = None
                if token is not None and settings.state_mode == "snapshot" and settings.state_dir:
                    # before the reply: once Spark can commit the row, a restart finds it
                    try:
                        _write_last_row(settings.state_dir, bucket, token, blob)
                    except OSError as exc:  # not fatal: a restart then rebuilds the bucket from Spark's row
                        if not hint_warned:
                            log.warning("lane %d: cannot write restart hints (%s); restarts will be slower", lane, exc)
                        hint_warned = True
                with contextlib.suppress(OSError):
                    conn.send_bytes(reply)
                del reply


class StateService:
    """The driver's side: start the lane servers, restart one that died, stop them all."""

    def __init__(self, settings: StateSettings, lanes: int, keys: list[int] | None = None) -> None:
        """``lanes``: the state tasks (one server each); ``keys``: each bucket's group key (None: its number)."""
        if lanes < 1:
            raise ValueError("lanes must be >= 1")
        self.settings = settings
        self.lanes = lanes
        self.keys = list(keys) if keys is not None else list(range(settings.buckets))
        self._key = secrets.token_bytes(32)
        self._dir = tempfile.mkdtemp(prefix="elrwatch-state-")  # 0700: only this user reaches the sockets
        self.addresses = [os.path.join(self._dir, f"lane-{lane}.sock") for lane in range(lanes)]
        self._procs: list[subprocess.Popen | None] = [None] * lanes

    def client(self) -> ServiceClient:
        return ServiceClient(list(self.addresses), self._key)

    def _spawn(self, lane: int) -> subprocess.Popen:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.addresses[lane])
        cmd = [
            sys.executable,
            "-P",  # the installed elrwatch (the driver's), never an `elrwatch` folder in the working directory
            "-m",
            "elrwatch.streaming.local.state_service",
            "--address",
            self.addresses[lane],
            "--lane",
            str(lane),
            "--lanes",
            str(self.lanes),
            "--parent",
            str(os.getpid()),
            "--settings",
            json.dumps(asdict(self.settings)),
            "--keys",
            ",".join(map(str, self.keys)),
        ]
        env = {**os.environ, KEY_ENV: self._key.hex()}
        return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)

    def start(self) -> None:
        for lane in range(self.lanes):
            self._procs[lane] = self._spawn(lane)
        log.info("%d state servers started (buckets cached per lane, preloading the last rows)", self.lanes)

    def check(self) -> None:
        """Restart any server that exited (its buckets are rebuilt from Spark's state on their next batch)."""
        for lane, proc in enumerate(self._procs):
            if proc is not None and proc.poll() is not None:
                log.warning("state server of lane %d exited with %s: restarting it", lane, proc.returncode)
                self._procs[lane] = self._spawn(lane)

    def wait_listening(self, timeout_s: float = 30.0) -> bool:
        """Whether every server's socket exists within ``timeout_s`` (clients wait for them anyway)."""
        deadline = time.monotonic() + timeout_s
        while not all(os.path.exists(a) for a in self.addresses):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p is not None]

    def stop(self) -> None:
        for proc in self._procs:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            if proc is not None:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._procs = [None] * self.lanes
        shutil.rmtree(self._dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point of one server process (started by `StateService`, not by hand)."""
    parser = argparse.ArgumentParser(description="elrwatch state server (started by `elrwatch stream`).")
    parser.add_argument("--address", required=True)
    parser.add_argument("--lane", type=int, required=True)
    parser.add_argument("--lanes", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--settings", required=True, help="StateSettings as JSON")
    parser.add_argument("--keys", required=True, help="each bucket's group key, comma-separated")
    args = parser.parse_args(argv)
    _die_with_parent(args.parent)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    key_hex = os.environ.pop(KEY_ENV, "")
    if not key_hex:
        parser.error(f"{KEY_ENV} is not set")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when to stop (after the running batch)
    settings = StateSettings(**json.loads(args.settings))
    keys = [int(k) for k in args.keys.split(",")]
    serve(args.address, bytes.fromhex(key_hex), settings, args.lane, args.lanes, keys)


if __name__ == "__main__":
    main()
