"""Every PromQL expression of the monitoring component (the Grafana dashboard and the PrometheusRule) parses,
and names only metrics the operator or the trainer export, with labels those series have once scraped.

The exported metrics are read from the code (the operator's :class:`~ttj.controller.metrics.Metrics` and
the trainer's metrics module), the labels scraping adds from the ServiceMonitor and PodMonitor; the
expressions are parsed with promql-parser and walked: selectors, ``by``/``without``, ``on``/``ignoring``,
and the ``$labels`` the alerts' texts use.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

promql = pytest.importorskip("promql_parser")

COMPONENT = Path(__file__).resolve().parents[2] / "manifests" / "components" / "monitoring"

#: Labels Prometheus puts on every series of a target it finds through a ServiceMonitor or PodMonitor.
TARGET_LABELS = frozenset({"namespace", "pod", "container", "endpoint", "instance", "job", "service"})
#: ``up`` and the other series Prometheus writes about each scrape.
SCRAPE_SERIES = ("up", "scrape_duration_seconds", "scrape_samples_scraped")
#: Grafana's variables, as a query sends them.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$namespace": "ns", "$job": "train"}

SET_OPERATORS = {"and", "or", "unless"}
COMPARISONS = {"==", "!=", ">", "<", ">=", "<="}


@dataclass(frozen=True)
class Exported:
    """A metric as scraped: its series names and labels."""

    name: str
    kind: str  # counter | gauge | histogram | info
    labels: frozenset[str]

    def series(self) -> dict[str, frozenset[str]]:
        if self.kind == "counter":
            return {f"{self.name}_total": self.labels}
        if self.kind == "histogram":
            return {
                f"{self.name}_bucket": self.labels | {"le"},
                f"{self.name}_sum": self.labels,
                f"{self.name}_count": self.labels,
            }
        if self.kind == "info":
            return {f"{self.name}_info": self.labels}
        return {self.name: self.labels}


def _exported(collectors: Iterator[Any]) -> list[tuple[str, str, frozenset[str]]]:
    from prometheus_client.metrics import MetricWrapperBase

    return [
        (c._name, c._type, frozenset(c._labelnames))  # prometheus_client keeps both only privately
        for c in collectors
        if isinstance(c, MetricWrapperBase)
    ]


def relabelled(manifest: str) -> frozenset[str]:
    """The target labels a monitor's relabelings write."""
    spec = yaml.safe_load((COMPONENT / manifest).read_text())["spec"]
    endpoints = spec.get("endpoints") or spec.get("podMetricsEndpoints") or []
    return frozenset(r["targetLabel"] for e in endpoints for r in e.get("relabelings") or [] if "targetLabel" in r)


@pytest.fixture(scope="module")
def series() -> dict[str, frozenset[str]]:
    """Series name → the labels it has in Prometheus."""
    from prometheus_client import CollectorRegistry

    import ttj_trainer.metrics as trainer
    from ttj.controller.metrics import Metrics

    operator = Metrics(CollectorRegistry())
    honoured = yaml.safe_load((COMPONENT / "servicemonitor.yaml").read_text())["spec"]["endpoints"][0]
    assert honoured.get("honorLabels") is True, "the operator's namespace/job labels name the job: keep them"
    trainer_target = TARGET_LABELS | relabelled("podmonitor.yaml")
    found: dict[str, frozenset[str]] = {}
    for name, kind, labels in _exported(iter(vars(operator).values())):
        found |= Exported(name, kind, labels | TARGET_LABELS).series()
    for name, kind, labels in _exported(iter(vars(trainer).values())):
        found |= Exported(name, kind, labels | trainer_target).series()
    for name in SCRAPE_SERIES:
        found[name] = trainer_target | TARGET_LABELS
    return found


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, expression) of every query of the dashboard: panels, annotations; variables apart."""
    board = json.loads((COMPONENT / "dashboards" / "ttj.json").read_text())
    out: list[tuple[str, str]] = []

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels") or [])

    for panel in panels(board["panels"]):
        out += [(f"panel {panel['title']!r}", t["expr"]) for t in panel.get("targets") or []]
    out += [(f"annotation {a['name']!r}", a["expr"]) for a in board["annotations"]["list"] if "expr" in a]
    return out


def rule_queries() -> list[tuple[str, str, dict[str, Any]]]:
    rule = yaml.safe_load((COMPONENT / "prometheusrule.yaml").read_text())
    return [(r.get("alert") or r["record"], r["expr"], r) for g in rule["spec"]["groups"] for r in g["rules"]]


def grafana(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"a Grafana variable this test does not know: {expr}"
    return expr


class Checker:
    """Walks one parsed expression: every selector and label it names must exist."""

    def __init__(self, series: dict[str, frozenset[str]], where: str) -> None:
        self.series, self.where, self.metrics = series, where, 0

    def fail(self, why: str) -> None:
        raise AssertionError(f"{self.where}: {why}")

    def selector(self, node: Any) -> frozenset[str]:
        name = node.name or next((m.value for m in node.matchers.matchers if m.name == "__name__"), None)
        if name not in self.series:
            self.fail(f"{name!r} is no metric the operator or the trainer exports")
        labels = self.series[name]
        for matcher in node.matchers.matchers:
            if matcher.name != "__name__" and matcher.name not in labels:
                self.fail(f"{name} has no label {matcher.name!r} (it has {sorted(labels)})")
        self.metrics += 1
        return labels

    def labels(self, node: Any) -> frozenset[str]:
        """The labels of the series ``node`` yields (checking everything under it)."""
        kind = type(node).__name__
        if kind == "VectorSelector":
            return self.selector(node)
        if kind == "MatrixSelector":
            return self.selector(node.vector_selector)
        if kind in ("ParenExpr", "UnaryExpr", "SubqueryExpr"):
            return self.labels(node.expr)
        if kind in ("NumberLiteral", "StringLiteral"):
            return frozenset()
        if kind == "Call":
            return self.call(node)
        if kind == "AggregateExpr":
            inner = self.labels(node.expr)
            if node.param is not None:
                self.labels(node.param)
            if node.modifier is None:
                return frozenset()
            named = frozenset(node.modifier.labels)
            if "Without" in str(node.modifier.type):
                return inner - named
            if not named <= inner:
                self.fail(f"by ({', '.join(sorted(named - inner))}): no such label under {node.op}")
            return named
        if kind == "BinaryExpr":
            return self.binary(node)
        self.fail(f"an expression this test does not understand: {kind}")
        return frozenset()

    def call(self, node: Any) -> frozenset[str]:
        args = [self.labels(arg) for arg in node.args]
        name = node.func.name
        if name == "absent":  # the labels of its selector's equality matchers
            selector = node.args[0]
            while type(selector).__name__ in ("ParenExpr", "BinaryExpr"):
                selector = selector.expr if type(selector).__name__ == "ParenExpr" else selector.lhs
            return frozenset(m.name for m in selector.matchers.matchers if str(m.op).endswith("Equal"))
        if name == "histogram_quantile":
            if "le" not in args[1]:
                self.fail("histogram_quantile over series without le")
            return args[1] - {"le"}
        return next((labels for labels in args if labels), frozenset())

    def binary(self, node: Any) -> frozenset[str]:
        lhs, rhs = self.labels(node.lhs), self.labels(node.rhs)
        op = str(node.op)
        matching = node.modifier.matching if node.modifier is not None else None
        if matching is not None:
            named = frozenset(matching.labels)
            for side, labels in (("left", lhs), ("right", rhs)):
                if labels and not named <= labels:
                    self.fail(f"{op} on ({', '.join(sorted(named - labels))}): no such label on its {side}")
        if not lhs:
            return rhs
        if not rhs or op in SET_OPERATORS or (op in COMPARISONS and not node.modifier):
            return lhs
        if matching is not None and "Include" in str(matching.type):
            return frozenset(matching.labels)
        if matching is not None:
            return lhs - frozenset(matching.labels)
        return lhs & rhs


def check(series: dict[str, frozenset[str]], where: str, expr: str) -> frozenset[str]:
    try:
        tree = promql.parse(expr)
    except Exception as exc:
        raise AssertionError(f"{where}: does not parse: {exc}\n{expr}") from None
    checker = Checker(series, where)
    labels = checker.labels(tree)
    assert checker.metrics, f"{where}: names no metric"
    return labels


@pytest.mark.parametrize(("where", "expr"), dashboard_queries())
def test_dashboard_query(series: dict[str, frozenset[str]], where: str, expr: str) -> None:
    check(series, where, grafana(expr))


@pytest.mark.parametrize(("alert", "expr", "rule"), rule_queries(), ids=[a for a, _, _ in rule_queries()])
def test_alert(series: dict[str, frozenset[str]], alert: str, expr: str, rule: dict[str, Any]) -> None:
    labels = check(series, alert, expr)
    text = " ".join(str(v) for v in (rule.get("annotations") or {}).values())
    used = set(re.findall(r"\$labels\.(\w+)", text))
    assert used <= labels, f"{alert}: its text uses $labels {sorted(used - labels)} the expression does not keep"
    assert rule.get("labels", {}).get("severity") in ("warning", "critical")


def test_dashboard_variables_name_real_labels(series: dict[str, frozenset[str]]) -> None:
    board = json.loads((COMPONENT / "dashboards" / "ttj.json").read_text())
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        found = re.fullmatch(r"label_values\((?P<selector>.+),\s*(?P<label>\w+)\)", query)
        assert found, f"variable {variable['name']}: {query}"
        labels = check(series, f"variable {variable['name']}", grafana(found["selector"]))
        assert found["label"] in labels


def test_the_component_covers_what_the_issue_asks() -> None:
    """The alerts and panels named in docs/monitoring.md exist."""
    alerts = {alert for alert, _, _ in rule_queries()}
    assert {
        "TTJJobStalled",
        "TTJBudgetNearlySpent",
        "TTJRecoverySlow",
        "TTJChiefElectionsFlapping",
        "TTJOperatorDown",
        "TTJDeadlineAtRisk",
    } <= alerts
    titles = {where.split("'")[1] for where, _ in dashboard_queries() if where.startswith("panel")}
    assert {"Workers", "Preemptions and replacements", "Chief elections", "Global step rate", "Cost"} <= titles
    assert {"Savings net of preemptions", "Evaluation"} <= titles
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    listed = set(kustomization["resources"]) | {
        f for generator in kustomization.get("configMapGenerator") or [] for f in generator["files"]
    }
    assert listed == {"servicemonitor.yaml", "podmonitor.yaml", "prometheusrule.yaml", "dashboards/ttj.json"}


def test_a_wrong_metric_or_label_is_caught(series: dict[str, frozenset[str]]) -> None:
    """The checker itself: misspelt metrics, labels a series lacks, bad groupings and bad syntax fail."""
    for bad in (
        "ttj_preemption_total",
        'ttj_active_workers{slot="1"}',
        "sum by (pod_role) (ttj_job_cost_usd)",
        "ttj_job_cost_usd / on (phase) ttj_job_budget_usd",
        "histogram_quantile(0.9, ttj_recovery_seconds_sum)",
        "rate(ttj_global_step[5m]",
    ):
        with pytest.raises(AssertionError):
            check(series, "bad", bad)
    check(series, "good", 'sum by (job) (ttj_trainer_steps_per_second{pod_role="worker", slot="0"})')


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_the_monitoring_overlay_builds() -> None:
    overlay = COMPONENT.parents[1] / "overlays" / "monitoring"
    built = subprocess.run(
        ["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, timeout=60, check=False
    )
    assert built.returncode == 0, built.stderr
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(built.stdout) if d}
    assert {("ServiceMonitor", "ttj-operator"), ("PodMonitor", "ttj-trainers"), ("PrometheusRule", "ttj")} <= set(docs)
    service = docs[("Service", "ttj-operator-metrics")]
    selector = docs[("ServiceMonitor", "ttj-operator")]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items(), "the ServiceMonitor finds the operator's Service"
    assert any(p["name"] == "metrics" for p in service["spec"]["ports"])
    dashboard = docs[("ConfigMap", "ttj-grafana-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["ttj.json"])["uid"] == "ttj-jobs"
    assert all(
        d["metadata"].get("namespace") == "ttj-system"
        for (kind, _), d in docs.items()
        if kind != "Namespace" and kind not in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding")
    )


def test_trainer_pods_name_the_port_the_pod_monitor_scrapes() -> None:
    from ttj.api.models import TransientTrainingJobSpec
    from ttj.planner.children import worker_pod
    from ttj_contract import METRICS_PORT

    job = {"metadata": {"name": "train", "namespace": "ns", "uid": "u"}}
    spec = TransientTrainingJobSpec.model_validate({"trainSteps": 10, "checkpoint": {"uri": "/ck"}})
    ports = worker_pod(job, spec, 0, 1)["spec"]["containers"][0]["ports"]
    monitor = yaml.safe_load((COMPONENT / "podmonitor.yaml").read_text())["spec"]["podMetricsEndpoints"][0]
    assert {"name": monitor["port"], "containerPort": METRICS_PORT} in ports
