"""TrainedModels as ``deploy render --trained-model`` writes them (``deploycheck._trained``):
which InferenceServices KServe gives TrainedModels to (``IsMMSPredictor``, the cases of
KServe's ``pkg/controller/v1beta1/inferenceservice/utils/utils_test.go``
``TestIsMMSPredictor``), the memory each one asks for, and the sets KServe's TrainedModel
controller would leave unplaced (``IsMemoryResourceAvailable``) or the predictor could
never hold. Pure: plain dicts in, no kustomize, the registry faked by two lambdas."""

from __future__ import annotations

from typing import Any

import pytest

from deploycheck import DeployError, RenderRequest
from deploycheck._trained import (
    MIB,
    is_multi_model_predictor,
    memory_mib,
    require_multi_model,
    trained_models,
)

RESOURCES = {"limits": {"cpu": "100m"}, "requests": {"cpu": "90m"}}
MMS_ENV = "MULTI_MODEL_SERVER"


# -- IsMMSPredictor: TestIsMMSPredictor's scenarios -------------------------------------------

@pytest.mark.parametrize(("predictor", "expected"), [
    ({"model": {"modelFormat": {"name": "sklearn"}, "image": "customImage:0.1.0",
                "resources": RESOURCES}}, True),                                  # ModelSpec
    ({"model": {"modelFormat": {"name": "sklearn"}, "storageUri": "gs://someUri",
                "image": "customImage:0.1.0", "resources": RESOURCES}}, False),   # ModelWithURI
    ({"huggingface": {"runtimeVersion": "latest"}}, False),                  # HuggingFaceModel
    ({"containers": [{"name": "kserve-container", "image": "some-image",
                      "env": [{"name": MMS_ENV, "value": "true"}]}]}, True),     # CustomSpec
    ({"containers": [{"name": "kserve-container", "image": "some-image",
                      "env": [{"name": MMS_ENV, "value": "false"},
                              {"name": "STORAGE_URI", "value": "gs://some-uri"}]}]},
     False),                                                                # CustomSpecWithURI
    ({"containers": [{"name": "kserve-container", "image": "some-image"}]},
     False),                                                             # CustomSpecWithoutURI
], ids=["ModelSpec", "ModelWithURI", "HuggingFaceModel", "CustomSpec", "CustomSpecWithURI",
        "CustomSpecWithoutURI"])
def test_is_mms_predictor(predictor: dict[str, Any], expected: bool) -> None:
    assert is_multi_model_predictor(predictor) is expected


@pytest.mark.parametrize("predictor", [
    {"model": {"modelFormat": {"name": "modelctl"}, "storageUri": ""}},   # set, even if empty
    {"model": {"modelFormat": {"name": "modelctl"}, "storage": {"key": "k"}}},
    {"model": {"modelFormat": {"name": "modelctl"}},
     "storageUris": [{"uri": "s3://b/m", "mountPath": "/mnt/models"}]},
    {"model": {"modelFormat": {"name": "huggingface"}}},
    {},
])
def test_storage_of_any_kind_makes_a_single_model_predictor(predictor: dict[str, Any]) -> None:
    assert not is_multi_model_predictor(predictor)


# -- what a TrainedModel says -------------------------------------------------------------------

def isvc(limit: str | None = "8Gi", args: list[str] | None = None,
         namespace: str | None = "prod") -> dict[str, Any]:
    resources = {"requests": {"cpu": "1", "memory": limit or "1Gi"}}
    if limit is not None:
        resources["limits"] = {"memory": limit}
    meta: dict[str, Any] = {"name": "pool"}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": meta,
            "spec": {"predictor": {"model": {
                "modelFormat": {"name": "modelctl", "version": "1"},
                "runtime": "modelctl-predictor", "resources": resources,
                "args": ["--multi_model", "--memory_budget_mb=5120"] if args is None else args,
            }}}}


def uri(model: str, ref: str) -> str:
    return f"s3://models/registry/{model}/{ref}/"


def files_of(sizes: dict[str, dict[str, int]]) -> Any:
    return lambda model, ref: sizes[model]


def test_one_trained_model_per_model_pointing_at_the_inference_service() -> None:
    sizes = {"a": {"model.safetensors": 400 * MIB, "tokenizer.json": 2 * MIB,
                   "MANIFEST.json": 1000},
             "b": {"model.safetensors": 100 * MIB}}
    docs = trained_models(isvc(), [("a", "stable"), ("b", "3")], uri, files_of(sizes))
    assert docs == [
        {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "TrainedModel",
         "metadata": {"name": "a", "namespace": "prod",
                      "labels": {"app.kubernetes.io/part-of": "modelctl",
                                 "app.kubernetes.io/component": "trained-model",
                                 "app.kubernetes.io/instance": "pool"}},
         "spec": {"inferenceService": "pool",
                  "model": {"storageUri": "s3://models/registry/a/stable/",
                            "framework": "modelctl", "memory": "503Mi"}}},
        {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "TrainedModel",
         "metadata": {"name": "b", "namespace": "prod",
                      "labels": {"app.kubernetes.io/part-of": "modelctl",
                                 "app.kubernetes.io/component": "trained-model",
                                 "app.kubernetes.io/instance": "pool"}},
         "spec": {"inferenceService": "pool",
                  "model": {"storageUri": "s3://models/registry/b/3/",
                            "framework": "modelctl", "memory": "125Mi"}}},
    ]


def test_without_a_namespace_the_trained_model_has_none() -> None:
    [doc] = trained_models(isvc(namespace=None), [("a", "1")], uri,
                           files_of({"a": {"w.safetensors": MIB}}))
    assert "namespace" not in doc["metadata"]


@pytest.mark.parametrize(("file_bytes", "mib"), [
    (0, 16), (1, 16), (12 * MIB, 16), (13 * MIB, 17), (400 * MIB, 500), (400 * MIB + 1, 501),
    (16 * 1024 * MIB, 20480),
])
def test_memory_is_the_files_with_a_quarter_more_rounded_up_to_a_mib(file_bytes: int,
                                                                     mib: int) -> None:
    assert memory_mib(file_bytes) == mib


def test_trained_models_beyond_the_memory_limit_are_refused() -> None:
    sizes = {"a": {"w.safetensors": 3000 * MIB}, "b": {"w.safetensors": 3000 * MIB}}
    # 3750Mi each: one fits in 4Gi, two (7500Mi) fit in 8Gi, not in 7Gi.
    assert len(trained_models(isvc("8Gi", args=[]), [("a", "1"), ("b", "1")], uri,
                              files_of(sizes))) == 2
    with pytest.raises(DeployError, match=r"need 7500Mi of memory together, more than "
                                          r"pool's memory limit \(7Gi\).*IsMemoryResource"):
        trained_models(isvc("7Gi", args=[]), [("a", "1"), ("b", "1")], uri, files_of(sizes))
    with pytest.raises(DeployError, match=r"memory limit \(none\)"):
        trained_models(isvc(None, args=[]), [("a", "1")], uri, files_of(sizes))


@pytest.mark.parametrize(("args", "flag"), [
    (["--memory_budget_mb=512"], "--memory_budget_mb=512"),
    (["--memory_budget_mb", "512"], "--memory_budget_mb=512"),
    (["--memory_budget_mb=9000", "--memory_budget_mb=512"], "--memory_budget_mb=512"),
    (["--memory_budget_mb=9000", "--device_memory_budget_mb=512"],
     "--device_memory_budget_mb=512"),
])
def test_weights_larger_than_the_budget_they_are_held_in_are_refused(args: list[str],
                                                                     flag: str) -> None:
    sizes = {"big": {"model.safetensors": 600 * MIB, "vocab.txt": 1 * MIB}}
    with pytest.raises(DeployError, match=f"big@1: its weights \\(600 MiB\\) are larger than "
                                          f"the predictor's {flag}"):
        trained_models(isvc("8Gi", args=args), [("big", "1")], uri, files_of(sizes))


def test_only_weight_files_count_against_the_budget() -> None:
    # The predictor's estimate before a first load is its *.safetensors bytes.
    sizes = {"m": {"model.safetensors": 500 * MIB, "tokenizer.json": 100 * MIB}}
    [doc] = trained_models(isvc("8Gi", args=["--memory_budget_mb=512"]), [("m", "1")], uri,
                           files_of(sizes))
    assert doc["spec"]["model"]["memory"] == "750Mi"


def test_a_framework_predictor_names_its_framework() -> None:
    service = isvc()
    service["spec"]["predictor"] = {"sklearn": {"resources": {"limits": {"memory": "1Gi"}}}}
    [doc] = trained_models(service, [("m", "1")], uri, files_of({"m": {"x.bin": MIB}}))
    assert doc["spec"]["model"]["framework"] == "sklearn"


def test_a_single_model_inference_service_takes_no_trained_models() -> None:
    service = isvc()
    service["spec"]["predictor"]["model"]["storageUri"] = "s3://models/registry/m/1/"
    with pytest.raises(DeployError, match=r"--trained-model needs a multi-model overlay .*"
                                          r"'gpu' is not one.*IsMMSPredictor"):
        require_multi_model(service, "gpu")
    require_multi_model(isvc(), "multi-model")  # no storage: fine


def test_a_model_given_twice_is_refused() -> None:
    with pytest.raises(DeployError, match=r"--trained-model a is given twice \(a@1, a@2\)"):
        RenderRequest("pool", "latest", "multi-model", trained_models=(("a", "1"), ("a", "2")))
    RenderRequest("pool", "latest", "multi-model", trained_models=(("a", "1"), ("b", "1")))
