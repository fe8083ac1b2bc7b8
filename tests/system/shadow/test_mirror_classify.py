"""A text task end to end: demo-classify versions as real predictor processes.

Version 1 is the demo build (a seeded random BERT); version 3 is the same files
pushed again (a shadow that agrees); version 2 has the same weights with its labels
permuted (a shadow that disagrees on every item). The primary mirrors to version 3;
the same requests go to version 2 as a mesh mirror would send them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import view
from tests.support.fleet import Fleet, run_cli, wait_records
from tests.support.fleet_worlds import CLASSIFY as MODEL
from tests.support.fleet_worlds import ClassifyWorld

REQUESTS = 36


@pytest.fixture(scope="module")
def world(fleet: Fleet, spawned: dict[str, Any]) -> ClassifyWorld:
    world: ClassifyWorld = spawned["classify"]
    fleet.wait_ready(world.all, timeout_s=240)
    for i in range(REQUESTS):
        texts = [f"the service was fine {i}", f"shipping took {i} days"]
        assert world.primary.predict(texts, f"c-{i}").status_code == 200
        assert world.disagree.predict(texts, f"c-{i}", shadow=True).status_code == 200
    wait_records(world.capture, REQUESTS, role="stable")
    wait_records(world.capture, REQUESTS, role="shadow", version="3")
    wait_records(world.capture, REQUESTS, role="shadow", version="2")
    return world


def _report(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            world: ClassifyWorld, version: str, *extra: str) -> tuple[int, dict[str, object]]:
    code, out, err = run_cli(monkeypatch, capsys, "shadow", "report", MODEL, "--primary",
                             str(world.capture), "--shadow", str(world.capture),
                             "--shadow-version", version, "--format", "json", *extra)
    assert out.strip(), err
    return code, json.loads(out)


def test_the_agreeing_classifier_passes(world: ClassifyWorld, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _report(monkeypatch, capsys, world, "3")
    assert code == 0 and doc["verdict"] == "Pass"
    agreement = doc["agreement"]
    assert agreement["items"] == 2 * REQUESTS  # type: ignore[index]
    assert agreement["label_match_rate"] == 1.0  # type: ignore[index]
    assert all(c["primary"] == c["shadow"] for c in agreement["confusion"])  # type: ignore[index]
    assert doc["task"] == "text-classification" and doc["coverage"] == 1.0


def test_the_relabelled_classifier_fails_with_its_confusion(
        world: ClassifyWorld, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    page = tmp_path / "shadow-report.html"
    code, doc = _report(monkeypatch, capsys, world, "2", "--html", str(page))
    assert code == 1 and doc["verdict"] == "Fail"
    checks = {c["name"]: c for c in doc["checks"]}  # type: ignore[attr-defined]
    assert checks["label-match"]["verdict"] == "Fail"
    assert checks["label-match"]["value"] < 0.5
    assert checks["label-match"]["interval"][1] < 0.95
    confusion = doc["agreement"]["confusion"]  # type: ignore[index]
    assert confusion and all(c["primary"] != c["shadow"] for c in confusion)
    # The page, as a real browser shows it: no console error, nothing fetched, the
    # confusion matrix and the latency CDFs drawn.
    seen = view(page, tmp_path / "shadow-report.png")
    assert seen.console_errors == [] and seen.external_requests == []
    assert seen.svg_count == 2 and "Labels: primary against shadow" in seen.text
    assert "label-match" in seen.text and "Fail" in seen.text
