"""Shared pytest fixtures. Keep each fixture small; several engineers add to this file."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # tests/ helpers (kafka_harness, ...) importable by name

# `make test-compiled` runs the tests again on the mypyc-compiled core (PYTHONPATH=build/compiled): refuse to run
# them on anything else, so that a broken build cannot pass as "compiled". test_compiled_core.py compares the two
# builds, so it only runs there.
EXPECT_COMPILED = os.environ.get("ELRWATCH_EXPECT_COMPILED") == "1"
if not EXPECT_COMPILED:
    collect_ignore = ["test_compiled_core.py"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """With ELRWATCH_EXPECT_COMPILED=1, stop unless every hot module of the core is a compiled extension."""
    if EXPECT_COMPILED:
        from elrwatch.state import COMPILED_MODULES, compiled_modules

        missing = sorted(set(COMPILED_MODULES) - set(compiled_modules()))
        if missing:
            pytest.exit(f"ELRWATCH_EXPECT_COMPILED=1 but these core modules are not compiled: {missing}", returncode=1)


@pytest.fixture(scope="session")
def kafka_server():
    """A noida-db Kafka-wire server on a free loopback port with a fresh data dir (stopped at the end)."""
    from kafka_harness import KafkaServer

    server = KafkaServer().start()
    try:
        yield server
    finally:
        server.stop()
