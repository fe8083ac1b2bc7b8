"""``metric_targets_have_type``: an autoscaling metric target written without a ``type``
is flagged wherever the CRD has one (the predictor, transformer, explainer and each
canary entry's predictor; resource, external and podmetric metrics), because KServe's
mutating webhook writes it back as ``type: ""`` and the API server refuses that
(tests/system/kserve/test_port_agrees_on_webhook_cases.py shows it on a real one). A
target that names its type stays clean."""

from __future__ import annotations

from typing import Any

import pytest

from deploycheck import Checker, admit_inferenceservice
from deploycheck._defaulter import METRIC_SOURCES, metric_targets_have_type
from tests.deploycheck.test_webhook import CREATE_CASES
from tests.deploycheck.webhook_docs import KEDA, STANDARD, isvc, model

Doc = dict[str, Any]
REFUSED = 'target has no type: KServe\'s mutating webhook writes it back with type: ""'
# KServe's own cases (inference_service_validation_test.go) whose targets have no type:
# its validator admits them, a real cluster does not.
KSERVE_UNTYPED = (
    "HPA/Valid HPA CPU metrics with Autoscaling spec",
    "HPA/Valid HPA Memory metrics with Autoscaling spec",
)
COMPONENTS = ("predictor", "transformer", "explainer", "canary")


def metric(source: str, target: Doc) -> Doc:
    """One metric of ``source`` (a key of MetricsSpec) aiming at ``target``."""
    kind = {"resource": "Resource", "external": "External", "podmetric": "PodMetric"}[source]
    body: Doc = ({"name": "cpu"} if source == "resource"
                 else {"metric": {"backend": "prometheus", "query": "sum(x)"}})
    return {"type": kind, source: {**body, "target": target}}


def scaled(component: str, *metrics: Doc) -> tuple[Doc, tuple[str | int, ...]]:
    """An InferenceService whose ``component`` scales on ``metrics``, and that component's
    path (a canary entry's predictor for ``canary``)."""
    scaling = {"autoScaling": {"metrics": list(metrics)}}
    if component == "canary":
        entry = {"predictor": {"name": "next", "model": model(), **scaling}, "trafficPercent": 10}
        canary = isvc({"model": model()}, STANDARD, canary=[entry])
        return canary, ("spec", "canary", 0, "predictor")
    if component == "predictor":
        return isvc({"model": model(), **scaling}, KEDA), ("spec", "predictor")
    extra = {component: {"containers": [{"name": "c", "image": "x:1"}], **scaling}}
    return isvc({"model": model()}, KEDA, **extra), ("spec", component)


@pytest.mark.parametrize("source", METRIC_SOURCES)
@pytest.mark.parametrize("component", COMPONENTS)
def test_an_untyped_target_is_flagged_wherever_the_crd_has_one(
        component: str, source: str) -> None:
    doc, path = scaled(component, metric(source, {"value": "10"}))
    [finding] = metric_targets_have_type(doc)
    assert finding.path == (*path, "autoScaling", "metrics", 0, source, "target")
    assert finding.message.startswith(REFUSED)


@pytest.mark.parametrize("source", METRIC_SOURCES)
@pytest.mark.parametrize("component", COMPONENTS)
def test_a_typed_target_stays_clean(component: str, source: str) -> None:
    doc, _ = scaled(component, metric(source, {"type": "Value", "value": "10"}))
    assert metric_targets_have_type(doc) == []


def test_only_the_untyped_target_of_several_is_flagged() -> None:
    doc, path = scaled(
        "predictor",
        metric("resource", {"type": "Utilization", "averageUtilization": 80}),
        metric("external", {"value": "64"}),
    )
    [finding] = metric_targets_have_type(doc)
    assert finding.path == (*path, "autoScaling", "metrics", 1, "external", "target")


@pytest.mark.parametrize(("field", "value", "kind"), [
    ("averageUtilization", 80, "Utilization"),
    ("averageValue", "1Gi", "AverageValue"),
    ("value", "10", "Value"),
])
def test_the_message_names_the_type_that_reads_the_value_written(
        field: str, value: object, kind: str) -> None:
    doc, _ = scaled("predictor", metric("resource", {field: value}))
    [finding] = metric_targets_have_type(doc)
    assert finding.message.endswith(f"; write type: {kind} for {field}")


def test_a_target_with_no_value_gets_every_type_and_its_field() -> None:
    doc, _ = scaled("predictor", metric("resource", {}))
    [finding] = metric_targets_have_type(doc)
    assert finding.message.endswith(
        "; write type: Utilization with averageUtilization or type: Value with value "
        "or type: AverageValue with averageValue")


def test_a_canary_entry_is_judged_as_written_not_merged() -> None:
    # KServe re-encodes the entry as written, so a stable predictor's untyped target is
    # one problem, not one more per canary entry that inherits it.
    stable = {"model": model(), "autoScaling": {"metrics": [metric("resource", {"value": "1"})]}}
    entry = {"predictor": {"name": "next", "model": model()}, "trafficPercent": 10}
    doc = isvc(stable, STANDARD, canary=[entry])
    assert [f.path[:2] for f in metric_targets_have_type(doc)] == [("spec", "predictor")]


def test_other_kinds_and_no_autoscaling_are_not_its_business() -> None:
    doc, _ = scaled("predictor", metric("resource", {"value": "1"}))
    assert metric_targets_have_type({**doc, "kind": "TrainedModel"}) == []
    assert metric_targets_have_type(isvc({"model": model()})) == []


@pytest.mark.parametrize("name", KSERVE_UNTYPED)
def test_kserves_untyped_cases_pass_the_validator_port_but_not_deploy_validate(
        name: str, checker: Checker) -> None:
    doc, expected = CREATE_CASES[name]
    assert expected is None and admit_inferenceservice(doc) == []
    assert [f for f in checker.check_document(doc) if f.message.startswith(REFUSED)]


def test_of_kserves_own_cases_only_the_untyped_ones_are_flagged() -> None:
    flagged = {name for name, (doc, _) in CREATE_CASES.items() if metric_targets_have_type(doc)}
    assert flagged == set(KSERVE_UNTYPED)
