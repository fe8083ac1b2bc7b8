"""Each broken fixture fails with the expected message at the expected place: the
semantic rules, strict schema validation (a typo, a wrong type), unknown kinds and
malformed YAML."""

from __future__ import annotations

from typing import Any

import pytest

from deploycheck import Checker
from tests.support.manifests import BROKEN

# (fixture, document, path, a piece of the message): every problem the file must raise,
# and no other.
CASES = {
    "gpu-request-not-limit.yaml": [
        (
            0,
            "$.spec.predictor.model.resources",
            "GPU request must equal limit (nvidia.com/gpu request 1 != limit 2)",
        ),
    ],
    "canary-percent-standard.yaml": [
        (
            0,
            "$.spec.predictor.canaryTrafficPercent",
            "canaryTrafficPercent only works in Knative mode",
        ),
    ],
    "canary-list-knative.yaml": [
        (0, "$.spec.canary", "canary is only supported in Standard deployment mode"),
    ],
    "image-latest.yaml": [
        (0, "$.spec.containers[0].image", "uses tag latest"),
        (1, "$.spec.template.spec.containers[0].image", "has no tag, which means latest"),
    ],
    "no-resources.yaml": [
        (
            0,
            "$.spec.template.spec.initContainers[0].resources",
            'container "prepare" has no resources.requests.memory, resources.limits.memory',
        ),
        (0, "$.spec.template.spec.containers[0]", 'container "run" has no resources'),
    ],
    "typo-field.yaml": [
        (0, "$.spec.predictor.canaryTraficPercent", 'unknown field "canaryTraficPercent"'),
    ],
    "wrong-type.yaml": [
        (0, "$.spec.predictor.maxReplicas", "must be integer, not string ('four')"),
    ],
    "unknown-kind.yaml": [
        (
            0,
            "$.kind",
            "no schema for serving.kserve.io/v1alpha9 InferenceService (its CRD defines v1beta1)",
        ),
        (1, "$.kind", "no schema for example.com/v1 Widget"),
    ],
    "duplicate-key.yaml": [
        (0, "$", "not valid YAML: duplicate key 'name'"),
    ],
    "keda-wrong-isvc.yaml": [
        (
            0,
            "$.spec.predictor.autoScaling.metrics[0].external.metric.query",
            'query selects isvc="theirs" but this InferenceService is isvc "mine"',
        ),
    ],
    "knative-pod-security-context.yaml": [
        (
            0,
            "$.spec.predictor.securityContext",
            "Knative mode: Knative refuses securityContext on the pod unless config-features "
            "enables kubernetes.podspec-securitycontext",
        ),
    ],
    "metric-target-no-type.yaml": [
        (
            0,
            "$.spec.predictor.autoScaling.metrics[1].external.target",
            'target has no type: KServe\'s mutating webhook writes it back with type: "", '
            "which the API server then refuses (Unsupported value) before KServe's "
            "validator runs; write type: Value for value",
        ),
    ],
    "role-extra-verb.yaml": [
        (
            0,
            "$.rules[0].verbs[4]",
            'verb "update" on inferenceservices.serving.kserve.io is granted but no call '
            "under ok/ uses it",
        ),
        (
            0,
            "$.rules",
            'missing verb "list" on events, used by ok/kube_calls.py:17 (list_namespaced_event)',
        ),
    ],
}


@pytest.mark.parametrize("fixture", sorted(CASES))
def test_broken_fixture_fails_with_the_expected_message(fixture: str, checker: Checker) -> None:
    report = checker.check_paths([BROKEN / fixture])
    got = [(p.document, str(p).split(":", 3)[2], p.message) for p in report.problems]
    assert len(got) == len(CASES[fixture]), "\n".join(str(p) for p in report.problems)
    for (document, path, message), (got_doc, got_path, got_message) in zip(
        CASES[fixture], got, strict=True
    ):
        assert (got_doc, got_path) == (document, path), got_message
        assert message in got_message


def test_every_broken_fixture_is_covered() -> None:
    assert {p.name for p in BROKEN.glob("*.yaml")} == set(CASES)


def test_problem_lines_name_file_document_and_path(checker: Checker) -> None:
    [problem] = checker.check_paths([BROKEN / "typo-field.yaml"]).problems
    assert str(problem) == (
        f"{BROKEN / 'typo-field.yaml'}:0:$.spec.predictor.canaryTraficPercent: "
        'unknown field "canaryTraficPercent"'
    )


def test_mode_is_required_for_canary_fields(checker: Checker) -> None:
    doc: dict[str, Any] = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": "no-mode",
            "annotations": {"serving.kserve.io/deploymentMode": "Serverless"},
        },
        "spec": {
            "predictor": {
                "canaryTrafficPercent": 5,
                "model": {
                    "modelFormat": {"name": "modelctl"},
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "limits": {"memory": "1Gi"},
                    },
                },
            }
        },
    }
    # The legacy name Serverless is Knative mode: allowed.
    assert checker.check_document(doc) == []
    meta: dict[str, Any] = doc["metadata"]
    del meta["annotations"]
    [finding] = checker.check_document(doc)
    assert "no deployment mode (the cluster default decides)" in finding.message
    meta["annotations"] = {"serving.kserve.io/deploymentMode": "Raw"}
    messages = [f.message for f in checker.check_document(doc)]
    assert any("unknown deployment mode 'Raw'" in m for m in messages)


def test_gpu_limit_alone_is_fine_but_request_alone_is_not(checker: Checker) -> None:
    def job(resources: dict[str, dict[str, str]]) -> dict[str, object]:
        base = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}
        for key, extra in resources.items():
            base[key] = {**base[key], **extra}
        container = {"name": "c", "image": "x:1", "resources": base}
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
        }

    assert checker.check_document(job({"limits": {"nvidia.com/gpu": "1"}})) == []
    [finding] = checker.check_document(job({"requests": {"nvidia.com/gpu": "1"}}))
    assert "sets no limit" in finding.message
    [finding] = checker.check_document(
        job({"requests": {"amd.com/gpu": "0.5"}, "limits": {"amd.com/gpu": "0.5"}})
    )
    assert "must be a whole number" in finding.message


def test_invalid_names(checker: Checker) -> None:
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_DNS"}}
    [finding] = checker.check_document(doc)
    assert finding.message == "'Not_DNS' is not a DNS-1123 name"
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}
    [finding] = checker.check_document(doc)
    assert finding.message == 'missing required field "name"'
