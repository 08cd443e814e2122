"""Shared pytest fixtures. Keep each fixture small; several engineers add to this file."""

from __future__ import annotations

import os
import secrets
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # tests/ helpers (test_store, ...) importable by name


@dataclass(frozen=True)
class SaslSslClient:
    """How a client reaches the session cluster's SASL_SSL listener (SCRAM-SHA-512, the session's own CA, client
    certificates required): the client's key and chain as two files, the key in SEC1 form (a Kubernetes TLS
    Secret's layout; devtools/tls.py)."""

    bootstrap: str
    cafile: str
    username: str
    password_file: str
    certfile: str
    keyfile: str
    mechanism: str = "SCRAM-SHA-512"

    def cli_options(self) -> list[str]:
        """The `elrwatch stream` / `elrwatch produce` options (the password by file, never on the command line)."""
        return [
            "--bootstrap-servers",
            self.bootstrap,
            "--security-protocol",
            "SASL_SSL",
            "--ssl-cafile",
            self.cafile,
            "--ssl-certfile",
            self.certfile,
            "--ssl-keyfile",
            self.keyfile,
            "--sasl-mechanism",
            self.mechanism,
            "--sasl-username",
            self.username,
            "--sasl-password-file",
            self.password_file,
        ]

    def password(self) -> str:
        return Path(self.password_file).read_text().strip()


@pytest.fixture(scope="session")
def _kafka_sasl_material(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str, Path]:
    """A CA + broker certificate (devtools/tls.py) and one SCRAM user with a random password kept in a 0600 file."""
    from elrwatch.devtools.tls import make_pki

    folder = tmp_path_factory.mktemp("kafka-secrets")
    pki = make_pki(folder / "pki")
    password_file = folder / "alice.password"
    fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(16) + "\n")
    return pki, "alice", password_file


@pytest.fixture(scope="session")
def kafka_server(_kafka_sasl_material: tuple[Any, str, Path]) -> Iterator[Any]:
    """A real Apache Kafka KRaft cluster (devtools/kafka_cluster.py: one controller, one broker), started once per
    session and stopped at its end; tests share it with fresh topic names (``fresh_topic``). PLAINTEXT on
    ``.bootstrap``; a SASL_SSL listener (SCRAM-SHA-512, mutual TLS) on ``.secure_bootstrap`` (see
    ``kafka_sasl_ssl``)."""
    from elrwatch.devtools.kafka_cluster import KafkaCluster, sasl_ssl_listener

    pki, user, password_file = _kafka_sasl_material
    listener = sasl_ssl_listener(
        pki.broker_pem, {user: password_file.read_text().strip()}, client_truststore_pem=pki.ca_cert
    )
    cluster = KafkaCluster(brokers=1, listener_security=listener)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kafka_sasl_ssl(kafka_server: Any, _kafka_sasl_material: tuple[Any, str, Path]) -> SaslSslClient:
    """The session cluster's SASL_SSL listener as a client sees it: CA file, user, password file, client
    certificate chain and key."""
    pki, user, password_file = _kafka_sasl_material
    return SaslSslClient(
        kafka_server.secure_bootstrap,
        str(pki.ca_cert),
        user,
        str(password_file),
        str(pki.client_crt),
        str(pki.client_key),
    )


@pytest.fixture
def fresh_topic() -> Callable[[str], str]:
    """A factory of topic names never used before in this session (the session cluster is shared)."""
    return lambda prefix: f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def real_kafka_cluster():
    """A real Apache Kafka 4.4 KRaft cluster (devtools/kafka_cluster.py): controller 0 and brokers 1..3, ELR on,
    cluster min.insync.replicas 2; started once per session and stopped at its end. Scenarios must restore every
    broker when they finish (tests/test_real_kafka_conformance.py does). Without Kafka's jars or Java the tests fail
    (never skip): `make test` fetches the jars, so a missing one is a real error."""
    from elrwatch.devtools.kafka_cluster import ClusterError, KafkaCluster

    try:
        cluster = KafkaCluster(brokers=3, min_insync_replicas=2)
    except ClusterError as exc:  # no jars (`make kafka-jars`) or no java
        pytest.fail(f"real Kafka unavailable: {exc}", pytrace=False)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
