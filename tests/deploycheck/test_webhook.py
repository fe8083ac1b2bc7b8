"""The ported validating webhook, case by case from KServe's own tests
(kserve/kserve aaac4e294, pkg/apis/serving/v1beta1/inference_service_validation_test.go):
each case names the Go test (and scenario) it follows. Go objects become the JSON
documents a user writes; ``None`` expects admission, a string a refusal whose first error
(the one KServe answers) contains it. This file: components, autoscaling, names."""

from __future__ import annotations

import pytest

from deploycheck.webhook._isvc import admit_inferenceservice, webhook_findings
from deploycheck.webhook._scaling import validate_keda
from tests.deploycheck.webhook_docs import (
    HPA,
    KEDA,
    PREDICTOR_ONE_OF,
    STANDARD,
    Doc,
    check,
    isvc,
    make_test_isvc,
    model,
    resource_metric,
    tf,
)

CREATE_CASES: dict[str, tuple[Doc, str | None]] = {
    # TestAutoscalerClassHPA
    "HPA/Valid HPA CPU metrics with ScaleMetric": (
        make_test_isvc(HPA, scaleMetric="cpu", scaleTarget=80),
        None,
    ),
    "HPA/Valid HPA CPU metrics with Autoscaling spec": (
        make_test_isvc(HPA, **resource_metric("cpu", {"averageUtilization": 80})),
        None,
    ),
    "HPA/Valid HPA Memory metrics with Autoscaling spec": (
        make_test_isvc(HPA, **resource_metric("memory", {"averageValue": "1Gi"})),
        None,
    ),
    "HPA/Invalid HPA CPU metrics without resource type": (
        make_test_isvc(HPA, autoScaling={"metrics": [{"type": "Resource"}]}),
        "metricSpec.Resource is not set for resource metric source type",
    ),
    "HPA/Invalid HPA CPU metrics with wrong metric source": (
        make_test_isvc(HPA, autoScaling={"metrics": [{"type": "External"}]}),
        "invalid HPA metric source type with value [External],valid metric source types are "
        "Resource",
    ),
    "HPA/Valid HPA CPU metrics with target utilization": (
        make_test_isvc(HPA, scaleMetric="cpu", scaleMetricType="Utilization", scaleTarget=80),
        None,
    ),
    "HPA/HPA CPU metrics with invalid target utilization": (
        make_test_isvc(HPA, scaleMetric="cpu", scaleMetricType="Utilization", scaleTarget=120),
        "the target utilization percentage should be a [1-100] integer",
    ),
    "HPA/Valid HPA Memory metrics with ScaleMetric": (
        make_test_isvc(HPA, scaleMetric="memory", scaleTarget=10),
        None,
    ),
    "HPA/Invalid autoscaler class": (
        make_test_isvc(
            {**STANDARD, "serving.kserve.io/autoscalerClass": "test"},
            scaleMetric="memory",
            scaleTarget=10,
        ),
        "[test] is not a supported autoscaler class type",
    ),
    # TestAutoscalerClassKEDA
    "KEDA/Valid KEDA CPU metrics with Autoscaling spec": (
        make_test_isvc(
            KEDA, **resource_metric("cpu", {"type": "Utilization", "averageUtilization": 80})
        ),
        None,
    ),
    "KEDA/Valid KEDA Memory metrics with Autoscaling spec": (
        make_test_isvc(
            KEDA, **resource_metric("memory", {"type": "AverageValue", "averageValue": "1Gi"})
        ),
        None,
    ),
    "KEDA/Invalid KEDA CPU metrics without resource type": (
        make_test_isvc(KEDA, autoScaling={"metrics": [{"type": "Resource"}]}),
        "metricSpec.Resource is not set for resource metric source type",
    ),
    "KEDA/Valid KEDA CPU metrics with external metric source": (
        make_test_isvc(
            KEDA,
            autoScaling={
                "metrics": [
                    {
                        "type": "External",
                        "external": {
                            "metric": {
                                "backend": "prometheus",
                                "query": "avg(vllm_requests_running)",
                            },
                            "target": {"type": "Value", "value": "10"},
                        },
                    }
                ]
            },
        ),
        None,
    ),
    "KEDA/Valid KEDA CPU metrics with pod metric source": (
        make_test_isvc(
            KEDA,
            autoScaling={
                "metrics": [
                    {
                        "type": "PodMetric",
                        "podmetric": {
                            "metric": {
                                "backend": "opentelemetry",
                                "query": "avg(vllm_requests_running)",
                            },
                            "target": {"type": "Value", "value": "10"},
                        },
                    }
                ]
            },
        ),
        None,
    ),
    # TestRejectMultipleModelSpecs
    "RejectMultipleModelSpecs": (
        isvc({**tf(), "xgboost": {}}),
        PREDICTOR_ONE_OF,
    ),
    # TestCustomizeDeploymentStrategyUnsupportedForServerless
    "CustomizeDeploymentStrategyUnsupportedForServerless": (
        make_test_isvc(serviceAccountName="test", deploymentStrategy={"type": "Recreate"}),
        "customizing deploymentStrategy is only supported for raw deployment mode",
    ),
    # TestModelSpecAndCustomOverridesIsValid
    "ModelSpecAndCustomOverridesIsValid": (make_test_isvc(serviceAccountName="test"), None),
    # TestRejectModelSpecMissing
    "RejectModelSpecMissing": (isvc({}), PREDICTOR_ONE_OF),
    # TestBadParallelismValues
    "BadParallelismValues": (
        make_test_isvc(containerConcurrency=-1),
        "parallelism cannot be less than 0",
    ),
    # TestBadReplicaValues (predictor, then transformer, then explainer)
    "BadReplicaValues/predictor min -1": (
        make_test_isvc(minReplicas=-1),
        "'MinReplicas' cannot be less than 0",
    ),
    "BadReplicaValues/predictor max -1": (
        make_test_isvc(minReplicas=1, maxReplicas=-1),
        "'MaxReplicas' cannot be less than 0",
    ),
    "BadReplicaValues/predictor min > max": (
        make_test_isvc(minReplicas=2, maxReplicas=1),
        "'MinReplicas' cannot be greater than MaxReplicas",
    ),
    "BadReplicaValues/transformer min -1": (
        isvc(
            tf(minReplicas=0),
            transformer={"containers": [{"image": "some-image"}], "minReplicas": -1},
        ),
        "'MinReplicas' cannot be less than 0",
    ),
    "BadReplicaValues/transformer max -1": (
        isvc(
            tf(minReplicas=0),
            transformer={
                "containers": [{"image": "some-image"}],
                "minReplicas": 1,
                "maxReplicas": -1,
            },
        ),
        "'MaxReplicas' cannot be less than 0",
    ),
    "BadReplicaValues/transformer min > max": (
        isvc(
            tf(minReplicas=0),
            transformer={
                "containers": [{"image": "some-image"}],
                "minReplicas": 2,
                "maxReplicas": 1,
            },
        ),
        "'MinReplicas' cannot be greater than MaxReplicas",
    ),
    "BadReplicaValues/explainer min -1": (
        isvc(
            tf(minReplicas=0),
            explainer={"art": {"storageUri": "gs://testbucket/testmodel"}, "minReplicas": -1},
        ),
        "'MinReplicas' cannot be less than 0",
    ),
    "BadReplicaValues/explainer min > max": (
        isvc(
            tf(minReplicas=0),
            explainer={
                "art": {"storageUri": "gs://testbucket/testmodel"},
                "minReplicas": 2,
                "maxReplicas": 1,
            },
        ),
        "'MinReplicas' cannot be greater than MaxReplicas",
    ),
    # TestCustomOK
    "CustomOK/kserve-container": (
        isvc({"containers": [{"name": "kserve-container", "image": "some-image"}]}),
        None,
    ),
    "CustomOK/unnamed container": (isvc({"containers": [{"image": "some-image"}]}), None),
    # TestRejectBadTransformer / TestRejectBadExplainer / TestGoodExplainer
    "RejectBadTransformer": (
        isvc(tf(), transformer={}),
        "exactly one of [PodSpec, ComponentExtensionSpec] must be specified in TransformerSpec",
    ),
    "RejectBadExplainer": (
        isvc(tf(), explainer={}),
        "exactly one of [ART, PodSpec, ComponentExtensionSpec] must be specified in ExplainerSpec",
    ),
    "GoodExplainer": (
        isvc(tf(), explainer={"art": {"storageUri": "gs://testbucket/testmodel"}}),
        None,
    ),
    # TestValidateTwoPredictorImplementationCollocation
    "ValidateTwoPredictorImplementationCollocation": (
        isvc(
            {
                "model": model("gs://testbucket/testmodel", modelFormat={"name": "huggingface"}),
                "containers": [
                    {"name": "kserve-container", "image": "test/predictor:latest"},
                    {"name": "transformer-container", "image": "test/transformer:latest"},
                ],
            }
        ),
        PREDICTOR_ONE_OF,
    ),
    # TestValidateConfidential
    "Confidential/confidential nil": (isvc({"model": {"storageUri": "s3://bucket/model"}}), None),
    "Confidential/confidential disabled": (
        isvc({"model": {"storageUri": "s3://bucket/model", "confidential": {"enabled": False}}}),
        None,
    ),
    "Confidential/confidential enabled with storageUri and resourceId": (
        isvc(
            {
                "model": {
                    "storageUri": "s3://bucket/model",
                    "confidential": {"enabled": True, "resourceId": "kbs:///default/key/model-key"},
                }
            }
        ),
        None,
    ),
    "Confidential/confidential enabled with storageUri no resourceId": (
        isvc({"model": {"storageUri": "s3://bucket/model", "confidential": {"enabled": True}}}),
        None,
    ),
    "Confidential/confidential enabled without storageUri": (
        isvc({"model": {"confidential": {"enabled": True}}}),
        "confidential model serving requires storageUri to be set",
    ),
    "Confidential/confidential enabled with OCI URI warns": (
        isvc(
            {
                "model": {
                    "storageUri": "oci://registry/model:latest",
                    "confidential": {"enabled": True},
                }
            }
        ),
        None,  # a warning, not a refusal: warnings are not ported
    ),
    "Confidential/confidential with malformed resourceId": (
        isvc(
            {
                "model": {
                    "storageUri": "s3://bucket/model",
                    "confidential": {"enabled": True, "resourceId": "invalid-resource-id"},
                }
            }
        ),
        "must be in the format kbs:///<repo>/<type>/<tag>",
    ),
}


@pytest.mark.parametrize("case", sorted(CREATE_CASES))
def test_create(case: str) -> None:
    doc, expected = CREATE_CASES[case]
    check(doc, expected)


def test_invalid_name_in_sklearn_predictor() -> None:
    # TestInvalidNameInSKLearnPredictor
    doc = isvc(
        {
            "sklearn": {
                "name": "invalid-name",
                "image": "dummy-image",
                "storageUri": "gs://kfserving-examples/models/sklearn/1.0/model",
            }
        },
    )
    [finding] = webhook_findings(doc)
    assert finding.message == "the 'name' field is not allowed in standard predictor"
    assert finding.path == ("spec", "predictor", "sklearn", "name")


@pytest.mark.parametrize(
    ("name", "admitted"),
    [("abc-123", True), ("1abcde", False), ("abc.de", False)],
    ids=["TestGoodName", "TestRejectBadNameStartWithNumber", "TestRejectBadNameIncludeDot"],
)
def test_names(name: str, admitted: bool) -> None:
    doc = make_test_isvc()
    doc["metadata"]["name"] = name
    errors = admit_inferenceservice(doc)
    assert (errors == []) == admitted, errors
    if not admitted:
        assert errors[0].startswith(
            f'the InferenceService "{name}" is invalid: a InferenceService name'
        )
        assert errors[0].endswith("regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")


# -- TestValidateScalingKedaCompExtension (validateScalingKedaCompExtension alone) --------

_KEDA_EXT: dict[str, tuple[Doc, str]] = {
    "valid cpu": (resource_metric("cpu", {"type": "Utilization", "averageUtilization": 80}), ""),
    "valid memory": (
        resource_metric("memory", {"type": "AverageValue", "averageValue": "2Gi"}),
        "",
    ),
    "invalid: ScaleMetric set": ({"scaleMetric": "cpu"}, "ScaleMetric is not supported for KEDA"),
    "invalid: missing resource": (
        {"autoScaling": {"metrics": [{"type": "Resource"}]}},
        "metricSpec.Resource is not set for resource metric source type",
    ),
    "invalid: cpu wrong type": (
        resource_metric("cpu", {"type": "AverageValue"}),
        "the cpu target value type should be Utilization",
    ),
    "invalid: memory wrong type": (
        resource_metric("memory", {"type": "Value"}),
        "the memory target value type should be AverageValue or Utilization",
    ),
    "invalid: memory value too low": (
        resource_metric("memory", {"type": "AverageValue", "averageValue": "512Ki"}),
        "the memory target value should be greater than 1 MiB",
    ),
    "invalid: unsupported resource": (
        resource_metric("disk", {"type": "Utilization"}),
        "resource type disk is not supported",
    ),
    "invalid: external metric missing query/value": (
        {
            "autoScaling": {
                "metrics": [
                    {
                        "type": "External",
                        "external": {
                            "metric": {"backend": "prometheus", "query": ""},
                            "target": {"type": "Value"},
                        },
                    }
                ]
            }
        },
        "the query should not be empty",
    ),
    "valid: external metric": (
        {
            "autoScaling": {
                "metrics": [
                    {
                        "type": "External",
                        "external": {
                            "metric": {"backend": "prometheus", "query": "avg(requests)"},
                            "target": {"type": "Value", "value": "10"},
                        },
                    }
                ]
            }
        },
        "",
    ),
    "invalid: pod metric missing query/value": (
        {
            "autoScaling": {
                "metrics": [
                    {
                        "type": "PodMetric",
                        "podmetric": {
                            "metric": {"backend": "opentelemetry", "query": ""},
                            "target": {"type": "Value"},
                        },
                    }
                ]
            }
        },
        "the query should not be empty",
    ),
    "valid: pod metric": (
        {
            "autoScaling": {
                "metrics": [
                    {
                        "type": "PodMetric",
                        "podmetric": {
                            "metric": {"backend": "opentelemetry", "query": "avg(requests)"},
                            "target": {"type": "Value", "value": "5"},
                        },
                    }
                ]
            }
        },
        "",
    ),
    "invalid: unknown metric type": (
        {"autoScaling": {"metrics": [{"type": "UnknownType"}]}},
        "unknown KEDA metric type with value [UnknownType]."
        "Valid types are Resource,External,PodMetric",
    ),
}


@pytest.mark.parametrize("case", sorted(_KEDA_EXT))
def test_keda_extension(case: str) -> None:
    spec, wanted = _KEDA_EXT[case]
    messages = [f.message for f in validate_keda(spec, ("spec", "predictor"))]
    if wanted:
        assert messages and wanted in messages[0], messages
    else:
        assert messages == []
