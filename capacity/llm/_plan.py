"""The LLM planner (pure): is a TTFT and TPOT SLO feasible, what one instance sustains,
and how many instances a peak needs. Seed 2's method, on the measured profile.

One instance under an arrival rate ``λ`` of sequences with ``P`` prompt and ``O``
output tokens, where continuous batching runs every admitted sequence at once and a
newcomer's prefill goes into the same forward pass as the running batch's decode step
(transformers' scheduler, and vLLM's chunked prefill, mix them):

- A plain step with ``n`` running costs ``step(n)``; a step carrying a newcomer is one
  forward over ``P + n`` new tokens, ``prefill(P + n)`` from the prefill curve. So each
  arrival costs the engine ``prefill(P + n) - step(n)`` more, and the mean time between
  two tokens is ``tpot = step(n) / (1 - λ·(prefill(P + n) - step(n)))``.
- Little's law ties ``n`` to ``λ``: ``n = λ·(ttft + O·tpot)``, with
  ``ttft = prefill(P + n) + step(n)`` (a newcomer waits for the step under way).
- The p99 of the gaps: newcomers per step are Poisson with mean ``λ·tpot``; when more
  than 1% of steps carry two, the p99 gap is ``prefill(2P + n)``, when more than 1%
  carry one, ``prefill(P + n)``, else ``step_p99(n)``. The p99 TTFT is
  ``prefill(P + n)`` after a p99 gap.
- **Feasibility**: the TPOT floor is one sequence's step, the TTFT floor one prompt's
  prefill plus a step; an SLO under either floor is infeasible at any fleet size.
- **Capacity** is the smaller of the **measured knee** (the largest ``λ`` whose
  predicted p99 TTFT and TPOT meet the SLO, within the concurrency the profile
  measured) and the **memory gate** (the ``λ`` at which the running sequences fill the
  KV cache: ``n·(P + O)`` tokens).
- **Fleet**: ``ceil(peak / (rho·capacity))`` plus the spare, ``rho`` the utilisation
  planned for (0.8 by default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from capacity._profile import ProfileError
from capacity.llm._profile import LLMProfile

TAIL_SHARE = 0.01  # when more steps than this carry prefills, the p99 gap is one of them


@dataclass(frozen=True)
class LLMPlanRequest:
    slo_ttft_ms: float
    slo_tpot_ms: float
    peak_rps: float
    prompt_tokens: int
    output_tokens: int
    utilisation: float = 0.8
    spare: int = 1

    def __post_init__(self) -> None:
        if self.slo_ttft_ms <= 0 or self.slo_tpot_ms <= 0:
            raise ProfileError("the TTFT and TPOT objectives must be > 0")
        if self.peak_rps <= 0:
            raise ProfileError("--peak-rps must be > 0")
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ProfileError("--prompt-tokens and --output-tokens must be >= 1")
        if not 0 < self.utilisation <= 1:
            raise ProfileError("--utilisation must be in (0, 1]")
        if self.spare < 0:
            raise ProfileError("--spare must be >= 0")


@dataclass(frozen=True)
class Operating:
    """What one instance does at an arrival rate: its running sequences and latencies."""

    rps: float
    running: float
    ttft_p99_ms: float
    tpot_ms: float
    tpot_p99_ms: float
    output_tokens_per_s: float

    def to_json(self) -> dict[str, Any]:
        return {k: round(v, 3) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class LLMPlan:
    model: str
    version: int
    device: str
    request: LLMPlanRequest
    feasible: bool
    reason: str
    tpot_floor_ms: float
    ttft_floor_ms: float
    knee: Operating | None
    memory_gate: Operating | None
    capacity_rps: float
    bound_by: str  # "knee", "memory" or "" (infeasible)
    replicas: int
    at_peak: Operating | None

    def to_json(self) -> dict[str, Any]:
        r = self.request
        return {
            "schema": "modelctl.llm-plan/v1", "model": self.model, "version": self.version,
            "device": self.device, "feasible": self.feasible, "reason": self.reason,
            "slo": {"ttft_p99_ms": r.slo_ttft_ms, "tpot_p99_ms": r.slo_tpot_ms},
            "workload": {"peak_rps": r.peak_rps, "prompt_tokens": r.prompt_tokens,
                         "output_tokens": r.output_tokens},
            "floors": {"tpot_ms": round(self.tpot_floor_ms, 3),
                       "ttft_ms": round(self.ttft_floor_ms, 3)},
            "knee": self.knee.to_json() if self.knee else None,
            "memory_gate": self.memory_gate.to_json() if self.memory_gate else None,
            "capacity_rps": round(self.capacity_rps, 4), "bound_by": self.bound_by,
            "utilisation": r.utilisation, "spare": r.spare, "replicas": self.replicas,
            "at_peak": self.at_peak.to_json() if self.at_peak else None,
        }


def operating_at(profile: LLMProfile, req: LLMPlanRequest, running: float) -> Operating | None:
    """The arrival rate that keeps ``running`` sequences in the batch, and its latencies;
    None when no rate does (the prefills alone would fill the engine)."""
    prompt, n = req.prompt_tokens, running
    step = profile.step_ms(n) / 1000.0
    step99 = profile.step_ms(n, "p99") / 1000.0
    mixed = profile.prefill_ms(prompt + n) / 1000.0  # one forward: a newcomer and the batch
    extra = max(mixed - step, 0.0)
    rate = n / (mixed + step + req.output_tokens * step)  # no prefill share yet
    for _ in range(200):  # the fixed point of Little's law and the prefill share
        busy = rate * extra
        if busy >= 1.0:
            return None
        tpot = step / (1.0 - busy)
        new = n / (mixed + step + req.output_tokens * tpot)
        if abs(new - rate) < 1e-9:
            break
        rate = new
    busy = rate * extra
    if busy >= 1.0:
        return None
    tpot = step / (1.0 - busy)
    # Newcomers per step are Poisson: the p99 gap is a step carrying two prefills when
    # more than 1% of steps do, else one, else a plain step.
    x = rate * tpot
    one, two = 1.0 - math.exp(-x), 1.0 - math.exp(-x) * (1.0 + x)
    if two >= TAIL_SHARE:
        gap99 = profile.prefill_ms(2 * prompt + n, "p99") / 1000.0
    elif one >= TAIL_SHARE:
        gap99 = profile.prefill_ms(prompt + n, "p99") / 1000.0
    else:
        gap99 = step99
    gap99 = max(gap99, step99)
    ttft99 = profile.prefill_ms(prompt + n, "p99") / 1000.0 + gap99
    return Operating(rps=rate, running=n, ttft_p99_ms=ttft99 * 1000, tpot_ms=tpot * 1000,
                     tpot_p99_ms=gap99 * 1000, output_tokens_per_s=rate * req.output_tokens)


def _meets(op: Operating, req: LLMPlanRequest) -> bool:
    return op.ttft_p99_ms <= req.slo_ttft_ms and op.tpot_p99_ms <= req.slo_tpot_ms


def plan_llm(profile: LLMProfile, req: LLMPlanRequest) -> LLMPlan:
    """Feasibility, one instance's capacity, and the fleet for the peak."""
    tpot_floor = profile.step_ms(1, "p99")
    ttft_floor = profile.prefill_ms(req.prompt_tokens, "p99") + profile.step_ms(1, "p99")
    base: dict[str, Any] = {
        "model": profile.model, "version": profile.version, "device": profile.device,
        "request": req, "tpot_floor_ms": tpot_floor, "ttft_floor_ms": ttft_floor}
    if req.prompt_tokens + req.output_tokens > profile.context_tokens:
        return LLMPlan(**base, feasible=False, reason=(
            f"{req.prompt_tokens} + {req.output_tokens} tokens exceed the context of "
            f"{profile.context_tokens}"), knee=None, memory_gate=None, capacity_rps=0.0,
            bound_by="", replicas=0, at_peak=None)
    problems = []
    if tpot_floor > req.slo_tpot_ms:
        problems.append(f"TPOT p99 {req.slo_tpot_ms:g} ms is under one sequence's decode "
                        f"step ({tpot_floor:.0f} ms p99)")
    if ttft_floor > req.slo_ttft_ms:
        problems.append(f"TTFT p99 {req.slo_ttft_ms:g} ms is under one prompt's prefill and "
                        f"a step ({ttft_floor:.0f} ms p99 for {req.prompt_tokens} tokens)")
    if problems:
        return LLMPlan(**base, feasible=False, reason="; ".join(problems), knee=None,
                       memory_gate=None, capacity_rps=0.0, bound_by="", replicas=0,
                       at_peak=None)
    knee = None
    for running in range(1, profile.max_running + 1):
        op = operating_at(profile, req, running)
        if op is None or not _meets(op, req):
            break
        knee = op
    if knee is None:  # one sequence alone meets it (the floors), but not under any load
        knee = operating_at(profile, req, 1)
    assert knee is not None
    fits = profile.kv_capacity_tokens // (req.prompt_tokens + req.output_tokens)
    # The gate binds only within the concurrency measured; beyond it the knee does first.
    gate = operating_at(profile, req, fits) if 1 <= fits <= profile.max_running else None
    if gate is not None and gate.rps < knee.rps:
        capacity, bound = gate.rps, "memory"
    else:
        capacity, bound = knee.rps, "knee"
    replicas = math.ceil(req.peak_rps / (req.utilisation * capacity)) + req.spare
    serving = replicas - req.spare
    at_peak = _at_rate(profile, req, req.peak_rps / serving) if serving else None
    return LLMPlan(**base, feasible=True, reason="", knee=knee, memory_gate=gate,
                   capacity_rps=capacity, bound_by=bound, replicas=replicas, at_peak=at_peak)


def _at_rate(profile: LLMProfile, req: LLMPlanRequest, rps: float) -> Operating | None:
    """The operating point at ``rps`` per instance (bisecting the running sequences)."""
    low, high = 1e-3, float(profile.max_running)
    top = operating_at(profile, req, high)
    if top is not None and top.rps < rps:
        return top
    for _ in range(60):
        mid = (low + high) / 2
        op = operating_at(profile, req, max(mid, 1.0))
        if op is None or op.rps > rps:
            high = mid
        else:
            low = mid
    return operating_at(profile, req, max(low, 1.0))
