"""KServe's Go test objects as the JSON documents users write, for the webhook tests
(kserve/kserve aaac4e294, pkg/apis/serving/v1beta1/inference_service_validation_test.go)."""

from __future__ import annotations

from typing import Any

from deploycheck.webhook._isvc import admit_inferenceservice

Doc = dict[str, Any]
STANDARD = {"serving.kserve.io/deploymentMode": "Standard"}
PREDICTOR_ONE_OF = (
    "exactly one of [Name, SKLearn, XGBoost, Tensorflow, PyTorch, Triton, ONNX, HuggingFace, "
    "PMML, LightGBM, Paddle, Model, StorageUris, StorageContainerName, WorkerSpec, PodSpec] "
    "must be specified in PredictorSpec"
)


def isvc(predictor: Doc, annotations: dict[str, str] | None = None, **spec: Any) -> Doc:
    meta: Doc = {"name": "foo", "namespace": "default"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": meta,
        "spec": {"predictor": predictor, **spec},
    }


def tf(**extension: Any) -> Doc:
    """makeTestInferenceService's predictor, with component-extension fields."""
    return {
        "tensorflow": {"storageUri": "gs://testbucket/testmodel", "runtimeVersion": "0.14.0"},
        **extension,
    }


def make_test_isvc(annotations: dict[str, str] | None = None, **extension: Any) -> Doc:
    """makeTestInferenceService, with annotations and component-extension fields."""
    return isvc(tf(**extension), annotations)


def model(uri: str | None = "gs://test/model-v1", **fields: Any) -> Doc:
    out: Doc = {"modelFormat": {"name": "sklearn"}, **fields}
    if uri is not None:
        out["storageUri"] = uri
    return out


def first_error(doc: Doc, old: Doc | None = None) -> str | None:
    errors = admit_inferenceservice(doc, old)
    return errors[0] if errors else None


def check(doc: Doc, expected: str | None, old: Doc | None = None) -> None:
    got = first_error(doc, old)
    if expected is None:
        assert got is None, admit_inferenceservice(doc, old)
    else:
        assert got is not None and expected in got, admit_inferenceservice(doc, old)


HPA = {**STANDARD, "serving.kserve.io/autoscalerClass": "hpa"}
KEDA = {**STANDARD, "serving.kserve.io/autoscalerClass": "keda"}


def resource_metric(name: str, target: Doc) -> Doc:
    return {
        "autoScaling": {
            "metrics": [{"type": "Resource", "resource": {"name": name, "target": target}}]
        }
    }
