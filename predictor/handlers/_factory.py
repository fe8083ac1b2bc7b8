"""Pick the handler for a task; an unknown task is an error, never a fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from predictor._errors import BadInput
from predictor.handlers._base import Handler
from predictor.handlers._classification import ClassificationHandler
from predictor.handlers._embedding import EmbeddingHandler
from predictor.handlers._fixed_latency import FixedLatencyHandler
from predictor.handlers._generation import GenerationHandler

HANDLERS: dict[str, type[Any]] = {
    "feature-extraction": EmbeddingHandler,
    "text-classification": ClassificationHandler,
    "text-generation": GenerationHandler,
    "fixed-latency": FixedLatencyHandler,
}


def create_handler(task: str, model_dir: Path, **options: Any) -> Handler:
    """The handler for ``task`` over the artifact in ``model_dir``."""
    try:
        cls = HANDLERS[task]
    except KeyError:
        known = ", ".join(sorted(HANDLERS))
        raise BadInput(f"unknown task {task!r}; this predictor serves: {known}") from None
    handler: Handler = cls(Path(model_dir), **options)
    return handler
