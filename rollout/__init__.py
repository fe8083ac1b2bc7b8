"""Canary rollouts of model versions: traffic backends, analysis and the step engine.

A rollout moves traffic from a stable to a canary version step by step through a
``TrafficBackend`` (``kserve`` on Kubernetes, ``local`` for the nginx gateway of
``modelctl dev``), analyses each step against Prometheus, and promotes or rolls
back. Its state is stored with the target (a ConfigMap beside the
InferenceService; the environment's state file for ``modelctl dev``), so any run can
resume it. Nothing here does I/O at import.
"""

from typing import TYPE_CHECKING, Any

from rollout._backend import Observation, TrafficBackend, make_backend
from rollout._decide import Command, decide
from rollout._devenv import DevEnv
from rollout._devprocs import DevEnvError, DevEnvNotFound, DevEnvRunning
from rollout._devup import UpSpec
from rollout._engine import (
    Engine,
    RunResult,
    StepResult,
    analysis_context,
    new_holder_id,
    run,
)
from rollout._errors import (
    AnalysisSpecError,
    BadQueryError,
    CaptureError,
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
    ShadowError,
    ShadowGateError,
    SourceUnreachableError,
    ThresholdsError,
    UnknownBackend,
    UnsupportedTarget,
)
from rollout._kserve import KServeBackend
from rollout._kube import KubeClient
from rollout._local import LocalNginxBackend
from rollout._metrics import MetricSource
from rollout._plan import Plan, parse_duration_s, parse_steps
from rollout._shadow_deploy import ShadowChange, start_shadow, stop_shadow
from rollout._shadow_gate import require_shadow_pass
from rollout._shadow_report import ReportRequest, ShadowReport, build_report, parse_time
from rollout._shadow_thresholds import Thresholds, load_thresholds
from rollout._start import start_rollout
from rollout._state import Decision, Phase, RolloutState
from rollout._types import AnalysisContext, AnalysisResult, Analyzer, MetricResult, Verdict

if TYPE_CHECKING:
    from rollout._analysis import Analysis, AnalysisSpec, load_analysis, parse_analysis
    from rollout._prometheus import PrometheusSource

# The analysis pulls in scipy and the Prometheus client (seconds to import); load them
# on first use so that `modelctl rollout status` and friends start fast.
_LAZY = {
    "Analysis": "rollout._analysis",
    "AnalysisSpec": "rollout._analysis",
    "load_analysis": "rollout._analysis",
    "parse_analysis": "rollout._analysis",
    "PrometheusSource": "rollout._prometheus",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rollout' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Analysis",
    "AnalysisContext",
    "AnalysisResult",
    "AnalysisSpec",
    "AnalysisSpecError",
    "Analyzer",
    "BadQueryError",
    "CaptureError",
    "Command",
    "Conflict",
    "Decision",
    "DevEnv",
    "DevEnvError",
    "DevEnvNotFound",
    "DevEnvRunning",
    "Engine",
    "InvalidPlan",
    "InvalidSteps",
    "InvalidTransition",
    "KServeBackend",
    "KubeClient",
    "KubeConfigError",
    "KubeError",
    "LeaseHeld",
    "LocalNginxBackend",
    "MetricResult",
    "MetricSource",
    "MetricSourceError",
    "NotFound",
    "NotReady",
    "Observation",
    "Phase",
    "Plan",
    "PrometheusSource",
    "ReportRequest",
    "RolloutError",
    "RolloutState",
    "RunResult",
    "ShadowChange",
    "ShadowError",
    "ShadowGateError",
    "ShadowReport",
    "SourceUnreachableError",
    "StepResult",
    "Thresholds",
    "ThresholdsError",
    "TrafficBackend",
    "UnknownBackend",
    "UnsupportedTarget",
    "UpSpec",
    "Verdict",
    "analysis_context",
    "build_report",
    "decide",
    "load_analysis",
    "load_thresholds",
    "make_backend",
    "new_holder_id",
    "parse_analysis",
    "parse_duration_s",
    "parse_steps",
    "parse_time",
    "require_shadow_pass",
    "run",
    "start_rollout",
    "start_shadow",
    "stop_shadow",
]
