"""Registry push/pull of a ~1 GiB artifact against a plain copy, locally and on S3.

    python -m bench.registry_bench                 # local + S3 (SeaweedFS on loopback)
    python -m bench.registry_bench --only local --runs 5 --size-mib 256

The artifact is a few large files plus many small ones. Each operation runs in
its own child process, so its peak RSS is that process's alone (``wait4``
rusage), and its time is measured inside the child around the operation only
(interpreter start-up and imports excluded, for the Python baselines too).
Baselines: ``cp -r`` for local, one s3fs ``put``/``get`` (recursive) for S3.
Targets (issue 2): within 1.3x of the baseline, peak RSS under 200 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LARGE_FILES = 3
SMALL_FILE_KIB = 64
TIME_RATIO_TARGET = 1.3
RSS_TARGET_MIB = 200


@dataclass(frozen=True)
class Sample:
    seconds: float
    peak_rss_mib: float


def make_artifact(root: Path, size_mib: int) -> tuple[int, int]:
    """A few large files (15/16 of the bytes) and many 64 KiB ones; returns (files, bytes)."""
    small_total = size_mib * 1024 * 1024 // 16
    large_each = (size_mib * 1024 * 1024 - small_total) // LARGE_FILES
    block = os.urandom(4 * 1024 * 1024)
    root.mkdir(parents=True)
    for i in range(LARGE_FILES):
        with open(root / f"model-{i:05d}-of-{LARGE_FILES:05d}.safetensors", "wb") as f:
            left = large_each
            while left:
                n = min(left, len(block))
                f.write(block[:n] if i == 0 else os.urandom(n))
                left -= n
    small = root / "tokenizer"
    small.mkdir()
    count = small_total // (SMALL_FILE_KIB * 1024)
    for i in range(count):
        (small / f"shard-{i:05d}.bin").write_bytes(os.urandom(SMALL_FILE_KIB * 1024))
    total = large_each * LARGE_FILES + count * SMALL_FILE_KIB * 1024
    return LARGE_FILES + count, total


def run_child(argv: list[str], env: dict[str, str] | None = None) -> Sample:
    """Run one operation in a child; its own peak RSS from wait4, its time as it
    reports it on stdout (JSON ``{"seconds": ...}``) or else the wall time."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env={**os.environ, **(env or {})},
                            cwd=ROOT)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} failed with {proc.returncode}")
    lines = out.decode().strip().splitlines()
    seconds = json.loads(lines[-1])["seconds"] if lines else wall
    return Sample(seconds, usage.ru_maxrss / 1024)


def python_op(op: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "bench.registry_bench", "--child", op, *args]


def child_main(op: str, args: list[str]) -> None:
    """The operations the children run; prints the time taken as JSON."""
    if op in ("push", "pull"):
        from registry import Registry

        reg = Registry.open(args[0])
        started = time.perf_counter()
        if op == "push":
            reg.push(args[1], "bench", "feature-extraction")
        else:
            reg.fetch("bench", "latest", args[1])
    else:
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
        started = time.perf_counter()
        if op == "s3fs-put":
            fs.put(args[0], args[1], recursive=True)
        else:
            fs.get(args[0], args[1], recursive=True)
    print(json.dumps({"seconds": time.perf_counter() - started}))


def median(samples: list[Sample]) -> Sample:
    return Sample(statistics.median(s.seconds for s in samples),
                  max(s.peak_rss_mib for s in samples))


Results = dict[str, list[Sample]]


def interleave(runs: int, ops: dict[str, Callable[[int], Sample]]) -> Results:
    """Run each op ``runs`` times, alternating ops within a round so that the
    baseline and the registry see the same machine (the VM is shared and noisy).
    Dirty pages are flushed before every run so none inherits another's backlog."""
    results: Results = {name: [] for name in ops}
    for i in range(runs):
        for name, once in ops.items():
            os.sync()
            results[name].append(once(i))
    return results


def bench_local(work: Path, src: Path, runs: int) -> Results:
    def cp(source: Path, tag: str) -> Callable[[int], Sample]:
        def once(i: int) -> Sample:
            dst = work / f"{tag}-{i}"
            try:
                return run_child(["cp", "-r", str(source), str(dst)])
            finally:
                shutil.rmtree(dst, ignore_errors=True)
        return once

    def reg_push(i: int) -> Sample:
        reg = work / f"reg-{i}"
        try:
            return run_child(python_op("push", str(reg), str(src)))
        finally:
            shutil.rmtree(reg, ignore_errors=True)

    results = interleave(runs, {"local push: cp -r": cp(src, "cp"),
                                "local push: registry": reg_push})
    reg = work / "reg-pull"
    run_child(python_op("push", str(reg), str(src)))

    def reg_pull(i: int) -> Sample:
        dst = work / f"reg-pull-{i}"
        try:
            return run_child(python_op("pull", str(reg), str(dst)))
        finally:
            shutil.rmtree(dst, ignore_errors=True)

    results.update(interleave(runs, {"local pull: cp -r": cp(reg / "bench" / "1", "cp-pull"),
                                     "local pull: registry": reg_pull}))
    shutil.rmtree(reg, ignore_errors=True)
    return results


def bench_s3(work: Path, src: Path, runs: int) -> Results:
    from tests.support.seaweed import seaweed_s3

    with seaweed_s3(work / "seaweed") as s3:
        s3.create_bucket("bench")
        env = s3.env()
        results = interleave(runs, {
            "s3 push: s3fs put": lambda i: run_child(
                python_op("s3fs-put", str(src), f"bench/plain-{i}"), env),
            "s3 push: registry": lambda i: run_child(
                python_op("push", f"s3://bench/reg-{i}", str(src)), env),
        })

        def download(op: str, remote: str) -> Callable[[int], Sample]:
            def once(i: int) -> Sample:
                dst = work / f"{op}-{i}"
                try:
                    return run_child(python_op(op, remote, str(dst)), env)
                finally:
                    shutil.rmtree(dst, ignore_errors=True)
            return once

        results.update(interleave(runs, {
            "s3 pull: s3fs get": download("s3fs-get", "bench/plain-0"),
            "s3 pull: registry": download("pull", "s3://bench/reg-0"),
        }))
        s3.filesystem().rm("bench", recursive=True)
    return results


def profile_local_copy(src: Path, work: Path) -> str:
    """Where a local push spends its time: the registry's own per-file copy
    (``copy_stream`` with a sha256 observer, as ``LocalStore.put_file`` runs it)
    over every file, in one thread, under cProfile."""
    import cProfile
    import io
    import pstats

    from registry._checksum import Digest, copy_stream

    dst = work / "profile"
    files = [p for p in sorted(src.rglob("*")) if p.is_file()]

    def copy_all() -> None:
        for path in files:
            target = dst / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_stream(path, target, Digest().update)

    os.sync()
    profiler = cProfile.Profile()
    profiler.runcall(copy_all)
    shutil.rmtree(dst, ignore_errors=True)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(6)
    return out.getvalue()


def report(results: Results, files: int, size: int) -> str:
    lines = [f"artifact: {files} files, {size / 2**30:.2f} GiB "
             f"({LARGE_FILES} large + {files - LARGE_FILES} x {SMALL_FILE_KIB} KiB)",
             "", "| operation | median s | runs (s) | peak RSS MiB | vs baseline | target |",
             "|---|---:|---|---:|---:|---|"]
    baseline: dict[str, float] = {}
    for name, samples in results.items():
        med = median(samples)
        kind, tool = name.split(": ")
        runs = ", ".join(f"{s.seconds:.2f}" for s in samples)
        if tool != "registry":
            baseline[kind] = med.seconds
            lines.append(f"| {name} | {med.seconds:.2f} | {runs} | "
                         f"{med.peak_rss_mib:.0f} | 1.00 | |")
            continue
        ratio = med.seconds / baseline[kind]
        ok = ratio <= TIME_RATIO_TARGET and med.peak_rss_mib < RSS_TARGET_MIB
        verdict = "met" if ok else (
            f"MISSED ({'time' if ratio > TIME_RATIO_TARGET else ''}"
            f"{' rss' if med.peak_rss_mib >= RSS_TARGET_MIB else ''})")
        lines.append(f"| {name} | {med.seconds:.2f} | {runs} | {med.peak_rss_mib:.0f} | "
                     f"{ratio:.2f} | {verdict} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        child_main(argv[1], argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["local", "s3"])
    parser.add_argument("--tmp", default="/tmp", help="where the scratch directory goes")
    parser.add_argument("--profile", action="store_true",
                        help="also profile the local copy-and-hash path (one thread)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="registry-bench-", dir=args.tmp))
    try:
        files, size = make_artifact(work / "src", args.size_mib)
        results: Results = {}
        if args.only in (None, "local"):
            results.update(bench_local(work, work / "src", args.runs))
        if args.only in (None, "s3"):
            results.update(bench_s3(work, work / "src", args.runs))
        print(report(results, files, size))
        if args.profile:
            print("\n" + profile_local_copy(work / "src", work))
        print(f"\nload average at the end: {os.getloadavg()[0]:.2f} (2 cores)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
