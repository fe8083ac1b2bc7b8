"""Server CPU per request of uvicorn (httptools + uvloop, as the predictor runs it) and
granian (Rust HTTP, ``--interface asgi``) on the same do-nothing ASGI app.

    python -m bench.asgi [--rates 500,1000,2000] [--runs 3] [--duration-s 10]

granian is not a dependency of this project: it runs from its own virtualenv,
``bench/.venv-granian`` (``python3.11 -m venv bench/.venv-granian &&
bench/.venv-granian/bin/pip install granian==2.8.7 uvloop``). The open-loop generator
(``bench.loadgen``) offers each rate; the server's process tree CPU (psutil) over the
requests sent is its cost. Results: ``bench/results/asgi-servers.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._results import run_context, write_results
from bench._servers import process_cpu_s
from bench._spread import spread, spread_text
from bench.loadgen import run_open_loop
from tests.support.procs import ManagedProcess, free_port, wait_http_ok

ROOT = Path(__file__).resolve().parents[2]
GRANIAN = ROOT / "bench" / ".venv-granian" / "bin" / "granian"
APP = "bench.asgi._echo:app"


def _argv(server: str, port: int) -> list[str]:
    if server == "uvicorn":
        return [sys.executable, "-m", "uvicorn", APP, "--host", "127.0.0.1", "--port",
                str(port), "--http", "httptools", "--loop", "uvloop", "--no-access-log",
                "--log-level", "warning"]
    return [str(GRANIAN), "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--loop", "uvloop", "--no-ws", "--log-level", "warning", APP]


def measure(server: str, rates: Sequence[float], runs: int, duration_s: float,
            log_dir: Path) -> list[dict[str, Any]]:
    port = free_port()
    proc = ManagedProcess(f"asgi-{server}", _argv(server, port), log_dir=log_dir)
    rows = []
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_http_ok(url, timeout_s=30, proc=proc)
        run_open_loop(url, rate=200, duration_s=2.0, body=b"{}")  # warm-up
        for rate in rates:
            cpu, p99 = [], []
            for _ in range(runs):
                cpu0 = process_cpu_s(proc.pid)
                result = run_open_loop(url, rate=rate, duration_s=duration_s,
                                       body=b'{"instances":["hi"]}')
                cpu.append((process_cpu_s(proc.pid) - cpu0) * 1e6 / max(1, result.sent))
                p99.append((result.latency_ok.p99_s or 0.0) * 1000.0)
            rows.append({"server": server, "rate": rate, "cpu_us_per_request": spread(cpu),
                         "p99_ms": spread(p99)})
            print(f"  {server} at {rate:g} req/s: {spread_text(rows[-1]['cpu_us_per_request'])} "
                  f"us CPU per request", flush=True)
    finally:
        proc.stop()
    return rows


def markdown(context: dict[str, Any], results: Sequence[dict[str, Any]]) -> str:
    lines = [f"# ASGI servers, CPU per request ({context['date']})", "",
             f"`{context['command']}` at {context['commit']}, {context['machine']}; "
             f"granian {context['granian']}.", "",
             "| Server | Rate | CPU µs per request, median (min-max) | p99 ms |",
             "|---|---:|---|---|"]
    lines += [f"| {r['server']} | {r['rate']:g} | {spread_text(r['cpu_us_per_request'])} | "
              f"{spread_text(r['p99_ms'], '.1f')} |" for r in results]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="500,1000,2000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    if not GRANIAN.exists():
        parser.error(f"no {GRANIAN}: make it with `python3.11 -m venv bench/.venv-granian && "
                     "bench/.venv-granian/bin/pip install granian==2.8.7 uvloop`")
    import subprocess
    import tempfile

    version = subprocess.run([str(GRANIAN), "--version"], capture_output=True, text=True,
                             check=False).stdout.strip()
    rates = [float(r) for r in args.rates.split(",")]
    context = run_context(f"python -m bench.asgi {' '.join(argv)}".strip(), granian=version)
    with tempfile.TemporaryDirectory(prefix="bench-asgi-") as tmp:
        results = [row for server in ("uvicorn", "granian")
                   for row in measure(server, rates, args.runs, args.duration_s, Path(tmp))]
    print(write_results("asgi-servers", context, results, markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
