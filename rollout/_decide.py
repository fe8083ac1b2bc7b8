"""The rollout's decisions, as one pure function of state, observation, time and command.

``decide`` never does I/O: it gets what the backend saw, the clock's ``now``, the
command (the run loop's ``tick`` or an operator's verb) and, when one was due,
an analysis result; it returns the next state, the one change for the backend
to carry out, and the decisions to record. The engine (``_engine.py``) is the
thin shell that reads, calls this, and writes.

Rules, at each tick of a progressing rollout:

* the target's configuration does not ask for the state's weight (a write lost
  after the state was stored): set it again;
* paused: hold;
* the canary is not Ready at the set weight: hold (the analysis window starts
  only once it is, so a step never advances past a canary that is not Ready);
* the window has not lasted one interval: hold;
* analysis Pass: next step, or promote after the last step;
* Fail: count it; at the failure limit, roll back; else hold one more interval;
* Inconclusive only because the sequential judge's evidence is still
  accumulating (``AnalysisResult.healthy``): next step, but never promote: at the
  last step hold one more interval;
* any other Inconclusive (too few requests, no data, Prometheus unreachable):
  hold one more interval; never promote.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from common import format_duration_s
from rollout._errors import InvalidTransition, NotReady
from rollout._state import Decision, Phase, RolloutState
from rollout.analysis._results import AnalysisResult, Verdict
from rollout.backends._interface import Change, Observation, Promote, Rollback, SaveState, SetWeight

COMMANDS = ("tick", "promote", "promote-full", "rollback", "pause", "resume")


@dataclass(frozen=True)
class Command:
    """What to do now: ``tick`` (the run loop) or an operator's verb, with a reason."""

    kind: str = "tick"
    reason: str = ""

    def __post_init__(self) -> None:
        if self.kind not in COMMANDS:
            raise ValueError(f"unknown command {self.kind!r}")


TICK = Command()


@dataclass(frozen=True)
class Outcome:
    """What ``decide`` concluded: the next state, the change to make, what to record.

    ``change`` is None when nothing needs writing. ``needs_analysis`` asks the
    caller to run the analysis and decide again with its result. ``wait_s`` is
    how long until time alone could change the answer (None: not time-bound).
    """

    state: RolloutState
    change: Change | None = None
    decisions: tuple[Decision, ...] = ()
    waiting: str = ""
    wait_s: float | None = None
    needs_analysis: bool = False


def decide(
    state: RolloutState,
    seen: Observation,
    now: float,
    command: Command = TICK,
    analysis: AnalysisResult | None = None,
) -> Outcome:
    """The next state and change for ``state`` given what was ``seen`` at ``now``."""
    if command.kind == "pause":
        return _pause(state, now, command.reason)
    if command.kind == "resume":
        return _resume(state, now, command.reason)
    if command.kind == "rollback":
        return _rollback(state, seen, now, command.reason or "manual rollback")
    if command.kind in ("promote", "promote-full"):
        return _promote(state, seen, now, full=command.kind == "promote-full",
                        reason=command.reason or "manual promotion")
    if state.phase is Phase.ROLLING_BACK:
        return _continue_rollback(state, seen, now)
    if state.phase is Phase.PROMOTED and not state.aliases_synced and not seen.promoted:
        return _finish_promotion(state)
    if state.phase.is_final:
        return Outcome(state, waiting=f"rollout {state.phase.value}")
    return _tick(state, seen, now, analysis)


# -- the run loop's tick -------------------------------------------------------------
def _tick(state: RolloutState, seen: Observation, now: float,
          analysis: AnalysisResult | None) -> Outcome:
    weight = state.weight_pct
    if seen.requested_weight_pct != weight:
        # The state asks for a weight the target's configuration does not carry (its
        # write was lost after the state was stored): write it again.
        waiting = f"setting the canary to {weight}%"
        if seen.traffic_note:  # e.g. the canary grows first, the weight after
            waiting = f"{waiting}: {seen.traffic_note}"
        return Outcome(state, SetWeight(weight), waiting=waiting)
    if state.paused:
        return Outcome(state, waiting=f"paused at {weight}%")
    if not seen.canary_ready or seen.canary_weight_pct != weight:
        waiting = (f"canary {state.canary_label} not Ready yet" if not seen.canary_ready else
                   f"traffic at {seen.canary_weight_pct}%, waiting for {weight}%")
        if seen.canary_ready and seen.traffic_note:
            waiting = f"{waiting}: {seen.traffic_note}"
        if state.interval_started_at is not None:
            # Readiness was lost mid-window: the window restarts when it is back.
            return Outcome(state.evolve(interval_started_at=None), SaveState(), waiting=waiting)
        return Outcome(state, waiting=waiting)
    if state.interval_started_at is None:
        interval = format_duration_s(state.plan.interval_s)
        ready = _decision(state, now, "CanaryReady",
                          f"canary {state.canary_label} Ready with {weight}% of traffic; "
                          f"analysis in {interval}")
        new = state.evolve(interval_started_at=now).recorded(ready)
        return Outcome(new, SaveState(), (ready,), waiting=f"analysis in {interval}",
                       wait_s=state.plan.interval_s)
    due_at = state.interval_started_at + state.plan.interval_s
    if now < due_at:
        left = due_at - now
        return Outcome(state, waiting=f"analysis in {format_duration_s(round(left, 1))}",
                       wait_s=left)
    if analysis is None:
        return Outcome(state, waiting="analysing", needs_analysis=True)
    # The evidence lives in the state once; the stored result keeps only the verdicts.
    evidence = {**state.evidence, **analysis.evidence}
    stored = dataclasses.replace(analysis, evidence={})
    return _act_on_analysis(state.evolve(last_analysis=stored, evidence=evidence), now,
                            analysis)


def next_move(analysis: AnalysisResult, last_step: bool) -> str:
    """What an analysis asks of a rollout at its last step or before: ``promote``,
    ``advance``, ``fail`` (count one failure) or ``hold`` (one more interval)."""
    if analysis.verdict is Verdict.FAIL:
        return "fail"
    if analysis.verdict is Verdict.PASS:
        return "promote" if last_step else "advance"
    # Inconclusive: a healthy one (the evidence still accumulating) may take the next
    # step, which adds traffic and evidence; promotion always waits for a Pass.
    return "advance" if analysis.healthy and not last_step else "hold"


def _act_on_analysis(state: RolloutState, now: float, analysis: AnalysisResult) -> Outcome:
    """Carry out ``next_move``: promote or step on, count a failure (rolling back at the
    limit), or hold one more interval."""
    weight = state.weight_pct
    numbers = analysis_numbers(analysis)
    summary = summarize(analysis)
    move = next_move(analysis, state.plan.is_last(state.step_index))
    if move == "promote":
        return _promoted(state, now, f"analysis passed at {weight}% ({summary})", numbers)
    if move == "advance":
        how = "passed" if analysis.verdict is Verdict.PASS else \
            "healthy, evidence accumulating,"
        return _advance(state, now, f"analysis {how} at {weight}% ({summary})", numbers)
    if move == "fail":
        failures = state.failures + 1
        limit = state.plan.failure_limit
        numbers = {**numbers, "failures": failures, "failure_limit": limit}
        if failures >= limit:
            failed = state.evolve(failures=failures)
            return _start_rollback(failed, now, f"analysis failed {failures} of {limit} allowed "
                                   f"times at {weight}% ({summary})", numbers)
        held = _decision(state, now, "AnalysisFailed",
                         f"analysis failed at {weight}% (failure {failures} of {limit}; "
                         f"{summary}); holding one more interval", numbers)
        new = state.evolve(failures=failures, interval_started_at=now).recorded(held)
        return Outcome(new, SaveState(), (held,), waiting="holding after a failed analysis",
                       wait_s=state.plan.interval_s)
    what = "healthy, not yet within tolerance" if analysis.healthy else "inconclusive"
    held = _decision(state, now, "AnalysisInconclusive",
                     f"analysis {what} at {weight}% ({summary}); holding", numbers)
    new = state.evolve(inconclusive=state.inconclusive + 1,
                       interval_started_at=now).recorded(held)
    return Outcome(new, SaveState(), (held,), waiting=f"holding: analysis {what}",
                   wait_s=state.plan.interval_s)


# -- moves -----------------------------------------------------------------------------
def _advance(state: RolloutState, now: float, why: str, numbers: dict[str, object]) -> Outcome:
    index = state.step_index + 1
    weight = state.plan.weight_at(index)
    steps = len(state.plan.steps_pct)
    decision = _decision(state, now, "StepAdvanced",
                         f"{why}; canary weight {state.weight_pct}% -> {weight}% "
                         f"(step {index + 1} of {steps})",
                         {**numbers, "from_pct": state.weight_pct, "to_pct": weight})
    new = state.evolve(step_index=index, weight_pct=weight, weight_set_at=now,
                       interval_started_at=None).recorded(decision)
    return Outcome(new, SetWeight(weight), (decision,), waiting=f"canary at {weight}%")


def _promoted(state: RolloutState, now: float, why: str, numbers: dict[str, object]) -> Outcome:
    decision = _decision(state, now, "Promoted",
                         f"{why}; {state.canary_label} promoted to stable with 100% of "
                         f"traffic (was {state.stable_label})", numbers)
    new = state.evolve(phase=Phase.PROMOTED, weight_pct=100, weight_set_at=now,
                       interval_started_at=None, paused=False,
                       aliases_synced=False).recorded(decision)
    return Outcome(new, Promote(), (decision,), waiting="promoted")


def _finish_promotion(state: RolloutState) -> Outcome:
    """Decided, not yet in effect (KServe's Standard mode promotes in two moves, and a
    spec write can be lost after the state was stored): carry on until it is."""
    return Outcome(state, Promote(), waiting=f"promoting {state.canary_label}")


def _start_rollback(state: RolloutState, now: float, why: str,
                    numbers: dict[str, object]) -> Outcome:
    decision = _decision(state, now, "RollbackStarted",
                         f"{why}; all traffic back to {state.stable_label}",
                         {**numbers, "from_pct": state.weight_pct})
    new = state.evolve(phase=Phase.ROLLING_BACK, weight_pct=0, weight_set_at=now,
                       interval_started_at=None, paused=False,
                       aliases_synced=False).recorded(decision)
    return Outcome(new, Rollback(), (decision,), waiting="rolling back")


def _continue_rollback(state: RolloutState, seen: Observation, now: float) -> Outcome:
    if not seen.restored:
        return Outcome(state, Rollback(), waiting=f"restoring {state.stable_label}")
    decision = _decision(state, now, "RolledBack",
                         f"{state.stable_label} serves all traffic again; canary "
                         f"{state.canary_label} removed")
    new = state.evolve(phase=Phase.ROLLED_BACK).recorded(decision)
    return Outcome(new, SaveState(), (decision,), waiting="rolled back")


# -- operator verbs --------------------------------------------------------------------
def _pause(state: RolloutState, now: float, reason: str) -> Outcome:
    _require_progressing(state, "pause")
    if state.paused:
        return Outcome(state, waiting="already paused")
    decision = _decision(state, now, "Paused",
                         f"paused at {state.weight_pct}%" + (f": {reason}" if reason else ""))
    new = state.evolve(paused=True).recorded(decision)
    return Outcome(new, SaveState(), (decision,), waiting="paused")


def _resume(state: RolloutState, now: float, reason: str) -> Outcome:
    _require_progressing(state, "resume")
    if not state.paused:
        return Outcome(state, waiting="not paused")
    decision = _decision(state, now, "Resumed",
                         f"resumed at {state.weight_pct}%" + (f": {reason}" if reason else ""))
    new = state.evolve(paused=False, interval_started_at=None).recorded(decision)
    return Outcome(new, SaveState(), (decision,), waiting="resumed")


def _rollback(state: RolloutState, seen: Observation, now: float, reason: str) -> Outcome:
    if state.phase is Phase.PROMOTED:
        raise InvalidTransition(f"{state.ref}: {state.canary_label} is already promoted; "
                                f"start a new rollout to go back to {state.stable_label}")
    if state.phase is Phase.ROLLED_BACK:
        return Outcome(state, waiting="already rolled back")
    if state.phase is Phase.ROLLING_BACK:
        return _continue_rollback(state, seen, now)
    return _start_rollback(state, now, reason, {})


def _promote(state: RolloutState, seen: Observation, now: float, *, full: bool,
             reason: str) -> Outcome:
    if state.phase is Phase.PROMOTED:
        if not state.aliases_synced and not seen.promoted:
            return _finish_promotion(state)
        return Outcome(state, waiting="already promoted")
    _require_progressing(state, "promote")
    if not seen.canary_ready:
        raise NotReady(f"{state.ref}: canary {state.canary_label} is not Ready at "
                       f"{state.weight_pct}%; it cannot take more traffic yet")
    if full or state.plan.is_last(state.step_index):
        return _promoted(state, now, reason, {})
    return _advance(state, now, reason, {})


def _require_progressing(state: RolloutState, verb: str) -> None:
    if state.phase is not Phase.PROGRESSING:
        raise InvalidTransition(f"{state.ref}: cannot {verb} a rollout that is "
                                f"{state.phase.value}")


# -- rendering decisions ---------------------------------------------------------------
def _decision(state: RolloutState, now: float, kind: str, message: str,
              numbers: dict[str, object] | None = None) -> Decision:
    return Decision(at=now, kind=kind, message=message, step_index=state.step_index,
                    weight_pct=state.weight_pct, numbers=dict(numbers or {}))


def summarize(analysis: AnalysisResult) -> str:
    """One line with each metric's verdict and numbers, for events and history."""
    parts = []
    for m in analysis.metrics:
        numbers = f"canary {_num(m.canary)} vs stable {_num(m.stable)}"
        if m.threshold is not None:
            numbers += f", threshold {_num(m.threshold)}"
        reason = f": {m.reason}" if m.reason and m.verdict is not Verdict.PASS else ""
        parts.append(f"{m.name} {m.verdict.value} ({numbers}){reason}")
    return "; ".join(parts) if parts else f"{analysis.verdict.value}, no metrics"


def analysis_numbers(analysis: AnalysisResult) -> dict[str, object]:
    numbers: dict[str, object] = {"verdict": analysis.verdict.value}
    for m in analysis.metrics:
        numbers[f"{m.name}.canary"] = m.canary
        numbers[f"{m.name}.stable"] = m.stable
        numbers[f"{m.name}.verdict"] = m.verdict.value
    return numbers


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"
