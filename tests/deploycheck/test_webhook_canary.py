"""The ported validating webhook, case by case from KServe's own tests
(kserve/kserve aaac4e294, pkg/apis/serving/v1beta1/inference_service_validation_test.go):
each case names the Go test (and scenario) it follows. Go objects become the JSON
documents a user writes; ``None`` expects admission, a string a refusal whose first error
(the one KServe answers) contains it. This file: canaries and updates."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from deploycheck.webhook._isvc import admit_inferenceservice, webhook_findings
from tests.deploycheck.webhook_docs import (
    STANDARD,
    Doc,
    check,
    first_error,
    isvc,
    make_test_isvc,
    model,
)

# -- TestValidateCanarySpecs --------------------------------------------------------------------


def canary_isvc(canaries: list[Doc] | None, stable_min: int | None = 4, **annotations: str) -> Doc:
    predictor: Doc = {"model": model()}
    if stable_min is not None:
        predictor["minReplicas"] = stable_min
    return isvc(predictor, annotations or STANDARD, canary=canaries)


def valid_canary(name: str, traffic: int, **predictor: Any) -> Doc:
    return {
        "trafficPercent": traffic,
        "predictor": {"name": name, "model": model(f"gs://test/model-{name}"), **predictor},
    }


def _named_stable(name: str) -> Doc:
    doc = canary_isvc([valid_canary(name, 10)])
    doc["spec"]["predictor"]["name"] = name
    return doc


def _custom_stable() -> Doc:
    doc = canary_isvc([valid_canary("v2", 10)], stable_min=None)
    doc["spec"]["predictor"] = {
        "containers": [{"name": "kserve-container", "image": "custom-server:latest"}]
    }
    return doc


CANARY_CASES: dict[str, tuple[Doc, str | None]] = {
    "No canaries passes validation": (canary_isvc(None), None),
    "Single valid canary": (canary_isvc([valid_canary("v2", 10)]), None),
    "Multiple valid canaries": (
        canary_isvc([valid_canary("v2", 25), valid_canary("v3", 25)]),
        None,
    ),
    "Traffic sum = 100 accepted": (
        canary_isvc([valid_canary("v2", 50), valid_canary("v3", 50)]),
        None,
    ),
    "Traffic percent = 0 accepted (dark launch)": (canary_isvc([valid_canary("v2", 0)]), None),
    "Canary rejected in Knative mode": (
        isvc({"model": model()}, canary=[valid_canary("v2", 10)]),
        "only supported in Standard deployment mode",
    ),
    "Missing predictor.name rejected": (
        canary_isvc([{"trafficPercent": 10, "predictor": {"model": model("gs://test/v2")}}]),
        "predictor.name is required",
    ),
    "Duplicate predictor.name rejected": (
        canary_isvc([valid_canary("v2", 10), valid_canary("v2", 20)]),
        "duplicated",
    ),
    "Canary name conflicts with stable name rejected": (
        _named_stable("stable"),
        "conflicts with stable",
    ),
    "Traffic sum > 100 rejected": (
        canary_isvc([valid_canary("v2", 60), valid_canary("v3", 50)]),
        "must be <= 100",
    ),
    "Canary with maxReplicas rejected": (
        canary_isvc([valid_canary("v2", 10, maxReplicas=5)]),
        "must not set maxReplicas",
    ),
    "Canary minReplicas equal to stable accepted": (
        canary_isvc([valid_canary("v2", 10, minReplicas=4)]),
        None,
    ),
    "Canary minReplicas exceeds stable rejected": (
        canary_isvc([valid_canary("v2", 10, minReplicas=5)]),
        "must not exceed stable",
    ),
    "Canary minReplicas equal to default stable accepted": (
        canary_isvc([valid_canary("v2", 10, minReplicas=1)], stable_min=None),
        None,
    ),
    "Canary minReplicas exceeds default stable rejected": (
        canary_isvc([valid_canary("v2", 10, minReplicas=2)], stable_min=None),
        "must not exceed stable",
    ),
    "Canary minReplicas accepted when nil (derived from traffic)": (
        canary_isvc([valid_canary("v2", 10)], stable_min=None),
        None,
    ),
    "Canary with workerSpec rejected": (
        canary_isvc([valid_canary("v2", 10, workerSpec={})]),
        "must not set workerSpec",
    ),
    "Canary rejected when stable uses custom container (no model)": (
        _custom_stable(),
        "requires a stable predictor with a model",
    ),
}


@pytest.mark.parametrize("case", sorted(CANARY_CASES))
def test_canary_specs(case: str) -> None:
    doc, expected = CANARY_CASES[case]
    check(doc, expected)


def test_canary_refusals_are_reported_together_with_paths() -> None:
    """Our port reports every refusal (KServe answers the first one): the overlay this
    repository used to ship set maxReplicas and autoScaling on its canary."""
    canary = valid_canary("canary", 10, maxReplicas=4, autoScaling={"metrics": []})
    findings = webhook_findings(canary_isvc([canary], stable_min=1))
    assert [(f.path, f.message) for f in findings] == [
        (
            ("spec", "canary", 0, "predictor", "maxReplicas"),
            'canary "canary" must not set maxReplicas (canary uses fixed replicas)',
        ),
        (
            ("spec", "canary", 0, "predictor", "autoScaling"),
            'canary "canary" must not set autoScaling (canary uses fixed replicas)',
        ),
    ]


def test_canary_mode_is_the_exact_annotation_value() -> None:
    # validateCanarySpecs compares with constants.Standard, not ParseDeploymentMode's result.
    doc = canary_isvc(
        [valid_canary("v2", 10)], **{"serving.kserve.io/deploymentMode": "RawDeployment"}
    )
    assert first_error(doc) == "canary is only supported in Standard deployment mode"


# -- updates: TestDeploymentModeUpdate, TestValidateUpdateDuringDeletion,
#    TestValidatePredictorNameChange ------------------------------------------------------------


def with_status(doc: Doc, mode: str) -> Doc:
    return {**copy.deepcopy(doc), "status": {"deploymentMode": mode}}


def annotated(doc: Doc, annotations: dict[str, str]) -> Doc:
    out = copy.deepcopy(doc)
    out["metadata"]["annotations"] = annotations
    return out


MODE = "serving.kserve.io/deploymentMode"


@pytest.mark.parametrize(
    ("status", "annotation", "admitted"),
    [
        ("Knative", "Standard", False),  # annotation does not match status
        ("Knative", "Knative", True),  # annotation matches status
        ("RawDeployment", "Standard", True),  # legacy status, normalised annotation
        ("Serverless", "Knative", True),
        ("RawDeployment", "Knative", False),  # legacy status, another mode
        ("", "Knative", True),  # no status yet (first reconcile, issue #5793)
        ("", "Serverless", True),
        ("", "Standard", True),
        ("", None, True),
    ],
)
def test_deployment_mode_update(status: str, annotation: str | None, admitted: bool) -> None:
    old = with_status(make_test_isvc(), status)
    new = annotated(old, {} if annotation is None else {MODE: annotation})
    errors = admit_inferenceservice(new, old)
    assert (errors == []) == admitted, errors
    if not admitted:
        assert errors[0] == (
            f"update rejected: deploymentMode cannot be changed from '{status}'"
            f" to '{annotation}'".replace("'RawDeployment'", "'Standard'")
        )


def test_update_during_deletion_is_admitted() -> None:
    # TestDeploymentModeUpdate's deletion case, and TestValidateUpdateDuringDeletion with
    # an object the ported rules refuse (that test's multi-node rule is not ported).
    old = with_status(make_test_isvc(), "Knative")
    new = annotated(old, {MODE: "Standard"})
    assert admit_inferenceservice(new, old) != []
    new["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert admit_inferenceservice(new, old) == []
    bad = copy.deepcopy(old)
    bad["spec"]["predictor"]["minReplicas"] = -1
    assert admit_inferenceservice(bad, old) != []
    bad["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert admit_inferenceservice(bad, old) == []


def named(name: str, uri: str) -> Doc:
    return isvc({"name": name, "model": model(uri)}, STANDARD)


@pytest.mark.parametrize(
    ("case", "old", "new", "admitted"),
    [
        (
            "Name change with model change accepted (promotion)",
            ("", "gs://test/model-v1"),
            ("v2", "gs://test/model-v2"),
            True,
        ),
        (
            "Name change without model change rejected",
            ("", "gs://test/model-v1"),
            ("v2", "gs://test/model-v1"),
            False,
        ),
        (
            "Model change without name change accepted (normal update)",
            ("v2", "gs://test/model-v1"),
            ("v2", "gs://test/model-v2"),
            True,
        ),
        ("No changes accepted", ("v2", "gs://test/model-v1"), ("v2", "gs://test/model-v1"), True),
    ],
)
def test_predictor_name_change(
    case: str, old: tuple[str, str], new: tuple[str, str], admitted: bool
) -> None:
    errors = admit_inferenceservice(named(*new), named(*old))
    assert errors == (
        [] if admitted else ["predictor.name change requires a model change (e.g. storageUri)"]
    )


def test_create_ignores_old_only_rules() -> None:
    # ValidateCreate runs validateInferenceService only: no status, no rename check.
    assert admit_inferenceservice(named("v2", "gs://a")) == []
