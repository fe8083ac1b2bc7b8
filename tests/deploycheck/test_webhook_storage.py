"""The ported validating webhook, case by case from KServe's own tests
(kserve/kserve aaac4e294, pkg/apis/serving/v1beta1/inference_service_validation_test.go):
each case names the Go test (and scenario) it follows. Go objects become the JSON
documents a user writes; ``None`` expects admission, a string a refusal whose first error
(the one KServe answers) contains it. This file: storage URIs, collocation, blocked env vars."""

from __future__ import annotations

from typing import Any

import pytest

from deploycheck.webhook._isvc import (
    admit_inferenceservice,
    webhook_findings,
)
from deploycheck.webhook._storage import (
    validate_collocation_storage_uri,
    validate_multiple_storage_uris_spec,
    validate_storage_uri_spec,
)
from tests.deploycheck.webhook_docs import (
    Doc,
    first_error,
    isvc,
    model,
    tf,
)

# -- TestValidateCollocationStorageURI (validateCollocationStorageURI alone) ----------------


def _container(name: str, storage: bool) -> Doc:
    out: Doc = {"name": name, "image": f"test/{name}:latest"}
    if storage:
        out["env"] = [{"name": "STORAGE_URI", "value": "gs://test/model"}]
    return out


@pytest.mark.parametrize(
    ("case", "containers", "refused"),
    [
        (
            "Collocation with transformer has storage uri specified",
            [("kserve-container", True), ("transformer-container", True)],
            True,
        ),
        (
            "Collocation with no storage uri specified",
            [("kserve-container", False), ("transformer-container", False)],
            False,
        ),
        (
            "Collocation with predictor has storage uri specified",
            [("kserve-container", True), ("transformer-container", False)],
            False,
        ),
        ("Custom predictor with no collocation", [("kserve-container", True)], False),
    ],
)
def test_collocation_storage_uri(
    case: str, containers: list[tuple[str, bool]], refused: bool
) -> None:
    predictor = {"containers": [_container(n, s) for n, s in containers]}
    found = validate_collocation_storage_uri(predictor)
    assert [f.message for f in found] == (
        ["storage uri should not be specified in transformer container"] if refused else []
    )
    if refused:
        assert found[0].path == ("spec", "predictor", "containers", 1, "env", 0)
    # "Predictor with no collocation"
    assert validate_collocation_storage_uri(tf()) == []


# -- TestValidateStorageUriSpec / TestValidateStorageUri ------------------------------------


@pytest.mark.parametrize(
    ("case", "entry", "wanted"),
    [
        ("ValidStorageUriSpec", {"uri": "gs://bucket/model", "mountPath": "/mnt/models"}, None),
        (
            "ValidStorageUriSpecWithRootPath",
            {"uri": "s3://bucket/model", "mountPath": "/"},
            "storage path cannot be empty",
        ),
        ("EmptyUri", {"uri": "", "mountPath": "/mnt/models"}, "storage URI cannot be empty"),
        (
            "RelativePath",
            {"uri": "gs://bucket/model", "mountPath": "mnt/models"},
            "storage path must be absolute: mnt/models",
        ),
    ],
)
def test_storage_uri_spec(case: str, entry: Doc, wanted: str | None) -> None:
    messages = [f.message for f in validate_storage_uri_spec(entry, ())]
    assert messages == ([] if wanted is None else [wanted])


@pytest.mark.parametrize(
    ("case", "entries", "wanted"),
    [
        ("EmptyList", [], None),
        ("SingleValidStorageUri", [("gs://bucket/model1", "/mnt/models")], None),
        (
            "MultipleValidStorageUrisWithCommonParent",
            [
                ("gs://bucket/model1", "/mnt/models/model1"),
                ("s3://bucket/model2", "/mnt/models/model2"),
            ],
            None,
        ),
        (
            "MultipleStorageUrisWithoutCommonParent",
            [("gs://bucket/model1", "/mnt/models"), ("s3://bucket/model2", "/opt/models")],
            "storage paths must have a common parent directory",
        ),
        (
            "InvalidStorageUriInList",
            [("gs://bucket/model1", "/mnt/models"), ("", "/mnt/models/model2")],
            "storage URI cannot be empty",
        ),
        (
            "RelativePathInList",
            [("gs://bucket/model1", "/mnt/models"), ("s3://bucket/model2", "mnt/models/model2")],
            "storage path must be absolute: mnt/models/model2",
        ),
    ],
)
def test_multiple_storage_uris(
    case: str, entries: list[tuple[str, str]], wanted: str | None
) -> None:
    docs = [{"uri": uri, "mountPath": mount} for uri, mount in entries]
    messages = [f.message for f in validate_multiple_storage_uris_spec(docs, ())]
    if wanted is None:
        assert messages == []
    else:
        assert wanted in messages[0]


def test_no_common_parent_message_lists_the_paths_like_go() -> None:
    docs = [
        {"uri": "gs://a", "mountPath": "/mnt/models"},
        {"uri": "s3://b", "mountPath": "/opt/models"},
    ]
    [finding] = validate_multiple_storage_uris_spec(docs, ("spec", "predictor", "storageUris"))
    assert finding.message == (
        "storage paths must have a common parent directory. Current paths: "
        "[/mnt/models /opt/models] have no common parent beyond root"
    )


def test_storage_uri_and_storage_uris_not_both() -> None:
    doc = isvc(
        {
            "model": model("gs://a/b"),
            "storageUris": [{"uri": "gs://c/d", "mountPath": "/mnt/models"}],
        }
    )
    assert first_error(doc) == "Setting both StorageURI and StorageURIs is not supported."


# -- TestValidateBlockedEnvVars ---------------------------------------------------------------

_PY = [{"name": "PYTHONPATH", "value": "/injected"}]


def _blocked(predictor: Doc, **spec: Any) -> Doc:
    doc = isvc({"model": {"modelFormat": {"name": "sklearn"}}, **predictor}, **spec)
    doc["metadata"] = {"name": "test-isvc"}
    return doc


BLOCKED_CASES: dict[str, tuple[Doc, bool]] = {
    "PYTHONPATH in predictor model env should be rejected": (
        _blocked({"model": {"modelFormat": {"name": "sklearn"}, "env": _PY}}),
        True,
    ),
    "PYTHONPATH in predictor custom container should be rejected": (
        {
            **_blocked({}),
            "spec": {"predictor": {"containers": [{"name": "kserve-container", "env": _PY}]}},
        },
        True,
    ),
    "PYTHONPATH in workerSpec container should be rejected": (
        _blocked({"workerSpec": {"containers": [{"name": "worker", "env": _PY}]}}),
        True,
    ),
    "PYTHONPATH in transformer container should be rejected": (
        _blocked({}, transformer={"containers": [{"name": "transformer", "env": _PY}]}),
        True,
    ),
    "allowed env vars should pass": (
        _blocked(
            {
                "model": {
                    "modelFormat": {"name": "sklearn"},
                    "env": [{"name": "MODEL_NAME", "value": "my-model"}],
                }
            }
        ),
        False,
    ),
    "PYTHONPATH in explainer ART container should be rejected": (
        _blocked({}, explainer={"art": {"type": "SquareAttack", "env": _PY}}),
        True,
    ),
    "PYTHONPATH in predictor initContainer should be rejected": (
        _blocked({"initContainers": [{"name": "init-setup", "env": _PY}]}),
        True,
    ),
    "PYTHONPATH in workerSpec initContainer should be rejected": (
        _blocked({"workerSpec": {"initContainers": [{"name": "init-worker", "env": _PY}]}}),
        True,
    ),
    "PYTHONPATH in explainer initContainer should be rejected": (
        _blocked(
            {},
            explainer={
                "art": {"type": "SquareAttack"},
                "initContainers": [{"name": "init-explainer", "env": _PY}],
            },
        ),
        True,
    ),
    "PYTHONPATH in transformer initContainer should be rejected": (
        _blocked(
            {},
            transformer={
                "containers": [{"name": "t"}],
                "initContainers": [{"name": "init-transform", "env": _PY}],
            },
        ),
        True,
    ),
    "no env vars should pass": (_blocked({}), False),
}


@pytest.mark.parametrize("case", sorted(BLOCKED_CASES))
def test_blocked_env_vars(case: str) -> None:
    doc, refused = BLOCKED_CASES[case]
    blocked = [e for e in admit_inferenceservice(doc) if "PYTHONPATH" in e]
    assert bool(blocked) == refused, admit_inferenceservice(doc)


def test_blocked_env_var_message() -> None:
    doc = _blocked({"initContainers": [{"name": "init-setup", "env": _PY}]})
    [finding] = [f for f in webhook_findings(doc) if "PYTHONPATH" in f.message]
    assert finding.message == (
        'the InferenceService "test-isvc" is invalid: setting PYTHONPATH in container '
        '"init-setup" is not allowed for security reasons'
    )
    assert finding.path == ("spec", "predictor", "initContainers", 0, "env", 0)
