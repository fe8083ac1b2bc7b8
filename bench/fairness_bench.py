"""Fair share across tenants (issue 34): a tenant at 5x the server's capacity beside one
at 20% of it, with the fair order and without.

    python -m bench.fairness_bench [--runs 3] [--duration 20]

One predictor on a fixed-latency model (``--latency-ms`` per batch of at most
``--batch`` items: capacity ``batch / latency`` items a second, 40 by default), with a
tenants file of two tenants, ``heavy`` and ``light``, equal weights, no rate limits (so
only the batcher's fair order protects ``light``). Open-loop constant-rate loads from
``bench.loadgen``, each phase ``--duration`` seconds after 2 s of warm-up:

- ``alone``: ``light`` at 20% of capacity, nothing else: its p99 alone;
- ``fair``: ``heavy`` at 5x capacity and ``light`` at 20%, at once, on the same server;
- ``fifo``: the same loads on a predictor without the tenants file (every request one
  flow: first come, first served), the peer in the same run.

Targets (the issue's): ``light``'s p99 under ``fair`` within 1.5x of ``alone``, ``heavy``
answered 429 for what does not fit, and the device busy (2xx throughput of both near
capacity). Results: ``bench/results/fairness.{json,md}``.
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
from bench._servers import predictor, push_fixed_latency
from bench._spread import spread, spread_text
from bench.loadgen import LoadResult, run_open_loop_async
from common.tenants import hash_key, new_key

KEYS = {"heavy": new_key(), "light": new_key()}
MODEL = "bench-fixed"


def _phase(url: str, loads: dict[str, float], duration_s: float,
           keys: dict[str, str] | None) -> dict[str, LoadResult]:
    """Run each tenant's load at its rate, all at once; each one's result."""
    async def run() -> list[LoadResult]:
        return list(await asyncio.gather(*(
            run_open_loop_async(url, rate=rate, duration_s=duration_s, warmup_s=2.0,
                                body={"instances": [name]}, timeout_s=30.0,
                                headers={"authorization": f"Bearer {keys[name]}"} if keys
                                else None)
            for name, rate in loads.items())))

    return dict(zip(loads, asyncio.run(run()), strict=True))


def _row(phase: str, run: int, results: dict[str, LoadResult]) -> dict[str, Any]:
    row: dict[str, Any] = {"phase": phase, "run": run}
    for name, result in results.items():
        row[name] = {"offered_rps": result.offered_rate_rps, "ok_rps": result.throughput_rps,
                     "p99_ms": (result.latency_ok.p99_s or 0) * 1000,
                     "p50_ms": (result.latency_ok.p50_s or 0) * 1000,
                     "status_counts": result.status_counts,
                     "on_schedule": result.is_on_schedule()}
    return row


def measure(runs: int, duration_s: float, latency_ms: float, batch: int) -> list[dict[str, Any]]:
    capacity = batch * 1000.0 / latency_ms
    heavy, light = 5 * capacity, 0.2 * capacity
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-fair-") as tmp:
        registry = Path(tmp) / "registry"
        push_fixed_latency(registry, latency_ms, batch)
        tenants = Path(tmp) / "tenants.yaml"
        tenants.write_text(yaml.safe_dump({"tenants": {
            name: {"keys": [hash_key(key)]} for name, key in KEYS.items()}}))
        # A 2 s deadline keeps the heavy tenant's admitted backlog to 2 s of work.
        common = ("--request_timeout_ms", "2000", "--max_batch_wait_ms", "5")
        for run in range(1, runs + 1):
            with predictor(MODEL, registry, *common, "--tenants_file", str(tenants)) as server:
                rows.append(_row("alone", run, _phase(server.predict_url, {"light": light},
                                                      duration_s, KEYS)))
                rows.append(_row("fair", run, _phase(
                    server.predict_url, {"heavy": heavy, "light": light}, duration_s, KEYS)))
            with predictor(MODEL, registry, *common) as server:
                rows.append(_row("fifo", run, _phase(
                    server.predict_url, {"heavy": heavy, "light": light}, duration_s, None)))
            print(f"run {run}: " + ", ".join(
                f"{r['phase']} light p99 {r['light']['p99_ms']:.0f} ms"
                for r in rows[-3:]), file=sys.stderr)
    return rows


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    def cell(phase: str, tenant: str, key: str) -> dict[str, float] | None:
        return spread([r[tenant][key] for r in rows if r["phase"] == phase and tenant in r])

    def ratio(phase: str) -> dict[str, float] | None:
        alone = {r["run"]: r["light"]["p99_ms"] for r in rows if r["phase"] == "alone"}
        return spread([r["light"]["p99_ms"] / alone[r["run"]] for r in rows
                       if r["phase"] == phase and alone.get(r["run"])])

    def refused(phase: str, tenant: str) -> dict[str, float] | None:
        return spread([r[tenant]["status_counts"].get("429", 0) for r in rows
                       if r["phase"] == phase and tenant in r])

    return {phase: {"light_p99_ms": cell(phase, "light", "p99_ms"),
                    "light_p99_vs_alone": ratio(phase) if phase != "alone" else None,
                    "light_ok_rps": cell(phase, "light", "ok_rps"),
                    "light_429": refused(phase, "light"),
                    "heavy_ok_rps": cell(phase, "heavy", "ok_rps"),
                    "heavy_429": refused(phase, "heavy")}
            for phase in ("alone", "fair", "fifo")}


def markdown(context: dict[str, Any], results: Sequence[dict[str, Any]]) -> str:
    table = summary(results)
    lines = [f"`{context['command']}`: {context['machine']}, {context['date']}, commit "
             f"{context['commit']}; capacity {context['capacity_rps']:.0f} items/s, heavy "
             f"{5 * context['capacity_rps']:.0f} req/s, light "
             f"{0.2 * context['capacity_rps']:.0f} req/s; median (min-max) of "
             f"{context['runs']} runs.", "",
             "| phase | light p99 ms | light p99 / alone | light 2xx/s | light 429s | "
             "heavy 2xx/s | heavy 429s |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for phase, cells in table.items():
        lines.append(f"| {phase} | {spread_text(cells['light_p99_ms'])} | "
                     f"{spread_text(cells['light_p99_vs_alone'], '.2f')} | "
                     f"{spread_text(cells['light_ok_rps'], '.1f')} | "
                     f"{spread_text(cells['light_429'])} | "
                     f"{spread_text(cells['heavy_ok_rps'], '.1f')} | "
                     f"{spread_text(cells['heavy_429'])} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness_bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per phase")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="per batch")
    parser.add_argument("--batch", type=int, default=2, help="largest batch")
    args = parser.parse_args(argv)
    capacity = args.batch * 1000.0 / args.latency_ms
    command = "python -m bench.fairness_bench " + " ".join(argv or sys.argv[1:])
    context = run_context(command.strip(), runs=args.runs, capacity_rps=capacity,
                          duration_s=args.duration)
    rows = measure(args.runs, args.duration, args.latency_ms, args.batch)
    sys.stdout.write(write_results("fairness", context, rows, markdown))


if __name__ == "__main__":
    main()
