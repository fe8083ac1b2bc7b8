"""What ``modelctl profile`` is asked to measure: the batch sizes, the inputs, how many runs.

Light on purpose (no predictor, no torch): the CLI parses and checks its flags with it
before anything heavy loads, so a bad flag fails in milliseconds with one line.

How many runs: each batch size runs ``warmup_runs`` untimed first (allocator, caches,
lazy kernels), then is timed until it has at least ``runs`` samples *and* at least
``min_seconds`` of them, or ``max_runs`` samples, whichever comes first. The defaults,
100 runs and 2 s, put at least one sample above p99 and, for a fast model, hundreds
of samples (tens above p99): enough that p99 is an order statistic, not a guess;
``max_runs`` keeps a sub-millisecond model's profile small.

Torch's threads: t(b) on a CPU depends on how many threads one forward pass uses, and
so does what is left for the HTTP edge, so the profile is measured at one thread count
and the plan deploys that count (``--torch_threads``). ``torch_threads`` 0 picks it:
on a CPU device every usable core but one (at least one), so the edge's event loop
and tokenising keep a core to themselves. Served with all cores, MiniLM on two cores
ran in two steady states at the same rate (small batches that keep up, and large
ones whose next batch's tokenising stalls torch's OpenMP team); with one core left
to the edge its batches under load took what the profile measured (x0.94,
docs/BENCHMARKS.md "Capacity plans"). On a GPU 0 keeps torch's own choice.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capacity._profile import DEVICE_KINDS, ProfileError

DEFAULT_RUNS = 100
DEFAULT_MIN_SECONDS = 2.0
DEFAULT_WARMUP_RUNS = 5
DEFAULT_MAX_RUNS = 2000
DEFAULT_EDGE_REQUESTS = 200
# The default sizes: 1, 2, 4, ... at least up to the predictor's own --max_batch_size
# default (what it would run unplanned) or the task's limit, then on while a doubling
# still cuts the time per item by MIN_GAIN, up to the task's limit (included), the
# device's memory, or ADAPTIVE_CAP.
DEFAULT_MAX_SIZE = 32
MIN_GAIN = 0.05
ADAPTIVE_CAP = 1024

# A representative request when no --inputs is given: short and longer texts, as the
# text tasks see them (fixed-latency echoes them). Batches cycle through them.
DEFAULT_INPUTS: tuple[str, ...] = (
    "Great service, thank you.",
    "The parcel arrived two days late and the box was damaged.",
    "How do I reset my password?",
    "I have been a customer for six years and this is the first time I am writing to "
    "complain: the new billing page hides the invoice history, the export button does "
    "nothing in two browsers, and the support chat closed my ticket without an answer.",
    "Short.",
    "The update fixed the crash on start-up, but the sync is slower than before and the "
    "settings I chose last week were reset to their defaults after the restart.",
)


@dataclass(frozen=True)
class ProfileOptions:
    """How one profile is measured; ``batch_sizes`` empty: the ladder ``next_size``
    climbs (1, 2, 4, ... as far as a larger batch still pays)."""

    device: str = "cpu"
    batch_sizes: tuple[int, ...] = ()
    inputs: tuple[Any, ...] = DEFAULT_INPUTS
    runs: int = DEFAULT_RUNS
    min_seconds: float = DEFAULT_MIN_SECONDS
    warmup_runs: int = DEFAULT_WARMUP_RUNS
    max_runs: int = DEFAULT_MAX_RUNS
    edge_requests: int = DEFAULT_EDGE_REQUESTS
    edge_warmup_requests: int = 20
    load_timeout_s: float = 600.0
    torch_threads: int = 0  # 0: cores - 1 on a CPU device, torch's choice on a GPU

    def __post_init__(self) -> None:
        if self.device not in DEVICE_KINDS:
            raise ProfileError(f"--device must be one of {', '.join(DEVICE_KINDS)}, "
                               f"got {self.device!r}")
        if any(size < 1 for size in self.batch_sizes):
            raise ProfileError(f"batch sizes must be >= 1, got {list(self.batch_sizes)}")
        if list(self.batch_sizes) != sorted(set(self.batch_sizes)):
            raise ProfileError("batch sizes must be distinct and ascending")
        if not self.inputs:
            raise ProfileError("no inputs to profile with")
        for name in ("runs", "max_runs", "edge_requests"):
            if getattr(self, name) < 1:
                raise ProfileError(f"--{name.replace('_', '-')} must be >= 1, "
                                   f"got {getattr(self, name)}")
        if self.max_runs < self.runs:
            raise ProfileError(f"max_runs ({self.max_runs}) must be >= runs ({self.runs})")
        if self.torch_threads < 0:
            raise ProfileError(f"--torch-threads must be >= 0 (0: pick), "
                               f"got {self.torch_threads}")
        if self.warmup_runs < 0 or self.edge_warmup_requests < 0:
            raise ProfileError("warm-up counts must be >= 0")
        for name in ("min_seconds", "load_timeout_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ProfileError(f"--{name.replace('_', '-')} must be a finite number >= 0, "
                                   f"got {value!r}")

    def threads_for(self, usable_cpus: int) -> int:
        """The torch threads to measure and serve with; 0 leaves torch's own choice."""
        if self.torch_threads:
            return self.torch_threads
        return max(1, usable_cpus - 1) if self.device == "cpu" else 0

    def sizes_for(self, task_limit: int | None) -> tuple[int, ...]:
        """The sizes given (``--batch-sizes``), checked against the task's batch limit;
        empty when the ladder (``next_size``) chooses them."""
        if task_limit is not None and self.batch_sizes and self.batch_sizes[-1] > task_limit:
            raise ProfileError(f"batch size {self.batch_sizes[-1]} is above this task's limit "
                               f"of {task_limit} items per batch")
        return self.batch_sizes


def next_size(measured: list[tuple[int, float]], task_limit: int | None) -> tuple[int | None, str]:
    """The ladder's next batch size after ``measured`` ((size, p50 ms) so far, ascending),
    or None and why the ladder stops there."""
    if not measured:
        return 1, ""
    size, p50_ms = measured[-1]
    top = min(task_limit or ADAPTIVE_CAP, ADAPTIVE_CAP)
    if size >= top:
        return None, (f"the task's limit of {top} items per batch" if top == task_limit
                      else f"the profile's cap of {ADAPTIVE_CAP}")
    if size >= DEFAULT_MAX_SIZE and len(measured) >= 2:
        before, before_ms = measured[-2]
        gain = 1.0 - (p50_ms / size) / (before_ms / before)
        if gain < MIN_GAIN:
            return None, (f"batch {size} took {p50_ms / size:.3g} ms an item, {gain:+.0%} "
                          f"against batch {before}: a larger batch no longer pays")
    return min(size * 2, top), ""


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """``"1,2,4,8"`` (any order, repeats ignored) as ascending sizes; each must be >= 1."""
    sizes: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            size = int(part)
        except ValueError:
            raise ProfileError(f"--batch-sizes: {part!r} is not a whole number (want e.g. "
                               "1,2,4,8,16)") from None
        if size < 1:
            raise ProfileError(f"--batch-sizes: every size must be >= 1, got {size}")
        sizes.add(size)
    return tuple(sorted(sizes))


def read_inputs(path: Path) -> tuple[Any, ...]:
    """The instances in a JSON-lines file, one V1 instance a line (blank lines skipped)."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"--inputs {path}: cannot read it: {exc}") from None
    instances = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            instances.append(json.loads(line))
        except ValueError as exc:
            raise ProfileError(f"--inputs {path} line {number}: not JSON ({exc}); want one V1 "
                               "instance per line") from None
    if not instances:
        raise ProfileError(f"--inputs {path}: no instances (want one JSON value a line)")
    return tuple(instances)
