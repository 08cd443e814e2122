"""The mypyc-compiled core against the pure-Python one (run by `make test-compiled` only, see conftest.py).

This process imports the compiled build (PYTHONPATH=build/compiled); a subprocess without that path imports the
editable, pure-Python install. Both must replay the same records to the same document, and each must read the
other's pickles: bucket snapshots and the core objects they hold survive switching builds.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from pickled_samples import messages

from elrwatch.state import COMPILED_MODULES, compiled_modules, core_build
from elrwatch.state.cluster import ClusterState
from elrwatch.state.records import parse_line
from elrwatch.state.replay import Replayer, replay_file

if not compiled_modules():
    pytest.fail(
        "test_compiled_core.py compares the compiled core with the pure one: run it with `make test-compiled`",
        pytrace=False,
    )

#: A pure-Python subprocess: no PYTHONPATH (the editable install), `-P` and a scratch working directory so that
#: the repository's own folders are not imported instead.
PURE_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ELRWATCH_EXPECT_COMPILED")}


def pure_python(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-P", "-c", code, *args],
        env=PURE_ENV,
        cwd=cwd,
        capture_output=True,
        timeout=300,
        check=True,
    )


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A faulty simulated cluster: fences, elections, ELR, unclean recovery, violations."""
    out = tmp_path_factory.mktemp("sim") / "events.jsonl"
    subprocess.run(
        [sys.executable, "-P", "-m", "elrwatch.cli", "simulate", "--faults", "0.4", "--records", "6000",
         "--topics", "4", "--partitions", "12", "--brokers", "5", "--seed", "11", "-o", str(out)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return out


def test_this_process_runs_the_compiled_core_and_the_subprocess_the_pure_one(tmp_path: Path) -> None:
    assert compiled_modules() == list(COMPILED_MODULES)
    assert core_build() == "compiled (mypyc)"
    done = pure_python("from elrwatch.state import core_build; print(core_build())", tmp_path)
    assert done.stdout.decode().strip() == "interpreted"


def test_both_builds_replay_to_the_same_document(simulated: Path, tmp_path: Path) -> None:
    compiled_doc = replay_file(str(simulated)).document()
    assert compiled_doc["violations"], "the simulated stream should break some invariants"
    assert compiled_doc["quarantined"]["count"] == 0
    done = pure_python(
        "import sys, orjson; from elrwatch.state.replay import replay_file;"
        "sys.stdout.buffer.write(orjson.dumps(replay_file(sys.argv[1]).document()))",
        tmp_path,
        str(simulated),
    )
    assert orjson.loads(done.stdout) == json.loads(json.dumps(compiled_doc))


def test_a_snapshot_written_by_either_build_loads_in_the_other(simulated: Path, tmp_path: Path) -> None:
    replayer = Replayer(track_changes=True)
    replayer.feed_lines(simulated.read_bytes().splitlines(), "sim")
    expected = json.loads(json.dumps(replayer.document(advice=False)))
    compiled_blob = tmp_path / "compiled.snap"
    compiled_blob.write_bytes(replayer.cluster.to_bytes())
    # the pure build loads the compiled snapshot, and writes its own snapshot of the same stream
    done = pure_python(
        "import sys, orjson\n"
        "from elrwatch.state.cluster import ClusterState\n"
        "from elrwatch.state.replay import Replayer\n"
        "from pathlib import Path\n"
        "loaded = Replayer(cluster=ClusterState.from_bytes(Path(sys.argv[1]).read_bytes()))\n"
        "own = Replayer(track_changes=True)\n"
        "own.feed_lines(Path(sys.argv[2]).read_bytes().splitlines(), 'sim')\n"
        "Path(sys.argv[3]).write_bytes(own.cluster.to_bytes())\n"
        "own.cluster = loaded.cluster\n"
        "sys.stdout.buffer.write(orjson.dumps(own.document(advice=False)))\n",
        tmp_path,
        str(compiled_blob),
        str(simulated),
        str(tmp_path / "pure.snap"),
    )
    assert orjson.loads(done.stdout) == expected
    restored = Replayer(cluster=ClusterState.from_bytes((tmp_path / "pure.snap").read_bytes()))
    restored.counts = replayer.counts
    assert json.loads(json.dumps(restored.document(advice=False))) == expected
    # and the restored compiled state goes on applying records like the original
    more = [parse_line(line, "more", i) for i, line in enumerate(simulated.read_bytes().splitlines()[:50], 1)]
    for parsed in more:
        restored.feed_parsed(parsed)
        replayer.feed_parsed(parsed)
    assert json.loads(json.dumps(restored.document(advice=False))) == json.loads(
        json.dumps(replayer.document(advice=False))
    )


def test_pickled_core_objects_written_by_either_build_load_in_the_other(tmp_path: Path) -> None:
    here = [repr(m) for m in messages()]
    (tmp_path / "compiled.pkl").write_bytes(pickle.dumps(messages(), protocol=pickle.HIGHEST_PROTOCOL))
    done = pure_python(
        "import pickle, sys\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from pickled_samples import messages\n"
        "print([repr(m) for m in pickle.loads(open(sys.argv[1], 'rb').read())] == [repr(m) for m in messages()])\n"
        "sys.stdout.flush()\n"
        "open(sys.argv[3], 'wb').write(pickle.dumps(messages(), protocol=pickle.HIGHEST_PROTOCOL))\n",
        tmp_path,
        str(tmp_path / "compiled.pkl"),
        os.path.dirname(__file__),
        str(tmp_path / "pure.pkl"),
    )
    assert done.stdout.decode().strip() == "True"
    assert [repr(m) for m in pickle.loads((tmp_path / "pure.pkl").read_bytes())] == here
