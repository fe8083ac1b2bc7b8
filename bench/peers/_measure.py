"""Measure servers under open-loop load: quiet gate, settling, one run, a load ladder."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench._spread import spread
from bench.loadgen import run_open_loop
from bench.peers._configs import (
    PeerConfig,
    cpu_row,
    passes_slo,
    saturation_rps,
    should_stop,
    slo_p99_ms,
    sustained_load,
)
from bench.peers._launch import RunningServer, Workload, serve
from tests.support.procs import wait_for

SPREAD_KEYS = ("throughput_rps", "success_ratio", "p50_ms", "p90_ms", "p99_ms", "max_ms",
               "mean_batch", "server_cpu_s", "server_cpu_cores", "cpu_ms_per_request",
               "send_lag_p99_ms")


@dataclass(frozen=True)
class RunProtocol:
    """How each load point is measured (seconds throughout)."""

    runs: int = 3
    duration_s: float = 4.0
    warmup_s: float = 1.0
    timeout_s: float = 3.0
    quiet_load_1m: float = 1.0
    quiet_busy_pct: float = 30.0
    quiet_deadline_s: float = 3.0
    settle_ok_s: float = 0.4
    settle_deadline_s: float = 20.0
    saturated_points: int = 1  # stop a ladder after this many saturated points in a row

    def __post_init__(self) -> None:
        if self.runs < 1 or self.duration_s <= 0 or self.warmup_s < 0 or self.timeout_s <= 0:
            raise ValueError("runs >= 1, duration_s > 0, warmup_s >= 0 and timeout_s > 0")


def texts(kind: str, n: int = 512) -> list[str]:
    """Request texts: ``short`` (about 6 tokens) or ``mixed`` (4 to 63 words, cycling)."""
    if kind == "short":
        return [f"short text number {i}" for i in range(n)]
    if kind != "mixed":
        raise ValueError(f"texts must be 'short' or 'mixed', got {kind!r}")
    words = ["the", "model", "serves", "batched", "requests", "on", "a", "shared",
             "device", "with", "deadlines"]
    return [" ".join(words[j % len(words)] for j in range(4 + (i * 7) % 60)) for i in range(n)]


def bodies_for(workload: Workload, server: str = "modelctl") -> list[bytes]:
    """One request per item, in the protocol the server speaks: a V1 body
    (``{"instances": [item]}``) for most, KServe V2 for Triton, an OpenAI-style
    embeddings body for Infinity."""
    items = ["x"] if workload.texts is None else texts(workload.texts)
    if server == "pytriton":
        return [json.dumps({"inputs": [{"name": "INPUT", "datatype": "BYTES", "shape": [1, 1],
                                        "data": [item]}]}).encode() for item in items]
    if server == "infinity":
        return [json.dumps({"model": "bench", "input": [item]}).encode() for item in items]
    return [json.dumps({"instances": [item]}).encode() for item in items]


def wait_until_quiet(protocol: RunProtocol) -> dict[str, Any]:
    """Wait (up to a deadline) until the machine is quiet enough to measure on.

    Quiet means a 1-minute load average under ``quiet_load_1m``, or, since that
    average remembers our own previous run for a minute or more, the whole machine
    busy under ``quiet_busy_pct`` over the last second while our server is idle
    (no one else's work running now). What was seen is returned for the results.
    """
    started = time.monotonic()
    load_first = os.getloadavg()[0]
    while True:
        load = os.getloadavg()[0]
        busy = psutil.cpu_percent(interval=1.0)
        quiet_by = "load" if load < protocol.quiet_load_1m else (
            "cpu" if busy < protocol.quiet_busy_pct else None)
        waited = time.monotonic() - started
        if quiet_by or waited >= protocol.quiet_deadline_s:
            return {"load_1m_first": round(load_first, 2), "load_1m": round(load, 2),
                    "busy_pct": round(busy, 1), "quiet_by": quiet_by, "waited_s": round(waited, 1)}


def is_settled(server: RunningServer, body: bytes, protocol: RunProtocol) -> bool:
    """Poll single requests until one answers 2xx within ``settle_ok_s`` (queue drained)."""

    def probe() -> bool:
        started = time.perf_counter()
        reply = httpx.post(server.predict_url, content=body, timeout=2.0,
                           headers={"content-type": "application/json"})
        return reply.is_success and time.perf_counter() - started <= protocol.settle_ok_s

    try:
        wait_for(probe, timeout_s=protocol.settle_deadline_s, interval_s=0.2, what="settled")
    except TimeoutError:
        return False
    return True


def measure_run(server: RunningServer, rate: float, bodies: Sequence[bytes],
                protocol: RunProtocol) -> dict[str, Any]:
    """One open-loop run at ``rate`` req/s with everything issue 9 asks for."""
    gate = wait_until_quiet(protocol)
    totals0 = server.batch_totals()
    cpu0 = server.cpu_s()
    load_start = os.getloadavg()[0]
    started = time.monotonic()
    result = run_open_loop(server.predict_url, rate=rate, duration_s=protocol.duration_s,
                           body=list(bodies), warmup_s=protocol.warmup_s,
                           timeout_s=protocol.timeout_s)
    cpu_s = server.cpu_s() - cpu0
    wall_s = time.monotonic() - started  # includes waiting for late answers
    totals1 = server.batch_totals()
    mean_batch = None
    if totals0 is not None and totals1 is not None and totals1[1] > totals0[1]:
        mean_batch = (totals1[0] - totals0[0]) / (totals1[1] - totals0[1])
    lat = result.latency_ok
    sent_all = len(result.samples.status)  # warm-up included, as the CPU reading is
    return {
        "offered_rps": rate,
        "throughput_rps": result.throughput_rps,
        "success_ratio": result.success_ratio,
        "p50_ms": _ms(lat.p50_s), "p90_ms": _ms(lat.p90_s),
        "p99_ms": _ms(lat.p99_s), "max_ms": _ms(lat.max_s),
        "status_counts": result.status_counts,
        "mean_batch": mean_batch,
        "server_cpu_s": cpu_s,
        "server_cpu_cores": cpu_s / wall_s,
        # The whole run's CPU (warm-up included) over every request it sent.
        "cpu_ms_per_request": 1000.0 * cpu_s / sent_all if sent_all else None,
        "wall_s": wall_s,
        "send_lag_p99_ms": _ms(result.send_lag.p99_s),
        "on_schedule": result.is_on_schedule(),
        "load_1m_start": round(load_start, 2),
        "load_1m_end": round(os.getloadavg()[0], 2),
        "gate": gate,
    }


def summarise(rate: float, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A load point: the median, min and max of each figure over its runs."""
    row: dict[str, Any] = {"offered_rps": rate, "runs": runs}
    for key in SPREAD_KEYS:
        row[key] = spread([r[key] for r in runs if r[key] is not None])
    statuses: dict[str, list[int]] = {}
    for r in runs:
        for code in r["status_counts"]:
            statuses.setdefault(code, [])
    for code in statuses:
        statuses[code] = [r["status_counts"].get(code, 0) for r in runs]
    row["status_counts"] = {code: spread(v) for code, v in sorted(statuses.items())}
    return row


class ServerSession:
    """A server kept up across a ladder, restarted when it cannot drain its queue."""

    def __init__(self, config: PeerConfig, workload: Workload, log_dir: Path) -> None:
        self.config, self.workload, self.log_dir = config, workload, log_dir
        self._stack = ExitStack()
        self.restarts = 0
        self.start_s: list[float] = []
        self.server = self._start()

    def _start(self) -> RunningServer:
        started = time.monotonic()
        server = self._stack.enter_context(serve(self.config, self.workload, self.log_dir))
        self.start_s.append(round(time.monotonic() - started, 1))
        return server

    def ready_for_run(self, body: bytes, protocol: RunProtocol) -> None:
        if not is_settled(self.server, body, protocol):
            self._stack.close()
            self._stack = ExitStack()
            self.restarts += 1
            self.server = self._start()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stack.close()


def run_ladder(config: PeerConfig, workload: Workload, loads: Sequence[float],
               protocol: RunProtocol, log_dir: Path,
               low_loads: Sequence[float] = (), deadline: float | None = None) -> dict[str, Any]:
    """Rising ``loads`` against one server until it is past saturation (``should_stop``).

    When not even the lowest load met the SLO, ``low_loads`` are tried from the top
    down until one does, so that a slow server's capacity is a number, not "< 50".
    No load point starts after ``deadline`` (a ``time.monotonic()`` value).
    """
    bodies = bodies_for(workload, config.server)
    slo = slo_p99_ms(workload.name)
    rows: list[dict[str, Any]] = []
    if deadline is not None and time.monotonic() > deadline:
        return _line(config, workload, protocol, rows, loads, restarts=0, start_s=[])
    session = ServerSession(config, workload, log_dir)

    def measure(rate: float) -> dict[str, Any]:
        runs = []
        for _ in range(protocol.runs):
            session.ready_for_run(bodies[0], protocol)
            runs.append(measure_run(session.server, rate, bodies, protocol))
        rows.append(summarise(rate, runs))
        print(_progress(config, workload, rows[-1]), flush=True)
        return rows[-1]

    try:
        for rate in sorted(loads):
            if deadline is not None and time.monotonic() > deadline:
                break
            measure(rate)
            if should_stop(rows, protocol.saturated_points, slo):
                break
        if not any(passes_slo(r, slo) for r in rows):
            for rate in sorted((x for x in low_loads if x < min(loads)), reverse=True):
                if deadline is not None and time.monotonic() > deadline:
                    break
                if passes_slo(measure(rate), slo):
                    break
    finally:
        session.close()
    return _line(config, workload, protocol, rows, loads, session.restarts, session.start_s)


def _line(config: PeerConfig, workload: Workload, protocol: RunProtocol,
          rows: list[dict[str, Any]], loads: Sequence[float], restarts: int,
          start_s: list[float]) -> dict[str, Any]:
    """One server's line of results: its configuration, load points and capacity."""
    rows.sort(key=lambda r: float(r["offered_rps"]))
    return {
        "label": config.label,
        "server": config.server,
        "variant": config.variant,
        "config": config.published(),
        "protocol": asdict(protocol),
        "rows": rows,
        "loads_not_run": [x for x in loads if x not in {r["offered_rps"] for r in rows}],
        "protocol_used": config.kind.protocol,
        **figures(rows, workload.name),
        "restarts": restarts,
        "start_s": start_s,
    }


def figures(rows: Sequence[Mapping[str, Any]], workload: str) -> dict[str, Any]:
    """A line's figures from its load points, by the rules of ``_configs`` (``report``
    recomputes them, so a stored file follows the current rules)."""
    slo = slo_p99_ms(workload)
    cpu = cpu_row(rows)
    return {"slo_p99_ms": slo, "sustained_rps": sustained_load(rows, slo),
            "saturation_rps": saturation_rps(rows),
            "cpu_at_rps": None if cpu is None else cpu["offered_rps"],
            "cpu_ms_per_request": _median_of(cpu, "cpu_ms_per_request")}


def _progress(config: PeerConfig, workload: Workload, row: dict[str, Any]) -> str:
    def med(key: str) -> float:
        return float(row[key]["median"]) if row[key] else float("nan")

    return (f"{workload.key:<16} {config.label:<52} {row['offered_rps']:>6.0f} req/s: "
            f"{med('throughput_rps'):6.0f} ok/s  p99 {med('p99_ms'):7.0f} ms  "
            f"ok {med('success_ratio'):.3f}  batch {med('mean_batch'):5.1f}")


def _median_of(row: Mapping[str, Any] | None, key: str) -> float | None:
    cell = None if row is None else row.get(key)
    return None if not cell else float(cell["median"])


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0
