"""The shipped Grafana dashboards: generated from scripts/dashboards.py and committed,
type-checked by ``tsc`` against Grafana's own types (``@grafana/schema``'s dashboard,
panel and plugin option types, ``@grafana/prometheus``'s query type; see
tests/dashboards/tsc/dashboard-types.ts), and shipped as ConfigMaps for the Grafana
sidecar. Every query, its variables substituted, parses as PromQL (promtool); whether
each runs and returns data is checked against real Prometheus servers by the rehearsal,
queue-stack and multi-model system tests, and the LLM row's by promtool over the LLM
predictor's own series (test_llm_row.py)."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts.dashboards import DASHBOARDS, MANIFEST, outputs
from tests.support.grafana import ALL, interpolate, load, panel_queries

TSC_DIR = Path(__file__).parent / "tsc"
PROMTOOL = shutil.which("promtool")


def test_committed_files_are_what_the_builder_writes() -> None:
    stale = [str(path) for path, text in outputs().items()
             if not path.exists() or path.read_text() != text]
    assert not stale, f"regenerate with `python -m scripts.dashboards`: {stale}"


def _tsc(tmp_path: Path, boards: dict[str, dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """tsc --noEmit over one TypeScript file per dashboard: ``const d: ModelctlDashboard =
    <the JSON>``, so every field is checked as an object literal (unknown keys too)."""
    tsc = TSC_DIR / "node_modules" / ".bin" / "tsc"
    assert tsc.exists(), "make setup installs the dashboard type checker (npm ci)"
    work = tmp_path / "tsc"
    (work / "generated").mkdir(parents=True)
    for name in ("tsconfig.json", "dashboard-types.ts"):
        shutil.copy(TSC_DIR / name, work / name)
    (work / "node_modules").symlink_to(TSC_DIR / "node_modules")
    for uid, board in boards.items():
        (work / "generated" / f"{uid}.ts").write_text(
            'import type { ModelctlDashboard } from "../dashboard-types";\n'
            f"export const dashboard: ModelctlDashboard = {json.dumps(board, indent=2)};\n")
    return subprocess.run([str(tsc), "-p", str(work / "tsconfig.json")], capture_output=True,
                          text=True, timeout=300, check=False)


def test_dashboards_type_check_against_grafanas_types(tmp_path: Path) -> None:
    done = _tsc(tmp_path, {uid: load(uid) for uid in DASHBOARDS})
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_type_check_catches_what_grafana_would_not_read(tmp_path: Path) -> None:
    board = copy.deepcopy(load("modelctl-serving"))
    panel = next(p for p in board["panels"] if p["type"] == "timeseries")
    panel["options"]["legnd"] = panel["options"].pop("legend")   # a misspelt option
    del board["panels"][-1]["targets"][0]["expr"]                 # a target with no query
    board["panels"][0]["type"] = "rows"                           # no such panel type
    done = _tsc(tmp_path, {"broken": board})
    assert done.returncode != 0
    assert "legnd" in done.stdout and "expr" in done.stdout and "rows" in done.stdout, (
        done.stdout)


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_layout_ids_and_variables(uid: str) -> None:
    board = load(uid)
    assert board["uid"] == uid and board["title"].startswith("modelctl / ")
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    names = {v["name"] for v in board["templating"]["list"]}
    assert names >= {"datasource", "namespace", "isvc"}
    for query in panel_queries(board):
        used = set(re.findall(r"\$\{?(\w+)", query.expr)) - {"__rate_interval"}
        assert used <= names, (query.panel, used - names)
        assert re.search(r'namespace=~"\$namespace"', query.expr), query
        assert re.search(r'isvc=~"\$isvc"', query.expr), query
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_configmaps_for_the_grafana_sidecar() -> None:
    docs = list(yaml.safe_load_all(MANIFEST.read_text()))
    assert [d["metadata"]["name"] for d in docs] == [
        f"grafana-dashboard-{uid}" for uid in DASHBOARDS]
    for doc, uid in zip(docs, DASHBOARDS, strict=True):
        assert doc["kind"] == "ConfigMap" and doc["metadata"]["namespace"] == "modelctl"
        assert doc["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert list(doc["data"]) == [f"{uid}.json"]
        assert json.loads(doc["data"][f"{uid}.json"]) == load(uid)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus, "
                    "`make setup`) is not installed")
@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_every_query_parses_as_promql(uid: str, tmp_path: Path) -> None:
    """Each panel and annotation query, variables set to "All" and ``$__rate_interval``
    computed, as a recording rule: ``promtool check rules`` parses every expression."""
    assert PROMTOOL is not None
    board = load(uid)
    chosen = {v["name"]: ALL for v in board["templating"]["list"] if v["type"] == "query"}
    exprs = [q.expr for q in panel_queries(board)]
    exprs += [a["target"]["expr"] for a in board["annotations"]["list"]]
    rules = [{"record": f"dashboard:query_{i}:parsed",
              "expr": interpolate(e, board, chosen, interval_s=15, scrape_s=15)}
             for i, e in enumerate(exprs)]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": uid, "rules": rules}]}, width=1000))
    done = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(rules)} rules found" in done.stdout, done.stdout
