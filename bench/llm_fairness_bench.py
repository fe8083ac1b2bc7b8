"""Fair share across tenants inside an LLM server (issue 34): a tenant at 5x the server's
capacity beside one at 20% of it, with the fair admission gate and without.

    python -m bench.llm_fairness_bench [--runs 3] [--duration 60] [--capacity 1.0]

One real predictor on demo-chat (SmolLM2-135M, transformers' continuous batching), at
most ``--max-running`` sequences in the engine, ``--queue`` waiting for their first token
and a deadline of ``--deadline-ms`` to it. Two tenants, ``heavy`` and ``light``, equal
weights, no rate limits, so only the admission gate's order protects ``light``.
Open-loop Poisson arrivals of streamed chat completions of exactly ``--output-tokens``
tokens (bench.llm_bench's client: it times the first token and every gap):

- ``alone``: ``light`` at 20% of ``--capacity`` (the server's, in requests a second
  at this answer length; docs/BENCHMARKS.md measures 1 req/s on this machine);
- ``fair``: ``heavy`` at 5x capacity and ``light`` at 20%, at once, on the same server;
- ``fifo``: the same loads on a predictor without the tenants file (every sequence
  enters the engine first come, first served), the peer in the same run.

Measured for ``light``: time to first token and end-to-end p99, and its 429s; for
``heavy``: answers and 429s; for both: output tokens a second (the device kept busy).
Results: ``bench/results/llm-fairness.{json,md}``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bench._results import run_context, write_results
from bench._servers import predictor
from bench._spread import spread, spread_text
from bench.llm_bench import _load
from capacity._profile import quantile
from common.tenants import hash_key, new_key

KEYS = {"heavy": new_key(), "light": new_key()}
MODEL = "demo-chat"


def _phase(url: str, loads: dict[str, float], args: argparse.Namespace, seed: int,
           keys: dict[str, str] | None) -> dict[str, list[dict[str, Any]]]:
    async def run() -> list[list[dict[str, Any]]]:
        return list(await asyncio.gather(*(
            _load(url, rate, args.duration, args.output_tokens, seed=seed + i,
                  headers={"authorization": f"Bearer {keys[name]}"} if keys else None)
            for i, (name, rate) in enumerate(loads.items()))))

    return dict(zip(loads, asyncio.run(run()), strict=True))


def _tenant(done: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [d for d in done if d["status"] == 200 and d["stamps"]]
    ttft = sorted((d["stamps"][0] - d["sent"]) * 1000 for d in ok)
    e2e = sorted((d["stamps"][-1] - d["sent"]) * 1000 for d in ok)
    return {"requests": len(done), "ok": len(ok),
            "status_429": sum(d["status"] == 429 for d in done),
            "other_failures": sum(d["status"] not in (200, 429) for d in done),
            "ttft_p99_ms": round(quantile(ttft, 0.99), 1) if ttft else None,
            "e2e_p99_ms": round(quantile(e2e, 0.99), 1) if e2e else None,
            "tokens": sum(d["tokens"] for d in ok)}


def _row(phase: str, run: int, results: dict[str, list[dict[str, Any]]],
         duration_s: float) -> dict[str, Any]:
    row: dict[str, Any] = {"phase": phase, "run": run}
    for name, done in results.items():
        row[name] = _tenant(done)
    row["output_tokens_per_s"] = round(
        sum(row[name]["tokens"] for name in results) / duration_s, 1)
    return row


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    from scripts.demo_models import ensure_demo

    heavy, light = 5 * args.capacity, 0.2 * args.capacity
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-llm-fair-") as tmp:
        registry = Path(args.registry or Path(tmp) / "registry")
        ensure_demo(str(registry), MODEL)
        tenants = Path(tmp) / "tenants.yaml"
        tenants.write_text(yaml.safe_dump({"tenants": {
            name: {"keys": [hash_key(key)]} for name, key in KEYS.items()}}))
        common = ("--max_batch_size", str(args.max_running), "--max_queue_size",
                  str(args.queue), "--request_timeout_ms", str(args.deadline_ms),
                  "--kv_cache_memory_mb", "512")
        for run in range(1, args.runs + 1):
            with predictor(MODEL, registry, *common, "--tenants_file", str(tenants)) as server:
                url = f"{server.url}/openai/v1/chat/completions"
                asyncio.run(_load(url, 1.0, 3.0, 4, seed=0,
                                  headers={"authorization": f"Bearer {KEYS['light']}"}))
                rows.append(_row("alone", run, _phase(url, {"light": light}, args, run * 10,
                                                      KEYS), args.duration))
                rows.append(_row("fair", run, _phase(url, {"heavy": heavy, "light": light},
                                                     args, run * 10, KEYS), args.duration))
            with predictor(MODEL, registry, *common) as server:
                url = f"{server.url}/openai/v1/chat/completions"
                asyncio.run(_load(url, 1.0, 3.0, 4, seed=0))
                rows.append(_row("fifo", run, _phase(url, {"heavy": heavy, "light": light},
                                                     args, run * 10, None), args.duration))
            print(f"run {run}: " + ", ".join(
                f"{r['phase']} light TTFT p99 {r['light']['ttft_p99_ms']} ms, e2e p99 "
                f"{r['light']['e2e_p99_ms']} ms, 429 {r['light']['status_429']}"
                for r in rows[-3:]), file=sys.stderr, flush=True)
    return rows


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    def cell(phase: str, tenant: str, key: str) -> dict[str, float] | None:
        return spread([r[tenant][key] for r in rows if r["phase"] == phase and tenant in r
                       and r[tenant][key] is not None])

    def ratio(phase: str, key: str) -> dict[str, float] | None:
        alone = {r["run"]: r["light"][key] for r in rows if r["phase"] == "alone"}
        return spread([r["light"][key] / alone[r["run"]] for r in rows
                       if r["phase"] == phase and alone.get(r["run"]) and r["light"][key]])

    return {phase: {"light_ttft_p99_ms": cell(phase, "light", "ttft_p99_ms"),
                    "light_ttft_vs_alone": ratio(phase, "ttft_p99_ms"),
                    "light_e2e_p99_ms": cell(phase, "light", "e2e_p99_ms"),
                    "light_e2e_vs_alone": ratio(phase, "e2e_p99_ms"),
                    "light_429": cell(phase, "light", "status_429"),
                    "light_requests": cell(phase, "light", "requests"),
                    "heavy_ok": cell(phase, "heavy", "ok"),
                    "heavy_429": cell(phase, "heavy", "status_429"),
                    "tokens_per_s": spread([r["output_tokens_per_s"] for r in rows
                                            if r["phase"] == phase])}
            for phase in ("alone", "fair", "fifo")}


def markdown(context: dict[str, Any], results: Sequence[dict[str, Any]]) -> str:
    table = summary(results)
    cap = context["capacity_rps"]
    lines = [f"`{context['command']}`: {context['machine']}, {context['date']}, commit "
             f"{context['commit']}; demo-chat, {context['output_tokens']} output tokens a "
             f"request; capacity {cap:g} req/s, heavy {5 * cap:g} req/s, light "
             f"{0.2 * cap:g} req/s, {context['duration_s']:g} s a phase; median (min-max) "
             f"of {context['runs']} runs.", "",
             "| phase | light TTFT p99 ms | / alone | light e2e p99 ms | / alone | light "
             "429s | heavy answered | heavy 429s | output tokens/s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for phase, c in table.items():
        lines.append(f"| {phase} | {spread_text(c['light_ttft_p99_ms'])} | "
                     f"{spread_text(c['light_ttft_vs_alone'], '.2f')} | "
                     f"{spread_text(c['light_e2e_p99_ms'])} | "
                     f"{spread_text(c['light_e2e_vs_alone'], '.2f')} | "
                     f"{spread_text(c['light_429'])} of {spread_text(c['light_requests'])} | "
                     f"{spread_text(c['heavy_ok'])} | {spread_text(c['heavy_429'])} | "
                     f"{spread_text(c['tokens_per_s'], '.1f')} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.llm_fairness_bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per phase")
    parser.add_argument("--capacity", type=float, default=1.0,
                        help="the server's capacity in req/s at this answer length")
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--max-running", type=int, default=4, help="--max_batch_size")
    parser.add_argument("--queue", type=int, default=8, help="--max_queue_size")
    parser.add_argument("--deadline-ms", type=int, default=10000, help="to the first token")
    parser.add_argument("--registry", default=None, help="a registry with demo-chat")
    args = parser.parse_args(argv)
    command = "python -m bench.llm_fairness_bench " + " ".join(argv or sys.argv[1:])
    context = run_context(command.strip(), runs=args.runs, capacity_rps=args.capacity,
                          duration_s=args.duration, output_tokens=args.output_tokens)
    rows = measure(args)
    sys.stdout.write(write_results("llm-fairness", context, rows, markdown))


if __name__ == "__main__":
    main()
