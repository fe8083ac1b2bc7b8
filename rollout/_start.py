"""Starting a rollout: resolve the version, check the target, write the canary and state."""

from __future__ import annotations

import logging
import time

from common import PlatformError, format_duration_s
from rollout._aliases import AliasRegistry, move_aliases
from rollout._engine import MAX_CONFLICTS, Clock, StepResult
from rollout._errors import Conflict, InvalidTransition
from rollout._plan import Plan
from rollout._state import Decision, RolloutState
from rollout.backends._interface import Deploy, Observation, TrafficBackend

log = logging.getLogger(__name__)


def start_rollout(
    backend: TrafficBackend,
    registry: AliasRegistry,
    *,
    model: str,
    ref: str,
    plan: Plan,
    clock: Clock = time.time,
    analysis_yaml: str | None = None,
    task: str | None = None,
    dry_run: bool = False,
) -> StepResult:
    """Point the target at ``model@ref`` as a canary with the plan's first weight.

    Resolves the ref in the registry, checks that the target can start (Ready, no
    rollout or foreign canary in progress, the stable version known), writes the
    canary and the state in one conditional write, records the decision, and sets
    the registry alias ``canary``. On ``dry_run`` it writes nothing anywhere.
    ``task`` (the canary's registry task) is kept in the state: without
    ``analysis_yaml`` it picks the shipped default analysis of every later command.
    """
    version = registry.resolve(model, ref)
    uri = registry.storage_uri(model, version)
    for attempt in range(MAX_CONFLICTS):
        seen = backend.observe()
        if seen.start_blockers:
            raise InvalidTransition(f"cannot start on {seen.target}: {seen.start_blockers[0]}")
        stable = stable_version(seen, registry, model)
        if stable == version:
            raise InvalidTransition(f"{seen.target} already serves {model}@{version}")
        state = initial_state(seen, backend.name, model=model, stable=stable, canary=version,
                              canary_uri=uri, plan=plan, now=clock(),
                              analysis_yaml=analysis_yaml, task=task)
        started = state.history[-1]
        change = Deploy(uri=uri, version=version, weight_pct=state.weight_pct)
        if dry_run:
            return StepResult(state, seen, change, (started,), "dry run", None, wrote=False,
                              planned=backend.describe(seen, change, state), conflicts=attempt)
        try:
            after = backend.apply(seen, change, state)
        except Conflict:
            continue
        stored = after.state or state
        try:
            backend.record(stored, started)
        except PlatformError as exc:
            log.warning("could not record event on %s: %s", seen.target, exc)
        move_aliases(registry, model, canary=version)
        return StepResult(stored, after, change, (started,), f"canary at {state.weight_pct}%",
                          None, wrote=True, conflicts=attempt)
    raise Conflict(f"{backend.name}: the target kept changing while starting; try again")


def initial_state(seen: Observation, backend: str, *, model: str, stable: int, canary: int,
                  canary_uri: str, plan: Plan, now: float,
                  analysis_yaml: str | None, task: str | None = None) -> RolloutState:
    """A new rollout at its first step, with its ``RolloutStarted`` decision recorded."""
    namespace, isvc = seen.target.split("/", 1)
    weight = plan.weight_at(0)
    state = RolloutState(
        namespace=namespace, isvc=isvc, model=model,
        stable_version=stable, stable_uri=seen.served.uri or "",
        canary_version=canary, canary_uri=canary_uri, plan=plan, backend=backend,
        weight_pct=weight, started_at=now, weight_set_at=now, analysis_yaml=analysis_yaml,
        task=task,
    )
    steps = ",".join(str(s) for s in plan.steps_pct)
    started = Decision(
        at=now, kind="RolloutStarted", step_index=0, weight_pct=weight,
        message=(f"rollout {model}@{stable} -> {model}@{canary} started: steps {steps}%, "
                 f"interval {format_duration_s(plan.interval_s)}, failure limit "
                 f"{plan.failure_limit}; canary weight {weight}%"),
        numbers={"from_version": stable, "to_version": canary, "weight_pct": weight},
    )
    return state.recorded(started)


def stable_version(seen: Observation, registry: AliasRegistry, model: str) -> int:
    """Which version of ``model`` the target serves now (annotation, else by its URI)."""
    served = seen.served
    if served.model is not None and served.model != model:
        raise InvalidTransition(f"{seen.target} serves model {served.model!r}, not {model!r}")
    if served.version is not None:
        return served.version
    for version in sorted(set(registry.aliases(model).values()), reverse=True):
        if registry.storage_uri(model, version) == served.uri:
            return version
    raise InvalidTransition(
        f"cannot tell which version of {model} {seen.target} serves: annotate it with "
        f"modelctl.io/model={model} and modelctl.io/version=N")
