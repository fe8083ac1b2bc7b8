"""Run one open-loop load: validate the spec, build the schedule, send it, summarise it.

One process (``run_in_loop``) or several (``run_in_processes``, merged); the
package docstring (``bench.loadgen``) says what open loop means here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import numpy as np
import uvloop

from bench.loadgen._core import Records
from bench.loadgen._result import LoadResult, Samples, build_result
from bench.loadgen._spec import BodySpec, LoadgenError, LoadSpec, schedule
from bench.loadgen._workers import merge, run_in_loop, run_in_processes

Headers = Mapping[str, str] | Sequence[tuple[str, str]] | None


def run_open_loop(
    url: str,
    *,
    rate: float,
    duration_s: float,
    body: BodySpec = None,
    headers: Headers = None,
    method: str = "POST",
    timeout_s: float = 30.0,
    workers: int = 1,
    arrival: str = "constant",
    seed: int = 0,
    warmup_s: float = 0.0,
    max_connections: int = 4096,
) -> LoadResult:
    """Offer ``rate`` req/s to ``url`` for ``warmup_s + duration_s`` and measure it.

    ``body`` is one body (bytes, str, or a mapping sent as JSON), a list of bodies
    sent in turn, or ``body_for(i) -> bytes`` for request ``i`` (module-level when
    ``workers > 1``, since workers are separate processes). Requests due during
    ``warmup_s`` are sent but not counted. Blocks; inside an event loop use
    :func:`run_open_loop_async`.
    """
    spec = _spec(
        url,
        rate,
        duration_s,
        headers,
        method,
        timeout_s,
        workers,
        arrival,
        seed,
        warmup_s,
        max_connections,
    )
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise LoadgenError("run_open_loop called inside an event loop; await run_open_loop_async")
    offsets = schedule(spec.arrival, spec.rate, spec.total_s, spec.seed)
    if spec.workers == 1:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            records = [runner.run(run_in_loop(spec, body, offsets))]
    else:
        records = run_in_processes(spec, body, offsets)
    return _result(spec, offsets, records)


async def run_open_loop_async(
    url: str,
    *,
    rate: float,
    duration_s: float,
    body: BodySpec = None,
    headers: Headers = None,
    method: str = "POST",
    timeout_s: float = 30.0,
    workers: int = 1,
    arrival: str = "constant",
    seed: int = 0,
    warmup_s: float = 0.0,
    max_connections: int = 4096,
) -> LoadResult:
    """:func:`run_open_loop` for async callers.

    With one worker it runs on the caller's event loop (keep that loop otherwise
    idle, or the send lag shows it); with more it waits for the worker processes
    from a thread.
    """
    spec = _spec(
        url,
        rate,
        duration_s,
        headers,
        method,
        timeout_s,
        workers,
        arrival,
        seed,
        warmup_s,
        max_connections,
    )
    offsets = schedule(spec.arrival, spec.rate, spec.total_s, spec.seed)
    if spec.workers == 1:
        records = [await run_in_loop(spec, body, offsets)]
    else:
        records = await asyncio.to_thread(run_in_processes, spec, body, offsets)
    return _result(spec, offsets, records)



def _spec(
    url: str,
    rate: float,
    duration_s: float,
    headers: Headers,
    method: str,
    timeout_s: float,
    workers: int,
    arrival: str,
    seed: int,
    warmup_s: float,
    max_connections: int,
) -> LoadSpec:
    pairs = tuple((headers or {}).items()) if isinstance(headers, Mapping | None) else headers
    return LoadSpec(
        url=url,
        rate=float(rate),
        duration_s=float(duration_s),
        method=method.upper(),
        headers=tuple((str(k), str(v)) for k, v in pairs),
        timeout_s=float(timeout_s),
        workers=int(workers),
        arrival=arrival,
        seed=int(seed),
        warmup_s=float(warmup_s),
        max_connections=int(max_connections),
    )


def _result(spec: LoadSpec, offsets: np.ndarray, records: list[Records]) -> LoadResult:
    lag, latency, status = merge(records, len(offsets))
    samples = Samples(scheduled_s=offsets, send_lag_s=lag, latency_s=latency, status=status)
    return build_result(
        spec,
        samples,
        max_in_flight=sum(r.max_in_flight for r in records),
        connections_opened=sum(r.connections_opened for r in records),
    )

