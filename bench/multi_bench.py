"""Multi-model serving benchmarks (issue 16), open loop, real models on the CPU.

    python -m bench.multi_bench cold [--runs 3]   # cold start per model size; warm vs cold
    python -m bench.multi_bench zipf              # Zipf(1.1) over 20 models, budget for 5
    python -m bench.multi_bench all
    python -m bench.multi_bench report --from bench/results/multi-all.json

``cold``: for each demo model (a tiny BERT classifier, a tiny GPT-2, the real MiniLM
embedder) a fresh ``python -m predictor --multi_model`` holding only it; the first
request's latency is the cold start (verify checksums, read the weights, warm up, then
the batch; the first load in a process also imports the task's libraries), then 10 s of
open-loop load at 20 req/s give the warm latencies, then an unload and one more request
give the cold start of a process that has loaded a model before (the common case). ``zipf``: 20
seeded tiny classifiers under a budget for 5, requests open loop (Poisson, 10 req/s in
all, 60 s after 5 s of warm-up) whose model is drawn Zipf(1.1) by rank: the model of rank
k gets a share proportional to k^-1.1, sent as one Poisson stream per model (a
superposition of Poisson streams is the Poisson stream with each request's model drawn
by those shares). Once with the default ``--min_residency_s`` (30) and once with 0.
Hit rate is 1 - (requests that found their model not resident) / requests, from the
server's ``modelctl_model_cold_starts_total``. Results: ``bench/results/multi-<figure>``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench._results import run_context, write_results
from bench._servers import spawn_predictor, wait_ready
from bench._spread import spread, spread_text
from bench.loadgen import run_open_loop, run_open_loop_async

ZIPF_S, ZIPF_MODELS, ZIPF_RESIDENT = 1.1, 20, 5
TEXTS = {"text-classification": ["a fine day"], "text-generation": ["once upon"],
         "feature-extraction": ["a sentence to embed"]}


def _demo(name: str) -> tuple[str, Callable[[Path], None]]:
    from scripts.demo_models import DEMOS

    return DEMOS[name]


def _models_dir(root: Path, builds: dict[str, tuple[str, Callable[[Path], None]]]) -> Path:
    """``root/models/<name>``: each built, pushed to a registry and fetched (verified)."""
    from registry import Registry

    registry = Registry.open(str(root / "registry"))
    for name, (task, build) in builds.items():
        src = root / "src" / name
        src.mkdir(parents=True)
        build(src)
        version = registry.push(src, name, task).version
        registry.fetch(name, version, root / "models" / name)
    return root / "models"


def _metric(url: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def bench_cold(runs: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for name in ("demo-classify", "demo-generate", "demo-embed"):
        task, build = _demo(name)
        per_run = []
        with tempfile.TemporaryDirectory(prefix="bench-multi-") as tmp:
            models = _models_dir(Path(tmp), {name: (task, build)})
            weights = sum(p.stat().st_size for p in (models / name).glob("*.safetensors"))
            token = Path(tmp) / "token"
            token.write_text("bench-repository-token-0123456789\n")
            auth = {"authorization": "Bearer bench-repository-token-0123456789"}
            for _ in range(runs):
                server = spawn_predictor("multi", models, Path(tmp), "--multi_model",
                                         "--memory_budget_mb", "2048",
                                         "--repository_token_file", str(token))
                try:
                    wait_ready(server)
                    url = f"{server.url}/v1/models/{name}:predict"
                    body = {"instances": TEXTS[task]}
                    started = time.monotonic()
                    reply = httpx.post(url, json=body, timeout=300)
                    cold_s = time.monotonic() - started
                    assert reply.status_code == 200, reply.text
                    warm = run_open_loop(url, rate=20, duration_s=10, warmup_s=1, body=body)
                    index = httpx.post(f"{server.url}/v2/repository/index", timeout=10).json()
                    unloaded = httpx.post(f"{server.url}/v2/repository/models/{name}/unload",
                                          headers=auth, timeout=60)
                    assert unloaded.status_code == 200, unloaded.text
                    started = time.monotonic()
                    assert httpx.post(url, json=body, timeout=300).status_code == 200
                    again_s = time.monotonic() - started
                    per_run.append({
                        "cold_ms": cold_s * 1000, "again_ms": again_s * 1000,
                        "warm_p50_ms": (warm.latency_ok.p50_s or 0) * 1000,
                        "warm_p99_ms": (warm.latency_ok.p99_s or 0) * 1000,
                        "warm_ok": warm.success_ratio, "host_bytes": index[0]["host_bytes"]})
                finally:
                    server.proc.stop()
        row: dict[str, Any] = {"model": name, "task": task, "weight_bytes": weights,
                               "runs": per_run,
                               **{key: spread([r[key] for r in per_run]) for key in per_run[0]}}
        rows.append(row)
        print(f"cold {name}: cold {row['cold_ms']['median']:.0f} ms, warm p99 "
              f"{row['warm_p99_ms']['median']:.0f} ms", flush=True)
    return {"scenario": "cold", "rows": rows}


def zipf_shares(n: int, s: float) -> list[float]:
    weights = [k ** -s for k in range(1, n + 1)]
    return [w / sum(weights) for w in weights]


async def _mix(url: str, names: Sequence[str], rate: float, duration_s: float,
               warmup_s: float) -> list[Any]:
    shares = zipf_shares(len(names), ZIPF_S)
    runs = [run_open_loop_async(f"{url}/v1/models/{name}:predict", rate=rate * share,
                                duration_s=duration_s, warmup_s=warmup_s, arrival="poisson",
                                seed=i + 1, body={"instances": ["a fine day"]}, timeout_s=30)
            for i, (name, share) in enumerate(zip(names, shares, strict=True))]
    return list(await asyncio.gather(*runs))


def bench_zipf(rate: float, duration_s: float, warmup_s: float) -> dict[str, Any]:
    from scripts.demo_models import build_classify

    names = [f"cls{i:02d}" for i in range(ZIPF_MODELS)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-zipf-") as tmp:
        builds: dict[str, tuple[str, Callable[[Path], None]]] = {
            n: ("text-classification", functools.partial(build_classify, seed=i))
            for i, n in enumerate(names)}
        models = _models_dir(Path(tmp), builds)
        size = sum(p.stat().st_size for p in (models / names[0]).glob("*.safetensors"))
        budget_mb = (ZIPF_RESIDENT + 0.5) * size / 2**20
        for residency in ("30", "0"):
            server = spawn_predictor("multi", models, Path(tmp), "--multi_model",
                                     "--memory_budget_mb", f"{budget_mb:.1f}",
                                     "--min_residency_s", residency)
            try:
                wait_ready(server)
                results = asyncio.run(_mix(server.url, names, rate, duration_s, warmup_s))
                rows.append(_zipf_row(server.url, results, residency, duration_s + warmup_s))
            finally:
                server.proc.stop()
            print(f"zipf residency {residency}: hit {rows[-1]['hit_rate']:.3f}, p99 "
                  f"{rows[-1]['p99_ms']:.0f} ms, loads/min {rows[-1]['loads_per_min']:.1f}",
                  flush=True)
    return {"scenario": "zipf", "rate": rate, "duration_s": duration_s, "models": ZIPF_MODELS,
            "resident": ZIPF_RESIDENT, "budget_mb": budget_mb, "rows": rows}


def _zipf_row(url: str, results: list[Any], residency: str, total_s: float) -> dict[str, Any]:
    latencies, statuses = [], []
    for result in results:
        samples, keep = result.samples, result.samples.scheduled_s >= result.warmup_s
        statuses.extend(samples.status[keep].tolist())
        latencies.extend(samples.latency_s[keep & (samples.status == 200)].tolist())
    requests = _metric(url, "modelctl_requests_total")  # warm-up included, as the counters
    cold = _metric(url, "modelctl_model_cold_starts_total")
    ok = np.array(latencies) * 1000
    return {"min_residency_s": float(residency), "sent": len(statuses),
            "ok_ratio": statuses.count(200) / len(statuses),
            "status_counts": {str(c): statuses.count(c) for c in sorted(set(statuses))},
            "hit_rate": 1 - cold / requests if requests else 0.0,
            "p50_ms": float(np.percentile(ok, 50)), "p99_ms": float(np.percentile(ok, 99)),
            "loads_per_min": _metric(url, "modelctl_model_loads_total", outcome="ok")
            * 60 / total_s,
            "evictions_per_min": _metric(url, "modelctl_model_evictions_total") * 60 / total_s}


def markdown(context: dict[str, Any], results: list[dict[str, Any]]) -> str:
    lines = [f"Command: `{context['command']}`  ", f"Machine: {context['machine']}  ",
             f"Commit: {context['commit']}  ", f"Date: {context['date']}", ""]
    for res in results:
        if res["scenario"] == "cold":
            lines += ["### Cold start per model size", "",
                      "| model | weights MiB | measured MiB | cold, first in the process: ms "
                      "(min-max) | cold again after an unload: ms (min-max) | warm p50 ms | "
                      "warm p99 ms (min-max) |",
                      "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
            for r in res["rows"]:
                lines.append(
                    f"| {r['model']} ({r['task']}) | {r['weight_bytes'] / 2**20:.1f} | "
                    f"{r['host_bytes']['median'] / 2**20:.1f} | {spread_text(r['cold_ms'])} | "
                    f"{spread_text(r['again_ms'])} | {r['warm_p50_ms']['median']:.0f} | "
                    f"{spread_text(r['warm_p99_ms'])} |")
        else:
            lines += ["", f"### Zipf({ZIPF_S}) over {res['models']} models, budget for "
                      f"{res['resident']} ({res['budget_mb']:.0f} MiB), {res['rate']:g} req/s "
                      f"for {res['duration_s']:g} s", "",
                      "| --min_residency_s | sent | 2xx ratio | hit rate | p50 ms | p99 ms | "
                      "loads/min | evictions/min | statuses |",
                      "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
            for r in res["rows"]:
                lines.append(
                    f"| {r['min_residency_s']:g} | {r['sent']} | {r['ok_ratio']:.3f} | "
                    f"{r['hit_rate']:.3f} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | "
                    f"{r['loads_per_min']:.1f} | {r['evictions_per_min']:.1f} | "
                    f"{r['status_counts']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("figure", choices=("cold", "zipf", "all", "report"))
    parser.add_argument("--from", dest="source", help="report: the results JSON")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    args = parser.parse_args(argv)
    if args.figure == "report":
        data = json.loads(Path(args.source).read_text())
        print(markdown(data["context"], data["results"]))
        return 0
    results = []
    if args.figure in ("cold", "all"):
        results.append(bench_cold(args.runs))
    if args.figure in ("zipf", "all"):
        results.append(bench_zipf(args.rate, args.duration, args.warmup))
    context = run_context("python -m bench.multi_bench " + " ".join(argv))
    print(write_results(f"multi-{args.figure}", context, results, markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
