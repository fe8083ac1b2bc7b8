"""Benchmarks against peers (issue 18): the predictor, in process and in queue mode, beside
KServe without batching, Ray Serve, BentoML, Mosec, NVIDIA Triton (PyTriton) and, on the
embedding model, Infinity, on the same machine and workloads, under open-loop load.

    bench/peers/setup.sh                       # once: bench/.venv-peers and .venv-peers-np1
    python -m bench.compare all                # tune, then the matrix, then the plots
    python -m bench.compare tune               # only the knob sweep (fixed-latency)
    python -m bench.compare matrix --tuning bench/results/peers-tuning.json
    python -m bench.compare report             # peers.md and plots again from peers.json

``tune`` sweeps each server's main knob on fixed-latency (Infinity's on short texts,
the only workload it serves; one short run per load point, rising until a point is
saturated) and keeps the value that sustains the most.
``matrix`` measures, for every server, rising loads until one is saturated:
fixed-latency with the default *and* the tuned knob; the real embedding
model (short and mixed-length texts) with the tuned knob. A server that meets the
SLO at none of the loads is also tried at 25, 10 and 5 req/s. Each load point is
``--runs`` runs; every figure is their median with min and max. Results:
``peers.json`` and ``peers.md`` under ``--out`` (default ``bench/results``), and the
plots (``bench/plots.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.peers._configs import (
    MAX_BATCH_SIZE,
    SERVERS,
    SLO_P99_MS,
    PeerConfig,
    best_knob,
    slo_p99_ms,
    sustained_load,
)
from bench.peers._launch import Workload, encoder_dir, prepare_registry
from bench.peers._measure import RunProtocol, figures, run_ladder, texts

RESULTS = Path(__file__).parent / "results"
FIXED_LOADS = (200, 500, 800, 1000, 1200)
LOW_LOADS = (50, 25, 10, 5)  # tried only when a server meets the SLO at none of the loads
EMBED_LOADS = {"short": (100, 200, 400, 600, 800), "mixed": (25, 50, 100, 150)}
LATENCY_MS = 100.0


def _csv(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x)


def tune(protocol: RunProtocol, ladders: dict[str, tuple[Workload, tuple[float, ...]]],
         log_dir: Path, servers: list[str]) -> dict[str, Any]:
    """Sweep each server's main knob on the first workload it serves (``ladders`` gives
    each workload and its loads): rising loads until one is saturated."""
    out: dict[str, Any] = {"protocol": asdict(protocol), "servers": {},
                           "loads": {name: list(loads) for name, (_, loads) in ladders.items()}}
    for name in servers:
        kind = SERVERS[name]
        if kind.knob is None:
            continue
        workload, loads = ladders[kind.workloads[0]]
        slo = slo_p99_ms(workload.name)
        sweep: dict[float, list[dict[str, Any]]] = {}
        values = []
        for value in kind.knob_candidates:
            config = PeerConfig(name, "tuned", value)
            line = run_ladder(config, workload, loads, protocol, log_dir, LOW_LOADS)
            sweep[value] = line["rows"]
            values.append({"value": value, "rows": line["rows"],
                           "sustained_rps": sustained_load(line["rows"], slo)})
        out["servers"][name] = {"knob": kind.knob, "default": kind.knob_default,
                                "workload": workload.key, "slo_p99_ms": slo,
                                "best": best_knob(sweep, slo), "values": values}
    return out


def _physical_limit(workload: Workload, runs: int) -> float:
    """Fixed-latency: max batch / latency. Embedding: in-process batched items/s, median."""
    if workload.name == "fixed-latency":
        return MAX_BATCH_SIZE / (workload.latency_ms / 1000.0)
    from bench.peers._workloads import EmbeddingModel

    model = EmbeddingModel(workload.model_dir, workload.device)
    items = texts(workload.texts or "short", 400)
    best = []
    for _ in range(runs):
        rates = []
        for size in (1, 32, MAX_BATCH_SIZE):
            started = time.perf_counter()
            for i in range(0, len(items), size):
                model.run(items[i:i + size])
            rates.append(len(items) / (time.perf_counter() - started))
        best.append(max(rates))
    return statistics.median(best)


def resolve_device(device: str) -> str:
    """``auto`` is CUDA when torch sees a GPU, else CPU (as the predictor decides)."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def matrix(args: argparse.Namespace, tuned: dict[str, float], registry: Path,
           log_dir: Path) -> list[dict[str, Any]]:
    protocol = _protocol(args)
    deadline = time.monotonic() + args.budget_s if args.budget_s > 0 else None
    parts = []
    plans: list[tuple[Workload, tuple[float, ...], list[PeerConfig]]] = []
    defaults = [PeerConfig(name) for name in args.servers]
    best = [_best_config(name, tuned) for name in args.servers]
    if "fixed-latency" in args.workloads:
        configs = [c for c in defaults if "fixed-latency" in c.kind.workloads]
        configs += [c for c in best if c.variant == "tuned"
                    and "fixed-latency" in c.kind.workloads]
        plans.append((_fixed(args, registry), _csv(args.fixed_loads), configs))
    if "embedding" in args.workloads:
        for kind, loads in (("short", args.short_loads), ("mixed", args.mixed_loads)):
            # Infinity, tuned on these texts, is measured with its default beside.
            configs = [c for c in best if "embedding" in c.kind.workloads]
            configs += [c for c in defaults if c.server == "infinity"
                        and c not in configs and c.server in args.servers]
            plans.append((_embedding(args, registry, kind), _csv(loads), configs))
    for workload, loads, configs in plans:
        limit = _physical_limit(workload, runs=protocol.runs)
        wl_protocol = protocol if workload.name == "fixed-latency" else replace(
            protocol, settle_ok_s=args.embed_settle_ok_s)
        lines = [run_ladder(c, workload, loads, wl_protocol, log_dir, LOW_LOADS, deadline)
                 for c in configs]
        parts.append({"key": workload.key, "name": workload.name, "texts": workload.texts,
                      "device": workload.device, "physical_limit_rps": limit,
                      "latency_floor_ms": LATENCY_MS if workload.name == "fixed-latency"
                      else None, "servers": lines})
    return parts


def _fixed(args: argparse.Namespace, registry: Path) -> Workload:
    return Workload("fixed-latency", latency_ms=LATENCY_MS, device=args.device,
                    registry=str(registry))


def _embedding(args: argparse.Namespace, registry: Path, texts_kind: str) -> Workload:
    return Workload("embedding", texts_kind, device=args.device, model_dir=encoder_dir(),
                    registry=str(registry))


def _best_config(name: str, tuned: dict[str, float]) -> PeerConfig:
    """The server with its tuned knob, or its default where tuning kept the default."""
    value = tuned.get(name)
    if value is None or value == SERVERS[name].knob_default:
        return PeerConfig(name)
    return PeerConfig(name, "tuned", value)


def _protocol(args: argparse.Namespace) -> RunProtocol:
    return RunProtocol(runs=args.runs, duration_s=args.duration_s, warmup_s=args.warmup_s,
                       timeout_s=args.timeout_s, quiet_deadline_s=args.quiet_deadline_s)


def _machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, {platform.platform()}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("all", "tune", "matrix", "report"))
    parser.add_argument("--servers", default=",".join(SERVERS),
                        help="comma-separated, from: " + ", ".join(SERVERS))
    parser.add_argument("--workloads", default="fixed-latency,embedding")
    parser.add_argument("--fixed-loads", default=",".join(map(str, FIXED_LOADS)))
    parser.add_argument("--short-loads", default=",".join(map(str, EMBED_LOADS["short"])))
    parser.add_argument("--mixed-loads", default=",".join(map(str, EMBED_LOADS["mixed"])))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=4.0)
    parser.add_argument("--warmup-s", type=float, default=1.0)
    parser.add_argument("--timeout-s", type=float, default=3.0)
    parser.add_argument("--quiet-deadline-s", type=float, default=3.0)
    parser.add_argument("--embed-settle-ok-s", type=float, default=0.5)
    parser.add_argument("--tune-duration-s", type=float, default=4.0)
    parser.add_argument("--budget-s", type=float, default=0.0,
                        help="start no load point after this many seconds (0: no limit)")
    parser.add_argument("--tuning", type=Path, help="a peers-tuning.json to take knobs from")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.device = resolve_device(args.device)
    args.servers = [s for s in args.servers.split(",") if s]
    args.workloads = [w for w in args.workloads.split(",") if w]
    unknown = [s for s in args.servers if s not in SERVERS]
    if unknown:
        parser.error(f"unknown servers: {', '.join(unknown)}")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # SIGTERM unwinds like an exception, so every server started is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python -m bench.compare " + " ".join(argv)
    if args.what == "report":
        results = json.loads((args.out / "peers.json").read_text())
        for part in results["workloads"]:  # the figures, by the current rules
            for line in part["servers"]:
                line.update(figures(line["rows"], part["name"]))
        (args.out / "peers.json").write_text(json.dumps(results, indent=2) + "\n")
        _write_report(args.out, results)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        log_dir, registry = Path(tmp), Path(tmp) / "registry"
        prepare_registry(registry, LATENCY_MS)
        tuning: dict[str, Any] | None = None
        if args.what in ("all", "tune"):
            protocol = replace(_protocol(args), runs=1, duration_s=args.tune_duration_s)
            ladders = {"fixed-latency": (_fixed(args, registry), _csv(args.fixed_loads)),
                       "embedding": (_embedding(args, registry, "short"),
                                     _csv(args.short_loads))}
            tuning = tune(protocol, ladders, log_dir, args.servers)
            tuning.update(command=command, date=_today(), machine=_machine())
            (args.out / "peers-tuning.json").write_text(json.dumps(tuning, indent=2) + "\n")
        else:
            source = args.tuning or args.out / "peers-tuning.json"
            if source.exists():
                tuning = json.loads(source.read_text())
        if args.what == "tune":
            return 0
        # Re-decided from the sweep's rows, so a stored file follows the current rule.
        tuned = {name: best_knob({float(v["value"]): v["rows"] for v in s["values"]},
                                 float(s.get("slo_p99_ms", SLO_P99_MS["fixed-latency"])))
                 for name, s in (tuning or {}).get("servers", {}).items()}
        for name, value in tuned.items():
            if tuning is not None:
                tuning["servers"][name]["best"] = value
        results = {"command": command, "date": _today(), "machine": _machine(),
                   "protocol": asdict(_protocol(args)), "protocol_text": _protocol_text(args),
                   "tuning": tuning, "workloads": matrix(args, tuned, registry, log_dir)}
    (args.out / "peers.json").write_text(json.dumps(results, indent=2) + "\n")
    _write_report(args.out, results)
    return 0


def _write_report(out: Path, results: dict[str, Any]) -> None:
    """peers.md and the plots from the results (``report`` redoes them from peers.json)."""
    from bench.peers._report import markdown
    from bench.plots import plot_all

    (out / "peers.md").write_text(markdown(results) + "\n")
    for path in plot_all(out / "peers.json", out):
        print(f"wrote {path}")
    print(markdown(results))


def _today() -> str:
    return datetime.now(UTC).date().isoformat()


def _protocol_text(args: argparse.Namespace) -> str:
    return (f"open loop (constant arrivals), {args.runs} runs per load point of "
            f"{args.warmup_s:g} s warm-up + {args.duration_s:g} s measured, client timeout "
            f"{args.timeout_s:g} s; one server process per workload and configuration, "
            "settled (queue drained) before each run; figures are the median (min-max) "
            "of the runs")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
