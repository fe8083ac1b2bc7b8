"""Canary rollouts of model versions: the step engine, its plan and its stored state.

A rollout moves traffic from a stable to a canary version step by step through a
traffic backend (``rollout.backends``: ``kserve`` on Kubernetes, ``local`` for the
nginx gateway of ``modelctl dev``), analyses each step (``rollout.analysis``: the
Prometheus queries and the judge), and promotes or rolls back. ``decide`` is the
pure step function; ``Engine`` runs it against a backend, ``run`` loops it, and
``wait_final`` repeats a promotion or rollback until it is in effect. Its
state is stored with the target (a ConfigMap beside the InferenceService; the
environment's state file for ``modelctl dev``), so any run can resume it. Nothing
here does I/O at import.
"""

from rollout._decide import Command, decide
from rollout._engine import (
    Engine,
    RunResult,
    StepResult,
    analysis_context,
    new_holder_id,
    run,
    wait_final,
)
from rollout._errors import (
    AnalysisSpecError,
    BadQueryError,
    Conflict,
    InvalidPlan,
    InvalidSteps,
    InvalidTransition,
    KubeConfigError,
    KubeError,
    LeaseHeld,
    MetricSourceError,
    NotFound,
    NotReady,
    RolloutError,
    SourceUnreachableError,
    UnknownBackend,
    UnsupportedTarget,
)
from rollout._exporter import RolloutExporter
from rollout._plan import Plan, parse_steps
from rollout._start import start_rollout
from rollout._state import Decision, Phase, RolloutState

__all__ = [
    "AnalysisSpecError",
    "BadQueryError",
    "Command",
    "Conflict",
    "Decision",
    "Engine",
    "InvalidPlan",
    "InvalidSteps",
    "InvalidTransition",
    "KubeConfigError",
    "KubeError",
    "LeaseHeld",
    "MetricSourceError",
    "NotFound",
    "NotReady",
    "Phase",
    "Plan",
    "RolloutError",
    "RolloutExporter",
    "RolloutState",
    "RunResult",
    "SourceUnreachableError",
    "StepResult",
    "UnknownBackend",
    "UnsupportedTarget",
    "analysis_context",
    "decide",
    "new_holder_id",
    "parse_steps",
    "run",
    "start_rollout",
    "wait_final",
]
