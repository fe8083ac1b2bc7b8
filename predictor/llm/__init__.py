"""LLM serving (issue 33): a causal LM (task ``llm``) behind token-level continuous batching.

``Engine`` is the interface to the engine (``TransformersEngine``: transformers' own
continuous batching, paged KV cache and scheduler); ``LLMModel`` one generation from
request to last token; ``LLMRoutes`` seed 1's ``POST /sample`` and OpenAI's completions,
chat completions and models routes, streaming as server-sent events; ``TextStream`` the
text a client is sent (whole characters, stop strings); ``LLMMetrics`` TTFT, TPOT and the
engine's gauges; ``AdapterRouter`` each tenant's LoRA adapter (an engine per adapter,
at most ``--max_resident_adapters``); ``serve_llm`` the process. docs/LLM.md.
"""

from __future__ import annotations

from predictor.llm._adapters import AdapterRouter
from predictor.llm._engine import (
    Engine,
    EngineStats,
    Output,
    Sampling,
    TransformersEngine,
    kv_bytes_per_token,
)
from predictor.llm._metrics import LLMMetrics
from predictor.llm._model import LLMModel, Piece, load_llm
from predictor.llm._params import GenerationRequest, parse_chat, parse_completion, parse_sample
from predictor.llm._routes import LLMRoutes, generation_paths, openai_prefix
from predictor.llm._serve import serve_llm
from predictor.llm._text import TextStream

__all__ = [
    "AdapterRouter",
    "Engine",
    "EngineStats",
    "GenerationRequest",
    "LLMMetrics",
    "LLMModel",
    "LLMRoutes",
    "Output",
    "Piece",
    "Sampling",
    "TextStream",
    "TransformersEngine",
    "generation_paths",
    "kv_bytes_per_token",
    "load_llm",
    "openai_prefix",
    "parse_chat",
    "parse_completion",
    "parse_sample",
    "serve_llm",
]
