"""``modelctl shadow start/stop`` and ``rollout start --require-shadow-pass`` through the CLI,
against the emulated Kubernetes API and a real local registry."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from predictor._config import build_parser
from rollout import NotFound
from tests.support.fleet import run_cli
from tests.support.rollout_world import (
    ISVC,
    MODEL,
    NAMESPACE,
    World,
    add_queue_workers,
    get_or_none,
    make_world,
    storage_uri,
    streams,
)

SHADOW = f"{ISVC}-shadow"
SHADOW_URL = f"http://{SHADOW}-predictor.{NAMESPACE}.svc.cluster.local"


@pytest.fixture(params=["Knative", "Standard"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    world = make_world(tmp_path, time.time, mode=request.param)
    yield world
    world.sim.stop()
    world.api.stop()


@pytest.fixture
def cli(world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Any:
    kubeconfig = world.api.write_kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)
    monkeypatch.setenv("MODELCTL_REGISTRY", str(tmp_path / "registry"))

    def call(*args: str) -> tuple[int, str, str]:
        return run_cli(monkeypatch, capsys, *args, "--kubeconfig", str(kubeconfig))

    return call


def _args(obj: dict[str, Any]) -> list[str]:
    return list(obj["spec"]["predictor"]["model"].get("args") or [])


def test_start_creates_the_shadow_and_mirrors_to_it(world: World, cli: Any) -> None:
    code, out, err = cli("shadow", "start", ISVC, "--candidate", f"{MODEL}@2", "--rate", "0.25",
                         "--capture-uri", "s3://captures/prod", "--json")
    assert code == 0, err
    assert json.loads(out)["shadow_action"] == "create"
    shadow = world.isvc(SHADOW)
    meta = shadow["metadata"]
    assert meta["labels"]["modelctl.io/shadow-of"] == ISVC
    assert meta["labels"]["networking.kserve.io/visibility"] == "cluster-local"
    assert meta["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"
    assert meta["annotations"]["modelctl.io/version"] == "2"
    assert shadow["spec"]["predictor"]["model"]["storageUri"] == world.uri(2)
    flags = vars(build_parser({}).parse_known_args(_args(shadow))[0])
    assert (flags["role"], flags["model_name"], flags["capture_uri"]) == (
        "shadow", ISVC, "s3://captures/prod")
    assert flags["shadow_url"] == ""
    primary = world.isvc()
    assert _args(primary) == [f"--shadow_url={SHADOW_URL}", "--shadow_sample_rate=0.25",
                              "--capture_uri=s3://captures/prod"]
    assert primary["spec"]["predictor"]["model"]["storageUri"] == world.uri(1)  # unchanged

    # Again with another rate: the shadow is updated, the flags replaced, not repeated.
    code, out, err = cli("shadow", "start", ISVC, "--candidate", f"{MODEL}@3", "--rate", "0.5",
                         "--json")
    assert code == 0, err
    assert json.loads(out)["shadow_action"] == "patch"
    assert world.isvc(SHADOW)["spec"]["predictor"]["model"]["storageUri"] == world.uri(3)
    assert _args(world.isvc()) == ["--capture_uri=s3://captures/prod",
                                   f"--shadow_url={SHADOW_URL}", "--shadow_sample_rate=0.5"]

    code, _, err = cli("shadow", "stop", ISVC)
    assert code == 0, err
    with pytest.raises(NotFound):
        world.isvc(SHADOW)
    assert _args(world.isvc()) == ["--capture_uri=s3://captures/prod"]
    assert world.isvc()["metadata"]["annotations"].get("modelctl.io/shadow") is None
    code, out, err = cli("shadow", "stop", ISVC)  # nothing left to do is fine
    assert code == 0, err
    assert "nothing to do" in out


def test_in_queue_mode_the_shadow_gets_its_own_workers(world: World, cli: Any) -> None:
    add_queue_workers(world)
    workers = f"{ISVC}-queue-worker-shadow"
    code, out, err = cli("shadow", "start", ISVC, "--candidate", f"{MODEL}@2", "--dry-run")
    assert code == 0, err
    assert f"would: create Deployment {NAMESPACE}/{workers}" in out
    assert get_or_none(world, "Deployment", workers) is None
    code, out, err = cli("shadow", "start", ISVC, "--candidate", f"{MODEL}@2", "--json")
    assert code == 0, err
    assert [(a["verb"], a["kind"]) for a in json.loads(out)["queue_workers"]] == [
        ("create", "Deployment"), ("create", "ScaledObject")]
    deployment = get_or_none(world, "Deployment", workers)
    assert storage_uri(deployment) == world.uri(2)
    assert deployment is not None
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert "--role=shadow" in container["args"]
    # The shadow's frontends (--model_name=ISVC, version 2) enqueue on this stream.
    assert streams(get_or_none(world, "ScaledObject", workers)) == {
        f"modelctl:{{{ISVC}:2}}:requests"}
    assert storage_uri(get_or_none(world, "Deployment", f"{ISVC}-queue-worker")) == \
        world.uri(1)
    code, out, err = cli("shadow", "start", ISVC, "--candidate", f"{MODEL}@3", "--json")
    assert code == 0, err
    assert storage_uri(get_or_none(world, "Deployment", workers)) == world.uri(3)
    code, out, err = cli("shadow", "stop", ISVC)
    assert code == 0, err
    assert f"did: delete Deployment {NAMESPACE}/{workers}" in out
    assert get_or_none(world, "Deployment", workers) is None
    assert get_or_none(world, "ScaledObject", workers) is None


def test_dry_run_prints_the_changes_and_writes_nothing(world: World, cli: Any) -> None:
    before = len(world.api.log)
    code, out, err = cli("shadow", "start", ISVC, "--candidate", f"{MODEL}@2", "--dry-run")
    assert code == 0, err
    assert f"would: create InferenceService {NAMESPACE}/{SHADOW}" in out
    assert f"--shadow_url={SHADOW_URL}" in out and "--role=shadow" in out
    assert world.api.writes(before) == []
    with pytest.raises(NotFound):
        world.isvc(SHADOW)


def test_start_is_refused_while_a_rollout_runs(world: World, cli: Any) -> None:
    code, _, err = cli("rollout", "start", ISVC, "--to", f"{MODEL}@2")
    assert code == 0, err
    before = len(world.api.log)
    code, _, err = cli("shadow", "start", ISVC, "--candidate", f"{MODEL}@3")
    assert code == 2
    assert "rollout to" in err and "promote or roll it back first" in err
    assert world.api.writes(before) == []


def test_bad_candidates_and_foreign_objects_are_refused(world: World, cli: Any) -> None:
    code, _, err = cli("shadow", "start", ISVC, "--candidate", f"{MODEL}@9")
    assert code == 2 and "has no version 9" in err
    code, _, err = cli("shadow", "start", ISVC, "--candidate", f"{MODEL}@2", "--rate", "0")
    assert code == 2 and "--rate must be in (0, 1]" in err
    code, _, err = cli("shadow", "start", "missing", "--candidate", f"{MODEL}@2")
    assert code == 2 and "not found" in err
    world.create({"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
                  "metadata": {"name": SHADOW, "namespace": NAMESPACE},
                  "spec": {"predictor": {"model": {"modelFormat": {"name": "x"}}}}})
    code, _, err = cli("shadow", "start", ISVC, "--candidate", f"{MODEL}@2")
    assert code == 2 and "is not the shadow of" in err


def _store_report(registry: str, version: int, verdict: str) -> None:
    from registry import Registry

    Registry.open(registry).put_report(MODEL, version, "shadow", {
        "kind": "modelctl.io/shadow-report", "model": MODEL, "shadow_version": str(version),
        "verdict": verdict, "checks": [{"name": "exact-match", "verdict": verdict}]})


def test_rollout_requires_a_passing_shadow_report(world: World, cli: Any,
                                                  tmp_path: Path) -> None:
    registry = str(tmp_path / "registry")
    before = len(world.api.log)
    code, _, err = cli("rollout", "start", ISVC, "--to", f"{MODEL}@2", "--require-shadow-pass")
    assert code == 2 and "no shadow report for demo-fixed@2" in err
    _store_report(registry, 2, "Fail")
    code, _, err = cli("rollout", "start", ISVC, "--to", f"{MODEL}@2", "--require-shadow-pass")
    assert code == 2 and "says Fail (exact-match), not Pass" in err
    _store_report(registry, 3, "Pass")  # a pass for another version does not count
    code, _, err = cli("rollout", "start", ISVC, "--to", f"{MODEL}@2", "--require-shadow-pass")
    assert code == 2
    assert world.api.writes(before) == []
    _store_report(registry, 2, "Pass")
    code, _, err = cli("rollout", "start", ISVC, "--to", f"{MODEL}@2", "--require-shadow-pass")
    assert code == 0, err
    assert world.state() is not None
