"""Rehearsal 4: a shadow mirrored through nginx, judged offline, and a rollout refused.

``modelctl dev up --shadow`` runs a version whose answers differ from stable's (a
fixed-latency ``output_prefix``); nginx mirrors every request to it while users get
stable's answers; both predictors capture what they answered; ``modelctl shadow
report`` joins the captures by request ID and fails the shadow; and ``rollout start
--require-shadow-pass`` refuses to roll it out, writing nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pyarrow.parquet as pq

from devstack import DevEnv
from registry import Registry
from tests.support import free_port, wait_for
from tests.support.devstack import DevCli, push_version, stop_recorded

NAME = "shadowed"


def _captured(root: Path, role: str) -> int:
    return sum(pq.read_metadata(f).num_rows for f in (root / NAME / role).rglob("*.parquet"))


def test_a_disagreeing_shadow_is_mirrored_reported_and_refused(
        dev_cli: DevCli, dev_registry: Path, tmp_path: Path) -> None:
    stable = push_version(dev_registry, NAME)
    shadow = push_version(dev_registry, NAME, output_prefix="changed:")
    captures = tmp_path / "captures"
    capture_args = [f"--{role}-arg={flag}" for role in ("stable", "shadow")
                    for flag in (f"capture_uri={captures}", "capture_flush_s=0.5")]
    port = free_port()
    up = dev_cli.run("dev", "up", NAME, "--shadow", str(shadow), "--port", str(port),
                     "--scrape-interval", "1s", *capture_args)
    try:
        assert up.returncode == 0, up.stderr
        assert "mirrored to shadow" in up.stdout
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/models/{NAME}:predict",
                           json={"instances": ["hello"]}, timeout=10)
        assert reply.json() == {"predictions": ["hello"]}  # users get stable's answer
        summary, access = dev_cli.load(NAME, rate=50, duration_s=6).finish()
        assert summary["status_counts"] == {"200": summary["sent"]}
        assert all(a.route == "stable" and len(a.upstreams) == 1 for a in access)
        answered = summary["sent"] + 1
        wait_for(lambda: _captured(captures, "stable") >= answered
                 and _captured(captures, "shadow") >= answered * 0.95,
                 timeout_s=30, interval_s=0.25, what="both sides' captures")

        report = dev_cli.run("shadow", "report", NAME, "--primary", str(captures),
                             "--shadow", str(captures), "--format", "json",
                             "--save-to-registry")
        assert report.returncode == 1, report.stderr  # Fail
        doc = json.loads(report.stdout)
        assert doc["verdict"] == "Fail" and str(doc["shadow_version"]) == str(shadow)
        checks = {c["name"]: c for c in doc["checks"]}
        failing = [name for name, c in checks.items() if c["verdict"] == "Fail"]
        assert any("exact" in name for name in failing), checks

        refused = dev_cli.run("rollout", "start", NAME, "--to", f"{NAME}@{shadow}",
                              "--target", "local", "--require-shadow-pass")
        assert refused.returncode == 2, refused.stdout
        assert refused.stderr.startswith("error: the shadow report for "
                                         f"{NAME}@{shadow} says Fail")
        assert refused.stderr.count("\n") == 1
        assert DevEnv(NAME, dev_cli.state_dir).read().rollout is None  # nothing written
        assert Registry.open(str(dev_registry)).aliases(NAME) == {"stable": stable}
    finally:
        dev_cli.run("dev", "down", NAME)
        stop_recorded(dev_cli.state_dir, NAME)
