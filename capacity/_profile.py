"""A version's measured batch latency on one device kind: what ``modelctl profile`` stores
next to the version in the registry and ``modelctl plan`` reads.

The profile keeps every timed run of each batch size (sorted), so the simulation draws
service times from the measured distribution itself, not from a fitted curve: the
inverse CDF at a uniform ``u``, linear between samples and, for a batch size that was
not measured, linear in the batch size between the two measured sizes around it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common import PlatformError

SCHEMA = "modelctl.profile/v1"
DEVICE_KINDS = ("cpu", "cuda")


class ProfileError(PlatformError, ValueError):
    """A profile that is malformed, from another version, or missing for a device; a
    planning input that does not parse (the CLI exits 2)."""


def report_name(device: str) -> str:
    """The registry report a profile is stored as (``Registry.put_report``)."""
    if device not in DEVICE_KINDS:
        raise ProfileError(f"unknown device kind {device!r}: use one of {', '.join(DEVICE_KINDS)}")
    return f"profile-{device}"


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values, linear between order statistics (numpy's
    default method)."""
    if not ordered:
        raise ProfileError("no samples")
    position = min(max(q, 0.0), 1.0) * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class BatchTiming:
    """Every timed run of one batch size, and the memory it took."""

    size: int
    samples_ms: tuple[float, ...]  # sorted, each > 0
    host_rss_mb: float  # the measuring process's resident set after the runs
    device_mb: float | None = None  # peak device memory allocated (a GPU), else None

    @property
    def p50_ms(self) -> float:
        return quantile(self.samples_ms, 0.50)

    @property
    def p99_ms(self) -> float:
        return quantile(self.samples_ms, 0.99)

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "runs": len(self.samples_ms),
                "p50_ms": round(self.p50_ms, 4), "p99_ms": round(self.p99_ms, 4),
                "samples_ms": [round(s, 4) for s in self.samples_ms],
                "host_rss_mb": round(self.host_rss_mb, 1),
                "device_mb": None if self.device_mb is None else round(self.device_mb, 1)}


@dataclass(frozen=True)
class Profile:
    """Batch latency t(b) of one registry version on one device kind, with the per-request
    cost of the HTTP edge in front of it and the time the version takes to load."""

    model: str
    version: int
    device: str
    batches: tuple[BatchTiming, ...]  # ascending, distinct sizes, the first may be > 1
    edge_ms: float  # latency the HTTP edge adds to a request (decode, route, encode), p50
    edge_cpu_ms: float  # server CPU per request of the HTTP edge, the model's batch aside
    load_s: float  # cold start: from process start to ready, this version
    device_name: str = ""
    measured_at: str = ""
    host: Mapping[str, Any] = field(default_factory=dict)
    # The edge's CPU per request under load (None: not measured), with batches of
    # ``edge_loaded_batch`` items on average; ``edge_cpu_ms`` is the idle edge's.
    edge_cpu_loaded_ms: float | None = None
    edge_loaded_batch: float | None = None

    def __post_init__(self) -> None:
        if self.device not in DEVICE_KINDS:
            raise ProfileError(f"unknown device kind {self.device!r}")
        if not self.batches:
            raise ProfileError("a profile needs at least one batch size")
        sizes = [b.size for b in self.batches]
        if sizes != sorted(set(sizes)) or sizes[0] < 1:
            raise ProfileError(f"batch sizes must be distinct, ascending and >= 1: {sizes}")
        for batch in self.batches:
            if not batch.samples_ms or any(not (math.isfinite(s) and s > 0)
                                           for s in batch.samples_ms):
                raise ProfileError(f"batch size {batch.size}: samples must be finite and > 0")
            if list(batch.samples_ms) != sorted(batch.samples_ms):
                raise ProfileError(f"batch size {batch.size}: samples must be sorted")
        optional = ("edge_cpu_loaded_ms", "edge_loaded_batch")  # None: not measured
        for name in ("edge_ms", "edge_cpu_ms", "load_s", *optional):
            value = getattr(self, name)
            if value is None and name in optional:
                continue
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ProfileError(f"{name} must be a finite number >= 0, got {value!r}")

    # -- reading -------------------------------------------------------------------------
    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(b.size for b in self.batches)

    @property
    def max_batch_size(self) -> int:
        return self.batches[-1].size

    @property
    def floor_ms(self) -> float:
        """The lowest p99 any configuration can reach: one item alone, t99(1), plus the
        edge (t(1) from the smallest measured size when 1 was not measured)."""
        return self.batch_ms(1, 0.99) + self.edge_ms

    def batch_ms(self, size: int, q: float) -> float:
        """The ``q`` quantile of t(size) in ms: measured, or linear in the batch size
        between the measured sizes around it (the smallest measured below it)."""
        if size < 1 or size > self.max_batch_size:
            raise ProfileError(f"batch size {size} is outside the profile "
                               f"(1..{self.max_batch_size}): profile larger batches")
        sizes = self.sizes
        at = bisect.bisect_left(sizes, size)
        if at < len(sizes) and sizes[at] == size:
            return quantile(self.batches[at].samples_ms, q)
        if at == 0:
            return quantile(self.batches[0].samples_ms, q)
        lo, hi = self.batches[at - 1], self.batches[at]
        t_lo, t_hi = quantile(lo.samples_ms, q), quantile(hi.samples_ms, q)
        return t_lo + (t_hi - t_lo) * (size - lo.size) / (hi.size - lo.size)

    def edge_cpu_at(self, batch: float) -> float:
        """The edge's CPU per request when batches hold ``batch`` items. Measured idle
        (each request its own batch) and under load: between them as ``a + k / b``, a
        part every request pays and a part each batch pays once and shares among its
        items (its hand-offs, the event loop's wake-ups). Without a loaded measurement,
        the idle one; a loaded edge that costs more than the idle one is taken as it is."""
        idle, loaded, at = self.edge_cpu_ms, self.edge_cpu_loaded_ms, self.edge_loaded_batch
        if loaded is None or at is None or at <= 1.0 or batch <= 1.0:
            return idle
        if loaded >= idle:
            return loaded
        shared = (idle - loaded) / (1.0 - 1.0 / at)
        return (idle - shared) + shared / batch

    def cpu_limit_rps(self, cpus: float, batch: float = 1.0) -> float:
        """The most requests a second ``cpus`` cores can carry through the HTTP edge with
        batches of ``batch`` (``inf`` when the edge's CPU was not measured)."""
        cpu_ms = self.edge_cpu_at(batch)
        return cpus * 1000.0 / cpu_ms if cpu_ms > 0 else math.inf

    def cpu_slowdown(self, rate_rps: float, batch: float = 1.0) -> float:
        """How much longer a batch takes on a CPU device when one replica serves ``rate_rps``
        with batches of ``batch``. The HTTP edge needs ``rate x edge_cpu_at(batch)`` of CPU
        a second; what of it does not fit on the cores torch's threads leave idle
        (``cpus_usable`` less ``torch_threads``) runs on theirs, and an OpenMP team waits at
        each barrier for its slowest thread, so while the edge holds any one of those cores
        the whole batch stands: a batch of ``t`` stretches to ``t / (1 - s)``, ``s`` the
        cores' worth the edge takes. That counts in proportion to how busy the model keeps
        its cores (its CPU per batch of one in the server over t(1)): a model that sleeps,
        or waits on a GPU, is not slowed. ``inf`` from ``s >= 0.95``: the replica is
        CPU-bound. 1 on a GPU."""
        edge_cpu_ms = self.edge_cpu_at(batch)
        if self.device != "cpu" or edge_cpu_ms <= 0 or rate_rps <= 0:
            return 1.0
        threads = float(self.host.get("torch_threads") or 1)
        cores = float(self.host.get("cpus_usable") or self.host.get("cpu_count") or threads)
        stolen = max(0.0, rate_rps * edge_cpu_ms / 1000.0 - max(0.0, cores - threads))
        if stolen >= 0.95:
            return math.inf
        model_ms, t1_ms = self.host.get("server_model_cpu_ms"), self.host.get("t1_median_ms")
        busy = (min(1.0, max(0.0, float(model_ms) / float(t1_ms) / threads))
                if model_ms is not None and t1_ms else 1.0)
        return 1.0 + busy * stolen / (1.0 - stolen)

    def service_s(self, size: int, u: float) -> float:
        """One draw of t(size) in seconds for a uniform ``u`` in [0, 1)."""
        return self.batch_ms(size, u) / 1000.0

    # -- JSON ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "model": self.model, "version": self.version,
                "device": self.device, "device_name": self.device_name,
                "measured_at": self.measured_at, "host": dict(self.host),
                "edge_ms": round(self.edge_ms, 4), "edge_cpu_ms": round(self.edge_cpu_ms, 4),
                "edge_cpu_loaded_ms": _rounded(self.edge_cpu_loaded_ms, 4),
                "edge_loaded_batch": _rounded(self.edge_loaded_batch, 2),
                "load_s": round(self.load_s, 3), "floor_ms": round(self.floor_ms, 3),
                "batches": [b.to_json() for b in self.batches]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Profile:
        """Read a profile back; a malformed one raises ``ProfileError`` naming the field."""
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            raise ProfileError(f"not a {SCHEMA} profile")
        try:
            batches = tuple(
                BatchTiming(int(b["size"]), tuple(float(s) for s in b["samples_ms"]),
                            float(b.get("host_rss_mb") or 0.0),
                            None if b.get("device_mb") is None else float(b["device_mb"]))
                for b in data["batches"])
            return cls(model=str(data["model"]), version=int(data["version"]),
                       device=str(data["device"]), batches=batches,
                       edge_ms=float(data["edge_ms"]), edge_cpu_ms=float(data["edge_cpu_ms"]),
                       load_s=float(data["load_s"]), device_name=str(data.get("device_name", "")),
                       measured_at=str(data.get("measured_at", "")),
                       host=dict(data.get("host") or {}),
                       edge_cpu_loaded_ms=_optional(data.get("edge_cpu_loaded_ms")),
                       edge_loaded_batch=_optional(data.get("edge_loaded_batch")))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ProfileError):
                raise
            raise ProfileError(f"malformed profile: {type(exc).__name__}: {exc}") from None

    def check_version(self, model: str, version: int) -> None:
        """Refuse a profile measured on another version (plans travel with their version)."""
        if (self.model, self.version) != (model, version):
            raise ProfileError(f"this profile is of {self.model} version {self.version}, not "
                               f"{model} version {version}: run `modelctl profile "
                               f"{model}@{version}`")


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _optional(value: Any) -> float | None:
    """An optional number of a stored profile (absent in profiles from before it)."""
    return None if value is None else float(value)
