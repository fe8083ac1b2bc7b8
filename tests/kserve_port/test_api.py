"""The emulated API server, through the official client: what a real one does that the
stand-in and modelctl rely on (generation, resourceVersion, subresources, replace vs merge,
admission)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kserve_port.conftest import GROUP, NAMESPACE, PLURAL, VERSION, Cluster, isvc
from tests.support.kube_api import KubeAPI


def test_status_writes_leave_generation_alone_and_spec_writes_move_it(
        cluster: Callable[..., Cluster]) -> None:
    c = cluster()
    created = c.create(isvc("demo", "Knative"))
    meta = created["metadata"]
    assert meta["generation"] == 1 and meta["uid"] and meta["creationTimestamp"]
    status = c.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NAMESPACE, PLURAL, "demo", {"status": {"observedGeneration": 1},
                                                    "spec": {"predictor": {"minReplicas": 9}}})
    assert status["metadata"]["generation"] == 1  # status only: the spec part is ignored
    assert "minReplicas" not in status["spec"]["predictor"]
    assert int(status["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    labelled = c.patch("demo", {"metadata": {"labels": {"team": "search"}}})
    assert labelled["metadata"]["generation"] == 1  # metadata is not what generation counts
    moved = c.patch("demo", {"spec": {"predictor": {"minReplicas": 2}},
                             "status": {"observedGeneration": 99}})
    assert moved["metadata"]["generation"] == 2
    assert moved["status"] == {"observedGeneration": 1}  # the object write ignores status
    again = c.patch("demo", {"spec": {"predictor": {"minReplicas": 2}}})
    assert again["metadata"]["resourceVersion"] == moved["metadata"]["resourceVersion"]
    assert again["metadata"]["generation"] == 2  # a write that changes nothing is a no-op


def test_put_replaces_and_checks_the_resource_version(cluster: Callable[..., Cluster]) -> None:
    c = cluster()
    current = c.create(isvc("demo", "Knative", minReplicas=3))
    body = {**current, "spec": {"predictor": {"model": current["spec"]["predictor"]["model"]}}}
    replaced = c.custom.replace_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                         "demo", body)
    assert "minReplicas" not in replaced["spec"]["predictor"]  # PUT replaces, PATCH merges
    assert replaced["metadata"]["generation"] == 2
    assert replaced["metadata"]["uid"] == current["metadata"]["uid"]
    with pytest.raises(ApiException) as stale:
        c.custom.replace_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "demo",
                                                  body)  # the resourceVersion of before
    assert stale.value.status == 409


def test_a_json_patch_is_applied(cluster: Callable[..., Cluster]) -> None:
    c = cluster()
    c.create(isvc("demo", "Knative"))
    api = client.ApiClient(client.Configuration(host=c.api.host))
    apps = client.AppsV1Api(api)
    body = {"metadata": {"name": "d", "annotations": {"a": "1"}},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    created = apps.create_namespaced_deployment(NAMESPACE, body)
    assert created.spec.replicas == 1 and created.spec.progress_deadline_seconds == 600
    patched = apps.patch_namespaced_deployment(
        "d", NAMESPACE, [{"op": "replace", "path": "/metadata/annotations/a", "value": "2"}])
    assert patched.metadata.generation == 2  # Deployment: annotations count too
    scaled = apps.patch_namespaced_deployment("d", NAMESPACE, {"spec": {"replicas": 3}})
    assert scaled.metadata.generation == 3 and scaled.spec.replicas == 3


@pytest.mark.parametrize("kind", ["configmap", "lease", "crd"])
def test_configmaps_leases_and_crds_work_like_inference_services(api: KubeAPI, kind: str) -> None:
    api_client = api.api_client()
    core = client.CoreV1Api(api_client)
    coord = client.CoordinationV1Api(api_client)
    ext = client.ApiextensionsV1Api(api_client)
    crd_body: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object"}}}]}}
    ops: dict[str, tuple[Any, ...]] = {
        "configmap": (
            lambda: core.create_namespaced_config_map(NAMESPACE, {
                "metadata": {"name": "x"}, "data": {"k": "1"}}),
            lambda: core.read_namespaced_config_map("x", NAMESPACE),
            lambda: core.list_namespaced_config_map(NAMESPACE).items,
            lambda body: core.patch_namespaced_config_map("x", NAMESPACE, body),
            lambda body: core.replace_namespaced_config_map("x", NAMESPACE, body),
            lambda: core.delete_namespaced_config_map("x", NAMESPACE),
            {"data": {"k": "2"}}),
        "lease": (
            lambda: coord.create_namespaced_lease(NAMESPACE, {
                "metadata": {"name": "x"}, "spec": {"holderIdentity": "a"}}),
            lambda: coord.read_namespaced_lease("x", NAMESPACE),
            lambda: coord.list_namespaced_lease(NAMESPACE).items,
            lambda body: coord.patch_namespaced_lease("x", NAMESPACE, body),
            lambda body: coord.replace_namespaced_lease("x", NAMESPACE, body),
            lambda: coord.delete_namespaced_lease("x", NAMESPACE),
            {"spec": {"holderIdentity": "b"}}),
        "crd": (
            lambda: ext.create_custom_resource_definition(crd_body),
            lambda: ext.read_custom_resource_definition("widgets.example.com"),
            lambda: ext.list_custom_resource_definition().items,
            lambda body: ext.patch_custom_resource_definition("widgets.example.com", body),
            lambda body: ext.replace_custom_resource_definition("widgets.example.com", body),
            lambda: ext.delete_custom_resource_definition("widgets.example.com"),
            {"spec": {"scope": "Cluster"}}),
    }
    create, read, listing, patch, replace, delete, change = ops[kind]
    first = create()
    assert first.metadata.resource_version and len(listing()) == 1
    patched = patch(change)
    assert patched.metadata.resource_version != first.metadata.resource_version
    stale = api_client.sanitize_for_serialization(first)
    with pytest.raises(ApiException) as conflict:
        replace(stale)  # first's resourceVersion is no longer current
    assert conflict.value.status == 409
    fresh = api_client.sanitize_for_serialization(read())
    assert replace(fresh).metadata.resource_version == fresh["metadata"]["resourceVersion"]
    fresh.setdefault("metadata", {})["labels"] = {"touched": "yes"}  # unchanged: a no-op
    assert replace(fresh).metadata.resource_version != fresh["metadata"]["resourceVersion"]
    if kind != "configmap":  # spec changed: generation moved
        assert read().metadata.generation == 2
    delete()
    with pytest.raises(ApiException) as gone:
        read()
    assert gone.value.status == 404


def test_the_validating_webhook_refuses_like_the_api_server(
        cluster: Callable[..., Cluster]) -> None:
    """Create and update (after the merge) go through ``admit_inferenceservice``; a denial
    is 403 Forbidden with the API server's wording; ``/status`` is not admitted."""
    c = cluster()
    bad = isvc("demo", "Knative")
    bad["spec"]["predictor"]["sklearn"] = {"storageUri": "s3://x"}  # two implementations
    with pytest.raises(ApiException) as refused:
        c.create(bad)
    assert (refused.value.status, refused.value.reason) == (403, "Forbidden")
    message = json.loads(refused.value.body)["message"]
    assert message.startswith('admission webhook "inferenceservice.kserve-webhook-server.'
                              'validator" denied the request: '), message
    c.create(isvc("demo", "Knative"))
    with pytest.raises(ApiException) as update:
        c.patch("demo", {"spec": {"canary": [{"trafficPercent": 10, "predictor": {
            "name": "v2", "model": {"modelFormat": {"name": "sklearn"},
                                    "storageUri": "s3://v2"}}}]}})
    assert update.value.status == 403 and "Standard deployment mode" in str(update.value.body)
    assert "canary" not in c.get("demo")["spec"]
    c.custom.patch_namespaced_custom_object_status(GROUP, VERSION, NAMESPACE, PLURAL, "demo", {
        "status": {"deploymentMode": "Knative"}})
    assert c.get("demo")["status"]["deploymentMode"] == "Knative"
