"""An LLM version's measured costs (seed 2's method): prefill time against prompt length,
decode step time against running sequences, and KV cache memory per token.

Pure data, stored in the registry next to the version as the report ``llm-profile-cpu``
or ``llm-profile-cuda``; ``modelctl plan`` reads it. Between measured points both curves
are interpolated linearly; beyond the last point the prefill grows linearly with the
prompt (its last slope) and the decode step is not extrapolated (the plan stays within
the concurrency that was measured).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from capacity._profile import ProfileError

LLM_SCHEMA = "modelctl.llm-profile/v1"


def llm_report_name(device: str) -> str:
    if device not in ("cpu", "cuda"):
        raise ProfileError(f"device {device!r}: use cpu or cuda")
    return f"llm-profile-{device}"


@dataclass(frozen=True)
class Point:
    """One measured point: ``x`` (prompt tokens, or running sequences) and its p50, p99."""

    x: int
    p50_ms: float
    p99_ms: float

    def to_json(self) -> dict[str, Any]:
        return {"x": self.x, "p50_ms": round(self.p50_ms, 3), "p99_ms": round(self.p99_ms, 3)}


def _interpolate(points: Sequence[Point], x: float, q: str, *, extrapolate: bool) -> float:
    xs = [p.x for p in points]
    ys = [p.p99_ms if q == "p99" else p.p50_ms for p in points]
    if x <= xs[0]:
        return ys[0]
    i = bisect_left(xs, x)
    if i == len(xs):
        if not extrapolate or len(xs) == 1:
            return ys[-1]
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return ys[-1] + slope * (x - xs[-1])
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@dataclass(frozen=True)
class LLMProfile:
    model: str
    version: int
    device: str
    prefill: tuple[Point, ...]  # x: prompt tokens; the time to the first token, alone
    decode: tuple[Point, ...]  # x: running sequences; the gap between two tokens
    kv_bytes_per_token: int  # K and V, every layer, at the served dtype
    kv_capacity_tokens: int  # what the engine's paged cache holds
    context_tokens: int
    load_s: float
    host: dict[str, Any] = field(default_factory=dict)
    measured_at: str = ""

    def __post_init__(self) -> None:
        for name, points in (("prefill", self.prefill), ("decode", self.decode)):
            if not points:
                raise ProfileError(f"an LLM profile needs at least one {name} point")
            if [p.x for p in points] != sorted({p.x for p in points}):
                raise ProfileError(f"the {name} points must be strictly increasing in x")

    def prefill_ms(self, prompt_tokens: float, q: str = "p50") -> float:
        return _interpolate(self.prefill, prompt_tokens, q, extrapolate=True)

    def step_ms(self, running: float, q: str = "p50") -> float:
        return _interpolate(self.decode, running, q, extrapolate=False)

    @property
    def max_running(self) -> int:
        return self.decode[-1].x

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": LLM_SCHEMA, "model": self.model, "version": self.version,
            "device": self.device, "prefill": [p.to_json() for p in self.prefill],
            "decode": [p.to_json() for p in self.decode],
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "context_tokens": self.context_tokens, "load_s": round(self.load_s, 2),
            "host": self.host, "measured_at": self.measured_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LLMProfile:
        if data.get("schema") != LLM_SCHEMA:
            raise ProfileError(f"not an LLM profile (schema {data.get('schema')!r}, expected "
                               f"{LLM_SCHEMA})")
        try:
            return cls(
                model=str(data["model"]), version=int(data["version"]),
                device=str(data["device"]),
                prefill=tuple(Point(int(p["x"]), float(p["p50_ms"]), float(p["p99_ms"]))
                              for p in data["prefill"]),
                decode=tuple(Point(int(p["x"]), float(p["p50_ms"]), float(p["p99_ms"]))
                             for p in data["decode"]),
                kv_bytes_per_token=int(data["kv_bytes_per_token"]),
                kv_capacity_tokens=int(data["kv_capacity_tokens"]),
                context_tokens=int(data["context_tokens"]), load_s=float(data["load_s"]),
                host=dict(data.get("host") or {}), measured_at=str(data.get("measured_at", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProfileError(f"the LLM profile is malformed: {exc}") from None

    def check_version(self, model: str, version: int) -> None:
        if (self.model, self.version) != (model, version):
            raise ProfileError(f"the stored profile is of {self.model}@{self.version}, not "
                               f"{model}@{version}")
