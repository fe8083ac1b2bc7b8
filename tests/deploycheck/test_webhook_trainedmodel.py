"""KServe's TrainedModel validating webhook, ported (``deploycheck.webhook._trainedmodel``):
the cases of KServe's own ``pkg/apis/serving/v1alpha1/trainedmodel_webhook_test.go``
(``TestValidateCreate``, ``TestValidateUpdate``) one by one, with KServe's messages, then
what the port adds: every error in KServe's order, quantities compared and printed as Go
does, and the checker naming the rule."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from deploycheck import Checker, admit_trainedmodel
from deploycheck.webhook._trainedmodel import quantity_string

NAME_ERROR = (
    'the Trained Model "{}" is invalid: a Trained Model name must consist of alphanumeric '
    "characters, '_', or '-'. (e.g. \"my-Name\" or \"abc_123\", regex used for validation is "
    "'^[a-zA-Z0-9_-]+$')"
)
URI_ERROR = (
    'the Trained Model "{}" storageUri field is invalid. The storage uri must start with one '
    'of the prefixes: s3://, gs://, https://, http://. (the storage uri given is "{}")'
)
MEMORY_ERROR = (
    'the Trained Model "{}" memory field is immutable. The memory was "{}" but it is '
    'updated to "{}"'
)


def make_tm() -> dict[str, Any]:
    """makeTestTrainModel."""
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "TrainedModel",
        "metadata": {"name": "bar"},
        "spec": {
            "inferenceService": "Parent",
            "model": {"storageUri": "gs://kfserving/sklearn/iris", "framework": "sklearn",
                      "memory": "100Mi"},
        },
    }


def updated(field: str | None, value: str = "") -> dict[str, Any]:
    """(*TrainedModel).update of the test file."""
    tm = make_tm()
    if field == "name":
        tm["metadata"]["name"] = value
    elif field == "inferenceService":
        tm["spec"]["inferenceService"] = value
    elif field is not None:
        tm["spec"]["model"][field] = value
    return tm


# (scenario, field, value, errors): the scenarios both TestValidateCreate and
# TestValidateUpdate run, against makeTestTrainModel.
SHARED = [
    ("simple / no change", None, "", []),
    ("alphanumeric model name", "name", "Abc-123", []),
    ("name starts with number", "name", "4abc-3", []),
    ("name starts with dash", "name", "-abc-3", []),
    ("name ends with dash", "name", "abc-3-", []),
    ("name includes dot", "name", "abc.123", [NAME_ERROR.format("abc.123")]),
    ("name includes spaces", "name", "abc 123", [NAME_ERROR.format("abc 123")]),
    ("invalid storageURI prefix", "storageUri", "foo://kfserving/sklearn/iris",
     [URI_ERROR.format("bar", "foo://kfserving/sklearn/iris")]),
]
UPDATE_ONLY = [
    ("inference service", "inferenceService", "parent2", []),
    ("storageURI", "storageUri", "gs://kfserving/sklearn2/iris", []),
    ("framework", "framework", "sklearn2", []),
    ("change immutable memory", "memory", "300Mi", [MEMORY_ERROR.format("bar", "100Mi", "300Mi")]),
]


@pytest.mark.parametrize(("scenario", "field", "value", "errors"), SHARED,
                         ids=[s[0] for s in SHARED])
def test_validate_create(scenario: str, field: str | None, value: str,
                         errors: list[str]) -> None:
    assert admit_trainedmodel(updated(field, value)) == errors


@pytest.mark.parametrize(("scenario", "field", "value", "errors"), SHARED + UPDATE_ONLY,
                         ids=[s[0] for s in SHARED + UPDATE_ONLY])
def test_validate_update(scenario: str, field: str | None, value: str,
                         errors: list[str]) -> None:
    assert admit_trainedmodel(updated(field, value), old=make_tm()) == errors


@pytest.mark.parametrize("uri", ["s3://bucket/registry/demo/3/", "gs://b/m",
                                 "https://example.com/m.tar", "http://minio:9000/m"])
def test_the_agents_protocols_are_admitted(uri: str) -> None:
    assert admit_trainedmodel(updated("storageUri", uri)) == []


@pytest.mark.parametrize("uri", ["pvc://claim/registry/demo/3", "file:///registry/demo/3",
                                 "hf://org/model", "oci://registry/model:1", ""])
def test_what_the_agent_cannot_fetch_is_refused(uri: str) -> None:
    # pkg/agent/storage/provider.go has PVC and File commented out of its protocols.
    assert admit_trainedmodel(updated("storageUri", uri)) == [URI_ERROR.format("bar", uri)]


def test_every_error_in_kserves_order() -> None:
    tm = updated("name", "a.b")
    tm["spec"]["model"]["storageUri"] = "pvc://x/y"
    tm["spec"]["model"]["memory"] = "1Gi"
    assert admit_trainedmodel(tm, old=make_tm()) == [
        NAME_ERROR.format("a.b"),
        URI_ERROR.format("a.b", "pvc://x/y"),
        MEMORY_ERROR.format("a.b", "100Mi", "1Gi"),
    ]


def test_memory_is_compared_as_a_quantity() -> None:
    old = updated("memory", "1Gi")
    assert admit_trainedmodel(updated("memory", "1024Mi"), old=old) == []
    assert admit_trainedmodel(updated("memory", str(1024**3)), old=old) == []
    # Go prints the canonical form (Quantity.String), not what was written.
    assert admit_trainedmodel(updated("memory", "1.5Gi"), old=old) == [
        MEMORY_ERROR.format("bar", "1Gi", "1536Mi")]
    removed = make_tm()
    del removed["spec"]["model"]["memory"]
    assert admit_trainedmodel(removed, old=old) == [MEMORY_ERROR.format("bar", "1Gi", "0")]


@pytest.mark.parametrize(("written", "go"), [
    ("1024Mi", "1Gi"), ("1000Mi", "1000Mi"), ("1536Mi", "1536Mi"), ("512", "512"),
    ("1000", "1k"), ("1500", "1500"), ("0.5", "500m"), ("1e3", "1e3"), ("1G", "1G"),
    ("0.1Ki", "102400m"), ("0", "0"), (1073741824, "1073741824"),
])
def test_quantities_print_as_go_prints_them(written: object, go: str) -> None:
    assert quantity_string(written) == go


def test_an_update_of_an_object_being_deleted_is_admitted() -> None:
    tm = updated("memory", "300Mi")
    tm["metadata"]["deletionTimestamp"] = "2026-08-21T00:00:00Z"
    assert admit_trainedmodel(tm, old=make_tm()) == []


def test_the_checker_reports_the_webhook_rule(checker: Checker) -> None:
    import yaml

    tm = copy.deepcopy(updated("storageUri", "file:///registry/demo/3"))
    tm["metadata"]["name"] = "demo"
    problems, count = checker.check_text("tm.yaml", yaml.safe_dump(tm))
    assert count == 1
    assert [(p.path, p.rule) for p in problems] == [
        (("spec", "model", "storageUri"), "kserve-webhook")]
    assert str(problems[0]).startswith("tm.yaml:0:$.spec.model.storageUri: the Trained Model")
