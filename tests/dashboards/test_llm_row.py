"""The serving dashboard's LLM row against the LLM predictor's own series: every metric and
label it names is one ``predictor.llm._metrics`` registers, and real ``promtool`` runs
each of its queries, as Grafana would send them, over series that ``LLMMetrics`` itself
exported for two versions of one LLM (a stable and a canary) at each of nine scrapes,
with the labels a cluster's scrape adds; each query returns the values worked out by
hand below. No LLM runs: the system tests of the other rows run no LLM either, and
count this row among those with no data."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from predictor.llm._engine import EngineStats
from predictor.llm._metrics import LLMMetrics
from tests.support.grafana import ALL, PanelQuery, interpolate, load, panel_queries

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool (Debian package prometheus, `make setup`) is not installed"
)
WHO = "{{model}}@{{version}} {{role}}"
SCRAPE_S = 15
SCRAPES = 9  # 0 s to 120 s; queries are evaluated at 120 s over the last 60 s


def llm_queries() -> list[PanelQuery]:
    return [q for q in panel_queries(load("modelctl-serving")) if q.row.startswith("LLM")]


@dataclass(frozen=True)
class Traffic:
    """What one version serves in each 15 s between scrapes, every request alike."""

    version: str
    role: str
    requests: int
    ttft_s: float
    tpot_s: float
    e2e_s: float
    prompt_tokens: int
    output_tokens: int
    finished: dict[str, int]
    engine: EngineStats


STABLE = Traffic("1", "stable", requests=30, ttft_s=0.4, tpot_s=0.03, e2e_s=0.75,
                 prompt_tokens=10, output_tokens=20, finished={"stop": 15, "length": 15},
                 engine=EngineStats(running=4, waiting=2, preempted=1, kv_blocks_total=120,
                                    kv_blocks_free=90))
CANARY = Traffic("2", "canary", requests=15, ttft_s=1.2, tpot_s=0.07, e2e_s=3.0,
                 prompt_tokens=30, output_tokens=60, finished={"stop": 15},
                 engine=EngineStats(running=8, waiting=3, preempted=0, kv_blocks_total=100,
                                    kv_blocks_free=25))

# (panel, legend after the version's name) -> (stable's value, canary's value). Quantiles
# interpolate in the bucket every observation fell in: TTFT (0.3, 0.5] and (1, 1.5],
# TPOT (0.02, 0.04] and (0.06, 0.08], end to end (0.5, 1] and (2.5, 5]. Rates are a
# scrape interval's increase over 15 s.
EXPECTED = {
    ("Time to first token", "TTFT p50"): (0.4, 1.25),
    ("Time to first token", "TTFT p99"): (0.498, 1.495),
    ("Time per output token", "TPOT p50"): (0.03, 0.07),
    ("Time per output token", "TPOT p99"): (0.0398, 0.0798),
    ("End-to-end latency", "end to end p99"): (0.995, 4.975),
    ("Token throughput", "output"): (40, 60),   # 30 x 20 and 15 x 60 tokens in 15 s
    ("Token throughput", "prompt"): (20, 30),
    ("Sequences running, waiting and preempted", "running"): (4, 8),
    ("Sequences running, waiting and preempted", "waiting"): (2, 3),
    ("Sequences running, waiting and preempted", "preempted"): (1, 0),
    ("KV cache used", ""): (0.25, 0.75),        # 30 of 120 blocks, 75 of 100
}
# Both versions together: 30 stop and 15 length sequences every 15 s; the other
# reasons are exported at 0.
FINISHED = {"stop": 2, "length": 1, "cancelled": 0, "error": 0, "deadline": 0, "rejected": 0}


def _serve(metrics: LLMMetrics, traffic: Traffic) -> None:
    for _ in range(traffic.requests):
        metrics.prompt_tokens.inc(traffic.prompt_tokens)
        metrics.ttft.observe(traffic.ttft_s)
        for _ in range(traffic.output_tokens - 1):
            metrics.tpot.observe(traffic.tpot_s)
        metrics.generation_tokens.inc(traffic.output_tokens)
        metrics.e2e.observe(traffic.e2e_s)
    for reason, count in traffic.finished.items():
        metrics.finished[reason].inc(count)


def _samples(registry: CollectorRegistry) -> dict[str, float]:
    """Every sample as ``name{labels}`` (the scrape's namespace and isvc added) -> value."""
    out = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            labels = {"namespace": "ml", "isvc": "chat", **s.labels}
            text = ",".join(f'{k}="{v}"' for k, v in labels.items())
            out[f"{s.name}{{{text}}}"] = s.value
    return out


def exported() -> list[dict[str, float]]:
    """What a scrape of the two versions read, at each of ``SCRAPES`` scrapes."""
    registry = CollectorRegistry()
    llms = [(LLMMetrics.create("chat", t.version, t.role, lambda t=t: t.engine,
                               registry=registry), t) for t in (STABLE, CANARY)]
    scrapes = []
    for _ in range(SCRAPES):
        for metrics, traffic in llms:
            _serve(metrics, traffic)
        scrapes.append(_samples(registry))
    return scrapes


def test_the_row_names_every_llm_series_and_only_those() -> None:
    names = {n.split("{")[0] for n in exported()[0]}
    families = {re.sub(r"_(bucket|sum|count|total)$", "", n) for n in names}
    named = {m for q in llm_queries() for m in re.findall(r"\bmodelctl_\w+", q.expr)}
    assert named <= names, named - names
    # The cache's size in tokens is a fact of the deployment, read by `modelctl profile`,
    # not something to watch: no panel.
    unpanelled = {"modelctl_llm_kv_cache_capacity_tokens"}
    assert {re.sub(r"_(bucket|total)$", "", n) for n in named} == families - unpanelled
    # The label values the row picks out are the ones the code exports.
    states = set(re.findall(r'state="(\w+)"', " ".join(exported()[0])))
    assert states == {"used", "free"}
    reasons = set(re.findall(r'finish_reason="(\w+)"', " ".join(exported()[0])))
    assert reasons == set(FINISHED)


def _expected(query: PanelQuery) -> list[dict[str, Any]]:
    if query.legend == "{{finish_reason}}":
        return [{"labels": f'{{finish_reason="{r}"}}', "value": v} for r, v in FINISHED.items()]
    key = (query.panel, query.legend.removeprefix(WHO).strip())
    assert key in EXPECTED, f"no expected values for {key}"
    return [{"labels": f'{{model="chat",version="{t.version}",role="{t.role}"}}', "value": v}
            for t, v in zip((STABLE, CANARY), EXPECTED[key], strict=True)]


@needs_promtool
def test_promtool_runs_the_rows_queries_over_the_llm_series(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    board = load("modelctl-serving")
    scrapes = exported()
    series = [{"series": name, "values": " ".join(repr(s[name]) for s in scrapes)}
              for name in scrapes[0]]
    # The same series in another namespace: the namespace selector must keep them out.
    series += [{"series": s["series"].replace('namespace="ml"', 'namespace="other"'),
                "values": s["values"]} for s in series]
    chosen = {"namespace": "ml", "isvc": "chat", "model": ALL, "version": ALL, "role": ALL}
    tests = []
    for query in llm_queries():
        expr = interpolate(query.expr, board, chosen, interval_s=SCRAPE_S, scrape_s=SCRAPE_S)
        assert "$" not in expr, expr
        tests.append({"expr": f"round({expr}, 0.0001)",
                      "eval_time": f"{(SCRAPES - 1) * SCRAPE_S}s",
                      "exp_samples": _expected(query)})
    assert len(tests) == len(EXPECTED) + 1
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({
        "rule_files": [], "evaluation_interval": f"{SCRAPE_S}s",
        "tests": [{"interval": f"{SCRAPE_S}s", "input_series": series,
                   "promql_expr_test": tests}]}, width=1000))
    run = subprocess.run([PROMTOOL, "test", "rules", "tests.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
