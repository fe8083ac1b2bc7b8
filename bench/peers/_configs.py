"""The servers compared, their published configurations, and the capacity rules.

Pure data and arithmetic, no I/O: ``bench/compare.py`` runs what is described here
and the tests check it on synthetic data.

Every server serves one replica with max batch 100 and (where the knob exists) max
wait 50 ms; each one's *main knob* is then swept (``TUNING``) and the best value is
measured beside the default (``variant="tuned"``). The budgets are issue 18's, set
against the physical floor: on fixed-latency (one 100 ms batch at a time) an item
that arrives just after a batch starts waits ~100 ms and runs ~100 ms, so p99 sits
at ~200 ms under any sustained load, and the budget is that floor plus a quarter
(250 ms); on the embedding model it is 400 ms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SLO_P99_MS = {"fixed-latency": 250.0, "embedding": 400.0}
SLO_MIN_SUCCESS = 0.99
MAX_BATCH_SIZE = 100
VARIANTS = ("default", "tuned")
WORKLOADS = ("fixed-latency", "embedding")
# Where a server is installed: the project's .venv, bench/.venv-peers, or
# bench/.venv-peers-np1 (PyTriton 0.7.0 and Infinity 0.0.78 both require numpy < 2).
VENVS = ("project", "peers", "peers-np1")
# CPU per request is read at this load, or at half the server's saturation if lower.
CPU_RATE_RPS = 500.0
CPU_RATE_SLACK = 0.05


def slo_p99_ms(workload: str) -> float:
    """The p99 budget of a workload ("fixed-latency" or "embedding")."""
    try:
        return SLO_P99_MS[workload]
    except KeyError:
        raise ValueError(f"unknown workload {workload!r}; known: {', '.join(SLO_P99_MS)}") \
            from None


@dataclass(frozen=True)
class ServerKind:
    """One server compared: how it batches and which knob matters most."""

    name: str
    title: str
    venv: str  # one of VENVS
    settings: Mapping[str, Any]  # fixed configuration, published as is
    protocol: str = "KServe V1 JSON over HTTP/1.1"  # what the load generator sends
    knob: str | None = None  # the main knob, tuned; None where there is nothing to tune
    knob_default: float | None = None
    knob_candidates: tuple[float, ...] = ()
    batches: bool = True
    workloads: tuple[str, ...] = WORKLOADS  # what it serves; tuned on the first
    ours: bool = False  # modelctl itself (the targets' subject), not a peer
    notes: str = ""

    def __post_init__(self) -> None:
        if self.venv not in VENVS:
            raise ValueError(f"{self.name}: venv must be one of {', '.join(VENVS)}")
        if not self.workloads or not set(self.workloads) <= set(WORKLOADS):
            raise ValueError(f"{self.name}: workloads must be among {', '.join(WORKLOADS)}")
        if (self.knob is None) != (self.knob_default is None):
            raise ValueError(f"{self.name}: a knob needs a default and a default needs a knob")
        if self.knob is not None and self.knob_default not in self.knob_candidates:
            raise ValueError(f"{self.name}: the default {self.knob_default} must be a candidate")


# Both modes of our predictor: the flags every one of its processes gets, and its knob.
_PREDICTOR_SETTINGS = {"max_batch_size": MAX_BATCH_SIZE, "max_queue_size": 1024,
                       "request_timeout_ms": 30000, "enable_grpc": False}
_PREDICTOR_KNOB: dict[str, Any] = {"knob": "max_batch_wait_ms", "knob_default": 50.0,
                                   "knob_candidates": (10.0, 50.0, 100.0), "ours": True}

SERVERS: dict[str, ServerKind] = {
    "kserve-plain": ServerKind(
        name="kserve-plain",
        title="KServe, no batching",
        venv="project",
        settings={"kserve": "0.21.0", "batching": "none: one item per forward pass",
                  "concurrency": "one item at a time (single-thread executor)",
                  "workers": 1},
        batches=False,
        notes="No batching knob: the model sees one item at a time by construction.",
    ),
    "ray-serve": ServerKind(
        name="ray-serve",
        title="Ray Serve @serve.batch",
        venv="peers",
        settings={"ray": "2.60.0", "num_replicas": 1, "max_batch_size": MAX_BATCH_SIZE,
                  "max_concurrent_batches": 1, "max_ongoing_requests": 1000,
                  "ray_actor_options": {"num_cpus": 0}, "RAY_worker_niceness": 0,
                  "dashboard": False},
        knob="batch_wait_timeout_s",
        knob_default=0.05,
        knob_candidates=(0.01, 0.05, 0.1, 0.2),
        notes="Ray's own default batch_wait_timeout_s is 0.01; issue 18 asks for 0.05.",
    ),
    "bentoml": ServerKind(
        name="bentoml",
        title="BentoML adaptive batching",
        venv="peers",
        settings={"bentoml": "1.4.40", "workers": 1, "batchable": True,
                  "max_batch_size": MAX_BATCH_SIZE, "traffic.timeout_s": 60},
        knob="max_latency_ms",
        knob_default=200.0,
        knob_candidates=(200.0, 500.0, 1000.0, 60000.0),
        notes="BentoML's own default max_latency_ms is 60000; issue 18 keeps issue "
              "9's 200.",
    ),
    "mosec": ServerKind(
        name="mosec",
        title="Mosec dynamic batching",
        venv="peers",
        settings={"mosec": "0.9.8", "num": 1, "max_batch_size": MAX_BATCH_SIZE,
                  "timeout_ms": 30000, "serialization": "JSON (Mosec's default)",
                  "log_level": "warning"},
        protocol="JSON over HTTP/1.1 (Mosec's default serialisation, a V1 body)",
        knob="max_wait_time_ms",
        knob_default=50.0,
        knob_candidates=(10.0, 50.0, 100.0),
        notes="Mosec's own default max_wait_time is 10 ms; issue 18 asks for 50.",
    ),
    "pytriton": ServerKind(
        name="pytriton",
        title="NVIDIA Triton (PyTriton) dynamic batcher",
        venv="peers-np1",
        settings={"nvidia-pytriton": "0.7.0", "tritonserver": "2.51.0 (in the wheel)",
                  "instances": 1, "max_batch_size": MAX_BATCH_SIZE,
                  "inputs": "INPUT: BYTES [1]", "strict": True},
        protocol="KServe V2 JSON over HTTP/1.1 (Triton's HTTP endpoint)",
        knob="max_queue_delay_us",
        knob_default=50000.0,
        knob_candidates=(10000.0, 50000.0, 100000.0),
        notes="Triton's own default max_queue_delay_microseconds is 0; issue 18 asks for "
              "50,000.",
    ),
    "infinity": ServerKind(
        name="infinity",
        title="Infinity (embedding server)",
        venv="peers-np1",
        settings={"infinity-emb": "0.0.78", "engine": "torch", "model_warmup": True,
                  "trust_remote_code": False, "log_level": "warning"},
        protocol="OpenAI-style /embeddings JSON over HTTP/1.1",
        knob="batch_size",
        knob_default=32.0,
        knob_candidates=(32.0, 64.0, 100.0),
        workloads=("embedding",),
        notes="Infinity's own default --batch-size is 32; it runs the next batch as soon "
              "as the last one is done, with no wait timer. Embedding only.",
    ),
    "modelctl": ServerKind(
        name="modelctl",
        title="modelctl predictor",
        venv="project",
        settings=_PREDICTOR_SETTINGS,
        **_PREDICTOR_KNOB,
        notes="The predictor's own default max_batch_wait_ms is 10; issue 18 asks for 50.",
    ),
    "modelctl-queue": ServerKind(
        name="modelctl-queue",
        title="modelctl queue mode (1 frontend, 1 worker, Redis Streams)",
        venv="project",
        settings={**_PREDICTOR_SETTINGS, "frontends": 1, "workers": 1,
                  "queue_claim_timeout_ms": 5000,
                  "redis": "Debian's redis-server, AOF fsync every second, no RDB"},
        protocol="KServe V1 JSON over HTTP/1.1 to the frontend; Redis Streams behind it",
        **_PREDICTOR_KNOB,
        notes="docs/QUEUE.md's mode: the frontend validates and enqueues, the worker "
              "batches; CPU counts all three processes (frontend, worker, redis-server).",
    ),
}


@dataclass(frozen=True)
class PeerConfig:
    """One server with one value of its main knob: what a line in the results is."""

    server: str
    variant: str = "default"
    knob_value: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.server not in SERVERS:
            raise ValueError(f"unknown server {self.server!r}; known: {', '.join(SERVERS)}")
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}")
        kind = SERVERS[self.server]
        if kind.knob is None and self.knob_value is not None:
            raise ValueError(f"{self.server} has no knob to set")
        if kind.knob is not None and self.knob_value is None:
            object.__setattr__(self, "knob_value", kind.knob_default)
        if self.knob_value is not None and not (math.isfinite(self.knob_value)
                                                and self.knob_value >= 0):
            raise ValueError(f"{kind.knob} must be a finite number >= 0")

    @property
    def kind(self) -> ServerKind:
        return SERVERS[self.server]

    @property
    def label(self) -> str:
        """Short name for tables and plot legends, e.g. ``ray-serve (wait 0.1)``."""
        if self.kind.knob is None:
            return self.server
        return f"{self.server} ({self.kind.knob}={self.knob_value:g}, {self.variant})"

    def published(self) -> dict[str, Any]:
        """The whole configuration, as the results and docs publish it."""
        out = {"server": self.server, "variant": self.variant, **self.kind.settings}
        if self.kind.knob is not None:
            out[self.kind.knob] = self.knob_value
        return {**out, **self.extra}


def default_configs() -> list[PeerConfig]:
    """Every server with its default configuration (the knob at issue 18's setting)."""
    return [PeerConfig(name) for name in SERVERS]


def passes_slo(row: Mapping[str, Any], p99_limit_ms: float,
               min_success: float = SLO_MIN_SUCCESS) -> bool:
    """Whether a load point's median run met p99 <= limit and success >= minimum."""
    p99 = _median(row["p99_ms"])
    success = _median(row["success_ratio"])
    return p99 is not None and p99 <= p99_limit_ms and success is not None \
        and success >= min_success


def sustained_load(rows: Sequence[Mapping[str, Any]], p99_limit_ms: float,
                   min_success: float = SLO_MIN_SUCCESS) -> float | None:
    """The highest offered load whose median run passed the SLO; None if none did.

    A load counts only when it passed; failures at lower loads do not cap it (a
    batcher can miss the p99 at low load and meet it higher up), but they are kept
    in the results for everyone to see.
    """
    passed = [float(r["offered_rps"]) for r in rows if passes_slo(r, p99_limit_ms, min_success)]
    return max(passed) if passed else None


def saturation_rps(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """Throughput at saturation: the most 2xx answers a second any load point achieved
    (median of its runs); None for an empty ladder."""
    rates = [m for m in (_median(r["throughput_rps"]) for r in rows) if m is not None]
    return max(rates) if rates else None


def cpu_row(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The load point at which CPU per request is read: the highest load at or under
    ``CPU_RATE_RPS`` and at or under half the saturation throughput, give or take
    ``CPU_RATE_SLACK`` (a ladder's points are coarse: a server saturating at 975
    req/s is read at 500, not at 200); the lowest load when none is; None for an
    empty ladder."""
    if not rows:
        return None
    target = min(CPU_RATE_RPS, 0.5 * (saturation_rps(rows) or 0.0)) * (1 + CPU_RATE_SLACK)
    under = [r for r in rows if float(r["offered_rps"]) <= target]
    pool = under or [min(rows, key=lambda r: float(r["offered_rps"]))]
    return max(pool, key=lambda r: float(r["offered_rps"]))


def best_knob(sweep: Mapping[float, Sequence[Mapping[str, Any]]],
              p99_limit_ms: float) -> float:
    """The knob value whose sweep sustained the highest load under the SLO.

    Ties go to the higher saturation throughput, then to the lower p99 at the SLO's
    load, then to the smaller value.
    """
    if not sweep:
        raise ValueError("an empty sweep has no best value")

    def key(value: float) -> tuple[float, float, float, float]:
        rows = sweep[value]
        load = sustained_load(rows, p99_limit_ms)
        saturation = saturation_rps(rows) or 0.0
        if load is None:
            return (0.0, saturation, -math.inf, -value)
        p99 = next(_median(r["p99_ms"]) for r in rows if float(r["offered_rps"]) == load)
        return (load, saturation, -(p99 or 0.0), -value)

    return max(sweep, key=key)


def is_saturated(row: Mapping[str, Any], p99_limit_ms: float) -> bool:
    """Whether a load point's median run shows a server that cannot keep up.

    Past saturation answers fail or queue without bound: success under 95%, 2xx
    throughput under 95% of the offered load, or a p99 over ten times the limit. A
    batcher that only misses the p99 at low load (waiting for a batch to fill) is
    not saturated.
    """
    success = _median(row["success_ratio"]) or 0.0
    throughput = _median(row["throughput_rps"]) or 0.0
    p99 = _median(row["p99_ms"])
    return (success < 0.95 or throughput < 0.95 * float(row["offered_rps"])
            or p99 is None or p99 > 10 * p99_limit_ms)


def should_stop(rows: Sequence[Mapping[str, Any]], saturated_points: int,
                p99_limit_ms: float) -> bool:
    """Stop a load ladder once its last ``saturated_points`` points were all saturated."""
    if saturated_points < 1 or len(rows) < saturated_points:
        return False
    return all(is_saturated(r, p99_limit_ms) for r in rows[-saturated_points:])


def _median(value: Any) -> float | None:
    if isinstance(value, Mapping):
        value = value.get("median")
    return None if value is None else float(value)
