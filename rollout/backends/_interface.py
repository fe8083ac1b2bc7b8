"""The traffic backend interface: one small Protocol, one adapter per system.

Like Flagger's router interface, a backend knows how to read where traffic goes
and how to move it; it knows nothing of analysis or of the step plan. The engine
decides, the backend carries it out. Every write stores the rollout state
conditionally on the version that was read, so a stale decision fails with
``Conflict`` instead of overwriting someone else's change; the change itself is
applied with it (``local``: in the same locked write) or right after it, derived
from the stored state (``kserve``), and an Observation says what the target's own
configuration asks for, so a change lost after its state was stored is redone.

Adapters: ``kserve`` (InferenceServices on Kubernetes, Knative and Standard
modes) and ``local`` (the nginx gateway of ``modelctl dev``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rollout._state import Decision, RolloutState


@dataclass(frozen=True)
class Served:
    """What a serving target runs as its primary: a model and version, from a URI."""

    model: str | None
    version: int | None
    uri: str | None


@dataclass(frozen=True)
class Observation:
    """One read of the serving target: the rollout state it carries and its traffic.

    ``canary_weight_pct`` is what the system reports as routed to the canary (not
    what was asked for); ``canary_ready`` is true only when the canary revision
    or deployment for the *current* spec reports Ready. ``restored`` is true once
    nothing of the canary is left in the spec and the stable version serves all
    traffic. ``version`` is the optimistic-concurrency token of this read.
    ``start_blockers`` says why a new rollout cannot start here (empty: it can);
    ``raw`` is the backend's own copy of what it read. ``promoted`` is true once
    the canary serves as the stable with all traffic and nothing of the old stable
    takes any. ``requested_weight_pct`` is the canary share the target's own
    configuration asks for (None: it runs no canary of this rollout), so a change
    that was stored in the state but never reached the target can be redone.
    ``traffic_note`` says why routed traffic lags what was asked for, when the backend
    can tell (None: no known reason; it may just be on its way).
    """

    target: str
    mode: str
    version: str
    state: RolloutState | None
    served: Served
    canary_weight_pct: int
    canary_ready: bool
    restored: bool
    promoted: bool
    requested_weight_pct: int | None
    start_blockers: tuple[str, ...] = ()
    detail: Mapping[str, Any] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    traffic_note: str | None = None


@dataclass(frozen=True)
class Deploy:
    """Start: run ``uri`` as the canary and send it ``weight_pct`` of traffic."""

    uri: str
    version: int
    weight_pct: int


@dataclass(frozen=True)
class SetWeight:
    """Send ``weight_pct`` of traffic to the canary."""

    weight_pct: int


@dataclass(frozen=True)
class Promote:
    """Make the canary the stable version with all traffic."""


@dataclass(frozen=True)
class Rollback:
    """Do the next step of putting all traffic and the spec back on the stable version."""


@dataclass(frozen=True)
class SaveState:
    """Write only the rollout state (the traffic stays as it is)."""


Change = Deploy | SetWeight | Promote | Rollback | SaveState


class TrafficBackend(Protocol):
    """One traffic-splitting system that a rollout drives.

    ``namespace`` and ``isvc`` name the serving target (``target`` is both, as
    ``namespace/isvc``); the ``default_*`` methods say where this system's own registry
    and Prometheus are when the operator names none (None: the caller's defaults).
    """

    name: str
    namespace: str
    isvc: str

    @property
    def target(self) -> str:
        """``namespace/isvc``: how messages name the serving target."""
        ...

    def observe(self) -> Observation:
        """Read the target now: its rollout state, traffic split and canary readiness."""
        ...

    def apply(self, seen: Observation, change: Change, state: RolloutState) -> Observation:
        """Store ``state`` conditionally on ``seen.version`` and carry out ``change``.

        Raises ``Conflict`` when the state changed since ``seen`` was read; the
        caller re-reads and decides again. Idempotent: applying a change that is
        already in effect writes only the state.
        """
        ...

    def describe(self, seen: Observation, change: Change, state: RolloutState) -> Mapping[str, Any]:
        """What ``apply`` would send, for ``--dry-run`` (sends nothing)."""
        ...

    def record(self, state: RolloutState, decision: Decision) -> None:
        """Publish one decision where operators look (a Kubernetes Event, a log line)."""
        ...

    def list_events(self) -> list[dict[str, Any]]:
        """Every decision ``record`` published for this target that is still kept, oldest
        first, as Kubernetes Event objects (``lastTimestamp``, ``type``, ``reason``, ...)."""
        ...

    def default_registry_url(self) -> str | None:
        """The registry this target serves from, when the operator names none."""
        ...

    def default_prometheus_url(self) -> str | None:
        """The Prometheus that scrapes this target, when the operator names none."""
        ...

    def announce_exporter(self, address: str | None) -> float | None:
        """Have this target's Prometheus scrape a ``rollout run`` exporter at
        ``address`` (``None``: it stopped); the seconds between its scrapes, or None
        when the target cannot (a cluster's PodMonitor finds the run's pod instead)."""
        ...
