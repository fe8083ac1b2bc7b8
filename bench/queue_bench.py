"""Queue-decoupled serving benchmarks (issue 15), open loop, on ``fixed-latency``.

    python -m bench.queue_bench capacity [--workers 1,2,4] [--rates 500,800,...]
    python -m bench.queue_bench overhead     # in-process against queue at 500 req/s
    python -m bench.queue_bench recovery     # a worker SIGKILLed every 5 s, restarted
    python -m bench.queue_bench all [--runs 3] [--deadline-ms 230]
    python -m bench.queue_bench report --from bench/results/queue-all.json  # Markdown again

Every run starts its own redis-server (loopback, AOF everysec) and a fresh fleet (two
frontends and W workers, ``python -m predictor``), all stopped by PID after it. The load
comes from two generator processes (``bench.loadgen``), one per frontend, each offering
half the rate. The CPU time of every process (frontends, workers, redis-server,
generators) and of the whole machine is read before and after each run. Each figure is
the median of ``--runs`` runs (min and max kept). The servers run predictor_bench's
fixed-latency flags (deadline 230 ms for the 250 ms budget; ``--deadline-ms`` changes it).
Results: ``bench/results/queue-<figure>[-deadline<ms>].{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench._queue_fleet import (
    CLIENT_TIMEOUT_S,
    MODEL,
    RUN_KEYS,
    WARMUP_S,
    Fleet,
    Settings,
    generate,
    generator_pool,
    in_process,
    measure,
    queue_fleet,
)
from bench._queue_report import (
    WORKER_LIMIT_RPS,
    highest_meeting,
    markdown,
    merge_loads,
    next_load,
    per_kill,
    progress,
    spread,
    summarise,
)
from bench._results import run_context, write_results
from bench._servers import Server, machine_busy_s, push_fixed_latency
from bench.peers._measure import RunProtocol, wait_until_quiet


# -- the figures ----------------------------------------------------------------------------
def bench_capacity(pool: Any, registry: Path, worker_counts: Sequence[int],
                   rates: Sequence[float], runs: int, duration_s: float,
                   settings: Settings, until_saturated: bool = False) -> dict[str, Any]:
    """Per W: the ladder of ``rates`` up to W x 1,000 req/s, stopping after the first load
    whose median misses the target, or with ``until_saturated`` the first not kept up
    with (``next_load``)."""
    configs = []
    for w in worker_counts:
        ladder = [r for r in rates if r <= w * WORKER_LIMIT_RPS]
        rows: list[dict[str, Any]] = []
        while (rate := next_load(rows, ladder, until_saturated=until_saturated)) is not None:
            measured = []
            for _ in range(runs):
                with queue_fleet(registry, 2, w, settings) as fleet:
                    measured.append(measure(pool, fleet, rate, duration_s, settings))
            rows.append(summarise(rate, measured, RUN_KEYS))
            print(progress(f"capacity W={w}", rows[-1]), flush=True)
        rows.sort(key=lambda r: r["offered_rps"])
        best = highest_meeting(rows)
        configs.append({"workers": w, "limit_rps": w * WORKER_LIMIT_RPS, "rows": rows,
                        "highest_meeting_rps": best["offered_rps"] if best else None,
                        "ratio": best["offered_rps"] / (w * WORKER_LIMIT_RPS) if best else 0.0})
    return {"scenario": "capacity", "frontends": 2, "configs": configs}


def bench_overhead(pool: Any, registry: Path, rate: float, runs: int,
                   duration_s: float, settings: Settings) -> dict[str, Any]:
    """The same load in-process and queue-decoupled (2 frontends, 1 worker), alternating."""
    measured: dict[str, list[dict[str, Any]]] = {"in-process": [], "queue": []}
    for _ in range(runs):
        with in_process(registry, settings) as fleet:
            measured["in-process"].append(measure(pool, fleet, rate, duration_s, settings))
        with queue_fleet(registry, 2, 1, settings) as fleet:
            measured["queue"].append(measure(pool, fleet, rate, duration_s, settings))
    rows = {mode: summarise(rate, m, RUN_KEYS) for mode, m in measured.items()}
    for mode, row in rows.items():
        print(progress(f"overhead {mode}", row), flush=True)
    diff = rows["queue"]["p99_ms"]["median"] - rows["in-process"]["p99_ms"]["median"]
    return {"scenario": "overhead", "rate": rate, "rows": rows, "p99_diff_ms": diff}


STREAM = f"modelctl:{{{MODEL}:1}}:requests"  # version 1: the registry is fresh


def _held_by(redis_client: Any, pid: int) -> int:
    """Entries pending (delivered, not acknowledged) for the worker with PID ``pid``."""
    summary = redis_client.xpending(STREAM, "workers")
    return sum(int(c["pending"]) for c in summary.get("consumers") or []
               if f"-{pid}-" in c["name"].decode())


def _is_ready(server: Server) -> bool:
    try:
        return httpx.get(f"{server.url}/v2/health/ready", timeout=0.2).status_code == 200
    except httpx.HTTPError:
        return False


def _supervise(fleet: Fleet, kill_at: list[float], started: float) -> list[dict[str, Any]]:
    """SIGKILL the oldest worker at each ``kill_at`` (s after ``started``) and start a new
    one at once; what each kill found and how long its replacement took to be ready."""
    assert fleet.redis is not None
    client = fleet.redis.client()
    kills: list[dict[str, Any]] = []
    starting: list[tuple[Server, dict[str, Any]]] = []
    while kill_at or (starting and time.monotonic() - started < kills[-1]["at_s"] + 30):
        now = time.monotonic() - started
        if kill_at and now >= kill_at[0]:
            kill_at.pop(0)
            victim = fleet.workers.pop(0)
            held = _held_by(client, victim.proc.pid)
            victim.proc.signal(signal.SIGKILL)
            kill: dict[str, Any] = {"at_s": round(now, 2), "held": held,
                                    "ready_after_s": None}
            kills.append(kill)
            starting.append((fleet.add_worker(), kill))
        for new, kill in list(starting):
            if _is_ready(new):
                kill["ready_after_s"] = round(time.monotonic() - started - kill["at_s"], 2)
                starting.remove((new, kill))
        time.sleep(0.02)
    return kills


def _recovery_run(pool: Any, registry: Path, rate: float, duration_s: float,
                  kill_every_s: float, settings: Settings) -> dict[str, Any]:
    with queue_fleet(registry, 2, 2, settings) as fleet:
        assert fleet.redis is not None
        gate = wait_until_quiet(RunProtocol(quiet_busy_pct=25.0,
                                            quiet_deadline_s=settings.quiet_wait_s))
        busy0 = machine_busy_s()
        share = rate / len(fleet.urls)
        pending = pool.starmap_async(generate, [(u, share, duration_s) for u in fleet.urls])
        started = time.monotonic()
        kill_at = [WARMUP_S + k * kill_every_s
                   for k in range(int((duration_s - 1.0) // kill_every_s) + 1)]
        kills = _supervise(fleet, kill_at, started)
        outs = pending.get(timeout=WARMUP_S + duration_s + CLIENT_TIMEOUT_S + 60)
        machine_cores = (machine_busy_s() - busy0) / (time.monotonic() - started)
        client = fleet.redis.client()
        time.sleep(1.0)  # the claim timeout, a few times over: what is left is stuck
        info = client.xinfo_groups(STREAM)
        run = merge_loads([o[0] for o in outs])
        run["kills"] = kills
        run["gate"], run["machine_cores"] = gate, machine_cores
        run["pending_after"] = int(info[0]["pending"]) if info else 0
        run["dead_lettered"] = int(client.xlen(STREAM.replace(":requests", ":dead")))
        run["answered_ratio"] = 1 - (run["status_counts"].get("timeout", 0)
                                     + run["status_counts"].get("conn_error", 0)) / run["sent"]
        samples = [(gen_start - started + r.samples.scheduled_s, r.samples.latency_s,
                    r.samples.status) for r, _cpu, gen_start in outs]
        run["per_kill"] = per_kill(samples, kills, kill_every_s)
        return run


def bench_recovery(pool: Any, registry: Path, rate: float, runs: int, duration_s: float,
                   settings: Settings, kill_every_s: float = 5.0) -> dict[str, Any]:
    """2 frontends, 2 workers at ``rate``; a worker SIGKILLed every ``kill_every_s``."""
    measured = []
    for _ in range(runs):
        run = _recovery_run(pool, registry, rate, duration_s, kill_every_s, settings)
        measured.append(run)
        print(f"recovery {rate:.0f} req/s: {len(run['kills'])} kills, answered "
              f"{run['answered_ratio']:.4f}, 2xx {run['success_ratio']:.4f}, p99 "
              f"{run['p99_ms']:.0f} ms, statuses {run['status_counts']}, pending after "
              f"{run['pending_after']}, dead-lettered {run['dead_lettered']}", flush=True)
    keys = ("throughput_rps", "success_ratio", "answered_ratio", "p50_ms", "p99_ms", "max_ms",
            "pending_after", "dead_lettered")
    row = {"offered_rps": rate, "runs": measured, **{k: spread([r[k] for r in measured])
                                                     for k in keys}}
    return {"scenario": "recovery", "rate": rate, "kill_every_s": kill_every_s,
            "frontends": 2, "workers": 2, "row": row}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("figure", choices=("capacity", "overhead", "recovery", "all", "report"))
    parser.add_argument("--from", dest="source", type=Path,
                        help="report: the results JSON to render as Markdown again")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rates", default="500,800,1000,1200,1600,2000,3000,4000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds measured per run")
    parser.add_argument("--overhead-rate", type=float, default=500.0)
    parser.add_argument("--recovery-rate", type=float, default=500.0)
    parser.add_argument("--recovery-duration", type=float, default=30.0)
    parser.add_argument("--until", choices=("target", "saturated"), default="target",
                        help="how far up the capacity ladder goes: the first load missing "
                             "the target, or the first that is not kept up with")
    parser.add_argument("--deadline-ms", type=int, default=230,
                        help="the servers' --request_timeout_ms (predictor_bench's 230)")
    parser.add_argument("--quiet-wait", type=float, default=5.0,
                        help="longest wait for a quiet machine before each run, s")
    parser.add_argument("--retries", type=int, default=1,
                        help="runs measured again when other work used > 0.5 cores in them")
    args = parser.parse_args(argv)
    if args.figure == "report":
        saved = json.loads(args.source.read_text())
        args.source.with_suffix(".md").write_text(markdown(saved["context"], saved["results"]))
        return 0
    settings = Settings(args.deadline_ms, quiet_wait_s=args.quiet_wait, retries=args.retries)
    context = run_context("python -m bench.queue_bench " + " ".join(argv),
                          deadline_ms=args.deadline_ms)
    began = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-reg-") as tmp, generator_pool() as pool:
        registry = Path(tmp) / "registry"
        push_fixed_latency(registry, latency_ms=100, max_batch_size=100)
        if args.figure in ("capacity", "all"):
            results.append(bench_capacity(pool, registry,
                                          [int(w) for w in args.workers.split(",")],
                                          [float(r) for r in args.rates.split(",")],
                                          args.runs, args.duration, settings,
                                          args.until == "saturated"))
        if args.figure in ("overhead", "all"):
            results.append(bench_overhead(pool, registry, args.overhead_rate, args.runs,
                                          args.duration, settings))
        if args.figure in ("recovery", "all"):
            results.append(bench_recovery(pool, registry, args.recovery_rate, args.runs,
                                          args.recovery_duration, settings))
    context["wall_s"] = round(time.monotonic() - began, 1)
    context["load_avg_at_end"] = os.getloadavg()
    suffix = "" if args.deadline_ms == Settings.deadline_ms else f"-deadline{args.deadline_ms}"
    print(write_results(f"queue-{args.figure}{suffix}", context, results, markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
