"""The command line's light commands load none of the job's numeric stack.

`elrwatch bridge`, `agent`, `produce`, `api`, `restart-check` and every command's ``--help`` run where neither
Spark nor the columnar engine belongs (a sidecar beside each broker, an operator's shell, a rolling-restart script):
each is run here in a fresh interpreter, as far as it goes without a Kafka cluster, and must not have imported
numpy, pandas, pyarrow or pyspark. ``--help`` loads no web or database stack either, and `restart-check` no FastAPI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer.main
from core_events import base_cluster, envelope, line, partition, topic, topic_min_isr

from elrwatch.cli import app

HEAVY = ("numpy", "pandas", "pyarrow", "pyspark")
WEB = ("fastapi", "sqlalchemy")
COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
#: What the sidecars import once they run (publishing, serving metrics): kafka-python and the Prometheus client.
SIDECAR_LIBRARIES = "import kafka, prometheus_client"
#: `elrwatch api` up to serving: uvicorn's server is not started.
NO_SERVER = "import uvicorn; uvicorn.run = lambda *args, **kwargs: print('would serve on', kwargs['port'])"


def run_cli(*invocations: list[str], prelude: str = "") -> list[tuple[int, str, list[str]]]:
    """Run ``elrwatch ARGS`` for each of ``invocations``, in order, in one fresh interpreter after ``prelude``: for
    each, its exit code, its output (stdout and stderr) and the packages of HEAVY and WEB loaded by then."""
    code = textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        {prelude}
        from elrwatch.cli import app
        results = []
        for args in {list(invocations)!r}:
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                try:
                    app(args)
                    code = 0
                except SystemExit as exc:
                    code = exc.code or 0
            results.append([code, out.getvalue(), [m for m in {HEAVY + WEB!r} if m in sys.modules]])
        print(json.dumps(results))
        """
    )
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return [(exit_code, output, loaded) for exit_code, output, loaded in json.loads(done.stdout)]


def test_help_loads_no_numeric_stack_nor_web_stack() -> None:
    """Every command's ``--help``, one after the other: the first that loads a package is named."""
    invocations = [["--help"], *([command, "--help"] for command in COMMANDS)]
    for args, (code, output, loaded) in zip(invocations, run_cli(*invocations), strict=True):
        assert code == 0 and "Usage:" in output, (args, output)
        assert loaded == [], f"elrwatch {' '.join(args)} imported {loaded}"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["agent", "--bootstrap-servers", "b:9092", "--topic", "t"], "--log-dirs and --metadata-log-dir are required"),
        (["bridge", "--source", "nope", "--bootstrap-servers", "b:9092", "--topic", "t"], "--source must be admin"),
        (["produce", "--bootstrap-servers", "b:9092", "--topic", "t"], "give either FILE or --simulate"),
    ],
)
def test_the_sidecars_load_no_numeric_stack(args: list[str], expected: str) -> None:
    """Each runs its command (its library imported) up to a usage error, with the clients it runs with loaded."""
    ((code, output, loaded),) = run_cli(args, prelude=SIDECAR_LIBRARIES)
    assert code == 2 and expected in output, output
    assert not set(loaded) & set(HEAVY), f"elrwatch {args[0]} imported {loaded}"


@pytest.fixture()
def events(tmp_path: Path) -> Path:
    """A cluster of three brokers and one partition whose ISR is all three (min ISR 2)."""
    records = [
        *base_cluster((0, 1, 2)),
        topic("foo"),
        topic_min_isr("foo", "2"),
        partition(replicas=(0, 1, 2), isr=(0, 1, 2), leader=0),
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(line(envelope(t, v, d, offset=i + 1)) + "\n" for i, (t, v, d) in enumerate(records)))
    return path


@pytest.fixture()
def store_url(tmp_path: Path, events: Path) -> str:
    """A status store holding the replay of ``events``."""
    from elrwatch.state.replay import replay_file
    from elrwatch.store import StatusStore

    url = f"sqlite:///{tmp_path}/status.db"
    store = StatusStore(url)
    store.load_document(replay_file(str(events), 1).document(advice=True), batch_id=1)
    store.dispose()
    return url


def test_restart_check_from_events_loads_no_numeric_stack(events: Path) -> None:
    ((code, output, loaded),) = run_cli(["restart-check", "1", str(events)])
    assert code == 0 and json.loads(output)["safe"] is True, output
    assert loaded == [], f"elrwatch restart-check FILE imported {loaded}"


def test_restart_check_from_the_store_loads_no_numeric_stack(store_url: str) -> None:
    ((code, output, loaded),) = run_cli(["restart-check", "1", "--store", store_url])
    assert code == 0 and json.loads(output)["safe"] is True, output
    assert loaded == ["sqlalchemy"], f"elrwatch restart-check --store imported {loaded}"


def test_api_up_to_serving_loads_no_numeric_stack(store_url: str) -> None:
    ((code, output, loaded),) = run_cli(["api", "--store", store_url, "--port", "18080"], prelude=NO_SERVER)
    assert code == 0 and "would serve on 18080" in output, output
    assert not set(loaded) & set(HEAVY), f"elrwatch api imported {loaded}"
    assert "no token required" in output, output  # the start-up line says whether the API is open


def test_api_says_it_requires_a_token_and_never_prints_it(store_url: str) -> None:
    secret = "tok-3f9a-never-printed"
    prelude = f"import os; os.environ['ELRWATCH_API_TOKEN'] = {secret!r}; {NO_SERVER}"
    ((code, output, _),) = run_cli(["api", "--store", store_url, "--port", "18081"], prelude=prelude)
    assert code == 0 and "a bearer token is required" in output, output
    assert secret not in output
