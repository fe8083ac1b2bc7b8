"""Queue-mode series, labelled model, version and role like the predictor's own."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from predictor._metrics import LABELS, LATENCY_BUCKETS_S


@dataclass(frozen=True)
class QueueMetrics:
    """Handles on the queue series (one set per process)."""

    depth: Gauge
    lag: Gauge
    pending: Gauge
    claims: Counter
    redeliveries: Counter
    dead_letters: Counter
    time_in_queue: Histogram
    end_to_end: Histogram
    unavailable: Counter
    labels: dict[str, str]

    @classmethod
    def create(cls, model: str, version: str, role: str,
               registry: CollectorRegistry = REGISTRY) -> QueueMetrics:
        labels = {"model": model, "version": version, "role": role}

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=registry)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=registry)

        metrics = cls(
            depth=gauge("modelctl_stream_depth", "Requests in the stream not yet acknowledged "
                        "(lag + pending), as this process last read it."),
            lag=gauge("modelctl_stream_lag", "Requests in the stream not yet delivered."),
            pending=gauge("modelctl_stream_pending", "Requests delivered, not acknowledged."),
            claims=counter("modelctl_stream_claims", "Idle pending requests claimed (XAUTOCLAIM)."),
            redeliveries=counter("modelctl_stream_redeliveries",
                                 "Claimed requests run again (a worker died holding them)."),
            dead_letters=counter("modelctl_stream_dead_letters",
                                 "Requests moved to the dead-letter stream."),
            time_in_queue=Histogram("modelctl_stream_time_in_queue_seconds",
                                    "Enqueue to a worker reading the request.", LABELS,
                                    buckets=LATENCY_BUCKETS_S, registry=registry),
            end_to_end=Histogram("modelctl_stream_end_to_end_seconds",
                                 "Enqueue to the frontend holding the result.", LABELS,
                                 buckets=LATENCY_BUCKETS_S, registry=registry),
            unavailable=counter("modelctl_stream_unavailable",
                                "Requests answered 503 because Redis did not answer."),
            labels=labels,
        )
        # At 0 from the start, as the predictor's own counters (predictor/_metrics.py).
        for family in (metrics.claims, metrics.redeliveries, metrics.dead_letters,
                       metrics.unavailable):
            family.labels(**labels)
        return metrics
