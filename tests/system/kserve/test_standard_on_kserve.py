"""Standard-mode rollouts against the real KServe controller and webhooks (v0.20.0, built
from its Go module) on a real Kubernetes control plane with KWOK nodes.

Each test here covers one way the port in tests/support/kserve disagreed with KServe
(issue 31's cases 1-5 and 7), so each fails on the code before the fix. The rollout
authenticates as the ServiceAccount of manifests/30-rollout-rbac.yaml.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rollout import Command, Engine, Plan, RolloutError, start_rollout, wait_final
from rollout.backends._interface import SetWeight
from tests.support.cluster._kserve import shipped_config
from tests.support.cluster._world import RealWorld, is_ready
from tests.support.procs import wait_for
from tests.support.rollout_world import MODEL

ROOT = Path(__file__).resolve().parents[3]
PLAN = Plan(steps_pct=(50,), interval_s=30.0, failure_limit=1)


def _start(world: RealWorld, name: str, plan: Plan = PLAN) -> None:
    start_rollout(world.backend(name), world.registry, model=MODEL, ref="2", plan=plan,
                  clock=time.time)


def _available(world: RealWorld, deployment: str) -> int:
    found = world.get("deployment", deployment)
    return int(((found or {}).get("status") or {}).get("availableReplicas") or 0)


def _entry(obj: dict[str, Any]) -> dict[str, Any] | None:
    entries = (obj.get("spec") or {}).get("canary") or []
    return entries[0] if entries else None


def test_a_keda_scaled_canary_is_never_built_and_start_refuses_one(world: RealWorld) -> None:
    """Case 1: KServe builds the canary's ScaledObject from minReplicas alone; KEDA's CRD
    requires triggers, so the API server refuses it and the canary never becomes Ready."""
    keda = {"serving.kserve.io/autoscalerClass": "keda"}
    manifest = world.isvc_manifest("scaled", annotations=keda)
    manifest["spec"]["predictor"]["autoScaling"] = {"metrics": [{"type": "External", "external": {
        "metric": {"backend": "prometheus", "serverAddress": "http://127.0.0.1:9",
                   "query": "vector(0)"},
        "target": {"type": "Value", "value": "64"}}}]}
    world.create(manifest)
    assert world.get("scaledobject", "scaled-predictor") is not None  # the stable's has triggers
    # What the rollout would write, written by hand: KServe cannot build it.
    canary = world.isvc_manifest("scaled", annotations=keda)["spec"]["predictor"]["model"]
    patch = {"spec": {"canary": [{"trafficPercent": 10, "predictor": {
        "name": "v2", "minReplicas": 1,
        "model": {**canary, "name": "kserve-container", "storageUri": world.uri(2)}}}]}}
    world.cluster.kubectl("patch", "isvc", "scaled", "-n", world.namespace, "--type=merge",
                          "-p", json.dumps(patch))
    def refusals() -> list[str]:
        listed = json.loads(world.cluster.kubectl("get", "events", "-n", world.namespace,
                                                  "-o", "json").stdout)
        return [str(e.get("message")) for e in listed["items"]
                if "scaled-v2-predictor" in str(e.get("message"))
                and "triggers" in str(e.get("message"))]

    assert wait_for(refusals, timeout_s=60.0,
                    what="KServe's reconcile error about the canary's ScaledObject")
    assert world.get("scaledobject", "scaled-v2-predictor") is None
    statuses = (world.isvc("scaled").get("status") or {}).get("canaryStatuses") or []
    assert not [s for s in statuses if s.get("ready")]
    # modelctl refuses such a rollout at start, with the source and what to use instead.
    world.cluster.kubectl("patch", "isvc", "scaled", "-n", world.namespace, "--type=json",
                          "-p", '[{"op": "remove", "path": "/spec/canary"}]')
    world.wait_isvc("scaled", is_ready, "Ready again")
    with pytest.raises(RolloutError, match=r"autoscalerClass is 'keda'.*reconcileCanary"
                                           r"Deployments.*use autoscalerClass 'none'"):
        _start(world, "scaled")


def test_capacity_moves_before_the_weight(world: RealWorld) -> None:
    """Case 2: trafficPercent rises only once the canary Deployment has the pods for it,
    and the stable keeps its pods until then."""
    world.create(world.isvc_manifest("fleet", min_replicas=4))
    wait_for(lambda: _available(world, "fleet-predictor") == 4, timeout_s=60.0,
             what="a stable fleet of 4")
    world.wait_isvc("fleet", is_ready, "Ready at 4")  # KServe reports the scale-up after
    watched = world.watch(lambda: (
        int((_entry(world.isvc("fleet")) or {}).get("trafficPercent") or 0),
        _available(world, "fleet-v2-predictor"), _available(world, "fleet-predictor")))
    _start(world, "fleet")  # 50% of 4: a canary of 2
    engine = Engine(world.backend("fleet"), clock=time.time)
    backend = world.backend("fleet")
    wait_for(lambda: (engine.step(), backend.observe().requested_weight_pct == 50)[1],
             timeout_s=60.0, interval_s=0.2, what="the weight written")
    wait_for(lambda: _available(world, "fleet-v2-predictor") >= 2, timeout_s=30.0,
             what="the canary at 2 pods")
    time.sleep(1.0)
    samples = [s for _, s in watched.seen if isinstance(s, tuple)]
    weighted = [s for s in samples if s[0] == 50]
    assert weighted, samples
    assert all(canary >= 2 for _, canary, _ in weighted), samples  # pods before weight
    # Before the weight moved, the stable kept its 4 (KServe subtracts the canary's
    # intended size at once; the rollout raised the stable's minimum by as much).
    before = [s for s in samples if s[0] == 0 and s[1] >= 1]
    assert before and min(stable for *_, stable in before) == 4, samples
    entry = _entry(world.isvc("fleet"))
    assert entry is not None and entry["predictor"]["minReplicas"] == 2
    assert world.isvc("fleet")["spec"]["predictor"]["minReplicas"] == 4


def _rolled_back(world: RealWorld, name: str) -> None:
    engine = Engine(world.backend(name), clock=time.time, registry=world.registry)
    first = engine.step(Command("rollback", "test"))
    result = wait_final(engine, first, "rollback", timeout_s=60.0, poll_s=0.5,
                        sleep=time.sleep, monotonic=time.monotonic)
    assert result.is_final and result.seen.restored, result.waiting


def test_a_rollback_leaves_no_canary_pod_nor_autoscaler(world: RealWorld) -> None:
    """Cases 3 and 4: a drained entry (minReplicas 0) keeps one pod (createHPA floors at
    1) until the entry goes; then KServe deletes the canary's Deployment and Service but
    not its HPA, which the rollout deletes."""
    world.create(world.isvc_manifest("back"))
    _start(world, "back")
    engine = Engine(world.backend("back"), clock=time.time)
    wait_for(lambda: (engine.step(), _available(world, "back-v2-predictor") >= 1)[1],
             timeout_s=60.0, interval_s=0.2, what="the canary up")
    assert world.get("hpa", "back-v2-predictor") is not None
    # The drained entry as the rollback's first write makes it: one pod stays.
    backend = world.backend("back")
    seen = backend.observe()
    assert seen.state is not None
    backend.apply(seen, SetWeight(0), seen.state)
    drained = {**(_entry(world.isvc("back")) or {})}
    drained["predictor"] = {**drained["predictor"], "minReplicas": 0}
    world.cluster.kubectl("patch", "isvc", "back", "-n", world.namespace, "--type=merge",
                          "-p", json.dumps({"spec": {"canary": [drained]}}))
    wait_for(lambda: (world.get("hpa", "back-v2-predictor") or {}).get("spec", {}).get(
        "minReplicas") == 1, timeout_s=30.0, what="the canary's HPA floored at 1")
    assert _available(world, "back-v2-predictor") == 1
    _rolled_back(world, "back")
    wait_for(lambda: world.get("deployment", "back-v2-predictor") is None, timeout_s=30.0,
             what="KServe deleting the orphaned canary Deployment")
    assert "back-v2-predictor" not in world.names("hpa")
    assert world.names("hpa") == {"back-predictor"}


def test_a_canary_entry_names_the_model_format_the_crd_requires(world: RealWorld) -> None:
    """Case 5: the CRD requires name and modelFormat on spec.canary[].predictor.model;
    the entry for a stable that names none (only its runtime) still has both. (KServe
    v0.20.0 serves no such stable: "specified runtime does not support specified
    framework/version"; the entry is checked against the real CRD by a server-side dry
    run of the patch the rollout would send.)"""
    from rollout._state import RolloutState
    from rollout.backends._kserve import _standard as standard

    world.create(world.isvc_manifest("bare"))
    _start(world, "bare")
    state = world.backend("bare").observe().state
    assert isinstance(state, RolloutState)
    obj = world.isvc("bare")
    del obj["spec"]["predictor"]["model"]["modelFormat"]  # as a stable without one reads
    entry = standard.canary_entry(obj, "v2")
    assert entry is not None
    seen = standard.Seen(isvc={**obj, "spec": {**obj["spec"], "canary": None}},
                         stable_deployment=None, canary_deployment=None, route=None)
    spec = standard.spec_for(seen, SetWeight(50), state)
    model = spec["canary"][0]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "modelctl"} and model["name"] == "kserve-container"
    done = world.cluster.kubectl("patch", "isvc", "bare", "-n", world.namespace,
                                 "--type=merge", "--dry-run=server",
                                 "-p", json.dumps({"spec": spec}), check=False)
    assert done.returncode == 0, done.stderr
    # Without it the schema alone would refuse the entry; KServe v0.20.0's defaulting
    # webhook runs first (mutating admission precedes validation) and fills it in.
    bare = {"canary": [_without_format(spec["canary"][0])]}
    out = world.cluster.kubectl("patch", "isvc", "bare", "-n", world.namespace,
                                "--type=merge", "--dry-run=server", "-o", "json",
                                "-p", json.dumps({"spec": bare}), check=False)
    assert out.returncode == 0, out.stderr
    stored = json.loads(out.stdout)["spec"]["canary"][0]["predictor"]["model"]
    assert stored.get("modelFormat"), stored


def _route_at(isvc: str, service: str, pct: int) -> dict[str, Any]:
    """The HTTPRoute a KServe with canary weights writes (kserve#5912, after v0.20.0,
    which writes none): the decision's input only, since v0.20.0 cannot get there."""
    return {"spec": {"rules": [{"backendRefs": [
        {"name": f"{isvc}-predictor", "weight": 100 - pct},
        {"name": service, "weight": pct}]}]}}


def _replicasets_of(world: RealWorld, deployment: str) -> set[str]:
    listed = json.loads(world.cluster.kubectl("get", "replicasets", "-n", world.namespace,
                                              "-o", "json").stdout)["items"]
    return {r["metadata"]["name"] for r in listed
            if any(o.get("name") == deployment
                   for o in r["metadata"].get("ownerReferences") or [])}


def test_a_promoted_canary_runs_on_as_it_ran(world: RealWorld) -> None:
    """Case 6: promoting an adopted canary entry with args of its own (``--role=canary``
    here) makes the stable run exactly what the canary ran, so KServe keeps the canary's
    Deployment as the stable's without rolling it again (one ReplicaSet throughout)."""
    from rollout._state import RolloutState
    from rollout.backends._interface import Promote
    from rollout.backends._kserve import _standard as standard
    from rollout.backends._kserve._state_store import StateStore

    manifest = world.isvc_manifest("adopt")
    manifest["spec"]["canary"] = [{"trafficPercent": 0, "predictor": {
        "name": "v2", "minReplicas": 1,
        "model": {"name": "kserve-container", "modelFormat": {"name": "modelctl"},
                  "storageUri": world.uri(2), "args": ["--role=canary"]}}}]
    world.create(manifest)
    _start(world, "adopt")
    wait_for(lambda: _available(world, "adopt-v2-predictor") >= 1, timeout_s=60.0,
             what="the adopted canary's pod")
    before = _replicasets_of(world, "adopt-v2-predictor")
    assert len(before) == 1, before

    def promote_once() -> bool:
        stored = StateStore(world.admin, world.namespace, "adopt").read().state
        assert isinstance(stored, RolloutState)
        obj = world.isvc("adopt")
        seen = standard.Seen(
            isvc=obj, stable_deployment=world.get("deployment", "adopt-predictor"),
            canary_deployment=world.get("deployment", "adopt-v2-predictor"),
            route=_route_at("adopt", standard.service_name("adopt", "v2"), 100))
        spec = standard.spec_for(seen, Promote(), stored)
        if spec:
            world.kube.patch_isvc(world.namespace, "adopt", {"spec": spec})
        return spec.get("canary", ()) is None  # step 2 sent: the canary is the predictor

    wait_for(promote_once, timeout_s=90.0, interval_s=1.0, what="the promotion's last step")
    world.wait_isvc("adopt", lambda o: is_ready(o) and o["spec"]["predictor"].get("name")
                    == "v2" and not o["spec"].get("canary"), "promoted and Ready")
    wait_for(lambda: world.get("deployment", "adopt-predictor") is None, timeout_s=60.0,
             what="the old stable's Deployment deleted as an orphan")
    time.sleep(2.0)  # time for a roll to show, were there one
    assert _replicasets_of(world, "adopt-v2-predictor") == before
    args = world.isvc("adopt")["spec"]["predictor"]["model"].get("args")
    assert args == ["--role=canary"], args


def _without_format(entry: dict[str, Any]) -> dict[str, Any]:
    model = {k: v for k, v in entry["predictor"]["model"].items() if k != "modelFormat"}
    return {**entry, "predictor": {**entry["predictor"], "model": model}}


def test_kserve_defaults_to_the_mode_our_base_says(world: RealWorld) -> None:
    """Case 7: KServe's shipped config defaults to Serverless (Knative), and the base
    says so; an InferenceService without the annotation is reconciled that way."""
    deploy = json.loads(shipped_config()["data"]["deploy"])
    assert deploy["defaultDeploymentMode"] == "Serverless"
    base = (ROOT / "kustomize" / "base" / "inferenceservice.yaml").read_text()
    assert "KServe's own default is Serverless" in base
    doc = yaml.safe_load(base)
    assert doc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Knative"
    manifest = world.isvc_manifest("plain")
    del manifest["metadata"]["annotations"]["serving.kserve.io/deploymentMode"]
    world.create(manifest, wait=False)
    obj = world.wait_isvc("plain", lambda o: bool((o.get("status") or {}).get(
        "deploymentMode")), "given a mode")
    # v0.20.0 reports the config's "Serverless" by its new name.
    assert obj["status"]["deploymentMode"] == "Knative"


def test_this_kserve_routes_no_canary_and_the_rollout_says_why(world: RealWorld) -> None:
    """KServe v0.20.0 builds canary Deployments but puts none on the HTTPRoute (the
    weights came with kserve#5912, after it): the rollout waits at 0% and names why."""
    world.create(world.isvc_manifest("route"))
    _start(world, "route")
    engine = Engine(world.backend("route"), clock=time.time)
    result = wait_for(lambda: (lambda r: r if "kserve#5912" in r.waiting else None)(
        engine.step()), timeout_s=60.0, interval_s=0.3, what="the rollout naming the cause")
    assert "traffic at 0%, waiting for 50%" in result.waiting
    route = world.get("httproute", "route-predictor")
    assert route is not None
    backends = [r["name"] for rule in route["spec"]["rules"] for r in rule["backendRefs"]]
    assert backends == ["route-predictor"]


def test_the_rollout_role_is_enforced_by_the_api_server(world: RealWorld) -> None:
    """The rollout runs as manifests/30-rollout-rbac.yaml's ServiceAccount: a verb its
    Role lacks is a real 403."""
    from rollout import KubeError

    world.create(world.isvc_manifest("rbac"))
    with pytest.raises(KubeError, match="403"):
        world.kube.delete_isvc("other-namespace-or-verb", "rbac")
    with pytest.raises(KubeError, match="403"):
        world.kube.list_events("kube-system", "anything")
    assert world.kube.get_isvc(world.namespace, "rbac")["metadata"]["name"] == "rbac"
