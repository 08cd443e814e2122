"""The Grafana dashboard shipped in the Helm chart (helm/elrwatch/dashboards/elrwatch.json).

Checks the JSON model Grafana imports (required fields, unique panel ids and uids, sane grid, only known keys),
that every panel and every query uses the `${datasource}` variable, that every gauge of docs/DESIGN.md §6 has a
panel, and that every panel's PromQL parses: each query becomes a recording rule in a temporary rules file
checked with `promtool check rules` (Grafana variables substituted first).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "helm" / "elrwatch" / "dashboards" / "elrwatch.json"
GENERATOR = ROOT / "helm" / "tools" / "gen_dashboard.py"
DESIGN = ROOT / "docs" / "DESIGN.md"

# Keys of Grafana's dashboard / panel / target JSON model that this dashboard may use (schemaVersion 39).
DASHBOARD_KEYS = {
    "annotations", "description", "editable", "fiscalYearStartMonth", "graphTooltip", "id", "links", "liveNow",
    "panels", "refresh", "schemaVersion", "tags", "templating", "time", "timepicker", "timezone", "title", "uid",
    "version", "weekStart",
}  # fmt: skip
PANEL_KEYS = {
    "collapsed", "datasource", "description", "fieldConfig", "gridPos", "id", "options", "panels", "targets",
    "title", "transformations", "type", "transparent", "links", "interval", "maxDataPoints", "repeat",
    "repeatDirection", "pluginVersion", "libraryPanel",
}  # fmt: skip
TARGET_KEYS = {"datasource", "refId", "expr", "legendFormat", "range", "instant", "format", "interval", "hide",
               "editorMode", "exemplar", "intervalFactor"}  # fmt: skip
PANEL_TYPES = {"row", "stat", "timeseries", "gauge", "bargauge", "table", "text", "heatmap", "state-timeline"}
UID_RE = re.compile(r"^[A-Za-z0-9_-]{1,40}$")

# Grafana's built-in variables and this dashboard's own, replaced before promtool parses the query.
SUBSTITUTIONS = {
    "$__rate_interval": "5m",
    "${__rate_interval}": "5m",
    "$__interval": "1m",
    "${__interval}": "1m",
    "$__range": "1h",
    "${__range}": "1h",
    "$namespace": ".*",
    "${namespace}": ".*",
}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def all_panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # panels nested in collapsed rows
    return out


def queries(dashboard: dict) -> list[tuple[dict, dict]]:
    return [(p, t) for p in all_panels(dashboard) for t in p.get("targets", [])]


def substitute(expr: str) -> str:
    for var in sorted(SUBSTITUTIONS, key=len, reverse=True):
        expr = expr.replace(var, SUBSTITUTIONS[var])
    return expr


def promtool_check(exprs: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    """`promtool check rules` on one recording rule per expression (record name -> expr)."""
    promtool = shutil.which("promtool")
    if promtool is None:  # `make test` installs it first; a missing promtool must not pass silently
        pytest.fail("promtool not installed (Debian package prometheus; run `make install-system`)")
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": r, "expr": e} for r, e in exprs.items()]}]}
    path = tmp_path / "dashboard-queries.rules.yaml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
    return subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)


def test_dashboard_model(dashboard: dict) -> None:
    assert set(dashboard) <= DASHBOARD_KEYS, f"unknown dashboard keys: {set(dashboard) - DASHBOARD_KEYS}"
    assert dashboard.get("id") is None, "a provisioned dashboard must not carry a database id"
    assert UID_RE.match(dashboard["uid"]), "dashboard uid: 1-40 chars of [A-Za-z0-9_-]"
    assert dashboard["title"].strip()
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert {"from", "to"} <= set(dashboard["time"])
    assert isinstance(dashboard["panels"], list) and dashboard["panels"]


def test_panel_ids_and_uids_unique(dashboard: dict) -> None:
    ids = [p["id"] for p in all_panels(dashboard)]
    assert all(isinstance(i, int) and i > 0 for i in ids)
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    uids = [dashboard["uid"]]
    uids += [p["libraryPanel"]["uid"] for p in all_panels(dashboard) if "libraryPanel" in p]
    uids += [p["uid"] for p in all_panels(dashboard) if "uid" in p]
    assert len(uids) == len(set(uids)), "duplicate uids"
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert len(names) == len(set(names)), "duplicate variable names"


def test_panels_required_fields_and_grid(dashboard: dict) -> None:
    cells: set[tuple[int, int]] = set()
    for panel in all_panels(dashboard):
        assert set(panel) <= PANEL_KEYS, f"panel {panel.get('id')}: unknown keys {set(panel) - PANEL_KEYS}"
        assert panel["type"] in PANEL_TYPES, panel["type"]
        assert panel["title"].strip(), f"panel {panel['id']} has no title"
        grid = panel["gridPos"]
        assert set(grid) == {"h", "w", "x", "y"}, grid
        assert 1 <= grid["w"] <= 24 and grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] >= 1
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"panel {panel['id']} overlaps another panel at {(x, y)}"
                cells.add((x, y))
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"panel {panel['id']} ({panel['title']}) has no query"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), f"panel {panel['id']}: duplicate refIds"
        for target in panel["targets"]:
            assert set(target) <= TARGET_KEYS, f"panel {panel['id']}: unknown target keys {set(target) - TARGET_KEYS}"
            assert target["expr"].strip()
        steps = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps", [])
        if steps:
            assert steps[0]["value"] is None, f"panel {panel['id']}: the base threshold step must have value null"


def test_every_panel_uses_the_datasource_variable(dashboard: dict) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"]["uid"] == "${datasource}", f"variable {var['name']}"
    for panel in all_panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, f"panel {panel['id']}"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", f"panel {panel['id']} {target['refId']}"


def test_every_design_gauge_has_a_panel(dashboard: dict) -> None:
    section = DESIGN.read_text(encoding="utf-8").split("## 6.", 1)[1].split("\n## ", 1)[0]
    gauges = set(re.findall(r"`(elrwatch_[a-z_]+)", section))
    assert len(gauges) >= 25, f"could not read the gauge list of DESIGN §6: {sorted(gauges)}"
    used = " ".join(t["expr"] for _, t in queries(dashboard))
    missing = sorted(g for g in gauges if not re.search(rf"\b{g}\b", used))
    assert not missing, f"gauges of DESIGN §6 without a panel: {missing}"


def test_every_query_filters_on_the_namespace_variable(dashboard: dict) -> None:
    for panel, target in queries(dashboard):
        for selector in re.findall(r"\b(?:elrwatch_[a-z_]+|up)\{([^}]*)\}", target["expr"]):
            assert 'namespace=~"$namespace"' in selector, f"panel {panel['id']}: {target['expr']}"
        bare = re.sub(r"\b(?:by|without)\s*\([^)]*\)", "", target["expr"])  # grouping labels are not metrics
        bare = re.sub(r"\{[^}]*\}", "{}", bare)
        for match in re.finditer(r"\b(elrwatch_[a-z_]+|up)\b", bare):
            assert bare[match.end() : match.end() + 1] == "{", f"panel {panel['id']}: bare {match.group(1)}"


def test_every_query_parses_with_promtool(dashboard: dict, tmp_path: Path) -> None:
    exprs = {f"dashboard:panel{p['id']}_{t['refId']}:query": substitute(t["expr"]) for p, t in queries(dashboard)}
    assert all("$" not in e for e in exprs.values()), "an unsubstituted Grafana variable is left"
    result = promtool_check(exprs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


def test_promtool_check_rejects_a_broken_query(tmp_path: Path) -> None:
    """The PromQL check above must be able to fail."""
    result = promtool_check({"dashboard:broken:query": "sum by (status (elrwatch_partitions)"}, tmp_path)
    assert result.returncode != 0


def test_dashboard_file_is_generated_from_the_generator(dashboard: dict) -> None:
    spec = importlib.util.spec_from_file_location("gen_dashboard", GENERATOR)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.dashboard == dashboard, "dashboards/elrwatch.json is stale: run python3 helm/tools/gen_dashboard.py"
