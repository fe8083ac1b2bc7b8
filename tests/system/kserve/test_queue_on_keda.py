"""The queue overlay's workers under KEDA's real operator: its ScaledObject passes KEDA's
CRD, becomes an HPA, and scales the worker Deployment to zero while the stream is empty
and back up when a request waits, reading a real redis-server.

The one stand-in is the address: the overlay names Redis by its cluster DNS name
(``<model>-queue-redis.<namespace>.svc.cluster.local:6379``), which the operator, running
on this host, cannot resolve, so the test points each trigger at the local server."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploycheck import RenderRequest, find_kubectl, render
from tests.support.cluster._world import RealWorld
from tests.support.manifests import OVERLAYS
from tests.support.procs import wait_for
from tests.support.redis import RedisServer, own_redis_server
from tests.support.rollout_world import MODEL


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    folder = tmp_path / "redis"
    folder.mkdir()
    with own_redis_server(folder) as server:
        yield server


def _replicas(world: RealWorld, name: str) -> int:
    found = world.get("deployment", name) or {}
    return int((found.get("spec") or {}).get("replicas") or 0)


def _condition(obj: dict[str, Any] | None, kind: str) -> str | None:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def test_the_workers_scale_to_zero_and_back_on_the_stream(world: RealWorld,
                                                           redis: RedisServer) -> None:
    reg = world.registry
    docs = render(RenderRequest(MODEL, "1", "queue", namespace=world.namespace),
                  OVERLAYS / "queue", find_kubectl(),
                  lambda model, ref: f"s3://models/registry/{model}/{reg.resolve(model, ref)}/",
                  lambda model, ref: str(reg.resolve(model, ref)))
    scaler = next(d for d in docs if d["kind"] == "ScaledObject")
    workers = next(d for d in docs if d["kind"] == "Deployment")
    triggers = scaler["spec"]["triggers"]
    for trigger in triggers:
        trigger["metadata"]["address"] = f"127.0.0.1:{redis.port}"
    stream, group = (triggers[0]["metadata"][k] for k in ("stream", "consumerGroup"))
    client = redis.client()
    client.xgroup_create(stream, group, id="$", mkstream=True)  # as the first worker does
    world.cluster.apply([copy.deepcopy(d) for d in docs
                         if d["kind"] in ("Secret", "Deployment", "ScaledObject")])
    name = scaler["metadata"]["name"]
    hpa = wait_for(lambda: world.get("hpa", f"keda-hpa-{name}"), timeout_s=60.0,
                   what="KEDA's HPA for the workers")
    assert hpa["spec"]["scaleTargetRef"]["name"] == workers["metadata"]["name"]
    assert hpa["spec"]["maxReplicas"] == scaler["spec"]["maxReplicaCount"]
    wait_for(lambda: _condition(world.get("scaledobject", name), "Ready") == "True",
             timeout_s=60.0, what="the ScaledObject Ready (its scalers reach Redis)")
    deployment = workers["metadata"]["name"]
    wait_for(lambda: _replicas(world, deployment) == 0 or None, timeout_s=60.0,
             what="the workers scaled to zero on an empty stream")
    client.xadd(stream, {"request": "one"})  # one request waits: lag 1 > activation 0
    wait_for(lambda: _replicas(world, deployment) >= 1, timeout_s=60.0,
             what="the workers scaled from zero on the waiting request")
    assert _condition(world.get("scaledobject", name), "Active") == "True"
