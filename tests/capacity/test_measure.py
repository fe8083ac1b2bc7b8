"""``measure_profile`` against a real fixed-latency version: the handler the predictor
builds, timed in process, and a real predictor process for the edge and the load time.

The fixed-latency task sleeps a known time per batch whatever its size, so t(b) must
come out close to it for every size; the runs are few so the whole module stays fast.
Measuring builds the predictor's model, which imports KServe, whose gRPC protos clash
with tritonclient's in one process: it runs in a child process (``_measure``).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from capacity import (
    DEFAULT_INPUTS,
    Profile,
    ProfileError,
    ProfileOptions,
    measure_profile,
    parse_batch_sizes,
    read_inputs,
)
from capacity._measure import cgroup_cpu_limit
from capacity._options import ADAPTIVE_CAP, next_size
from registry import NotFound, Registry

LATENCY_MS = 10.0
QUICK = dict(runs=15, min_seconds=0.0, warmup_runs=2, edge_requests=40,
             edge_warmup_requests=5)


def push_fixed(root: Path, name: str = "prof-fixed", **task: object) -> tuple[Registry, int]:
    src = root / f"src-{name}"
    src.mkdir(parents=True, exist_ok=True)
    (src / "task.json").write_text(json.dumps({"latency_ms": LATENCY_MS, **task}))
    reg = Registry.open(str(root / "registry"))
    return reg, reg.push(src, name, "fixed-latency", alias="stable").version


_CHILD = """
import json, sys
from pathlib import Path
import psutil
from capacity import ProfileError, ProfileOptions, measure_profile
from registry import Registry
registry, model, ref, options, cache = json.loads(sys.argv[1])
try:
    profile = measure_profile(Registry.open(registry), model, ref, ProfileOptions(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}),
        cache_dir=Path(cache), progress=lambda line: print(line, file=sys.stderr, flush=True))
except ProfileError as exc:
    print(f"ProfileError: {exc}", file=sys.stderr)
    sys.exit(2)
print(json.dumps({"profile": profile.to_json(),
                  "children": len(psutil.Process().children(recursive=True))}))
"""


def _measure(reg: Registry, model: str, ref: str, cache: Path,
             **options: object) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``measure_profile`` in a child process: (the process, its JSON answer or {})."""
    args = json.dumps([reg.url, model, ref, options, str(cache)])
    done = subprocess.run([sys.executable, "-c", _CHILD, args], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).parents[2], check=False)
    return done, (json.loads(done.stdout) if done.returncode == 0 else {})


def test_a_fixed_latency_version_profiles_at_its_latency(tmp_path: Path) -> None:
    reg, version = push_fixed(tmp_path)
    done, answer = _measure(reg, "prof-fixed", "stable", tmp_path / "cache",
                            batch_sizes=[1, 2, 4], **QUICK)
    assert done.returncode == 0, done.stderr
    profile = Profile.from_json(answer["profile"])
    lines = done.stderr.splitlines()

    assert (profile.model, profile.version, profile.device) == ("prof-fixed", version, "cpu")
    assert profile.sizes == (1, 2, 4)
    for batch in profile.batches:
        assert len(batch.samples_ms) >= 15
        # A sleep of 10 ms: never shorter, and on a busy 2-core machine not much longer.
        assert LATENCY_MS * 0.95 <= batch.p50_ms <= LATENCY_MS + 15, batch.to_json()
        assert batch.p99_ms >= batch.p50_ms
        assert batch.host_rss_mb > 10 and batch.device_mb is None
    for value in (profile.edge_ms, profile.edge_cpu_ms, profile.load_s):
        assert math.isfinite(value) and value > 0
    assert profile.edge_ms < 200 and profile.load_s < 60
    assert profile.host["cpu_count"] >= 1 and profile.host["torch_threads"] >= 1
    assert profile.host["edge_requests"] == 40
    # The model's CPU is read per thread in the server: a sleeping model spends next to
    # none of the server's CPU per request, and the edge gets the rest.
    server_model = profile.host["server_model_cpu_ms"]
    assert 0 <= server_model < 0.5 * profile.host["edge_request_cpu_ms"]
    assert profile.edge_cpu_ms == pytest.approx(
        profile.host["edge_request_cpu_ms"] - server_model, abs=2e-3)
    # Under load (batches of up to 4 here): measured, in batches of more than one item.
    # (That it costs less than sequential requests shows at real batch sizes, not at 4 on
    # a busy machine: docs/BENCHMARKS.md, run E.)
    assert profile.edge_cpu_loaded_ms is not None and profile.edge_loaded_batch is not None
    assert 0 < profile.edge_cpu_loaded_ms < 50 * max(profile.edge_cpu_ms, 0.01)
    assert 1.0 < profile.edge_loaded_batch <= 4.0
    # One progress line per batch size, and the fetch into the cache.
    assert sum(line.startswith("batch ") for line in lines) == 3
    assert (tmp_path / "cache" / "prof-fixed" / str(version) / "MANIFEST.json").is_file()
    # The round trip the registry report takes.
    back = Profile.from_json(json.loads(json.dumps(profile.to_json())))
    assert back.sizes == profile.sizes and back.host == profile.host
    assert back.batch_ms(4, 0.5) == pytest.approx(profile.batch_ms(4, 0.5), abs=1e-3)
    assert back.edge_ms == pytest.approx(profile.edge_ms, abs=1e-3)
    # The predictor it started is gone.
    assert answer["children"] == 0


def test_default_sizes_stop_at_the_tasks_limit(tmp_path: Path) -> None:
    reg, _ = push_fixed(tmp_path, "prof-small", max_batch_size=3, latency_ms=1)
    done, answer = _measure(reg, "prof-small", "1", tmp_path / "cache",
                            **{**QUICK, "edge_requests": 5})
    assert done.returncode == 0, done.stderr
    assert Profile.from_json(answer["profile"]).sizes == (1, 2, 3)
    done, _ = _measure(reg, "prof-small", "1", tmp_path / "cache", batch_sizes=[1, 4], **QUICK)
    assert done.returncode == 2
    assert "above this task's limit of 3" in done.stderr.splitlines()[-1]


def test_an_unknown_version_is_refused_before_anything_loads(tmp_path: Path) -> None:
    reg, _ = push_fixed(tmp_path)
    with pytest.raises(NotFound, match="no version 9"):
        measure_profile(reg, "prof-fixed", "9", ProfileOptions(), cache_dir=tmp_path / "c")


def test_cuda_is_refused_without_a_gpu(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    reg, _ = push_fixed(tmp_path)
    with pytest.raises(ProfileError, match="no CUDA device"):
        measure_profile(reg, "prof-fixed", "1", ProfileOptions(device="cuda"))


def test_batch_sizes_parse() -> None:
    assert parse_batch_sizes("8, 1,2,2,4") == (1, 2, 4, 8)
    for bad in ("1,x", "0,2", "", "1,-4", "2.5"):
        with pytest.raises(ProfileError, match="--batch-sizes"):
            parse_batch_sizes(bad)


def _ladder(per_item_ms: Callable[[int], float], limit: int | None) -> tuple[list[int], str]:
    """The sizes ``next_size`` climbs for a model whose batch of b takes b x per_item(b)."""
    measured: list[tuple[int, float]] = []
    size, why = next_size(measured, limit)
    while size is not None:
        measured.append((size, size * per_item_ms(size)))
        size, why = next_size(measured, limit)
    return [s for s, _ in measured], why


def test_the_default_sizes_climb_while_a_larger_batch_pays() -> None:
    # Seed 1's version: 100 ms for any batch up to 100 (per item 100/b): up to its limit,
    # where the old default stopped at 32.
    sizes, why = _ladder(lambda b: 100.0 / b, 100)
    assert sizes == [1, 2, 4, 8, 16, 32, 64, 100] and "limit of 100" in why
    assert _ladder(lambda b: 100.0 / b, 12)[0] == [1, 2, 4, 8, 12]
    # No limit: on while it pays, to the cap.
    sizes, why = _ladder(lambda b: 100.0 / b, None)
    assert sizes[-1] == ADAPTIVE_CAP and "cap" in why
    # A CPU model whose time per item is flat from 16 on: at least the predictor's own
    # default (32), then no further.
    sizes, why = _ladder(lambda b: 10.0 / min(b, 16), None)
    assert sizes == [1, 2, 4, 8, 16, 32] and "no longer pays" in why
    assert ProfileOptions(batch_sizes=(3, 5)).sizes_for(8) == (3, 5)
    assert ProfileOptions().sizes_for(8) == ()
    with pytest.raises(ProfileError, match="above this task's limit"):
        ProfileOptions(batch_sizes=(3, 16)).sizes_for(8)


def test_the_ladder_stops_where_device_memory_runs_out(tmp_path: Path) -> None:
    reg, version = push_fixed(tmp_path, latency_ms=1, max_batch_size=100, oom_above=40)
    done, answer = _measure(reg, "prof-fixed", str(version), tmp_path / "cache",
                            **{**QUICK, "runs": 3})
    assert done.returncode == 0, done.stderr
    assert Profile.from_json(answer["profile"]).sizes == (1, 2, 4, 8, 16, 32)
    assert "stopped at batch 32: batch 64 ran out of device memory" in done.stderr


def test_inputs_are_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('"one"\n\n{"text": "two"}\n')
    assert read_inputs(path) == ("one", {"text": "two"})
    path.write_text('"one"\nnot json\n')
    with pytest.raises(ProfileError, match="line 2: not JSON"):
        read_inputs(path)
    path.write_text("\n")
    with pytest.raises(ProfileError, match="no instances"):
        read_inputs(path)
    with pytest.raises(ProfileError, match="cannot read"):
        read_inputs(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("changes", [
    {"device": "tpu"}, {"batch_sizes": (0, 1)}, {"batch_sizes": (4, 2)}, {"runs": 0},
    {"runs": 50, "max_runs": 10}, {"min_seconds": -1.0}, {"min_seconds": math.inf},
    {"inputs": ()}, {"warmup_runs": -1}, {"torch_threads": -1},
])
def test_options_are_checked(changes: dict[str, object]) -> None:
    with pytest.raises(ProfileError):
        ProfileOptions(**changes)  # type: ignore[arg-type]


def test_the_default_inputs_hold_short_and_longer_texts() -> None:
    lengths = sorted(len(text) for text in DEFAULT_INPUTS)
    assert lengths[0] < 30 and lengths[-1] > 150


def test_the_threads_leave_the_edge_a_core_on_cpu_unless_told() -> None:
    assert ProfileOptions().threads_for(8) == 7
    assert ProfileOptions().threads_for(1) == 1
    assert ProfileOptions(torch_threads=4).threads_for(8) == 4
    assert ProfileOptions(device="cuda").threads_for(8) == 0  # torch's own choice


@pytest.mark.parametrize(("cpu_max", "cpus"), [
    ("max 100000", None), ("200000 100000", 2.0), ("150000 100000", 1.5),
    ("", None), ("-1 100000", None), ("x y", None),
])
def test_a_cgroup_cpu_limit_is_read_as_the_kernel_writes_it(cpu_max: str,
                                                             cpus: float | None) -> None:
    assert cgroup_cpu_limit(cpu_max) == cpus
