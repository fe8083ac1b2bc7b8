"""``feature-extraction``: mean-pooled, optionally normalised sentence embeddings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from predictor.handlers._base import TensorSpec
from predictor.handlers._text import TextModelHandler, Tokenized


class EmbeddingHandler(TextModelHandler):
    """Embeds texts with a transformers encoder: mean pooling over real tokens."""

    task = "feature-extraction"
    outputs = (TensorSpec("embedding", "FP32", (-1, -1)),)

    def _model_class(self) -> Any:
        from transformers import AutoModel

        return AutoModel

    @property
    def normalize(self) -> bool:
        return bool(self.options.get("normalize", True))

    def run_group(self, members: Sequence[Tokenized]) -> list[list[float]]:
        import torch

        inputs = self.pad(members)
        with torch.inference_mode():
            hidden = self.model(**inputs).last_hidden_state
            mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            if self.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return [row.tolist() for row in pooled.float().cpu()]

    def to_v1(self, result: Any) -> Any:
        return result

    def to_v2(self, results: Sequence[Any]) -> list[tuple[TensorSpec, list[Any]]]:
        dim = len(results[0]) if results else 0
        flat = [value for row in results for value in row]
        return [(TensorSpec("embedding", "FP32", (len(results), dim)), flat)]
