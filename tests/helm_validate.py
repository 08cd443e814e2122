"""Render the elrwatch Helm chart in several configurations and validate every manifest offline.

Run by `make test-helm` (after `helm lint --strict`):  python3 tests/helm_validate.py --helm .tools/helm/helm

* core kinds (Deployment, Service, ...): kubernetes-validate, strict (unknown fields rejected), against the
  Kubernetes version the pinned helm was built for (--kube-version, default 1.35);
* ServiceMonitor, PrometheusRule, SparkApplication: jsonschema against the openAPIV3Schema of the CRDs in
  helm/crds-for-validation/ (copied from shared/reference/k8s-crds/), made strict the same way;
* chart contracts: the PrometheusRule equals alerts/elrwatch-rules.yaml (no hand-made copy), the dashboard
  ConfigMap carries the dashboard file and the grafana_dashboard label, every container is non-root with a
  read-only root filesystem, secrets only come from secretKeyRef / secret volumes, Services select pods;
* invalid values (e.g. PostgreSQL store without a Secret) must make `helm template` fail.

Prints one line per scenario and a closing 'N passed, N failed' line; exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "elrwatch"
CRDS = ROOT / "helm" / "crds-for-validation"
RULES = ROOT / "alerts" / "elrwatch-rules.yaml"
DASHBOARD = CHART / "dashboards" / "elrwatch.json"
RELEASE, NAMESPACE = "elrwatch", "kafka-monitoring"

# name, helm args, kinds that must be rendered, kinds that must not be rendered
SCENARIOS: list[tuple[str, list[str], set[str], set[str]]] = [
    (
        "default values",
        [],
        {
            "Deployment",
            "Service",
            "PersistentVolumeClaim",
            "ServiceAccount",
            "ConfigMap",
            "ServiceMonitor",
            "PrometheusRule",
        },
        {"SparkApplication", "Ingress", "Secret"},
    ),
    (
        "values-production.yaml",
        ["-f", str(CHART / "values-production.yaml")],
        {"Deployment", "Service", "Ingress", "ServiceMonitor", "PrometheusRule", "ConfigMap"},
        {"SparkApplication", "Secret"},
    ),
    (
        "streaming.mode=sparkApplication",
        ["--set", "streaming.mode=sparkApplication"],
        {"SparkApplication", "Role", "RoleBinding", "Deployment", "ServiceMonitor", "PrometheusRule"},
        {"Secret"},
    ),
    (
        "production + sparkApplication (RWX, shared checkpoint)",
        [
            "-f",
            str(CHART / "values-production.yaml"),
            "--set",
            "streaming.mode=sparkApplication",
            "--set",
            "persistence.accessModes={ReadWriteMany}",
            "--set",
            "streaming.sparkApplication.checkpointDir=s3a://bucket/elrwatch/checkpoint",
            "--set",
            "kafka.tls.keyPasswordKey=key-password",
            "--set",
            "streaming.sparkConf.spark\\.sql\\.shuffle\\.partitions=4",
        ],
        {"SparkApplication", "Ingress"},
        {"Secret"},
    ),
    (
        "monitoring off, API off, no persistence",
        [
            "--set",
            "serviceMonitor.enabled=false",
            "--set",
            "prometheusRule.enabled=false",
            "--set",
            "dashboard.enabled=false",
            "--set",
            "api.enabled=false",
            "--set",
            "persistence.enabled=false",
        ],
        {"Deployment", "Service"},
        {"ServiceMonitor", "PrometheusRule", "ConfigMap", "PersistentVolumeClaim", "Ingress"},
    ),
]

SCENARIOS += [
    ("bridge off", ["--set", "bridge.enabled=false"], {"Deployment"}, set()),
    (
        "bridge.source=metadata-log (a sidecar beside Kafka: nothing rendered)",
        ["--set", "bridge.source=metadata-log"],
        {"Deployment"},
        set(),
    ),
]
#: Scenarios whose render has no admin-mode bridge Deployment (every other one must have exactly one).
NO_BRIDGE = {"bridge off", "bridge.source=metadata-log (a sidecar beside Kafka: nothing rendered)"}
SIDECAR_EXAMPLE = CHART / "examples" / "bridge-metadata-log-sidecar.yaml"
#: Sidecar examples: (file, node pool key of the values, the elrwatch arguments the container must start with).
SIDECAR_EXAMPLES = [
    (SIDECAR_EXAMPLE, "controller", ["bridge", "--source", "metadata-log"]),
    (CHART / "examples" / "agent-broker-sidecar.yaml", "broker", ["agent"]),
]


def check_bridge(name: str, docs: list[dict], problems: list[str]) -> None:
    """One admin-mode bridge Deployment unless the scenario turns it off; its state on a volume."""
    bridges = [
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["labels"].get("app.kubernetes.io/component") == "bridge"
    ]
    want = 0 if name in NO_BRIDGE else 1
    if len(bridges) != want:
        problems.append(f"{len(bridges)} bridge Deployments (want {want})")
    for d in bridges:
        args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        if args[1:4] != ["bridge", "--source", "admin"] or "--state-file" not in args:
            problems.append(f"bridge Deployment runs {args[:4]} without --state-file")


def check_sidecar_example(
    contract: dict[str, tuple[set[str], set[str]]],
    problems: list[str],
    example: Path = SIDECAR_EXAMPLE,
    pool: str = "controller",
    runs: list[str] | None = None,
) -> None:
    """A sidecar example (the metadata-log bridge's, the agent's): valid YAML, a read-only mount of Kafka's data,
    real CLI options and env."""
    runs = runs or ["bridge", "--source", "metadata-log"]
    values = yaml.safe_load(example.read_text())
    container = values[pool]["sidecars"][0]
    fake = {
        "kind": "Deployment",
        "metadata": {"name": "kafka"},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }
    check_cli([fake], contract, problems)
    if container["args"][1 : 1 + len(runs)] != runs:
        problems.append(f"sidecar example runs {container['args'][:4]}")
    data = [m for m in container["volumeMounts"] if m["name"] == "data"]
    if not data or not data[0].get("readOnly"):
        problems.append("sidecar example: Kafka's data volume is not mounted read-only")
    kubernetes_validate.validate(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "kafka-0"},
            "spec": {
                "containers": [container],
                "volumes": values[pool]["extraVolumes"] + [{"name": "data", "emptyDir": {}}],
            },
        },
        "1.35.0",
        strict=True,
    )


# helm args that must make rendering fail (schema or `required`)
MUST_FAIL: list[tuple[str, list[str]]] = [
    ("postgresql store without a Secret", ["--set", "store.type=postgresql"]),
    ("SASL without a Secret", ["--set", "kafka.sasl.enabled=true"]),
    ("unknown streaming.mode", ["--set", "streaming.mode=yarn"]),
    ("typo in a values key", ["--set", "streaming.bukets=4"]),
    ("plain-text password value", ["--set", "store.postgresql.password=hunter2"]),
    ("an alert without its for:/thresholds", ["--set", "prometheusRule.alerts.ElrwatchOfflinePartitions=null"]),
    ("an alert threshold left out", ["--set", "prometheusRule.alerts.ElrwatchOfflinePartitions.threshold=null"]),
    ("a threshold that is not a number", ["--set", "prometheusRule.alerts.ElrwatchOfflinePartitions.threshold=x"]),
    ("a for: that is not a duration", ["--set", "prometheusRule.alerts.ElrwatchOfflinePartitions.for=soon"]),
]

#: Alert values set in the chart must reach the rendered rule: (--set assignments, alert, expr, for, text in the
#: description).
ALERT_OVERRIDES = (
    [
        "--set",
        "prometheusRule.alerts.ElrwatchOfflinePartitions.for=7s",
        "--set",
        "prometheusRule.alerts.ElrwatchOfflinePartitions.threshold=3",
        "--set",
        "prometheusRule.alerts.ElrwatchMonitorStale.staleAfterSeconds=90",
    ],
    {
        "ElrwatchOfflinePartitions": ("elrwatch_offline_partitions > 3", "7s", "for 7s"),
        "ElrwatchMonitorStale": (None, "5m", "more than 90 seconds"),
    },
)


def check_alert_overrides(helm: str, kube_version: str, problems: list[str]) -> None:
    """The values' `for:` and thresholds are what the PrometheusRule carries (the others keep their defaults)."""
    sets, want = ALERT_OVERRIDES
    res = helm_template(helm, [*sets, "--show-only", "templates/prometheusrule.yaml"], kube_version)
    if res.returncode != 0:
        problems.append(f"helm template failed: {res.stderr.strip()[:300]}")
        return
    rules = {r["alert"]: r for g in yaml.safe_load(res.stdout)["spec"]["groups"] for r in g["rules"]}
    for alert, (expr, duration, text) in want.items():
        rule = rules[alert]
        if expr is not None and rule["expr"] != expr:
            problems.append(f"{alert}: expr {rule['expr']!r}, want {expr!r}")
        if rule["for"] != duration:
            problems.append(f"{alert}: for {rule['for']!r}, want {duration!r}")
        if text not in rule["annotations"]["description"]:
            problems.append(f"{alert}: description lacks {text!r}")
    if "${" in res.stdout:
        problems.append("a placeholder is left in the rendered rules")


# Known-bad edits of the sparkApplication render: each must be reported (proves the validators bite).
def _first(docs: list[dict], kind: str) -> dict:
    return next(d for d in docs if d["kind"] == kind)


MUTATIONS: list[tuple[str, Any]] = [
    ("unknown Deployment field", lambda ds: _first(ds, "Deployment")["spec"].__setitem__("replicaz", 1)),
    (
        "string containerPort",
        lambda ds: _first(ds, "Deployment")["spec"]["template"]["spec"]["containers"][0].__setitem__(
            "ports", [{"containerPort": "abc"}]
        ),
    ),
    (
        "ServiceMonitor typo",
        lambda ds: _first(ds, "ServiceMonitor")["spec"]["endpoints"][0].__setitem__("intervall", "30s"),
    ),
    ("SparkApplication bad type", lambda ds: _first(ds, "SparkApplication")["spec"].__setitem__("type", "Go")),
    ("SparkApplication missing sparkVersion", lambda ds: _first(ds, "SparkApplication")["spec"].pop("sparkVersion")),
    (
        "PrometheusRule unknown field",
        lambda ds: _first(ds, "PrometheusRule")["spec"]["groups"][0]["rules"][0].__setitem__("foo", "x"),
    ),
    (
        "PrometheusRule drifts from the rules file",
        lambda ds: _first(ds, "PrometheusRule")["spec"]["groups"][0]["rules"][0].__setitem__("expr", "vector(1)"),
    ),
    (
        "writable root filesystem",
        lambda ds: _first(ds, "SparkApplication")["spec"]["driver"]["securityContext"].__setitem__(
            "readOnlyRootFilesystem", False
        ),
    ),
    ("Service selecting no pod", lambda ds: _first(ds, "Service")["spec"]["selector"].__setitem__("x", "y")),
    (
        "option the CLI does not have",
        lambda ds: _first(ds, "SparkApplication")["spec"]["arguments"].append("--no-such-option"),
    ),
    (
        "env the CLI does not read",
        lambda ds: _first(ds, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"].append(
            {"name": "ELRWATCH_READY_MAX_AGE", "value": "1"}
        ),
    ),
    (
        "dashboard ConfigMap drift",
        lambda ds: next(d for d in ds if d["kind"] == "ConfigMap")["data"].__setitem__("elrwatch.json", "{}"),
    ),
]

SECRETISH = ("password", "passwd", "secret", "token", "jaas", "keystore", "truststore")


def strict_schema(schema: Any) -> Any:
    """Reject unknown fields like the API server's strict field validation (CRD schemas only prune them)."""
    if isinstance(schema, dict):
        out = {k: strict_schema(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict_schema(v) for v in schema]
    return schema


def load_crd_schemas() -> dict[tuple[str, str], dict]:
    schemas = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = strict_schema(version["schema"]["openAPIV3Schema"])
            # metadata is validated by the API server, not by the CRD schema: check the basics here
            schema.setdefault("properties", {})["metadata"] = {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                    "namespace": {"type": "string"},
                },
                "additionalProperties": False,
            }
            schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


def helm_template(helm: str, args: list[str], kube_version: str) -> subprocess.CompletedProcess:
    cmd = [helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version, *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def pod_specs(doc: dict) -> list[tuple[str, dict]]:
    """(where, pod-like spec) pairs: Deployment pod templates and SparkApplication driver/executor."""
    if doc["kind"] == "Deployment":
        return [("pod", doc["spec"]["template"]["spec"])]
    if doc["kind"] == "SparkApplication":
        return [(role, doc["spec"][role]) for role in ("driver", "executor")]
    return []


def check_contracts(docs: list[dict], problems: list[str]) -> None:
    by_kind: dict[str, list[dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)

    # PrometheusRule == canonical rules file (modulo the runbook base URL and additional labels)
    canonical = yaml.safe_load(RULES.read_text())
    for pr in by_kind.get("PrometheusRule", []):
        rendered = pr["spec"]["groups"]
        if [g["name"] for g in rendered] != [g["name"] for g in canonical["groups"]]:
            problems.append("PrometheusRule groups differ from alerts/elrwatch-rules.yaml")
            continue
        for g_r, g_c in zip(rendered, canonical["groups"], strict=True):
            for r_r, r_c in zip(g_r["rules"], g_c["rules"], strict=True):
                name = r_c.get("alert") or r_c.get("record")
                if r_r.get("expr") != r_c.get("expr") or r_r.get("for") != r_c.get("for"):
                    problems.append(f"PrometheusRule {name}: expr/for differ from the rules file")
                for k, v in r_c.get("labels", {}).items():
                    if r_r.get("labels", {}).get(k) != v:
                        problems.append(f"PrometheusRule {name}: label {k} differs from the rules file")
                for k in r_c.get("annotations", {}):
                    if k not in r_r.get("annotations", {}):
                        problems.append(f"PrometheusRule {name}: annotation {k} missing")
        if len(canonical["groups"]) != len(rendered) or sum(len(g["rules"]) for g in rendered) != sum(
            len(g["rules"]) for g in canonical["groups"]
        ):
            problems.append("PrometheusRule rule count differs from the rules file")

    for cm in by_kind.get("ConfigMap", []):
        is_dashboard = cm["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
        if is_dashboard and json.loads(cm["data"]["elrwatch.json"]) != json.loads(DASHBOARD.read_text()):
            problems.append("dashboard ConfigMap content differs from dashboards/elrwatch.json")
        for key in cm.get("data") or {}:
            if any(s in key.lower() for s in SECRETISH):
                problems.append(f"ConfigMap {cm['metadata']['name']} has a secret-looking key {key!r}")

    # security: non-root, read-only root fs, no privilege escalation; secret env only from secretKeyRef
    for d in docs:
        for where, spec in pod_specs(d):
            psc = spec.get("securityContext") or spec.get("podSecurityContext") or {}
            if not psc.get("runAsNonRoot"):
                problems.append(f"{d['kind']} {d['metadata']['name']} {where}: runAsNonRoot not set")
            containers = spec.get("containers", [spec]) if d["kind"] == "Deployment" else [spec]
            for c in containers:
                sc = c.get("securityContext", {})
                name = c.get("name", where)
                if sc.get("readOnlyRootFilesystem") is not True or sc.get("allowPrivilegeEscalation") is not False:
                    problems.append(f"{d['kind']} {d['metadata']['name']}/{name}: not read-only / may escalate")
                if "ALL" not in sc.get("capabilities", {}).get("drop", []):
                    problems.append(f"{d['kind']} {d['metadata']['name']}/{name}: capabilities not dropped")
                mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
                if "/tmp" not in mounts:
                    problems.append(f"{d['kind']} {d['metadata']['name']}/{name}: no writable /tmp")
                for env in c.get("env", []):
                    secretish = any(s in env["name"].lower() for s in ("password", "token", "username"))
                    from_secret = "secretKeyRef" in env.get("valueFrom", {})
                    if secretish and not env["name"].endswith("_FILE") and not from_secret:
                        problems.append(f"{d['metadata']['name']}/{name}: env {env['name']} not from a Secret")
                    if env["name"].endswith("_FILE") and not any(
                        env.get("value", "").startswith(m.rstrip("/") + "/") for m in mounts
                    ):
                        problems.append(f"{d['metadata']['name']}/{name}: {env['name']} is not on a mounted volume")
                    if env["name"] == "ELRWATCH_STORE" and "value" in env and "@" in env["value"]:
                        problems.append(f"{d['metadata']['name']}/{name}: store URL with credentials in plain env")

    # every Service selects pods that exist (Deployment template labels or SparkApplication driver labels)
    pod_labels = []
    for d in docs:
        if d["kind"] == "Deployment":
            pod_labels.append(d["spec"]["template"]["metadata"]["labels"])
            sel = d["spec"]["selector"]["matchLabels"]
            if not sel.items() <= d["spec"]["template"]["metadata"]["labels"].items():
                problems.append(f"Deployment {d['metadata']['name']}: selector does not match its template")
        if d["kind"] == "SparkApplication":
            pod_labels.append(d["spec"]["driver"].get("labels", {}))
    for svc in by_kind.get("Service", []):
        sel = svc["spec"]["selector"]
        if not any(sel.items() <= labels.items() for labels in pod_labels):
            problems.append(f"Service {svc['metadata']['name']} selects no pod")
    services = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}
    for sm in by_kind.get("ServiceMonitor", []):
        sel = sm["spec"]["selector"]["matchLabels"]
        matched = [s for s in services.values() if sel.items() <= s["metadata"].get("labels", {}).items()]
        if len(matched) != 1:
            problems.append(f"ServiceMonitor {sm['metadata']['name']} selects {len(matched)} Services (want 1)")
        elif {e["port"] for e in sm["spec"]["endpoints"]} - {p["name"] for p in matched[0]["spec"]["ports"]}:
            problems.append(f"ServiceMonitor {sm['metadata']['name']}: endpoint port not on the Service")
        comps = {
            r.get("replacement")
            for e in sm["spec"]["endpoints"]
            for r in e.get("relabelings", [])
            if r.get("targetLabel") == "elrwatch_component"
        }
        if comps not in ({"stream"}, {"api"}):
            problems.append(f"ServiceMonitor {sm['metadata']['name']}: no elrwatch_component relabeling")


# Environment variables the chart sets that are read by the job/runtime rather than by a CLI option (none: every
# ELRWATCH_* variable the chart sets must be an option's variable).
NON_CLI_ENV: set[str] = set()


def cli_contract() -> dict[str, tuple[set[str], set[str]]]:
    """Options and env vars of the real `elrwatch stream` / `elrwatch api` commands (typer → click)."""
    import typer.main

    from elrwatch.cli import app

    group = typer.main.get_command(app)
    out = {}
    for name in ("stream", "api", "bridge", "agent"):
        command = group.commands[name]  # type: ignore[attr-defined]
        opts = {o for p in command.params for o in (*p.opts, *getattr(p, "secondary_opts", []))}
        envs = {e for p in command.params for e in ([p.envvar] if isinstance(p.envvar, str) else p.envvar or [])}
        out[name] = (opts, envs)
    return out


def check_cli(docs: list[dict], contract: dict[str, tuple[set[str], set[str]]], problems: list[str]) -> None:
    """Every --option the chart passes and every ELRWATCH_* env it sets exists on the command it runs."""
    runs = []
    for d in docs:
        if d["kind"] == "Deployment":
            for c in d["spec"]["template"]["spec"]["containers"]:
                args = c.get("args", [])
                if args[:1] == ["elrwatch"] and len(args) > 1:
                    runs.append((f"{d['metadata']['name']}/{c['name']}", args[1], args[2:], c.get("env", [])))
        if d["kind"] == "SparkApplication":
            args = d["spec"].get("arguments", [])
            runs.append((d["metadata"]["name"], args[0] if args else "?", args[1:], d["spec"]["driver"].get("env", [])))
    for where, command, args, env in runs:
        if command not in contract:
            problems.append(f"{where}: runs unknown command elrwatch {command}")
            continue
        opts, envs = contract[command]
        for arg in args:
            if arg.startswith("--") and arg.split("=", 1)[0] not in opts:
                problems.append(f"{where}: elrwatch {command} has no option {arg}")
        for e in env:
            if e["name"].startswith("ELRWATCH_") and e["name"] not in envs | NON_CLI_ENV:
                problems.append(f"{where}: elrwatch {command} reads no env {e['name']}")


def validate_docs(docs: list[dict], crd_schemas: dict, kube_version: str, problems: list[str]) -> None:
    for d in docs:
        key = (d.get("apiVersion", ""), d.get("kind", ""))
        label = f"{d.get('kind')} {d.get('metadata', {}).get('name')}"
        if key in crd_schemas:
            validator = jsonschema.Draft7Validator(crd_schemas[key])
            for err in sorted(validator.iter_errors(d), key=lambda e: list(e.absolute_path)):
                path = "/".join(str(p) for p in err.absolute_path)
                problems.append(f"{label}: {path}: {err.message[:300]}")
        elif key[0].endswith(("monitoring.coreos.com/v1", "sparkoperator.k8s.io/v1beta2")):
            problems.append(f"{label}: no CRD schema for {key}")
        else:
            try:
                kubernetes_validate.validate(d, kube_version, strict=True)
            except kubernetes_validate.ValidationError as exc:  # carries the jsonschema error's fields
                path = "/".join(str(p) for p in exc.absolute_path)
                problems.append(f"{label}: {path}: {exc.message[:300]}")
            except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.VersionNotSupportedError) as exc:
                problems.append(f"{label}: {exc.message}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--helm",
        default=str(ROOT / ".tools" / "helm" / "helm"),
        help="helm binary (make test-helm fetches it)",
    )
    parser.add_argument("--kube-version", default="1.35.0", help="Kubernetes version to render and validate for")
    args = parser.parse_args()

    crd_schemas = load_crd_schemas()
    contract = cli_contract()
    passed = failed = 0
    for name, helm_args, must, must_not in SCENARIOS:
        problems: list[str] = []
        res = helm_template(args.helm, helm_args, args.kube_version)
        if res.returncode != 0:
            problems.append(f"helm template failed: {res.stderr.strip()[:1000]}")
            docs = []
        else:
            docs = [d for d in yaml.safe_load_all(res.stdout) if d]
        kinds = {d["kind"] for d in docs}
        if docs:
            for k in sorted(must - kinds):
                problems.append(f"expected a {k}")
            for k in sorted(must_not & kinds):
                problems.append(f"unexpected {k}")
            validate_docs(copy.deepcopy(docs), crd_schemas, args.kube_version, problems)
            check_contracts(docs, problems)
            check_cli(docs, contract, problems)
            check_bridge(name, docs, problems)
        status = "ok  " if not problems else "FAIL"
        print(f"{status} render+validate [{name}]: {len(docs)} manifests ({', '.join(sorted(kinds))})")
        for p in problems:
            print(f"       {p}")
        passed, failed = (passed + 1, failed) if not problems else (passed, failed + 1)

    for example, pool, runs in SIDECAR_EXAMPLES:
        problems = []
        try:
            check_sidecar_example(contract, problems, example, pool, runs)
        except (KeyError, IndexError, yaml.YAMLError, kubernetes_validate.ValidationError) as exc:
            problems.append(f"{type(exc).__name__}: {str(exc)[:300]}")
        print(f"{'ok  ' if not problems else 'FAIL'} sidecar example [{example.name}]")
        for p in problems:
            print(f"       {p}")
        passed, failed = (passed + 1, failed) if not problems else (passed, failed + 1)

    problems = []
    check_alert_overrides(args.helm, args.kube_version, problems)
    print(f"{'ok  ' if not problems else 'FAIL'} alert for:/thresholds from values")
    for p in problems:
        print(f"       {p}")
    passed, failed = (passed + 1, failed) if not problems else (passed, failed + 1)

    for name, helm_args in MUST_FAIL:
        res = helm_template(args.helm, helm_args, args.kube_version)
        ok = res.returncode != 0
        print(f"{'ok  ' if ok else 'FAIL'} rejects [{name}]" + ("" if ok else ": helm template succeeded"))
        passed, failed = (passed + 1, failed) if ok else (passed, failed + 1)

    res = helm_template(args.helm, ["--set", "streaming.mode=sparkApplication"], args.kube_version)
    base = [d for d in yaml.safe_load_all(res.stdout) if d] if res.returncode == 0 else []
    for name, mutate in MUTATIONS:
        docs = copy.deepcopy(base)
        problems = []
        if docs:
            mutate(docs)
            validate_docs(docs, crd_schemas, args.kube_version, problems)
            check_contracts(docs, problems)
            check_cli(docs, contract, problems)
        ok = bool(problems)
        print(f"{'ok  ' if ok else 'FAIL'} detects [{name}]" + (f": {problems[0][:120]}" if ok else ": not reported"))
        passed, failed = (passed + 1, failed) if ok else (passed, failed + 1)

    print(f"helm: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
