"""demo-chat served by us and by two peers, with the same prompts in one run (issue 33).

    bash bench/peers/setup.sh llm        # once: llama-cpp-python[server] (builds llama.cpp)
    python -m bench.llm_peers [--registry DIR] [--rates 0.25,0.5,...] [--duration 60]

The servers, one at a time on the same machine, each with a warm-up first:

- ``modelctl``: ``python -m predictor`` on demo-chat (float32 safetensors), transformers'
  continuous batching behind our routes.
- ``transformers``: ``transformers serve --continuous-batching`` on the same directory,
  transformers' own OpenAI server and engine.
- ``llamacpp``: llama-cpp-python's server (``python -m llama_cpp.server``, in
  ``bench/.venv-peers-llm``) on the GGUF file demo-chat is built from
  (``SmolLM2-135M-Instruct.Q4_1.gguf``: 4-bit weights, which ours and transformers'
  de-quantise to float32), two threads, one sequence at a time (its server has no
  continuous batching).

Each gets open-loop Poisson arrivals of streamed chat completions at each ``--rates``
value for ``--duration`` seconds, greedy, ``max_tokens`` of ``--output-tokens`` (with
``ignore_eos`` where the server honours it), measured as ``bench.llm_bench`` measures
(TTFT, every gap between chunks, output tokens a second). A server's capacity is its
highest rate whose TTFT p99 and TPOT p99 meet the SLO.

Results: bench/results/llm-peers.{json,md}; docs/BENCHMARKS.md quotes them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench._results import run_context, write_results
from bench._servers import predictor
from bench.llm_bench import _load, _summary, measured_cells
from scripts.demo_models import CHAT_GGUF, smollm2_dir
from tests.support.procs import ManagedProcess, free_port, wait_http_ok

ROOT = Path(__file__).resolve().parents[1]
LLAMA_VENV = ROOT / "bench" / ".venv-peers-llm"
SERVERS = ("modelctl", "transformers", "llamacpp")


@contextmanager
def _process(name: str, argv: list[str], health: str, port: int) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        proc = ManagedProcess(f"bench-{name}", argv, log_dir=Path(tmp))
        try:
            wait_http_ok(f"http://127.0.0.1:{port}{health}", timeout_s=300, proc=proc)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.stop()


@contextmanager
def serve(name: str, registry: Path) -> Iterator[tuple[str, str]]:
    """The chat completions URL of server ``name`` on demo-chat, and the model name it
    answers to."""
    if name == "modelctl":
        with predictor("demo-chat", registry, "--max_queue_size", "4096") as server:
            yield f"{server.url}/openai/v1/chat/completions", "demo-chat"
        return
    port = free_port()
    if name == "transformers":
        from registry import Registry

        with tempfile.TemporaryDirectory(prefix="bench-tf-model-") as tmp:
            model_dir = Path(tmp) / "demo-chat"
            Registry.open(str(registry)).fetch("demo-chat", "stable", model_dir)
            argv = [str(ROOT / ".venv" / "bin" / "transformers"), "serve", str(model_dir),
                    "--continuous-batching", "--device", "cpu", "--host", "127.0.0.1",
                    "--port", str(port), "--log-level", "warning"]
            with _process(name, argv, "/health", port) as url:
                # A server pinned to one model answers only to its path (a 400 otherwise).
                yield f"{url}/v1/chat/completions", str(model_dir)
        return
    if name == "llamacpp":
        python = LLAMA_VENV / "bin" / "python"
        if not python.exists():
            raise SystemExit(f"{LLAMA_VENV} is missing: run `bash bench/peers/setup.sh llm`")
        argv = [str(python), "-m", "llama_cpp.server", "--model",
                str(smollm2_dir() / CHAT_GGUF),
                "--model_alias", "demo-chat", "--host", "127.0.0.1", "--port", str(port),
                "--n_ctx", "4096", "--n_threads", "2"]
        with _process(name, argv, "/v1/models", port) as url:
            yield f"{url}/v1/chat/completions", "demo-chat"
        return
    raise SystemExit(f"unknown server {name!r}: choose from {', '.join(SERVERS)}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--registry", default=str(Path(".modelctl/registry").resolve()))
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--rates", default="0.25,0.5,0.75,1,1.25,1.5,2")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--slo-ttft-ms", type=float, default=2000.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=250.0)
    args = parser.parse_args(argv)
    from scripts.demo_models import ensure_demo

    ensure_demo(args.registry, "demo-chat")
    slo = {"ttft": args.slo_ttft_ms, "tpot": args.slo_tpot_ms}
    rates = [float(r) for r in args.rates.split(",")]
    rows: list[dict[str, Any]] = []
    for name in args.servers.split(","):
        with serve(name, Path(args.registry)) as (url, model):
            asyncio.run(_load(url, 1.0, 3.0, 4, seed=0, model=model))  # warm-up
            for i, rate in enumerate(rates):
                done = asyncio.run(_load(url, rate, args.duration, args.output_tokens,
                                         seed=i + 1, model=model))
                row = {"server": name, **_summary(rate, done, slo)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                time.sleep(5)  # drain
                if not row["ok"] or (row["ttft_p99_ms"] or 0) > 5 * slo["ttft"]:
                    break  # far past its knee: the higher rates only queue
    best = {name: max([r for r in rows if r["server"] == name and r["meets_slo"]],
                      key=lambda r: r["rate_rps"], default=None)
            for name in args.servers.split(",")}
    summary = {name: ({"rate_rps": r["rate_rps"],
                       "output_tokens_per_s": r["output_tokens_per_s"]} if r else None)
               for name, r in best.items()}
    context = run_context("python -m bench.llm_peers " + " ".join(argv), slo=slo,
                          output_tokens=args.output_tokens, duration_s=args.duration,
                          summary=summary)
    print(write_results("llm-peers", context, rows, _markdown))
    return 0


def _markdown(context: dict[str, Any], rows: Any) -> str:
    slo = context["slo"]
    lines = [f"demo-chat, three servers ({context['machine']}, {context['date']}), "
             f"TTFT p99 <= {slo['ttft']:g} ms and TPOT p99 <= {slo['tpot']:g} ms, "
             f"{context['output_tokens']} output tokens a request", "",
             "| server | at the SLO: req/s | output tokens/s |", "| --- | --- | --- |"]
    for name, best in context["summary"].items():
        lines.append(f"| {name} | {best['rate_rps'] if best else 'none met it'} | "
                     f"{best['output_tokens_per_s'] if best else '-'} |")
    lines += ["", "| server | req/s | requests | ok | TTFT p50 / p99 ms | TPOT p50 / p99 ms | "
              "output tokens/s | meets SLO |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['server']} | {r['rate_rps']:g} | {r['requests']} | {r['ok']} | "
                     f"{measured_cells(r)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
