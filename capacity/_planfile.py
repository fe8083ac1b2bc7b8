"""A plan as a file: what ``modelctl plan --json`` prints and ``deploy render --plan`` reads.

Every number is in the units of what will use it: the predictor's flags, the
InferenceService's replica bounds, Knative's or KEDA's targets. The planner
(``_plan``) fills it; the renderer only copies it into manifests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from capacity._profile import ProfileError

PLAN_SCHEMA = "modelctl.plan/v1"
Mode = Literal["in-process", "queue"]
MODES: tuple[Mode, ...] = ("in-process", "queue")


@dataclass(frozen=True)
class Knobs:
    """The predictor's batching flags (``--max_batch_size`` …); in queue mode also
    ``--queue_claim_timeout_ms``, which must sit below the request timeout; on a CPU
    device ``--torch_threads``, the threads the profile's t(b) was measured with
    (None: the profile did not set them, or the device is a GPU)."""

    max_batch_size: int
    max_batch_wait_ms: float
    max_queue_size: int
    request_timeout_ms: float
    queue_claim_timeout_ms: int | None = None
    torch_threads: int | None = None


@dataclass(frozen=True)
class Replicas:
    """How many replicas, and why: ``min`` and ``max`` go into the InferenceService."""

    for_peak: int  # ceil(peak / (utilisation x capacity))
    for_mean: int  # the same at the mean rate
    spare: int  # for a failed replica
    cold_start: int  # absorbs the rise during autoscaler reaction plus load time
    min: int
    max: int


@dataclass(frozen=True)
class Autoscaler:
    """Targets in the autoscaler's own units.

    Knative (in-process mode): KServe's ``scaleMetric: concurrency`` with
    ``scaleTarget`` (an integer), the ``autoscaling.knative.dev/target-utilization-percentage``
    annotation that goes with it, and ``activation-scale`` (pods on the way up from zero).
    KEDA (queue mode): the redis-streams trigger's ``lagCount`` per worker and
    ``activationLagCount``. The other mode's fields are None.
    """

    scale_target: int | None = None
    target_utilization_percentage: int | None = None
    activation_scale: int | None = None
    lag_per_worker: int | None = None
    activation_lag: int | None = None


@dataclass(frozen=True)
class Prediction:
    """What the simulation predicts at one rate."""

    rps: float
    p50_ms: float
    p99_ms: float
    success_rate: float  # answered 2xx within the SLO's deadline


@dataclass(frozen=True)
class PlanFile:
    """One plan for one version, device kind and mode."""

    model: str
    version: int
    device: str
    mode: Mode
    slo_p99_ms: float
    peak_rps: float
    mean_rps: float
    floor_ms: float
    knobs: Knobs
    capacity_rps: float  # one replica at the SLO
    utilisation: float  # the share of that capacity a replica is planned to run at
    replicas: Replicas
    autoscaler: Autoscaler
    mean: Prediction
    peak: Prediction
    load_s: float = 0.0
    reaction_s: float = 0.0
    burst_factor: float = 1.0
    burst_s: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ProfileError(f"unknown mode {self.mode!r}: use {' or '.join(MODES)}")
        r = self.replicas
        if not 0 <= r.min <= r.max or r.max < 1:
            raise ProfileError(f"replicas must satisfy 0 <= min <= max and max >= 1, "
                               f"got min {r.min}, max {r.max}")
        k = self.knobs
        if k.max_batch_size < 1 or k.max_queue_size < k.max_batch_size:
            raise ProfileError("knobs: max_batch_size >= 1 and max_queue_size >= it")
        for name in ("slo_p99_ms", "peak_rps", "capacity_rps"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ProfileError(f"{name} must be a finite number > 0, got {value!r}")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema"] = PLAN_SCHEMA
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlanFile:
        """Read a plan back; anything malformed raises ``ProfileError`` saying what."""
        if not isinstance(data, Mapping) or data.get("schema") != PLAN_SCHEMA:
            raise ProfileError(f"not a {PLAN_SCHEMA} plan (write one with `modelctl plan "
                               f"NAME@REF ... --json > plan.json`)")
        try:
            fields = {k: v for k, v in data.items() if k != "schema"}
            return cls(**{
                **fields,
                "knobs": Knobs(**fields["knobs"]),
                "replicas": Replicas(**fields["replicas"]),
                "autoscaler": Autoscaler(**fields["autoscaler"]),
                "mean": Prediction(**fields["mean"]),
                "peak": Prediction(**fields["peak"]),
            })
        except (KeyError, TypeError) as exc:
            raise ProfileError(f"malformed plan: {type(exc).__name__}: {exc}") from None
