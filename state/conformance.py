"""Conformance runner: replays controller cases (shared/reference/conformance/README.md) through the model.

Each case starts from ``initial`` (partition state + config) and ``brokers``, runs one input or a
``sequence`` of steps through :func:`elrwatch.state.controller.decide`, merges the records with Kafka's replay
rules and compares records (exact keys), errors, state subsets and effective min ISR with the expectations.
ELR and LastKnownElr are compared as sets (Kafka builds them from a HashSet).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from elrwatch.state import controller
from elrwatch.state import metadata_version as mv
from elrwatch.state.model import BrokerState, PartitionState

SET_FIELDS = frozenset({"eligibleLeaderReplicas", "lastKnownElr", "elr"})
LIST_FIELDS = frozenset(
    {
        "replicas",
        "isr",
        "elr",
        "lastKnownElr",
        "eligibleLeaderReplicas",
        "addingReplicas",
        "removingReplicas",
    }
)


class CaseFileError(Exception):
    """The case file cannot be read at all."""


@dataclass(frozen=True, slots=True)
class CaseResult:
    """The outcome of one case: ``message`` says what differed (empty when it passed)."""

    case_id: str
    passed: bool
    message: str = ""

    def line(self) -> str:
        """``PASS <id>`` or ``FAIL <id>: <message>``."""
        return f"PASS {self.case_id}" if self.passed else f"FAIL {self.case_id}: {self.message}"


class _Mismatch(Exception):
    pass


def _ids(values: Iterable[Any] | None) -> tuple[int, ...]:
    return tuple(int(v) for v in values or ())


def initial_partition(initial: Mapping[str, Any]) -> PartitionState:
    """The partition registration of a case's ``initial`` object."""
    return PartitionState(
        topic_id=str(initial.get("topicId", "AAAAAAAAAAAAAAAAAAAAAA")),
        partition_id=int(initial.get("partitionId", 0)),
        replicas=_ids(initial.get("replicas")),
        isr=_ids(initial.get("isr")),
        elr=_ids(initial.get("elr", initial.get("eligibleLeaderReplicas"))),
        last_known_elr=_ids(initial.get("lastKnownElr")),
        leader=int(initial.get("leader", -1)),
        leader_epoch=int(initial.get("leaderEpoch", 0)),
        partition_epoch=int(initial.get("partitionEpoch", 0)),
        leader_recovery_state=int(initial.get("leaderRecoveryState", 0)),
        adding_replicas=_ids(initial.get("addingReplicas")),
        removing_replicas=_ids(initial.get("removingReplicas")),
    )


def initial_context(initial: Mapping[str, Any]) -> controller.TopicContext:
    """The topic/cluster settings of a case's ``initial`` object."""
    version = initial.get("metadataVersion")
    return controller.TopicContext(
        min_isr=int(initial.get("minIsr", 1)),
        elr_enabled=bool(initial.get("elrEnabled", False)),
        unclean_enabled=bool(initial.get("uncleanLeaderElectionEnable", False)),
        metadata_version=mv.DEFAULT_LEVEL if version is None else mv.parse_metadata_version(version),
    )


def initial_brokers(brokers: Mapping[str, Any] | None) -> dict[int, BrokerState]:
    """Broker registrations of a case's ``brokers`` object (absent broker = unregistered)."""
    result: dict[int, BrokerState] = {}
    for key, value in (brokers or {}).items():
        broker_id = int(key)
        value = value or {}
        result[broker_id] = BrokerState(
            broker_id,
            epoch=int(value.get("epoch", -1)),
            fenced=bool(value.get("fenced", False)),
            in_controlled_shutdown=bool(value.get("inControlledShutdown", False)),
            registered=bool(value.get("registered", True)),
        )
    return result


def _normalize(key: str, value: Any) -> Any:
    if value is None:
        return None
    if key in SET_FIELDS and isinstance(value, list | tuple):
        return sorted(int(v) for v in value)
    if key in LIST_FIELDS and isinstance(value, list | tuple):
        return [int(v) for v in value]
    return value


def _show(value: Any) -> str:
    return json.dumps(_jsonable(value), separators=(",", ":"), sort_keys=False)


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _compare_record(where: str, expected: Mapping[str, Any] | None, got: Mapping[str, Any] | None) -> None:
    if expected is None or got is None:
        if expected is None and got is None:
            return
        raise _Mismatch(f"{where}record: expected {_show(expected)} got {_show(got)}")
    keys = set(expected) | set(got)
    for key in keys:
        if key not in expected or key not in got or _normalize(key, expected[key]) != _normalize(key, got[key]):
            raise _Mismatch(f"{where}record: expected {_show(expected)} got {_show(got)}")


def _compare_state(where: str, expected: Mapping[str, Any], p: PartitionState) -> None:
    actual = p.registration()
    for key, value in expected.items():
        if key == "directories":  # not modelled (conformance/README.md: directories are ignored)
            continue
        if key not in actual:
            raise _Mismatch(f"{where}state: unknown field {key!r}")
        if _normalize(key, value) != _normalize(key, actual[key]):
            raise _Mismatch(
                f"{where}state.{key}: expected {_show(value)} got {_show(actual[key])}"
                f" (state {_show({k: actual[k] for k in expected})})"
            )


def _describe(inp: Mapping[str, Any]) -> str:
    details = {k: v for k, v in inp.items() if k != "kind"}
    return f"{inp.get('kind')} {_show(details)}" if details else str(inp.get("kind"))


def _run_step(
    where: str,
    p: PartitionState,
    brokers: dict[int, BrokerState],
    ctx: controller.TopicContext,
    inp: Mapping[str, Any],
    expected: Mapping[str, Any] | None,
) -> controller.TopicContext:
    broker_view = {
        b: BrokerState(s.broker_id, s.epoch, s.incarnation_id, s.fenced, s.in_controlled_shutdown, s.registered)
        for b, s in brokers.items()
    }
    decision = controller.decide(p, broker_view, ctx, inp)
    controller.apply_decision(p, decision)
    controller.update_brokers(brokers, inp)
    if decision.new_min_isr is not None:
        ctx = controller.with_min_isr(ctx, decision.new_min_isr)
    if expected is None:
        return ctx
    if "record" in expected:
        _compare_record(where, expected["record"], decision.record)
    expected_error = expected.get("error")
    if expected_error != decision.error:
        raise _Mismatch(f"{where}error: expected {_show(expected_error)} got {_show(decision.error)}")
    if "effectiveMinIsr" in expected and expected["effectiveMinIsr"] != decision.effective_min_isr:
        raise _Mismatch(
            f"{where}effectiveMinIsr: expected {expected['effectiveMinIsr']} got {decision.effective_min_isr}"
        )
    if expected.get("state"):
        _compare_state(where, expected["state"], p)
    return ctx


def run_case(case: Mapping[str, Any]) -> CaseResult:
    """Replay one case; never raises for a bad case (it fails with the reason)."""
    case_id = str(case.get("id", "<no id>"))
    try:
        initial = case["initial"]
        p = initial_partition(initial)
        ctx = initial_context(initial)
        brokers = initial_brokers(case.get("brokers"))
        inp = case["input"]
        if inp.get("kind") == "sequence":
            steps = inp.get("steps") or []
            for index, step in enumerate(steps, start=1):
                step_input = step["input"]
                where = f"step {index} ({_describe(step_input)}): "
                ctx = _run_step(where, p, brokers, ctx, step_input, step.get("expected"))
            final = case.get("expected") or {}
            if final:
                _compare_state("final ", final, p)
        else:
            _run_step("", p, brokers, ctx, inp, case.get("expected") or {})
    except _Mismatch as mismatch:
        return CaseResult(case_id, False, str(mismatch))
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        return CaseResult(case_id, False, f"invalid case: {type(exc).__name__}: {exc}")
    return CaseResult(case_id, True)


def load_cases(path: str) -> list[tuple[int, Any]]:
    """(line number, parsed JSON or its parse error) per non-blank line; CaseFileError if unreadable."""
    try:
        if path == "-":
            lines = sys.stdin.readlines()
        else:
            with open(path, encoding="utf-8") as handle:
                lines = handle.readlines()
    except OSError as exc:
        raise CaseFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise CaseFileError(f"cannot read {path}: not UTF-8 text ({exc.reason})") from exc
    cases: list[tuple[int, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            cases.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            cases.append((number, f"invalid JSON: {exc.msg} at column {exc.colno}"))
    return cases


def run_cases(cases: Iterable[tuple[int, Any]]) -> Iterator[CaseResult]:
    """Results in file order; lines that are not a JSON object fail as ``line <n>``."""
    for number, case in cases:
        if isinstance(case, str):
            yield CaseResult(f"line {number}", False, case)
        elif not isinstance(case, dict):
            yield CaseResult(f"line {number}", False, "invalid case: not a JSON object")
        else:
            yield run_case(case)


def run_file(path: str, out: Any) -> tuple[int, int]:
    """Run every case of ``path``, writing one line per case and the summary to ``out``; (passed, failed)."""
    passed = failed = 0
    for result in run_cases(load_cases(path)):
        out.write(result.line() + "\n")
        if result.passed:
            passed += 1
        else:
            failed += 1
    out.write(f"{passed} passed, {failed} failed\n")
    return passed, failed
