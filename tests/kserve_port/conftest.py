"""A cluster for the port's end-to-end checks: the emulated API, the stand-in, a clock."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from tests.support.kserve import Kind, KServeConfig, KServeSim
from tests.support.kube_api import KubeAPI

NAMESPACE = "models"
GROUP, VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def isvc(name: str, mode: str, uri: str = "s3://models/v1", **predictor: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
        "metadata": {"name": name, "namespace": NAMESPACE,
                     "annotations": {"serving.kserve.io/deploymentMode": mode}},
        "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}, "storageUri": uri},
                               **predictor}},
    }


@dataclass
class Cluster:
    api: KubeAPI
    sim: KServeSim
    clock: Clock
    custom: Any
    apps: Any
    core: Any

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return dict(self.custom.create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, copy.deepcopy(obj)))

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                             name))

    def patch(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL,
                                                               name, body))

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds
        self.sim.reconcile()

    def obj(self, kind: Kind, name: str) -> dict[str, Any] | None:
        """An object as the API stores it (the typed clients drop unknown fields)."""
        return self.sim.get(kind, name)


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    server = KubeAPI().start()
    yield server
    server.stop()


@pytest.fixture
def cluster(api: KubeAPI) -> Callable[..., Cluster]:
    def make(config: KServeConfig | None = None, ready_delay_s: float = 0.0) -> Cluster:
        api_client = api.api_client()
        clock = Clock()
        sim = KServeSim(api_client, NAMESPACE, clock=clock, ready_delay_s=ready_delay_s,
                        **({"config": config} if config is not None else {}))
        return Cluster(api, sim, clock, client.CustomObjectsApi(api_client),
                       client.AppsV1Api(api_client), client.CoreV1Api(api_client))
    return make
