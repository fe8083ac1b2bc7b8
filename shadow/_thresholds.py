"""What a shadow report must show to pass: thresholds from a YAML file and/or flags.

```yaml
min_pairs: 30                     # fewer paired requests: Inconclusive
confidence: 0.95                  # of every interval
max_error_rate_increase: 0.01     # shadow 5xx rate - primary's, over the pairs
max_timeout_rate_increase: 0.01   # same for 408/503/504
max_latency_p99_ratio: 2.0        # shadow p99 / primary p99
min_coverage: null                # mirrored / primary requests (null: not judged)
tasks:
  text-classification: {min_label_match: 0.95}
  feature-extraction:  {min_cosine_mean: 0.99, min_cosine_p5: 0.95}
  text-generation:     {min_exact_match: null, min_token_jaccard_mean: 0.8}
  llm:                 {min_exact_match: null, min_token_jaccard_mean: 0.8}
  fixed-latency:       {min_exact_match: 0.99}
```

Every key is optional (the defaults above apply) and ``null`` turns a check off.
A flag ``--threshold KEY=VALUE`` overrides one key: a top-level key, a task's key
as ``TASK.KEY``, or a task key alone (it then applies to every task that has it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shadow._errors import ThresholdsError

TASK_DEFAULTS: dict[str, dict[str, float | None]] = {
    "text-classification": {"min_label_match": 0.95},
    "feature-extraction": {"min_cosine_mean": 0.99, "min_cosine_p5": 0.95},
    "text-generation": {"min_exact_match": None, "min_token_jaccard_mean": 0.8},
    "llm": {"min_exact_match": None, "min_token_jaccard_mean": 0.8},
    "fixed-latency": {"min_exact_match": 0.99},
}
_FRACTIONS = {"min_label_match", "min_exact_match", "min_token_jaccard_mean", "min_coverage",
              "max_error_rate_increase", "max_timeout_rate_increase", "confidence"}
_COSINES = {"min_cosine_mean", "min_cosine_p5"}


@dataclass(frozen=True)
class Thresholds:
    """The report's pass criteria; ``None`` means a check is not judged."""

    min_pairs: int = 30
    confidence: float = 0.95
    max_error_rate_increase: float | None = 0.01
    max_timeout_rate_increase: float | None = 0.01
    max_latency_p99_ratio: float | None = 2.0
    min_coverage: float | None = None
    tasks: Mapping[str, Mapping[str, float | None]] = field(
        default_factory=lambda: {t: dict(v) for t, v in TASK_DEFAULTS.items()})

    def __post_init__(self) -> None:
        if self.min_pairs < 1:
            raise ThresholdsError(f"min_pairs must be >= 1, got {self.min_pairs}")
        if not 0.0 < self.confidence < 1.0:
            raise ThresholdsError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.max_latency_p99_ratio is not None and self.max_latency_p99_ratio <= 0:
            raise ThresholdsError("max_latency_p99_ratio must be > 0")
        for key in ("max_error_rate_increase", "max_timeout_rate_increase", "min_coverage"):
            _check_range(key, getattr(self, key))
        for task, values in self.tasks.items():
            for key, value in values.items():
                _check_range(f"{task}.{key}", value)

    def for_task(self, task: str) -> Mapping[str, float | None]:
        return self.tasks.get(task, {})

    def to_dict(self) -> dict[str, Any]:
        return {"min_pairs": self.min_pairs, "confidence": self.confidence,
                "max_error_rate_increase": self.max_error_rate_increase,
                "max_timeout_rate_increase": self.max_timeout_rate_increase,
                "max_latency_p99_ratio": self.max_latency_p99_ratio,
                "min_coverage": self.min_coverage,
                "tasks": {t: dict(v) for t, v in self.tasks.items()}}


def _check_range(key: str, value: float | None) -> None:
    if value is None:
        return
    name = key.rsplit(".", 1)[-1]
    if not math.isfinite(value):
        raise ThresholdsError(f"threshold {key} must be a finite number, got {value}")
    if name in _COSINES and not -1.0 <= value <= 1.0:
        raise ThresholdsError(f"threshold {key} must be in [-1, 1], got {value}")
    if name in _FRACTIONS and not 0.0 <= value <= 1.0:
        raise ThresholdsError(f"threshold {key} must be in [0, 1], got {value}")


def load_thresholds(path: Path | None = None, overrides: Iterable[str] = ()) -> Thresholds:
    """Defaults, then the YAML file (if any), then each ``KEY=VALUE`` override."""
    values = Thresholds().to_dict()
    if path is not None:
        _merge(values, _read_yaml(path), str(path))
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ThresholdsError(f"--threshold {item!r}: expected KEY=VALUE, e.g. "
                                  "min_label_match=0.9")
        _set(values, key.strip(), _number(raw.strip(), key.strip()), f"--threshold {item}")
    tasks = values.pop("tasks")
    min_pairs = values.pop("min_pairs")
    if min_pairs is None or float(min_pairs) != int(min_pairs):
        raise ThresholdsError(f"min_pairs must be a whole number, got {min_pairs}")
    if values["confidence"] is None:
        raise ThresholdsError("confidence cannot be null")
    return Thresholds(min_pairs=int(min_pairs), tasks=tasks, **values)


def _read_yaml(path: Path) -> Mapping[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ThresholdsError(f"cannot read thresholds file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid YAML"
        raise ThresholdsError(f"{path}: not valid YAML: {first}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ThresholdsError(f"{path}: expected a mapping of thresholds")
    return data


def _merge(values: dict[str, Any], data: Mapping[str, Any], source: str) -> None:
    for key, value in data.items():
        if key == "tasks":
            if not isinstance(value, dict):
                raise ThresholdsError(f"{source}: 'tasks' must map task names to thresholds")
            for task, task_values in value.items():
                if not isinstance(task_values, dict):
                    raise ThresholdsError(f"{source}: tasks.{task} must be a mapping")
                for name, number in task_values.items():
                    _set(values, f"{task}.{name}", _number(number, f"{task}.{name}"), source)
        else:
            _set(values, str(key), _number(value, str(key)), source)


def _set(values: dict[str, Any], key: str, value: float | None, source: str) -> None:
    tasks: dict[str, dict[str, float | None]] = values["tasks"]
    if "." in key:
        task, name = key.split(".", 1)
        if task not in tasks or name not in tasks[task]:
            raise ThresholdsError(f"{source}: unknown threshold {key!r} (allowed: "
                                  f"{', '.join(_allowed(values))})")
        tasks[task][name] = value
    elif key in values and key != "tasks":
        values[key] = value
    elif any(key in task_values for task_values in tasks.values()):
        for task_values in tasks.values():
            if key in task_values:
                task_values[key] = value
    else:
        raise ThresholdsError(f"{source}: unknown threshold {key!r} (allowed: "
                              f"{', '.join(_allowed(values))})")


def _allowed(values: Mapping[str, Any]) -> list[str]:
    top = [k for k in values if k != "tasks"]
    nested = [f"{t}.{k}" for t, v in values["tasks"].items() for k in v]
    return sorted(top) + nested


def _number(value: Any, key: str) -> float | None:
    if value is None or (isinstance(value, str) and value.lower() in ("null", "none", "off")):
        return None
    if isinstance(value, bool):
        raise ThresholdsError(f"threshold {key} must be a number or null, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ThresholdsError(f"threshold {key} must be a number or null, got {value!r}") from None
