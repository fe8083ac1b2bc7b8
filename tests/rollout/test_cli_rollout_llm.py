"""``modelctl rollout`` picks the shipped default analysis by the canary's registry task:
``start`` reads the task from the version's manifest and keeps it with the rollout, and
``analyze``, ``run`` and ``report`` use the generative default for ``llm`` and the
request-latency one for any other task. Against the emulated Kubernetes API, a real
local registry and a real Prometheus (scraping nothing: every metric is no data)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout.analysis._analysis import load_analysis
from tests.rollout.test_cli_rollout import Cli
from tests.support import wait_for
from tests.support.cli import run_cli
from tests.support.prom import PrometheusServer
from tests.support.rollout_world import ISVC, MODEL, NAMESPACE, make_world

LLM_CHECKS = ["error-rate", "throttle-rate", "ttft-p99", "tpot-p99"]
CLASSIC_CHECKS = ["error-rate", "throttle-rate", "p99-latency"]


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Iterator[Cli]:
    world = make_world(tmp_path, time.time, mode="Knative")
    kubeconfig = world.api.write_kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)
    yield Cli(world, kubeconfig, str(tmp_path / "registry"), monkeypatch, capsys)
    world.sim.stop()
    world.api.stop()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    with PrometheusServer([], tmp_path_factory.mktemp("prometheus")) as server:
        yield server


def push_llm_version(cli: Cli, tmp_path: Path) -> int:
    """A version of the world's model whose registry task is llm (its files do not matter
    here: nothing loads it)."""
    src = tmp_path / "src-llm"
    src.mkdir()
    (src / "config.json").write_text("{}")
    return cli.world.registry.push(src, MODEL, "llm").version


def test_an_llm_canary_is_analysed_on_ttft_and_tpot(cli: Cli, prometheus: PrometheusServer,
                                                    tmp_path: Path) -> None:
    version = push_llm_version(cli, tmp_path)
    doc = cli.json("start", ISVC, "--to", f"{MODEL}@{version}", "--interval", "1s",
                   "--prometheus-url", prometheus.url)
    assert (cli.world.state() or {})["task"] == "llm"
    notes = "\n".join(doc["notes"])  # start's traffic check ran the generative default
    assert "traffic: ttft-p99: at 5% the canary gets 0 requests" in notes
    assert "traffic: tpot-p99:" in notes and "p99-latency" not in notes

    analysis = cli.json("analyze", ISVC, "--prometheus-url", prometheus.url)
    assert [m["name"] for m in analysis["metrics"]] == LLM_CHECKS
    cli.world.sim.start(interval_s=0.02)
    wait_for(lambda: cli.world.isvc()["status"]["components"]["predictor"][
        "latestReadyRevision"] == "demo-predictor-00002", timeout_s=10, what="the canary")
    code, _, err = cli("run", ISVC, "--prometheus-url", prometheus.url, "--poll", "0.2s",
                       "--deadline", "3s")
    assert code == 3, err  # no data: it holds, analysing with the generative default
    last = (cli.world.state() or {})["last_analysis"]
    assert [m["name"] for m in last["metrics"]] == LLM_CHECKS
    report = cli.json("report", ISVC, "--prometheus-url", prometheus.url,
                      "--out", str(tmp_path / "r.html"))
    assert [m["name"] for m in report["metrics"]] == LLM_CHECKS


def test_any_other_task_keeps_the_request_latency_default(
        cli: Cli, prometheus: PrometheusServer) -> None:
    cli.json("start", ISVC, "--to", f"{MODEL}@2", "--prometheus-url", prometheus.url)
    assert (cli.world.state() or {})["task"] == "fixed-latency"
    analysis = cli.json("analyze", ISVC, "--prometheus-url", prometheus.url)
    assert [m["name"] for m in analysis["metrics"]] == CLASSIC_CHECKS


def test_an_analysis_file_beats_the_task(cli: Cli, prometheus: PrometheusServer,
                                         tmp_path: Path) -> None:
    version = push_llm_version(cli, tmp_path)
    slo = tmp_path / "slo.yaml"
    slo.write_text('metrics:\n  - name: up\n    query: up{version="{version}"}\n    max: 1\n')
    cli.json("start", ISVC, "--to", f"{MODEL}@{version}", "--analysis", str(slo))
    analysis = cli.json("analyze", ISVC, "--prometheus-url", prometheus.url)
    assert [m["name"] for m in analysis["metrics"]] == ["up"]


def _listed(names: list[str]) -> str:
    return f"{', '.join(names[:-1])} and {names[-1]}"


@pytest.mark.parametrize("command", ["start", "run", "analyze", "report"])
def test_help_names_the_checks_of_each_default(command: str, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The --analysis help lists what each shipped default checks: held to the files."""
    code, out, _ = run_cli(monkeypatch, capsys, "rollout", command, "--help")
    text = re.sub(r"\s+", " ", out.replace("│", " "))
    llm = [m.name for m in load_analysis(task="llm").metrics]
    classic = [m.name for m in load_analysis().metrics]
    assert code == 0
    assert f"for task llm {_listed(llm)}; for any other {_listed(classic)})" in text, text
