"""Every overlay, rendered by ``deploy render``'s code, against the real API server (CRD
schemas, Kubernetes' own validation) and KServe's real webhooks: a server-side dry run,
and ``deploy validate``'s offline port agreeing with it. The Standard-mode overlays are
then applied for real and their InferenceService reaches Ready under KServe's own
controller (Knative Serving is built but not started here, so the Knative-mode ones stop
at the dry run)."""

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
        world: RealWorld, overlay: str, checker: Checker) -> None:
    docs = _rendered(world, overlay)
    text = yaml.safe_dump_all(docs)
    offline, _ = checker.check_text(overlay, text)
    webhook = [str(p) for p in offline if "kserve-webhook" in str(p)]
    dry = world.cluster.kubectl("apply", "--server-side", "--dry-run=server",
                                "--field-manager", "modelctl-tests", "-f", "-", input=text,
                                check=False)
    assert dry.returncode == 0, f"{overlay}: KServe refuses it: {dry.stderr}"
    assert webhook == [], f"{overlay}: the offline port refuses what KServe accepts: {webhook}"
    if _mode(docs) != STANDARD:
        return
    world.cluster.apply(copy.deepcopy(docs))
    name = next(d["metadata"]["name"] for d in docs if d["kind"] == "InferenceService")
    world.wait_isvc(name, is_ready, "Ready", timeout_s=90.0)


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
