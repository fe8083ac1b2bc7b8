"""The planner: knobs, replica counts and autoscaler targets for a p99 SLO, from a profile.

Pure: it only runs the simulation (``_sim``), seeded, so the same inputs give the same
plan. The method, in order (docs/CAPACITY.md, "The plan"):

1. Refuse an SLO under ``profile.floor_ms`` (t99(1) + edge: no configuration reaches it).
2. For each profiled batch size as ``max_batch_size`` and each ``max_batch_wait_ms`` of a
   small grid (``WAIT_GRID_MS``, at most half the SLO's slack over the floor), find one
   replica's capacity at the SLO by bisection on the Poisson rate: the highest rate whose
   simulated p99 is within the SLO with ``SUCCESS_TARGET`` of requests answered on time,
   never above the edge's CPU limit (``cpus x 1000 / edge_cpu_ms``); on a CPU device
   each trial's batches stretch by ``Profile.cpu_slowdown(rate)``, the share of the
   model's cores the edge takes at that rate. Keep the knobs with
   the highest capacity; another pair must beat it by ``TIE`` (3%) to replace it, so ties
   go to the smaller batch and the shorter wait. The trials share one seed: a Poisson
   process of the same uniforms at another rate is the same arrivals rescaled, so the pass
   / fail answer moves with the rate and not with noise.
3. ``request_timeout_ms`` = the SLO (a request the SLO already lost is refused or dropped
   before it costs device time others need); ``max_queue_size`` = the items one replica
   can still finish within the SLO, ``ceil(capacity x (SLO - edge))``. In queue mode the
   frontends compare it with the stream's depth, lag plus pending (``XINFO GROUPS``,
   predictor/queue/_frontend.py ``_admit``), and pending holds every worker's prefetch of
   2 x max_batch_size: so it is ``max replicas x (that + 2 x max_batch_size)``, a bound
   the largest fleet can finish, the frontends' deadline admission doing the rest; and
   the claim timeout (``claim_timeout_ms``) sits between a healthy worker's hold and the SLO.
   On a CPU device ``torch_threads`` is the profile's (``profiled_threads``).
4. Replicas: ``ceil(rate / (utilisation x capacity))`` at peak and at mean; ``spare`` on
   top; the cold-start headroom carries a burst for the autoscaler's reaction plus the
   version's load time, when no new replica can be ready: ``ceil(factor x peak / (u x
   capacity)) - for_peak``. ``min = for_mean + spare`` (>= 1), ``max = for_peak + spare +
   cold_start``.
5. Predict: N replicas behind the balancer (workers on the shared stream in queue mode)
   at the mean with ``for_mean`` and at the peak with ``for_peak`` replicas: the spare
   down, the worst case a plan must survive.
6. Autoscaler targets in their own units (``knative_targets``, ``lag_per_worker``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from capacity._arrivals import Burst, poisson_arrivals
from capacity._planfile import Autoscaler, Knobs, Mode, PlanFile, Prediction, Replicas
from capacity._profile import Profile, ProfileError
from capacity._sim import BALANCERS, Balancer, SimResult, simulate
from predictor.batching import BatchConfig

# Knative: pkg/autoscaler/config/config.go defaultConfig(): StableWindow 60 s (the stable
# average a burst under the panic threshold is seen through), TargetUtilization and
# ContainerConcurrencyTargetFraction 0.7 (defaultTargetUtilization).
KNATIVE_STABLE_WINDOW_S = 60.0
KNATIVE_TARGET_UTILISATION = 0.7
# KEDA: a ScaledObject's pollingInterval defaults to 30 s (the ScaledObject spec,
# keda.sh/docs/2.x/reference/scaledobject-spec; pkg/apis/keda/v1alpha1/scaledobject_types.go).
KEDA_POLLING_INTERVAL_S = 30.0
# No plan above this many replicas: Knative's max-scale-limit is unbounded (0), but a
# model that needs more than a thousand replicas needs a bigger device, not a plan.
MAX_REPLICAS = 1000
WAIT_GRID_MS = (0.0, 2.0, 5.0, 10.0, 20.0, 50.0)
SUCCESS_TARGET = 0.999
TIE = 0.03
_BISECTIONS = 7
# No rate above what back-to-back full batches serve is steady, and one near it is not
# steady over any trial short enough to run thousands of: the search stops at 95% of it.
_STEADY = 0.95


@dataclass(frozen=True)
class PlanRequest:
    """What a plan is for. ``mean_rps`` defaults to half the peak (a day swinging between
    idle and peak averages half of it); ``reaction_s`` to the autoscaler's own window:
    Knative's stable window (60 s) in-process, KEDA's polling interval (30 s) in queue
    mode; ``utilisation`` to Knative's 70% target."""

    slo_p99_ms: float
    peak_rps: float
    mean_rps: float | None = None
    burst: Burst | None = None
    spare: int = 1
    mode: Mode = "in-process"
    utilisation: float = KNATIVE_TARGET_UTILISATION
    reaction_s: float | None = None
    cpus: float = 1.0
    balancer: Balancer = "random"
    seed: int = 0
    trial_requests: int = 3000
    predict_requests: int = 20000

    def __post_init__(self) -> None:
        for name in ("slo_p99_ms", "peak_rps", "cpus"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ProfileError(f"{name} must be a number > 0, got {value!r}")
        if self.mean_rps is not None and not (0 < self.mean_rps <= self.peak_rps):
            raise ProfileError(f"the mean rate ({self.mean_rps:g}/s) must be > 0 and at most "
                               f"the peak ({self.peak_rps:g}/s)")
        if not 0 < self.utilisation <= 1:
            raise ProfileError(f"utilisation must be in (0, 1], got {self.utilisation!r}")
        if self.spare < 0:
            raise ProfileError(f"spare must be >= 0, got {self.spare}")
        if self.reaction_s is not None and not self.reaction_s >= 0:
            raise ProfileError(f"reaction_s must be >= 0, got {self.reaction_s!r}")
        if self.balancer not in BALANCERS:
            raise ProfileError(f"unknown balancer {self.balancer!r}")
        if self.trial_requests < 100 or self.predict_requests < 100:
            raise ProfileError("trial_requests and predict_requests must be >= 100")

    @property
    def mean(self) -> float:
        return self.mean_rps if self.mean_rps is not None else self.peak_rps / 2.0

    @property
    def reaction(self) -> float:
        if self.reaction_s is not None:
            return self.reaction_s
        return KEDA_POLLING_INTERVAL_S if self.mode == "queue" else KNATIVE_STABLE_WINDOW_S


@dataclass(frozen=True)
class _Choice:
    max_batch_size: int
    max_batch_wait_ms: float
    capacity_rps: float


def plan(profile: Profile, request: PlanRequest) -> PlanFile:
    """The plan for ``request`` on the device ``profile`` measured."""
    slo = request.slo_p99_ms
    if slo < profile.floor_ms:
        raise ProfileError(f"the SLO p99 {slo:g} ms is under this version's floor of "
                           f"{profile.floor_ms:.1f} ms on {profile.device} (t99(1) + edge): "
                           f"no batching can answer faster")
    choice = search_knobs(profile, request)
    cap = choice.capacity_rps
    replicas = plan_replicas(cap, request, profile.load_s)
    in_time = max(choice.max_batch_size, math.ceil(cap * (slo - profile.edge_ms) / 1000.0))
    if request.mode == "queue":  # the stream's depth: lag + pending, the prefetch included
        in_time = replicas.max * (in_time + 2 * choice.max_batch_size)
    knobs = Knobs(max_batch_size=choice.max_batch_size,
                  max_batch_wait_ms=choice.max_batch_wait_ms,
                  max_queue_size=in_time,
                  request_timeout_ms=slo,
                  queue_claim_timeout_ms=(claim_timeout_ms(profile, choice.max_batch_size,
                                                           choice.max_batch_wait_ms, slo)
                                          if request.mode == "queue" else None),
                  torch_threads=profiled_threads(profile))
    config = _config(knobs)
    mean = _predict(profile, config, request, request.mean, replicas.for_mean, 1)
    peak = _predict(profile, config, request, request.peak_rps, replicas.for_peak, 2)
    autoscaler = _autoscaler(request, cap, knobs, replicas, peak)
    burst = request.burst
    return PlanFile(
        model=profile.model, version=profile.version, device=profile.device,
        mode=request.mode, slo_p99_ms=slo, peak_rps=request.peak_rps, mean_rps=request.mean,
        floor_ms=round(profile.floor_ms, 3), knobs=knobs, capacity_rps=round(cap, 2),
        utilisation=request.utilisation, replicas=replicas, autoscaler=autoscaler,
        mean=_prediction(request.mean, mean), peak=_prediction(request.peak_rps, peak),
        load_s=profile.load_s, reaction_s=request.reaction,
        burst_factor=burst.factor if burst else 1.0, burst_s=burst.duration_s if burst else 0.0)


def profiled_threads(profile: Profile) -> int | None:
    """The torch threads a CPU profile's t(b) was measured with: the plan serves with
    them, or its batch times would not be the profile's (None on a GPU)."""
    threads = profile.host.get("torch_threads")
    return int(threads) if profile.device == "cpu" and threads else None


def search_knobs(profile: Profile, request: PlanRequest) -> _Choice:
    """The (max_batch_size, max_batch_wait_ms) with the highest one-replica capacity."""
    slack = request.slo_p99_ms - profile.floor_ms
    waits = [w for w in WAIT_GRID_MS if w <= slack / 2.0] or [0.0]
    best: _Choice | None = None
    for size in profile.sizes:
        if profile.batch_ms(size, 0.99) + profile.edge_ms > request.slo_p99_ms:
            break  # this batch alone misses the SLO; larger ones too
        cpu_limit = profile.cpu_limit_rps(request.cpus, size)  # at capacity batches are full
        hi = min(cpu_limit, _STEADY * size / (_mean_ms(profile, size) / 1000.0))
        floor = best.capacity_rps * (1 + TIE) if best else 0.0
        if hi <= floor:
            continue
        for wait in waits:
            config = _search_config(size, wait, hi, request.slo_p99_ms)
            if floor and not _meets(profile, config, request, floor):
                continue
            capacity = _bisect(profile, config, request, floor, hi)
            if capacity > floor:
                best = _Choice(size, wait, capacity)
                floor = capacity * (1 + TIE)
                if hi <= floor:
                    break
    if best is None or best.capacity_rps <= 0:
        raise ProfileError(f"no profiled batch size meets the SLO p99 {request.slo_p99_ms:g} ms "
                           f"with {SUCCESS_TARGET:.1%} on time: raise the SLO")
    return best


def plan_replicas(capacity_rps: float, request: PlanRequest, load_s: float) -> Replicas:
    """Replica counts for the peak, the mean, the spare and a burst's cold start."""
    per_replica = request.utilisation * capacity_rps
    for_peak = math.ceil(request.peak_rps / per_replica - 1e-9)
    for_mean = max(1, math.ceil(request.mean / per_replica - 1e-9))
    cold_start = 0
    burst = request.burst
    if burst is not None:
        # For reaction_s + load_s no new replica is ready: the ones up carry the burst.
        cold_start = math.ceil(burst.factor * request.peak_rps / per_replica - 1e-9) - for_peak
    top = for_peak + request.spare + cold_start
    if top > MAX_REPLICAS:
        what = f"the burst {burst} on top of " if burst is not None and cold_start else ""
        raise ProfileError(f"{what}{request.peak_rps:g} req/s needs {top} replicas of "
                           f"{capacity_rps:.0f} req/s at the SLO; no replica count up to "
                           f"{MAX_REPLICAS} absorbs it: lower the burst or profile a faster "
                           f"device")
    return Replicas(for_peak=for_peak, for_mean=for_mean, spare=request.spare,
                    cold_start=cold_start, min=max(1, for_mean + request.spare), max=top)


def knative_targets(total_concurrency: float, pods: int) -> tuple[int, int]:
    """KServe's integer ``scaleTarget`` and the target-utilization percentage for which
    Knative's ``Scale`` (pkg/autoscaler/scaling/autoscaler.go: ``dspc = ceil(observed /
    TargetValue)``, TargetValue = target x utilisation) asks for ``pods`` at
    ``total_concurrency``. KServe copies scaleTarget into ``autoscaling.knative.dev/target``
    (pkg/controller/v1beta1/inferenceservice/reconcilers/knative/ksvc_reconciler.go).
    The percentage closest to Knative's default 70 that makes it exact is chosen."""
    if pods < 1:
        raise ProfileError("pods must be >= 1")
    percentages = sorted(range(1, 101), key=lambda u: (abs(u - 70), u))
    for percent in percentages:
        target = max(1, math.ceil(total_concurrency * 100.0 / (percent * pods) - 1e-9))
        if math.ceil(total_concurrency * 100.0 / (target * percent) - 1e-9) == pods:
            return target, percent
    # Too little concurrency to need that many pods at any target >= 1: the minimum
    # replica count holds them instead.
    return 1, 100


# -- the pieces ------------------------------------------------------------------------------
def _config(knobs: Knobs) -> BatchConfig:
    return BatchConfig(knobs.max_batch_size, knobs.max_batch_wait_ms, knobs.max_queue_size,
                       knobs.request_timeout_ms)


def _search_config(size: int, wait_ms: float, hi_rps: float, slo_ms: float) -> BatchConfig:
    # A queue bound that never binds during the search: admission by deadline does.
    queue = max(size, math.ceil(hi_rps * slo_ms / 1000.0 * 2))
    return BatchConfig(size, wait_ms, queue, slo_ms)


def _meets(profile: Profile, config: BatchConfig, request: PlanRequest, rate: float) -> bool:
    slowdown = profile.cpu_slowdown(rate, config.max_batch_size)
    if math.isinf(slowdown):
        return False  # the edge alone takes the cores
    arrivals = poisson_arrivals(rate, request.trial_requests, random.Random(request.seed))
    result = simulate(profile, config, arrivals, mode=request.mode, cpus=request.cpus,
                      seed=request.seed, slowdown=slowdown)
    return result.p99_ms <= request.slo_p99_ms and result.success_rate >= SUCCESS_TARGET


def _bisect(profile: Profile, config: BatchConfig, request: PlanRequest, lo: float,
            hi: float) -> float:
    """The highest rate in [lo, hi] that meets the SLO (lo when none above it does)."""
    if _meets(profile, config, request, hi):
        return hi
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2.0
        if _meets(profile, config, request, mid):
            lo = mid
        else:
            hi = mid
    return lo


def _predict(profile: Profile, config: BatchConfig, request: PlanRequest, rate: float,
             replicas: int, stream: int) -> SimResult:
    arrivals = poisson_arrivals(rate, request.predict_requests,
                                random.Random(request.seed + stream))
    slowdown = profile.cpu_slowdown(rate / replicas, config.max_batch_size)
    if math.isinf(slowdown):  # never for a planned rate: the search refused it already
        raise ProfileError(f"{rate / replicas:.0f} req/s a replica leaves the model no CPU")
    return simulate(profile, config, arrivals, replicas=replicas, balancer=request.balancer,
                    mode=request.mode, cpus=request.cpus, seed=request.seed + stream,
                    slowdown=slowdown)


def _prediction(rate: float, result: SimResult) -> Prediction:
    return Prediction(rps=rate, p50_ms=round(result.p50_ms, 2), p99_ms=round(result.p99_ms, 2),
                      success_rate=round(result.success_rate, 5))


def _autoscaler(request: PlanRequest, capacity: float, knobs: Knobs, replicas: Replicas,
                peak: SimResult) -> Autoscaler:
    if request.mode == "queue":
        # KEDA redis-streams (kedacore/keda pkg/scalers/redis_streams_scaler.go): with
        # consumerGroup and lagCount the metric is the group's lag, entries no worker has
        # read, and the HPA asks for ceil(lag / lagCount) workers. A worker clears what
        # its p99 leaves of the SLO at its capacity: that much lag per worker still makes
        # the SLO, each lagCount more needs one more worker. activationLagCount 0: any
        # backlog wakes a worker (a lone request must not wait for its deadline).
        budget_s = max(0.0, request.slo_p99_ms - _finite(peak.p99_ms, request.slo_p99_ms))
        lag = max(1, math.floor(capacity * budget_s / 1000.0))
        return Autoscaler(lag_per_worker=lag, activation_lag=0)
    # Little's law: requests in flight = rate x mean latency; Knative counts them at the
    # queue-proxy, edge included.
    in_flight = request.peak_rps * _finite(peak.mean_ms, request.slo_p99_ms) / 1000.0
    target, percent = knative_targets(in_flight, replicas.for_peak)
    return Autoscaler(scale_target=target, target_utilization_percentage=percent,
                      activation_scale=replicas.min)


def claim_timeout_ms(profile: Profile, size: int, wait_ms: float, timeout_ms: float) -> int:
    """Queue mode's ``--queue_claim_timeout_ms``: how long a pending entry sits idle before
    another worker claims it (its worker presumably dead). A healthy worker holds an entry
    for up to its wait plus two batches (one running, its own forming: the prefetch of
    2 x max_batch_size, predictor/queue/_worker.py ``QueueWorker._read_loop``), so the
    claim waits a tenth more than that; and the predictor wants it below the request
    timeout (predictor/_config.py), where a claimed entry can still be answered."""
    held_ms = wait_ms + 2 * profile.batch_ms(size, 0.99)
    return max(1, min(math.ceil(1.1 * held_ms), math.ceil(timeout_ms) - 1))


def _mean_ms(profile: Profile, size: int) -> float:
    grid = [(i + 0.5) / 64 for i in range(64)]
    return sum(profile.batch_ms(size, u) for u in grid) / len(grid)


def _finite(value: float, default: float) -> float:
    return value if math.isfinite(value) else default

