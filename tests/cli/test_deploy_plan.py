"""``modelctl deploy render NAME@REF --overlay X --plan plan.json``, as users run it: the
real CLI in a subprocess, a real local registry, a plan written by ``capacity.PlanFile``,
real kustomize and the real offline validation. The rendered objects carry exactly the
plan's numbers; a plan for another version or mode, or a file that is no plan, is one
line on stderr and exit code 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capacity import Autoscaler, Knobs, PlanFile, Prediction, Replicas
from registry import Registry
from tests.manifests.test_cli import modelctl
from tests.support.manifests import load_all

KNOBS = Knobs(max_batch_size=24, max_batch_wait_ms=7.5, max_queue_size=300,
              request_timeout_ms=8000.0)
FLAGS = ["--max_batch_size=24", "--max_batch_wait_ms=7.5", "--max_queue_size=300",
         "--request_timeout_ms=8000"]
KNATIVE = Autoscaler(scale_target=48, target_utilization_percentage=70, activation_scale=2)
KEDA_QUEUE = Autoscaler(lag_per_worker=96, activation_lag=3)
TU, ACTIVATION = ("autoscaling.knative.dev/target-utilization-percentage",
                  "autoscaling.knative.dev/activation-scale")


def make_plan(mode: str = "in-process", *, version: int = 1, low: int = 2, high: int = 6,
              knobs: Knobs = KNOBS, autoscaler: Autoscaler = KNATIVE) -> dict[str, Any]:
    at = Prediction(rps=40.0, p50_ms=30.0, p99_ms=90.0, success_rate=0.999)
    return PlanFile(
        model="demo-embed", version=version, device="cpu", mode=mode,  # type: ignore[arg-type]
        slo_p99_ms=200.0, peak_rps=100.0, mean_rps=40.0, floor_ms=5.0, knobs=knobs,
        capacity_rps=50.0, utilisation=0.7,
        replicas=Replicas(for_peak=3, for_mean=2, spare=1, cold_start=1, min=low, max=high),
        autoscaler=autoscaler, mean=at, peak=at,
    ).to_json()


@pytest.fixture()
def registry(tmp_path: Path) -> str:
    """demo-embed 1 and 2 (stable = 1) on a local registry."""
    url = str(tmp_path / "registry")
    reg = Registry.open(url)
    for size in (1000, 2000):
        artifact = tmp_path / f"artifact-{size}"
        artifact.mkdir()
        (artifact / "model.safetensors").write_bytes(b"\0" * size)
        reg.push(artifact, "demo-embed", "feature-extraction",
                 alias="stable" if size == 1000 else None)
    return url


def render(registry: str, tmp_path: Path, overlay: str, plan: Any,
           ref: str = "demo-embed@1") -> tuple[int, list[dict[str, Any]], str]:
    path = tmp_path / "plan.json"
    path.write_text(plan if isinstance(plan, str) else json.dumps(plan))
    # --pvc: storageUris a pod can read, so the full validation runs and passes.
    done = modelctl("deploy", "render", ref, "-o", overlay, "--registry", registry,
                    "--pvc", "models", "--plan", str(path))
    return done.returncode, load_all(done.stdout) if done.returncode == 0 else [], done.stderr


def isvc(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == "InferenceService"]
    return found


def knob_args(args: list[str]) -> list[str]:
    return [a for a in args if a.split("=")[0] in {f.split("=")[0] for f in FLAGS}]


@pytest.mark.parametrize("overlay", ["cpu", "gpu"])
def test_knative_overlay_takes_the_plan(registry: str, tmp_path: Path, overlay: str) -> None:
    rc, docs, stderr = render(registry, tmp_path, overlay, make_plan())
    assert rc == 0, stderr
    doc = isvc(docs)
    predictor = doc["spec"]["predictor"]
    assert knob_args(predictor["model"]["args"]) == FLAGS  # gpu's --max_batch_size=64 replaced
    assert "--device=" + ("cpu" if overlay == "cpu" else "cuda") in predictor["model"]["args"]
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (2, 6)
    assert (predictor["scaleMetric"], predictor["scaleTarget"]) == ("concurrency", 48)
    annotations = doc["metadata"]["annotations"]
    assert annotations[TU] == "70"
    assert ACTIVATION not in annotations  # scale-to-zero is off: min 2
    assert "note:" not in stderr


def test_scale_to_zero_gets_the_activation_scale(registry: str, tmp_path: Path) -> None:
    rc, docs, stderr = render(registry, tmp_path, "scale-to-zero", make_plan(low=0, high=5))
    assert rc == 0, stderr
    doc = isvc(docs)
    predictor, annotations = doc["spec"]["predictor"], doc["metadata"]["annotations"]
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (0, 5)
    assert (annotations[TU], annotations[ACTIVATION]) == ("70", "2")
    # The overlay's own annotation stays as it rendered it.
    assert annotations["autoscaling.knative.dev/scale-to-zero-pod-retention-period"] == "10m"


def test_scale_to_zero_with_a_floor_says_so(registry: str, tmp_path: Path) -> None:
    rc, docs, stderr = render(registry, tmp_path, "scale-to-zero", make_plan(low=1))
    assert rc == 0, stderr
    assert isvc(docs)["spec"]["predictor"]["minReplicas"] == 1
    assert ACTIVATION not in isvc(docs)["metadata"]["annotations"]
    assert "turns the overlay's scale-to-zero off" in stderr


def test_standard_keda_gets_the_per_replica_threshold(registry: str, tmp_path: Path) -> None:
    rc, docs, stderr = render(registry, tmp_path, "standard-canary", make_plan(), "demo-embed@2")
    assert rc == 2 and "is for demo-embed@1, but demo-embed@2" in stderr  # the canary's version
    rc, docs, stderr = render(registry, tmp_path, "standard-keda", make_plan())
    assert rc == 0, stderr
    spec = isvc(docs)["spec"]
    predictor = spec["predictor"]
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (2, 6)
    assert "scaleTarget" not in predictor and "scaleMetric" not in predictor  # KEDA: none
    [metric] = predictor["autoScaling"]["metrics"]
    assert metric["external"]["target"] == {"type": "Value", "value": "33.6"}  # 48 x 70%
    assert knob_args(predictor["model"]["args"]) == FLAGS
    # The canary overlay runs a fixed pool (no KEDA: rollout start says why): the plan's
    # replicas and knobs, and no target to write.
    rc, docs, stderr = render(registry, tmp_path, "standard-canary", make_plan(version=2),
                              "demo-embed@2")
    assert rc == 0, stderr
    assert "autoscalerClass none runs minReplicas replicas" in stderr
    spec = isvc(docs)["spec"]
    assert (spec["predictor"]["minReplicas"], spec["predictor"]["maxReplicas"]) == (2, 6)
    assert "autoScaling" not in spec["predictor"]
    [canary] = spec["canary"]
    # No args of its own: KServe merges the entry over the stable, whose args carry them.
    assert "args" not in canary["predictor"]["model"]
    assert knob_args(spec["predictor"]["model"]["args"]) == FLAGS
    assert canary["predictor"]["minReplicas"] == 1  # the rollout's, untouched


def test_standard_overlays_without_a_target_field_say_so(registry: str, tmp_path: Path) -> None:
    rc, docs, stderr = render(registry, tmp_path, "shadow", make_plan())
    assert rc == 0, stderr
    predictor = isvc(docs)["spec"]["predictor"]
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (2, 6)
    assert "autoScaling" not in predictor and "scaleTarget" not in predictor
    assert TU not in isvc(docs)["metadata"]["annotations"]
    assert stderr.startswith("note: InferenceService demo-embed-shadow: autoscalerClass hpa")


@pytest.mark.parametrize("overlay", ["queue", "queue-external-redis"])
def test_queue_plan_goes_to_frontends_workers_and_keda(
    registry: str, tmp_path: Path, overlay: str
) -> None:
    rc, docs, stderr = render(registry, tmp_path, overlay,
                              make_plan("queue", low=0, high=5, autoscaler=KEDA_QUEUE))
    assert rc == 0, stderr
    front = isvc(docs)["spec"]["predictor"]
    assert knob_args(front["model"]["args"]) == [FLAGS[0], FLAGS[2], FLAGS[3]]
    assert (front["minReplicas"], front["maxReplicas"], front["scaleTarget"]) == (1, 4, 64)
    [worker] = [d for d in docs if d["kind"] == "Deployment"]
    [container] = worker["spec"]["template"]["spec"]["containers"]
    assert knob_args(container["args"]) == [FLAGS[0], FLAGS[1], FLAGS[3]]
    assert container["args"][6:9] == [FLAGS[0], FLAGS[1], FLAGS[3]]  # replaced in place
    [scaler] = [d for d in docs if d["kind"] == "ScaledObject"]
    spec = scaler["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, 5)
    lag, pending = spec["triggers"]
    assert (lag["metadata"]["lagCount"], lag["metadata"]["activationLagCount"]) == ("96", "3")
    assert pending["metadata"] == {**pending["metadata"], "pendingEntriesCount": "128",
                                   "activationLagCount": "0"}  # as the overlay renders it
    assert "the plan sizes the workers" in stderr


def test_queue_plan_shorter_than_the_claim_timeout_is_refused(
    registry: str, tmp_path: Path
) -> None:
    short = Knobs(max_batch_size=24, max_batch_wait_ms=5.0, max_queue_size=300,
                  request_timeout_ms=4000.0)
    rc, _, stderr = render(registry, tmp_path, "queue",
                           make_plan("queue", knobs=short, autoscaler=KEDA_QUEUE))
    assert rc == 2
    assert stderr.startswith("error: the plan's request_timeout_ms 4000 is not above "
                             "InferenceService demo-embed's --queue_claim_timeout_ms 5000")
    assert len(stderr.splitlines()) == 1


def test_a_queue_plan_with_its_claim_timeout_renders_with_a_short_timeout(
    registry: str, tmp_path: Path
) -> None:
    """The planner gives queue plans a claim timeout below their request timeout
    (capacity._plan.claim_timeout_ms): both roles get it, and the render validates."""
    short = Knobs(max_batch_size=24, max_batch_wait_ms=5.0, max_queue_size=300,
                  request_timeout_ms=250.0, queue_claim_timeout_ms=121)
    rc, docs, stderr = render(registry, tmp_path, "queue",
                              make_plan("queue", knobs=short, autoscaler=KEDA_QUEUE))
    assert rc == 0, stderr
    front = isvc(docs)["spec"]["predictor"]["model"]["args"]
    [worker] = [d for d in docs if d["kind"] == "Deployment"]
    [container] = worker["spec"]["template"]["spec"]["containers"]
    for args in (front, container["args"]):
        assert "--queue_claim_timeout_ms=121" in args
        assert "--request_timeout_ms=250" in args


@pytest.mark.parametrize(("overlay", "plan", "message"), [
    ("queue", make_plan(), "error: the plan is for in-process mode, but overlay 'queue' is "
     "queue (the queue and queue-external-redis overlays are queue mode"),
    ("cpu", make_plan("queue", autoscaler=KEDA_QUEUE), "error: the plan is for queue mode, "
     "but overlay 'cpu' is in-process"),
    ("cpu", make_plan(version=2), "error: --plan {path} is for demo-embed@2, but "
     "demo-embed@1 is being rendered"),
    ("cpu", {"schema": "modelctl.profile/v1"}, "error: --plan {path}: not a "
     "modelctl.plan/v1 plan"),
    ("cpu", "not json", "error: --plan {path}: not JSON, so not a modelctl plan"),
    ("cpu", {**make_plan(), "knobs": {"max_batch_size": 1}}, "error: --plan {path}: "
     "malformed plan: TypeError"),
])
def test_a_plan_that_does_not_fit_is_one_line_and_exit_2(
    registry: str, tmp_path: Path, overlay: str, plan: Any, message: str
) -> None:
    rc, _, stderr = render(registry, tmp_path, overlay, plan)
    assert rc == 2
    assert stderr.startswith(message.format(path=tmp_path / "plan.json")), stderr
    assert len(stderr.splitlines()) == 1 and "Traceback" not in stderr
