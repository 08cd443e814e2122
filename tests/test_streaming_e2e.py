"""End to end: simulator records → Apache Kafka → `elrwatch stream` (Spark) → status store + metrics.

The oracle is `elrwatch replay` of the same lines: the store's document must equal it field by field (except the
transport-specific `lastPosition`), and the gauges on the metrics port must equal the replay's gauges.
Real components only: a real Kafka 4.4 KRaft broker (the session's ``kafka_server``, devtools/kafka_cluster.py; each
test on fresh topics), Spark local mode, SQLite and a real PostgreSQL server. One Spark job at a time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from elrwatch.streaming.config import ROWS_SUBDIR_PREFIX, JobConfig

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
# Both Kafka sources pass the same tests: ours on kafka-python and Spark's own connector (make spark-jars).
KAFKA_SOURCES = pytest.mark.parametrize("source", ["kafka", "kafka-native"])

TRANSPORT_KEYS = {"lastPosition"}
MALFORMED = [
    "this is not json",
    '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":"zero","topicId":"x"}}',
    '{"type":"PARTITION_CHANGE_RECORD","version":99,"data":{}}',
    '{"version":0,"data":{}}',
]


def _cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-P", "-m", "elrwatch.cli", *args], capture_output=True, text=True, timeout=timeout, **kw
    )


def _events(tmp: Path, records: int = 2500, seed: int = 3, dirty: bool = True) -> Path:
    """Simulator records (elrwatch simulate, with faults), plus malformed lines and duplicates mixed in."""
    sim = tmp / "sim.jsonl"
    done = _cli(
        "simulate",
        "--faults",
        "0.35",
        "--records",
        str(records),
        "--topics",
        "4",
        "--partitions",
        "16",
        "--brokers",
        "5",
        "--seed",
        str(seed),
        "-o",
        str(sim),
    )
    if done.returncode == 0 and sim.exists():
        lines = sim.read_text().splitlines()
    else:  # simulator not available: the built-in generator
        from elrwatch.state.eventgen import scenario

        lines = [x.decode() for x in scenario(4, 16, 5, steps=40, churn=records // 2, seed=seed)]
    if dirty:
        for i, bad in enumerate(MALFORMED):
            lines.insert(50 + 400 * i, bad)
        for i in (120, 700, 1500):  # published twice (producer retry): same record, later event offset
            lines.insert(i + 40, lines[i])
    path = tmp / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _replay(path: Path) -> dict:
    done = _cli("replay", str(path), "--compact")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _produce(kafka, path: Path, topic: str, partitions: int, *connection: str) -> subprocess.CompletedProcess:
    """`elrwatch produce` of ``path`` to ``topic`` (created); ``connection``: options replacing the PLAINTEXT
    bootstrap (e.g. a SASL_SSL listener's)."""
    done = _cli(
        "produce",
        str(path),
        *(connection or ("--bootstrap-servers", kafka.bootstrap)),
        "--topic",
        topic,
        "--create-topic",
        "--partitions",
        str(partitions),
    )
    assert done.returncode == 0, done.stderr
    assert "done," in done.stderr
    return done


def _produce_mixed(kafka, path: Path, topic: str, partitions: int) -> None:
    """``path``'s lines published to ``topic`` (created) with `elrwatch produce`'s keys, as a mixed topic: most
    lines with the routing headers of elrwatch's producers (kafkaio/headers.py), some without headers (an old topic,
    a foreign producer), some with a header version the job does not know, and wrong headers the buckets' own parse
    makes harmless (a partition's record sent to every bucket, an invalid line placed in one bucket)."""
    from elrwatch.kafkaio.clients import create_topic, make_producer
    from elrwatch.kafkaio.headers import EVERY_BUCKET, ROUTE_HEADER
    from elrwatch.kafkaio.produce import EventKeys

    options = {"bootstrap.servers": kafka.bootstrap}
    create_topic(options, topic, partitions)
    producer = make_producer(options)
    keys = EventKeys()
    kinds = {"elrwatch": 0, "none": 0, "unknown version": 0, "every bucket": 0, "invalid placed": 0}
    try:
        for i, line in enumerate(path.read_bytes().splitlines()):
            key, headers = keys.with_headers(line)
            if not headers:  # not a valid event: placed in one bucket, which reports it as the replay does
                kind, headers = "invalid placed", [(ROUTE_HEADER, b"x:1")]
            else:
                kind = ("elrwatch", "elrwatch", "none", "unknown version", "every bucket")[i % 5]
            if kind == "none":
                headers = []
            elif kind == "unknown version":
                headers = [("elrwatch.route.v0", b"?"), ("elrwatch.offset.v0", b"-5")]
            elif kind == "every bucket":
                headers = [(ROUTE_HEADER, EVERY_BUCKET), *headers[1:]]
            kinds[kind] += 1
            producer.send(topic, key=key, value=line, headers=headers)
        producer.flush(60)
    finally:
        producer.close(10)
    assert all(kinds.values()), kinds


def _store_doc(url: str, password_file: str | None = None) -> dict | None:
    from elrwatch.store import StatusStore

    store = StatusStore(url, password_file=password_file)
    try:
        return store.read_document()
    except Exception:  # schema not created yet
        return None
    finally:
        store.dispose()


def assert_same_as_oracle(doc: dict, oracle: dict) -> None:
    strip = lambda d: {k: v for k, v in d.items() if k not in TRANSPORT_KEYS}  # noqa: E731
    assert len(doc["partitions"]) == len(oracle["partitions"]) > 0
    for got, want in zip(doc["partitions"], oracle["partitions"], strict=True):
        got, want = strip(got), strip(want)
        diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
        assert not diff, f"{want['topic']}-{want['partitionId']}: {diff}"
    assert doc["brokers"] == oracle["brokers"]
    assert doc["topics"] == oracle["topics"]
    assert doc["cluster"] == oracle["cluster"]
    assert doc["counts"] == oracle["counts"]
    assert doc["gauges"] == oracle["gauges"]
    strip_v = lambda v: {k: x for k, x in v.items() if k != "position"}  # noqa: E731
    assert [strip_v(v) for v in doc["violations"]] == [strip_v(v) for v in oracle["violations"]]
    assert doc["quarantined"]["count"] == oracle["quarantined"]["count"]
    assert doc["quarantined"]["byReason"] == oracle["quarantined"]["byReason"]
    reasons = sorted((q["reason"], q.get("type")) for q in doc["quarantined"]["records"])
    assert reasons == sorted((q["reason"], q.get("type")) for q in oracle["quarantined"]["records"])


def _oracle_history(path: Path) -> dict[tuple[str, int], list[dict]]:
    """Each partition's status transitions when the events are replayed in order (the core, in process)."""
    from elrwatch.state.replay import Replayer

    replayer = Replayer(track_changes=True)
    with open(path, "rb") as handle:
        replayer.feed_lines(handle, "events")
    history: dict[tuple[str, int], list[dict]] = {}
    for t in replayer.cluster.drain_changes().transitions:
        row = {"from": t.from_status, "to": t.to_status, "atMs": t.at_ms, "offset": t.offset}
        history.setdefault((t.topic, t.partition_id), []).append(row)
    return history


def assert_history_as_oracle(url: str, events: Path, password_file: str | None = None) -> None:
    """The store's status history of every partition equals the replay's transitions: none lost, none twice."""
    from elrwatch.store import StatusStore

    want = _oracle_history(events)
    assert sum(map(len, want.values())) > len(want) > 0  # partitions moved between statuses
    store = StatusStore(url, password_file=password_file)
    try:
        for (topic, partition), rows in want.items():
            got = [
                {k: row[k] for k in ("from", "to", "atMs", "offset")}
                for row in store.history(topic, partition, limit=10**6)
            ]
            assert got == rows, f"{topic}-{partition}"
    finally:
        store.dispose()


def kafka_source(bootstrap: str, topic: str, source: str | None = None) -> list[str]:
    """The options of a job reading ``topic`` from the Kafka cluster at ``bootstrap`` with ``source`` (None: the
    default Kafka source)."""
    return [*(("--source", source) if source else ()), "--bootstrap-servers", bootstrap, "--topic", topic]


def files_source(path: Path) -> list[str]:
    """The options of a job reading the event files (envelopes or dump-log output) of the folder ``path``."""
    return ["--source", "files", "--path", str(path)]


def store_options(url: str, checkpoint: Path) -> list[str]:
    """The options of a job writing the status store at ``url`` and keeping its checkpoint in ``checkpoint``."""
    return ["--store", url, "--checkpoint", str(checkpoint)]


def cli_options(**options: object) -> list[str]:
    """Command line options from keywords: ``max_records_per_batch=250`` is ``--max-records-per-batch 250``,
    ``available_now=True`` the flag ``--available-now``."""
    out: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        out += [flag] if value is True else [flag, str(value)]
    return out


class StreamJob:
    """`elrwatch stream` in its own process group (so SIGKILL takes the Spark JVM with it)."""

    def __init__(self, tmp: Path, *args: str, env: dict | None = None) -> None:
        self.log = open(tmp / f"stream-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "elrwatch.cli", "stream", *args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "ELRWATCH_SPARK_DRIVER_MEMORY": "1g", **(env or {})},
        )

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        self.log.close()

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return Path(self.log.name).read_text()


def _poll(condition, timeout: float, what: str, job: StreamJob | None = None):
    """Poll ``condition`` until it returns something truthy (returned); fail when ``job`` exits before, or after
    ``timeout`` seconds, with the job's output."""
    from elrwatch.devtools.alerting import wait_until

    def met():
        value = condition()
        if not value and job is not None and job.proc.poll() is not None:
            pytest.fail(f"stream job exited ({job.proc.returncode}) before {what}:\n{job.output()[-3000:]}")
        return value

    try:
        return wait_until(met, what, timeout, interval=0.5)
    except TimeoutError:
        pytest.fail(f"timed out after {timeout}s waiting for {what}" + (f":\n{job.output()[-3000:]}" if job else ""))


@KAFKA_SOURCES
def test_kafka_to_store_and_metrics_equal_replay(kafka_server, fresh_topic, tmp_path, source):
    """3-partition event topic, malformed + duplicate records mixed in, continuous trigger, metrics scraped, on both
    Kafka sources. A mixed topic: lines with and without the routing headers, and with wrong ones (`_produce_mixed`;
    the Python source ignores headers)."""
    from elrwatch.devtools.kafka_cluster import free_port
    from elrwatch.streaming.metrics import scrape

    events = _events(tmp_path)
    oracle = _replay(events)
    assert oracle["quarantined"]["count"] >= len(MALFORMED) and oracle["counts"]["duplicates"] >= 3
    topic = fresh_topic("meta-e2e")
    _produce_mixed(kafka_server, events, topic, 3)
    url = f"sqlite:///{tmp_path}/store.db"
    port = free_port()
    job = StreamJob(
        tmp_path,
        *kafka_source(kafka_server.bootstrap, topic, source),
        *store_options(url, tmp_path / "ck"),
        *cli_options(metrics_port=port, buckets=3, trigger="1s"),
    )
    try:
        want = oracle["counts"]["events"]
        _poll(lambda: (d := _store_doc(url)) and d["counts"].get("events") == want, 240, "all events in store", job)
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        # Spark reports progress (lag) asynchronously, just after the batch's sink call
        metrics = _poll(
            lambda: (m := scrape(metrics_url)).get("elrwatch_source_lag_records") == 0 and m,
            30,
            "source lag 0 on the metrics port",
            job,
        )
        assert metrics["elrwatch_up"] == 1 and metrics["elrwatch_batches_total"] >= 1
        assert metrics["elrwatch_batch_duration_seconds"] > 0
        # input rows are events, not routed rows (a broadcast record reaches all 3 buckets but counts once)
        assert 0 < metrics["elrwatch_batch_input_rows"] <= want
        if metrics["elrwatch_batches_total"] == 1:
            assert metrics["elrwatch_batch_input_rows"] == want
        assert {k: metrics.get(k) for k in oracle["gauges"]} == oracle["gauges"]
        job.proc.send_signal(signal.SIGTERM)  # clean stop (as Kubernetes does)
        assert job.wait(90) == 0, job.output()[-3000:]
        assert "state mode snapshot)" in job.output()
    finally:
        job.kill()
    assert_same_as_oracle(_store_doc(url), oracle)


@KAFKA_SOURCES
def test_sigkill_mid_stream_then_restart_applies_every_record_once(kafka_server, fresh_topic, tmp_path, source):
    """kill -9 of the job (snapshot mode) mid-stream, then a restart from its checkpoint: the store equals the
    oracle, every transition once; then (default source) a torn and a lost bucket snapshot are one-line errors."""
    events = _events(tmp_path, records=3000, seed=11)
    oracle = _replay(events)
    topic = fresh_topic("meta-restart")
    _produce(kafka_server, events, topic, 1)
    url = f"sqlite:///{tmp_path}/store.db"
    # snapshot state mode (the default) with a small delta bound: bucket snapshots are written and rotated
    # throughout, so the kill lands between snapshot writes and the restart rebuilds buckets from snapshot + delta
    common = [
        *kafka_source(kafka_server.bootstrap, topic, source),
        *store_options(url, tmp_path / "ck"),
        *cli_options(buckets=2, max_records_per_batch=250, state_delta_max_records=300),
    ]
    first = StreamJob(tmp_path, *common, "--trigger", "100 milliseconds")
    try:
        _poll(lambda: (d := _store_doc(url)) and d["counts"].get("events", 0) >= 500, 180, "a few batches", first)
    finally:
        first.kill()  # SIGKILL: Python driver and the JVM, mid-stream
    partial = _store_doc(url)["counts"]["events"]
    assert partial < oracle["counts"]["events"], "the kill came too late to be mid-stream"
    second = StreamJob(tmp_path, *common, "--available-now")
    try:
        assert second.wait(240) == 0, second.output()[-3000:]
    finally:
        second.kill()
    doc = _store_doc(url)
    # epochs equal to the oracle's prove no PartitionChangeRecord was applied twice
    assert_same_as_oracle(doc, oracle)
    # and the history holds every status transition once, across the kill and the re-run batch
    assert_history_as_oracle(url, events)
    files = sorted(os.listdir(tmp_path / "ck" / "bucket-snapshots"))
    snapshots = [n for n in files if n.endswith(".snap")]
    chunks = [n for n in files if n.endswith(".delta")]  # the batches' delta chunks since the snapshots kept
    # the rows files: the restart removed the killed run's unreferenced ones, and every batch is in the store and
    # committed by Spark at the end, so none is left
    (rows_dir,) = [n for n in files if n.startswith(ROWS_SUBDIR_PREFIX)]
    assert os.listdir(tmp_path / "ck" / "bucket-snapshots" / rows_dir) == []
    for bucket in ("-b0000-", "-b0001-"):  # rotated: the newest few per bucket (+ one a committed row may hold)
        assert 1 <= sum(bucket in name for name in snapshots) <= 4, snapshots
    assert sorted([*snapshots, *chunks, rows_dir]) == files, files  # nothing else (no temporary files left)
    if source != JobConfig.source:  # the bucket stage loads snapshots alike whatever the source: once is enough
        return
    more = tmp_path / "more.jsonl"
    more.write_text(events.read_text().splitlines()[-1] + "\n")
    _produce(kafka_server, more, topic, 1)
    # snapshots torn (e.g. a disk fault): a one-line error naming one, no traceback
    for name in snapshots:
        path = tmp_path / "ck" / "bucket-snapshots" / name
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    done = _cli("stream", *common, "--available-now", timeout=240)
    assert done.returncode == 1, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("elrwatch: error:")]
    assert len(errors) == 1 and "corrupt" in errors[0], done.stderr[-3000:]
    assert any(name in errors[0] for name in snapshots), errors[0]
    assert "Traceback" not in done.stderr
    # snapshots lost (e.g. --state-dir not shared or not kept with the checkpoint): a one-line error, no traceback
    for name in snapshots:
        os.remove(tmp_path / "ck" / "bucket-snapshots" / name)
    done = _cli("stream", *common, "--available-now", timeout=240)
    assert done.returncode == 1, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("elrwatch: error:")]
    assert len(errors) == 1 and "snapshot" in errors[0] and "is missing" in errors[0], done.stderr[-3000:]
    assert any(name in errors[0] for name in snapshots), errors[0]
    assert "Traceback" not in done.stderr


def test_postgresql_store_equals_replay(kafka_server, fresh_topic, tmp_path):
    from test_store import PostgresServer

    events = _events(tmp_path, records=1500, seed=5)
    oracle = _replay(events)
    topic = fresh_topic("meta-pg")
    _produce(kafka_server, events, topic, 2)
    pg = PostgresServer().start()
    try:
        # blob state mode (no shared filesystem needed) stays covered end to end here
        job = StreamJob(
            tmp_path,
            *kafka_source(kafka_server.bootstrap, topic),
            *cli_options(checkpoint=tmp_path / "ck", buckets=2, available_now=True, state_mode="blob"),
            env={"ELRWATCH_STORE": pg.url, "ELRWATCH_STORE_PASSWORD_FILE": str(pg.password_file)},
        )
        try:
            assert job.wait(240) == 0, job.output()[-3000:]
        finally:
            job.kill()
        assert pg.password not in job.output()
        assert_same_as_oracle(_store_doc(pg.url, str(pg.password_file)), oracle)
        assert_history_as_oracle(pg.url, events, str(pg.password_file))
    finally:
        pg.stop()


@KAFKA_SOURCES
def test_sasl_ssl_scram_produce_and_stream_equal_replay(kafka_server, kafka_sasl_ssl, fresh_topic, tmp_path, source):
    """`elrwatch produce` and `elrwatch stream` over SASL_SSL with mutual TLS (SCRAM-SHA-512; a CA, broker and
    client certificate made by the session, hostname verification on; the client key in SEC1 form and its chain in
    two files, as a Kubernetes TLS Secret holds them) against a real broker: the store equals the replay. The password reaches
    `produce` by file and the job by env var (ELRWATCH_SASL_PASSWORD), and appears in neither one's output."""
    password = kafka_sasl_ssl.password()
    events = _events(tmp_path, records=1800, seed=13)
    oracle = _replay(events)
    topic = fresh_topic("meta-sasl")
    produced = _produce(kafka_server, events, topic, 2, *kafka_sasl_ssl.cli_options())
    assert password not in produced.stdout + produced.stderr
    options = kafka_sasl_ssl.cli_options()
    options = options[: options.index("--sasl-password-file")]  # the job: the password from the environment
    assert kafka_server.bootstrap not in options and "--sasl-password-file" not in options
    url = f"sqlite:///{tmp_path}/store.db"
    job = StreamJob(
        tmp_path,
        *("--source", source, *options, "--topic", topic),
        *store_options(url, tmp_path / "ck"),
        *cli_options(buckets=2, available_now=True),
        env={"ELRWATCH_SASL_PASSWORD": password},
    )
    try:
        assert job.wait(240) == 0, job.output()[-3000:]
    finally:
        job.kill()
    assert password not in job.output()
    key_lines = [line for line in Path(kafka_sasl_ssl.keyfile).read_text().splitlines() if "-----" not in line]
    assert key_lines and not any(line in job.output() for line in key_lines)  # the client key never logged
    doc = _store_doc(url)
    assert_same_as_oracle(doc, oracle)
    assert {p["lastPosition"].split("/")[0] for p in doc["partitions"]} == {topic}  # read from the event topic
    # without the password the job cannot read the topic: a one-line error within the bound, no traceback
    started = time.monotonic()
    done = _cli(
        "stream",
        *("--source", source, *options, "--topic", topic),
        *store_options(f"sqlite:///{tmp_path}/denied.db", tmp_path / "ck-denied"),
        *cli_options(source_timeout_ms=3000),
        timeout=180,
        env={k: v for k, v in os.environ.items() if k != "ELRWATCH_SASL_PASSWORD"}
        | {"ELRWATCH_SASL_PASSWORD": "wrong"},
    )
    assert done.returncode == 1, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("elrwatch: error:")]
    assert len(errors) == 1 and f"cannot reach Kafka at {kafka_sasl_ssl.bootstrap}" in errors[0], done.stderr[-3000:]
    assert "Authentication failed" in errors[0] or "rejected the credentials" in errors[0], errors[0]
    assert "Traceback" not in done.stderr and password not in done.stderr + done.stdout
    assert time.monotonic() - started < 90


def test_files_source_replays_a_metadata_log(tmp_path):
    events = _events(tmp_path, records=800, seed=9, dirty=False)
    logdir = tmp_path / "log"
    logdir.mkdir()
    # one part as envelopes, the rest as kafka-dump-log lines (with batch headers that are not events)
    lines = events.read_text().splitlines()
    (logdir / "00-envelopes.jsonl").write_text("\n".join(lines[:300]) + "\n")
    dump = ["Dumping 00000000000000000000.log", "Log starting offset: 0"]
    for i, line in enumerate(lines[300:]):
        envelope = json.loads(line)
        off = envelope.pop("offset")
        ts = envelope.pop("timestamp")
        if i % 50 == 0:
            dump.append(f"baseOffset: {off} lastOffset: {off} count: 1 baseSequence: -1 isControl: false")
        dump.append(
            f"| offset: {off} CreateTime: {ts} keySize: -1 valueSize: 1 sequence: -1 headerKeys: [] "
            f"payload: {json.dumps(envelope, separators=(',', ':'))}"
        )
    (logdir / "01-dump.log").write_text("\n".join(dump) + "\n")
    oracle = _replay_files([logdir / "00-envelopes.jsonl", logdir / "01-dump.log"], tmp_path)
    url = f"sqlite:///{tmp_path}/store.db"
    job = StreamJob(
        tmp_path,
        *files_source(logdir),
        *store_options(url, tmp_path / "ck"),
        *cli_options(available_now=True, buckets=2),
    )
    try:
        assert job.wait(240) == 0, job.output()[-3000:]
    finally:
        job.kill()
    doc = _store_doc(url)
    assert doc["counts"]["ignoredLines"] == oracle["counts"]["ignoredLines"] > 0
    assert_same_as_oracle(doc, oracle)


def _replay_files(paths: list[Path], tmp: Path) -> dict:
    joined = tmp / "joined.txt"
    joined.write_text("".join(p.read_text() for p in paths))
    return _replay(joined)


@KAFKA_SOURCES
def test_missing_topic_is_a_one_line_error_within_the_bound(kafka_server, tmp_path, source):
    started = time.monotonic()
    done = _cli(
        "stream",
        *kafka_source(kafka_server.bootstrap, "no-such-topic", source),
        *store_options(f"sqlite:///{tmp_path}/s.db", tmp_path / "ck"),
        *cli_options(source_timeout_ms=3000),
        timeout=180,
    )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("elrwatch: error:")]
    assert errors == [f"elrwatch: error: topic no-such-topic does not exist on {kafka_server.bootstrap} (waited 3s)"]
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 90


def test_kafka_native_without_the_connector_names_the_missing_jar(tmp_path):
    """Before Spark starts: no connector found (run outside the checkout, whose .tools/spark/jars holds it), or a
    folder lacking one of its jars, is one line naming the jar and `make spark-jars`."""
    from elrwatch.streaming.connector import spark_version

    partial = tmp_path / "jars"
    partial.mkdir()
    for name in (f"spark-sql-kafka-0-10_2.13-{spark_version()}.jar", "commons-pool2-2.13.1.jar"):
        (partial / name).write_bytes(b"")
    common = ["stream", "--source", "kafka-native", "--bootstrap-servers", "127.0.0.1:9", "--topic", "t"]
    for extra, names in (
        ([], [f"spark-sql-kafka-0-10_2.13-{spark_version()}.jar", "kafka-clients-*.jar"]),
        (["--spark-jars", str(partial)], ["spark-token-provider-kafka-0-10_2.13", "kafka-clients-*.jar"]),
    ):
        started = time.monotonic()
        done = _cli(*common, *extra, *store_options(f"sqlite:///{tmp_path}/s.db", tmp_path / "ck"), cwd=tmp_path)
        assert done.returncode == 1
        errors = [line for line in done.stderr.splitlines() if line.startswith("elrwatch: error:")]
        assert len(errors) == 1 and "make spark-jars" in errors[0], done.stderr[-2000:]
        assert all(name in errors[0] for name in names), errors[0]
        assert "Traceback" not in done.stderr and "starting Spark" not in done.stderr
        assert time.monotonic() - started < 30


@pytest.mark.real_kafka
@KAFKA_SOURCES
def test_event_topic_leader_killed_mid_stream_the_job_goes_on(real_kafka_cluster, tmp_path, source):
    """The event topic at replication factor 3 on the 3-broker cluster: kill -9 of the broker leading it while the
    job reads; the job fails over to the new leader by itself and the store equals the replay oracle."""
    import uuid

    cluster = real_kafka_cluster
    events = _events(tmp_path, records=3000, seed=29)
    oracle = _replay(events)
    topic = f"meta-failover-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    cluster.wait_for(lambda: len(cluster.describe_topic_partitions([topic])[(topic, 0)]["isr"]) == 3, "ISR of 3")
    _produce(cluster, events, topic, 1)
    url = f"sqlite:///{tmp_path}/store.db"
    job = StreamJob(
        tmp_path,
        *kafka_source(cluster.bootstrap, topic, source),
        *store_options(url, tmp_path / "ck"),
        *cli_options(buckets=2, max_records_per_batch=250, trigger="200 milliseconds"),
    )
    leader = cluster.describe_topic_partitions([topic])[(topic, 0)]["leader"]
    try:
        _poll(lambda: (d := _store_doc(url)) and d["counts"].get("events", 0) >= 500, 240, "a few batches", job)
        cluster.kill_broker(leader)
        assert _store_doc(url)["counts"]["events"] < oracle["counts"]["events"], "the kill came too late"
        want = oracle["counts"]["events"]
        _poll(lambda: (d := _store_doc(url)) and d["counts"].get("events") == want, 300, "every event", job)
        job.proc.send_signal(signal.SIGTERM)
        assert job.wait(90) == 0, job.output()[-3000:]
    finally:
        job.kill()
        cluster.start_broker(leader)  # the session's cluster is shared: every broker back
    assert_same_as_oracle(_store_doc(url), oracle)
    assert_history_as_oracle(url, events)


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command name) of the processes whose parent is ``pid``."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
            name = fields[0].split("(", 1)[1]
            if int(fields[1].split()[1]) == pid:
                out.append((int(stat.parent.name), name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def test_spark_jvm_killed_is_a_one_line_error(tmp_path):
    """Spark's JVM killed under a running job: the job exits 1 (a supervisor restarts it) with one line naming the
    JVM and how it ended, no py4j traceback."""
    from test_api import scenario_lines

    logdir = tmp_path / "events"
    logdir.mkdir()
    (logdir / "00-envelopes.jsonl").write_text("\n".join(scenario_lines()) + "\n")
    url = f"sqlite:///{tmp_path}/store.db"
    job = StreamJob(tmp_path, *files_source(logdir), *store_options(url, tmp_path / "ck"), *cli_options(buckets=2))
    try:
        _poll(lambda: (_store_doc(url) or {}).get("partitions"), 240, "the first batch in the store", job)
        jvms = [pid for pid, name in _children(job.proc.pid) if name == "java"]
        assert len(jvms) == 1, _children(job.proc.pid)
        os.kill(jvms[0], signal.SIGKILL)
        assert job.wait(60) == 1, job.output()[-3000:]
    finally:
        job.kill()
    output = job.output()
    errors = [line for line in output.splitlines() if line.startswith("elrwatch: error:")]
    assert len(errors) == 1, output[-3000:]
    assert errors[0].startswith("elrwatch: error: Spark's JVM exited (killed by signal 9)"), errors
    assert "Traceback" not in output and "Py4JNetworkError" not in output.replace(errors[0], ""), output[-3000:]
