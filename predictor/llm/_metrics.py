"""LLM serving's own Prometheus series, labelled model, version and role like the rest.

Named and measured as vLLM names and measures its own (``vllm:time_to_first_token_seconds``,
``vllm:inter_token_latency_seconds``, ``vllm:e2e_request_latency_seconds``,
``vllm:num_requests_running``/``waiting``), under our ``modelctl_llm_`` prefix, so that a
dashboard or an alert written for one reads the other with the prefix changed:

- ``modelctl_llm_time_to_first_token_seconds``: from a request's arrival to its first token.
- ``modelctl_llm_time_per_output_token_seconds``: each gap between two tokens of a
  sequence (TPOT, the inter-token latency), as the server sends them.
- ``modelctl_llm_e2e_request_latency_seconds``: arrival to the last token.
- ``modelctl_llm_prompt_tokens_total``, ``modelctl_llm_generation_tokens_total``.
- ``modelctl_llm_requests_finished_total{finish_reason}``: stop, length, cancelled, error,
  deadline, rejected (pushed out of a full queue for a tenant with an earlier turn).
- ``modelctl_llm_sequences_running``, ``modelctl_llm_sequences_waiting`` (in the engine's
  queue and at the admission gate, ``_gate``),
  ``modelctl_llm_kv_cache_blocks{state}`` (used, free),
  ``modelctl_llm_kv_cache_capacity_tokens``: read from the engine at each scrape.
- ``modelctl_llm_sequences_preempted``: of the waiting, those that had started and were
  taken off the device to make room (transformers counts no preemptions; this is how
  many are preempted now).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from predictor.llm._engine import EngineStats

LABELS = ("model", "version", "role")
FINISH_REASONS = ("stop", "length", "cancelled", "error", "deadline", "rejected")

# Time to first token: a warm GPU prefill (10 ms) to a CPU one behind a queue (60 s).
TTFT_BUCKETS_S = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    60.0,
)
# Per output token: a GPU decode step (5 ms) to a CPU one under a full batch (2.5 s).
TPOT_BUCKETS_S = (
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.15,
    0.2,
    0.25,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
)
E2E_BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True)
class LLMMetrics:
    """The series of one served LLM, bound to its labels."""

    ttft: Any
    tpot: Any
    e2e: Any
    prompt_tokens: Any
    generation_tokens: Any
    finished: dict[str, Any]

    @classmethod
    def create(
        cls,
        model: str,
        version: str,
        role: str,
        stats: Callable[[], EngineStats],
        registry: CollectorRegistry = REGISTRY,
    ) -> LLMMetrics:
        labels = {"model": model, "version": version, "role": role}
        families = _families(registry)
        registry.register(_EngineCollector(labels, stats))
        finished = families["finished"]
        return cls(
            ttft=families["ttft"].labels(**labels),
            tpot=families["tpot"].labels(**labels),
            e2e=families["e2e"].labels(**labels),
            prompt_tokens=families["prompt_tokens"].labels(**labels),
            generation_tokens=families["generation_tokens"].labels(**labels),
            # Every reason exported at 0 from the start: a rate reads 0, not "no data".
            finished={r: finished.labels(**labels, finish_reason=r) for r in FINISH_REASONS},
        )


# Keyed by the registry itself, held weakly: an ``id()`` is reused once its registry is
# collected, and a new registry then got the families of a dead one (and none of its own).
_FAMILIES: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, Any]] = (
    weakref.WeakKeyDictionary()
)


def _families(registry: CollectorRegistry) -> dict[str, Any]:
    found = _FAMILIES.get(registry)
    if found is None:
        found = _FAMILIES[registry] = {
            "ttft": Histogram(
                "modelctl_llm_time_to_first_token_seconds",
                "Time from a request's arrival to its first output token.",
                LABELS,
                buckets=TTFT_BUCKETS_S,
                registry=registry,
            ),
            "tpot": Histogram(
                "modelctl_llm_time_per_output_token_seconds",
                "Time between two output tokens of a sequence (TPOT).",
                LABELS,
                buckets=TPOT_BUCKETS_S,
                registry=registry,
            ),
            "e2e": Histogram(
                "modelctl_llm_e2e_request_latency_seconds",
                "Time from a request's arrival to its last output token.",
                LABELS,
                buckets=E2E_BUCKETS_S,
                registry=registry,
            ),
            "prompt_tokens": Counter(
                "modelctl_llm_prompt_tokens", "Prompt tokens prefilled.", LABELS, registry=registry
            ),
            "generation_tokens": Counter(
                "modelctl_llm_generation_tokens",
                "Output tokens generated.",
                LABELS,
                registry=registry,
            ),
            "finished": Counter(
                "modelctl_llm_requests_finished",
                "Sequences ended, by why they ended.",
                (*LABELS, "finish_reason"),
                registry=registry,
            ),
        }
    return found


class _EngineCollector(Collector):
    """Gauges read from the engine when Prometheus scrapes, never stale."""

    def __init__(self, labels: dict[str, str], stats: Callable[[], EngineStats]) -> None:
        self._labels = labels
        self._stats = stats

    def collect(self) -> Any:
        stats = self._stats()
        values = list(self._labels.values())
        running = GaugeMetricFamily(
            "modelctl_llm_sequences_running", "Sequences in the running batch.", labels=list(LABELS)
        )
        running.add_metric(values, stats.running)
        waiting = GaugeMetricFamily(
            "modelctl_llm_sequences_waiting",
            "Sequences queued in the engine, not yet running.",
            labels=list(LABELS),
        )
        waiting.add_metric(values, stats.waiting)
        preempted = GaugeMetricFamily(
            "modelctl_llm_sequences_preempted",
            "Waiting sequences that had started and were preempted.",
            labels=list(LABELS),
        )
        preempted.add_metric(values, stats.preempted)
        blocks = GaugeMetricFamily(
            "modelctl_llm_kv_cache_blocks",
            "Paged KV cache blocks, used and free.",
            labels=[*LABELS, "state"],
        )
        blocks.add_metric([*values, "used"], stats.kv_blocks_total - stats.kv_blocks_free)
        blocks.add_metric([*values, "free"], stats.kv_blocks_free)
        tokens = GaugeMetricFamily("modelctl_llm_kv_cache_capacity_tokens",
                                   "Tokens the paged KV cache holds.", labels=list(LABELS))
        tokens.add_metric(values, stats.kv_tokens_total)
        return [running, waiting, preempted, blocks, tokens]

    def describe(self) -> Any:
        return []


class AdapterMetrics:
    """Per-tenant LoRA adapters (``_adapters``), labelled ``adapter`` too: the adapter
    names come from the catalog, so the series are bounded.

    - ``modelctl_llm_adapter_loads_total{adapter}``: engines started for the adapter;
    - ``modelctl_llm_adapter_load_failures_total{adapter}``;
    - ``modelctl_llm_adapter_evictions_total{adapter}``: engines stopped for another's room;
    - ``modelctl_llm_adapter_resident{adapter}``: 1 while its engine runs, else 0;
    - ``modelctl_llm_adapters_resident``: adapter engines running;
    - ``modelctl_llm_adapter_load_seconds``: a merge and an engine start."""

    def __init__(self, model: str, version: str, role: str, adapters: list[str],
                 registry: CollectorRegistry = REGISTRY) -> None:
        from prometheus_client import Gauge

        labels = {"model": model, "version": version, "role": role}
        per = (*LABELS, "adapter")
        loads = Counter("modelctl_llm_adapter_loads", "Adapter engines started.", per,
                        registry=registry)
        failures = Counter("modelctl_llm_adapter_load_failures", "Adapter loads that failed.",
                           per, registry=registry)
        evictions = Counter("modelctl_llm_adapter_evictions",
                            "Adapter engines stopped to make room for another.", per,
                            registry=registry)
        flag = Gauge("modelctl_llm_adapter_resident", "1 while the adapter's engine runs.",
                     per, registry=registry)
        self._count = Gauge("modelctl_llm_adapters_resident", "Adapter engines running.",
                            LABELS, registry=registry).labels(**labels)
        self._seconds = Histogram("modelctl_llm_adapter_load_seconds",
                                  "Time to merge an adapter and start its engine.", LABELS,
                                  buckets=(0.5, 1, 2, 5, 10, 20, 40, 80, 160),
                                  registry=registry).labels(**labels)
        # Every adapter exported at 0 from the start: a rate reads 0, not "no data".
        self._loads = {a: loads.labels(**labels, adapter=a) for a in adapters}
        self._failures = {a: failures.labels(**labels, adapter=a) for a in adapters}
        self._evictions = {a: evictions.labels(**labels, adapter=a) for a in adapters}
        self._flags = {a: flag.labels(**labels, adapter=a) for a in adapters}
        self._count.set(0)

    def loaded(self, adapter: str, resident: list[str]) -> None:
        self._loads[adapter].inc()
        self.resident(resident)

    def failed(self, adapter: str) -> None:
        self._failures[adapter].inc()

    def evicted(self, adapter: str) -> None:
        self._evictions[adapter].inc()

    def load_seconds(self, seconds: float) -> None:
        self._seconds.observe(seconds)

    def resident(self, resident: list[str]) -> None:
        for name, gauge in self._flags.items():
            gauge.set(1 if name in resident else 0)
        self._count.set(len(resident))
