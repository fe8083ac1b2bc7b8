"""``measure_profile``: a registry version's batch latency t(b), measured on this machine.

The version is fetched and verified as ``modelctl serve`` does (into the cache, kept
between runs), then built exactly as the predictor builds it (``open_artifact``,
``build_model``: the task's handler, loaded and warm), and each batch of ``b`` prepared
items goes through ``BatchingModel.run_batch``, the call the batcher's device thread
makes. Preparation (tokenising) is not part of t(b): the predictor does it on its own
pool while the previous batch runs. Warm-up, run counts and their reasons are in
``capacity._options``; the HTTP edge in front of the model is measured in
``capacity._edge`` once this process has let go of the model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capacity._edge import EdgeTiming, measure_edge, measure_loaded_edge
from capacity._options import ProfileOptions, next_size
from capacity._profile import BatchTiming, Profile, ProfileError

if TYPE_CHECKING:
    from predictor._model import BatchingModel
    from registry import Registry

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def cache_root(explicit: Path | None = None) -> Path:
    """Where fetched versions are kept: ``explicit``, ``$MODELCTL_CACHE`` or
    ``~/.modelctl/cache`` (the cache ``modelctl serve`` uses)."""
    if explicit is not None:
        return explicit
    return Path(os.environ.get("MODELCTL_CACHE") or Path.home() / ".modelctl" / "cache")


def fetch_version(reg: Registry, model: str, version: int, root: Path,
                  progress: Progress = _quiet) -> Path:
    """The version's verified directory under ``root``, fetched unless already intact."""
    from registry import verify_dir

    model_dir = root / model / str(version)
    manifest = reg.manifest(model, version)
    if not (model_dir / "MANIFEST.json").exists() or verify_dir(model_dir, manifest):
        progress(f"fetching {model} version {version} into {model_dir}")
        reg.fetch(model, version, model_dir)
    return model_dir


def check_device(device: str) -> None:
    """Refuse ``cuda`` where torch sees no GPU (one line, before anything loads)."""
    if device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise ProfileError("--device cuda: no CUDA device here (torch.cuda.is_available() is "
                           "false); profile on a GPU node: manifests/templates/profile-job.yaml")


@dataclass(frozen=True)
class BatchSeries:
    """The timed runs of the batch sizes, and what the model costs one item in CPU."""

    batches: tuple[BatchTiming, ...]
    t1_median_ms: float  # t(1), measured even when 1 is not among the sizes
    model_cpu_per_item_ms: float  # this process's CPU per run of a batch of one


def measure_profile(reg: Registry, model: str, ref: str | int, options: ProfileOptions, *,
                    cache_dir: Path | None = None, progress: Progress = _quiet) -> Profile:
    """Measure ``model@ref`` on ``options.device``: t(b) in process, then the HTTP edge
    and the load time against a real predictor process (nothing is stored)."""
    check_device(options.device)
    version = reg.resolve(model, ref)
    model_dir = fetch_version(reg, model, version, cache_root(cache_dir), progress)
    options = dataclasses.replace(options, torch_threads=options.threads_for(usable_cpus()))
    with _torch_threads(options.torch_threads):
        series, device_name = measure_batches(model, model_dir, options, progress)
        facts = host_facts()
    gc.collect()  # the in-process model is gone before the server loads its own copy
    if options.device == "cuda":
        import torch

        torch.cuda.empty_cache()
    progress(f"starting the predictor on {model} version {version} for the HTTP edge")
    edge: EdgeTiming = measure_edge(model, model_dir, options, series.t1_median_ms,
                                    series.model_cpu_per_item_ms)
    progress(f"edge: {edge.edge_ms:.2f} ms, {edge.edge_cpu_ms:.2f} ms CPU per request; "
             f"load {edge.load_s:.2f} s")
    largest = series.batches[-1].size
    loaded = measure_loaded_edge(model, model_dir, options, largest,
                                 series.model_cpu_per_item_ms)
    if loaded is not None:
        progress(f"edge under load: {loaded.cpu_ms:.2f} ms CPU per request in batches of "
                 f"{loaded.mean_batch:.1f} on average ({loaded.requests} requests)")
    return Profile(model=model, version=version, device=options.device,
                   batches=series.batches, edge_ms=edge.edge_ms, edge_cpu_ms=edge.edge_cpu_ms,
                   edge_cpu_loaded_ms=None if loaded is None else loaded.cpu_ms,
                   edge_loaded_batch=None if loaded is None else loaded.mean_batch,
                   load_s=edge.load_s, device_name=device_name,
                   measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
                   host={**facts, "edge_requests": edge.requests,
                         "edge_request_p50_ms": round(edge.request_p50_ms, 4),
                         "edge_request_cpu_ms": round(edge.request_cpu_ms, 4),
                         "t1_median_ms": round(series.t1_median_ms, 4),
                         "model_cpu_per_item_ms": round(series.model_cpu_per_item_ms, 4),
                         "server_model_cpu_ms": round(edge.model_cpu_ms, 4)})


@contextlib.contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    """Torch's intra-op threads set to ``threads`` (0: left as they are) for the block;
    the predictor measured for the edge gets the same ``--torch_threads``."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def measure_batches(model: str, model_dir: Path, options: ProfileOptions,
                    progress: Progress = _quiet) -> tuple[BatchSeries, str]:
    """Build the version's model as the predictor does and time each batch size."""
    from predictor._artifact import open_artifact
    from predictor._build import build_model
    from predictor._config import ServerConfig
    from predictor._errors import PredictorError

    largest = max(options.batch_sizes or (1,))  # the batcher's cap; run_batch has none
    config = ServerConfig(model_name=model, model_dir=str(model_dir), device=options.device,
                          max_batch_size=largest, max_queue_size=max(1024, largest))
    artifact = open_artifact(config)
    try:
        built = build_model(config, artifact)
        sizes = options.sizes_for(built.handler.max_batch_size)
        try:
            if sizes:
                batches = tuple(_time_size(built, size, options, progress) for size in sizes)
            else:
                batches = _climb(built, options, progress)
            ones, cpu_ms = _time_one(built, options)
        except PredictorError as exc:
            raise ProfileError(f"the {artifact.task} handler refuses these inputs: "
                               f"{exc}") from None
        return BatchSeries(batches, _median(ones), cpu_ms), _device_name(options.device)
    finally:
        artifact.close()


def _climb(built: BatchingModel, options: ProfileOptions,
           progress: Progress) -> tuple[BatchTiming, ...]:
    """The default sizes: the ladder of ``capacity._options.next_size``, stopped early by
    the device's memory (the size that ran out is not kept)."""
    from predictor.batching import is_out_of_memory

    limit = built.handler.max_batch_size
    batches: list[BatchTiming] = []
    size, why = next_size([], limit)
    while size is not None:
        try:
            batches.append(_time_size(built, size, options, progress))
        except Exception as exc:
            if not (is_out_of_memory(exc) and batches):
                raise
            why = f"batch {size} ran out of device memory"
            break
        size, why = next_size([(b.size, b.p50_ms) for b in batches], limit)
    progress(f"stopped at batch {batches[-1].size}: {why}")
    return tuple(batches)


def _prepared(built: BatchingModel, size: int, inputs: Sequence[Any]) -> list[Any]:
    from predictor.handlers import RequestOptions

    instances = [inputs[i % len(inputs)] for i in range(size)]
    handler = built.handler
    return handler.prepare([handler.parse(x, RequestOptions()) for x in instances])


def _run_series(built: BatchingModel, batch: list[Any], options: ProfileOptions,
                *, cuda: bool) -> list[float]:
    """Warm-up runs, then timed runs until enough samples and seconds (ms each)."""
    sync: Callable[[], None] = _noop
    if cuda:
        import torch

        sync = torch.cuda.synchronize
    for _ in range(options.warmup_runs):
        built.run_batch(batch)
    sync()
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < options.max_runs and (
            len(samples) < options.runs
            or time.perf_counter() - started < options.min_seconds):
        t0 = time.perf_counter()
        built.run_batch(batch)
        sync()  # GPU work is asynchronous: the batch ends when the device is done
        samples.append(max((time.perf_counter() - t0) * 1000.0, 1e-6))
    return samples


def _noop() -> None:
    return None


def _time_size(built: BatchingModel, size: int, options: ProfileOptions,
               progress: Progress) -> BatchTiming:
    cuda = options.device == "cuda"
    if cuda:
        import torch

        torch.cuda.reset_peak_memory_stats()
    samples = sorted(_run_series(built, _prepared(built, size, options.inputs), options,
                                 cuda=cuda))
    device_mb = None
    if cuda:
        import torch

        device_mb = torch.cuda.max_memory_allocated() / 2**20
    timing = BatchTiming(size, tuple(samples), _rss_mb(), device_mb)
    device = "" if device_mb is None else f", device {device_mb:.0f} MB"
    progress(f"batch {size:>4}: {len(samples)} runs, p50 {timing.p50_ms:.2f} ms, "
             f"p99 {timing.p99_ms:.2f} ms, RSS {timing.host_rss_mb:.0f} MB{device}")
    return timing


def _time_one(built: BatchingModel, options: ProfileOptions) -> tuple[list[float], float]:
    """Batches of one, cycling through the inputs as the edge's requests do, timed, with
    this process's CPU time per run: the model's own CPU per item (all its threads,
    torch's intra-op pool included)."""
    singles = [_prepared(built, 1, [x]) for x in options.inputs]
    count = max(min(options.runs, 50), len(singles))
    sync: Callable[[], None] = _noop
    if options.device == "cuda":
        import torch

        sync = torch.cuda.synchronize
    for batch in singles[:max(options.warmup_runs, 1)]:
        built.run_batch(batch)
    sync()
    samples = []
    cpu0 = time.process_time()
    for i in range(count):
        t0 = time.perf_counter()
        built.run_batch(singles[i % len(singles)])
        sync()
        samples.append((time.perf_counter() - t0) * 1000.0)
    cpu_ms = (time.process_time() - cpu0) * 1000.0 / count
    return samples, cpu_ms


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _rss_mb() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss) / 2**20


def _device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return str(torch.cuda.get_device_name(0))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cgroup_cpu_limit(cpu_max: str) -> float | None:
    """The CPUs a cgroup v2 ``cpu.max`` allows (``"$MAX $PERIOD"``, ``max`` for none:
    the kernel's Documentation/admin-guide/cgroup-v2.rst), or None when unlimited."""
    parts = cpu_max.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def usable_cpus() -> int:
    """The cores this process may run on: its affinity, capped by its cgroup's CPU limit
    (a pod's ``resources.limits.cpu`` arrives as ``cpu.max``, rounded up), at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cores = cores or os.cpu_count() or 1
    with contextlib.suppress(OSError, UnicodeDecodeError):
        limit = cgroup_cpu_limit(Path("/sys/fs/cgroup/cpu.max").read_text())
        if limit is not None:
            cores = min(cores, max(1, math.ceil(limit)))
    return cores


def host_facts() -> dict[str, Any]:
    """What the numbers depend on besides the model: cores, torch's threads, versions."""
    import torch

    return {"cpu_count": os.cpu_count(), "cpus_usable": usable_cpus(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "executable": Path(sys.executable).name}
