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
value for ``--duration`` seconds, greedy, ``max_tokens`` of ``--output-tokens``, measured
as ``bench.llm_bench`` measures (TTFT, every gap between chunks, output tokens a second).
Every answer must be exactly ``--output-tokens`` long for the work to be the same; each
server is told so in the one way it takes (``RUN_TO_MAX``), and each row records the
answers' mean length: the summary flags a server whose answers are not that length. A
server's capacity is its highest rate whose TTFT p99 and TPOT p99 meet the SLO.

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
from bench._spread import spread, spread_text
from bench.llm_bench import IGNORE_EOS, _load, _summary, measured_cells
from scripts.demo_models import CHAT_GGUF, smollm2_dir
from tests.support.procs import ManagedProcess, free_port, wait_http_ok

ROOT = Path(__file__).resolve().parents[1]
LLAMA_VENV = ROOT / "bench" / ".venv-peers-llm"
SERVERS = ("modelctl", "transformers", "llamacpp")

# The tokens at which llama.cpp ends a generation of SmolLM2's GGUF file, by id:
# ``llama_cpp.llama_vocab_is_eog`` is true for these three of its 49152 (checked with
# llama-cpp-python 0.3.36): <|endoftext|>, <|im_end|> (tokenizer.ggml.eos_token_id) and
# <reponame>, which llama.cpp takes for a fill-in-the-middle token, also an end.
END_TOKENS = {0: "<|endoftext|>", 2: "<|im_end|>", 4: "<reponame>"}

# The request fields, beyond bench.llm_bench's (model, stream, stream_options, temperature
# 0, max_tokens, messages), with which each server generates exactly max_tokens tokens.
RUN_TO_MAX: dict[str, dict[str, Any]] = {
    # Ours takes vLLM's extension (predictor/llm/_params.py, ``_Common.ignore_eos``).
    "modelctl": IGNORE_EOS,
    # transformers serve refuses, with a 422, any field outside the OpenAI schema and its
    # own three (transformers/cli/serving/utils.py, ``BaseHandler._validate_request``,
    # against ``TransformersCompletionCreateParamsStreaming`` in chat_completion.py): so
    # no ``ignore_eos``. Its ``generation_config`` field, a JSON string, overrides the
    # model's settings (``BaseHandler._build_generation_kwargs``); with continuous
    # batching only max_new_tokens, eos_token_id and sampling reach the engine
    # (``CBGenerateRunner._build_continuous_batching_kwargs``; ``logit_bias`` does not),
    # and an eos_token_id of -1 is no end token at all (generation/continuous_batching/
    # requests.py, ``RequestState.__post_init__`` keeps only ids >= 0).
    "transformers": {"generation_config": json.dumps({"eos_token_id": -1})},
    # llama-cpp-python's server (0.3.36) has no ``ignore_eos`` (its pydantic
    # ``CreateChatCompletionRequest``, llama_cpp/server/types.py, drops unknown fields,
    # ``stream_options`` too: no usage chunk, so its answers are counted in chunks). It
    # takes OpenAI's ``logit_bias`` for chat completions (llama_cpp/server/app.py,
    # ``prepare_request_resources``, which ``get_event_publisher`` calls for a stream),
    # added to the logits before sampling (llama_cpp/llama.py,
    # ``Llama._create_completion``'s ``logit_bias_processor``, a sampler ahead of the
    # greedy one): -100 on every end token, which greedy decoding then never picks, so
    # the loop in ``_create_completion`` never meets ``llama_vocab_is_eog``. (Its
    # ``min_tokens`` would only hold back ``token_eos()``, 2, not 0 or 4.)
    # ``repeat_penalty`` 1, not its default 1.1: plain greedy decoding, as the others do.
    "llamacpp": {"logit_bias": {str(token): -100 for token in END_TOKENS},
                 "repeat_penalty": 1.0},
}


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
        # --interrupt_requests false: by default (llama_cpp/server/settings.py,
        # ``ServerSettings.interrupt_requests``) a request waiting for the model ends the
        # stream being generated, early (app.py, ``get_event_publisher``); here each
        # request waits its turn and is answered in full.
        argv = [str(python), "-m", "llama_cpp.server", "--model",
                str(smollm2_dir() / CHAT_GGUF),
                "--model_alias", "demo-chat", "--host", "127.0.0.1", "--port", str(port),
                "--n_ctx", "4096", "--n_threads", "2", "--interrupt_requests", "false"]
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
    parser.add_argument("--runs", type=int, default=1,
                        help="repeat the whole sweep; the summary is the median (min-max)")
    args = parser.parse_args(argv)
    from scripts.demo_models import ensure_demo

    ensure_demo(args.registry, "demo-chat")
    slo = {"ttft": args.slo_ttft_ms, "tpot": args.slo_tpot_ms}
    rates = [float(r) for r in args.rates.split(",")]
    rows: list[dict[str, Any]] = []
    servers = args.servers.split(",")
    for run in range(1, args.runs + 1):  # servers in turn within a run: same conditions
        for name in servers:
            rows += _sweep(name, Path(args.registry), rates, args, slo, run)
    summary = {name: {**_capacity([r for r in rows if r["server"] == name], args.runs),
                      **_lengths([row for row in rows if row["server"] == name],
                                 args.output_tokens)}
               for name in servers}
    for name, of_server in summary.items():
        if not of_server["full_length"]:
            print(f"WARNING: {name}'s answers are not {args.output_tokens} tokens long "
                  f"(mean {of_server['output_tokens_mean']}, shortest "
                  f"{of_server['output_tokens_min']}): "
                  "its rates are not the same work", flush=True)
    context = run_context("python -m bench.llm_peers " + " ".join(argv), slo=slo,
                          output_tokens=args.output_tokens, duration_s=args.duration,
                          runs=args.runs, summary=summary)
    print(write_results("llm-peers", context, rows, _markdown))
    return 0


def _sweep(name: str, registry: Path, rates: list[float], args: argparse.Namespace,
           slo: dict[str, float], run: int) -> list[dict[str, Any]]:
    """One server through the rates, lowest first, until it is far past its knee."""
    rows: list[dict[str, Any]] = []
    with serve(name, registry) as (url, model):
        fields = RUN_TO_MAX[name]
        asyncio.run(_load(url, 1.0, 3.0, 4, seed=0, model=model,
                          run_to_max=fields))  # warm-up
        for i, rate in enumerate(rates):
            done = asyncio.run(_load(url, rate, args.duration, args.output_tokens,
                                     seed=i + 1, model=model, run_to_max=fields))
            row = {"server": name, "run": run, **_summary(rate, done, slo)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            time.sleep(5)  # drain
            if not row["ok"] or (row["ttft_p99_ms"] or 0) > 5 * slo["ttft"]:
                break  # far past its knee: the higher rates only queue
    return rows


def _capacity(rows: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    """Per run, the highest rate that met the SLO and its output tokens/s (0 where none
    did); over the runs, their median (min-max)."""
    best = [max((r for r in rows if r["run"] == run and r["meets_slo"]),
                key=lambda r: r["rate_rps"], default=None) for run in range(1, runs + 1)]
    return {"rate_rps": spread([b["rate_rps"] if b else 0.0 for b in best]),
            "output_tokens_per_s": spread([b["output_tokens_per_s"] if b else 0.0
                                           for b in best])}


def _lengths(rows: list[dict[str, Any]], wanted: int) -> dict[str, Any]:
    """A server's answers over all its rates: their mean and shortest length in tokens,
    and whether every one was ``wanted`` long."""
    answers = sum(r["ok"] for r in rows)
    mean = (round(sum(r["output_tokens_mean"] * r["ok"] for r in rows if r["ok"]) / answers, 2)
            if answers else None)
    shortest = min((r["output_tokens_min"] for r in rows if r["ok"]), default=None)
    return {"output_tokens_mean": mean, "output_tokens_min": shortest,
            "full_length": bool(answers) and mean == wanted and shortest == wanted}


def _markdown(context: dict[str, Any], rows: Any) -> str:
    slo = context["slo"]
    wanted = context["output_tokens"]
    lines = [f"demo-chat, {len(context['summary'])} servers ({context['machine']}, "
             f"{context['date']}), "
             f"TTFT p99 <= {slo['ttft']:g} ms and TPOT p99 <= {slo['tpot']:g} ms, "
             f"{wanted} output tokens a request; median (min-max) of {context['runs']} "
             "runs (0: no rate met the SLO)", "",
             "| server | at the SLO: req/s | output tokens/s | tokens an answer (mean) |",
             "| --- | --- | --- | --- |"]
    for name, best in context["summary"].items():
        lines.append(f"| {name} | {spread_text(best['rate_rps'], '.2g')} | "
                     f"{spread_text(best['output_tokens_per_s'], '.1f')} | "
                     f"{best['output_tokens_mean']}"
                     f"{'' if best['full_length'] else ' (not ' + str(wanted) + ')'} |")
    short = [name for name, best in context["summary"].items() if not best["full_length"]]
    if short:
        lines += ["", f"Not the same work: the answers of {', '.join(short)} are not all "
                  f"{wanted} tokens long."]
    lines += ["", "| server | run | req/s | requests | ok | tokens an answer | "
              "TTFT p50 / p99 ms | TPOT p50 / p99 ms | output tokens/s | meets SLO |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['server']} | {r['run']} | {r['rate_rps']:g} | {r['requests']} | "
                     f"{r['ok']} | "
                     f"{r['output_tokens_mean']} | {measured_cells(r)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
