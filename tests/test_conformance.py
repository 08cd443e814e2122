"""Every reference conformance case through the same runner as `elrwatch conformance`, plus the runner's output."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest
from reference import conformance_cases_file
from typer.testing import CliRunner

from elrwatch.cli import app
from elrwatch.state.conformance import load_cases, run_case, run_file

CASES_FILE = conformance_cases_file()
CASES = [case for _, case in load_cases(str(CASES_FILE))]
BY_ID = {case["id"]: case for case in CASES}


def test_reference_corpus_is_complete() -> None:
    assert len(CASES) >= 54  # the reference corpus (a larger one may sit in ../shared)
    assert len(BY_ID) == len(CASES)


@pytest.mark.parametrize("case_id", sorted(BY_ID))
def test_reference_case(case_id: str) -> None:
    result = run_case(BY_ID[case_id])
    assert result.passed, result.line()


def _write(tmp_path: Path, cases: list[object], extra: str = "") -> Path:
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(case) + "\n" for case in cases) + extra, encoding="utf-8")
    return path


def test_wrong_record_fails_with_expected_and_got(tmp_path: Path) -> None:
    case = copy.deepcopy(BY_ID["pcb-elect-foo-preferred"])
    case["id"] = "broken-record"
    case["expected"]["record"] = {"leader": 3}
    out = io.StringIO()
    passed, failed = run_file(str(_write(tmp_path, [BY_ID["pcb-elect-foo-preferred"], case])), out)
    lines = out.getvalue().splitlines()
    assert (passed, failed) == (1, 1)
    assert lines[0] == "PASS pcb-elect-foo-preferred"
    assert lines[1] == 'FAIL broken-record: record: expected {"leader":3} got {"leader":2}'
    assert lines[-1] == "1 passed, 1 failed"


def test_extra_record_key_fails(tmp_path: Path) -> None:
    case = copy.deepcopy(BY_ID["scenario-unclean-election-clears-elr"])
    del case["expected"]["record"]["lastKnownElr"]
    result = run_case(case)
    assert not result.passed
    assert "expected" in result.message and '"lastKnownElr":[]' in result.message


def test_elr_compared_as_set() -> None:
    case = copy.deepcopy(BY_ID["pcb-elr-isr-shrink-below-min"])
    case["expected"]["record"]["eligibleLeaderReplicas"] = [4, 3]
    case["expected"]["state"]["elr"] = [4, 3]
    assert run_case(case).passed


def test_isr_order_matters() -> None:
    case = copy.deepcopy(BY_ID["pcb-isr-shrink-no-epoch-bump-3.7"])
    case["expected"]["record"]["isr"] = [1, 2]
    assert not run_case(case).passed


def test_sequence_failure_names_the_step() -> None:
    case = copy.deepcopy(BY_ID["scenario-last-replica-standing-elr"])
    case["input"]["steps"][2]["expected"]["record"]["lastKnownElr"] = [1]
    result = run_case(case)
    assert not result.passed
    assert result.message.startswith('step 3 (fence {"broker":2}): record: expected')


def test_wrong_error_and_state_fail() -> None:
    case = copy.deepcopy(BY_ID["rcm-invalid-alter-partition-not-leader"])
    case["expected"]["error"] = "NOT_CONTROLLER"
    assert run_case(case).message == 'error: expected "NOT_CONTROLLER" got "INVALID_REQUEST"'
    case = copy.deepcopy(BY_ID["scenario-kip966-4-broker-walkthrough"])
    case["expected"]["leaderEpoch"] = 7
    assert run_case(case).message.startswith("final state.leaderEpoch: expected 7 got 2")


def test_invalid_lines_fail_but_do_not_stop_the_run(tmp_path: Path) -> None:
    unknown_kind = copy.deepcopy(BY_ID["pcb-elect-foo-preferred"])
    unknown_kind["id"] = "unknown-kind"
    unknown_kind["input"] = {"kind": "teleport"}
    path = _write(tmp_path, [unknown_kind, BY_ID["rcm-effective-min-isr"]], extra="{not json\n\n[1]\n")
    out = io.StringIO()
    assert run_file(str(path), out) == (1, 3)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("FAIL unknown-kind: invalid case: ValueError: unknown input kind 'teleport'")
    assert lines[1] == "PASS rcm-effective-min-isr"
    assert lines[2].startswith("FAIL line 3: invalid JSON")
    assert lines[3] == "FAIL line 5: invalid case: not a JSON object"


def test_cli_exit_codes(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["conformance", str(CASES_FILE)])
    assert ok.exit_code == 0, ok.output
    assert ok.output.splitlines()[-1] == "54 passed, 0 failed"
    case = copy.deepcopy(BY_ID["rcm-effective-min-isr"])
    case["expected"]["effectiveMinIsr"] = 5
    bad = runner.invoke(app, ["conformance", str(_write(tmp_path, [case]))])
    assert bad.exit_code == 1
    assert bad.output.splitlines() == [
        "FAIL rcm-effective-min-isr: effectiveMinIsr: expected 5 got 3",
        "0 passed, 1 failed",
    ]
    missing = runner.invoke(app, ["conformance", str(tmp_path / "nope.jsonl")])
    assert missing.exit_code != 0
    assert "cannot read" in missing.output
