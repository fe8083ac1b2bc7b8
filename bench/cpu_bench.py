"""Server CPU per request by protocol (issue 18): V1 JSON, V2 JSON and gRPC at one rate.

    python -m bench.cpu_bench [--rate 500] [--runs 3] [--duration-s 10]
        [--protocols v1,v2,grpc] [--label NAME] [-- EXTRA PREDICTOR FLAGS]

One predictor on the fixed-latency task as the peer benchmark runs it (100 ms a batch
of at most 100, ``bench.predictor_bench.FIXED_FLAGS``), each request carrying one small
value, so what a request costs is the serving path's, not the model's. For each
protocol: 2 s of load to warm up, then ``--runs`` open-loop runs of ``--duration-s`` at
``--rate`` (HTTP: ``bench.loadgen``; gRPC: ``bench.loadgen._grpc``, tritonclient's stubs),
each reading the server process tree's CPU (user + system, psutil) before and after:
CPU per request = that CPU over the requests sent. The predictor logs at INFO, its
default, so per-request log lines are part of the cost. Reported: the median of the runs
and their min-max, with p99 and the share answered 200. Results go to
``bench/results/cpu-<label>.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench._results import run_context, write_results
from bench._servers import Server, predictor, process_cpu_s, push_fixed_latency
from bench._spread import spread, spread_text
from bench.loadgen import LoadResult, run_open_loop
from bench.predictor_bench import FIXED_FLAGS
from tests.support.procs import free_port

PROTOCOLS = ("v1", "v2", "grpc")
MODEL = "bench-fixed"
V2_BODY = {"inputs": [{"name": "input", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]}


def _sender(protocol: str, server: Server, grpc_port: int) -> Callable[[float, float], LoadResult]:
    """``(rate, duration_s) -> LoadResult`` for one protocol against ``server``."""
    if protocol == "grpc":
        from bench.loadgen._grpc import bytes_request, run_open_loop_grpc

        request = bytes_request(MODEL, ["hi"])
        return lambda rate, seconds: run_open_loop_grpc(
            f"127.0.0.1:{grpc_port}", request, rate=rate, duration_s=seconds, timeout_s=5.0)
    url, body = ((server.predict_url, {"instances": ["hi"]}) if protocol == "v1" else
                 (f"{server.url}/v2/models/{MODEL}/infer", V2_BODY))
    return lambda rate, seconds: run_open_loop(
        url, rate=rate, duration_s=seconds, body=body, timeout_s=5.0,
        headers={"content-type": "application/json"})


def measure(protocol: str, server: Server, grpc_port: int, rate: float, runs: int,
            duration_s: float) -> dict[str, Any]:
    send = _sender(protocol, server, grpc_port)
    send(rate, 2.0)  # warm-up, not counted
    rows = []
    for _ in range(runs):
        cpu0 = process_cpu_s(server.proc.pid)
        result = send(rate, duration_s)
        cpu_s = process_cpu_s(server.proc.pid) - cpu0
        p99 = result.latency_ok.p99_s
        rows.append({"cpu_ms_per_request": cpu_s * 1000.0 / max(1, result.sent),
                     "p99_ms": None if p99 is None else p99 * 1000.0,
                     "success_ratio": result.success_ratio, "sent": result.sent,
                     "on_schedule": result.is_on_schedule()})
        print(f"  {protocol}: {rows[-1]['cpu_ms_per_request']:.3f} ms CPU/request, p99 "
              f"{rows[-1]['p99_ms'] or float('nan'):.0f} ms, {result.success_ratio:.2%} ok",
              flush=True)
    return {"protocol": protocol, "rate": rate, "runs": rows,
            "cpu_ms_per_request": spread([r["cpu_ms_per_request"] for r in rows]),
            "p99_ms": spread([r["p99_ms"] for r in rows if r["p99_ms"] is not None]),
            "success_ratio": spread([r["success_ratio"] for r in rows])}


def markdown(context: dict[str, Any], results: Sequence[dict[str, Any]]) -> str:
    lines = [f"# Server CPU per request ({context['date']})", "",
             f"`{context['command']}` at {context['commit']}, {context['machine']}; "
             f"fixed-latency, 100 ms a batch of at most 100; predictor flags "
             f"`{' '.join(context['flags'])}`.", "",
             "| Protocol | Rate | CPU ms per request, median (min-max) | p99 ms | Answered 200 |",
             "|---|---:|---|---|---|"]
    for r in results:
        ok = r["success_ratio"]
        lines.append(f"| {r['protocol']} | {r['rate']:g} | "
                     f"{spread_text(r['cpu_ms_per_request'], '.3f')} | "
                     f"{spread_text(r['p99_ms'])} | "
                     f"{spread_text({k: v * 100 for k, v in ok.items()}, '.2f')}% |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    own, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv \
        else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--label", default="protocols")
    args = parser.parse_args(own)
    protocols = args.protocols.split(",")
    if unknown := [p for p in protocols if p not in PROTOCOLS]:
        parser.error(f"unknown protocols {unknown}: use {', '.join(PROTOCOLS)}")
    grpc_port = free_port()
    flags = [*FIXED_FLAGS, "--enable_grpc", "true", "--grpc_port", str(grpc_port), *extra]
    context = run_context(f"python -m bench.cpu_bench {' '.join(argv)}".strip(),
                          flags=flags, runs=args.runs, duration_s=args.duration_s)
    with tempfile.TemporaryDirectory(prefix="bench-cpu-") as tmp:
        registry = Path(tmp) / "registry"
        push_fixed_latency(registry, latency_ms=100, max_batch_size=100)
        # INFO, the predictor's default: per-request log lines cost what they cost.
        with predictor(MODEL, registry, *flags, log_level="INFO") as server:
            results = [measure(p, server, grpc_port, args.rate, args.runs, args.duration_s)
                       for p in protocols]
    print(write_results(f"cpu-{args.label}", context, results, markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
