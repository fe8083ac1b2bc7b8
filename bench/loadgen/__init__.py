"""Open-loop HTTP load generator: requests go out on a schedule, never waiting for answers.

Request ``i`` is due at ``t0 + i / rate`` (or at Poisson arrival times), is sent then
whether or not earlier ones have been answered, and its latency counts from when it
was *due*, so queueing anywhere (server or generator) shows up in the latencies
instead of silently lowering the offered load (no coordinated omission). How late
requests actually went out is reported as send lag; a run whose p99 send lag is over
a few milliseconds did not offer the load it claims (``LoadResult.is_on_schedule``).

Python::

    from bench.loadgen import run_open_loop
    result = run_open_loop("http://127.0.0.1:8080/v1/models/m:predict", rate=500,
                           duration_s=10, body={"instances": ["hi"]}, warmup_s=2)
    print(result.to_dict())

Command line::

    python -m bench.loadgen --url http://127.0.0.1:8080/v1/models/m:predict \\
        --rate 500 --duration 10s --body '{"instances":["hi"]}' --json out.json

Timeouts and connection failures are statuses of their own (``timeout``,
``conn_error``); 429s and 5xx are counted, never retried. ``bench.loadgen._grpc`` runs
the same schedule as V2 gRPC ``ModelInfer`` calls.
"""

from bench.loadgen._result import LatencyStats, LoadResult, Samples
from bench.loadgen._run import run_open_loop, run_open_loop_async
from bench.loadgen._spec import LoadgenError

__all__ = [
    "LatencyStats",
    "LoadResult",
    "LoadgenError",
    "Samples",
    "run_open_loop",
    "run_open_loop_async",
]
