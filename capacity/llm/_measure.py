"""``modelctl profile`` for an LLM: its costs measured through the real predictor.

The version is fetched and verified as for any profile, then served by ``python -m
predictor`` on loopback (the same engine, HTTP edge and SSE a deployment runs, so the
edge's share of the CPU is in every number), and timed from a client as vLLM's
benchmark_serving times a server:

- **prefill**: one completion alone per prompt length, ``max_tokens`` 1: its latency,
  with the prompt's length as the server counted it (``usage.prompt_tokens``);
- **decode**: ``n`` streamed completions sent together (short prompts, ``ignore_eos``,
  ``--decode-tokens`` each): every gap between two chunks once all ``n`` run;
- **KV memory per token** from the model's config (2 · layers · KV heads · head size ·
  dtype bytes), and what the engine's paged cache holds from its metrics.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from capacity._measure import Progress, _quiet, cache_root, fetch_version, host_facts
from capacity._profile import ProfileError, quantile
from capacity.llm._profile import LLMProfile, Point
from predictor.llm import kv_bytes_per_token
from registry import Registry

DEFAULT_PROMPT_LENGTHS = (16, 64, 256, 1024)
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class LLMProfileOptions:
    device: str = "cpu"
    prompt_lengths: tuple[int, ...] = DEFAULT_PROMPT_LENGTHS
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    runs: int = 5
    decode_tokens: int = 32
    torch_threads: int = 0
    load_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.runs < 1 or self.decode_tokens < 4:
            raise ProfileError("--runs must be >= 1 and --decode-tokens >= 4")
        for name in ("prompt_lengths", "concurrency"):
            values = getattr(self, name)
            if not values or any(v < 1 for v in values) or list(values) != sorted(set(values)):
                raise ProfileError(f"--{name.replace('_', '-')}: positive, increasing numbers")


def measure_llm_profile(reg: Registry, model: str, ref: str | int, options: LLMProfileOptions,
                        *, cache_dir: Path | None = None,
                        progress: Progress = _quiet) -> LLMProfile:
    from transformers import AutoConfig

    from capacity._edge import metric_sums, serving
    from predictor.handlers._text import resolve_dtype

    version = reg.resolve(model, str(ref))
    manifest = reg.manifest(model, version)
    if manifest.task != "llm":
        raise ProfileError(f"{model}@{version} is task {manifest.task}, not llm")
    model_dir = fetch_version(reg, model, version, cache_root(cache_dir), progress)
    config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True,
                                        trust_remote_code=False)
    progress(f"starting a predictor on {model}@{version}")
    with serving(model, model_dir, device=options.device, torch_threads=options.torch_threads,
                 load_timeout_s=options.load_timeout_s,
                 flags=("--max_queue_size", "4096", "--max_new_tokens_limit", "1024")
                 ) as (url, load_s):
        prefill, decode = asyncio.run(_measure(url, model, options, progress))
        name = "modelctl_llm_kv_cache_capacity_tokens"
        kv_tokens = metric_sums(url, (name,)).get(name)
        if kv_tokens is None:
            raise ProfileError(f"the predictor exports no {name}")
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return LLMProfile(
        model=model, version=version, device=options.device, prefill=prefill, decode=decode,
        kv_bytes_per_token=kv_bytes_per_token(config, resolve_dtype("auto", options.device)),
        kv_capacity_tokens=int(kv_tokens),
        context_tokens=int(getattr(text, "max_position_embeddings", 0) or 2048),
        load_s=load_s, host=host_facts(),
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"))


async def _stream(client: Any, url: str, body: dict[str, Any]) -> tuple[list[float], int]:
    """One streamed completion: each chunk's arrival (from sending), and the prompt's length."""
    sent = time.monotonic()
    stamps: list[float] = []
    prompt_tokens = 0
    async with client.stream("POST", url, json={**body, "stream": True, "stream_options": {
            "include_usage": True}}) as r:
        if r.status_code != 200:
            raise ProfileError(f"the predictor answered {r.status_code}: {await r.aread()!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                prompt_tokens = int(chunk["usage"]["prompt_tokens"])
            elif chunk["choices"] and chunk["choices"][0]["text"]:
                stamps.append(time.monotonic() - sent)
    return stamps, prompt_tokens


async def _measure(url: str, model: str, options: LLMProfileOptions,
                   progress: Progress) -> tuple[tuple[Point, ...], tuple[Point, ...]]:
    import httpx

    route = f"{url}/openai/v1/completions"
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        def body(prompt: str, tokens: int) -> dict[str, Any]:
            return {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0,
                    "ignore_eos": True}

        await _stream(client, route, body("Warm up", 4))  # untimed
        prefill = []
        for length in options.prompt_lengths:
            times, counted = [], 0
            for run in range(options.runs):
                stamps, counted = await _stream(client, route, body(_words(length, run), 1))
                times.append(stamps[0] * 1000)
            prefill.append(_point(counted or length, times))
            progress(f"prefill {prefill[-1].x} tokens: p50 {prefill[-1].p50_ms:.0f} ms")
        decode = []
        for n in options.concurrency:
            runs = await asyncio.gather(*(
                _stream(client, route, body(_words(12, 1000 + i), options.decode_tokens))
                for i in range(n)))
            streams = [s for s, _ in runs if s]
            # Gaps once every sequence runs (after the last one's first token), until the
            # first one ends: n sequences in the batch, neither filling nor draining.
            start = max(s[0] for s in streams)
            end = min(s[-1] for s in streams)
            gaps = [(b - a) * 1000 for s in streams for a, b in itertools.pairwise(s)
                    if a >= start and b <= end and b > a]
            if not gaps:
                gaps = [(b - a) * 1000 for s in streams for a, b in itertools.pairwise(s[1:])]
            decode.append(_point(n, gaps))
            progress(f"decode with {n} running: p50 {decode[-1].p50_ms:.0f} ms a token")
    points: dict[int, Point] = {}
    for point in prefill:  # two lengths the tokenizer counted alike: keep the longer run
        points[point.x] = point
    return tuple(points[x] for x in sorted(points)), tuple(decode)


_WORDS = ("river", "stone", "light", "cloud", "green", "music", "paper", "field", "north",
          "table", "water", "glass", "horse", "bread", "night", "smile")


def _words(count: int, salt: int) -> str:
    """About ``count`` tokens of ordinary words (one token each in most vocabularies),
    different for each ``salt`` so that no two prompts share a cached prefix."""
    return " ".join(_WORDS[(salt * 7 + i * (salt % 5 + 1)) % len(_WORDS)] for i in range(count))


def _point(x: int, samples_ms: Sequence[float]) -> Point:
    ordered = sorted(samples_ms)
    return Point(x, quantile(ordered, 0.5), quantile(ordered, 0.99))
