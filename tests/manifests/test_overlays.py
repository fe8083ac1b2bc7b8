"""Every manifest and every overlay, rendered with real kustomize, is accepted by the
checker; and the overlays mean what they say (mode, scaling, GPU, canary)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from deploycheck import Checker
from deploycheck._canary import canary_predictor
from predictor._config import build_parser
from tests.support.manifests import (
    OVERLAYS,
    REQUIRED_OVERLAYS,
    ROOT,
    load_all,
    overlay_names,
    runtime_doc,
)


def isvc_of(text: str) -> dict[str, Any]:
    docs = [d for d in load_all(text) if d["kind"] == "InferenceService"]
    assert len(docs) == 1
    return docs[0]


def components(isvc: dict[str, Any]) -> list[dict[str, Any]]:
    """The stable predictor and each canary's predictor as KServe runs it (merged over
    the stable one by buildCanaryPredictor)."""
    stable = isvc["spec"]["predictor"]
    return [stable] + [canary_predictor(stable, c) for c in isvc["spec"].get("canary", [])]


def test_every_promised_overlay_exists() -> None:
    assert set(overlay_names()) >= REQUIRED_OVERLAYS


@pytest.mark.parametrize("overlay", overlay_names())
def test_overlay_renders_and_validates(
    overlay: str, rendered: dict[str, str], checker: Checker
) -> None:
    problems, count = checker.check_text(str(OVERLAYS / overlay), rendered[overlay])
    assert [str(p) for p in problems] == []
    assert count >= 1
    isvc = isvc_of(rendered[overlay])
    assert isvc["spec"]["predictor"]["model"]["runtime"] == runtime_doc()["metadata"]["name"]


def test_cluster_manifests_validate(checker: Checker) -> None:
    report = checker.check_paths([ROOT / "manifests"])
    assert [str(p) for p in report.problems] == []
    kinds = sorted(d["kind"] for s in report.sources for d in load_all(Path(s).read_text()))
    assert kinds == sorted(
        [
            "ClusterServingRuntime",
            "ConfigMap",  # 50-grafana-dashboards.yaml: the Serving dashboard
            "ConfigMap",  # and the Rollouts dashboard
            "Job",
            "Job",  # templates/profile-job.yaml
            "Namespace",
            "NetworkPolicy",  # templates/profile-job.yaml: no ingress
            "NetworkPolicy",  # templates/rollout-job.yaml: its metrics port only
            "PodMonitor",
            "PodMonitor",  # the rollout Jobs'
            "PrometheusRule",
            "Role",
            "RoleBinding",
            "Secret",
            "Secret",
            "Secret",
            "Secret",
            "Secret",  # templates/tenants-secret.yaml
            "ServiceAccount",
            "ServiceAccount",
        ]
    )


def test_base_and_overlays_together_validate(checker: Checker) -> None:
    report = checker.check_paths([ROOT / "kustomize"])
    assert report.ok, [str(p) for p in report.problems]
    # base, the mirror-primary Service the mesh-mirror overlays share, and the overlays
    assert len(report.sources) == 2 + len(overlay_names())


def effective_args(isvc: dict[str, Any], component: dict[str, Any] | None = None) -> list[str]:
    """What the predictor process receives: the runtime's args, then the model's."""
    model = (component or isvc["spec"]["predictor"])["model"]
    return [*runtime_doc()["spec"]["containers"][0]["args"], *model.get("args", [])]


# Queue mode's flags (issue 15), the fixed contract between kustomize/overlays/queue
# and predictor/. Until the predictor's parser declares them they are checked against
# the contract here; once it does, it checks them like every other flag.
QUEUE_FLAGS = {"--queue_url": re.compile(r"^redis://[a-z0-9.-]+:\d+/\d+$"),
               "--queue_role": re.compile(r"^(frontend|worker)$")}


def parse(args: list[str]) -> dict[str, Any]:
    namespace, unknown = build_parser({}).parse_known_args(args)
    pending = {}
    for arg in unknown:
        flag, _, value = arg.partition("=")
        if flag in QUEUE_FLAGS and QUEUE_FLAGS[flag].match(value):
            pending[flag.removeprefix("--")] = value
    assert [a for a in unknown if a.partition("=")[0] not in QUEUE_FLAGS] == [], (
        f"flags the predictor does not know: {unknown}"
    )
    assert len(pending) == len(unknown), f"queue flags off the contract: {unknown}"
    return {**vars(namespace), **pending}


@pytest.mark.parametrize("overlay", overlay_names())
def test_args_are_predictor_flags_and_scale_target_follows_batch_size(
    overlay: str, rendered: dict[str, str]
) -> None:
    isvc = isvc_of(rendered[overlay])
    for component in components(isvc):
        flags = parse(effective_args(isvc, component))
        per_replica = 2 * flags["max_batch_size"]
        if "scaleTarget" in component:
            assert component["scaleMetric"] == "concurrency"
            assert component["scaleTarget"] == per_replica
        for metric in component.get("autoScaling", {}).get("metrics", []):
            assert int(metric["external"]["target"]["value"]) == per_replica


def test_knative_overlays(rendered: dict[str, str]) -> None:
    for overlay in ("cpu", "gpu", "canary", "scale-to-zero"):
        isvc = isvc_of(rendered[overlay])
        annotations = isvc["metadata"]["annotations"]
        assert annotations["serving.kserve.io/deploymentMode"] == "Knative"
        assert annotations["serving.kserve.io/enable-tag-routing"] == "true"
        assert isvc["spec"]["predictor"]["scaleMetric"] == "concurrency"
    assert isvc_of(rendered["canary"])["spec"]["predictor"]["canaryTrafficPercent"] == 10
    assert isvc_of(rendered["scale-to-zero"])["spec"]["predictor"]["minReplicas"] == 0
    assert isvc_of(rendered["cpu"])["spec"]["predictor"]["minReplicas"] >= 1


def test_gpu_overlay(rendered: dict[str, str]) -> None:
    predictor = isvc_of(rendered["gpu"])["spec"]["predictor"]
    resources = predictor["model"]["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "1"
    # Knative refuses both as shipped: the GPU request places the pod (and, through the
    # ExtendedResourceToleration admission plugin, tolerates the GPU taint).
    assert "tolerations" not in predictor and "nodeSelector" not in predictor
    flags = parse(effective_args(isvc_of(rendered["gpu"])))
    assert flags["device"] == "cuda" and flags["dtype"] in ("float16", "bfloat16")


def test_standard_overlays(rendered: dict[str, str]) -> None:
    for overlay, scaler in (("standard-keda", "keda"), ("standard-canary", "none")):
        isvc = isvc_of(rendered[overlay])
        annotations = isvc["metadata"]["annotations"]
        assert annotations["serving.kserve.io/deploymentMode"] == "Standard"
        assert annotations["serving.kserve.io/autoscalerClass"] == scaler
        assert "serving.kserve.io/enable-tag-routing" not in annotations
        predictor = isvc["spec"]["predictor"]
        assert "scaleMetric" not in predictor and "canaryTrafficPercent" not in predictor
        if scaler == "none":  # a KEDA-scaled canary cannot be built (rollout start says why)
            assert "autoScaling" not in predictor
            continue
        [metric] = predictor["autoScaling"]["metrics"]
        assert metric["external"]["metric"]["backend"] == "prometheus"
        assert "modelctl_inflight_requests" in metric["external"]["metric"]["query"]
    isvc = isvc_of(rendered["standard-canary"])
    canary = isvc["spec"]["canary"]
    assert [c["trafficPercent"] for c in canary] == [10]
    assert "args" not in canary[0]["predictor"]["model"]  # the stable's, merged over
    # Fixed replicas, within the stable's; everything else comes from the stable.
    entry = canary[0]["predictor"]
    assert not {"maxReplicas", "scaleTarget", "scaleMetric", "autoScaling"} & set(entry)
    assert entry["minReplicas"] <= isvc["spec"]["predictor"]["minReplicas"]
    merged = canary_predictor(isvc["spec"]["predictor"], canary[0])
    assert merged["serviceAccountName"] == isvc["spec"]["predictor"]["serviceAccountName"]
    assert merged["model"]["runtime"] == runtime_doc()["metadata"]["name"]
    # The canary runs the stable's flags (only its storageUri differs).
    assert parse(effective_args(isvc, merged)) == parse(effective_args(isvc))
    assert (
        isvc_of(rendered["standard-canary"])["spec"]["predictor"]["model"]["storageUri"]
        == "modelctl-registry://MODEL@stable"
    )


def test_grace_period_covers_the_drain(rendered: dict[str, str]) -> None:
    drain_s = parse(effective_args(isvc_of(rendered["cpu"])))["drain_timeout_s"]
    for overlay in overlay_names():
        isvc = isvc_of(rendered[overlay])
        for component in components(isvc):
            assert component["terminationGracePeriodSeconds"] > drain_s
