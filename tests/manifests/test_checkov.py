"""checkov (its own virtualenv, ``.venv-checkov``: its pins would downgrade botocore
under s3fs) over everything we ship for ``kubectl apply``: ``manifests/`` with its
templates and every kustomize overlay rendered by real kustomize. No check may fail;
a check may be skipped only next to its object (``checkov.io/skipN: ID=reason``) and
only with a reason, which docs/RELIABILITY.md lists.

checkov reads no InferenceService or ServingRuntime, so the pod specs KServe makes
from ours are checked where the real controller makes them
(``tests/system/kserve/test_overlays_on_kserve.py``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.manifests import ROOT

CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"


def run_checkov(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """checkov's Kubernetes checks over ``folder``: its failed and skipped checks."""
    assert CHECKOV.is_file(), f"{CHECKOV} is missing: make setup installs it"
    done = subprocess.run(
        [str(CHECKOV), "-d", str(folder), "--framework", "kubernetes", "--compact",
         "--output", "json", "--skip-download"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: some check failed
    reports = json.loads(done.stdout)
    results = [r["results"] for r in (reports if isinstance(reports, list) else [reports])]
    assert sum(r.get("parsing_errors", 0) for r in (reports if isinstance(reports, list)
                                                    else [reports])) == 0
    return {kind: [check for r in results for check in r.get(kind, [])]
            for kind in ("passed_checks", "failed_checks", "skipped_checks")}


def findings(checks: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{c['check_id']} {c['resource']} ({c['file_path']})" for c in checks)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory,
            rendered: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    import shutil

    folder = tmp_path_factory.mktemp("checkov")
    shutil.copytree(ROOT / "manifests", folder / "manifests")
    for name, text in rendered.items():
        (folder / f"overlay-{name}.yaml").write_text(text)
    return run_checkov(folder)


def test_no_check_fails_on_what_we_ship(shipped: dict[str, list[dict[str, Any]]]) -> None:
    assert len(shipped["passed_checks"]) > 300  # the folder was read
    assert findings(shipped["failed_checks"]) == []


def test_every_skip_says_why(shipped: dict[str, list[dict[str, Any]]]) -> None:
    reasons = [(c["check_id"], (c.get("check_result") or {}).get("suppress_comment", ""))
               for c in shipped["skipped_checks"]]
    assert reasons and all(len(why.split()) >= 8 for _, why in reasons), reasons
    documented = (ROOT / "docs" / "RELIABILITY.md").read_text()
    assert {cid for cid, _ in reasons if cid not in documented} == set()


def test_checkov_fails_what_we_fixed(tmp_path: Path) -> None:
    """The checks we met by changing the objects fail on the objects as they were."""
    import yaml

    from tests.support.manifests import load_all

    job = load_all((ROOT / "manifests/templates/rollout-job.yaml").read_text())[0]
    container = job["spec"]["template"]["spec"]["containers"][0]
    del container["resources"]["limits"]["cpu"]
    del container["imagePullPolicy"]
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    failed = {c["check_id"] for c in run_checkov(tmp_path)["failed_checks"]}
    assert {"CKV_K8S_11", "CKV_K8S_15", "CKV2_K8S_6"} <= failed
