"""``analysis_spec`` and ``prepare_analysis``: the one place an analysis is chosen, built
over Prometheus and checked before anything changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry import TASKS
from rollout import AnalysisSpecError, RolloutError, SourceUnreachableError
from rollout.analysis import AnalysisContext, analysis_spec, prepare_analysis
from rollout.analysis._analysis import DEFAULT_ANALYSIS, TASK_DEFAULTS
from tests.support import free_port

STORED = 'metrics:\n  - name: stored-up\n    query: up{version="{version}"}\n    max: 1\n'
CTX = AnalysisContext("models", "demo", "1", "2", 60.0)


def test_a_file_beats_the_stored_spec_which_beats_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "slo.yaml"
    path.write_text(STORED.replace("stored-up", "file-up"))
    assert [m.name for m in analysis_spec(path, stored=STORED).metrics] == ["file-up"]
    stored = analysis_spec(None, stored=STORED, stored_source="the analysis stored on x")
    assert [m.name for m in stored.metrics] == ["stored-up"]
    assert stored.source == "the analysis stored on x"
    assert analysis_spec().source == DEFAULT_ANALYSIS


def test_the_canary_task_picks_the_default_and_llm_gets_the_generative_one() -> None:
    llm = analysis_spec(task="llm")
    assert llm.source == "default_analysis_llm.yaml"
    assert [m.name for m in llm.metrics] == ["error-rate", "throttle-rate", "ttft-p99",
                                             "tpot-p99"]
    for task in (*(t for t in TASKS if t != "llm"), None, "no-such-task"):
        classic = analysis_spec(task=task)
        assert classic.source == DEFAULT_ANALYSIS, task
        assert [m.name for m in classic.metrics] == ["error-rate", "throttle-rate",
                                                     "p99-latency"]
    assert set(TASK_DEFAULTS) <= set(TASKS)  # every mapped task is one the registry takes


def test_a_file_or_a_stored_spec_beats_the_task(tmp_path: Path) -> None:
    path = tmp_path / "slo.yaml"
    path.write_text(STORED.replace("stored-up", "file-up"))
    assert [m.name for m in analysis_spec(path, task="llm").metrics] == ["file-up"]
    stored = analysis_spec(None, stored=STORED, task="llm")
    assert [m.name for m in stored.metrics] == ["stored-up"]


def test_a_bad_stored_spec_is_named_in_the_error() -> None:
    with pytest.raises(AnalysisSpecError, match="the analysis stored on models/demo"):
        analysis_spec(stored="metrics: []", stored_source="the analysis stored on models/demo")


def test_no_prometheus_is_an_error_before_anything_is_asked() -> None:
    with pytest.raises(RolloutError, match="no Prometheus to analyse with: pass "
                       "--prometheus-url or set MODELCTL_PROMETHEUS_URL"):
        prepare_analysis(analysis_spec(), None, CTX)
    with pytest.raises(RolloutError, match="no Prometheus"):
        prepare_analysis(analysis_spec(), "", CTX)


def test_an_unreachable_prometheus_fails_the_check() -> None:
    with pytest.raises(SourceUnreachableError):
        prepare_analysis(analysis_spec(), f"http://127.0.0.1:{free_port()}", CTX)
