"""The ``local`` traffic backend: a canary behind the nginx gateway of ``modelctl dev``.

The same ``TrafficBackend`` as KServe, carried out on one machine: ``Deploy`` starts
(or re-uses) a canary for the new version (one predictor, or in queue mode its own
frontends and workers on the version's own stream) and, once it answers ready,
routes the first weight to it; ``SetWeight`` rewrites nginx's ``split_clients`` and
reloads; ``Promote`` points the stable route at the canary's process (the roles
swap, nothing restarts, like KServe's Standard mode) and stops the old stable;
``Rollback`` sends all traffic to stable at once and then stops the canary.
Before a predictor is stopped, nginx has reloaded without it and its old workers
have finished every request they held, so no request reaches a predictor that is
going away; a queue unit's frontends stop before the workers they wait on.

The rollout's state (the engine's own ``RolloutState`` JSON) lives in the
environment's ``state.json`` instead of an InferenceService annotation; the
file's revision number is the optimistic-concurrency token, and writers hold the
environment's lock. Decisions go to ``events.jsonl`` beside it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from devstack._env import NAMESPACE, DevEnv, EnvState
from devstack._errors import DevEnvError
from devstack._gateway import Routes
from devstack._predictor import Predictor, predictor_args
from devstack._processes import is_alive, log_tail
from rollout._errors import Conflict, RolloutError
from rollout._state import Decision, RolloutState
from rollout.backends._interface import (
    Change,
    Deploy,
    Observation,
    Promote,
    Rollback,
    SaveState,
    Served,
    SetWeight,
)

if TYPE_CHECKING:
    from registry import Registry

log = logging.getLogger(__name__)

MODE = "local"


def _is_ready(predictor: Predictor | None) -> bool:
    """Every process of the unit runs and answers ``/v2/health/ready``."""
    if predictor is None or not predictor.is_running():
        return False
    try:
        return all(httpx.get(f"{m.url}/v2/health/ready", timeout=2.0).status_code == 200
                   for m in predictor.members)
    except httpx.HTTPError:
        return False


class LocalNginxBackend:
    """Moves canary traffic through the dev environment ``env``'s nginx gateway.

    ``canary_args`` are extra predictor flags for a canary this backend starts
    (None: the ones ``modelctl dev up --canary-arg`` recorded).
    """

    name = "local"

    def __init__(self, env: DevEnv, *, canary_args: Sequence[str] | None = None,
                 registry: Registry | None = None, ready_timeout_s: float = 180.0) -> None:
        self.env = env
        self.namespace = NAMESPACE
        self.isvc = env.name
        self.canary_args = None if canary_args is None else predictor_args(canary_args)
        self.ready_timeout_s = ready_timeout_s
        self._registry = registry

    @classmethod
    def open(cls, isvc: str, state_dir: Path | None = None, **kwargs: Any) -> LocalNginxBackend:
        """The backend for the dev environment ``isvc`` (under ``state_dir`` or the default)."""
        return cls(DevEnv(isvc, state_dir), **kwargs)

    @property
    def target(self) -> str:
        return f"{NAMESPACE}/{self.isvc}"

    # -- reading -----------------------------------------------------------------------
    def observe(self) -> Observation:
        return self.view(self.env.read())

    def view(self, current: EnvState) -> Observation:
        """Interpret the environment's state plus what nginx and the predictors say now."""
        text = current.rollout
        state = RolloutState.from_json(text, where=self.target) if text else None
        loaded = self.env.gateway(current).loaded()
        stable = current.predictors.get("stable")
        canary = current.predictors.get("canary")
        canary_ready = bool(state and canary and canary.version == state.canary_version
                            and _is_ready(canary))
        weight = 0
        if loaded is not None and canary is not None and loaded.canary == canary.addresses:
            weight = loaded.canary_weight_pct
        restored = state is None or (canary is None and loaded is not None
                                     and not loaded.canary)
        # Routes and the state are written together (one locked write), so what the
        # routes ask for is what the state asked for.
        requested = None
        if state and canary and canary.version == state.canary_version and current.routes.canary:
            requested = current.routes.canary_weight_pct
        promoted = bool(state and stable and stable.version == state.canary_version
                        and canary is None and loaded is not None and not loaded.canary
                        and loaded.stable == stable.addresses)
        return Observation(
            target=self.target, mode=MODE, version=str(current.revision), state=state,
            served=Served(model=current.model, version=stable.version if stable else None,
                          uri=stable.uri if stable else None),
            canary_weight_pct=weight, canary_ready=canary_ready, restored=restored,
            promoted=promoted, requested_weight_pct=requested,
            start_blockers=self._start_blockers(current, state, loaded, stable),
            detail=_detail(current, loaded), raw=current.to_dict(),
        )

    def _start_blockers(self, current: EnvState, state: RolloutState | None,
                        loaded: Routes | None, stable: Predictor | None) -> tuple[str, ...]:
        problems = []
        if state is not None and not state.phase.is_final:
            problems.append(f"a rollout to {state.canary_label} is already {state.phase.value}; "
                            "promote or roll it back first")
        if current.nginx is None or not is_alive(current.nginx) or loaded is None:
            problems.append(f"the gateway (nginx) is not running; `modelctl dev down "
                            f"{self.isvc}` and `modelctl dev up {self.isvc}` again")
        if not _is_ready(stable):
            version = f"@{stable.version}" if stable else ""
            problems.append(f"the stable predictor {self.isvc}{version} is not ready")
        return tuple(problems)

    # -- writing -----------------------------------------------------------------------
    def apply(self, seen: Observation, change: Change, state: RolloutState) -> Observation:
        with self.env.locked():
            current = self.env.read()
            if str(current.revision) != seen.version:
                raise Conflict(f"{self.target} changed since it was read (revision "
                               f"{seen.version}, now {current.revision})")
            if isinstance(change, Deploy) and seen.start_blockers:
                raise RolloutError(f"cannot start on {self.target}: {seen.start_blockers[0]}")
            text = state.to_json()
            if isinstance(change, SaveState) and current.rollout == text:
                return seen
            current = self._carry_out(current, change)
            stored = self.env.write(current.evolve(rollout=text))
        return self.view(stored)

    def _carry_out(self, current: EnvState, change: Change) -> EnvState:
        if isinstance(change, SaveState):
            return current
        if isinstance(change, Deploy):
            return self._deploy(current, change)
        if isinstance(change, SetWeight):
            if not current.routes.canary:
                raise RolloutError(f"{self.target}: no canary predictor to send "
                                   f"{change.weight_pct}% to")
            return self._route(current, current.routes.next(canary_weight_pct=change.weight_pct))
        if isinstance(change, Promote):
            return self._promote(current)
        assert isinstance(change, Rollback)
        return self._remove_canary(current)

    def _route(self, current: EnvState, routes: Routes) -> EnvState:
        """Reload nginx with ``routes``; returns once its old workers have finished."""
        if current.nginx is None:
            raise DevEnvError(f"{self.target}: the gateway was never started")
        drained = self.env.gateway(current).reload(current.nginx, routes)
        if not drained:
            log.warning("%s: old nginx workers still hold requests after the reload",
                        self.target)
        return self.env.write(current.evolve(routes=routes))

    def _canary_args(self, current: EnvState) -> tuple[str, ...]:
        if self.canary_args is not None:
            return self.canary_args
        return tuple(current.role_args.get("canary", ()))

    def _deploy(self, current: EnvState, change: Deploy) -> EnvState:
        args = self._canary_args(current)
        canary = current.predictors.get("canary")
        reusable = (canary is not None and canary.version == change.version
                    and canary.args == args and canary.is_running())
        if canary is not None and not reusable:
            current = self._remove_canary(current)
        if not reusable:
            current = self._start_canary(current, change.version, args)
        canary = current.predictors["canary"]
        return self._route(current, current.routes.next(canary=canary.addresses,
                                                        canary_weight_pct=change.weight_pct))

    def _start_canary(self, current: EnvState, version: int,
                      args: tuple[str, ...]) -> EnvState:
        from registry import Registry

        registry = self._registry or Registry.open(current.registry)
        canary = self.env.start_predictor(registry, current, role="canary", version=version,
                                          args=args)
        current = self.env.write(current.with_predictor("canary", canary))
        self.env.write_targets(current)
        deadline = time.monotonic() + self.ready_timeout_s
        while not _is_ready(canary):
            gone = [m for m in canary.members if not is_alive(m.process)]
            if gone or time.monotonic() >= deadline:
                canary.stop()
                current = self.env.write(current.with_predictor("canary", None))
                self.env.write_targets(current)
                why = "exited" if gone else f"was not ready after {self.ready_timeout_s:g}s"
                log_path = (gone or canary.servers)[0].process.log
                raise DevEnvError(f"the canary predictor {self.isvc}@{version} {why}; the end "
                                  f"of {log_path}:\n{log_tail(log_path, 1500).rstrip()}")
            time.sleep(0.2)
        return current

    def _remove_canary(self, current: EnvState) -> EnvState:
        """All traffic to stable at once (reload, drained), then stop the canary's processes."""
        if current.routes.canary:
            current = self._route(current, current.routes.next(canary=(), canary_weight_pct=0))
        canary = current.predictors.get("canary")
        if canary is not None:
            canary.stop()
            current = self.env.write(current.with_predictor("canary", None))
            self.env.write_targets(current)
        return current

    def _promote(self, current: EnvState) -> EnvState:
        canary = current.predictors.get("canary")
        if canary is None:  # already promoted: the canary's process serves as stable
            return current
        old = current.predictors.get("stable")
        routes = current.routes.next(stable=canary.addresses, canary=(), canary_weight_pct=0)
        current = self._route(current, routes)
        current = self.env.write(current.with_predictor("stable", canary)
                                 .with_predictor("canary", None))
        if old is not None:
            old.stop()
        self.env.write_targets(current)
        return current

    def describe(self, seen: Observation, change: Change, state: RolloutState) -> Mapping[str, Any]:
        """What ``apply`` would do: the routes nginx would load and processes started/stopped."""
        current = EnvState.from_dict(seen.raw)
        routes = current.routes
        starts: list[str] = []
        stops: list[str] = []
        canary = current.predictors.get("canary")
        if isinstance(change, Deploy):
            args = self._canary_args(current)
            if canary is None or canary.version != change.version or canary.args != args:
                shape = (f" ({current.queue.frontends} frontends, {current.queue.workers} "
                         "workers)" if current.queue else "")
                starts.append(f"predictor-canary {self.isvc}@{change.version}{shape} "
                              f"{' '.join(args)}".rstrip())
                stops += ["predictor-canary"] if canary else []
            routes = routes.next(canary=canary.addresses if canary else ("127.0.0.1:0",),
                                 canary_weight_pct=change.weight_pct)
        elif isinstance(change, SetWeight):
            routes = routes.next(canary_weight_pct=change.weight_pct)
        elif isinstance(change, Promote) and canary is not None:
            routes = routes.next(stable=canary.addresses, canary=(), canary_weight_pct=0)
            stops.append("predictor-stable (the canary's process becomes stable)")
        elif isinstance(change, Rollback) and canary is not None:
            routes = routes.next(canary=(), canary_weight_pct=0)
            stops.append("predictor-canary")
        return {"target": self.target, "change": type(change).__name__,
                "routes": routes.to_dict(), "start": starts, "stop": stops,
                "state": state.to_dict()}

    # -- events ------------------------------------------------------------------------
    def record(self, state: RolloutState, decision: Decision) -> None:
        stamp = datetime.fromtimestamp(decision.at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.env.append_event({
            "lastTimestamp": stamp, "type": decision.event_type, "reason": decision.kind,
            "message": decision.message,
            "involvedObject": {"kind": "DevEnvironment", "name": self.isvc},
            "reportingInstance": state.holder or "modelctl-rollout",
        })
        log.info("%s %s: %s", self.target, decision.kind, decision.message)

    def list_events(self) -> list[dict[str, Any]]:
        """Every decision recorded for this environment, oldest first."""
        return self.env.events()

    # -- defaults ----------------------------------------------------------------------
    def default_registry_url(self) -> str | None:
        """The registry the environment was brought up from."""
        return self.env.read().registry

    def default_prometheus_url(self) -> str | None:
        """The environment's own Prometheus."""
        return self.env.read().prometheus_url

    def announce_exporter(self, address: str | None) -> float | None:
        """The environment's Prometheus scrapes it (file discovery)."""
        self.env.set_rollout_target(address)
        return self.env.read().scrape_interval_s


def _where(predictor: Predictor) -> dict[str, Any]:
    """Where a unit runs: its one predictor's address and PID, or its queue processes."""
    def listed(members: Any) -> list[dict[str, Any]]:
        return [{"address": m.address, "pid": m.process.pid} for m in members]

    if predictor.is_queued:
        return {"frontends": listed(predictor.servers), "workers": listed(predictor.workers)}
    return listed(predictor.servers)[0]


def _detail(current: EnvState, loaded: Routes | None) -> dict[str, Any]:
    predictors = {role: {"version": p.version, "role_label": p.started_as,
                         "args": list(p.args), **_where(p)}
                  for role, p in sorted(current.predictors.items())}
    return {"gateway": current.gateway_url, "prometheus": current.prometheus_url,
            "routes": loaded.to_dict() if loaded else None, "predictors": predictors}
