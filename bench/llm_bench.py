"""The LLM capacity plan, validated on the real server (issue 33).

    python -m bench.llm_bench [--registry DIR] [--duration 90] [--factors 0.6,0.8,1,1.2,1.4]

1. ``modelctl profile demo-chat@stable`` (prefill, decode steps, KV memory), then
   ``modelctl plan`` at the SLO (TTFT p99 2 s, TPOT p99 250 ms by default) for chat
   requests of about ``--prompt-tokens`` and exactly ``--output-tokens`` (``ignore_eos``):
   the predicted capacity of one instance.
2. One real predictor on demo-chat; open-loop Poisson arrivals of streamed chat
   completions at each factor times the predicted capacity, ``--duration`` seconds each.
   The client measures each request's TTFT and every gap between two chunks (one chunk
   a token), as vLLM's benchmark_serving does.
3. The measured capacity is the highest rate whose p99 TTFT and TPOT meet the SLO; the
   plan is validated when it is within 20% of the prediction.

Results: bench/results/llm-capacity.{json,md}; docs/BENCHMARKS.md quotes them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench._results import run_context, write_results
from bench._servers import predictor
from capacity._profile import quantile

QUESTIONS = ("Write a story about a dragon who learns to fly.",
             "Explain how a bicycle works to a child.",
             "Describe the city of Paris in spring.",
             "Tell me about the history of the printing press.",
             "What should I pack for a week of hiking in the mountains?")


# How each request is told to generate exactly ``max_tokens``: vLLM's ``ignore_eos``
# extension, which ours takes (predictor/llm/_params.py). bench/llm_peers.py passes
# each peer's own way.
IGNORE_EOS: dict[str, Any] = {"ignore_eos": True}


async def _one(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed completion: when it was sent, when each chunk with text came (a
    token, or a few when the server fell behind), and how many tokens the answer had
    (its usage chunk's, asked for with ``stream_options``; else its chunks with text)."""
    sent = time.monotonic()
    stamps: list[float] = []
    status = 0
    tokens: int | None = None
    finish: str | None = None
    error = ""
    try:
        async with client.stream("POST", url, json=body) as r:
            status = r.status_code
            if status != 200:
                error = (await r.aread()).decode(errors="replace")[:300]
                return {"status": status, "sent": sent, "stamps": stamps, "error": error,
                        "finish": None, "tokens": 0}
            async for line in r.aiter_lines():
                if not line.startswith("data: {"):
                    continue  # blank lines, SSE comments (pings), data: [DONE]
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices") or ():
                    text = (choice.get("delta") or {}).get("content") or choice.get("text")
                    if text:
                        stamps.append(time.monotonic())
                    finish = choice.get("finish_reason") or finish
                if chunk.get("usage"):
                    tokens = chunk["usage"].get("completion_tokens")
                if "error" in chunk and not error:
                    error = json.dumps(chunk["error"])[:300]
    except (httpx.HTTPError, ValueError) as exc:  # ValueError: a chunk that is not JSON
        status, error = -1, f"{type(exc).__name__}: {exc}"[:300]
    return {"status": status, "sent": sent, "stamps": stamps, "error": error, "finish": finish,
            "tokens": len(stamps) if tokens is None else tokens}


async def _load(url: str, rate: float, duration_s: float, output_tokens: int,
                seed: int, model: str = "demo-chat",
                run_to_max: dict[str, Any] | None = None,
                headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Poisson arrivals at ``rate`` for ``duration_s``; each request greedy, streamed, of
    ``max_tokens`` ``output_tokens``, with ``run_to_max`` (``IGNORE_EOS`` by default) the
    fields that keep the server from ending the answer sooner, and ``headers`` (a key)."""
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    extra = IGNORE_EOS if run_to_max is None else run_to_max
    async with httpx.AsyncClient(timeout=300, limits=limits, headers=headers) as client:
        tasks = []
        start = time.monotonic()
        at = 0.0
        while at < duration_s:
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            body = {"model": model, "stream": True, "stream_options": {"include_usage": True},
                    "temperature": 0, "max_tokens": output_tokens, **extra,
                    "messages": [{"role": "user", "content": rng.choice(QUESTIONS)}]}
            tasks.append(asyncio.create_task(_one(client, url, body)))
            at += rng.expovariate(rate)
        return list(await asyncio.gather(*tasks))


def _summary(rate: float, done: list[dict[str, Any]], slo: dict[str, float]) -> dict[str, Any]:
    ok = [d for d in done if d["status"] == 200 and d["stamps"]]
    ttft = sorted((d["stamps"][0] - d["sent"]) * 1000 for d in ok)
    gaps = sorted((b - a) * 1000 for d in ok for a, b in zip(d["stamps"], d["stamps"][1:],
                                                            strict=False))
    span = max(d["stamps"][-1] for d in ok) - min(d["sent"] for d in ok) if ok else 1.0
    tokens = sum(d["tokens"] for d in ok)
    row = {"rate_rps": round(rate, 4), "requests": len(done), "ok": len(ok),
           "ttft_p50_ms": round(quantile(ttft, 0.5), 1) if ttft else None,
           "ttft_p99_ms": round(quantile(ttft, 0.99), 1) if ttft else None,
           "tpot_p50_ms": round(quantile(gaps, 0.5), 1) if gaps else None,
           "tpot_p99_ms": round(quantile(gaps, 0.99), 1) if gaps else None,
           "output_tokens_per_s": round(tokens / span, 1),
           # the answers' length (each one's usage, else its chunks with text): the work
           # of a request, which must be max_tokens for rates to compare
           "output_tokens_mean": round(tokens / len(ok), 2) if ok else None,
           "output_tokens_min": min((d["tokens"] for d in ok), default=None),
           "chunks_mean": round(sum(len(d["stamps"]) for d in ok) / len(ok), 2) if ok else None,
           "finish_length": sum(d["finish"] == "length" for d in ok)}
    errors = [d for d in done if d["status"] != 200 or not d["stamps"]]
    if errors:  # the first failure, for the reader: status and the start of its answer
        row["first_error"] = f"{errors[0]['status']}: {errors[0]['error']}"
    row["meets_slo"] = bool(ttft and gaps and len(ok) == len(done)
                            and row["ttft_p99_ms"] <= slo["ttft"]
                            and row["tpot_p99_ms"] <= slo["tpot"])
    return row


def _modelctl(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True,
                         check=False)
    if out.returncode not in (0, 2):
        raise SystemExit(f"modelctl {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    return out.stdout


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--registry", default=str(Path(".modelctl/registry").resolve()))
    parser.add_argument("--duration", type=float, default=90.0)
    parser.add_argument("--factors", default="0.6,0.8,1,1.2,1.4")
    parser.add_argument("--slo-ttft-ms", type=float, default=2000.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=250.0)
    parser.add_argument("--prompt-tokens", type=int, default=40)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--no-profile", action="store_true",
                        help="plan from the profile already stored")
    args = parser.parse_args(argv)
    from scripts.demo_models import ensure_demo

    ensure_demo(args.registry, "demo-chat")
    if not args.no_profile:
        _modelctl("profile", "demo-chat@stable", "--registry", args.registry, "--json")
    planned = json.loads(_modelctl(
        "plan", "demo-chat@stable", "--registry", args.registry, "--json", "--peak-rps", "1",
        "--slo-ttft-p99", f"{args.slo_ttft_ms}ms", "--slo-tpot-p99", f"{args.slo_tpot_ms}ms",
        "--prompt-tokens", str(args.prompt_tokens), "--output-tokens", str(args.output_tokens)))
    predicted = float(planned["capacity_rps"])
    print(f"predicted capacity {predicted:.3f} req/s ({planned['bound_by']})", flush=True)
    slo = {"ttft": args.slo_ttft_ms, "tpot": args.slo_tpot_ms}
    rows = []
    with predictor("demo-chat", Path(args.registry), "--max_queue_size", "4096") as server:
        url = f"{server.url}/openai/v1/chat/completions"
        asyncio.run(_load(url, 1.0, 3.0, 4, seed=0))  # warm-up
        for i, factor in enumerate(float(f) for f in args.factors.split(",")):
            done = asyncio.run(_load(url, predicted * factor, args.duration,
                                     args.output_tokens, seed=i + 1))
            row = {"factor": factor, **_summary(predicted * factor, done, slo)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            time.sleep(5)  # drain
    passing = [r["rate_rps"] for r in rows if r["meets_slo"]]
    measured = max(passing) if passing else 0.0
    summary = {"predicted_rps": round(predicted, 4), "measured_rps": measured,
               "ratio": round(measured / predicted, 3) if predicted else None,
               "plan": planned}
    context = run_context("python -m bench.llm_bench " + " ".join(argv), slo=slo,
                          prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens,
                          duration_s=args.duration, summary=summary)
    print(write_results("llm-capacity", context, rows, _markdown))
    return 0


def _markdown(context: dict[str, Any], rows: Any) -> str:
    s = context["summary"]
    lines = [f"LLM capacity on demo-chat ({context['machine']}, {context['date']}): predicted "
             f"{s['predicted_rps']} req/s, measured {s['measured_rps']} req/s "
             f"(ratio {s['ratio']}) at TTFT p99 <= {context['slo']['ttft']:g} ms and TPOT p99 "
             f"<= {context['slo']['tpot']:g} ms", "",
             "| x predicted | req/s | requests | TTFT p50 / p99 ms | TPOT p50 / p99 ms | "
             "output tokens/s | meets SLO |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['factor']:g} | {r['rate_rps']:g} | {r['requests']} | "
                     f"{measured_cells(r)} |")
    return "\n".join(lines) + "\n"


def measured_cells(r: dict[str, Any]) -> str:
    """A ``_summary`` row's TTFT, TPOT, output tokens/s and SLO cells of a markdown table."""
    return (f"{r['ttft_p50_ms']} / {r['ttft_p99_ms']} | {r['tpot_p50_ms']} / "
            f"{r['tpot_p99_ms']} | {r['output_tokens_per_s']} | "
            f"{'yes' if r['meets_slo'] else 'no'}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
