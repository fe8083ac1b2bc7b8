"""Capacity planning from measured batch latency: a version's profile (``_profile``), an
open-arrival simulation that drives the predictor's own batching policy on a simulated
clock, and the planner that searches knobs and replica counts with it."""

from capacity._planfile import (
    MODES,
    PLAN_SCHEMA,
    Autoscaler,
    Knobs,
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

__all__ = [
    "DEVICE_KINDS",
    "MODES",
    "PLAN_SCHEMA",
    "SCHEMA",
    "Autoscaler",
    "BatchTiming",
    "Knobs",
    "PlanFile",
    "Prediction",
    "Profile",
    "ProfileError",
    "Replicas",
    "quantile",
    "report_name",
]
