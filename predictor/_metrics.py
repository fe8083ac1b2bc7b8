"""The predictor's Prometheus metrics, labelled model, version and role.

They live on prometheus_client's default registry, which KServe's own ``/metrics``
route serves, so there is one scrape endpoint for KServe's and ours.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, get_args

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from predictor._errors import OverloadReason

# 1 ms .. 30 s, roughly x2 per step: covers a 1 ms CPU forward pass and a 30 s deadline.
LATENCY_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5,
    0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0,
)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 512)
LABELS = ("model", "version", "role")


@dataclass(frozen=True)
class PredictorMetrics:
    """Handles on every series the predictor reports, already bound to its labels."""

    requests: Counter
    request_duration: Histogram
    queue_wait: Histogram
    batch_duration: Histogram
    batch_size: Histogram
    queue_depth: Gauge
    inflight: Gauge
    rejections: Counter
    items_expired: Counter
    padding_ratio: Gauge
    batch_cap: Gauge
    labels: dict[str, str]

    @classmethod
    def create(
        cls, model: str, version: str, role: str, registry: CollectorRegistry = REGISTRY
    ) -> PredictorMetrics:
        """The series of one model version; a second model on the same registry (a
        multi-model predictor) shares the families, with its own labels."""
        families = _FAMILIES.get(registry)
        if families is None:
            families = _FAMILIES[registry] = cls._families(registry)
        labels = {"model": model, "version": version, "role": role}
        # Counters a version may never increment are exported at 0 from the start, so a
        # rate over them reads 0, not "no data" (Prometheus' instrumentation practices,
        # "Avoid missing metrics").
        for reason in get_args(OverloadReason):
            families["rejections"].labels(**labels, reason=reason)
        families["items_expired"].labels(**labels)
        return cls(**families, labels=labels)

    @staticmethod
    def _families(registry: CollectorRegistry) -> dict[str, Any]:
        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=buckets, registry=registry)

        return dict(
            requests=Counter(
                "modelctl_requests", "Predict requests by HTTP status code.",
                (*LABELS, "code"), registry=registry,
            ),
            request_duration=hist(
                "modelctl_request_duration_seconds",
                "Predict request latency, arrival to response.", LATENCY_BUCKETS_S,
            ),
            queue_wait=hist(
                "modelctl_queue_wait_seconds", "Time an item waited before its batch ran.",
                LATENCY_BUCKETS_S,
            ),
            batch_duration=hist(
                "modelctl_batch_duration_seconds", "Time the device spent on one batch.",
                LATENCY_BUCKETS_S,
            ),
            batch_size=hist("modelctl_batch_size", "Items per executed batch.",
                            BATCH_SIZE_BUCKETS),
            queue_depth=Gauge("modelctl_queue_depth", "Items waiting in the queue.", LABELS,
                              registry=registry),
            inflight=Gauge("modelctl_inflight_requests", "Requests being served.", LABELS,
                           registry=registry),
            rejections=Counter(
                "modelctl_rejections", "Requests refused at once, by reason.",
                (*LABELS, "reason"), registry=registry,
            ),
            items_expired=Counter(
                "modelctl_items_expired", "Items dropped in the queue at their deadline.",
                LABELS, registry=registry,
            ),
            padding_ratio=Gauge(
                "modelctl_padding_ratio",
                "Padded tokens / real tokens of the last batch (1.0 = no waste).",
                LABELS, registry=registry,
            ),
            batch_cap=Gauge(
                "modelctl_batch_cap", "Current largest batch (lowered after an OOM).", LABELS,
                registry=registry,
            ),
        )


# Per registry (prometheus_client refuses a second family of one name on a registry).
_FAMILIES: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, Any]] = (
    weakref.WeakKeyDictionary())


@dataclass(frozen=True)
class TapMetrics:
    """Shadow mirroring and request capture (created only when either is configured)."""

    mirrors: Counter
    mirrors_dropped: Counter
    capture_records: Counter
    capture_dropped: Counter
    capture_files: Counter
    labels: dict[str, str]

    @classmethod
    def create(
        cls, labels: dict[str, str], registry: CollectorRegistry = REGISTRY
    ) -> TapMetrics:
        return cls(
            mirrors=Counter(
                "modelctl_shadow_mirrors", "Mirrored requests the shadow answered, by its status.",
                (*LABELS, "code"), registry=registry,
            ),
            mirrors_dropped=Counter(
                "modelctl_shadow_mirrors_dropped",
                "Sampled requests not mirrored, by reason (queue_full, timeout, unreachable, "
                "error, shutdown).", (*LABELS, "reason"), registry=registry,
            ),
            capture_records=Counter(
                "modelctl_capture_records", "Capture records written to the sink.", LABELS,
                registry=registry,
            ),
            capture_dropped=Counter(
                "modelctl_capture_dropped",
                "Capture records dropped, by reason (buffer_full, write_error, closed).",
                (*LABELS, "reason"), registry=registry,
            ),
            capture_files=Counter(
                "modelctl_capture_files", "Capture files written.", LABELS, registry=registry,
            ),
            labels=dict(labels),
        )
