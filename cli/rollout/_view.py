"""How ``modelctl rollout`` shows rollouts: JSON documents and rich tables."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console

from cli._output import table

if TYPE_CHECKING:
    from rollout import RolloutState, StepResult
    from rollout.analysis._results import AnalysisResult
    from rollout.backends import Observation


def stamp(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def status_doc(seen: Observation, state: RolloutState) -> dict[str, Any]:
    """The machine-readable status: what the cluster reports plus the rollout state."""
    return {
        "target": seen.target,
        "mode": seen.mode,
        "observed": {
            "canary_weight_pct": seen.canary_weight_pct,
            "canary_ready": seen.canary_ready,
            "requested_weight_pct": seen.requested_weight_pct,
            "restored": seen.restored,
            "promoted": seen.promoted,
            "detail": dict(seen.detail),
        },
        "state": state.to_dict(),
    }


def step_doc(result: StepResult) -> dict[str, Any]:
    return {
        "target": result.seen.target,
        "phase": result.state.phase.value,
        "weight_pct": result.state.weight_pct,
        "step": result.state.step_index + 1,
        "paused": result.state.paused,
        "decisions": [d.to_dict() for d in result.decisions],
        "waiting": result.waiting,
        "wrote": result.wrote,
        "planned": result.planned,
        "notes": list(result.notes),
    }


def render_status(console: Console, seen: Observation, state: RolloutState) -> None:
    steps = ",".join(str(s) for s in state.plan.steps_pct)
    rows = [
        ("InferenceService", f"{seen.target} ({seen.mode} mode)"),
        ("stable", f"{state.stable_label}  {state.stable_uri}"),
        ("canary", f"{state.canary_label}  {state.canary_uri}"),
        ("phase", state.phase.value + ("  (paused)" if state.paused else "")),
        ("step", f"{state.step_index + 1} of {len(state.plan.steps_pct)}  (steps {steps}%)"),
        ("weight", f"{state.weight_pct}% asked, {_pct(seen.requested_weight_pct)} in the spec, "
                   f"{seen.canary_weight_pct}% routed, canary "
                   + ("Ready" if seen.canary_ready else "not Ready")),
        ("failures", f"{state.failures} of {state.plan.failure_limit} allowed; "
                     f"{state.inconclusive} inconclusive"),
        ("interval", f"{state.plan.interval_s:g}s; window started "
                     f"{stamp(state.interval_started_at)}"),
        ("lease", f"{state.holder} until {stamp(state.lease_expires_at)}"
         if state.lease_holder(time.time()) else "free"),
    ]
    console.print(table(f"rollout {seen.target}", ("", ""), rows))
    if state.last_analysis is not None:
        render_analysis(console, state.last_analysis, title="last analysis")
    render_history(console, state, limit=10)


def _pct(value: int | None) -> str:
    return "none" if value is None else f"{value}%"


def render_analysis(console: Console, analysis: AnalysisResult, title: str = "analysis") -> None:
    rows = [(m.name, m.verdict.value, _num(m.canary), _num(m.stable), _num(m.threshold),
             m.reason) for m in analysis.metrics]
    console.print(table(f"{title}: {analysis.verdict.value} at {stamp(analysis.at)}",
                        ("metric", "verdict", "canary", "stable", "threshold", "why"), rows))


def render_history(console: Console, state: RolloutState, limit: int | None = None) -> None:
    history = state.history[-limit:] if limit else state.history
    rows = [(stamp(d.at), d.kind, f"{d.weight_pct}%", d.message) for d in history]
    console.print(table("decisions", ("time (UTC)", "decision", "weight", "message"), rows))


def render_events(console: Console, events: Sequence[Mapping[str, Any]]) -> None:
    rows = [(e.get("lastTimestamp") or e.get("eventTime") or "", e.get("type", ""),
             e.get("reason", ""), e.get("message", "")) for e in events]
    console.print(table("Kubernetes events", ("time", "type", "reason", "message"), rows))


def render_step(console: Console, result: StepResult) -> None:
    for decision in result.decisions:
        console.print(f"{decision.kind}: {decision.message}")
    if result.planned is not None:
        console.print("dry run: would send this change (nothing was written):")
        console.print_json(data=result.planned)
    elif not result.decisions:
        console.print(f"{result.seen.target}: {result.waiting or 'nothing to do'}")
    for note in result.notes:
        console.print(note)


class Progress:
    """Progress of ``run``: a live status line on a terminal, plain lines otherwise."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self._status: Any = None
        self._last = ""

    def __enter__(self) -> Progress:
        if self.live:
            self._status = self.console.status("starting")
            self._status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)

    def __call__(self, result: StepResult) -> None:
        state = result.state
        for decision in result.decisions:
            self.console.print(f"{stamp(decision.at)}  {decision.kind}: {decision.message}")
        line = (f"{result.seen.target}: {state.phase.value}, canary {state.weight_pct}% "
                f"(step {state.step_index + 1}/{len(state.plan.steps_pct)}), "
                f"failures {state.failures}/{state.plan.failure_limit}: {result.waiting}")
        if self._status is not None:
            self._status.update(line)
        elif line != self._last:
            self.console.print(line)
            sys.stdout.flush()
        self._last = line


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
