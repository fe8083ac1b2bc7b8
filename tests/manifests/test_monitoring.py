"""The PodMonitor and PrometheusRule: real promtool checks the rules and runs them on
synthetic series; every metric they (and the KEDA queries) name is one the predictor
exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from predictor._metrics import PredictorMetrics
from tests.support.manifests import FIXTURES, ROOT, load_all, runtime_doc

MONITORING = ROOT / "manifests" / "40-monitoring.yaml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool (Debian package prometheus, `make setup`) is not installed"
)


def monitoring() -> dict[str, dict[str, Any]]:
    """The predictor's PodMonitor and the PrometheusRule, by kind (the rollout Jobs'
    PodMonitor has a test of its own)."""
    return {d["kind"]: d for d in load_all(MONITORING.read_text())
            if d["metadata"]["name"] != "modelctl-rollout"}


def test_the_rollout_jobs_podmonitor_keeps_the_rollouts_own_labels() -> None:
    [monitor] = [d for d in load_all(MONITORING.read_text())
                 if d["metadata"]["name"] == "modelctl-rollout"]
    job = next(d for d in load_all((ROOT / "manifests" / "templates" / "rollout-job.yaml")
                                   .read_text()) if d["kind"] == "Job")
    pod = job["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["honorLabels"] is True
    [container] = pod["spec"]["containers"]
    port = next(p for p in container["ports"] if p["name"] == endpoint["port"])
    assert f"--metrics-port={port['containerPort']}" in container["args"]


def exported_series() -> set[str]:
    """Sample names of the predictor's metrics, from its own definitions."""
    registry = CollectorRegistry()
    PredictorMetrics.create("m", "1", "stable", registry=registry)
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    return {f.name + s for f in registry.collect() for s in suffixes[f.type]}


def test_podmonitor_adds_the_labels_the_analysis_selects_on() -> None:
    [endpoint] = monitoring()["PodMonitor"]["spec"]["podMetricsEndpoints"]
    targets = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert targets["namespace"] == ["__meta_kubernetes_namespace"]
    assert targets["isvc"] == ["__meta_kubernetes_pod_label_serving_kserve_io_inferenceservice"]
    assert targets["revision"] == ["__meta_kubernetes_pod_label_serving_knative_dev_revision"]
    runtime = runtime_doc()
    assert endpoint["portNumber"] == runtime["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert endpoint["path"] == runtime["spec"]["annotations"]["prometheus.kserve.io/path"]
    selector = monitoring()["PodMonitor"]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= runtime["spec"]["labels"].items()


def test_rules_and_keda_queries_name_exported_metrics(rendered: dict[str, str]) -> None:
    exported = exported_series()
    exprs = [
        r["expr"] for g in monitoring()["PrometheusRule"]["spec"]["groups"] for r in g["rules"]
    ]
    exprs += re.findall(r"query: (.+)", "\n".join(rendered.values()))
    named = {m for e in exprs for m in re.findall(r"\bmodelctl_[a-z_]+\b", e)}
    assert named and named <= exported, named - exported


def test_queue_saturation_alert_uses_the_runtimes_queue_size() -> None:
    rules = {
        r.get("alert"): r
        for g in monitoring()["PrometheusRule"]["spec"]["groups"]
        for r in g["rules"]
    }
    [size] = re.findall(r"/ (\d+) >", rules["ModelctlQueueSaturated"]["expr"])
    args = runtime_doc()["spec"]["containers"][0]["args"]
    assert f"--max_queue_size={size}" in args


def rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": monitoring()["PrometheusRule"]["spec"]["groups"]}))
    return path


PROMTOOL_TESTS = FIXTURES / "promtool" / "tests.yaml"


@needs_promtool
def test_promtool_checks_and_runs_the_rules(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    rules = rules_file(tmp_path)
    check = subprocess.run(
        [PROMTOOL, "check", "rules", str(rules)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    shutil.copy(PROMTOOL_TESTS, tmp_path / "tests.yaml")
    run = subprocess.run(
        [PROMTOOL, "test", "rules", "tests.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
