"""``modelctl plan`` against a real local registry holding a version and its profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity import BatchTiming, PlanFile, Profile, report_name
from tests.support.cli import run_cli

MODEL = "plan-demo"


def _profile(version: int, model: str = MODEL) -> Profile:
    return Profile(model, version, "cpu", (BatchTiming(1, (4.0, 5.0, 6.0), 0.0),
                                           BatchTiming(8, (8.0, 10.0, 12.0), 0.0)),
                   edge_ms=1.0, edge_cpu_ms=0.2, load_s=12.0)


@pytest.fixture
def registry(tmp_path: Path) -> str:
    from registry import Registry

    root = tmp_path / "registry"
    reg = Registry.open(str(root))
    src = tmp_path / "src"
    src.mkdir()
    (src / "task.json").write_text('{"latency_ms": 1}')
    for _ in range(3):
        reg.push(src, MODEL, "fixed-latency")
    reg.put_report(MODEL, 1, report_name("cpu"), _profile(1).to_json())
    reg.put_report(MODEL, 2, report_name("cpu"), _profile(1).to_json())  # the wrong version
    return str(root)


def test_plan_prints_a_plan_for_people_and_for_scripts(
        registry: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("plan", f"{MODEL}@1", "--slo-p99", "80ms", "--peak-rps", "3000", "--burst",
            "2x:30s", "--registry", registry)
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "is feasible" in out and "--max_batch_size" in out and "scaleTarget" in out
    assert "cold start" in out and "peak" in out
    code, out, err = run_cli(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    p = PlanFile.from_json(json.loads(out))
    assert p.version == 1 and p.slo_p99_ms == 80.0 and p.replicas.cold_start > 0


@pytest.mark.parametrize(("extra", "needle"), [
    (("--slo-p99", "fast"), "--slo-p99"),
    (("--slo-p99", "200"), "needs a unit"),
    (("--peak-rps", "lots"), "--peak-rps"),
    (("--burst", "2:30s"), "FACTORx:DURATION"),
    (("--slo-p99", "2ms"), "floor"),
    (("--burst", "5000x:10s"), "absorbs"),
    (("--device", "cuda"), "run `modelctl profile plan-demo@1 --device cuda`"),
    (("--mode", "sideways"), "--mode"),
])
def test_bad_input_exits_2_with_one_line(
        registry: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        extra: tuple[str, ...], needle: str) -> None:
    base = {"--slo-p99": "80ms", "--peak-rps": "3000"}
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        base[flag] = value
    argv = [arg for pair in base.items() for arg in pair]
    code, out, err = run_cli(monkeypatch, capsys, "plan", f"{MODEL}@1", *argv,
                             "--registry", registry)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and needle in err, err


def test_a_profile_of_another_version_or_none_at_all_exits_2(
        registry: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for ref, needle in ((f"{MODEL}@2", "not plan-demo version 2"),
                        (f"{MODEL}@3", f"run `modelctl profile {MODEL}@3 --device cpu`")):
        code, _, err = run_cli(monkeypatch, capsys, "plan", ref, "--slo-p99", "80ms",
                               "--peak-rps", "100", "--registry", registry)
        assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


def test_help_teaches_with_examples(monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "plan", "--help")
    assert code == 0 and "--slo-p99 200ms --peak-rps 5000" in out and "--burst" in out
