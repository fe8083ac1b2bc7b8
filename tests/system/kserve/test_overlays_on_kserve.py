"""Every overlay, rendered by ``deploy render``'s code, against the real API server (CRD
schemas, Kubernetes' own validation) and KServe's and Knative's real webhooks: a
server-side dry run, and ``deploy validate``'s offline port agreeing with it. Each is then
applied for real and its InferenceService reaches Ready under KServe's own controller,
in Knative mode with Knative Serving's controller and autoscaler making the Knative
Service, its Revision and its Deployment. checkov then reads the Deployments the
controllers made from our InferenceService and ServingRuntime (it reads neither of
those): every finding is one of ``MADE_BY_KSERVE``'s, each with its reason."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploycheck import Checker, RenderRequest, find_kubectl, render
from tests.support.cluster._world import RealWorld, is_ready
from tests.support.manifests import OVERLAYS, overlay_names
from tests.support.rollout_world import MODEL

STANDARD = "Standard"
# checkov's findings on the predictor Deployments KServe (and Knative) build from ours,
# and why each stands; docs/RELIABILITY.md has the same table.
MADE_BY_KSERVE = {
    "CKV_K8S_11": "no CPU limit on the predictor, on purpose (a CFS quota shows as p99)",
    "CKV_K8S_40": "UID 1000, the user the image is built with (Dockerfile USER 1000)",
    "CKV_K8S_43": "images by release tag; pin digests where you deploy (docs/DEPLOY.md)",
    "CKV2_K8S_6": "predictors are reached from the cluster's ingress gateway, Knative's "
                  "activator and Prometheus, whose namespaces and labels vary by install",
}
# Knative's queue-proxy sidecar, which the cluster's config-deployment configures
# (queue-sidecar-* resources, its image) and Knative probes through: no limits, no
# memory request, its image and pull policy as the install names them, probes
# rewritten onto it.
KNATIVE_SIDECAR = {"CKV_K8S_8", "CKV_K8S_9", "CKV_K8S_12", "CKV_K8S_13", "CKV_K8S_14",
                   "CKV_K8S_15"}
# The queue frontends read the Redis password from MODELCTL_QUEUE_PASSWORD, as the
# workers do (kustomize/overlays/queue/worker.yaml's checkov.io/skip says why).
QUEUE_PASSWORD = "CKV_K8S_35"


def _rendered(world: RealWorld, overlay: str) -> list[dict[str, Any]]:
    reg = world.registry
    trained = (("demo-fixed", "2"),) if overlay == "multi-model" else ()
    return render(
        RenderRequest(MODEL, "1", overlay, namespace=world.namespace, trained_models=trained),
        OVERLAYS / overlay, find_kubectl(),
        # As an S3 registry names a version (registry/_s3_store.py): KServe's
        # TrainedModel webhook takes s3://, gs:// and http(s):// only.
        lambda model, ref: f"s3://models/registry/{model}/{reg.resolve(model, ref)}/",
        lambda model, ref: str(reg.resolve(model, ref)),
        lambda model, ref: {path: entry.size
                            for path, entry in reg.manifest(model, ref).files.items()},
    )


def _mode(docs: list[dict[str, Any]]) -> str | None:
    for doc in docs:
        if doc["kind"] == "InferenceService":
            return str(doc["metadata"].get("annotations", {}).get(
                "serving.kserve.io/deploymentMode"))
    return None


@pytest.mark.parametrize("overlay", overlay_names())
def test_the_overlay_is_what_the_real_api_server_and_webhook_accept(
        world: RealWorld, overlay: str, checker: Checker, tmp_path: Path) -> None:
    docs = _rendered(world, overlay)
    text = yaml.safe_dump_all(docs)
    offline, _ = checker.check_text(overlay, text)
    webhook = [str(p) for p in offline if "kserve-webhook" in str(p)]
    dry = world.cluster.kubectl("apply", "--server-side", "--dry-run=server",
                                "--field-manager", "modelctl-tests", "-f", "-", input=text,
                                check=False)
    assert dry.returncode == 0, f"{overlay}: KServe refuses it: {dry.stderr}"
    assert webhook == [], f"{overlay}: the offline port refuses what KServe accepts: {webhook}"
    world.cluster.apply(copy.deepcopy(docs))
    name = next(d["metadata"]["name"] for d in docs if d["kind"] == "InferenceService")
    found = world.wait_isvc(name, is_ready, "Ready", timeout_s=90.0)
    assert found["status"]["deploymentMode"] == _mode(docs)
    if _mode(docs) != STANDARD:  # Knative Serving made the revision that serves it
        traffic = found["status"]["components"]["predictor"]["traffic"]
        served = {t["revisionName"] for t in traffic if t.get("percent")}
        revisions = [world.get("revisions.serving.knative.dev", n) for n in served]
        assert served and all(r is not None and is_ready(r) for r in revisions), traffic
    found_by_checkov = _checkov_on_what_was_made(world, name, tmp_path)
    allowed = set(MADE_BY_KSERVE) | (KNATIVE_SIDECAR if _mode(docs) != STANDARD else set())
    allowed |= {QUEUE_PASSWORD} if overlay.startswith("queue") else set()
    assert found_by_checkov and found_by_checkov <= allowed, found_by_checkov - allowed
    if overlay == "gpu":  # scheduled where a GPU is, past the GPU nodes' taint
        nodes = world.cluster.kubectl(
            "get", "pods", "-n", world.namespace, "-l",
            f"serving.kserve.io/inferenceservice={name}",
            "-o", "jsonpath={.items[*].spec.nodeName}").stdout.split()
        assert nodes and set(nodes) == {"kwok-gpu-node-0"}, nodes


def _checkov_on_what_was_made(world: RealWorld, isvc: str, folder: Path) -> set[str]:
    """The check IDs checkov fails on the Deployments the controllers made for ``isvc``
    (as stored, less status and managed fields)."""
    from tests.manifests.test_checkov import run_checkov

    made = yaml.safe_load(world.cluster.kubectl(
        "get", "deployments", "-n", world.namespace, "-l",
        f"serving.kserve.io/inferenceservice={isvc}", "-o", "yaml").stdout)["items"]
    assert made, f"no Deployment made for {isvc}"
    for number, deployment in enumerate(made):
        deployment.pop("status", None)
        deployment["metadata"].pop("managedFields", None)
        deployment.update(apiVersion="apps/v1", kind="Deployment")
        (folder / f"made-{number}.yaml").write_text(yaml.safe_dump(deployment))
    return {check["check_id"] for check in run_checkov(folder)["failed_checks"]}


def test_a_refused_overlay_is_refused_by_both(world: RealWorld, checker: Checker,
                                              tmp_path: Path) -> None:
    """A canary entry with maxReplicas: KServe's validateCanarySpecs refuses it, and so
    does the offline port, with the same rule."""
    docs = _rendered(world, "standard-canary")
    isvc = next(d for d in docs if d["kind"] == "InferenceService")
    isvc["spec"]["canary"][0]["predictor"]["maxReplicas"] = 3
    text = yaml.safe_dump_all([isvc])
    offline, _ = checker.check_text("standard-canary", text)
    dry = world.cluster.kubectl("apply", "--server-side", "--dry-run=server",
                                "--field-manager", "modelctl-tests", "-f", "-", input=text,
                                check=False)
    assert dry.returncode != 0 and "denied the request" in dry.stderr, dry.stderr
    assert any("kserve-webhook" in str(p) and "maxReplicas" in str(p) for p in offline), offline


def test_a_pod_security_context_in_knative_mode_is_refused_by_both(
        world: RealWorld, checker: Checker) -> None:
    """Knative's webhook refuses a pod-level securityContext (config-features'
    kubernetes.podspec-securitycontext is disabled as shipped): KServe accepts the
    InferenceService, then its Knative Service is refused, so it never becomes Ready.
    ``deploy validate`` says so before anything is applied."""
    docs = _rendered(world, "cpu")
    isvc = next(d for d in docs if d["kind"] == "InferenceService")
    isvc["spec"]["predictor"]["securityContext"] = {"runAsNonRoot": True, "fsGroup": 1000}
    offline, _ = checker.check_text("cpu", yaml.safe_dump_all([isvc]))
    assert [p.message for p in offline if "podspec-securitycontext" in p.message], offline
    world.cluster.apply([isvc])
    name = isvc["metadata"]["name"]

    def refused(obj: dict[str, Any]) -> bool:
        return any(c.get("type") == "PredictorReady" and c.get("status") == "False"
                   and "must not set the field(s): spec.template.spec.securityContext"
                   in str(c.get("message")) for c in (obj.get("status") or {}).get(
                       "conditions") or [])

    found = world.wait_isvc(name, refused, "refused by Knative's webhook")
    assert not is_ready(found)
