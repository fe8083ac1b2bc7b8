"""What a real KServe does that a rollout must cope with, case by case.

Each case is a behaviour of KServe at aaac4e294 that the stand-in ports (its
docstrings cite the source) and that the earlier ``kserve`` backend got wrong: it
trusted ``status.observedGeneration``, kept its state in annotations KServe copies
onto revisions and pods, read the Standard-mode weight from a status field that
only echoes the spec, and sized the canary at one pod.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout import Command, Engine, InvalidTransition, Plan, start_rollout
from rollout.analysis._results import Verdict
from rollout.backends._interface import Promote, SetWeight
from tests.fakes.analyzer import ScriptedAnalyzer
from tests.fakes.clock import FakeClock
from tests.support.cli import run_cli
from tests.support.kserve_sim import KSERVE_DEFAULTS
from tests.support.rollout_world import ISVC, MODEL, NAMESPACE, World, isvc_manifest, make_world

PLAN = Plan(steps_pct=(10, 50), interval_s=30.0, failure_limit=1)
P, F = Verdict.PASS, Verdict.FAIL


def _world(tmp_path: Path, mode: str, **kwargs: Any) -> World:
    return make_world(tmp_path, FakeClock(1_800_000_000.0), mode=mode, **kwargs)


@pytest.fixture(params=["Knative", "Standard"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    w = _world(tmp_path, request.param)
    yield w
    w.api.stop()


@pytest.fixture
def standard(tmp_path: Path) -> Iterator[World]:
    w = _world(tmp_path, "Standard")
    yield w
    w.api.stop()


@pytest.fixture
def knative(tmp_path: Path) -> Iterator[World]:
    w = _world(tmp_path, "Knative")
    yield w
    w.api.stop()


def _advance(world: World, seconds: float) -> None:
    assert isinstance(world.clock, FakeClock)
    world.clock.advance(seconds)
    world.sim.reconcile()


def _engine(world: World, script: list[Any], holder: str | None = "run",
            lease_s: float = 300.0) -> Engine:
    return Engine(world.backend(), clock=world.clock, holder=holder, lease_s=lease_s,
                  registry=world.registry, analyzer=ScriptedAnalyzer(script, clock=world.clock))


def _start(world: World, plan: Plan = PLAN, ref: str = "2") -> None:
    start_rollout(world.backend(), world.registry, model=MODEL, ref=ref, plan=plan,
                  clock=world.clock)


def _deployment(world: World, name: str) -> dict[str, Any]:
    return world.kube.get_deployment(NAMESPACE, name)


def _settle_weight(world: World, name: str = ISVC) -> None:
    """The engine's rule (_decide._tick) once: a Standard-mode canary grows at the old
    weight first; once grown, the state's weight is written again and takes effect."""
    backend = world.backend(name)
    seen = backend.observe()
    if seen.state is not None and seen.requested_weight_pct != seen.state.weight_pct:
        backend.apply(seen, SetWeight(seen.state.weight_pct), seen.state)
        world.sim.reconcile()


def test_standard_canary_is_ready_though_observed_generation_never_moves(
        standard: World) -> None:
    world = standard
    observed = world.isvc()["status"]["observedGeneration"]
    _start(world)
    world.sim.reconcile()
    obj = world.isvc()
    # PropagateRawStatus copies the *stable* Deployment's observedGeneration.
    stable = _deployment(world, f"{ISVC}-predictor")
    assert obj["status"]["observedGeneration"] == stable["status"]["observedGeneration"]
    assert obj["metadata"]["generation"] > observed
    _settle_weight(world)
    seen = world.backend().observe()
    assert seen.canary_ready and seen.canary_weight_pct == 10


def test_state_writes_and_lease_renewals_roll_nothing(world: World) -> None:
    """KServe's default disallow-list lets every annotation through to the pods."""
    _start(world, Plan(steps_pct=(10, 50), interval_s=3600.0))
    world.sim.reconcile()
    revisions, rollouts = world.sim.revisions(ISVC), world.sim.rollouts(ISVC)
    engine = _engine(world, [P], lease_s=10.0)
    for _ in range(12):  # every tick renews the lease or stores the window
        engine.step()
        _advance(world, 6.0)
    assert engine.step(Command("pause")).state.paused
    world.sim.reconcile()
    assert world.sim.revisions(ISVC) == revisions and world.sim.rollouts(ISVC) == rollouts


def test_knative_rollback_waits_for_the_restored_revision_itself(knative: World) -> None:
    """An unrelated template change meanwhile must not count as the restore."""
    world = knative
    _start(world)
    world.sim.reconcile()
    engine = _engine(world, [P])
    engine.step(Command("rollback", "bad outputs"))  # 1: all traffic to the stable
    world.sim.reconcile()
    engine.step()  # 2: the stable storageUri again
    world.sim.failing_uris.add(world.uri(1))  # the restored revision is not Ready yet
    world.kube.patch_isvc(NAMESPACE, ISVC, {"metadata": {"labels": {"team": "search"}}})
    for _ in range(3):
        _advance(world, 30.0)
        result = engine.step()
        assert "restoring" in result.waiting
        assert world.isvc()["spec"]["predictor"]["canaryTrafficPercent"] == 0
    world.sim.failing_uris.discard(world.uri(1))
    for _ in range(3):
        _advance(world, 1.0)
        result = engine.step()
    assert result.state.phase.value == "RolledBack"
    assert "canaryTrafficPercent" not in world.isvc()["spec"]["predictor"]


def test_standard_mode_refuses_to_start_where_kserve_cannot_split(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """KServe's shipped config (enableGatewayApi false): an Ingress to the stable only."""
    world = _world(tmp_path, "Standard", config=KSERVE_DEFAULTS)
    try:
        with pytest.raises(InvalidTransition, match=r"no HTTPRoute demo-predictor.*"
                                                    r"enableGatewayApi"):
            _start(world)
        kubeconfig = world.api.write_kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)
        before = len(world.api.log)
        code, _, err = run_cli(monkeypatch, capsys, "rollout", "start", ISVC, "--to",
                               f"{MODEL}@2", "--kubeconfig", str(kubeconfig),
                               "--registry", world.registry.url)
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
        assert "enableGatewayApi" in err
        assert world.api.writes(before) == [] and world.state() is None
        assert not world.isvc()["spec"].get("canary")
    finally:
        world.api.stop()


def test_standard_mode_refuses_the_legacy_mode_name_for_canaries(tmp_path: Path) -> None:
    world = _world(tmp_path, "Standard")
    try:
        world.create(isvc_manifest("legacy", "RawDeployment", world.uri(1)))
        world.sim.reconcile()
        with pytest.raises(InvalidTransition, match="exactly 'Standard'"):
            start_rollout(world.backend("legacy"), world.registry, model=MODEL, ref="2",
                          plan=PLAN, clock=world.clock)
    finally:
        world.api.stop()


def test_standard_weight_is_what_the_httproute_routes(standard: World) -> None:
    world = standard
    world.sim.failing_uris.add(world.uri(2))
    _start(world)
    _advance(world, 30.0)
    obj = world.isvc()
    (status,) = obj["status"]["canaryStatuses"]
    # Capacity first: a canary that never comes up is never given its share.
    assert status["trafficPercent"] == 0 and status["ready"] is False  # only an echo
    seen = world.backend().observe()
    assert seen.canary_weight_pct == 0 and seen.detail["routedPercent"] == 0
    assert seen.traffic_note and "not Ready at its new size" in seen.traffic_note


def _fleet(world: World, min_replicas: int, max_replicas: int | None = None) -> None:
    """The InferenceService ``fleet``, Standard mode, reconciled."""
    manifest = isvc_manifest("fleet", "Standard", world.uri(1))
    manifest["spec"]["predictor"]["minReplicas"] = min_replicas
    if max_replicas is not None:
        manifest["spec"]["predictor"]["maxReplicas"] = max_replicas
    world.create(manifest)
    world.sim.reconcile()


def _canary_sizes(world: World) -> list[int]:
    """The canary Deployment's replicas at the start and after one step (10% -> 50%)."""
    plan = Plan(steps_pct=(10, 50), interval_s=30.0, failure_limit=1)
    start_rollout(world.backend("fleet"), world.registry, model=MODEL, ref="2", plan=plan,
                  clock=world.clock)
    world.sim.reconcile()
    sizes = [_deployment(world, "fleet-v2-predictor")["spec"]["replicas"]]
    _settle_weight(world, "fleet")
    engine = Engine(world.backend("fleet"), clock=world.clock,
                    analyzer=ScriptedAnalyzer([P, P], clock=world.clock))
    engine.step()
    _advance(world, 30.0)
    assert engine.step().decisions[0].kind == "StepAdvanced"
    world.sim.reconcile()
    return [*sizes, _deployment(world, "fleet-v2-predictor")["spec"]["replicas"]]


def test_standard_canary_is_sized_for_its_share_of_the_fleet(tmp_path: Path) -> None:
    world = _world(tmp_path, "Standard")
    try:
        _fleet(world, 8)
        assert _canary_sizes(world) == [1, 4]
    finally:
        world.api.stop()


def test_standard_canary_is_sized_for_an_autoscaled_fleet(tmp_path: Path) -> None:
    """minReplicas 2, scaled to 8 on load: the canary at 50% gets 4, which the webhook
    allows only while the stable's minReplicas is raised to the fleet; put back after."""
    from kubernetes import client

    world = _world(tmp_path, "Standard")
    try:
        _fleet(world, 2, max_replicas=8)
        apps = client.AppsV1Api(world.api.api_client())
        apps.patch_namespaced_deployment("fleet-predictor", NAMESPACE, {"spec": {"replicas": 8}})
        world.sim.reconcile()  # as the HPA would have scaled it
        assert _canary_sizes(world) == [1, 4]
        # While the canary grows from 1 to 4 at its old weight, the stable's minReplicas
        # is the fleet plus that growth (KServe subtracts the canary's intended size), and
        # maxReplicas follows it past 8 (the webhook refuses min > max).
        predictor = world.isvc("fleet")["spec"]["predictor"]
        assert (predictor["minReplicas"], predictor["maxReplicas"]) == (11, 11)
        engine = Engine(world.backend("fleet"), clock=world.clock)
        engine.step(Command("rollback"))
        for _ in range(4):
            _advance(world, 1.0)
            if engine.step(Command("rollback")).is_final:
                break
        predictor = world.isvc("fleet")["spec"]["predictor"]
        assert (predictor["minReplicas"], predictor["maxReplicas"]) == (2, 8)
        assert not world.isvc("fleet")["spec"].get("canary")
    finally:
        world.api.stop()


def test_standard_promotion_keeps_capacity(tmp_path: Path) -> None:
    world = _world(tmp_path, "Standard")
    try:
        _fleet(world, 4)
        start_rollout(world.backend("fleet"), world.registry, model=MODEL, ref="2",
                      plan=Plan(steps_pct=(25,), interval_s=30.0), clock=world.clock)
        world.sim.ready_delay_s = 20.0
        engine = Engine(world.backend("fleet"), clock=world.clock, registry=world.registry,
                        analyzer=ScriptedAnalyzer([P], clock=world.clock))
        for _ in range(6):
            _advance(world, 30.0)
            promoted = engine.step()
            if isinstance(promoted.change, Promote):
                break
        assert isinstance(promoted.change, Promote), promoted.waiting
        # Capacity first: the canary grows to the whole fleet at its old weight ...
        spec = world.isvc("fleet")["spec"]
        assert spec["canary"][0]["trafficPercent"] == 25
        assert spec["canary"][0]["predictor"]["minReplicas"] == 4
        for _ in range(4):  # ... and takes all traffic once its Deployment rolled out
            _advance(world, 10.0)
            engine.step()
            spec = world.isvc("fleet")["spec"]
            if spec["canary"][0]["trafficPercent"] == 100:
                break
        assert spec["canary"][0]["trafficPercent"] == 100
        # The stable still runs while the canary takes all traffic, full size already.
        assert _deployment(world, "fleet-v2-predictor")["status"]["availableReplicas"] >= 4
        assert world.sim.rollouts("fleet").keys() >= {"fleet-predictor", "fleet-v2-predictor"}
        for _ in range(4):
            _advance(world, 10.0)
            result = engine.step()
        assert result.state.aliases_synced and result.seen.promoted
        spec = world.isvc("fleet")["spec"]
        assert spec["predictor"]["name"] == "v2" and "canary" not in spec
        assert spec["predictor"]["minReplicas"] == 4
        deployment = _deployment(world, "fleet-v2-predictor")
        assert deployment["status"]["availableReplicas"] >= 4
        assert set(world.sim.rollouts("fleet")) == {"fleet-v2-predictor"}  # old one deleted
    finally:
        world.api.stop()


def test_knative_split_uses_the_latest_tag_only_with_tag_routing(tmp_path: Path) -> None:
    """createKnativeService tags the latest target only with enable-tag-routing."""
    world = _world(tmp_path, "Knative")
    try:
        _start(world)
        world.sim.reconcile()
        traffic = world.isvc()["status"]["components"]["predictor"]["traffic"]
        assert {t.get("tag") for t in traffic} == {None, "prev"}
        assert world.backend().observe().canary_weight_pct == 10
    finally:
        world.api.stop()


def test_config_without_gateway_is_kserves_shipped_default() -> None:
    assert KSERVE_DEFAULTS.enable_gateway_api is False
    assert "kubectl.kubernetes.io/last-applied-configuration" in (
        KSERVE_DEFAULTS.disallowed_annotations)
    assert not [a for a in KSERVE_DEFAULTS.disallowed_annotations if "modelctl" in a]
    assert dataclasses.is_dataclass(KSERVE_DEFAULTS)


def test_the_mesh_mirror_overlays_follow_a_standard_promotion(tmp_path: Path) -> None:
    """istio-shadow and gateway-shadow send the primary's traffic to `model-primary`,
    which must select the pods serving the primary before and after the rename."""
    import yaml

    from deploycheck import _kustomize, find_kubectl

    root = Path(__file__).resolve().parents[3] / "kustomize" / "overlays"
    world = _world(tmp_path, "Standard")
    try:
        for overlay in ("istio-shadow", "gateway-shadow"):
            docs = [d for d in yaml.safe_load_all(_kustomize.build(root / overlay,
                                                                   find_kubectl())) if d]
            (service,) = [d for d in docs if d["kind"] == "Service"]
            routed = str(docs)
            assert "model-primary" in routed and "model-predictor" not in routed, overlay
        # As a user renames it for the InferenceService `demo` (docs/SHADOW.md).
        selector = {**service["spec"]["selector"], "serving.kserve.io/inferenceservice": ISVC}

        def selected() -> set[str]:
            names = set(world.sim.rollouts(ISVC))
            return {n for n in names if selector.items() <= _deployment(world, n)["spec"][
                "template"]["metadata"]["labels"].items()}

        assert selected() == {f"{ISVC}-predictor"}
        _start(world, Plan(steps_pct=(50,), interval_s=30.0))
        engine = _engine(world, [P])
        for _ in range(8):
            _advance(world, 30.0)
            if engine.step().is_final:
                break
        assert world.isvc()["spec"]["predictor"]["name"] == "v2"
        assert selected() == {f"{ISVC}-v2-predictor"}  # the promoted pods, and only them
    finally:
        world.api.stop()
