"""Fail unless every alert in alerts/elrwatch-rules.yaml has a firing AND a not-firing promtool unit test,
and a section in alerts/RUNBOOK.md matching its runbook_url anchor. Run by `make test-alerts`."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ALERTS = HERE.parent


def main() -> int:
    rules = yaml.safe_load((ALERTS / "elrwatch-rules.yaml").read_text())
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in sorted(HERE.glob("*.yaml")):
        for test in yaml.safe_load(path.read_text()).get("tests", []):
            for case in test.get("alert_rule_test", []):
                (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    runbook = (ALERTS / "RUNBOOK.md").read_text()
    anchors = {line[3:].strip().lower() for line in runbook.splitlines() if line.startswith("## ")}
    problems = []
    for name, rule in alerts.items():
        if name not in firing:
            problems.append(f"{name}: no firing test")
        if name not in quiet:
            problems.append(f"{name}: no not-firing test")
        ann = rule.get("annotations", {})
        for key in ("summary", "description", "runbook_url"):
            if not ann.get(key):
                problems.append(f"{name}: missing annotation {key}")
        if rule.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
            problems.append(f"{name}: severity label must be critical|warning|info")
        anchor = ann.get("runbook_url", "").rpartition("#")[2]
        if anchor != name.lower() or anchor not in anchors:
            problems.append(f"{name}: runbook_url anchor {anchor!r} has no '## {name}' section in RUNBOOK.md")
    for name in (firing | quiet) - alerts.keys():
        problems.append(f"tests mention unknown alert {name}")
    for p in problems:
        print("FAIL", p)
    print(f"{len(alerts)} alerts: {len(alerts) - len({p.split(':')[0] for p in problems})} fully covered")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
