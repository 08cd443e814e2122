"""Shared pytest fixtures. Keep each fixture small; several engineers add to this file."""

from __future__ import annotations

import ast
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

# --- parallel runs: `make test` runs pytest-xdist workers (-n 2 --dist loadgroup) -------------------------------------


def shared_server_groups(items: list[pytest.Item], conftest: str = __file__) -> dict[str, str]:
    """Test id → its group. Tests that share a session-scoped fixture of conftest.py (a Kafka cluster) or a test
    module that defines a module-scoped fixture (a PostgreSQL server, a Spark session, maybe taken by
    ``request.getfixturevalue``), directly or through other tests, form one group: its tests run on one xdist worker,
    so that each of those fixtures starts once per run instead of once per worker. ``conftest``: the conftest.py
    of the tests' folder."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    conftest = os.path.abspath(conftest)
    with_module_fixtures = {
        path: _defines_shared_fixture(path) for path in {str(item.path) for item in items} if path.endswith(".py")
    }
    keys_of: dict[str, list[str]] = {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        keys = [
            definition.argname
            for definitions in (info.name2fixturedefs.values() if info else ())
            for definition in definitions
            if definition.scope == "session"
            and getattr(definition.func, "__code__", None) is not None
            and os.path.abspath(definition.func.__code__.co_filename) == conftest
        ]
        if with_module_fixtures.get(str(item.path)):
            keys.append(item.path.name)
        keys_of[item.nodeid] = keys
    for keys in keys_of.values():
        for key in keys[1:]:
            parent[root(key)] = root(keys[0])
    return {test: root(keys[0]) for test, keys in keys_of.items() if keys}


def _defines_shared_fixture(path: str) -> bool:
    """Whether the module at ``path`` defines a module- or session-scoped fixture (read with ast)."""
    tree = ast.parse(Path(path).read_text(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and ast.unparse(decorator.func) in ("pytest.fixture", "fixture"):
                    scopes = [k.value for k in decorator.keywords if k.arg == "scope"]
                    if any(isinstance(v, ast.Constant) and v.value in ("module", "session") for v in scopes):
                        return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test that shares a server with its group (`shared_server_groups`), for ``--dist loadgroup``."""
    groups = shared_server_groups(items)
    for item in items:
        if item.nodeid in groups and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))


#: What a run may add to the working directory: caches, and artifacts/ (outputs kept for a reader, one file per test).
RUN_OUTPUTS = frozenset({".pytest_cache", ".hypothesis", "__pycache__", ".ruff_cache", "artifacts"})
_WORKDIR_BEFORE = pytest.StashKey[set[str]]()
_WORKDIR_NEW = pytest.StashKey[list[str]]()


def workdir_entries(folder: Path) -> set[str]:
    """The entries of ``folder`` and of its var/ (the default place of the store and checkpoint), but run outputs."""
    entries = {p.name for p in folder.iterdir()} - RUN_OUTPUTS
    if (folder / "var").is_dir():
        entries |= {f"var/{p.name}" for p in (folder / "var").iterdir()}
    return entries


def pytest_sessionstart(session: pytest.Session) -> None:
    """The run (not each xdist worker) notes the working directory's entries: tests write to their own tmp_path,
    never to a fixed name here, which two workers (or two runs) would share."""
    if not hasattr(session.config, "workerinput"):
        session.config.stash[_WORKDIR_BEFORE] = workdir_entries(Path.cwd())


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run when a test left a new entry in the working directory (`pytest_sessionstart`)."""
    before = session.config.stash.get(_WORKDIR_BEFORE, None)
    if before is None:
        return
    new = sorted(workdir_entries(Path.cwd()) - before)
    if new:
        session.config.stash[_WORKDIR_NEW] = new
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    new = config.stash.get(_WORKDIR_NEW, None)
    if new:
        terminalreporter.write_line(
            f"FAILED: tests wrote to fixed names in the working directory ({Path.cwd()}): {', '.join(new)}; "
            "write to tmp_path instead",
            red=True,
        )


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
    from kafka_clusters import running_cluster

    with running_cluster(brokers=3, min_insync_replicas=2) as cluster:
        yield cluster
