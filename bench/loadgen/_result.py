"""What a load run measured: statistics over the window after warm-up, plus raw samples."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.loadgen._core import CONN_ERROR, TIMEOUT
from bench.loadgen._spec import LoadSpec

ON_SCHEDULE_P99_LAG_S = 0.005  # later than this and the offered load was not what was asked


@dataclass(frozen=True)
class LatencyStats:
    """Latency quantiles in seconds (nearest rank); ``None`` when there were no samples."""

    count: int
    mean_s: float | None
    p50_s: float | None
    p90_s: float | None
    p99_s: float | None
    max_s: float | None

    @classmethod
    def of(cls, values: np.ndarray) -> LatencyStats:
        if values.size == 0:
            return cls(0, None, None, None, None, None)
        p50, p90, p99 = np.quantile(values, [0.5, 0.9, 0.99], method="inverted_cdf")
        return cls(
            int(values.size),
            float(values.mean()),
            float(p50),
            float(p90),
            float(p99),
            float(values.max()),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mean_s": self.mean_s,
            "p50_s": self.p50_s,
            "p90_s": self.p90_s,
            "p99_s": self.p99_s,
            "max_s": self.max_s,
        }


@dataclass(frozen=True, eq=False)
class Samples:
    """One entry per request sent, in schedule order (warm-up included).

    ``status`` holds the HTTP code, -1 for a timeout, -2 for a connection error.
    """

    scheduled_s: np.ndarray  # offset from t0 at which the request was due
    send_lag_s: np.ndarray  # how late it actually went out (NaN: never got a connection)
    latency_s: np.ndarray  # from due time to the end of its answer, timeout or error
    status: np.ndarray  # int16

    def save(self, path: str) -> None:
        """Write the four arrays to an ``.npz`` file for later analysis."""
        np.savez_compressed(
            path,
            scheduled_s=self.scheduled_s,
            send_lag_s=self.send_lag_s,
            latency_s=self.latency_s,
            status=self.status,
        )


@dataclass(frozen=True, eq=False)
class LoadResult:
    """The outcome of one open-loop run; statistics cover the window after warm-up.

    ``throughput_rps`` counts 2xx answers that *finished* inside the window, per
    second of window; ``success_ratio`` is 2xx over requests *due* in the window.
    ``max_in_flight`` adds up each worker's peak of requests sent and not yet ended.
    """

    url: str
    method: str
    arrival: str
    offered_rate_rps: float
    duration_s: float
    warmup_s: float
    workers: int
    sent: int
    ok: int
    throughput_rps: float
    success_ratio: float
    status_counts: dict[str, int]
    latency_ok: LatencyStats
    latency_all: LatencyStats
    send_lag: LatencyStats
    max_in_flight: int
    connections_opened: int
    samples: Samples

    def is_on_schedule(self, p99_lag_s: float = ON_SCHEDULE_P99_LAG_S) -> bool:
        """Whether the generator kept up: 99% of requests went out within ``p99_lag_s``."""
        lag = self.send_lag
        return lag.count == self.sent and (lag.p99_s is None or lag.p99_s <= p99_lag_s)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no per-request samples; use ``samples`` for those)."""
        return {
            "url": self.url,
            "method": self.method,
            "arrival": self.arrival,
            "offered_rate_rps": self.offered_rate_rps,
            "duration_s": self.duration_s,
            "warmup_s": self.warmup_s,
            "workers": self.workers,
            "sent": self.sent,
            "ok": self.ok,
            "throughput_rps": self.throughput_rps,
            "success_ratio": self.success_ratio,
            "status_counts": dict(self.status_counts),
            "latency_ok": self.latency_ok.to_dict(),
            "latency_all": self.latency_all.to_dict(),
            "send_lag": self.send_lag.to_dict(),
            "on_schedule": self.is_on_schedule(),
            "max_in_flight": self.max_in_flight,
            "connections_opened": self.connections_opened,
        }


def status_name(code: int) -> str:
    if code == TIMEOUT:
        return "timeout"
    if code == CONN_ERROR:
        return "conn_error"
    return str(code)


def build_result(
    spec: LoadSpec, samples: Samples, *, max_in_flight: int, connections_opened: int
) -> LoadResult:
    """Reduce per-request samples to the statistics of the measured window."""
    window = samples.scheduled_s >= spec.warmup_s
    status = samples.status[window]
    latency = samples.latency_s[window]
    is_ok = (status >= 200) & (status < 300)
    codes, counts = np.unique(status, return_counts=True)
    finished_at = samples.scheduled_s + samples.latency_s
    ok_all = (samples.status >= 200) & (samples.status < 300)
    in_window = (finished_at >= spec.warmup_s) & (finished_at <= spec.total_s)
    lag = samples.send_lag_s[window]
    sent = int(window.sum())
    return LoadResult(
        url=spec.url,
        method=spec.method,
        arrival=spec.arrival,
        offered_rate_rps=spec.rate,
        duration_s=spec.duration_s,
        warmup_s=spec.warmup_s,
        workers=spec.workers,
        sent=sent,
        ok=int(is_ok.sum()),
        throughput_rps=float((ok_all & in_window).sum()) / spec.duration_s,
        success_ratio=float(is_ok.sum()) / sent if sent else 0.0,
        status_counts={
            status_name(int(c)): int(k) for c, k in sorted(zip(codes, counts, strict=True))
        },
        latency_ok=LatencyStats.of(latency[is_ok]),
        latency_all=LatencyStats.of(latency),
        send_lag=LatencyStats.of(lag[~np.isnan(lag)]),
        max_in_flight=max_in_flight,
        connections_opened=connections_opened,
        samples=samples,
    )
