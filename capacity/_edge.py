"""The HTTP edge in front of the model, and the cold start, against a real predictor.

``measure_edge`` starts ``python -m predictor`` on the fetched version (127.0.0.1, a
free port, ``--max_batch_size 1`` so every request is its own batch), times
``load_s`` from process start to ``GET /v2/health/ready`` answering 200, then sends
sequential single-instance V1 requests (after a warm-up) and stops the process by
its PID, always.

Method, and its limits:

- ``edge_ms`` = median request latency seen by the client minus the median t(1)
  measured in process (never below 0). It holds everything a request pays besides
  the batch itself: the client's send and receive, loopback, uvicorn, KServe's
  routing, decode, the batcher's queue and thread hand-offs, encode. The client runs
  on the same machine, so on a small machine its own CPU competes with the server's
  and is counted in the latency; sequential requests never queue behind each other,
  so this is the edge of an idle replica, not of a loaded one.
- ``edge_cpu_ms`` = the server's CPU time over the timed requests (user + system,
  psutil, of the predictor and every child it has, reaped children included)
  less the CPU of its device threads, divided by their count. The predictor names
  its device thread ``modelctl-device`` for the OS (``predictor.batching._device``),
  and the threads it starts inherit the name, torch's OpenMP team among them, so on
  Linux the model's CPU is read per thread (``/proc/<pid>/task/<tid>/comm`` and
  ``stat``) in the server itself. Elsewhere the model's CPU per item measured in
  process is subtracted instead (never below 0), which assumes the model costs the
  same CPU in both places: on a CPU device it does not (its threads spin more in
  back-to-back runs than between requests), and that estimate clips to 0. It counts
  the server's background work in that window too (the event loop's timers,
  metrics), which is part of what a replica costs.
- ``measure_loaded_edge`` measures the same CPU under load: a second predictor with
  ``--max_batch_size B`` (the largest size profiled) and ``--max_batch_wait_ms 0``,
  ``min(B, 64)`` clients each sending its next request as soon as the last is answered,
  so batches form from what queued while the last one ran; the batches' mean size is
  read from the server's own ``modelctl_batch_size`` histogram. Sequential requests cost
  the server several times what loaded ones do (seed 1's version: 1.15 against about
  0.3 ms), so a plan from the idle edge alone put a CPU limit far below the real one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capacity._options import ProfileOptions
from capacity._profile import ProfileError

# Environment the profiled predictor must not inherit: a MODELCTL_QUEUE_URL would turn
# it into a queue frontend, MODELCTL_MAX_BATCH_SIZE and friends change its knobs.
_KEPT_MODELCTL_ENV = {"MODELCTL_LOG_LEVEL"}


@dataclass(frozen=True)
class EdgeTiming:
    """What the edge costs one request, and how long the version takes to be ready."""

    edge_ms: float
    edge_cpu_ms: float
    load_s: float
    requests: int
    request_p50_ms: float
    request_cpu_ms: float  # the server's CPU per request, the model's included
    model_cpu_ms: float = 0.0  # of which its device threads' (or the in-process estimate)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure_edge(model: str, model_dir: Path, options: ProfileOptions, t1_median_ms: float,
                 model_cpu_per_item_ms: float) -> EdgeTiming:
    """Start the predictor on ``model_dir``, time its load and its edge, stop it."""
    import httpx

    with _predictor(model, model_dir, options) as (proc, url, load_s):
        predict = f"{url}/v1/models/{model}:predict"
        bodies = [{"instances": [options.inputs[i % len(options.inputs)]]}
                  for i in range(options.edge_requests)]
        with httpx.Client(timeout=60.0) as client:
            for body in bodies[:options.edge_warmup_requests] or bodies[:1]:
                _post(client, predict, body)
            cpu0, device0 = _tree_cpu_s(proc.pid), device_cpu_s(proc.pid)
            latencies = []
            for body in bodies:
                t0 = time.perf_counter()
                _post(client, predict, body)
                latencies.append((time.perf_counter() - t0) * 1000.0)
            cpu_s = _tree_cpu_s(proc.pid) - cpu0
            device1 = device_cpu_s(proc.pid)
    latencies.sort()
    p50 = latencies[len(latencies) // 2]
    cpu_per_request_ms = cpu_s * 1000.0 / len(latencies)
    model_ms = _model_cpu_ms(device0, device1, len(latencies), model_cpu_per_item_ms)
    return EdgeTiming(edge_ms=max(p50 - t1_median_ms, 0.0),
                      edge_cpu_ms=max(cpu_per_request_ms - model_ms, 0.0),
                      load_s=load_s, requests=len(latencies), request_p50_ms=p50,
                      request_cpu_ms=cpu_per_request_ms, model_cpu_ms=model_ms)


@dataclass(frozen=True)
class LoadedEdge:
    """The edge's CPU per request while batches of ``mean_batch`` items ran."""

    cpu_ms: float
    mean_batch: float
    requests: int


LOADED_CLIENTS = 64  # at most: a Python client beside the server shares its cores


def measure_loaded_edge(model: str, model_dir: Path, options: ProfileOptions, batch: int,
                        model_cpu_per_item_ms: float) -> LoadedEdge | None:
    """The edge's CPU per request under load with batches of up to ``batch`` (None for a
    batch of 1: that is the idle edge)."""
    import concurrent.futures

    import httpx

    if batch <= 1:
        return None
    clients = min(batch, LOADED_CLIENTS)
    total = max(options.edge_requests, 8 * clients)
    flags = ("--max_batch_size", str(batch), "--max_batch_wait_ms", "0",
             "--max_queue_size", str(max(batch, clients) * 2))
    with _predictor(model, model_dir, options, flags) as (proc, url, _):
        predict = f"{url}/v1/models/{model}:predict"

        def send(first: int, count: int) -> None:
            with httpx.Client(timeout=60.0) as client:
                for i in range(first, first + count):
                    _post(client, predict,
                          {"instances": [options.inputs[i % len(options.inputs)]]})

        def wave(count: int) -> None:
            share = max(1, count // clients)
            with concurrent.futures.ThreadPoolExecutor(clients) as pool:
                for done in [pool.submit(send, n * share, share) for n in range(clients)]:
                    done.result()

        wave(2 * clients)  # warm: connections open, the batcher's policy has seen batches
        items0, batches0, _ = batch_sums(url)
        cpu0, device0 = _tree_cpu_s(proc.pid), device_cpu_s(proc.pid)
        wave(total)
        cpu_s = _tree_cpu_s(proc.pid) - cpu0
        device1 = device_cpu_s(proc.pid)
        items1, batches1, _ = batch_sums(url)
    sent = items1 - items0
    if sent <= 0 or batches1 <= batches0:
        raise ProfileError("the loaded predictor ran no batch: its metrics say nothing")
    model_ms = _model_cpu_ms(device0, device1, sent, model_cpu_per_item_ms)
    return LoadedEdge(cpu_ms=max(cpu_s * 1000.0 / sent - model_ms, 0.0),
                      mean_batch=sent / (batches1 - batches0), requests=int(sent))


def _model_cpu_ms(device0: float | None, device1: float | None, requests: float,
                  in_process_ms: float) -> float:
    """The model's CPU per request over a window: its device threads' CPU read in the
    server, or where /proc does not say, the per-item CPU measured in process."""
    if device0 is not None and device1 is not None:
        return (device1 - device0) * 1000.0 / requests
    return in_process_ms


def batch_sums(url: str) -> tuple[float, float, float]:
    """(items, batches, device seconds) the predictor at ``url`` has run, from /metrics:
    ``modelctl_batch_size``'s sum and count and ``modelctl_batch_duration_seconds``'s
    sum, over every label set."""
    wanted = ("modelctl_batch_size_sum", "modelctl_batch_size_count",
              "modelctl_batch_duration_seconds_sum")
    sums = metric_sums(url, wanted)
    return sums.get(wanted[0], 0.0), sums.get(wanted[1], 0.0), sums.get(wanted[2], 0.0)


def metric_sums(url: str, names: tuple[str, ...]) -> dict[str, float]:
    """Each of ``names`` the predictor at ``url`` exports on /metrics, summed over its
    label sets; a name it does not export is absent."""
    import httpx

    sums: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=10.0).text.splitlines():
        name, _, value = line.partition(" ")
        key = name.partition("{")[0]
        if key in names:
            sums[key] = sums.get(key, 0.0) + float(value.split()[0])
    return sums


def _post(client: Any, url: str, body: dict[str, Any]) -> None:
    reply = client.post(url, json=body)
    if reply.status_code != 200:
        raise ProfileError(f"the predictor answered {reply.status_code} to a profiling "
                           f"request: {reply.text[:300]}")


@contextlib.contextmanager
def _predictor(model: str, model_dir: Path, options: ProfileOptions,
               flags: tuple[str, ...] = ("--max_batch_size", "1"),
               ) -> Iterator[tuple[subprocess.Popen[bytes], str, float]]:
    """The running predictor, its URL and its load time; stopped by PID on the way out."""
    with _launch(model, model_dir, options.device, options.torch_threads,
                 options.load_timeout_s, flags) as running:
        yield running


@contextlib.contextmanager
def serving(model: str, model_dir: Path, *, device: str, torch_threads: int,
            load_timeout_s: float, flags: tuple[str, ...] = ()) -> Iterator[tuple[str, float]]:
    """A predictor on ``model_dir`` with ``flags``: its URL and load time (an LLM's profile)."""
    with _launch(model, model_dir, device, torch_threads, load_timeout_s, flags) as (_, url, s):
        yield url, s


@contextlib.contextmanager
def _launch(model: str, model_dir: Path, device: str, torch_threads: int,
            load_timeout_s: float, flags: tuple[str, ...],
            ) -> Iterator[tuple[subprocess.Popen[bytes], str, float]]:
    port = free_port()
    argv = [sys.executable, "-m", "predictor", "--model_name", model,
            "--model_dir", str(model_dir), "--http_host", "127.0.0.1",
            "--http_port", str(port), "--grpc_port", str(free_port()),
            "--device", device, *flags,
            *(["--torch_threads", str(torch_threads)] if torch_threads else [])]
    with tempfile.TemporaryFile(prefix="modelctl-profile-") as log:
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=_server_env(),
                                start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_ready(proc, f"{url}/v2/health/ready", load_timeout_s, log)
            yield proc, url, time.monotonic() - started
        finally:
            _stop(proc)


def _server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MODELCTL_") or k in _KEPT_MODELCTL_ENV}
    env.setdefault("MODELCTL_LOG_LEVEL", "WARNING")
    # The predictor package this process imported, whether installed or a checkout.
    import predictor

    root = str(Path(predictor.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def _wait_ready(proc: subprocess.Popen[bytes], url: str, timeout_s: float, log: Any) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise ProfileError(f"the predictor exited with {proc.returncode} before it was "
                               f"ready: {_last_line(log)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise ProfileError(f"the predictor was not ready after {timeout_s:g} s "
                               "(raise --load-timeout-s for a large model)")
        time.sleep(0.02)


def _last_line(log: Any) -> str:
    log.flush()
    log.seek(0)
    lines = [line for line in log.read().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip()[:400] if lines else "(no output)"


def device_cpu_s(pid: int) -> float | None:
    """CPU seconds of ``pid``'s threads named ``DEVICE_THREAD_NAME`` (the device thread and
    the threads it started), or None where /proc does not say."""
    from predictor.batching._device import DEVICE_THREAD_NAME

    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for task in tasks.iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if (task / "comm").read_text().strip() != DEVICE_THREAD_NAME:
                continue
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (proc(5) 14, 15)
    return total / ticks


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its descendants, reaped ones included."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
            if proc is root:
                total += times.children_user + times.children_system
    return total


def _stop(proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """SIGTERM the process group the predictor leads, then SIGKILL it; nothing else."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
