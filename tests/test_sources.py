"""Event sources against a real Kafka broker (devtools/kafka_cluster.py) and real files; reader driven directly (fast)."""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from elrwatch.kafkaio.config import SourceError, kafka_python_config, security_options
from elrwatch.kafkaio.jvm import native_kafka_options
from elrwatch.streaming.route import KIND_ERROR, KIND_RECORD, ROUTED_SCHEMA, decode_record, route_batches
from elrwatch.streaming.sources import (
    SCHEMA,
    FilesDataSource,
    FilesStreamReader,
    KafkaDataSource,
    KafkaStreamReader,
    split_limit,
)

pytestmark = pytest.mark.e2e


def _produce(bootstrap: str, topic: str, n: int, partitions: int, prefix: str = "v") -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(n):
        producer.send(topic, value=f"{prefix}{i}".encode(), partition=i % partitions)
    producer.flush(10)
    producer.close()


def _read_all(reader, start, end) -> list[tuple]:
    rows = []
    for split in reader.partitions(start, end):
        for batch in reader.read(split):
            rows.extend(zip(*(batch.column(i).to_pylist() for i in range(5)), strict=True))
    return rows


def test_kafka_reader_offsets_cap_new_partitions(kafka_server, fresh_topic):
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions

    topic = fresh_topic("src-a")
    kafka_server.create_topic(topic, partitions=2)
    _produce(kafka_server.bootstrap, topic, 10, 2)
    opts = {"bootstrap.servers": kafka_server.bootstrap, "topic": topic, "maxOffsetsPerTrigger": "4"}
    reader = KafkaStreamReader(opts)
    start = reader.initialOffset()
    assert start == {topic: {"0": 0, "1": 0}}
    assert isinstance(reader.getDefaultReadLimit(), ReadMaxRows)
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert sum(end[topic].values()) == 4  # the cap, shared over partitions
    rows = _read_all(reader, start, end)
    assert len(rows) == 4 and {r[1] for r in rows} == {topic}
    assert all(r[4] is not None for r in rows)  # Kafka timestamp
    end2 = reader.latestOffset(end, ReadAllAvailable())
    assert end2 == {topic: {"0": 5, "1": 5}}
    rows += _read_all(reader, end, end2)
    assert sorted(r[0] for r in rows) == sorted(f"v{i}" for i in range(10))
    assert sorted((r[2], r[3]) for r in rows) == [(p, o) for p in (0, 1) for o in range(5)]
    assert reader.reportLatestOffset() == end2
    # a new partition of the event topic is picked up from its earliest offset
    admin = KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap)
    admin.create_partitions({topic: NewPartitions(3)})
    admin.close()
    _produce(kafka_server.bootstrap, topic, 3, 3, prefix="w")
    reader._refreshed_at = 0.0
    deadline = time.monotonic() + 10
    end3 = reader.latestOffset(end2, ReadAllAvailable())
    while "2" not in end3[topic] and time.monotonic() < deadline:
        reader._refreshed_at = 0.0
        end3 = reader.latestOffset(end2, ReadAllAvailable())
    assert end3 == {topic: {"0": 6, "1": 6, "2": 1}}
    assert sorted(r[0] for r in _read_all(reader, end2, end3)) == ["w0", "w1", "w2"]
    reader.stop()


def test_kafka_reader_starting_offsets(kafka_server, fresh_topic):
    topic = fresh_topic("src-b")
    kafka_server.create_topic(topic, partitions=2)
    _produce(kafka_server.bootstrap, topic, 6, 2)
    base = {"bootstrap.servers": kafka_server.bootstrap, "topic": topic}
    latest = KafkaStreamReader({**base, "startingOffsets": "latest"})
    assert latest.initialOffset() == {topic: {"0": 3, "1": 3}}
    latest.stop()
    spec = KafkaStreamReader({**base, "startingOffsets": json.dumps({topic: {"0": 2, "1": -2}})})
    start = spec.initialOffset()
    assert start == {topic: {"0": 2, "1": 0}}
    assert len(_read_all(spec, start, spec.latestOffset(start, ReadAllAvailable()))) == 4
    spec.stop()
    with pytest.raises(SourceError, match="not subscribed"):
        KafkaStreamReader({**base, "startingOffsets": '{"other": {"0": 1}}'})


def test_kafka_reader_clear_errors_within_bound(kafka_server):
    t0 = time.monotonic()
    missing = KafkaStreamReader({"bootstrap.servers": kafka_server.bootstrap, "topic": "nope", "timeout.ms": "2000"})
    with pytest.raises(SourceError, match="topic nope does not exist"):  # the harness never auto-creates topics
        missing.initialOffset()
    missing.stop()
    unreachable = KafkaStreamReader({"bootstrap.servers": "127.0.0.1:1", "topic": "t", "timeout.ms": "2000"})
    with pytest.raises(
        SourceError, match=r"cannot reach Kafka at 127\.0\.0\.1:1 within 2s: .*; last connection error: "
    ):
        unreachable.initialOffset()
    assert time.monotonic() - t0 < 20
    with pytest.raises(SourceError, match=r"bootstrap\.servers"):
        KafkaStreamReader({"topic": "t"})


def test_kafka_reader_and_producer_over_sasl_ssl_and_their_connection_errors(
    kafka_server, kafka_sasl_ssl, fresh_topic, tmp_path
):
    """The session broker's SASL_SSL listener (SCRAM-SHA-512, its own CA, client certificates required): the reader
    and `produce` work with the right settings (the client key and chain as two files); a wrong password or a missing CA is a one-line error that names the cause, within the bound."""
    from elrwatch.kafkaio.produce import produce_lines

    topic = fresh_topic("src-sasl")
    kafka_server.create_topic(topic, partitions=2)
    opts = {
        "bootstrap.servers": kafka_sasl_ssl.bootstrap,
        "topic": topic,
        "security.protocol": "SASL_SSL",
        "ssl.cafile": kafka_sasl_ssl.cafile,
        "ssl.certfile": kafka_sasl_ssl.certfile,
        "ssl.keyfile": kafka_sasl_ssl.keyfile,
        "sasl.mechanism": kafka_sasl_ssl.mechanism,
        "sasl.username": kafka_sasl_ssl.username,
        "sasl.password.file": kafka_sasl_ssl.password_file,
        "timeout.ms": "3000",
    }
    assert produce_lines(opts, topic, [f"s{i}" for i in range(6)], out=None).sent == 6
    reader = KafkaStreamReader(opts)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert sum(end[topic].values()) == 6
    assert sorted(r[0] for r in _read_all(reader, start, end)) == [f"s{i}" for i in range(6)]
    reader.stop()
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    # 5 s: the first attempt's TLS and SCRAM exchanges must finish even on a loaded 2-core CI machine
    wrong_password = {**opts, "sasl.password.file": str(wrong), "timeout.ms": "5000"}
    started = time.monotonic()
    for attempt in (
        lambda: KafkaStreamReader(wrong_password).initialOffset(),
        lambda: produce_lines(wrong_password, topic, ["x"], out=None),
    ):
        with pytest.raises(SourceError) as failure:
            attempt()
        message = str(failure.value)
        assert message.startswith(f"cannot reach Kafka at {kafka_sasl_ssl.bootstrap} within 5s"), message
        # kafka-python sees either the broker's answer or only the connection it then closes
        assert "Authentication failed" in message or "rejected the credentials" in message, message
        assert "not-the-password" not in message and kafka_sasl_ssl.password() not in message
    # the listener requires a client certificate (mutual TLS): without one the reader cannot connect
    without_client_certificate = {k: v for k, v in opts.items() if k not in ("ssl.certfile", "ssl.keyfile")}
    with pytest.raises(SourceError, match=f"cannot reach Kafka at {kafka_sasl_ssl.bootstrap}"):
        KafkaStreamReader(without_client_certificate).initialOffset()
    without_ca = {k: v for k, v in opts.items() if k != "ssl.cafile"}
    with pytest.raises(SourceError, match="CERTIFICATE_VERIFY_FAILED"):
        KafkaStreamReader(without_ca).initialOffset()
    assert time.monotonic() - started < 40


def _pem(path, *kinds):
    path.write_text("".join(f"-----BEGIN {k}-----\nAAAA\n-----END {k}-----\n" for k in kinds))
    return str(path)


def test_security_options_pass_through(tmp_path, monkeypatch):
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("EW_TEST_KEYPW", "kpw")
    ca = _pem(tmp_path / "ca.pem", "CERTIFICATE")
    client = _pem(tmp_path / "client.pem", "ENCRYPTED PRIVATE KEY", "CERTIFICATE", "CERTIFICATE")
    opts = {
        "bootstrap.servers": "b1:9093,b2:9093",
        "topic": "t",
        "security.protocol": "sasl_ssl",
        "ssl.cafile": ca,
        "ssl.certfile": client,
        "ssl.keyfile": client,
        "ssl.password.env": "EW_TEST_KEYPW",
        "sasl.mechanism": "scram-sha-512",
        "sasl.username": "alice",
        "sasl.password.file": str(secret),
    }
    cfg = kafka_python_config(opts)
    assert cfg["bootstrap_servers"] == ["b1:9093", "b2:9093"]
    assert cfg["security_protocol"] == "SASL_SSL" and cfg["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (cfg["sasl_plain_username"], cfg["sasl_plain_password"]) == ("alice", "s3cret")
    assert (cfg["ssl_cafile"], cfg["ssl_certfile"], cfg["ssl_keyfile"], cfg["ssl_password"]) == (
        ca,
        client,
        client,
        "kpw",
    )
    native = native_kafka_options(opts)
    assert (native["kafka.ssl.truststore.type"], native["kafka.ssl.truststore.location"]) == ("PEM", ca)
    assert (native["kafka.ssl.keystore.type"], native["kafka.ssl.keystore.location"]) == ("PEM", client)
    assert native["kafka.ssl.key.password"] == "kpw"
    assert native["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert 'username="alice" password="s3cret"' in native["kafka.sasl.jaas.config"]
    assert native["subscribe"] == "t" and native["kafka.security.protocol"] == "SASL_SSL"
    # the read tuning reaches Spark's consumer (kafkaio/config.py says why)
    assert native["kafka.fetch.max.wait.ms"] == "10" and native["kafka.max.poll.records"] == "10000"
    assert native["includeHeaders"] == "true"  # the routing headers (kafkaio/headers.py)
    with pytest.raises(SourceError, match="not set"):
        kafka_python_config({**opts, "ssl.password.env": "EW_TEST_UNSET_VAR"})
    with pytest.raises(SourceError, match="not supported"):
        kafka_python_config({**opts, "sasl.mechanism": "GSSAPI"})


def test_native_mutual_tls_from_one_file_by_location_from_two_files_as_values(tmp_path):
    """Spark's Kafka client gets the key store from the files kafka-python takes: one file holding a PKCS#8 key and
    its chain by location; a key and a chain in two files (a Kubernetes TLS Secret) as values, a key that is not
    PKCS#8 converted to it; a missing key or certificate is a one-line error."""
    from cryptography.hazmat.primitives import serialization

    from elrwatch.devtools.tls import make_pki

    base = {"bootstrap.servers": "b:9093", "topic": "t", "security.protocol": "SSL"}
    key = _pem(tmp_path / "client.key", "PRIVATE KEY")
    crt = _pem(tmp_path / "client.crt", "CERTIFICATE", "CERTIFICATE")
    # kafka-python takes the two files as they are
    assert kafka_python_config({**base, "ssl.certfile": crt, "ssl.keyfile": key})["ssl_keyfile"] == key
    both = _pem(tmp_path / "client.pem", "PRIVATE KEY", "CERTIFICATE")
    for certfile, keyfile in ((crt, both), (both, key), (both, None), (None, both)):
        opts = {
            **base,
            **({"ssl.certfile": certfile} if certfile else {}),
            **({"ssl.keyfile": keyfile} if keyfile else {}),
        }
        native = native_kafka_options(opts)
        assert (native["kafka.ssl.keystore.type"], native["kafka.ssl.keystore.location"]) == ("PEM", both)
        assert "kafka.ssl.keystore.key" not in native
    # two files: the values, the chain from --ssl-certfile (both of its certificates, in order)
    key_password = tmp_path / "key.password"
    key_password.write_text("kpw\n")
    native = native_kafka_options(
        {**base, "ssl.certfile": crt, "ssl.keyfile": key, "ssl.password.file": str(key_password)}
    )
    assert "kafka.ssl.keystore.location" not in native
    assert native["kafka.ssl.keystore.key"] == Path(key).read_text()
    assert native["kafka.ssl.keystore.certificate.chain"] == Path(crt).read_text()
    assert native["kafka.ssl.key.password"] == "kpw"  # an encrypted PKCS#8 key: Kafka decrypts it
    # a real SEC1 key (cert-manager's default form): PKCS#8 in memory, the same key
    pki = make_pki(tmp_path / "pki")
    native = native_kafka_options({**base, "ssl.certfile": str(pki.client_crt), "ssl.keyfile": str(pki.client_key)})
    assert pki.client_key.read_text().startswith("-----BEGIN EC PRIVATE KEY-----")
    converted = native["kafka.ssl.keystore.key"]
    assert converted.startswith("-----BEGIN PRIVATE KEY-----") and "kafka.ssl.key.password" not in native
    original = serialization.load_pem_private_key(pki.client_key.read_bytes(), None)
    assert serialization.load_pem_private_key(converted.encode(), None).private_numbers() == original.private_numbers()
    assert native["kafka.ssl.keystore.certificate.chain"] == pki.client_crt.read_text()
    # what cannot work is a one-line error naming the files
    with pytest.raises(SourceError, match="no certificate in"):
        native_kafka_options({**base, "ssl.keyfile": key})
    with pytest.raises(SourceError, match="no private key in"):
        native_kafka_options({**base, "ssl.certfile": crt})
    with pytest.raises(SourceError, match="cannot read"):
        native_kafka_options({**base, "ssl.keyfile": str(tmp_path / "missing.pem")})
    broken = _pem(tmp_path / "broken.key", "RSA PRIVATE KEY")
    with pytest.raises(SourceError, match=r"cannot read the private key in .*broken\.key"):
        native_kafka_options({**base, "ssl.certfile": crt, "ssl.keyfile": broken})
    assert "kafka.ssl.keystore.location" not in native_kafka_options(base)


def test_split_limit_exact_and_fair():
    got = split_limit({("t", "0"): 100, ("t", "1"): 1, ("t", "2"): 0}, 10)
    assert sum(got.values()) == 10 and got[("t", "2")] == 0 and got[("t", "1")] <= 1
    assert split_limit({("t", "0"): 3}, 10) == {("t", "0"): 3}


def test_files_reader_lines_positions_and_appends(tmp_path):
    (tmp_path / "a.jsonl").write_text("l1\nl2\nl3\npartial")
    (tmp_path / ".hidden").write_text("x\n")
    reader = FilesStreamReader({"path": str(tmp_path), "maxOffsetsPerTrigger": "2"})
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {"a.jsonl": [6, 2]}
    rows = _read_all(reader, start, end)
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [("l1", "a.jsonl", -1, 1), ("l2", "a.jsonl", -1, 2)]
    end2 = reader.latestOffset(end, ReadAllAvailable())
    assert [r[0] for r in _read_all(reader, end, end2)] == ["l3"]  # the partial line waits for its newline
    with open(tmp_path / "a.jsonl", "a") as fh:
        fh.write("\n")
    (tmp_path / "b.jsonl").write_text("m1\n")
    end3 = reader.latestOffset(end2, ReadAllAvailable())
    assert [(r[0], r[3]) for r in _read_all(reader, end2, end3)] == [("partial", 4), ("m1", 1)]


def test_files_reader_routes_in_its_read_task_when_asked(tmp_path):
    """routeBuckets: the read task yields the rows the job's route stage would make of the same lines."""
    lines = [
        '{"type":"TOPIC_RECORD","version":0,"data":{"name":"t","topicId":"AAAAAAAAAAAAAAAAAAAAAQ"}}',
        '{"type":"PARTITION_RECORD","version":0,"data":{"partitionId":3,"topicId":"AAAAAAAAAAAAAAAAAAAAAQ",'
        '"replicas":[1,2],"isr":[1,2],"leader":1,"leaderEpoch":0,"partitionEpoch":0}}',
        "not json",
    ]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    plain = FilesStreamReader({"path": str(tmp_path)})
    routed = FilesStreamReader({"path": str(tmp_path), "routeBuckets": "3"})
    start = plain.initialOffset()
    end = plain.latestOffset(start, ReadAllAvailable())
    (split,) = plain.partitions(start, end)

    def decoded(batches) -> list[tuple]:
        out = []
        for batch in batches:
            assert batch.schema.names == [f.split()[0] for f in ROUTED_SCHEMA.split(", ")]
            for r in batch.to_pylist():
                body = (
                    decode_record(r["rec"]).envelope() if r["kind"] == KIND_RECORD else pickle.loads(r["rec"]).to_dict()
                )
                out.append((r["bucket"], r["src"], r["seq"], r["moff"], r["kind"], body))
        return out

    expected = decoded(route_batches(plain.read(split), 3))
    rows = decoded(routed.read(split))
    assert rows == expected
    assert sorted(r[0] for r in rows if r[2] == 1) == [0, 1, 2]  # the topic record reaches every bucket
    assert [r[4] for r in rows if r[2] == 3] == [KIND_ERROR] and rows[-1][0] == 0  # the bad line: bucket 0 quarantines


def test_route_buckets_option_sets_the_schema_and_is_validated(tmp_path):
    for source in (KafkaDataSource, FilesDataSource):
        assert source({}).schema() == SCHEMA
        assert source({"routeBuckets": "4"}).schema() == ROUTED_SCHEMA
        with pytest.raises(SourceError, match="routeBuckets must be an integer >= 1"):
            source({"routeBuckets": "0"}).schema()
    with pytest.raises(SourceError, match="routeBuckets must be an integer >= 1, not 'x'"):
        FilesStreamReader({"path": str(tmp_path), "routeBuckets": "x"})


def test_security_options_reference_secrets_never_copy_them(monkeypatch):
    """CLI values → source options: files are passed as paths, env passwords only by the variable's name."""
    monkeypatch.setenv("ELRWATCH_SASL_PASSWORD", "s3cret-sasl")
    monkeypatch.setenv("ELRWATCH_SSL_PASSWORD", "s3cret-ssl")
    opts = security_options("SASL_SSL", "/ca.pem", None, None, "/keypw", "SCRAM-SHA-512", "monitor", None)
    assert opts == {
        "security.protocol": "SASL_SSL",
        "ssl.cafile": "/ca.pem",
        "ssl.password.file": "/keypw",  # a file wins over the env var
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "monitor",
        "sasl.password.env": "ELRWATCH_SASL_PASSWORD",
    }
    assert "s3cret" not in repr(opts)
    monkeypatch.delenv("ELRWATCH_SASL_PASSWORD")
    monkeypatch.delenv("ELRWATCH_SSL_PASSWORD")
    assert security_options() == {}


def test_job_and_produce_build_the_same_security_options(monkeypatch):
    """`elrwatch stream` (JobConfig) and `elrwatch produce` (the CLI) share one mapping."""
    from elrwatch.cli import _kafka_options
    from elrwatch.kafkaio.config import KafkaSettings
    from elrwatch.streaming.config import JobConfig

    monkeypatch.setenv("ELRWATCH_SASL_PASSWORD", "x")
    kafka = KafkaSettings("h:9093", security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u")
    job_opts = JobConfig(kafka=kafka, topic="t").source_options()
    cli_opts = _kafka_options(kafka, "t")
    assert {k: v for k, v in job_opts.items() if k not in ("timeout.ms", "startingOffsets")} == cli_opts
    assert cli_opts["sasl.password.env"] == "ELRWATCH_SASL_PASSWORD"


def test_connection_failure_tap_works_when_kafka_python_was_silenced():
    """`elrwatch bridge` sets the kafka logger to CRITICAL in-process: the tap must still see the failures (and
    keep them off other handlers), then restore the logger as it was."""
    import logging

    from elrwatch.kafkaio.failures import connection_failures, unreachable_error

    logger = logging.getLogger("kafka")
    saved = (logger.level, logger.propagate)
    logger.setLevel(logging.CRITICAL)
    try:
        with connection_failures() as tap:
            logging.getLogger("kafka.conn").warning(
                "Bootstrap connection to 127.0.0.1:1 failed: [Errno 111] Connection refused (backoff 50 ms)"
            )
        assert tap.last == "[Errno 111] Connection refused"
        # a later retry cut short by the bootstrap deadline does not hide the broker's answer to an earlier one
        with connection_failures() as tap:
            for cause in (
                "SaslAuthenticationFailedError: [Error 58] SaslAuthenticationFailedError: Authentication failed",
                "KafkaTimeoutError: SASL Authentication timed out",
            ):
                logging.getLogger("kafka.net.manager").warning(
                    "Bootstrap connection to 127.0.0.1:1 failed: %s (backoff 0.05 secs)", cause
                )
        assert tap.last is not None and "Authentication failed" in tap.last, tap.last
        with connection_failures() as tap:
            logging.getLogger("kafka.net.manager").warning(
                "Bootstrap connection to 127.0.0.1:1 failed: KafkaTimeoutError: SASL Authentication timed out"
            )
        assert tap.last == "KafkaTimeoutError: SASL Authentication timed out"
        assert (logger.level, logger.propagate) == (logging.CRITICAL, saved[1])
        sasl = unreachable_error("h:1", 3, TimeoutError(), "[Error 7] RequestTimedOutError", "SASL_SSL")
        assert "rejected the credentials" in str(sasl)
        named = unreachable_error(
            "h:1", 3, TimeoutError(), "SSLCertVerificationError CERTIFICATE_VERIFY_FAILED", "SASL_SSL"
        )
        assert "rejected the credentials" not in str(named)
    finally:
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
