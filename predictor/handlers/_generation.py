"""``text-generation``: a causal LM continues each text (greedy, or sampled with a seed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from predictor._errors import BadInput
from predictor.handlers._base import TensorSpec
from predictor.handlers._text import TextModelHandler, Tokenized

MAX_NEW_TOKENS_LIMIT = 1024


class GenerationHandler(TextModelHandler):
    """Generates continuations with left padding so every row ends at the same place."""

    task = "text-generation"
    outputs = (TensorSpec("text", "BYTES", (-1,)),)
    padding_side = "left"
    # A causal LM continues the text itself: no [CLS]/[SEP] around the prompt.
    add_special_tokens = False

    def _model_class(self) -> Any:
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM

    def item_option_names(self) -> tuple[str, ...]:
        return ("max_new_tokens", "do_sample", "temperature", "top_p", "seed")

    def validate_options(self, options: dict[str, Any]) -> dict[str, Any]:
        options = super().validate_options(options)
        merged = {
            "max_new_tokens": self.options.get("max_new_tokens", 32),
            "do_sample": self.options.get("do_sample", False),
            "temperature": self.options.get("temperature", 1.0),
            "top_p": self.options.get("top_p", 1.0),
            "seed": None,
            **options,
        }
        n = merged["max_new_tokens"]
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_NEW_TOKENS_LIMIT:
            raise BadInput(f"max_new_tokens must be an integer in 1..{MAX_NEW_TOKENS_LIMIT}")
        if not isinstance(merged["do_sample"], bool):
            raise BadInput("do_sample must be true or false")
        for key, low, high in (("temperature", 1e-3, 100.0), ("top_p", 1e-3, 1.0)):
            value = merged[key]
            if not isinstance(value, int | float) or isinstance(value, bool) or not (
                low <= value <= high
            ):
                raise BadInput(f"{key} must be a number in [{low}, {high}]")
        seed = merged["seed"]
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise BadInput("seed must be a non-negative integer")
        return merged

    def run_group(self, members: Sequence[Tokenized]) -> list[str]:
        # Greedy and unseeded sampled items share a forward pass; a seeded item runs
        # alone so that its output depends on its seed only, not on its neighbours.
        results: list[str | None] = [None] * len(members)
        shared: dict[tuple[Any, ...], list[int]] = {}
        for i, member in enumerate(members):
            opts = member.options
            if opts["do_sample"] and opts["seed"] is not None:
                results[i] = self._generate([member])[0]
                continue
            key = (opts["do_sample"], opts["temperature"], opts["top_p"])
            shared.setdefault(key, []).append(i)
        for indices in shared.values():
            for i, text in zip(indices, self._generate([members[i] for i in indices]), strict=True):
                results[i] = text
        return [r if r is not None else "" for r in results]

    def _generate(self, members: Sequence[Tokenized]) -> list[str]:
        import torch

        opts = members[0].options
        inputs = self.pad(members)
        max_new = max(m.options["max_new_tokens"] for m in members)
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new,
            "do_sample": opts["do_sample"],
            "pad_token_id": self.tokenizer.pad_token_id,
        }
        if opts["do_sample"]:
            kwargs.update(temperature=opts["temperature"], top_p=opts["top_p"])
            if opts["seed"] is not None:
                torch.manual_seed(opts["seed"])
        with torch.inference_mode():
            out = self.model.generate(**inputs, **kwargs)
        prompt_len = inputs["input_ids"].shape[1]
        texts = []
        for member, row in zip(members, out, strict=True):
            new_tokens = row[prompt_len : prompt_len + member.options["max_new_tokens"]]
            texts.append(self.tokenizer.decode(new_tokens, skip_special_tokens=True))
        return texts

    def to_v1(self, result: Any) -> Any:
        return result

    def to_v2(self, results: Sequence[Any]) -> list[tuple[TensorSpec, list[Any]]]:
        return [(TensorSpec("text", "BYTES", (len(results),)), list(results))]
