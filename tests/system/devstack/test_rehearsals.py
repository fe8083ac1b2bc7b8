"""End-to-end rollout rehearsals on ``modelctl dev``: real predictors, nginx, Prometheus.

One environment serves the fixed-latency model; each rehearsal pushes a new version,
starts ``modelctl dev load`` (open loop, 100 req/s), and drives ``modelctl rollout``
with ``--target local`` and the shipped analysis (4 s intervals, steps 20,50):

1. a canary that behaves like stable steps through every weight and is promoted;
   the registry alias ``stable`` moves to it;
2. the same version with 100 ms of injected latency is rolled back by the judge
   within two intervals; traffic goes back to stable; ``rollout status`` shows the
   numbers that decided it;
3. the same version answering 5% of requests with 500 is rolled back;

and, last, every query of the shipped Grafana dashboards runs against what the first two
left in Prometheus. Each rehearsal is a module-scoped fixture, run once by the first test
that asks for it, so any one test runs alone (``-k``) with the data it needs.

In every one, the load sees no failure the rollout caused: no connection errors,
timeouts, 502/503/504; every request nginx logged went to one predictor, without a
retry; the only non-2xx answers are the erroring canary's own 500s.

Why 100 req/s: the analysis needs 50 requests per version per interval
(``min_requests``); at 20% for 4 s the canary gets about 80.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from registry import Registry
from tests.support import free_port
from tests.support.browser import view
from tests.support.devstack import MODEL, Access, DevCli, push_version, state_of, stop_recorded
from tests.support.grafana import (
    ALL,
    Prometheus,
    annotations_without_data,
    load,
    no_data,
    queries_in,
    variables_offer,
)

RATE = 100
INTERVAL_S = 4
STEPS = "20,50"


@pytest.fixture(scope="module")
def env(dev_cli: DevCli) -> Iterator[str]:
    """The rehearsal environment: stable = version 1, Prometheus scraping every second."""
    up = dev_cli.run("dev", "up", MODEL, "--port", str(free_port()), "--scrape-interval", "1s")
    try:
        assert up.returncode == 0, up.stderr
        yield MODEL
        down = dev_cli.run("dev", "down", MODEL)
        assert down.returncode == 0, down.stderr
    finally:
        stop_recorded(dev_cli.state_dir, MODEL)


@dataclass
class Rehearsal:
    version: int
    run_code: int
    run_out: str
    status: dict[str, Any]
    history: list[dict[str, Any]]
    load: dict[str, Any]
    access: list[Access]
    diagnosis: str = ""

    def explain(self) -> str:
        """What a failed rehearsal's assertion shows: the run, the load, the targets."""
        return f"{self.run_out}\n{self.diagnosis}"

    def kinds(self) -> list[str]:
        return [d["kind"] for d in self.history]

    def at(self, kind: str) -> float:
        return float(next(d["at"] for d in self.history if d["kind"] == kind))


def _rehearse(dev_cli: DevCli, *canary_args: str, load_s: float) -> Rehearsal:
    version = push_version(dev_cli.registry)
    load = dev_cli.load(MODEL, rate=RATE, duration_s=load_s)
    extra = [f"--canary-arg={a}" for a in canary_args]
    finished = False
    try:
        dev_cli.json("rollout", "start", MODEL, "--to", f"{MODEL}@{version}", "--target",
                     "local", "--steps", STEPS, "--interval", f"{INTERVAL_S}s", *extra)
        run = dev_cli.run("rollout", "run", MODEL, "--target", "local", "--poll", "1s",
                          "--deadline", f"{load_s - 4:g}s")
        status = dev_cli.json("rollout", "status", MODEL, "--target", "local")
        history = dev_cli.json("rollout", "history", MODEL, "--target", "local")
        finished = status["state"]["phase"] in ("Promoted", "RolledBack")
    finally:  # a rehearsal that failed half-way must not hold up the next one
        if not finished:
            dev_cli.run("rollout", "rollback", MODEL, "--target", "local")
    summary, access = load.finish()
    return Rehearsal(version, run.returncode, run.stdout + run.stderr, status, history,
                     summary, access, _diagnosis(dev_cli, summary, access))


def _diagnosis(dev_cli: DevCli, summary: dict[str, Any], access: list[Access]) -> str:
    state = state_of(dev_cli.state_dir, MODEL)
    lines = [f"load: {summary['status_counts']}, sent {summary['sent']}, "
             f"on schedule {summary['on_schedule']}; access log: {len(access)} lines"
             + (f" from {access[0].at:.1f} to {access[-1].at:.1f}" if access else "")]
    try:
        targets = httpx.get(f"http://127.0.0.1:{state['prometheus_port']}/api/v1/targets",
                            timeout=5).json()["data"]["activeTargets"]
        lines += [f"target {t['scrapeUrl']}: {t['health']} {t['lastError']} "
                  f"({t['lastScrapeDuration']:.3f}s)" for t in targets]
    except (httpx.HTTPError, KeyError, ValueError) as exc:
        lines.append(f"Prometheus targets unreadable: {exc!r}")
    error_log = dev_cli.state_dir / MODEL / "nginx" / "logs" / "error.log"
    lines.append("nginx error log: " + error_log.read_text()[-1500:])
    return "\n".join(lines)


def _no_failures_caused_by_the_rollout(r: Rehearsal, *, canary_500s: bool = False) -> None:
    counts = r.load["status_counts"]
    assert r.load["transport_failures"] == 0, counts
    assert set(counts) <= ({"200", "500"} if canary_500s else {"200"}), counts
    assert len(r.access) == r.load["sent"], "requests lost before nginx logged them"
    assert not [a for a in r.access if len(a.upstreams) != 1], "nginx had to retry requests"
    by_route = Counter((a.route, a.status) for a in r.access)
    assert by_route[("stable", 500)] == 0
    assert by_route[("canary", 500)] == counts.get("500", 0)


@pytest.fixture(scope="module")
def promoted(dev_cli: DevCli, env: str) -> Rehearsal:
    """Rehearsal 1: a canary that behaves like stable."""
    return _rehearse(dev_cli, load_s=30)


@pytest.fixture(scope="module")
def slow(dev_cli: DevCli, env: str) -> Rehearsal:
    """Rehearsal 2: the same version with 100 ms of injected latency."""
    return _rehearse(dev_cli, "inject_latency_ms=100", load_s=30)


def test_a_good_canary_is_promoted_and_the_stable_alias_moves(dev_cli: DevCli,
                                                               promoted: Rehearsal) -> None:
    r = promoted
    assert r.run_code == 0, r.explain()
    steps = [d["numbers"].get("to_pct") for d in r.history if d["kind"] == "StepAdvanced"]
    assert steps == [50] and r.kinds()[0] == "RolloutStarted" and r.kinds()[-1] == "Promoted"
    assert r.kinds().count("CanaryReady") == 2  # at 20% and at 50%
    assert Registry.open(str(dev_cli.registry)).aliases(MODEL) == {"stable": r.version}
    observed = r.status["observed"]
    assert r.status["state"]["phase"] == "Promoted" and observed["restored"]
    serving = observed["detail"]["predictors"]
    assert list(serving) == ["stable"] and serving["stable"]["version"] == r.version
    assert observed["detail"]["routes"]["canary"] is None
    promoted_at = r.at("Promoted")
    after = [a for a in r.access if a.at > promoted_at + 1]
    assert after and all(a.upstreams[0] == serving["stable"]["address"] for a in after)
    events = dev_cli.json("rollout", "history", MODEL, "--target", "local", "--events")
    assert [e["reason"] for e in events][-len(r.history):] == r.kinds()
    assert events[-1]["involvedObject"] == {"kind": "DevEnvironment", "name": MODEL}
    _no_failures_caused_by_the_rollout(r)


def test_a_slow_canary_is_rolled_back_within_two_intervals(dev_cli: DevCli, slow: Rehearsal,
                                                          tmp_path: Path) -> None:
    r = slow
    assert r.run_code == 1, r.explain()  # rolled back
    assert r.kinds() == ["RolloutStarted", "CanaryReady", "AnalysisFailed", "RollbackStarted",
                         "RolledBack"], r.explain()
    assert r.at("RollbackStarted") - r.at("CanaryReady") <= 2 * INTERVAL_S + 2
    # Traffic is back on stable, and status shows the numbers that decided it.
    assert r.status["state"]["phase"] == "RolledBack"
    assert r.status["observed"]["detail"]["routes"]["canary"] is None
    back_at = r.at("RolledBack")
    assert all(a.route == "stable" for a in r.access if a.at > back_at)
    metrics = {m["name"]: m for m in r.status["state"]["last_analysis"]["metrics"]}
    latency = metrics["p99-latency"]
    assert latency["verdict"] == "Fail" and latency["canary"] > latency["stable"]
    assert latency["statistics"]["ratio"] > 1.2 and latency["statistics"]["p_value"] < 0.01
    # No more errors than stable: healthy, though two short intervals cannot yet
    # prove it within 1 point (the sequential judge's evidence is still accumulating).
    errors = metrics["error-rate"]
    assert errors["verdict"] == "Pass" or errors["accumulating"], errors
    text = dev_cli.ok("rollout", "status", MODEL, "--target", "local")
    assert "p99-latency" in text and "Fail" in text and "RolledBack" in text
    assert Registry.open(str(dev_cli.registry)).aliases(MODEL).get("canary") is None
    _no_failures_caused_by_the_rollout(r)
    _the_report_shows_the_rollback(dev_cli, r, tmp_path)


def _the_report_shows_the_rollback(dev_cli: DevCli, r: Rehearsal, out: Path) -> None:
    """``rollout report`` of this rehearsal: its data, its PNGs, and its page as a real
    browser shows it (no console error, nothing fetched, every figure drawn)."""
    page = out / "rollout-report.html"
    doc = dev_cli.json("rollout", "report", MODEL, "--target", "local", "--out", str(page),
                       "--png", str(out / "png"), "--json")
    assert doc["phase"] == "RolledBack" and doc["canary_version"] == r.version
    assert [d["kind"] for d in doc["decisions"]] == r.kinds()
    assert [w["kind"] for w in doc["windows"]] == ["AnalysisFailed", "RollbackStarted"]
    assert all(w["metrics"]["p99-latency"]["verdict"] == "Fail" for w in doc["windows"])
    panels = {p["name"]: p for p in doc["metrics"]}
    assert set(panels) == {"error-rate", "throttle-rate", "p99-latency"}
    assert all(p["error"] is None and p["series"]["canary"] and p["series"]["stable"]
               for p in panels.values()), panels
    latency = panels["p99-latency"]["series"]
    assert max(v for _, v in latency["canary"]) > 1.5 * max(v for _, v in latency["stable"])
    assert [Path(p).name for p in doc["png"]] == [
        "timeline.png", "error-rate.png", "throttle-rate.png", "p99-latency.png"]
    assert all(Path(p).stat().st_size > 5000 for p in doc["png"])

    seen = view(page, out / "rollout-report.png")
    assert seen.console_errors == [] and seen.external_requests == []
    assert seen.svg_count == 4  # the timeline and one figure per analysed metric
    assert f"Rollout of {MODEL}@{r.version}" in seen.title
    assert "RolledBack" in seen.text and "AnalysisFailed" in seen.text
    assert "p99-latency" in seen.text and "Fail" in seen.text


def test_an_erroring_canary_is_rolled_back(dev_cli: DevCli, env: str) -> None:
    r = _rehearse(dev_cli, "inject_error_rate=0.05", load_s=34)
    assert r.run_code == 1, r.explain()
    assert r.kinds()[-2:] == ["RollbackStarted", "RolledBack"]
    failed = [d for d in r.history if d["kind"] in ("AnalysisFailed", "RollbackStarted")]
    assert all(d["numbers"]["error-rate.verdict"] == "Fail" for d in failed)
    assert r.load["status_counts"].get("500", 0) > 0  # the canary's own answers
    _no_failures_caused_by_the_rollout(r, canary_500s=True)


def test_operator_verbs_drive_the_local_gateway(dev_cli: DevCli, env: str) -> None:
    version = push_version(dev_cli.registry)
    target = ("--target", "local")
    start = ("rollout", "start", MODEL, "--to", f"{MODEL}@{version}", "--steps", "10,60",
             "--interval", "1m", *target)
    planned = dev_cli.json(*start, "--dry-run")["planned"]
    assert planned["change"] == "Deploy" and planned["routes"]["canary_weight_pct"] == 10
    assert planned["start"] == [f"predictor-canary {MODEL}@{version}"]
    assert "predictor-canary" not in _components(dev_cli)  # a dry run starts nothing

    dev_cli.json(*start)
    assert _routes(dev_cli)["canary_weight_pct"] == 10
    assert dev_cli.json("rollout", "pause", MODEL, "--reason", "dashboards", *target)["paused"]
    assert not dev_cli.json("rollout", "resume", MODEL, *target)["paused"]
    assert dev_cli.json("rollout", "analyze", MODEL, *target)["verdict"] == "Inconclusive"
    assert dev_cli.json("rollout", "promote", MODEL, *target)["weight_pct"] == 60
    assert _routes(dev_cli)["canary_weight_pct"] == 60
    back = dev_cli.json("rollout", "rollback", MODEL, "--reason", "operator", *target)
    assert back["phase"] == "RolledBack"
    assert _routes(dev_cli)["canary"] is None and "predictor-canary" not in _components(dev_cli)
    kinds = [d["kind"] for d in dev_cli.json("rollout", "history", MODEL, *target)]
    assert kinds == ["RolloutStarted", "Paused", "Resumed", "StepAdvanced", "RollbackStarted",
                     "RolledBack"]
    assert Registry.open(str(dev_cli.registry)).aliases(MODEL).get("canary") is None


def _routes(dev_cli: DevCli) -> dict[str, Any]:
    routes: dict[str, Any] = dev_cli.json("dev", "status", MODEL)["routes"]
    return routes


def _components(dev_cli: DevCli) -> list[str]:
    return [c["name"] for c in dev_cli.json("dev", "status", MODEL)["components"]]


def test_the_dashboards_show_the_rehearsals(dev_cli: DevCli, promoted: Rehearsal,
                                            slow: Rehearsal) -> None:
    """Every panel query of both shipped dashboards, as Grafana would send it, over what
    the promoted and the slow rehearsal left in the environment's Prometheus: each one
    parses and runs; each returns data except those of modes this environment does not
    run."""
    state = state_of(dev_cli.state_dir, MODEL)
    prom = Prometheus(f"http://127.0.0.1:{state['prometheus_port']}", scrape_s=1.0)
    end = time.time()
    start = end - 900
    chosen = {"namespace": "local", "isvc": MODEL, "model": MODEL, "version": ALL,
              "role": ALL}
    serving = load("modelctl-serving")
    offered = variables_offer(serving, prom, chosen, start, end)
    assert offered["namespace"] == ["local"] and offered["isvc"] == [MODEL]
    assert offered["model"] == [MODEL] and set(offered["role"]) == {"stable", "canary"}
    assert {"1", "2"} <= set(offered["version"])
    # In-process, fixed-latency: no tokens to pad, no multi-model, queue or LLM series.
    padding = ("Batch cap and padding", "{{model}}@{{version}} {{role}} padding")
    absent = queries_in(serving, rows=("Multi-model", "Queue mode", "LLM", "Accuracy"),
                        panels=[padding])
    assert no_data(serving, prom, chosen, start, end, step_s=2.0) == absent

    rollouts = load("modelctl-rollouts")
    assert variables_offer(rollouts, prom, chosen, start, end) == {
        "namespace": ["local"], "isvc": [MODEL]}
    # Including the weight `rollout run` exported (its Prometheus was told of it) and
    # its decisions as annotations.
    assert no_data(rollouts, prom, chosen, start, end, step_s=2.0) == set()
    assert annotations_without_data(rollouts, prom, chosen, start, end, step_s=2.0) == set()
    # Every kind the rehearsals took reached Prometheus, the final ones too: a run
    # waits for its last state to be scraped before it exits. (A range vector, not
    # steps: a run's last sample may live less than one step before its target goes.)
    seen = httpx.get(f"{prom.url}/api/v1/query", timeout=10, params={
        "query": f'count by (kind) (count_over_time(modelctl_rollout_decisions_total'
                 f'{{isvc="{MODEL}"}}[15m]))', "time": end}).json()["data"]["result"]
    kinds = {s["metric"]["kind"] for s in seen}
    assert {"RolloutStarted", "CanaryReady", "StepAdvanced", "Promoted", "AnalysisFailed",
            "RollbackStarted", "RolledBack"} <= kinds
