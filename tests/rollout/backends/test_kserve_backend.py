"""The ``kserve`` traffic backend against the emulated API server and the KServe stand-in.

What it reads (readiness, routed weight) must follow what KServe reports, and every
object it writes must still be a valid InferenceService under the upstream CRD
(unknown fields are errors, as they are for ``kubectl apply``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout import Command, Engine, InvalidTransition, Plan, UnknownBackend, start_rollout
from rollout._state import RolloutState
from rollout.analysis._results import Verdict
from rollout.backends import KServeBackend, make_backend
from rollout.backends._interface import Observation, Promote, Rollback, SaveState, SetWeight
from rollout.backends._kserve._backend import deployment_mode
from tests.fakes.analyzer import ScriptedAnalyzer
from tests.fakes.clock import FakeClock
from tests.support.rollout_world import (
    ISVC,
    MODEL,
    NAMESPACE,
    World,
    isvc_manifest,
    make_world,
)

PLAN = Plan(steps_pct=(10, 50), interval_s=30.0, failure_limit=1)


@pytest.fixture(params=["Knative", "Standard"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    w = make_world(tmp_path, FakeClock(1_800_000_000.0), mode=request.param)
    yield w
    w.api.stop()


@pytest.fixture(scope="module")
def crd_problems() -> Any:
    """A checker for InferenceServices against the upstream CRD (cli's offline validator)."""
    from deploycheck._check import load_crds
    from deploycheck._locate import find_crds_dir
    from deploycheck._openapi import StructuralValidator

    crd = load_crds(find_crds_dir().resolve()).lookup("serving.kserve.io/v1beta1",
                                                       "InferenceService")
    assert crd is not None
    validator = StructuralValidator(lambda meta, path: [])

    def problems(obj: dict[str, Any]) -> list[str]:
        return [str(f) for f in validator.validate_document(obj, crd.schema)]

    return problems


def _advance(world: World, seconds: float) -> None:
    assert isinstance(world.clock, FakeClock)
    world.clock.advance(seconds)
    world.sim.reconcile()


def test_factory_knows_kserve_and_refuses_unknown_names(world: World) -> None:
    backend = make_backend("kserve", kube=world.kube, namespace=NAMESPACE, isvc=ISVC)
    assert isinstance(backend, KServeBackend) and backend.observe().target == "models/demo"
    with pytest.raises(UnknownBackend, match=r"'istio'.*known: kserve"):
        make_backend("istio")


def test_every_written_object_is_a_valid_inference_service(world: World,
                                                           crd_problems: Any) -> None:
    """Start, a step, promotion, and a rollback of a second rollout, each checked."""
    seen: list[dict[str, Any]] = [world.isvc()]
    start_rollout(world.backend(), world.registry, model=MODEL, ref="2", plan=PLAN,
                  clock=world.clock)
    engine = Engine(world.backend(), clock=world.clock, registry=world.registry,
                    analyzer=ScriptedAnalyzer([Verdict.PASS], clock=world.clock))
    world.sim.reconcile()
    seen.append(world.isvc())
    engine.step(Command("promote"))
    seen.append(world.isvc())
    world.sim.reconcile()
    engine.step(Command("promote-full"))
    with pytest.raises(InvalidTransition, match="not in effect yet"):
        start_rollout(world.backend(), world.registry, model=MODEL, ref="3", plan=PLAN,
                      clock=world.clock)
    while not engine.step().is_final:  # Standard mode: full size first, then the rename
        _advance(world, 1.0)
        seen.append(world.isvc())
    start_rollout(world.backend(), world.registry, model=MODEL, ref="3", plan=PLAN,
                  clock=world.clock)
    world.sim.reconcile()
    seen.append(world.isvc())
    for _ in range(4):
        engine.step(Command("rollback"))
        _advance(world, 1.0)
        seen.append(world.isvc())
    assert engine.observe()[1].phase.value == "RolledBack"
    for obj in seen:
        assert crd_problems(obj) == [], obj
    typo = {**seen[1], "spec": {"predictor": {**seen[1]["spec"]["predictor"],
                                              "canaryTraficPercent": 5}}}
    assert any("canaryTraficPercent" in p for p in crd_problems(typo))  # the check bites


def _rewrite_weight(world: World, backend: KServeBackend, weight: int) -> None:
    """The engine's rule (_decide._tick): while the target asks for another weight than
    the state's, write it again. Standard mode needs it: a step first grows the canary
    at the old weight, and moves the weight once the canary Deployment rolled out."""
    seen = backend.observe()
    if seen.requested_weight_pct != weight:
        assert seen.state is not None
        backend.apply(seen, SetWeight(weight), seen.state)
        world.sim.reconcile()


def test_readiness_and_weight_come_from_what_kserve_reports(world: World) -> None:
    standard = world.isvc()["status"]["deploymentMode"] == "Standard"
    world.sim.ready_delay_s = 10.0
    start_rollout(world.backend(), world.registry, model=MODEL, ref="2", plan=PLAN,
                  clock=world.clock)
    backend = world.backend()
    before = backend.observe()
    assert not before.canary_ready and before.canary_weight_pct == 0  # not reconciled yet
    # Standard mode grows the canary first, at the old weight (none).
    assert before.requested_weight_pct == (0 if standard else 10)
    world.sim.reconcile()
    pending = backend.observe()
    assert not pending.canary_ready and pending.canary_weight_pct == 0
    _advance(world, 10.0)
    _rewrite_weight(world, backend, 10)
    ready = backend.observe()
    assert ready.canary_ready and ready.canary_weight_pct == 10
    assert ready.start_blockers and "already Progressing" in ready.start_blockers[0]
    # A weight KServe has not acted on yet: the canary stays Ready, the routed weight
    # stays where it was until KServe moves it.
    world.sim.paused = True
    state = ready.state
    assert state is not None
    after = backend.apply(ready, SetWeight(50), state.evolve(weight_pct=50))
    assert after.requested_weight_pct == 50  # a fleet of one: no growth to wait for
    assert after.canary_weight_pct == 10
    world.sim.paused = False
    world.sim.reconcile()
    _advance(world, 10.0)  # Standard mode: the canary grows to its new size first
    _rewrite_weight(world, backend, 50)
    settled = backend.observe()
    assert settled.canary_ready and settled.canary_weight_pct == 50


def test_a_canary_that_never_becomes_ready_gets_no_traffic(world: World) -> None:
    world.sim.failing_uris.add(world.uri(2))
    start_rollout(world.backend(), world.registry, model=MODEL, ref="2", plan=PLAN,
                  clock=world.clock)
    engine = Engine(world.backend(), clock=world.clock, holder="run",
                    analyzer=ScriptedAnalyzer([Verdict.PASS], clock=world.clock))
    for _ in range(5):
        _advance(world, 60.0)
        result = engine.step()
        assert "not Ready" in result.waiting and result.state.weight_pct == 10
    assert not engine.analyzer.calls  # type: ignore[union-attr]
    obj = world.isvc()
    if obj["status"]["deploymentMode"] == "Knative":  # Knative keeps routing to stable
        traffic = obj["status"]["components"]["predictor"]["traffic"]
        assert {t["revisionName"] for t in traffic} == {"demo-predictor-00001"}
    else:
        assert obj["status"]["canaryStatuses"][0]["ready"] is False
        assert result.seen.detail["routedPercent"] == 0


def _started(world: World) -> tuple[KServeBackend, Observation, RolloutState]:
    """A rollout to version 2, started and reconciled: the backend, its view, the state."""
    start_rollout(world.backend(), world.registry, model=MODEL, ref="2", plan=PLAN,
                  clock=world.clock)
    world.sim.reconcile()
    backend = world.backend()
    seen = backend.observe()
    assert seen.state is not None
    return backend, seen, seen.state


def test_writes_are_conditional_and_never_touch_annotations(world: World) -> None:
    backend, seen, state = _started(world)
    for change in (SetWeight(50), Promote(), Rollback()):
        planned = backend.describe(seen, change, state.evolve(weight_pct=50))
        configmap = planned["configmap"]
        assert configmap["metadata"]["resourceVersion"] == seen.version
        assert configmap["metadata"]["ownerReferences"][0]["uid"] == world.isvc()[
            "metadata"]["uid"]
        assert set(planned.get("inferenceservice", {})) <= {"spec"}
    assert backend.describe(seen, SaveState(), state) == {}
    before = len(world.api.log)
    backend.apply(seen, SaveState(), state)  # nothing changes: no write
    assert world.api.writes(before) == []
    backend.apply(seen, SaveState(), state.evolve(paused=True))
    assert [r.method for r in world.api.writes(before)] == ["PUT"]  # the ConfigMap only
    annotations = world.isvc()["metadata"]["annotations"]
    assert not [k for k in annotations if k.startswith("rollout.")]


def test_a_spec_write_lost_after_the_state_is_redone(world: World) -> None:
    backend, seen, state = _started(world)
    # A run stored the next step's state and died before its spec patch.
    backend.store.write(state.evolve(weight_pct=50, step_index=1), seen.version,
                        world.isvc()["metadata"]["uid"])
    engine = Engine(world.backend(), clock=world.clock, holder="run")
    result = engine.step()
    assert isinstance(result.change, SetWeight) and result.change.weight_pct == 50
    assert result.seen.requested_weight_pct == 50


def test_start_refuses_an_inference_service_it_cannot_roll_out(world: World) -> None:
    mode = world.isvc()["status"]["deploymentMode"]
    unready = isvc_manifest("fresh", mode, world.uri(1))
    world.create(unready)  # no status yet: KServe has not reconciled it
    with pytest.raises(InvalidTransition, match=r"not Ready|deployment mode"):
        start_rollout(world.backend("fresh"), world.registry, model=MODEL, ref="2", plan=PLAN,
                      clock=world.clock)
    world.create(isvc_manifest("other", mode, world.uri(1), model="other-model"))
    world.sim.reconcile()
    with pytest.raises(InvalidTransition, match="serves model 'other-model'"):
        start_rollout(world.backend("other"), world.registry, model=MODEL, ref="2", plan=PLAN,
                      clock=world.clock)
    world.create(isvc_manifest("anon", mode, world.uri(1), version=None, model=None))
    world.sim.reconcile()  # no annotations: the version is found by its storageUri
    result = start_rollout(world.backend("anon"), world.registry, model=MODEL, ref="3",
                           plan=PLAN, clock=world.clock)
    assert result.state.stable_version == 1


def test_standard_mode_adopts_a_canary_declared_for_the_same_version(tmp_path: Path) -> None:
    world = make_world(tmp_path, FakeClock(1_800_000_000.0), mode="Standard")
    try:
        manifest = isvc_manifest("declared", "Standard", world.uri(1))
        canary = {"name": "canary", "minReplicas": 1, "model": {
            "name": "kserve-container", "modelFormat": {"name": "modelctl"},
            "storageUri": world.uri(2)}}
        manifest["spec"]["canary"] = [{"trafficPercent": 10, "predictor": canary}]
        world.create(manifest)
        world.sim.reconcile()
        result = start_rollout(world.backend("declared"), world.registry, model=MODEL, ref="2",
                               plan=Plan(steps_pct=(20, 60)), clock=world.clock)
        assert result.state.backend_data["canary_name"] == "canary"
        entries = world.isvc("declared")["spec"]["canary"]
        # Capacity first: the declared share stays until the canary is seen at its size.
        assert len(entries) == 1 and entries[0]["trafficPercent"] == 10
        world.sim.reconcile()
        _rewrite_weight(world, world.backend("declared"), 20)
        entries = world.isvc("declared")["spec"]["canary"]
        assert len(entries) == 1 and entries[0]["trafficPercent"] == 20
        assert entries[0]["predictor"] == canary
        with pytest.raises(InvalidTransition, match="another version"):
            world.create({**isvc_manifest("clash", "Standard", world.uri(1)),
                          "spec": {**manifest["spec"]}})
            world.sim.reconcile()
            start_rollout(world.backend("clash"), world.registry, model=MODEL, ref="3",
                          plan=PLAN, clock=world.clock)
    finally:
        world.api.stop()


def test_deployment_mode_is_read_like_kserve_does() -> None:
    def obj(status: str | None, annotation: str | None) -> dict[str, Any]:
        annotations = {"serving.kserve.io/deploymentMode": annotation} if annotation else {}
        return {"metadata": {"annotations": annotations},
                "status": {"deploymentMode": status} if status else {}}

    assert deployment_mode(obj("Knative", None)) == "knative"
    assert deployment_mode(obj("Serverless", None)) == "knative"
    assert deployment_mode(obj("RawDeployment", "Knative")) == "standard"
    assert deployment_mode(obj(None, "Standard")) == "standard"
    assert deployment_mode(obj(None, None)) is None
    assert deployment_mode(obj("ModelMesh", None)) is None


def test_events_are_recorded_on_the_inference_service(world: World) -> None:
    start_rollout(world.backend(), world.registry, model=MODEL, ref="2", plan=PLAN,
                  clock=world.clock)
    (event,) = world.events()
    assert event["reason"] == "RolloutStarted" and event["type"] == "Normal"
    assert event["involvedObject"]["kind"] == "InferenceService"
    assert event["involvedObject"]["uid"] == world.isvc()["metadata"]["uid"]
    assert "demo-fixed@1 -> demo-fixed@2" in event["message"]
    assert event["source"] == {"component": "modelctl-rollout"}


def test_a_rollback_deletes_the_autoscaler_kserve_leaves(tmp_path: Path) -> None:
    """KServe v0.20.0 deletes a dropped canary's Deployment but not its HPA, on which it
    sets no owner (tests/system/kserve shows it on the real controller): the rollback
    deletes it, and says so in a dry run; an HPA KServe did not make for this
    InferenceService stays."""
    from kubernetes import client

    world = make_world(tmp_path, FakeClock(1_800_000_000.0), mode="Standard")
    try:
        start_rollout(world.backend(), world.registry, model=MODEL, ref="2", plan=PLAN,
                      clock=world.clock)
        world.sim.reconcile()
        engine = Engine(world.backend(), clock=world.clock, registry=world.registry)
        result = engine.step(Command("rollback"))
        for _ in range(6):
            world.sim.reconcile()
            result = engine.step()
            if result.is_final:
                break
        assert result.is_final
        autoscaling = client.AutoscalingV2Api(world.api.api_client())

        def hpa(name: str, labels: dict[str, str]) -> Any:
            return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                    "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
                    "spec": {"minReplicas": 1, "maxReplicas": 1, "scaleTargetRef": {
                        "apiVersion": "apps/v1", "kind": "Deployment", "name": name}}}

        left = f"{ISVC}-v2-predictor"
        autoscaling.create_namespaced_horizontal_pod_autoscaler(
            NAMESPACE, hpa(left, {"serving.kserve.io/inferenceservice": "someone-else"}))
        backend = world.backend()
        seen = backend.observe()
        assert seen.restored and "leftoverHpa" not in seen.detail  # not KServe's for us
        autoscaling.patch_namespaced_horizontal_pod_autoscaler(left, NAMESPACE, {"metadata": {
            "labels": {"serving.kserve.io/inferenceservice": ISVC}}})
        seen = backend.observe()
        assert not seen.restored and seen.detail["leftoverHpa"] == left
        assert seen.state is not None
        assert backend.describe(seen, Rollback(), seen.state)["delete_hpa"] == left
        after = backend.apply(seen, Rollback(), seen.state)
        assert after.restored
        names = [h.metadata.name for h in
                 autoscaling.list_namespaced_horizontal_pod_autoscaler(NAMESPACE).items]
        assert left not in names
    finally:
        world.api.stop()
