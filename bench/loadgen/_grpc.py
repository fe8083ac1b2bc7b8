"""The open-loop schedule over gRPC: V2 ``ModelInfer`` calls sent when due, never waiting.

The same contract as the HTTP engine (``bench.loadgen``): request ``i`` is due at its
offset of ``schedule``, goes out then whether or not earlier calls have finished, and
its latency counts from when it was due. Calls go over one ``grpc.aio`` channel (HTTP/2
multiplexes them); the stubs are tritonclient's (``tritonclient.grpc.service_pb2_grpc``),
a client independent of the server's KServe protos. gRPC status codes are reported as
the HTTP codes a V2 server maps them to (``OK`` 200, ``INVALID_ARGUMENT`` 400,
``NOT_FOUND`` 404, ``RESOURCE_EXHAUSTED`` 429, ``UNAVAILABLE`` 503, anything else
500); ``DEADLINE_EXCEEDED`` is a timeout, like the HTTP engine's.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from typing import Any

import numpy as np
import uvloop

from bench.loadgen._core import TIMEOUT, Records
from bench.loadgen._result import LoadResult
from bench.loadgen._run import _result, _spec
from bench.loadgen._spec import schedule

METHOD_PATH = "/inference.GRPCInferenceService/ModelInfer"


def _http_code(code: Any) -> int:
    import grpc

    return {grpc.StatusCode.OK: 200, grpc.StatusCode.INVALID_ARGUMENT: 400,
            grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
            grpc.StatusCode.UNAVAILABLE: 503,
            grpc.StatusCode.DEADLINE_EXCEEDED: TIMEOUT}.get(code, 500)


def bytes_request(model: str, texts: list[str]) -> Any:
    """A ``ModelInferRequest`` with one BYTES input named ``input``, one row per text."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="input", datatype="BYTES", shape=[len(texts)])
    tensor.contents.bytes_contents.extend(t.encode() for t in texts)
    return request


def run_open_loop_grpc(target: str, request: Any, *, rate: float, duration_s: float,
                       warmup_s: float = 0.0, arrival: str = "constant", seed: int = 0,
                       timeout_s: float = 30.0) -> LoadResult:
    """Offer ``rate`` ``ModelInfer`` calls a second to ``target`` (``host:port``)."""
    spec = _spec(f"http://{target}{METHOD_PATH}", rate, duration_s, None, "POST", timeout_s,
                 1, arrival, seed, warmup_s, 1)
    offsets = schedule(spec.arrival, spec.rate, spec.total_s, spec.seed)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        records = runner.run(_send_all(target, request, offsets, timeout_s))
    return _result(spec, offsets, [records])


async def _send_all(target: str, request: Any, offsets: np.ndarray,
                    timeout_s: float) -> Records:
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    n = len(offsets)
    lag, latency = array("d", [np.nan] * n), array("d", [np.nan] * n)
    status = array("h", [0] * n)
    in_flight = peak = 0
    async with grpc.aio.insecure_channel(target) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        await channel.channel_ready()
        loop = asyncio.get_running_loop()
        t0 = loop.time() + 0.05

        async def call(i: int) -> None:
            nonlocal in_flight
            due = t0 + offsets[i]
            lag[i] = loop.time() - due
            try:
                await stub.ModelInfer(request, timeout=timeout_s)
                status[i] = 200
            except grpc.aio.AioRpcError as exc:
                status[i] = _http_code(exc.code())
            latency[i] = loop.time() - due
            in_flight -= 1

        tasks = []
        for i in range(n):
            delay = t0 + offsets[i] - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            in_flight += 1
            peak = max(peak, in_flight)
            tasks.append(loop.create_task(call(i)))
        started = time.monotonic()
        while tasks and time.monotonic() - started < timeout_s + 5:
            _, pending = await asyncio.wait(tasks, timeout=1.0)
            tasks = list(pending)
    for i in range(n):
        if status[i] == 0:  # never finished: counted as a timeout
            status[i], latency[i] = TIMEOUT, timeout_s
    return Records(send_lag_s=lag, latency_s=latency, status=status, max_in_flight=peak,
                   connections_opened=1)
