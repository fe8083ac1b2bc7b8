"""``fixed-latency``: a measurement task that sleeps a fixed time per batch.

It is the ``batched_sample`` model of the seed design: whatever the batch size
(1..max), one batch takes ``latency_ms``; above ``max_batch_size`` it raises. It
lets the batcher be measured apart from model compute, and its test hooks
(``poison`` items, ``oom_above``) let tests exercise bisection and OOM splitting
against a real process. Options come from the artifact's ``task.json``.

For multi-model tests and benchmarks (``predictor/multi``) a version can stand for a
model of a given size and load time: ``"hold_mb": M`` makes its load allocate M MiB of
tensor memory (measured like any model's weights), ``"load_ms": T`` makes the load take
T ms, ``"fail_load": true`` makes it raise.

Test only: with ``"allow_exit_items": true`` in ``task.json`` (never in a real artifact),
an item ``{"exit_process": true}`` ends the process that runs it at once (``os._exit``),
as a segfaulting or OOM-killed model would: the queue tests' poison input.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from predictor._errors import BadInput
from predictor.handlers._base import (
    BatchReport,
    RequestOptions,
    TensorSpec,
    read_task_options,
)

# An echoed instance goes back through orjson, which refuses to encode past 254 levels.
MAX_NESTING = 64
_KNOWN_OPTIONS = {"latency_ms", "max_batch_size", "oom_above", "output_prefix", "prefix_share",
                  "allow_exit_items", "hold_mb", "load_ms", "fail_load"}


class PoisonItemError(ValueError):
    """Raised for an item marked ``{"poison": true}``: a bad input that fails its batch."""


class FixedLatencyHandler:
    """Echoes each instance back after sleeping ``latency_ms`` per batch."""

    task = "fixed-latency"
    inputs = (TensorSpec("input", "BYTES", (-1,)),)
    outputs = (TensorSpec("output", "BYTES", (-1,)),)

    def __init__(self, model_dir: Path, *, max_input_chars: int = 20000, **_: Any) -> None:
        options = read_task_options(Path(model_dir))
        unknown = set(options) - _KNOWN_OPTIONS
        if unknown:
            raise BadInput(f"unknown fixed-latency options in task.json: {sorted(unknown)}")
        self.latency_s = float(options.get("latency_ms", 100.0)) / 1000.0
        self.max_batch_size: int | None = int(options.get("max_batch_size", 100))
        oom_above = options.get("oom_above")
        self.oom_above = int(oom_above) if oom_above is not None else None
        self.max_input_chars = max_input_chars
        # A version whose outputs differ from the echo (shadow-evaluation tests): all of
        # them, or (accuracy tests) the share ``prefix_share`` of the string items, chosen
        # by the item's hash, so that the same items are wrong every time.
        self.output_prefix = str(options.get("output_prefix", ""))
        self.prefix_share = float(options.get("prefix_share", 1.0))
        self.allow_exit_items = options.get("allow_exit_items") is True
        self.hold_bytes = int(float(options.get("hold_mb", 0)) * 2**20)
        self.load_s = float(options.get("load_ms", 0)) / 1000.0
        self.fail_load = options.get("fail_load") is True
        self.weights: Any = None
        if self.latency_s < 0 or (self.max_batch_size or 0) < 1:
            raise BadInput("fixed-latency needs latency_ms >= 0 and max_batch_size >= 1")
        if self.hold_bytes < 0 or self.load_s < 0:
            raise BadInput("fixed-latency needs hold_mb >= 0 and load_ms >= 0")
        if not 0.0 <= self.prefix_share <= 1.0:
            raise BadInput("fixed-latency needs prefix_share within 0-1")

    def load(self) -> None:
        """No weights to read; ``hold_mb``, ``load_ms`` and ``fail_load`` act here."""
        time.sleep(self.load_s)
        if self.fail_load:
            raise BadInput("fixed-latency: this version's task.json says fail_load")
        if self.hold_bytes:
            import torch

            self.weights = torch.ones(self.hold_bytes, dtype=torch.uint8)  # touched: resident

    def parse(self, instance: Any, options: RequestOptions) -> Any:
        if isinstance(instance, str) and len(instance) > self.max_input_chars:
            raise BadInput(
                f"instance has {len(instance)} characters; the limit is {self.max_input_chars}"
            )
        if isinstance(instance, list | dict):
            # Shape first, walking at most max_input_chars values: str() of a deep instance
            # would overflow repr (and the JSON encoder), of a huge one stall the loop.
            problem = _shape_problem(instance, MAX_NESTING, self.max_input_chars)
            if problem:
                raise BadInput(f"instance is {problem}")
            if len(str(instance)) > self.max_input_chars:
                raise BadInput(f"instance is larger than {self.max_input_chars} characters")
        return instance

    def prepare_is_cheap(self, items: Sequence[Any]) -> bool:
        return True

    def prepare(self, items: Sequence[Any]) -> list[Any]:
        return list(items)

    def run(self, batch: Sequence[Any]) -> list[Any]:
        size = len(batch)
        if self.max_batch_size is not None and size > self.max_batch_size:
            raise RuntimeError(f"batch of {size} exceeds the fixed-latency max of "
                               f"{self.max_batch_size}")
        if self.oom_above is not None and size > self.oom_above:
            import torch

            raise torch.cuda.OutOfMemoryError(f"simulated OOM for a batch of {size}")
        if self.allow_exit_items and any(
                isinstance(item, dict) and item.get("exit_process") is True for item in batch):
            os._exit(70)  # test only: the process dies holding its batch
        if any(isinstance(item, dict) and item.get("poison") is True for item in batch):
            raise PoisonItemError("poison item in batch")
        time.sleep(self.latency_s)
        if self.output_prefix:
            return [self.output_prefix + x if isinstance(x, str) and self._prefixed(x) else x
                    for x in batch]
        return list(batch)

    def _prefixed(self, item: str) -> bool:
        if self.prefix_share >= 1.0:
            return True
        digest = hashlib.sha256(item.encode()).digest()
        return int.from_bytes(digest[:8], "big") < self.prefix_share * 2**64

    def to_v1(self, result: Any) -> Any:
        return result

    def to_v2(self, results: Sequence[Any]) -> list[tuple[TensorSpec, list[Any]]]:
        return [(TensorSpec("output", "BYTES", (len(results),)), [str(r) for r in results])]

    def warmup_instances(self) -> list[Any]:
        return ["warm-up"]

    def last_batch_report(self) -> BatchReport:
        return BatchReport()


def _shape_problem(value: Any, max_depth: int, max_values: int) -> str | None:
    """Why ``value`` is too deep or holds too many values to echo, or None (iterative)."""
    stack = [(value, 1)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return f"nested deeper than {max_depth} levels"
        children = list(node.values()) if isinstance(node, dict) else node
        seen += len(children)
        if seen > max_values:  # each value takes at least one character
            return f"larger than {max_values} characters"
        stack.extend((c, depth + 1) for c in children if isinstance(c, list | dict))
    return None
