"""``analysis_spec`` and ``prepare_analysis``: the one place an analysis is chosen, built
over Prometheus and checked before anything changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout import AnalysisSpecError, RolloutError, SourceUnreachableError
from rollout.analysis import AnalysisContext, analysis_spec, prepare_analysis
from rollout.analysis._analysis import DEFAULT_ANALYSIS
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
