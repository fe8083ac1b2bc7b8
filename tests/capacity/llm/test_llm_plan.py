"""The LLM planner on a profile with known curves: floors, the knee, the memory gate,
the fleet, and the profile's JSON round trip."""

from __future__ import annotations

import math

import pytest

from capacity import ProfileError
from capacity.llm import LLMPlanRequest, LLMProfile, Point, operating_at, plan_llm


def _profile(kv_tokens: int = 1_000_000) -> LLMProfile:
    # prefill: 2 ms a token plus 20 ms; decode: 40 ms at 1, +5 ms a sequence
    prefill = tuple(Point(x, 20 + 2 * x, 22 + 2 * x) for x in (16, 64, 256, 1024))
    decode = tuple(Point(n, 40 + 5 * (n - 1), 45 + 5 * (n - 1)) for n in (1, 2, 4, 8, 16, 32))
    return LLMProfile(model="m", version=3, device="cpu", prefill=prefill, decode=decode,
                      kv_bytes_per_token=46080, kv_capacity_tokens=kv_tokens,
                      context_tokens=8192, load_s=12.0)


def _request(**overrides: object) -> LLMPlanRequest:
    fields: dict[str, object] = {"slo_ttft_ms": 2000, "slo_tpot_ms": 250, "peak_rps": 10,
                                 "prompt_tokens": 40, "output_tokens": 64}
    fields.update(overrides)
    return LLMPlanRequest(**fields)  # type: ignore[arg-type]


def test_the_profile_round_trips_and_interpolates() -> None:
    p = _profile()
    assert LLMProfile.from_json(p.to_json()) == p
    assert p.prefill_ms(40) == pytest.approx(100.0)  # between 16 and 64
    assert p.prefill_ms(2048) == pytest.approx(20 + 2 * 2048)  # the last slope onwards
    assert p.step_ms(3) == pytest.approx(50.0) and p.step_ms(64) == p.step_ms(32)
    with pytest.raises(ProfileError, match="not an LLM profile"):
        LLMProfile.from_json({"schema": "modelctl.profile/v1"})


def test_the_operating_point_obeys_littles_law() -> None:
    p, req = _profile(), _request()
    op = operating_at(p, req, 8)
    assert op is not None
    ttft_mean = p.prefill_ms(48) / 1000 + p.step_ms(8) / 1000
    assert op.running == pytest.approx(op.rps * (ttft_mean + 64 * op.tpot_ms / 1000), rel=1e-6)
    assert op.tpot_ms > p.step_ms(8)  # the prefills take their share of the engine
    rates = [operating_at(p, req, n).rps for n in range(1, 33)]  # type: ignore[union-attr]
    assert rates == sorted(rates)  # more running, more throughput


def test_the_plan_sizes_the_fleet_from_the_knee() -> None:
    p, req = _profile(), _request()
    result = plan_llm(p, req)
    assert result.feasible and result.bound_by == "knee" and result.memory_gate is None
    assert result.knee is not None and result.knee.tpot_p99_ms <= 250
    bigger = operating_at(p, req, result.knee.running + 1)
    assert bigger is None or bigger.tpot_p99_ms > 250 or result.knee.running == 32
    assert result.replicas == math.ceil(10 / (0.8 * result.capacity_rps)) + 1
    assert result.to_json()["replicas"] == result.replicas


def test_a_small_cache_makes_memory_the_bound() -> None:
    result = plan_llm(_profile(kv_tokens=3 * 104), _request())
    assert result.feasible and result.bound_by == "memory"
    assert result.memory_gate is not None and result.memory_gate.running == 3
    assert result.capacity_rps == result.memory_gate.rps


@pytest.mark.parametrize(("overrides", "words"), [
    ({"slo_tpot_ms": 30}, "under one sequence's decode step"),
    ({"slo_ttft_ms": 50}, "under one prompt's prefill"),
    ({"prompt_tokens": 8000, "output_tokens": 500}, "exceed the context"),
])
def test_an_slo_under_a_floor_is_infeasible(overrides: dict[str, object], words: str) -> None:
    result = plan_llm(_profile(), _request(**overrides))
    assert not result.feasible and words in result.reason and result.replicas == 0


def test_bad_requests_are_refused() -> None:
    with pytest.raises(ProfileError):
        _request(peak_rps=0)
    with pytest.raises(ProfileError):
        _request(utilisation=1.5)
