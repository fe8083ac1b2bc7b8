"""``modelctl tenants key`` and ``check``: a key made here is one the predictor accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from common.tenants import read_tenants
from tests.support.cli import run_cli


def test_a_made_key_and_its_snippet_make_a_file_the_predictor_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "tenants", "key", "acme", "--json")
    made = json.loads(out)
    assert code == 0 and made["tenant"] == "acme" and made["key"].startswith("mk-")
    code, text, _ = run_cli(monkeypatch, capsys, "tenants", "key", "acme")
    snippet = text[text.index("tenants:"):]
    path = tmp_path / "tenants.yaml"
    path.write_text(snippet)
    key = text.split("\n")[1].strip()
    assert read_tenants(path).tenant_for(key).name == "acme"  # type: ignore[union-attr]
    code, out, _ = run_cli(monkeypatch, capsys, "tenants", "check", str(path), "--json")
    assert code == 0 and json.loads(out)[0]["tenant"] == "acme"
    assert key not in out
    code, out, _ = run_cli(monkeypatch, capsys, "tenants", "check", str(path))
    assert code == 0 and "acme" in out and key not in out


def test_a_bad_file_exits_2_without_echoing_a_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tenants.yaml"
    path.write_text(yaml.safe_dump({"tenants": {"acme": {"keys": ["mk-in-the-clear-123"]}}}))
    code, out, err = run_cli(monkeypatch, capsys, "tenants", "check", str(path))
    assert code == 2 and out == "" and "sha256:" in err
    assert "mk-in-the-clear-123" not in err
    code, _, err = run_cli(monkeypatch, capsys, "tenants", "check", str(tmp_path / "none"))
    assert code == 2 and "cannot read" in err
