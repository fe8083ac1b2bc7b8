"""``text-classification``: label and score per text, optionally every label's score."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from predictor._errors import BadInput
from predictor.handlers._base import TensorSpec
from predictor.handlers._text import TextModelHandler, Tokenized


class ClassificationHandler(TextModelHandler):
    """Classifies texts with a sequence-classification head (softmax scores)."""

    task = "text-classification"
    outputs = (TensorSpec("label", "BYTES", (-1,)), TensorSpec("score", "FP32", (-1,)))

    def _model_class(self) -> Any:
        from transformers import AutoModelForSequenceClassification

        return AutoModelForSequenceClassification

    def item_option_names(self) -> tuple[str, ...]:
        return ("return_all_scores",)

    def validate_options(self, options: dict[str, Any]) -> dict[str, Any]:
        options = super().validate_options(options)
        flag = options.get("return_all_scores", self.options.get("return_all_scores", False))
        if not isinstance(flag, bool):
            raise BadInput("return_all_scores must be true or false")
        return {"return_all_scores": flag}

    def run_group(self, members: Sequence[Tokenized]) -> list[dict[str, Any]]:
        import torch

        inputs = self.pad(members)
        with torch.inference_mode():
            probs = torch.softmax(self.model(**inputs).logits.float(), dim=-1).cpu()
        labels = self.model.config.id2label
        results = []
        for member, row in zip(members, probs, strict=True):
            best = int(row.argmax())
            result: dict[str, Any] = {"label": labels[best], "score": float(row[best])}
            if member.options.get("return_all_scores"):
                result["scores"] = {labels[i]: float(p) for i, p in enumerate(row)}
            results.append(result)
        return results

    def to_v1(self, result: Any) -> Any:
        return result

    def to_v2(self, results: Sequence[Any]) -> list[tuple[TensorSpec, list[Any]]]:
        n = len(results)
        return [
            (TensorSpec("label", "BYTES", (n,)), [r["label"] for r in results]),
            (TensorSpec("score", "FP32", (n,)), [r["score"] for r in results]),
        ]
