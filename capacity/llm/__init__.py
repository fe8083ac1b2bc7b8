"""Capacity planning for LLMs (issue 33), seed 2's method: ``modelctl profile`` measures a
version's prefill time against prompt length, decode step time against running
sequences and KV memory per token (``_measure``, on the predictor's own engine; the
``LLMProfile`` of ``_profile``); ``plan_llm`` (``_plan``, pure) checks a TTFT and TPOT
SLO's feasibility, takes one instance's capacity as the smaller of the measured knee and
the memory gate, and sizes the fleet. docs/CAPACITY.md.
"""

from __future__ import annotations

from capacity.llm._plan import LLMPlan, LLMPlanRequest, Operating, operating_at, plan_llm
from capacity.llm._profile import LLM_SCHEMA, LLMProfile, Point, llm_report_name
from common import lazy_exports as _lazy_exports

# Measuring loads the model (torch, transformers): on first use only.
_LAZY = {"LLMProfileOptions": "capacity.llm._measure",
         "measure_llm_profile": "capacity.llm._measure"}
__getattr__ = _lazy_exports(__name__, _LAZY)

__all__ = [
    "LLM_SCHEMA",
    "LLMPlan",
    "LLMPlanRequest",
    "LLMProfile",
    "LLMProfileOptions",
    "Operating",
    "Point",
    "llm_report_name",
    "measure_llm_profile",
    "operating_at",
    "plan_llm",
]
