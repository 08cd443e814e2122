"""State servers (streaming/local/state_service.py): same results as applying in the Spark worker, restart preload,
a killed server restarted, Spark's hash partitioning reproduced."""

from __future__ import annotations

import os
import signal
import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client

import pytest
from test_streaming_unit import _routed

from elrwatch.state.eventgen import scenario
from elrwatch.streaming import bucket as bucket_module
from elrwatch.streaming import payload as payload_module
from elrwatch.streaming import snapshots as snapshot_module
from elrwatch.streaming.local.state_service import StateService, last_row_path
from elrwatch.streaming.route import group_keys, lane_of, spark_hash_int

# hash(cast(id as int)) from Spark 4 (`spark.range(-3, 5).selectExpr("hash(cast(id as int))")`)
SPARK_HASHES = {
    -3: -1573329414,
    -2: -1160545675,
    -1: -1604776387,
    0: 933211791,
    1: -559580957,
    2: 1765031574,
    3: -1823081949,
    4: -397064898,
}


def test_spark_hash_of_an_int_is_reproduced():
    assert {value: spark_hash_int(value) for value in SPARK_HASHES} == SPARK_HASHES


@pytest.mark.parametrize(("buckets", "partitions"), [(2, 2), (4, 2), (4, 4), (16, 3), (3, 1)])
def test_group_keys_spread_buckets_evenly_over_the_state_tasks(buckets, partitions):
    keys = group_keys(buckets, partitions)
    assert len(set(keys)) == buckets
    assert [lane_of(k, partitions) for k in keys] == [b % partitions for b in range(buckets)]


def test_grouping_by_bucket_number_would_not_spread_them():
    """Why group keys exist: Spark's hash puts buckets 0 and 1 (of 2) in the same one of 2 tasks."""
    assert lane_of(0, 2) == lane_of(1, 2)


def _batches(buckets: int, size: int = 15):
    lines = [x.decode() for x in scenario(3, 10, 4, steps=25, churn=100, seed=11)]
    lines.insert(7, "not json")
    routed = _routed(lines, buckets)
    for bucket in range(buckets):
        part = routed[routed.bucket == bucket]
        yield bucket, [list(bucket_module._ordered_rows(part.iloc[i : i + size])) for i in range(0, len(part), size)]


def _payload(bodies: list[bytes]) -> tuple[dict, str]:
    (head,), chunks = payload_module.decode_payloads(list(bodies))
    head["partitions"] = [
        {"topicId": r[0], "partitionId": r[1], "row": r} for r in payload_module.iter_partition_rows(chunks)
    ]
    timing = head.pop("timing")
    for key in ("partitions", "transitions", "violations"):
        head[key].sort(key=lambda d: (d.get("offset", 0), d["topicId"], d["partitionId"], str(d)))
    return head, timing["cache"]


@pytest.fixture(params=["objects", "columnar"])
def settings(tmp_path, request):
    return bucket_module.StateSettings(
        3, state_mode="snapshot", state_dir=str(tmp_path), delta_max_records=50, engine=request.param
    )


def _service(settings, lanes=2):
    service = StateService(settings, lanes, group_keys(settings.buckets, lanes))
    service.start()
    return service


def test_servers_give_what_the_worker_gives_and_a_restart_preloads(settings, tmp_path):
    keys = group_keys(3, 2)
    reference = bucket_module.StateSettings(**{**settings.__dict__, "state_dir": str(tmp_path / "ref")})
    service = _service(settings)
    try:
        client = service.client()
        for bucket, batches in _batches(3):
            row = None
            ref_row = None
            ref_cache: dict = {}
            for n, rows in enumerate(batches):
                if n == 4 and bucket == 1:  # the job restarts: new servers preload the last rows
                    service.stop()
                    service = _service(settings)
                    client = service.client()
                token, blob, bodies = client.call(bucket, keys[bucket], row, rows)
                ref_token, ref_blob, ref_bodies = bucket_module.run_bucket(
                    bucket, reference, ref_row, iter(rows), len(rows), ref_cache
                )
                got, how = _payload(bodies)
                want, _ = _payload(ref_bodies)
                assert got == want
                assert how == ("hit" if n else "miss"), (bucket, n, how)  # after the restart too: preloaded
                row, ref_row = (token, blob), (ref_token, ref_blob)
        assert all(os.path.exists(last_row_path(settings.state_dir, b)) for b in range(3))
    finally:
        service.stop()
    assert not os.path.exists(service.addresses[0])


def test_a_restart_preloads_buckets_that_never_wrote_a_snapshot(tmp_path):
    """The default state directory (<checkpoint>/bucket-snapshots) exists only once a bucket wrote its first
    snapshot; a bucket below the snapshot bounds must still leave its restart hint (a 300k-partition restart
    missed two of four buckets: 3.3 s of rebuild in its first batch)."""
    settings = bucket_module.StateSettings(3, state_mode="snapshot", state_dir=str(tmp_path / "not-yet"))
    keys = group_keys(3, 1)
    bucket, batches = next(_batches(3))
    service = _service(settings, lanes=1)
    try:
        token, blob, _bodies = service.client().call(bucket, keys[bucket], None, batches[0])
        assert os.path.exists(last_row_path(settings.state_dir, bucket))
        assert not [n for n in os.listdir(settings.state_dir) if n.endswith(snapshot_module.SNAPSHOT_SUFFIX)]
        service.stop()
        service = _service(settings, lanes=1)
        _token, _blob, bodies = service.client().call(bucket, keys[bucket], (token, blob), batches[1])
        assert _payload(bodies)[1] == "hit"
    finally:
        service.stop()


def test_an_uncommitted_row_is_not_used_and_a_killed_server_is_restarted(settings):
    keys = group_keys(3, 2)
    service = _service(settings)
    try:
        client = service.client()
        (bucket, batches), *_ = list(_batches(3))
        token, blob, _ = client.call(bucket, keys[bucket], None, batches[0])
        committed = (token, blob)
        # a batch whose Spark task failed after the server applied it: Spark retries from the committed row
        client.call(bucket, keys[bucket], committed, batches[1])
        retried_token, retried_blob, bodies = client.call(bucket, keys[bucket], committed, batches[1])
        _, how = _payload(bodies)
        assert how == "miss"  # rebuilt from the committed row, not the server's newer state
        lane = lane_of(keys[bucket], 2)
        pid = service.pids()[lane]
        os.kill(pid, signal.SIGKILL)

        def driver_loop() -> None:  # what the driver's wait loop does every 0.5 s
            deadline = time.monotonic() + 30
            while service.pids()[lane] == pid and time.monotonic() < deadline:
                service.check()
                time.sleep(0.05)

        restarter = threading.Thread(target=driver_loop)
        restarter.start()
        # at once: the client retries until the restarted server listens
        _, _, bodies = client.call(bucket, keys[bucket], (retried_token, retried_blob), batches[2])
        restarter.join()
        assert service.pids()[lane] != pid
        _, how = _payload(bodies)
        assert how == "hit"  # the restarted server preloaded the last row it had returned
    finally:
        service.stop()


def test_a_client_without_the_key_is_refused_and_the_server_goes_on(settings):
    keys = group_keys(3, 2)
    service = _service(settings)
    try:
        assert service.wait_listening()
        # The socket file exists from bind(); until listen() a connection is refused: poll until one is answered.
        deadline = time.monotonic() + 30
        while True:
            try:
                with pytest.raises(AuthenticationError):
                    Client(service.addresses[0], family="AF_UNIX", authkey=b"not the key")
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "the state server never listened"
                time.sleep(0.02)
        (bucket, batches), *_ = list(_batches(3))
        _, _, bodies = service.client().call(bucket, keys[bucket], None, batches[0])
        assert _payload(bodies)[0]["bucket"] == bucket
        assert "not the key" not in repr(service.client())
    finally:
        service.stop()


def test_a_server_error_is_one_line_for_the_spark_task(settings, tmp_path):
    from elrwatch.streaming.local.state_service import ServiceError

    keys = group_keys(3, 2)
    service = _service(settings)
    try:
        bad_row = ("token-of-nothing", b"S" + b"\0" * 8)  # not a state row
        with pytest.raises(ServiceError, match=r"^state server, bucket 0: \w+"):
            service.client().call(0, keys[0], bad_row, [])
    finally:
        service.stop()


def test_the_preload_runs_at_a_lower_priority_than_the_serving_thread(monkeypatch, tmp_path):
    """A restart's preload yields the CPU to the JVM and planners the first batch waits for; the thread that
    then serves the batches keeps its priority, and a preload error still reaches the serving thread."""
    from elrwatch.streaming.local import state_service

    serving = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen: dict[str, int] = {}

    def fake_preload(settings, lane, lanes, keys, cache):
        seen["preload"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        cache[lane] = ("token", None)

    monkeypatch.setattr(state_service, "_preload", fake_preload)
    cache: dict = {}
    state_service.preload_at_low_priority(None, 3, 4, [], cache)
    assert cache == {3: ("token", None)}
    assert seen["preload"] == min(19, serving + state_service.PRELOAD_NICENESS)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == serving

    def failing_preload(*_args):
        raise MemoryError("no room")

    monkeypatch.setattr(state_service, "_preload", failing_preload)
    with pytest.raises(MemoryError, match="no room"):
        state_service.preload_at_low_priority(None, 0, 1, [], {})
