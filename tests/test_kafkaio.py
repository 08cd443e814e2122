"""elrwatch.kafkaio: the Kafka client module is neither Spark nor the CLI. The sidecars (`elrwatch bridge`, `agent`,
`produce`) run without pyspark, and the connection settings never hold, show or log a secret."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys

import pytest

from elrwatch.kafkaio.clients import make_producer
from elrwatch.kafkaio.config import KafkaSettings, SourceError, kafka_python_config

# Runs commands in-process (as the console script does) and prints the loaded modules of interest. Each command
# is made to stop right after its imports: a missing file, an unknown --source, no --log-dirs.
_PROBE = """
import json, sys
from elrwatch.cli import app
runs = {
    "bridge --help": ["bridge", "--help"],
    "agent --help": ["agent", "--help"],
    "produce --help": ["produce", "--help"],
    "produce": ["produce", "/nonexistent/events.jsonl", "--bootstrap-servers", "127.0.0.1:1", "--topic", "t"],
    "bridge": ["bridge", "--source", "nope", "--bootstrap-servers", "127.0.0.1:1", "--topic", "t"],
    "agent": ["agent", "--bootstrap-servers", "127.0.0.1:1", "--topic", "t"],
}
seen = {}
for name, argv in runs.items():
    try:
        app(argv, prog_name="elrwatch")
    except SystemExit as exc:
        seen[name] = {"code": exc.code, "pyspark": sorted(m for m in sys.modules if m.split(".")[0] == "pyspark")}
import elrwatch.bridge.admin, elrwatch.bridge.agent, elrwatch.bridge.runner  # noqa: E401
import elrwatch.kafkaio.clients, elrwatch.kafkaio.jvm, elrwatch.kafkaio.produce  # noqa: E401
seen["modules"] = {"pyspark": sorted(m for m in sys.modules if m.split(".")[0] == "pyspark"),
                   "runner": "elrwatch.bridge.runner" in sys.modules}
print(json.dumps(seen))
"""


def test_sidecar_commands_never_import_pyspark() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ("bridge --help", "agent --help", "produce --help"):
        assert seen[name] == {"code": 0, "pyspark": []}, name
    for name in ("produce", "bridge", "agent"):  # each failed with a usage error after importing its modules
        assert seen[name] == {"code": 2, "pyspark": []}, (name, done.stderr)
    assert seen["modules"] == {"pyspark": [], "runner": True}
    assert "cannot read /nonexistent/events.jsonl" in done.stderr
    assert "--source must be admin or metadata-log" in done.stderr


def test_settings_map_to_options_with_secrets_by_reference(tmp_path, monkeypatch) -> None:
    password_file = tmp_path / "sasl.password"
    password_file.write_text("s3cret-from-file\n")
    monkeypatch.setenv("ELRWATCH_SSL_PASSWORD", "s3cret-from-env")
    settings = KafkaSettings(
        bootstrap_servers="b1:9093,b2:9093",
        security_protocol="SASL_SSL",
        ssl_cafile="/ca.pem",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="monitor",
        sasl_password_file=str(password_file),
    )
    assert settings.options("events", **{"timeout.ms": "500"}) == {
        "bootstrap.servers": "b1:9093,b2:9093",
        "topic": "events",
        "security.protocol": "SASL_SSL",
        "ssl.cafile": "/ca.pem",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "monitor",
        "sasl.password.file": str(password_file),
        "ssl.password.env": "ELRWATCH_SSL_PASSWORD",
        "timeout.ms": "500",
    }
    config = settings.client_config()  # the secrets are read only here, for the client itself
    assert (config["sasl_plain_password"], config["ssl_password"]) == ("s3cret-from-file", "s3cret-from-env")
    for text in (repr(settings), str(settings), repr(settings.options("events"))):
        assert "s3cret" not in text
    admin = settings.with_servers("admin:9093")
    assert admin.bootstrap_servers == "admin:9093" and admin.sasl_username == "monitor"
    assert settings.with_servers(None) is settings
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.sasl_username = "other"  # type: ignore[misc]
    with pytest.raises(SourceError, match=r"sasl\.mechanism GSSAPI is not supported"):
        kafka_python_config(KafkaSettings("b:1", sasl_mechanism="GSSAPI").options())


def test_a_failed_connection_logs_and_reports_no_secret(tmp_path, monkeypatch, caplog) -> None:
    """Every logger at DEBUG while a SASL client fails to reach a closed port: neither the logs nor the one-line
    error show the password."""
    monkeypatch.setenv("ELRWATCH_SASL_PASSWORD", "s3cret-never-shown")
    settings = KafkaSettings(
        "127.0.0.1:1", security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="monitor"
    )
    caplog.set_level(logging.DEBUG)
    # and kafka-python's own logger, whatever level an in-process CLI command left it at (`elrwatch bridge` and
    # `agent` set it to CRITICAL): restored after the test
    caplog.set_level(logging.DEBUG, logger="kafka")
    with pytest.raises(SourceError) as failure:
        make_producer(settings.options(**{"timeout.ms": "300"}))
    message = str(failure.value)
    assert message.startswith("cannot reach Kafka at 127.0.0.1:1 within 0.3s") and "\n" not in message
    assert caplog.records  # kafka-python did log its attempts
    assert "s3cret" not in caplog.text and "s3cret" not in message
