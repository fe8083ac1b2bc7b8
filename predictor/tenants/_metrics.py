"""Per-tenant series with bounded cardinality: the busiest tenants by name, the rest as one.

``modelctl_tenant_requests_total{model,version,role,tenant,code}`` and
``modelctl_tenant_request_duration_seconds{model,version,role,tenant}`` (429s included:
``code="429"`` is a tenant's throttling). A tenant is named in the ``tenant`` label while
it is among the ``top`` busiest of the last minute; every other tenant is counted as
``tenant="other"``, a request without a valid key as ``tenant="none"``. When a named
tenant falls out of the top, its series are removed (Prometheus' ``rate()`` reads that
as a reset), so the series never exceed ``top + 2`` per model and code, however many
tenants the file holds.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections import Counter as Tally
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from predictor._metrics import LABELS, LATENCY_BUCKETS_S

OTHER = "other"
NONE = "none"
WINDOW_S = 60.0

_FAMILIES: weakref.WeakKeyDictionary[CollectorRegistry, tuple[Counter, Histogram]] = (
    weakref.WeakKeyDictionary())


def _families(registry: CollectorRegistry) -> tuple[Counter, Histogram]:
    found = _FAMILIES.get(registry)
    if found is None:
        found = _FAMILIES[registry] = (
            Counter("modelctl_tenant_requests", "Requests per tenant by HTTP status code "
                    "(the busiest tenants by name, the rest as 'other').",
                    (*LABELS, "tenant", "code"), registry=registry),
            Histogram("modelctl_tenant_request_duration_seconds",
                      "Request latency per tenant, arrival to response.",
                      (*LABELS, "tenant"), buckets=LATENCY_BUCKETS_S, registry=registry))
    return found


class TenantMetrics:
    """Counts and times each request under its tenant's label (or ``other``)."""

    def __init__(self, labels: dict[str, str], *, top: int,
                 registry: CollectorRegistry = REGISTRY) -> None:
        self.labels = labels
        self.top = top
        self.requests, self.duration = _families(registry)
        self._named: set[str] = set()
        self._window: Tally[str] = Tally()
        self._window_start = time.monotonic()
        self._series: dict[str, set[tuple[str, ...]]] = {}

    def label_for(self, tenant: str | None) -> str:
        if tenant is None:
            return NONE
        self._window[tenant] += 1
        now = time.monotonic()
        if now - self._window_start >= WINDOW_S:
            self._rotate(now)
        elif tenant not in self._named and len(self._named) < self.top:
            self._named.add(tenant)  # room left: named from its first request
        return tenant if tenant in self._named else OTHER

    def _rotate(self, now: float) -> None:
        busiest = {name for name, _ in sorted(self._window.items(),
                                              key=lambda kv: (-kv[1], kv[0]))[:self.top]}
        for gone in self._named - busiest:
            for values in self._series.pop(gone, set()):
                self._remove(values)
        self._named = busiest
        self._window = Tally()
        self._window_start = now

    def _remove(self, values: tuple[str, ...]) -> None:
        family: Any = self.requests if len(values) == len(LABELS) + 2 else self.duration
        with contextlib.suppress(KeyError):  # never observed under this label
            family.remove(*values)

    def observe(self, tenant: str | None, status: int, seconds: float) -> None:
        label = self.label_for(tenant)
        base = tuple(self.labels[k] for k in LABELS)
        counted = (*base, label, str(status))
        timed = (*base, label)
        self.requests.labels(*counted).inc()
        self.duration.labels(*timed).observe(seconds)
        if label not in (OTHER, NONE):
            self._series.setdefault(label, set()).update((counted, timed))
