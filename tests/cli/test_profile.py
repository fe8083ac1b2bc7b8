"""``modelctl profile`` as users run it, through the CLI's real main(): a fixed-latency
version of a throwaway registry is measured (the real handler, a real predictor process
for the edge), stored next to the version and printed; each bad input exits 2 with one
line. The commands that measure run as their own process: building the model imports
KServe, whose gRPC protos clash with tritonclient's in one process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity import Profile, report_name
from registry import Registry
from tests.support.cli import run_cli, run_cli_process
from tests.support.manifests import ROOT, load_all

QUICK = ("--batch-sizes", "1,2", "--runs", "10", "--min-seconds", "0", "--warmup", "1",
         "--edge-requests", "20")


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "task.json").write_text(json.dumps({"latency_ms": 5}))
    root = tmp_path / "registry"
    Registry.open(str(root)).push(src, "prof-cli", "fixed-latency", alias="stable")
    return root


def test_json_prints_the_profile_and_stores_it_with_the_version(
        registry: Path, tmp_path: Path) -> None:
    code, out, err = run_cli_process("profile", "prof-cli@stable", *QUICK, "--registry",
                                     str(registry), "--cache-dir", str(tmp_path / "c"),
                                     "--json")
    assert code == 0, err
    assert err == ""  # no progress lines with --json
    printed = json.loads(out)
    profile = Profile.from_json(printed)
    assert (profile.model, profile.version, profile.sizes) == ("prof-cli", 1, (1, 2))
    for batch in profile.batches:
        assert 4.75 <= batch.p50_ms <= 20, batch.to_json()
    assert profile.edge_ms > 0 and profile.edge_cpu_ms > 0 and profile.load_s > 0
    stored = Registry.open(str(registry)).get_report("prof-cli", 1, report_name("cpu"))
    assert stored == printed
    assert (registry / "prof-cli" / "reports" / "1" / "profile-cpu.json").is_file()


def test_the_table_names_each_size_and_where_it_was_stored(
        registry: Path, tmp_path: Path) -> None:
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('"hello"\n{"any": ["json", 1]}\n')
    code, out, err = run_cli_process("profile", "prof-cli", *QUICK, "--inputs", str(inputs),
                                     "--registry", str(registry), "--cache-dir",
                                     str(tmp_path / "c"), "--no-store")
    assert code == 0, err
    progress = [line for line in err.splitlines() if line.startswith("profile: batch")]
    assert len(progress) == 2
    rows = [line.split("│") for line in out.splitlines() if line.startswith("│")]
    assert [row[1].strip() for row in rows] == ["1", "2"]
    assert "edge:" in out and "load:" in out and "not stored (--no-store)" in out
    assert Registry.open(str(registry)).get_report("prof-cli", 1, "profile-cpu") is None


def _bad_inputs(tmp_path: Path) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_text('"fine"\n{broken\n')
    return path


@pytest.mark.parametrize("args", [
    ["nobody@1"],  # unknown model
    ["prof-cli@7"],  # unknown version
    ["prof-cli@canary"],  # unknown alias
    ["prof-cli", "--batch-sizes", "1,two"],
    ["prof-cli", "--batch-sizes", "0,4"],
    ["prof-cli", "--inputs", "BAD"],
    ["prof-cli", "--inputs", "MISSING"],
    ["prof-cli", "--device", "tpu"],
    ["prof-cli", "--runs", "0"],
    ["Not_A_Name"],
])
def test_bad_input_exits_2_with_one_line(
        args: list[str], registry: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(_bad_inputs(tmp_path)) if a == "BAD" else
            str(tmp_path / "missing.jsonl") if a == "MISSING" else a for a in args]
    code, out, err = run_cli(monkeypatch, capsys, "profile", *args, "--registry",
                             str(registry), "--cache-dir", str(tmp_path / "c"))
    assert code == 2, (out, err)
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert not (tmp_path / "c").exists()  # refused before anything was fetched


def test_cuda_without_a_gpu_exits_2_with_one_line(
        registry: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, _, err = run_cli(monkeypatch, capsys, "profile", "prof-cli", "--device", "cuda",
                           "--registry", str(registry))
    assert code == 2
    assert err.splitlines() == [err.strip()] and "no CUDA device" in err


def test_the_profile_job_runs_a_real_profile_command() -> None:
    from typer.main import get_command

    from cli._app import build_app

    job = load_all((ROOT / "manifests/templates/profile-job.yaml").read_text())[0]
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["modelctl"]
    verb, *rest = container["args"]
    command = get_command(build_app()).commands[verb]  # type: ignore[attr-defined]
    context = command.make_context(verb, list(rest))  # parses every option, runs nothing
    assert context.params["device"] == "cuda"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    secrets = [e for e in container["env"] if "valueFrom" in e]
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in secrets} == {"modelctl-registry-s3"}
    assert not any("SECRET" in arg or "KEY" in arg for arg in container["args"])
