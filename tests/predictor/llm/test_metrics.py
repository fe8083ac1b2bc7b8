"""``LLMMetrics`` registers its families once per registry, and on that registry."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry

from predictor.llm._engine import EngineStats
from predictor.llm._metrics import FINISH_REASONS, LLMMetrics

IDLE = EngineStats(running=0, waiting=0, preempted=0, kv_blocks_total=8, kv_blocks_free=8)


def _reasons(registry: CollectorRegistry) -> set[str]:
    return {s.labels["finish_reason"] for family in registry.collect() for s in family.samples
            if "finish_reason" in s.labels}


def test_each_new_registry_gets_families_of_its_own() -> None:
    # A registry collected and a new one made in its place often share an id(): families
    # cached by id() then landed on the dead registry and the new one exported none.
    for _ in range(50):
        registry = CollectorRegistry()
        LLMMetrics.create("chat", "1", "stable", lambda: IDLE, registry=registry)
        assert _reasons(registry) == set(FINISH_REASONS)
        del registry
        gc.collect()


def test_two_versions_share_one_registrys_families() -> None:
    registry = CollectorRegistry()
    stable = LLMMetrics.create("chat", "1", "stable", lambda: IDLE, registry=registry)
    canary = LLMMetrics.create("chat", "2", "canary", lambda: IDLE, registry=registry)
    stable.finished["stop"].inc()
    canary.finished["stop"].inc(2)
    value = {s.labels["version"]: s.value for family in registry.collect()
             for s in family.samples
             if s.name == "modelctl_llm_requests_finished_total"
             and s.labels["finish_reason"] == "stop"}
    assert value == {"1": 1.0, "2": 2.0}
