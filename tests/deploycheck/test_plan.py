"""``deploycheck.apply_plan`` on hand-made objects: the cases no overlay of ours renders
(``--flag value`` args, other autoscaler classes, an explicit claim timeout)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from deploycheck import DeployError, PlanValues, apply_plan

IN_PROCESS = PlanValues(mode="in-process", max_batch_size=16, max_batch_wait_ms=2.5,
                        max_queue_size=200, request_timeout_ms=9000.0, min_replicas=1,
                        max_replicas=3, scale_target=32, target_utilization_percentage=80,
                        activation_scale=2)
QUEUE = PlanValues(mode="queue", max_batch_size=16, max_batch_wait_ms=2.5, max_queue_size=200,
                   request_timeout_ms=9000.0, min_replicas=0, max_replicas=3,
                   lag_per_worker=40, activation_lag=1)


def isvc(annotations: dict[str, str], args: list[Any] | None = None,
         **predictor: Any) -> dict[str, Any]:
    model: dict[str, Any] = {"runtime": "modelctl-predictor"}
    if args is not None:
        model["args"] = args
    return {"kind": "InferenceService",
            "metadata": {"name": "m", "annotations": dict(annotations)},
            "spec": {"predictor": {"model": model, **predictor}}}


def test_both_arg_forms_are_replaced_in_place_and_absent_flags_appended() -> None:
    doc = isvc({"serving.kserve.io/deploymentMode": "Knative"},
               ["--max_batch_size", "64", "--device=cpu", "--request_timeout_ms=1",
                "--request_timeout_ms", "2"])
    assert apply_plan([doc], IN_PROCESS, "mine") == []
    assert doc["spec"]["predictor"]["model"]["args"] == [
        "--max_batch_size", "16", "--device=cpu", "--request_timeout_ms=9000",
        "--request_timeout_ms", "9000", "--max_batch_wait_ms=2.5", "--max_queue_size=200"]


def test_a_model_without_args_gets_them() -> None:
    doc = isvc({"serving.kserve.io/deploymentMode": "Knative"})
    apply_plan([doc], IN_PROCESS, "mine")
    assert doc["spec"]["predictor"]["model"]["args"] == [
        "--max_batch_size=16", "--max_batch_wait_ms=2.5", "--max_queue_size=200",
        "--request_timeout_ms=9000"]


def test_knative_hpa_class_keeps_its_metric_and_says_so() -> None:
    doc = isvc({"serving.kserve.io/deploymentMode": "Knative",
                "autoscaling.knative.dev/class": "hpa.autoscaling.knative.dev"},
               scaleMetric="cpu", scaleTarget=60)
    [note] = apply_plan([doc], IN_PROCESS, "mine")
    assert "Knative's HPA class" in note
    predictor = doc["spec"]["predictor"]
    assert (predictor["scaleMetric"], predictor["scaleTarget"]) == ("cpu", 60)
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (1, 3)


@pytest.mark.parametrize(("autoscaler", "said"), [
    ("none", "autoscalerClass none runs minReplicas replicas"),
    ("hpa", "autoscalerClass hpa scales on CPU or memory only"),
    ("external", "autoscalerClass external has no field of ours"),
    ("keda", "no KEDA metric on modelctl_inflight_requests"),
])
def test_standard_without_a_concurrency_field_says_so(autoscaler: str, said: str) -> None:
    cpu = {"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 60}}}
    doc = isvc({"serving.kserve.io/deploymentMode": "Standard",
                "serving.kserve.io/autoscalerClass": autoscaler},
               autoScaling={"metrics": [cpu]})
    [note] = apply_plan([doc], IN_PROCESS, "mine")
    assert said in note
    assert doc["spec"]["predictor"]["autoScaling"]["metrics"] == [cpu]
    assert "target-utilization" not in str(doc["metadata"]["annotations"])


def test_canary_entries_without_args_inherit_the_stable_ones() -> None:
    doc = isvc({"serving.kserve.io/deploymentMode": "Standard",
                "serving.kserve.io/autoscalerClass": "none"})
    doc["spec"]["canary"] = [{"trafficPercent": 10, "predictor": {"model": {"name": "c"}}}]
    apply_plan([doc], IN_PROCESS, "mine")
    assert doc["spec"]["canary"][0]["predictor"] == {"model": {"name": "c"}}


def queue_docs(claim_ms: str | None = None) -> list[dict[str, Any]]:
    front = isvc({"serving.kserve.io/deploymentMode": "Knative"},
                 ["--queue_url=redis://r:6379/0", "--queue_role", "frontend"])
    args = ["--queue_role=worker", "--max_batch_size=64"]
    if claim_ms is not None:
        args.append(f"--queue_claim_timeout_ms={claim_ms}")
    worker = {"kind": "Deployment", "metadata": {"name": "m-worker"},
              "spec": {"template": {"spec": {"containers": [{"name": "w", "args": args}]}}}}
    scaler = {"kind": "ScaledObject", "metadata": {"name": "m-worker"},
              "spec": {"scaleTargetRef": {"name": "m-worker"}, "triggers": [
                  {"type": "redis-streams", "metadata": {"lagCount": "128"}}]}}
    return [front, worker, scaler]


def test_queue_explicit_claim_timeout_is_checked() -> None:
    with pytest.raises(DeployError, match="Deployment m-worker's --queue_claim_timeout_ms 9500"):
        apply_plan(queue_docs("9500"), QUEUE, "mine")
    docs = queue_docs("1000")
    apply_plan(docs, QUEUE, "mine")
    assert docs[1]["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "--queue_role=worker", "--max_batch_size=16", "--queue_claim_timeout_ms=1000",
        "--max_batch_wait_ms=2.5", "--request_timeout_ms=9000"]
    assert docs[2]["spec"] == {"scaleTargetRef": {"name": "m-worker"}, "minReplicaCount": 0,
                               "maxReplicaCount": 3, "triggers": [{"type": "redis-streams",
                               "metadata": {"lagCount": "40", "activationLagCount": "1"}}]}


def test_queue_without_a_scaler_for_the_workers_is_refused() -> None:
    docs = queue_docs()[:2]
    with pytest.raises(DeployError, match="no KEDA ScaledObject scales Deployment m-worker"):
        apply_plan(docs, QUEUE, "mine")


def test_torch_threads_go_where_the_model_runs_and_nowhere_else() -> None:
    docs = queue_docs()
    apply_plan(docs, dataclasses.replace(QUEUE, torch_threads=3), "mine")
    assert "--torch_threads=3" in docs[1]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any("torch_threads" in str(arg)
                   for arg in docs[0]["spec"]["predictor"]["model"]["args"])
    doc = isvc({"serving.kserve.io/deploymentMode": "Knative"}, ["--torch_threads=8"])
    apply_plan([doc], dataclasses.replace(IN_PROCESS, torch_threads=1), "mine")
    assert doc["spec"]["predictor"]["model"]["args"][0] == "--torch_threads=1"
    untouched = isvc({"serving.kserve.io/deploymentMode": "Knative"}, ["--torch_threads=8"])
    apply_plan([untouched], IN_PROCESS, "mine")  # a GPU plan sets none: the overlay's stays
    assert "--torch_threads=8" in untouched["spec"]["predictor"]["model"]["args"]
