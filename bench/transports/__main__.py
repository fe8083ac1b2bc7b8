"""Server CPU per request of the transports the predictor could run on, each on a server
that does nearly nothing, so the difference is the transport's.

    python -m bench.transports [--protocol http|grpc] [--rates 500,1000,2000] [--runs 3]
                               [--duration-s 10]

``http``: uvicorn (httptools + uvloop, as the predictor runs it) against granian (Rust
HTTP, ``--interface asgi``), one do-nothing ASGI app (``_asgi_echo``).
``grpc``: grpcio's asyncio server (as KServe runs it) against grpclib (pure Python over
``h2``), one unary ``ModelInfer`` that answers a fixed response (``_grpc_echo``).

granian and grpclib are not dependencies of this project: each runs from its own
virtualenv, made by ``bench/transports/setup.sh``. The open-loop generator offers each
rate (``bench.loadgen``; gRPC: ``bench.loadgen._grpc``, tritonclient's stubs); the
server's process tree CPU (psutil) over the requests sent is its cost. Results:
``bench/results/transports-{http,grpc}.{json,md}``.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench._results import run_context, write_results
from bench._servers import process_cpu_s
from bench._spread import spread, spread_text
from bench.loadgen import LoadResult, run_open_loop
from tests.support.procs import ManagedProcess, free_port, wait_for, wait_http_ok

HERE = Path(__file__).resolve().parent
VENVS = HERE.parents[1] / "bench"
SERVERS = {"http": ("uvicorn", "granian"), "grpc": ("grpcio", "grpclib")}
# The servers that are not ours run from their own virtualenv (bench/transports/setup.sh).
APART = {"granian": VENVS / ".venv-granian", "grpclib": VENVS / ".venv-grpclib"}
APP = "bench.transports._asgi_echo:app"


def _answer() -> bytes:
    """The ``ModelInferResponse`` the gRPC servers send: one BYTES output, as the predictor's."""
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelInferResponse(model_name="bench-fixed", id="1")
    tensor = response.outputs.add(name="output-0", datatype="BYTES", shape=[1])
    tensor.contents.bytes_contents.append(b"hi")
    return bytes(response.SerializeToString())


def _argv(server: str, port: int) -> list[str]:
    if server == "uvicorn":
        return [sys.executable, "-m", "uvicorn", APP, "--host", "127.0.0.1", "--port",
                str(port), "--http", "httptools", "--loop", "uvloop", "--no-access-log",
                "--log-level", "warning"]
    if server == "granian":
        return [str(APART["granian"] / "bin" / "granian"), "--interface", "asgi", "--host",
                "127.0.0.1", "--port", str(port), "--workers", "1", "--loop", "uvloop",
                "--no-ws", "--log-level", "warning", APP]
    python = sys.executable if server == "grpcio" else str(APART[server] / "bin" / "python")
    return [python, str(HERE / "_grpc_echo.py"), server, str(port), _answer().hex()]


def _listening(port: int, proc: ManagedProcess) -> bool:
    if proc.poll() is not None:
        raise RuntimeError(f"{proc.name} exited with {proc.poll()}:\n{proc.output_tail()}")
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


def _sender(protocol: str, port: int, proc: ManagedProcess) -> Callable[[float, float], LoadResult]:
    """Wait until the server answers, then ``(rate, duration_s) -> LoadResult``."""
    if protocol == "http":
        url = f"http://127.0.0.1:{port}/"
        wait_http_ok(url, timeout_s=30, proc=proc)
        return lambda rate, seconds: run_open_loop(url, rate=rate, duration_s=seconds,
                                                   body=b'{"instances":["hi"]}')
    from bench.loadgen._grpc import bytes_request, run_open_loop_grpc

    wait_for(lambda: _listening(port, proc), timeout_s=30, what=f"{proc.name} on {port}")
    request = bytes_request("bench-fixed", ["hi"])
    return lambda rate, seconds: run_open_loop_grpc(f"127.0.0.1:{port}", request, rate=rate,
                                                    duration_s=seconds, timeout_s=5.0)


def measure(protocol: str, server: str, rates: Sequence[float], runs: int, duration_s: float,
            log_dir: Path) -> list[dict[str, Any]]:
    port = free_port()
    proc = ManagedProcess(f"{protocol}-{server}", _argv(server, port), log_dir=log_dir)
    rows = []
    try:
        send = _sender(protocol, port, proc)
        send(200, 2.0)  # warm-up, not counted
        for rate in rates:
            cpu, p99, ok = [], [], []
            for _ in range(runs):
                cpu0 = process_cpu_s(proc.pid)
                result = send(rate, duration_s)
                cpu.append((process_cpu_s(proc.pid) - cpu0) * 1e6 / max(1, result.sent))
                p99.append((result.latency_ok.p99_s or 0.0) * 1000.0)
                ok.append(result.ok / max(1, result.sent))
            rows.append({"server": server, "rate": rate, "cpu_us_per_request": spread(cpu),
                         "p99_ms": spread(p99), "ok_fraction": min(ok)})
            print(f"  {server} at {rate:g} req/s: {spread_text(rows[-1]['cpu_us_per_request'])} "
                  f"us CPU per request", flush=True)
    finally:
        proc.stop()
    return rows


def markdown(context: dict[str, Any], results: Sequence[dict[str, Any]]) -> str:
    versions = ", ".join(f"{name} {version}" for name, version in context["versions"].items())
    lines = [f"# {context['protocol']} transports, CPU per request ({context['date']})", "",
             f"`{context['command']}` at {context['commit']}, {context['machine']}; "
             f"{versions}.", "",
             "| Server | Rate | CPU µs per request, median (min-max) | p99 ms | lowest 2xx share |",
             "|---|---:|---|---|---:|"]
    lines += [f"| {r['server']} | {r['rate']:g} | {spread_text(r['cpu_us_per_request'])} | "
              f"{spread_text(r['p99_ms'], '.1f')} | {r['ok_fraction']:.4f} |" for r in results]
    return "\n".join(lines) + "\n"


def _version(server: str) -> str:
    """The installed version of the package behind ``server``, from the Python that runs it."""
    package = {"uvicorn": "uvicorn", "granian": "granian", "grpcio": "grpcio",
               "grpclib": "grpclib"}[server]
    python = str(APART[server] / "bin" / "python") if server in APART else sys.executable
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True,
                          check=False).stdout.strip() or "unknown"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", choices=sorted(SERVERS), default="http")
    parser.add_argument("--rates", default="500,1000,2000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    servers = SERVERS[args.protocol]
    for server in servers:
        if server in APART and not (APART[server] / "bin" / "python").exists():
            parser.error(f"no {APART[server]}: make it with `bash bench/transports/setup.sh`")
    rates = [float(r) for r in args.rates.split(",")]
    context = run_context(f"python -m bench.transports {' '.join(argv)}".strip(),
                          protocol=args.protocol,
                          versions={server: _version(server) for server in servers})
    with tempfile.TemporaryDirectory(prefix="bench-transports-") as tmp:
        results = [row for server in servers
                   for row in measure(args.protocol, server, rates, args.runs,
                                      args.duration_s, Path(tmp))]
    print(write_results(f"transports-{args.protocol}", context, results, markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
