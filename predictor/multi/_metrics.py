"""A multi-model predictor's own series, per model (the requests, latency and batch
series are the in-process ones, labelled with each model's name and version)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from predictor.multi._residency import Size

# Loads take seconds to minutes: 10 ms .. 10 min.
LOAD_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                  600.0)


@dataclass(frozen=True)
class MultiMetrics:
    """Loads, load time, evictions, resident bytes and cold starts, by model."""

    loads: Counter
    load_seconds: Histogram
    evictions: Counter
    resident_bytes: Gauge
    cold_starts: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry = REGISTRY) -> MultiMetrics:
        return cls(
            loads=Counter("modelctl_model_loads", "Model loads, by outcome (ok, failed, "
                          "no_room).", ("model", "outcome"), registry=registry),
            load_seconds=Histogram("modelctl_model_load_seconds", "Time one successful "
                                   "load took (verify, read, warm up).", ("model",),
                                   buckets=LOAD_BUCKETS_S, registry=registry),
            evictions=Counter("modelctl_model_evictions", "Models taken out of memory, by "
                              "reason (lru, unload).", ("model", "reason"), registry=registry),
            resident_bytes=Gauge("modelctl_model_resident_bytes", "Bytes a resident model "
                                 "holds (0 when not resident), by memory (host, device).",
                                 ("model", "memory"), registry=registry),
            cold_starts=Counter("modelctl_model_cold_starts", "Requests that found their "
                                "model not resident and waited for its load (started it or "
                                "joined it).", ("model",), registry=registry),
        )

    def loaded(self, model: str, outcome: str, seconds: float | None, size: Size | None) -> None:
        self.loads.labels(model=model, outcome=outcome).inc()
        if seconds is not None:
            self.load_seconds.labels(model=model).observe(seconds)
        if size is not None:
            self.resident_bytes.labels(model=model, memory="host").set(size.host)
            self.resident_bytes.labels(model=model, memory="device").set(size.device)

    def evicted(self, model: str, reason: str) -> None:
        self.evictions.labels(model=model, reason=reason).inc()
        for memory in ("host", "device"):
            self.resident_bytes.labels(model=model, memory=memory).set(0)


