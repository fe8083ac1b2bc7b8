"""The handler contract and what every handler shares.

A handler turns request items into per-item results in three steps, each on the
thread that suits it: ``parse`` (event loop: cheap validation), ``prepare``
(a pre-processing thread pool: tokenisation, so it never waits behind the device)
and ``run`` (the single device thread: one batch at a time).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from predictor._errors import BadInput

# Weight files that can execute code when loaded (pickle): never loaded, always refused.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
TASK_OPTIONS_FILE = "task.json"


@dataclass(frozen=True)
class TensorSpec:
    """A V2 input or output as the metadata endpoint describes it."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass(frozen=True)
class RequestOptions:
    """Per-request parameters (V1 ``parameters`` / V2 request ``parameters``)."""

    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchReport:
    """What a handler measured about its last batch (padding, for metrics)."""

    real_tokens: int = 0
    padded_tokens: int = 0


class Handler(Protocol):
    """One task's model: load it, validate items, prepare them, run batches."""

    task: ClassVar[str]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int | None
    def load(self) -> None: ...

    def prepare_is_cheap(self, items: Sequence[Any]) -> bool:
        """True when prepare(items) costs less than a trip to the prepare pool (tens of
        microseconds): it then runs inline on the event loop."""
        ...

    def parse(self, instance: Any, options: RequestOptions) -> Any: ...

    def prepare(self, items: Sequence[Any]) -> list[Any]: ...

    def run(self, batch: Sequence[Any]) -> list[Any]: ...

    def to_v1(self, result: Any) -> Any: ...

    def to_v2(self, results: Sequence[Any]) -> list[tuple[TensorSpec, list[Any]]]: ...

    def warmup_instances(self) -> list[Any]: ...

    def last_batch_report(self) -> BatchReport: ...


def read_task_options(model_dir: Path) -> dict[str, Any]:
    """The task's options from ``task.json`` in the artifact (empty when absent)."""
    path = model_dir / TASK_OPTIONS_FILE
    if not path.exists():
        return {}
    try:
        options = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(options, dict):
        raise BadInput(f"{path} must hold a JSON object of task options")
    return options


def refuse_pickle_weights(model_dir: Path) -> None:
    """Refuse artifacts that carry pickle-based weights: only safetensors load."""
    offenders = sorted(
        str(p.relative_to(model_dir))
        for p in model_dir.rglob("*")
        if p.is_file() and p.suffix.lower() in PICKLE_SUFFIXES
    )
    if offenders:
        raise BadInput(
            "refusing to load pickle-based weight files (only safetensors are allowed): "
            + ", ".join(offenders)
        )
    if not any(model_dir.rglob("*.safetensors")):
        raise BadInput(f"no *.safetensors weights in {model_dir}")


def require_text(instance: Any, max_chars: int, *, what: str = "instance") -> str:
    """Validate one text item: a non-empty string within the size limit."""
    if not isinstance(instance, str):
        raise BadInput(f"each {what} must be a string, got {type(instance).__name__}")
    if not instance:
        raise BadInput(f"empty string in {what}")
    if len(instance) > max_chars:
        raise BadInput(f"{what} has {len(instance)} characters; the limit is {max_chars}")
    return instance
