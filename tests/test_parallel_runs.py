"""Tests run in parallel (`make test`: pytest-xdist workers, and other runs on the same machine): the harnesses
never hand one port or one folder to two users, and tests that share a server run on one worker."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import RUN_OUTPUTS, shared_server_groups, workdir_entries
from test_store import PostgresServer

from elrwatch.devtools.alerting import Pipeline
from elrwatch.devtools.kafka_cluster import KafkaCluster, free_port
from elrwatch.devtools.spark_cluster import SparkCluster

pytest_plugins = ("pytester",)

#: Enough calls that two processes picking ports from the kernel alone would share some (a few in 10^4 ports).
CALLS = 300


def test_free_port_never_hands_one_port_to_two_processes_or_twice() -> None:
    """Two processes asking at the same time get distinct ports, each distinct from the other's (without the
    reservation they would share a few: the kernel picks a random free port and these are not bound)."""
    code = "import json; from elrwatch.devtools.kafka_cluster import free_port; "
    code += f"print(json.dumps([free_port() for _ in range({CALLS})]))"
    procs = [subprocess.Popen([sys.executable, "-P", "-c", code], stdout=subprocess.PIPE) for _ in range(2)]
    first, second = (json.loads(proc.communicate(timeout=120)[0]) for proc in procs)
    assert len(set(first)) == len(set(second)) == CALLS
    assert not set(first) & set(second)
    assert free_port() not in set(first) | set(second)


def test_two_harnesses_in_one_process_get_their_own_ports_and_folders(tmp_path: Path) -> None:
    """Two of each harness (Kafka, Spark standalone, PostgreSQL, the alerting pipeline), made side by side as two
    workers' fixtures would be: no port and no folder in common, every folder a fresh one under the temporary
    directory, removed by ``stop``."""
    kafka = [KafkaCluster(brokers=3, listener_security={"protocol": "SASL_SSL"}) for _ in range(2)]
    spark = [SparkCluster(workers=2) for _ in range(2)]
    postgres = [PostgresServer() for _ in range(2)]
    pipelines = [Pipeline(cluster=None, workdir=tmp_path / f"pipeline-{i}") for i in range(2)]
    try:
        ports = [
            *(node.port for cluster in kafka for node in (cluster.controller, *cluster.brokers.values())),
            *(cluster.listener_security["port"] for cluster in kafka),
            *(port for cluster in spark for port in (cluster.port, cluster.webui_port)),
            *(server.port for server in postgres),
            *(pipeline.metrics_port for pipeline in pipelines),
        ]
        assert len(ports) == len(set(ports)) == 2 * (4 + 1 + 2 + 1 + 1)
        folders = [*(c.base_dir for c in kafka), *(c.base_dir for c in spark), *(s.tmp for s in postgres)]
        assert len(set(folders)) == len(folders)
        assert all(folder.is_relative_to(tempfile.gettempdir()) for folder in folders)
    finally:
        for cluster in kafka:
            cluster.stop()
        for cluster in spark:
            cluster.stop()
        for server in postgres:  # made, never started: only its folder to remove
            shutil.rmtree(server.tmp, ignore_errors=True)
    assert not any(c.base_dir.exists() for c in (*kafka, *spark))


def test_tests_sharing_a_session_server_or_a_module_fixture_form_one_group(pytester: pytest.Pytester) -> None:
    """`shared_server_groups` (conftest.py): a session fixture of conftest.py joins the tests that use it, across
    modules; a module that defines a module-scoped fixture is one group with all its tests; other tests stay free."""
    pytester.makeconftest(
        "import pytest\n"
        "@pytest.fixture(scope='session')\n"
        "def cluster():\n    return 1\n"
        "@pytest.fixture(scope='session')\n"
        "def other_cluster():\n    return 2\n"
    )
    pytester.makepyfile(
        test_a="def test_uses_cluster(cluster): pass\ndef test_free(): pass\n",
        test_b="import pytest\n"
        "@pytest.fixture(scope='module')\n"
        "def server():\n    return 3\n"
        "def test_server(server): pass\n"
        "def test_dynamic(request): request.getfixturevalue('server')\n"
        "def test_both(server, cluster): pass\n",
        test_c="def test_other(other_cluster): pass\n",
    )
    items, _ = pytester.inline_genitems()
    groups = shared_server_groups(items, str(pytester.path / "conftest.py"))
    by_name = {item.name: groups.get(item.nodeid) for item in items}
    assert by_name["test_free"] is None
    assert len({by_name[n] for n in ("test_uses_cluster", "test_server", "test_dynamic", "test_both")}) == 1
    assert by_name["test_other"] not in (None, by_name["test_server"])


def test_the_working_directory_check_sees_new_entries_and_var_but_not_run_outputs(tmp_path: Path) -> None:
    (tmp_path / "var").mkdir()
    before = workdir_entries(tmp_path)
    for output in RUN_OUTPUTS:
        (tmp_path / output).mkdir()
    (tmp_path / "var" / "elrwatch.db").write_text("")
    (tmp_path / "spark-warehouse").mkdir()
    assert workdir_entries(tmp_path) - before == {"var/elrwatch.db", "spark-warehouse"}
