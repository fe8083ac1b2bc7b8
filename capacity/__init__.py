"""Capacity planning from measured batch latency: a version's profile (``_profile``), an
open-arrival simulation that drives the predictor's own batching policy on a simulated
clock, and the planner that searches knobs and replica counts with it."""

from capacity._arrivals import Burst, bursty_arrivals, poisson_arrivals
from capacity._options import DEFAULT_INPUTS, ProfileOptions, parse_batch_sizes, read_inputs
from capacity._plan import PlanRequest, knative_targets, plan
from capacity._planfile import (
    MODES,
    PLAN_SCHEMA,
    Autoscaler,
    Knobs,
    Mode,
    PlanFile,
    Prediction,
    Replicas,
)
from capacity._profile import (
    DEVICE_KINDS,
    SCHEMA,
    BatchTiming,
    Profile,
    ProfileError,
    quantile,
    report_name,
)
from capacity._sim import BALANCERS, Balancer, Outcome, SimResult, simulate
from capacity._units import parse_burst, parse_ms, parse_rate
from common import lazy_exports as _lazy_exports

# Measuring builds the predictor's model (KServe, torch): loaded on first use, so that
# `import capacity` (and the CLI) stays fast.
_LAZY = {"measure_profile": "capacity._measure"}
__getattr__ = _lazy_exports(__name__, _LAZY)

__all__ = [
    "BALANCERS",
    "DEFAULT_INPUTS",
    "DEVICE_KINDS",
    "MODES",
    "PLAN_SCHEMA",
    "SCHEMA",
    "Autoscaler",
    "Balancer",
    "BatchTiming",
    "Burst",
    "Knobs",
    "Mode",
    "Outcome",
    "PlanFile",
    "PlanRequest",
    "Prediction",
    "Profile",
    "ProfileError",
    "ProfileOptions",
    "Replicas",
    "SimResult",
    "bursty_arrivals",
    "knative_targets",
    "measure_profile",
    "parse_batch_sizes",
    "parse_burst",
    "parse_ms",
    "parse_rate",
    "plan",
    "poisson_arrivals",
    "quantile",
    "read_inputs",
    "report_name",
    "simulate",
]
