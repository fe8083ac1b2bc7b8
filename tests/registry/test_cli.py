"""``modelctl registry`` end to end: output for people and scripts, exit codes,
and one-line errors for every kind of bad input."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.registry.conftest import ROOT_DIR, SAMPLE, CliResult, make_source
from tests.support.seaweed import SeaweedS3

Cli = Callable[..., CliResult]


def one_error_line(result: CliResult) -> str:
    assert result.code == 2, result
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.err
    return lines[0]


def test_push_list_show_alias_uri(cli: Cli, local_url: str, sample_src: Path) -> None:
    r = cli("registry", "push", str(sample_src), "--model", "demo", "--task",
            "feature-extraction", "--registry", local_url, "--meta", "commit=3f2a",
            "--meta", "note=a=b")
    assert (r.code, r.out) == (0, "1\n")  # plain, so scripts can capture it
    r = cli("registry", "push", str(sample_src), "--model", "demo", "--task",
            "feature-extraction", "--registry", local_url, "--alias", "stable", "--parent", "1",
            "--json")
    assert r.code == 0
    pushed = json.loads(r.out)
    assert (pushed["version"], pushed["parent"]) == (2, 1)
    assert set(pushed["files"]) == set(SAMPLE)

    r = cli("registry", "list", "--registry", local_url)
    assert r.code == 0 and "demo" in r.out and "stable=2" in r.out
    r = cli("registry", "list", "--registry", local_url, "--json")
    assert json.loads(r.out) == [{"name": "demo", "versions": [1, 2], "aliases": {"stable": 2}}]
    r = cli("registry", "list", "demo", "--registry", local_url, "--json")
    listing = json.loads(r.out)
    assert [v["version"] for v in listing["versions"]] == [1, 2]
    assert listing["versions"][0]["metadata"] == {"commit": "3f2a", "note": "a=b"}

    r = cli("registry", "show", "demo@stable", "--registry", local_url)
    assert r.code == 0
    assert "model.safetensors" in r.out and pushed["files"]["config.json"]["sha256"] in r.out
    r = cli("registry", "show", "demo@1", "--registry", local_url, "--json")
    assert json.loads(r.out)["metadata"]["commit"] == "3f2a"

    r = cli("registry", "alias", "demo", "canary", "1", "--registry", local_url)
    assert (r.code, r.out.strip()) == (0, "demo: canary -> 1 (was unset)")
    r = cli("registry", "alias", "demo", "stable", "canary", "--registry", local_url, "--json")
    assert json.loads(r.out) == {"model": "demo", "alias": "stable", "version": 1, "previous": 2}
    r = cli("registry", "unalias", "demo", "canary", "--registry", local_url)
    assert (r.code, r.out.strip()) == (0, "demo: removed canary (was 1)")

    r = cli("registry", "uri", "demo@stable", "--registry", local_url)
    assert r.out.strip() == (Path(local_url).resolve() / "demo" / "1").as_uri()
    r = cli("registry", "uri", "demo", "--pvc", "models", "--registry", local_url)
    assert r.out.strip() == "pvc://models/demo/2"


def test_registry_from_env(cli: Cli, local_url: str, sample_src: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODELCTL_REGISTRY", local_url)
    assert cli("registry", "push", str(sample_src), "--model", "demo", "--task",
               "text-generation").out == "1\n"
    assert (Path(local_url) / "demo" / "1" / "MANIFEST.json").is_file()


def test_verify_and_pull(cli: Cli, local_url: str, sample_src: Path, tmp_path: Path) -> None:
    cli("registry", "push", str(sample_src), "--model", "demo", "--task", "feature-extraction",
        "--registry", local_url)
    r = cli("registry", "verify", "demo", "--registry", local_url)
    assert r.code == 0 and "all checksums match" in r.out
    r = cli("registry", "pull", "demo@1", str(tmp_path / "out"), "--registry", local_url)
    assert r.code == 0 and (tmp_path / "out" / "MANIFEST.json").is_file()

    stored = Path(local_url) / "demo" / "1"
    os.chmod(stored / "config.json", stat.S_IRUSR | stat.S_IWUSR)
    (stored / "config.json").write_bytes(b"{}")
    (stored / "tokenizer" / "vocab.txt").unlink()
    r = cli("registry", "verify", "demo@1", "--registry", local_url)
    assert r.code == 2
    assert r.err.splitlines() == [
        "demo@1: config.json: size is 2 bytes, the manifest says 19",
        "demo@1: tokenizer/vocab.txt: missing",
    ]
    r = cli("registry", "verify", "demo@1", "--registry", local_url, "--json")
    assert r.code == 2 and json.loads(r.out)["ok"] is False

    r = cli("registry", "pull", "demo@1", str(tmp_path / "again"), "--registry", local_url)
    line = one_error_line(r)
    assert "demo@1 failed verification" in line and "config.json" in line
    assert not (tmp_path / "again").exists()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["push", "{src}", "--model", "Bad/Name", "--task", "fixed-latency"], "invalid model name"),
        (["push", "{src}", "--model", "demo", "--task", "nope"], "unknown task 'nope'"),
        (["push", "{missing}", "--model", "demo", "--task", "fixed-latency"], "does not exist"),
        (["push", "{src}", "--model", "demo", "--task", "fixed-latency", "--meta", "novalue"],
         "bad --meta 'novalue'"),
        (["push", "{src}", "--model", "demo", "--task", "fixed-latency", "--alias", "latest"],
         "reserved"),
        (["show", "demo@nope"], "no model 'demo'"),
        (["show", "demo@"], "nothing after '@'"),
        (["alias", "demo", "stable", "3"], "no model 'demo'"),
        (["unalias", "demo", "stable"], "no model 'demo'"),
        (["verify", "my model"], "whitespace"),
        (["uri", "demo", "--pvc", "Bad_PVC"], "no model 'demo'"),
        (["list", "ghost"], "no model 'ghost'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli: Cli, local_url: str, sample_src: Path,
                                          tmp_path: Path, args: list[str], fragment: str) -> None:
    filled = [a.format(src=sample_src, missing=tmp_path / "missing") for a in args]
    line = one_error_line(cli("registry", *filled, "--registry", local_url))
    assert fragment in line


def test_alias_errors_with_a_model(cli: Cli, local_url: str, sample_src: Path) -> None:
    cli("registry", "push", str(sample_src), "--model", "demo", "--task", "fixed-latency",
        "--registry", local_url)
    assert "has no version 3" in one_error_line(
        cli("registry", "alias", "demo", "stable", "3", "--registry", local_url))
    assert "has no alias 'stable'" in one_error_line(
        cli("registry", "unalias", "demo", "stable", "--registry", local_url))
    assert "invalid PVC" in one_error_line(
        cli("registry", "uri", "demo", "--pvc", "Bad_PVC", "--registry", local_url))


def test_s3_round_trip_through_the_cli(cli: Cli, s3_url: str, sample_src: Path,
                                       tmp_path: Path) -> None:
    r = cli("registry", "push", str(sample_src), "--model", "demo", "--task",
            "text-classification", "--alias", "stable", "--registry", s3_url)
    assert (r.code, r.out) == (0, "1\n")
    r = cli("registry", "uri", "demo@stable", "--registry", s3_url)
    assert r.out.strip() == f"{s3_url}/demo/1/"
    r = cli("registry", "pull", "demo@stable", str(tmp_path / "m"), "--registry", s3_url)
    assert r.code == 0
    assert (tmp_path / "m" / "model.safetensors").read_bytes() == SAMPLE["model.safetensors"]


def run_modelctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "registry", *args],
        cwd=ROOT_DIR, env={**os.environ, **(env or {})},
        capture_output=True, text=True, timeout=120, check=False,
    )


def test_console_entry_point_exit_codes_and_stderr(tmp_path: Path, seaweed: SeaweedS3) -> None:
    registry = str(tmp_path / "reg")
    src = make_source(tmp_path / "src", {"weights.bin": b"\x00" * 1000})
    ok = run_modelctl("push", str(src), "--model", "demo", "--task", "fixed-latency",
                      "--registry", registry)
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "1\n", "")

    bad = run_modelctl("show", "Demo@1", "--registry", registry)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("error: invalid model name 'Demo'")
    assert bad.stderr.count("\n") == 1

    s3_env = {**seaweed.env(), "AWS_SECRET_ACCESS_KEY": "wrong-secret-value"}
    denied = run_modelctl("list", "--registry", "s3://models/cli", env=s3_env)
    assert denied.returncode == 2 and denied.stderr.count("\n") == 1
    assert "rejected the secret key" in denied.stderr
    assert "wrong-secret-value" not in denied.stderr + denied.stdout
    assert seaweed.secret_key not in denied.stderr + denied.stdout
