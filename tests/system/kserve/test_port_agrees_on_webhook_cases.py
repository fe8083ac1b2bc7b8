"""KServe's own webhook test cases, as ``tests/deploycheck`` transcribes them, sent to the
real API server with KServe v0.20.0's real webhooks (a dry-run create, or a dry-run
update of an object created for real): the real verdict must be the offline port's
(``deploy validate``'s ``admit_inferenceservice`` and ``admit_trainedmodel``), and a
refusal by KServe's validating webhook must carry the port's first error word for word.

Why: the port's unit tests show it does what KServe's Go tests expect of the validator
alone; this shows what a cluster does with the same documents, which also runs KServe's
mutating webhook (``InferenceServiceDefaulter.Default``) before the validator and the API
server's own validation (the CRD's schema, ``metadata.name``) between the two.

Where they part, the case is listed below with the KServe source that explains it. None
of them is a difference between v0.20.0 and aaac4e294, which the port follows: ``git diff
v0.20.0 aaac4e294`` changes neither ``inference_service_validation.go``,
``inference_service_defaults.go`` nor ``trainedmodel_webhook.go`` (in
``pkg/apis/serving/v1beta1`` only ``predictor_model.go``'s runtime sort moves). Each
listed difference is asserted to still hold, so a KServe bump that removes one fails here.
Where ``deploy validate`` catches a listed case by one of its rules rather than the port,
the case names what the rule says, and that is asserted too; and of all the cases,
``metric_targets_have_type`` flags exactly those the API server refuses for the target
type KServe's defaulter wrote as "".

Updates: the InferenceService tables hold creates only (KServe's update tests,
``TestDeploymentModeUpdate`` and ``TestValidatePredictorNameChange``, are inline cases
of ``test_webhook_canary.py``, not tables). The TrainedModel cases run as updates too,
less the renames, which no real update can make (they run as creates).

The documents go straight to the API server with httpx, as cluster-admin: a kubectl call
per case would cost more than the rest of the module.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import httpx
import pytest

from deploycheck import Checker, admit_inferenceservice, admit_trainedmodel
from tests.deploycheck.test_webhook import CREATE_CASES
from tests.deploycheck.test_webhook_canary import CANARY_CASES
from tests.deploycheck.test_webhook_storage import BLOCKED_CASES
from tests.deploycheck.test_webhook_trainedmodel import SHARED, UPDATE_ONLY, make_tm, updated
from tests.support.cluster._cluster import Cluster
from tests.support.procs import tls_context, wait_for

Doc = dict[str, Any]

# Who refused: the webhooks by the names their configurations give them
# (config/webhook/manifests.yaml), or the API server's own validation.
ISVC_VALIDATOR = "inferenceservice.kserve-webhook-server.validator"
ISVC_DEFAULTER = "inferenceservice.kserve-webhook-server.defaulter"
TM_VALIDATOR = "trainedmodel.kserve-webhook-server.validator"
API_SERVER = "kube-apiserver"  # the CRD's OpenAPI schema, metadata.name
ADMITTED = "admitted"
_DENIED = re.compile(r'admission webhook "([^"]+)" denied the request: (.*)', re.DOTALL)
_ISVCS = "/apis/serving.kserve.io/v1beta1/namespaces/{ns}/inferenceservices"
_TMS = "/apis/serving.kserve.io/v1alpha1/namespaces/{ns}/trainedmodels"
FIELD_MANAGER = "modelctl-tests"
PARENT = "parent"  # makeTestTrainModel's "Parent" is no valid InferenceService name


@dataclass(frozen=True)
class Case:
    doc: Doc
    old: Doc | None = None

    @property
    def is_trained_model(self) -> bool:
        return bool(self.doc["kind"] == "TrainedModel")

    def port(self) -> list[str]:
        admit = admit_trainedmodel if self.is_trained_model else admit_inferenceservice
        return admit(self.doc, self.old)


def _with_parent(tm: Doc) -> Doc:
    # The TrainedModel controller deletes a TrainedModel whose parent does not exist
    # (pkg/controller/v1alpha1/trainedmodel/controller.go, Reconcile), so the one an
    # update needs names a real InferenceService. No validator reads the field.
    out = copy.deepcopy(tm)
    if out["spec"]["inferenceService"] == "Parent":
        out["spec"]["inferenceService"] = PARENT
    return out


def _creates() -> dict[str, Case]:
    cases = {f"create:{name}": Case(doc) for name, (doc, _) in CREATE_CASES.items()}
    cases |= {f"canary:{name}": Case(doc) for name, (doc, _) in CANARY_CASES.items()}
    cases |= {f"blocked:{name}": Case(doc) for name, (doc, _) in BLOCKED_CASES.items()}
    cases |= {f"tm:{scenario}": Case(updated(field, value))
              for scenario, field, value, _ in SHARED}
    return cases


def _updates() -> dict[str, Case]:
    return {f"tm-update:{scenario}": Case(_with_parent(updated(field, value)),
                                          old=_with_parent(make_tm()))
            for scenario, field, value, _ in SHARED + UPDATE_ONLY if field != "name"}


CREATES = _creates()
UPDATES = _updates()


class Verdict(NamedTuple):
    layer: str  # ADMITTED, a webhook's name, or API_SERVER
    message: str  # what refused it said, less the "denied the request" preamble


class RefusedFirst(NamedTuple):
    layer: str
    says: str  # in the real refusal
    port_refuses: bool  # the validator port's verdict (KServe's Go test expects it)
    why: str
    flagged: str = ""  # in what a rule of deploy validate says of it, where one does


_TARGET_TYPE = (
    "InferenceServiceDefaulter.Default (pkg/apis/serving/v1beta1/inference_service_defaults"
    ".go) answers the object re-encoded from Go, and MetricTarget.Type (component.go) is "
    'json:"type" without omitempty: a target written without a type comes back with type '
    '"", which the CRD\'s enum (Utilization, Value, AverageValue) refuses. KServe\'s Go test '
    "calls the validator directly, which admits it, as the port does; deploy validate's "
    "metric_targets_have_type rule flags it."
)
_UNTYPED_TARGET = 'target.type: Unsupported value: ""'
_UNTYPED_FLAGGED = 'target has no type: KServe\'s mutating webhook writes it back with type: ""'
_K8S_NAME = (
    "metadata.name must be a lowercase RFC 1123 subdomain for every object (the API "
    "server's ObjectMeta validation), before any validating webhook; KServe's Go test "
    "calls validateTrainedModelName directly. deploy validate's names_are_dns rule refuses "
    "it too."
)
_NOT_DNS = "is not a DNS-1123 name"
# Refused before the validating webhook saw them: the port models that webhook alone, so
# its verdict is the validator's, as KServe's own Go test expects it.
REFUSED_BEFORE_THE_VALIDATOR: dict[str, RefusedFirst] = {
    "create:HPA/Valid HPA CPU metrics with Autoscaling spec": RefusedFirst(
        API_SERVER, _UNTYPED_TARGET, False, _TARGET_TYPE, _UNTYPED_FLAGGED),
    "create:HPA/Valid HPA Memory metrics with Autoscaling spec": RefusedFirst(
        API_SERVER, _UNTYPED_TARGET, False, _TARGET_TYPE, _UNTYPED_FLAGGED),
    "create:RejectModelSpecMissing": RefusedFirst(
        ISVC_DEFAULTER, "panic: runtime error: index out of range [0] with length 0", True,
        "InferenceService.DefaultInferenceService calls setLocalModelLabel "
        "(inference_service_defaults.go), whose PredictorSpec.GetImplementation "
        "(predictor.go) indexes GetImplementations()[0] of a predictor with none: the "
        "defaulter panics, and controller-runtime answers the panic as a refusal. The "
        "validator, never reached, would refuse it as the port does (exactly one of ...)."),
    "tm:alphanumeric model name": RefusedFirst(
        API_SERVER, 'metadata.name: Invalid value: "Abc-123"', False, _K8S_NAME,
        _NOT_DNS),
    "tm:name starts with dash": RefusedFirst(
        API_SERVER, 'metadata.name: Invalid value: "-abc-3"', False, _K8S_NAME,
        _NOT_DNS),
    "tm:name ends with dash": RefusedFirst(
        API_SERVER, 'metadata.name: Invalid value: "abc-3-"', False, _K8S_NAME,
        _NOT_DNS),
    "tm:name includes spaces": RefusedFirst(
        API_SERVER, 'metadata.name: Invalid value: "abc 123"', True, _K8S_NAME,
        _NOT_DNS),
}
# Refused by the validator for the port's reason, naming the container as the defaulter
# renamed it before the validator ran (the port does no defaulting).
RENAMED_BY_THE_DEFAULTER: dict[str, str] = {
    "blocked:PYTHONPATH in transformer container should be rejected":
        "CustomTransformer.Default (transformer_custom.go) names the first container "
        "kserve-container",
    "blocked:PYTHONPATH in explainer ART container should be rejected":
        "ARTExplainerSpec.Default (explainer_art.go) names the container kserve-container",
}
_CONTAINER = re.compile(r'in container "[^"]*"')


def verdict(response: httpx.Response) -> Verdict:
    """Who refused, and what it said; anything but an answer (a webhook that could not be
    called, a 403) fails the test instead of passing for a refusal."""
    if response.is_success:
        return Verdict(ADMITTED, "")
    status = response.json()
    message = str(status.get("message", ""))
    denied = _DENIED.match(message)
    if denied:
        return Verdict(denied[1], denied[2])
    if response.status_code == 422 and status.get("reason") == "Invalid":
        return Verdict(API_SERVER, message)
    raise AssertionError(f"no verdict: HTTP {response.status_code}: {message}")


class WebhookApi:
    """One namespace of the real API server, spoken to as cluster-admin."""

    def __init__(self, http: httpx.Client, namespace: str) -> None:
        self.http = http
        self.namespace = namespace

    def _collection(self, doc: Doc) -> str:
        plural = _TMS if doc["kind"] == "TrainedModel" else _ISVCS
        return plural.format(ns=self.namespace)

    def _here(self, doc: Doc) -> Doc:
        out = copy.deepcopy(doc)
        out["metadata"]["namespace"] = self.namespace
        return out

    def dry_create(self, doc: Doc) -> Verdict:
        return verdict(self.http.post(self._collection(doc), params={"dryRun": "All"},
                                      json=self._here(doc)))

    def apply(self, doc: Doc, *, dry_run: bool) -> httpx.Response:
        """A server-side apply: an update where the object exists, a create where not."""
        params = {"fieldManager": FIELD_MANAGER, "force": "true"}
        if dry_run:
            params["dryRun"] = "All"
        return self.http.patch(
            f"{self._collection(doc)}/{doc['metadata']['name']}", params=params,
            content=json.dumps(self._here(doc)),
            headers={"Content-Type": "application/apply-patch+yaml"})

    def get(self, doc: Doc) -> Doc | None:
        found = self.http.get(f"{self._collection(doc)}/{doc['metadata']['name']}")
        return found.json() if found.is_success else None

    def create_reconciled(self, doc: Doc) -> None:
        """Create ``doc`` for real and wait until its controller has added its finalizer
        (so the manager's cache, which every KServe controller shares, holds it)."""
        created = self.apply(doc, dry_run=False)
        assert created.status_code == 201, created.text
        wait_for(lambda: (self.get(doc) or {}).get("metadata", {}).get("finalizers"),
                 timeout_s=30.0, what=f"{doc['kind']} {doc['metadata']['name']} reconciled")


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Iterator[WebhookApi]:
    # One namespace for the module: a dry run stores nothing, so the cases cannot meet.
    namespace = cluster.new_namespace("webhook")
    plane = cluster.plane
    tls = tls_context(str(plane.pki.ca.cert), (str(plane.admin.cert), str(plane.admin.key)))
    with httpx.Client(base_url=plane.server, verify=tls, timeout=30.0) as http:
        yield WebhookApi(http, namespace)


@pytest.fixture(scope="module")
def old_trainedmodel(api: WebhookApi) -> Doc:
    """makeTestTrainModel, stored, under a parent InferenceService that exists."""
    api.create_reconciled({
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": PARENT,
                     "annotations": {"serving.kserve.io/deploymentMode": "Standard"}},
        "spec": {"predictor": {"containers": [
            {"name": "kserve-container", "image": "example.com/parent:1"}]}},
    })
    old = _with_parent(make_tm())
    api.create_reconciled(old)
    return old


def judge(name: str, case: Case, real: Verdict, checker: Checker) -> None:
    """The real verdict against the port's, or against the listed reason they part."""
    port = case.port()
    said = [f.message for f in checker.check_document(case.doc)]
    is_refused_untyped = real.layer == API_SERVER and _UNTYPED_TARGET in real.message
    assert any(m.startswith(_UNTYPED_FLAGGED) for m in said) == is_refused_untyped, (
        f"deploy validate's metric_targets_have_type and the cluster part: {real}", said)
    first = REFUSED_BEFORE_THE_VALIDATOR.get(name)
    if first is not None:
        assert real.layer == first.layer and first.says in real.message, (real, first.why)
        assert bool(port) == first.port_refuses, port
        assert not first.flagged or any(first.flagged in m for m in said), said
        return
    if not port:
        assert real == Verdict(ADMITTED, ""), f"the port admits it, the cluster: {real}"
        return
    validator = TM_VALIDATOR if case.is_trained_model else ISVC_VALIDATOR
    assert real.layer == validator, f"the port refuses it ({port[0]}), the cluster: {real}"
    if name in RENAMED_BY_THE_DEFAULTER:
        assert real.message != port[0], f"no longer renamed: {RENAMED_BY_THE_DEFAULTER[name]}"
        assert real.message == _CONTAINER.sub('in container "kserve-container"', port[0])
    else:
        assert real.message == port[0]


@pytest.mark.parametrize("name", sorted(CREATES))
def test_a_create_is_judged_as_the_port_judges_it(
        api: WebhookApi, checker: Checker, name: str) -> None:
    case = CREATES[name]
    judge(name, case, api.dry_create(case.doc), checker)


@pytest.mark.parametrize("name", sorted(UPDATES))
def test_a_trainedmodel_update_is_judged_as_the_port_judges_it(
        api: WebhookApi, old_trainedmodel: Doc, checker: Checker, name: str) -> None:
    case = UPDATES[name]
    assert case.old == old_trainedmodel
    response = api.apply(case.doc, dry_run=True)
    # 201 would be a create: the stored object gone, and the update rules never run.
    assert response.status_code != 201, "the old TrainedModel is gone"
    judge(name, case, verdict(response), checker)


_UNTYPED = [name for name, first in REFUSED_BEFORE_THE_VALIDATOR.items()
            if first.flagged == _UNTYPED_FLAGGED]
_WRITE_TYPE = re.compile(r".*; write type: (\w+) for \w+")


@pytest.mark.parametrize("name", _UNTYPED)
def test_an_untyped_target_typed_as_deploy_validate_says_is_admitted(
        api: WebhookApi, checker: Checker, name: str) -> None:
    # The fix the rule's message names is one a real cluster takes.
    doc = copy.deepcopy(CREATES[name].doc)
    [finding] = [f for f in checker.check_document(doc) if f.message.startswith(_UNTYPED_FLAGGED)]
    fix = _WRITE_TYPE.fullmatch(finding.message)
    assert fix is not None, finding.message
    target: Any = doc
    for part in finding.path:
        target = target[part]
    target["type"] = fix[1]
    assert api.dry_create(doc) == Verdict(ADMITTED, "")


def test_every_listed_difference_is_a_case() -> None:
    listed = set(REFUSED_BEFORE_THE_VALIDATOR) | set(RENAMED_BY_THE_DEFAULTER)
    assert listed <= set(CREATES) | set(UPDATES), listed - set(CREATES) - set(UPDATES)
