"""How much load the generator itself can offer, against the trivial server on this machine.

Starts ``bench.loadgen._server`` as a child process, offers rising rates with 1 and
then 2 workers (``--runs`` runs each), and reports the highest rate whose median run
(by p99 send lag) was *delivered* (2xx throughput within 1% of the offered rate, no
failures) and *sustained* (delivered, and the generator on schedule: p99 send lag
<= 5 ms). Both processes share the machine, as they do in every benchmark; the load
average before each rate is recorded, since other work on the machine shows up as lag.

Run: ``python -m bench.loadgen._capacity [--runs 3] [--duration-s 5] [--workers 1,2]
[--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from bench.loadgen import LoadResult, run_open_loop

RATES = (1_200, 2_500, 5_000, 7_500, 10_000, 12_500, 15_000, 20_000)


def is_delivered(result: LoadResult) -> bool:
    """The offered rate came back as 2xx throughput, every request answered 200."""
    return result.throughput_rps >= 0.99 * result.offered_rate_rps and result.success_ratio == 1.0


def is_sustained(result: LoadResult) -> bool:
    """Delivered, and the generator kept its schedule (p99 send lag <= 5 ms)."""
    return is_delivered(result) and result.is_on_schedule()


def sweep(url: str, workers: int, runs: int, duration_s: float) -> list[dict[str, Any]]:
    """One row per rate, until two rates in a row are not delivered by their median run."""
    rows: list[dict[str, Any]] = []
    misses = 0
    for rate in RATES:
        load_before = os.getloadavg()[0]
        results = [
            run_open_loop(
                url,
                rate=rate,
                duration_s=duration_s,
                warmup_s=1.0,
                workers=workers,
                body=b'{"instances":["hi"]}',
                timeout_s=5.0,
            )
            for _ in range(runs)
        ]
        results.sort(key=lambda r: r.send_lag.p99_s or 0.0)
        median = results[len(results) // 2]
        rows.append(
            {
                "workers": workers,
                "rate": rate,
                "load_avg_1m_before": round(load_before, 2),
                "throughput_rps": [round(r.throughput_rps, 1) for r in results],
                "p99_send_lag_ms": [round((r.send_lag.p99_s or 0.0) * 1e3, 2) for r in results],
                "p99_latency_ms": [round((r.latency_all.p99_s or 0.0) * 1e3, 2) for r in results],
                "median_delivered": is_delivered(median),
                "median_sustained": is_sustained(median),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        misses = 0 if is_delivered(median) else misses + 1
        if misses == 2:
            break
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=5.0)
    parser.add_argument("--workers", default="1,2", help="worker counts to sweep, e.g. 1,2")
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.loadgen._server", "--port", str(port)],
        start_new_session=True,
    )
    try:
        _wait_listening(port, timeout_s=30.0)
        url = f"http://127.0.0.1:{port}/ok"
        counts = [int(w) for w in args.workers.split(",")]
        rows = [row for w in counts for row in sweep(url, w, args.runs, args.duration_s)]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    summary = {
        f"max_{kind}_rps_by_workers": {w: _best(rows, w, kind) for w in counts}
        for kind in ("delivered", "sustained")
    }
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({**summary, "rows": rows}, f, indent=2)
    print(json.dumps(summary))


def _best(rows: list[dict[str, Any]], workers: int, kind: str) -> int:
    passed = [r["rate"] for r in rows if r["workers"] == workers and r[f"median_{kind}"]]
    return max(passed, default=0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"the trivial server did not listen on port {port} in {timeout_s}s")


if __name__ == "__main__":
    main()
