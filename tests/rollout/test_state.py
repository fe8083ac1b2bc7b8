"""The rollout state: one JSON annotation that round-trips, bounds its history, and
tells who holds the lease."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollout import Decision, Phase, Plan, RolloutError, RolloutState
from rollout._state import HISTORY_LIMIT
from rollout.analysis._results import AnalysisResult, MetricResult, Verdict
from rollout.analysis._sequential import Evidence, Tally


def _state(**changes: object) -> RolloutState:
    base = RolloutState(
        namespace="models", isvc="demo", model="demo-fixed",
        stable_version=1, stable_uri="file:///r/demo-fixed/1",
        canary_version=2, canary_uri="file:///r/demo-fixed/2",
        plan=Plan(steps_pct=(5, 25, 50), interval_s=60.0, failure_limit=2),
        weight_pct=5, started_at=100.0, weight_set_at=100.0,
    )
    return base.evolve(**changes)


def test_round_trip_keeps_everything() -> None:
    metric = MetricResult(name="error-rate", verdict=Verdict.FAIL, canary=0.05, stable=0.001,
                          threshold=0.01, reason="too many 5xx", statistics={"p_value": 0.001})
    analysis = AnalysisResult(verdict=Verdict.FAIL, metrics=(metric,), at=160.0)
    decision = Decision(at=160.0, kind="AnalysisFailed", message="failure 1 of 2",
                        step_index=1, weight_pct=25, numbers={"failures": 1})
    state = _state(phase=Phase.PROGRESSING, step_index=1, weight_pct=25, failures=1,
                   inconclusive=2, paused=True, interval_started_at=100.0,
                   history=(decision,), last_analysis=analysis, holder="host/1/ab",
                   lease_expires_at=190.0, analysis_yaml="metrics: []\n", task="llm",
                   backend_data={"mode": "knative", "stable_revision": "demo-predictor-00001"},
                   evidence={"error-rate": Evidence(Tally(300, 2), Tally(2700, 14), 3)})
    text = state.to_json()
    assert "\n" not in text and json.loads(text)["schema"] == 1
    assert RolloutState.from_json(text) == state


def test_a_state_from_before_the_evidence_loads_with_none() -> None:
    data = json.loads(_state().to_json())
    del data["evidence"]
    assert RolloutState.from_dict(data).evidence == {}


def test_a_state_from_before_the_task_loads_with_none() -> None:
    data = json.loads(_state(task="llm").to_json())
    assert data["task"] == "llm"
    del data["task"]
    assert RolloutState.from_dict(data).task is None  # the request-latency default


def test_history_is_bounded() -> None:
    state = _state()
    for i in range(HISTORY_LIMIT + 7):
        state = state.recorded(Decision(at=float(i), kind="CanaryReady", message=str(i),
                                        step_index=0, weight_pct=5))
    assert len(state.history) == HISTORY_LIMIT
    assert state.history[-1].message == str(HISTORY_LIMIT + 6)


def test_lease_holder_expires() -> None:
    state = _state(holder="a", lease_expires_at=200.0)
    assert state.lease_holder(199.9) == "a"
    assert state.lease_holder(200.0) is None
    assert _state().lease_holder(0.0) is None


def test_phases_know_which_are_final() -> None:
    assert Phase.PROMOTED.is_final and Phase.ROLLED_BACK.is_final
    assert not Phase.PROGRESSING.is_final and not Phase.ROLLING_BACK.is_final


def test_decisions_of_bad_news_are_warnings() -> None:
    def kind(k: str) -> str:
        return Decision(at=0, kind=k, message="", step_index=0, weight_pct=0).event_type

    assert kind("RollbackStarted") == "Warning" and kind("AnalysisFailed") == "Warning"
    assert kind("StepAdvanced") == "Normal" and kind("Promoted") == "Normal"


_DANCING = json.dumps({**json.loads(_state().to_json()), "phase": "Dancing"})


@pytest.mark.parametrize("text", ["{", "[]", '{"schema": 99}', '{"schema": 1}', _DANCING])
def test_a_damaged_state_is_one_clear_error(text: str) -> None:
    with pytest.raises(RolloutError, match="not one this modelctl understands") as info:
        RolloutState.from_json(text, where="ConfigMap models/demo-rollout")
    assert "models/demo-rollout" in str(info.value) and "\n" not in str(info.value)


def test_state_refuses_impossible_values() -> None:
    with pytest.raises(RolloutError):
        _state(step_index=3)
    with pytest.raises(RolloutError):
        _state(weight_pct=101)


def test_public_names_are_sorted_and_importing_is_cheap() -> None:
    import subprocess
    import sys

    import rollout

    assert rollout.__all__ == sorted(rollout.__all__)
    assert all(getattr(rollout, name) is not None for name in rollout.__all__)
    code = ("import sys, rollout; "
            "print(sorted(m for m in ('scipy', 'kubernetes', 'prometheus_api_client') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=str(Path(__file__).parents[2]))
    assert out.stdout.strip() == "[]"  # heavy libraries load on first use, not on import
