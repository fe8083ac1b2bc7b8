"""Promise: no secret (S3 keys, a Prometheus password, a kubeconfig token, a client's
bearer token) appears in logs, ``--help``, process arguments or error messages.

The secrets are real where they can be: SeaweedFS's own keys, used for real pushes
and pulls; the others are set where a user would put them (environment, kubeconfig,
request headers) and every output is searched for them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import yaml
from typer.main import get_command
from typer.testing import CliRunner

from registry import Registry
from tests.support import ManagedProcess, free_port, wait_http_ok
from tests.support.seaweed import SeaweedS3
from tests.system.reliability._support import ROOT, add, record

PROM_PASSWORD = "prom-pw-7f3c9d2e"
KUBE_TOKEN = "kube-token-b41c07aa9e"
BEARER = "bearer-5e8a1f0c2d"


@pytest.fixture
def secret_env(seaweed: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {**seaweed.env(), "MODELCTL_PROMETHEUS_URL":
           f"http://admin:{PROM_PASSWORD}@127.0.0.1:{free_port()}",
           "MODELCTL_REGISTRY": "s3://models/security"}
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def secrets_of(env: dict[str, str]) -> list[str]:
    return [env["AWS_SECRET_ACCESS_KEY"], PROM_PASSWORD, KUBE_TOKEN, BEARER]


def assert_no_secret(text: str, secrets: list[str], where: str) -> None:
    for secret in secrets:
        assert secret not in text, f"a secret appears in {where}"
    add("security.outputs_checked")


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command path of a click command tree (groups have ``commands``)."""
    yield path
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from _commands(sub, (*path, name))


def test_no_secret_in_help(secret_env: dict[str, str]) -> None:
    from cli._app import build_app

    runner = CliRunner()
    app = build_app()
    paths = list(_commands(get_command(app)))
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], env=secret_env)
        assert result.exit_code == 0, (path, result.output)
        assert_no_secret(result.output, secrets_of(secret_env), f"modelctl {' '.join(path)}")
    done = subprocess.run([sys.executable, "-m", "predictor", "--help"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env={**os.environ, **secret_env})
    assert done.returncode == 0
    assert_no_secret(done.stdout + done.stderr, secrets_of(secret_env), "predictor --help")
    record("security.help_pages_checked", len(paths) + 1)


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env={**os.environ, **env})


def test_no_secret_in_cli_output_or_errors(secret_env: dict[str, str], tmp_path: Path) -> None:
    secrets = secrets_of(secret_env)
    src = tmp_path / "src"
    src.mkdir()
    (src / "task.json").write_text('{"latency_ms": 1}')
    ok = [("registry", "push", str(src), "--model", "sec", "--task", "fixed-latency",
           "--alias", "stable"), ("registry", "show", "sec@stable"),
          ("registry", "pull", "sec@stable", str(tmp_path / "pulled"))]
    for args in ok:
        done = cli(*args, env=secret_env)
        assert done.returncode == 0, (args, done.stderr)
        assert_no_secret(done.stdout + done.stderr, secrets, " ".join(args))
    wrong = "wrong-secret-0d9e8f7a"
    # (An unreachable endpoint is tests/registry/test_s3_errors.py's; it takes ~15 s.)
    failing = [({"AWS_SECRET_ACCESS_KEY": wrong}, "rejected the secret key"),
               ({"AWS_ACCESS_KEY_ID": "AKNOBODY"}, "does not know access key")]
    for override, says in failing:
        done = cli("registry", "list", env={**secret_env, **override})
        assert done.returncode == 2 and says in done.stderr, done.stderr
        assert_no_secret(done.stdout + done.stderr, [*secrets, wrong], f"registry {override}")
    # Kubernetes and Prometheus credentials in rollout errors.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {"token": KUBE_TOKEN}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    for args in (("rollout", "status", "demo", "--kubeconfig", str(kubeconfig)),
                 ("rollout", "start", "demo", "--to", "sec@stable", "--kubeconfig",
                  str(kubeconfig), "--prometheus-url", secret_env["MODELCTL_PROMETHEUS_URL"])):
        done = cli(*args, env=secret_env)
        assert done.returncode == 2 and done.stderr.startswith("error: "), done.stderr
        assert_no_secret(done.stdout + done.stderr, secrets, " ".join(args[:2]))


def test_no_secret_in_predictor_logs_metrics_errors_or_arguments(
    secret_env: dict[str, str], tmp_path: Path
) -> None:
    secrets = secrets_of(secret_env)
    reg = Registry.open()  # MODELCTL_REGISTRY: the S3 registry of secret_env
    if "sec" not in reg.models():
        src = tmp_path / "src"
        src.mkdir()
        (src / "task.json").write_text('{"latency_ms": 1}')
        reg.push(src, "sec", "fixed-latency", alias="stable")
    # `modelctl serve` from the S3 registry: it fetches with the keys from the
    # environment and execs the predictor (same PID) with arguments that hold none.
    port = free_port()
    proc = ManagedProcess("serve", [
        sys.executable, "-m", "cli", "serve", "sec@stable", "--port", str(port), "--grpc-port",
        str(free_port()), "--cache-dir", str(tmp_path / "cache"), "--", "--enable_grpc",
        "false"], log_dir=tmp_path, env=secret_env, cwd=ROOT)
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/v2/health/ready", timeout_s=60, proc=proc)
        cmdline = " ".join(psutil.Process(proc.pid).cmdline())
        assert "predictor" in cmdline
        assert_no_secret(cmdline, secrets, "the predictor's process arguments")
        headers = {"authorization": f"Bearer {BEARER}", "cookie": f"session={BEARER}",
                   "x-api-key": BEARER}
        url = f"http://127.0.0.1:{port}/v1/models/sec:predict"
        with httpx.Client(timeout=10, headers=headers) as client:
            good = client.post(url, json={"instances": ["a"]})
            bad = client.post(url, content=b'{"instances": [', headers={
                "content-type": "application/json"})
            unknown = client.post(url.replace("/sec:", "/nope:"), json={"instances": ["a"]})
            metrics = client.get(f"http://127.0.0.1:{port}/metrics").text
        assert good.status_code == 200 and bad.status_code == 400
        assert unknown.status_code == 404
        for text, where in ((bad.text, "an error answer"), (unknown.text, "a 404"),
                            (metrics, "/metrics")):
            assert_no_secret(text, secrets, where)
    finally:
        proc.stop()
    assert_no_secret(proc.output_tail(10**7), secrets, "the predictor's log")
