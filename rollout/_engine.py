"""The rollout engine: one idempotent ``step`` that re-reads, decides and writes.

``Engine.step`` reads the target through its ``TrafficBackend``, asks the pure
``decide`` what to do (running the analysis when one is due), and writes the
change together with the new state in one conditional write. A 409 means
someone else wrote in between: the step re-reads and decides again. ``run`` is
a ticker calling ``step``; the CLI verbs call ``step`` with a command (and
``wait_final`` repeats a promotion or a rollback until it is in effect); tests call
it tick by tick with a fake clock.

A ``run`` holds a lease (holder id + expiry, stored in the state): a second run
refuses while it is held, and any run may take over once it has expired, so a
crashed run is resumed by starting another. Operator verbs (pause, rollback, ...)
do not need the lease: a person can always stop a rollout.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from common import PlatformError, format_duration_s
from rollout._aliases import AliasRegistry, move_aliases
from rollout._decide import TICK, Command, Outcome, decide
from rollout._errors import (
    Conflict,
    KubeConfigError,
    KubeError,
    LeaseHeld,
    NotFound,
    RolloutError,
)
from rollout._state import Decision, Phase, RolloutState
from rollout.analysis._results import (
    AnalysisContext,
    AnalysisResult,
    Analyzer,
    MetricResult,
    Verdict,
)
from rollout.backends._interface import Change, Observation, SaveState, TrafficBackend

log = logging.getLogger(__name__)

MAX_CONFLICTS = 8


Clock = Callable[[], float]
"""Where the engine gets the time (unix seconds): ``time.time``, or a fake in tests."""


def analysis_context(state: RolloutState) -> AnalysisContext:
    """What an analysis of ``state`` is about: its target, versions and interval."""
    return AnalysisContext(
        namespace=state.namespace, isvc=state.isvc,
        stable_version=str(state.stable_version), canary_version=str(state.canary_version),
        interval_s=state.plan.interval_s, evidence=state.evidence,
    )


def new_holder_id() -> str:
    """A lease holder id that names the machine and process (and is unique)."""
    return f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(3)}"


@dataclass(frozen=True)
class StepResult:
    """What one step saw, decided and did (``planned`` instead of writes on dry runs)."""

    state: RolloutState
    seen: Observation
    change: Change | None
    decisions: tuple[Decision, ...]
    waiting: str
    wait_s: float | None
    wrote: bool
    planned: Mapping[str, Any] | None = None
    conflicts: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_final(self) -> bool:
        return self.state.phase.is_final and self.state.aliases_synced

    @property
    def in_effect(self) -> bool:
        """The final phase has taken effect on the target (a promotion is complete)."""
        return self.state.phase is not Phase.PROMOTED or self.seen.promoted


class Engine:
    """Drives one rollout through a backend; see the module docstring."""

    def __init__(
        self,
        backend: TrafficBackend,
        *,
        clock: Clock = time.time,
        analyzer: Analyzer | None = None,
        registry: AliasRegistry | None = None,
        holder: str | None = None,
        lease_s: float = 60.0,
        dry_run: bool = False,
    ) -> None:
        if lease_s <= 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s}")
        self.backend = backend
        self.clock = clock
        self.analyzer = analyzer
        self.registry = registry
        self.holder = holder
        self.lease_s = lease_s
        self.dry_run = dry_run

    # -- reading -------------------------------------------------------------------
    def observe(self) -> tuple[Observation, RolloutState]:
        seen = self.backend.observe()
        if seen.state is None:
            raise NotFound(f"no rollout on {seen.target}: start one with "
                           "`modelctl rollout start`")
        return seen, seen.state

    def analyze(self, state: RolloutState) -> AnalysisResult:
        """Run the analysis for ``state`` now; a failing metric source is Inconclusive data."""
        if self.analyzer is None:
            raise RolloutError("no analysis configured (internal: Engine built without one)")
        try:
            return self.analyzer.analyze(analysis_context(state))
        except PlatformError as exc:  # e.g. Prometheus unreachable: hold, never promote
            reason = str(exc) or exc.__class__.__name__
            metric = MetricResult(name="analysis", verdict=Verdict.INCONCLUSIVE, canary=None,
                                  stable=None, reason=reason)
            return AnalysisResult(verdict=Verdict.INCONCLUSIVE, metrics=(metric,),
                                  at=self.clock())

    # -- the step --------------------------------------------------------------------
    def step(self, command: Command = TICK) -> StepResult:
        """Re-read, decide, write; on a 409 re-read and decide again."""
        analysis: tuple[tuple[int, float | None], AnalysisResult] | None = None
        for attempt in range(MAX_CONFLICTS):
            seen, state = self.observe()
            now = self.clock()
            if command.kind == "tick" and self.holder is not None:
                self._check_lease(state, now)
            outcome = decide(state, seen, now, command)
            if outcome.needs_analysis:
                window = (state.step_index, state.interval_started_at)
                if analysis is None or analysis[0] != window:
                    analysis = (window, self.analyze(state))
                outcome = decide(state, seen, now, command, analysis[1])
            try:
                result = self._carry_out(seen, state, outcome, now, attempt)
            except Conflict:
                log.info("conflict writing %s; re-reading", seen.target)
                continue
            if (result.state.phase.is_final and not result.state.aliases_synced
                    and result.in_effect):
                result = self._sync_aliases(result)
            return result
        raise Conflict(f"{state.ref} kept changing under us ({MAX_CONFLICTS} conflicting "
                       "writes in a row); try again")

    def _carry_out(self, seen: Observation, state: RolloutState, outcome: Outcome,
                   now: float, attempt: int) -> StepResult:
        new, change = outcome.state, outcome.change
        if self.holder is not None and not outcome.state.phase.is_final:
            leased = self._with_lease(new, now)
            if leased != new and change is None:
                change = SaveState()
            new = leased
        if change is None or (isinstance(change, SaveState) and new == state):
            return StepResult(state, seen, None, (), outcome.waiting, outcome.wait_s,
                              wrote=False, conflicts=attempt)
        if self.dry_run:
            planned = self.backend.describe(seen, change, new)
            return StepResult(new, seen, change, outcome.decisions, outcome.waiting,
                              outcome.wait_s, wrote=False, planned=planned, conflicts=attempt)
        after = self.backend.apply(seen, change, new)
        stored = after.state or new
        self._record(stored, outcome.decisions)
        return StepResult(stored, after, change, outcome.decisions, outcome.waiting,
                          outcome.wait_s, wrote=after.version != seen.version, conflicts=attempt)

    def _record(self, state: RolloutState, decisions: tuple[Decision, ...]) -> None:
        for decision in decisions:
            try:
                self.backend.record(state, decision)
            except PlatformError as exc:  # the decision is in the state; the event is a copy
                log.warning("could not record event %s on %s: %s", decision.kind, state.ref, exc)

    # -- lease -----------------------------------------------------------------------
    def _check_lease(self, state: RolloutState, now: float) -> None:
        holder = state.lease_holder(now)
        if holder is not None and holder != self.holder:
            left = (state.lease_expires_at or now) - now
            raise LeaseHeld(f"{state.ref} is being run by {holder} (lease for another "
                            f"{format_duration_s(round(left, 1))}); wait for it to end or expire")

    def _with_lease(self, state: RolloutState, now: float) -> RolloutState:
        expires = state.lease_expires_at
        mine = state.holder == self.holder and expires is not None and expires > now
        if mine and expires is not None and expires - now > self.lease_s / 2:
            return state
        return state.evolve(holder=self.holder, lease_expires_at=now + self.lease_s)

    def release(self) -> None:
        """Give the lease back (end of ``run``); a no-op when someone else holds it."""
        if self.holder is None or self.dry_run:
            return
        for _ in range(MAX_CONFLICTS):
            seen = self.backend.observe()
            state = seen.state
            if state is None or state.holder != self.holder:
                return
            try:
                self.backend.apply(seen, SaveState(),
                                   state.evolve(holder=None, lease_expires_at=None))
                return
            except Conflict:
                continue

    # -- registry aliases ---------------------------------------------------------------
    def _sync_aliases(self, result: StepResult) -> StepResult:
        """After promotion ``stable`` moves and ``canary`` goes; after rollback ``canary`` goes."""
        state = result.state
        if self.registry is None or self.dry_run:
            return result
        promoted = state.phase is Phase.PROMOTED
        move_aliases(self.registry, state.model,
                      stable=state.canary_version if promoted else None,
                      drop_canary=state.canary_version)
        for _ in range(MAX_CONFLICTS):
            seen = self.backend.observe()
            current = seen.state
            if current is None or current.canary_version != state.canary_version:
                return result
            try:
                after = self.backend.apply(seen, SaveState(), current.evolve(aliases_synced=True))
            except Conflict:
                continue
            note = f"registry aliases of {state.model} updated"
            return StepResult(after.state or current, after, result.change, result.decisions,
                              result.waiting, result.wait_s, wrote=True,
                              conflicts=result.conflicts, notes=(*result.notes, note))
        raise Conflict(f"{state.ref} kept changing while recording the registry update")


Progress = Callable[[StepResult], None]


@dataclass(frozen=True)
class RunResult:
    """How ``run`` ended: ``promoted``, ``rolled-back`` or ``deadline``."""

    outcome: str
    last: StepResult


MAX_TRANSIENT_ERRORS = 10


def run(engine: Engine, *, poll_s: float = 5.0, deadline_s: float | None = None,
        progress: Progress | None = None,
        sleep: Callable[[float], None] = time.sleep) -> RunResult:
    """Tick ``engine`` until the rollout is promoted or rolled back, or the deadline passes.

    An API or store that fails for a moment (an unreachable API server, a conflict
    streak, a 5xx, a timeout) is retried with exponential backoff from ``poll_s`` (at
    most a third of the lease), up to ``MAX_TRANSIENT_ERRORS`` in a row: a run that
    dies on a blip would hold its lease until it expires.
    """
    from registry import StoreError

    if engine.holder is None:
        raise ValueError("run needs an engine with a lease holder id")
    start = engine.clock()
    last: StepResult | None = None
    errors = 0
    try:
        while True:
            try:
                result = engine.step(TICK)
                errors = 0
            except (KubeError, StoreError) as exc:
                errors += 1
                if isinstance(exc, NotFound | KubeConfigError) or errors > MAX_TRANSIENT_ERRORS:
                    raise
                log.warning("tick failed (%d in a row), retrying: %s", errors, exc)
                result = None
            if result is not None:
                last = result
                if progress is not None:
                    progress(result)
                done = result.state.phase.is_final and result.in_effect and (
                    result.state.aliases_synced or engine.registry is None)
                if done or engine.dry_run:
                    outcome = {Phase.PROMOTED: "promoted",
                               Phase.ROLLED_BACK: "rolled-back"}.get(result.state.phase,
                                                                     "dry-run")
                    return RunResult(outcome, result)
            now = engine.clock()
            if deadline_s is not None and now - start >= deadline_s and last is not None:
                return RunResult("deadline", last)
            wait = min(poll_s, engine.lease_s / 3)
            if result is None:
                # Back off while the API or the store keeps failing, but never past a third
                # of the lease, so that a recovered API still sees the lease renewed.
                wait = min(poll_s * 2 ** (errors - 1), engine.lease_s / 3)
            if result is not None and result.wait_s is not None:
                wait = min(wait, result.wait_s)
            if deadline_s is not None:
                wait = min(wait, start + deadline_s - now)
            sleep(max(wait, 0.0))
    finally:
        try:
            engine.release()
        except KubeError as exc:  # the lease then simply expires
            log.warning("could not release the lease: %s", exc)


WAIT_POLL_S = 0.5


def wait_final(engine: Engine, result: StepResult, kind: str, *, timeout_s: float,
               poll_s: float = WAIT_POLL_S, sleep: Callable[[float], None] = time.sleep,
               monotonic: Clock = time.monotonic) -> StepResult:
    """Repeat the command ``kind`` (``promote``, ``promote-full`` or ``rollback``) after
    ``result`` until the rollout's end is in effect or ``timeout_s`` passes.

    Returns the last step's result with the decisions of every step, ``result``'s
    first; ``is_final`` says whether it got there in time.
    """
    decisions = result.decisions
    deadline = monotonic() + timeout_s
    while not result.is_final and monotonic() < deadline:
        sleep(poll_s)
        result = engine.step(Command(kind))
        decisions = (*decisions, *result.decisions)
    return replace(result, decisions=decisions)
