"""The shadow report on a million synthetic request pairs: time and peak memory.

    python -m bench.shadow_bench                      # 1,000,000 pairs, classification, 3 runs
    python -m bench.shadow_bench --pairs 200000 --task feature-extraction --dim 32

Synthetic captures with the predictor's own Parquet schema (written in files of
100,000 records, as a busy predictor would rotate them): the primary and the shadow
answer the same request IDs; the shadow disagrees on ~3% of labels (or its
embeddings are perturbed), ~0.5% of each side's answers are 5xx, latencies are
lognormal. Each run builds the report in its own child process, timed inside the
child around ``build_report`` only; peak RSS is the child's (``wait4`` rusage),
imports included. DuckDB runs with the report's default 1 GiB memory limit unless
``--memory-mb`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILE_ROWS = 100_000
LABELS = ("negative", "neutral", "positive")

_CHILD = """
import json, sys, time
from shadow._report import ReportRequest, build_report
started = time.perf_counter()
report = build_report(ReportRequest(sys.argv[1], sys.argv[2], sys.argv[3],
                                    memory_limit_mb=int(sys.argv[4])))
elapsed = time.perf_counter() - started
print(json.dumps({"seconds": elapsed, "verdict": report.verdict.value,
                  "pairs": report.document["pairs"]["pairs"]}))
"""


def _outputs(task: str, rng: object, first: int, n: int, dim: int, disagree: bool) -> list[str]:
    import numpy as np

    assert isinstance(rng, np.random.Generator)
    same = np.random.default_rng(first)  # what both sides agree on, chunk by chunk
    if task == "text-classification":
        labels = same.integers(0, len(LABELS), n)
        if disagree:
            flip = rng.random(n) < 0.03
            labels = np.where(flip, (labels + 1) % len(LABELS), labels)
        scores = rng.random(n)
        return [f'[{{"label":"{LABELS[lab]}","score":{s:.6f}}}]' for lab, s in
                zip(labels.tolist(), scores.tolist(), strict=True)]
    base = same.standard_normal((n, dim))
    if disagree:
        base = base + 0.05 * rng.standard_normal((n, dim))
    return ["[" + json.dumps([round(x, 5) for x in row]) + "]" for row in base.tolist()]


def write_side(root: Path, role: str, pairs: int, task: str, dim: int, seed: int) -> None:
    """One side's capture files, FILE_ROWS records each."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from captures import capture_schema

    rng = np.random.default_rng(seed)
    out = root / "demo" / role / "2026-11-29"
    out.mkdir(parents=True, exist_ok=True)
    start_ms = 1_795_900_000_000
    for index, first in enumerate(range(0, pairs, FILE_ROWS)):
        n = min(FILE_ROWS, pairs - first)
        ids = [f"{i:032x}" for i in range(first, first + n)]
        status = np.where(rng.random(n) < 0.005, 500, 200).astype("int32")
        outputs = _outputs(task, rng, first, n, dim, disagree=role == "shadow")
        columns = {
            "request_id": ids,
            "ts": pa.array(start_ms + np.arange(first, first + n) * 3, type=pa.timestamp(
                "ms", tz="UTC")),
            "model": ["demo"] * n,
            "version": ["2" if role == "shadow" else "1"] * n,
            "role": [role] * n,
            "task": [task] * n,
            "protocol": ["v1"] * n,
            "status": status,
            "latency_ms": rng.lognormal(np.log(80.0), 0.4, n),
            "items": np.ones(n, dtype="int32"),
            "input_hash": [f"{i:064x}" for i in range(first, first + n)],
            "input": [None] * n,
            "output": [o if s == 200 else None for o, s in zip(outputs, status.tolist(),
                                                               strict=True)],
            "error": [None if s == 200 else "injected" for s in status.tolist()],
        }
        table = pa.Table.from_pydict(columns, schema=capture_schema())
        pq.write_table(table, out / f"part-{index:05d}.parquet", compression="zstd")


def run_once(model: str, primary: Path, shadow: Path, memory_mb: int) -> tuple[
        float, float, dict[str, object]]:
    """(seconds inside the child, peak RSS MiB of the child, its result)."""
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, model, str(primary), str(shadow),
                             str(memory_mb)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    output = proc.stdout.read() if proc.stdout else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"report failed: {output}")
    result = json.loads(output.strip().splitlines()[-1])
    return float(result["seconds"]), usage.ru_maxrss / 1024.0, result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--task", default="text-classification",
                        choices=("text-classification", "feature-extraction"))
    parser.add_argument("--dim", type=int, default=32, help="embedding size (feature-extraction)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--memory-mb", type=int, default=1024, help="DuckDB's memory limit")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shadow-bench-") as tmp:
        root = Path(tmp)
        write_side(root / "primary", "stable", args.pairs, args.task, args.dim, seed=1)
        write_side(root / "shadow", "shadow", args.pairs, args.task, args.dim, seed=2)
        size_mib = sum(p.stat().st_size for p in root.rglob("*.parquet")) / 2**20
        samples = [run_once("demo", root / "primary", root / "shadow", args.memory_mb)
                   for _ in range(args.runs)]
    seconds = [s for s, _, _ in samples]
    rss = [r for _, r, _ in samples]
    print(f"{args.pairs} pairs, {args.task}, captures {size_mib:.0f} MiB on disk, "
          f"DuckDB memory limit {args.memory_mb} MiB")
    print(f"time s: median {statistics.median(seconds):.2f} "
          f"({', '.join(f'{s:.2f}' for s in seconds)})")
    print(f"peak RSS MiB: median {statistics.median(rss):.0f} "
          f"({', '.join(f'{r:.0f}' for r in rss)})")
    print(f"verdict {samples[0][2]['verdict']}, pairs {samples[0][2]['pairs']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
