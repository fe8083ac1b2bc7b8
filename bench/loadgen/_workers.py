"""Run one schedule on one event loop, or fan it out to worker processes and merge.

Worker ``k`` of ``N`` sends global requests ``k, k+N, k+2N, ...`` of the very same
schedule, from the same ``t0`` (CLOCK_MONOTONIC is shared by every process on the
machine), so the merged samples are exactly the single-process schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import multiprocessing
import pickle
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait

import numpy as np
import uvloop

from bench.loadgen._core import Engine, Records
from bench.loadgen._spec import (
    BodySpec,
    LoadgenError,
    LoadSpec,
    parse_target,
    request_source,
    schedule,
)

_START_LEAD_S = 0.05  # between handing out t0 and the first request being due
_WORKER_START_TIMEOUT_S = 60.0
_RESULT_GRACE_S = 30.0


def build_engine(spec: LoadSpec, body: BodySpec, offsets: np.ndarray, k: int, n: int) -> Engine:
    """The engine of worker ``k`` of ``n``: every ``n``-th request from the ``k``-th."""
    return Engine(
        parse_target(spec.url),
        offsets[k::n].tolist(),
        request_source(spec, body),
        timeout_s=spec.timeout_s,
        max_connections=max(1, math.ceil(spec.max_connections / n)),
        first=k,
        step=n,
    )


async def run_in_loop(spec: LoadSpec, body: BodySpec, offsets: np.ndarray) -> Records:
    """Run the whole schedule on the running event loop."""
    engine = build_engine(spec, body, offsets, 0, 1)
    with frozen_heap():
        return await engine.run(time.monotonic() + 0.01)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep what exists now out of the collector's full passes while a run is on.

    A full collection walks every live object (numpy, rich, typer, ...) and stalls
    the loop for milliseconds, which would show up as send lag.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run_in_processes(spec: LoadSpec, body: BodySpec, offsets: np.ndarray) -> list[Records]:
    """Run the schedule on ``spec.workers`` processes; their records, by worker."""
    ctx = multiprocessing.get_context("spawn")  # fork would copy a running event loop
    procs: list[multiprocessing.process.BaseProcess] = []
    pipes: list[Connection] = []
    try:
        for k in range(spec.workers):
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(
                target=_worker_main, args=(theirs, spec, body, k), name=f"loadgen-{k}", daemon=True
            )
            try:
                proc.start()
            except (pickle.PicklingError, AttributeError, TypeError) as exc:
                raise LoadgenError(
                    "with more than one worker the body must be picklable "
                    f"(a module-level body_for function, not a lambda): {exc}"
                ) from exc
            theirs.close()
            procs.append(proc)
            pipes.append(ours)
        _collect(pipes, "ready", time.monotonic() + _WORKER_START_TIMEOUT_S)
        t0 = time.monotonic() + _START_LEAD_S
        for pipe in pipes:
            pipe.send(t0)
        deadline = t0 + spec.total_s + spec.timeout_s + _RESULT_GRACE_S
        results = _collect(pipes, "done", deadline)
        for finished in procs:
            finished.join(timeout=10)
        return [result for result in results if isinstance(result, Records)]
    finally:
        for child in procs:
            if child.is_alive():
                child.terminate()
                child.join(timeout=5)
        for pipe in pipes:
            pipe.close()


def merge(records: list[Records], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Interleave per-worker arrays back into schedule order: (send lag, latency, status)."""
    workers = len(records)
    lag = np.empty(n, dtype=np.float64)
    latency = np.empty(n, dtype=np.float64)
    status = np.empty(n, dtype=np.int16)
    for k, rec in enumerate(records):
        lag[k::workers] = np.frombuffer(rec.send_lag_s, dtype=np.float64)
        latency[k::workers] = np.frombuffer(rec.latency_s, dtype=np.float64)
        status[k::workers] = np.frombuffer(rec.status, dtype=np.int16)
    return lag, latency, status


def _collect(pipes: list[Connection], kind: str, deadline: float) -> list[object]:
    """One ``(kind, payload)`` message from every worker, in worker order."""
    got: dict[int, object] = {}
    while len(got) < len(pipes):
        remaining = deadline - time.monotonic()
        waiting = [pipe for i, pipe in enumerate(pipes) if i not in got]
        ready = wait(waiting, timeout=max(0.0, remaining))
        if not ready:
            raise LoadgenError(f"load workers did not report {kind!r} in time")
        for pipe in ready:
            assert isinstance(pipe, Connection)
            i = pipes.index(pipe)
            try:
                tag, payload = pipe.recv()
            except EOFError as exc:
                raise LoadgenError(f"load worker {i} exited before reporting {kind!r}") from exc
            if tag == "error":
                raise LoadgenError(f"load worker {i} failed: {payload}")
            got[i] = payload
    return [got[i] for i in range(len(pipes))]


def _worker_main(pipe: Connection, spec: LoadSpec, body: BodySpec, k: int) -> None:
    """Entry point of worker process ``k``: build, report ready, wait for t0, run, report."""
    try:
        offsets = schedule(spec.arrival, spec.rate, spec.total_s, spec.seed)
        engine = build_engine(spec, body, offsets, k, spec.workers)
        with frozen_heap(), asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            pipe.send(("ready", None))
            t0 = pipe.recv()
            records = runner.run(engine.run(t0))
        pipe.send(("done", records))
    except BaseException as exc:  # reported to the parent, which raises
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        pipe.close()
