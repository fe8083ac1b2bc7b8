"""``modelctl profile`` and ``modelctl plan`` on demo-chat, through the real predictor:
the profile's curves are measured and stored, the plan reads them, and an SLO under
the measured floor is refused with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli_process

pytestmark = pytest.mark.slow


def test_profile_then_plan_an_llm(registry_dir: Path, tmp_path: Path) -> None:
    from registry import Registry
    from scripts.demo_models import ensure_demo

    version = ensure_demo(str(registry_dir), "demo-chat")
    code, out, err = run_cli_process(
        "profile", "demo-chat@stable", "--registry", str(registry_dir), "--cache-dir",
        str(tmp_path / "cache"), "--prompt-lengths", "16,64", "--concurrency", "1,4",
        "--prefill-runs", "2", "--decode-tokens", "8", "--json", timeout_s=600)
    assert code == 0, err[-2000:]
    profile = json.loads(out)
    assert profile["schema"] == "modelctl.llm-profile/v1" and profile["version"] == version
    assert [p["x"] for p in profile["decode"]] == [1, 4]
    prefill = profile["prefill"]
    assert len(prefill) == 2 and prefill[0]["x"] < prefill[1]["x"]  # the server's own counts
    assert prefill[0]["p50_ms"] < prefill[1]["p50_ms"]  # a longer prompt takes longer
    assert profile["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 4  # SmolLM2-135M in float32
    assert profile["kv_capacity_tokens"] > 1000 and profile["context_tokens"] == 8192
    stored = Registry.open(str(registry_dir)).get_report("demo-chat", version,
                                                         "llm-profile-cpu")
    assert stored == profile

    common = ("plan", "demo-chat@stable", "--registry", str(registry_dir), "--peak-rps", "5",
              "--prompt-tokens", "40", "--output-tokens", "64")
    code, out, err = run_cli_process(*common, "--slo-ttft-p99", "5s", "--slo-tpot-p99", "2s",
                                     "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["feasible"] and plan["capacity_rps"] > 0
    assert plan["replicas"] >= 2 and plan["bound_by"] == "knee"
    code, out, err = run_cli_process(*common, "--slo-ttft-p99", "5s", "--slo-tpot-p99", "1ms")
    assert code == 2 and "under one sequence's decode step" in err + out
    code, _, err = run_cli_process(*common[:-4], "--slo-p99", "200ms")
    assert code == 2 and "--slo-ttft-p99" in err
