"""What the transformers handlers share: loading safely, tokenising, padding, grouping."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from predictor._errors import BadInput
from predictor.handlers._base import (
    BatchReport,
    RequestOptions,
    TensorSpec,
    read_task_options,
    refuse_pickle_weights,
    require_text,
)

# Requests whose texts total at most this many characters are tokenised on the event loop.
INLINE_PREPARE_CHARS = 256


@dataclass(frozen=True)
class TextItem:
    """One text with its request's options, before tokenisation."""

    text: str
    options: dict[str, Any]


@dataclass(frozen=True)
class Tokenized:
    """One tokenised item, ready to be padded into a batch."""

    input_ids: list[int]
    options: dict[str, Any]

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise BadInput("--device cuda was asked for but no CUDA device is available")
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    """``auto`` means fp32 on CPU and bf16 (or fp16 where bf16 is unsupported) on GPU."""
    import torch

    if dtype == "auto":
        if device == "cpu":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]


def load_pretrained(model_dir: Path, model_cls: Any, device: str,
                    dtype: str) -> tuple[Any, Any, str]:
    """The tokenizer, the model of ``model_dir`` in eval mode, and the device it is on
    (``device`` resolved): local files only, safetensors only, no remote code; a broken
    artifact is one line (``BadInput``). Every handler and the LLM server load here."""
    from transformers import AutoTokenizer

    refuse_pickle_weights(model_dir)
    device = resolve_device(device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            str(model_dir), local_files_only=True, trust_remote_code=False
        )
        model = model_cls.from_pretrained(
            str(model_dir),
            local_files_only=True,
            trust_remote_code=False,
            use_safetensors=True,
            dtype=resolve_dtype(dtype, device),
        )
    except Exception as exc:  # a broken artifact: one line for the operator, no traceback
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInput(f"cannot load the model in {model_dir}: "
                       f"{type(exc).__name__}: {reason}") from exc
    model.to(device)
    model.eval()
    return tokenizer, model, device


def token_groups(items: Sequence[Tokenized], max_batch_tokens: int) -> list[list[int]]:
    """Indices of ``items`` split into groups whose padded size stays under the cap.

    Items are sorted by length so that each group pads to a similar length (less
    padding waste); a group's cost is its longest item times its size. With no
    cap (0) everything is one group in arrival order.
    """
    order = list(range(len(items)))
    if max_batch_tokens <= 0:
        return [order]
    order.sort(key=lambda i: items[i].n_tokens)
    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = max([items[j].n_tokens for j in current] + [items[i].n_tokens])
        if current and longest * (len(current) + 1) > max_batch_tokens:
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


class TextModelHandler:
    """Base of the transformers handlers: tokenizer, device, dtype and batching by tokens."""

    task = "text"
    inputs = (TensorSpec("text", "BYTES", (-1,)),)
    outputs: tuple[TensorSpec, ...] = ()
    max_batch_size: int | None = None
    padding_side = "right"
    add_special_tokens = True

    def __init__(
        self,
        model_dir: Path,
        *,
        device: str = "auto",
        dtype: str = "auto",
        max_input_chars: int = 20000,
        max_batch_tokens: int = 0,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.requested_device = device
        self.requested_dtype = dtype
        self.max_input_chars = max_input_chars
        self.max_batch_tokens = max_batch_tokens
        self.options = read_task_options(self.model_dir)
        self.tokenizer: Any = None
        self.model: Any = None
        self.device = "cpu"
        self._report = BatchReport()

    # -- loading ---------------------------------------------------------------------------
    def load(self) -> None:
        self.tokenizer, self.model, self.device = load_pretrained(
            self.model_dir, self._model_class(), self.requested_device, self.requested_dtype)
        self.tokenizer.padding_side = self.padding_side
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

    def _model_class(self) -> Any:
        raise NotImplementedError

    # -- request path ----------------------------------------------------------------------
    def parse(self, instance: Any, options: RequestOptions) -> TextItem:
        text = instance
        per_item: dict[str, Any] = {}
        if isinstance(instance, dict):
            unknown = set(instance) - {"text", *self.item_option_names()}
            if unknown:
                raise BadInput(f"unknown keys in instance: {', '.join(sorted(unknown))}")
            text = instance.get("text")
            per_item = {k: v for k, v in instance.items() if k != "text"}
        text = require_text(text, self.max_input_chars)
        merged = {**options.values, **per_item}
        return TextItem(text, self.validate_options(merged))

    def item_option_names(self) -> tuple[str, ...]:
        return ()

    def validate_options(self, options: dict[str, Any]) -> dict[str, Any]:
        unknown = set(options) - set(self.item_option_names())
        if unknown:
            raise BadInput(f"unknown parameters: {', '.join(sorted(unknown))}")
        return options

    def prepare_is_cheap(self, items: Sequence[TextItem]) -> bool:
        # Measured with MiniLM's fast tokenizer: ~40 us for 20 characters, ~210 us for
        # 250, 9 ms for 20,000. Short texts cost less inline than the hop to the pool
        # and back (two thread switches, each waiting for the GIL); long ones must not
        # stall the event loop.
        return sum(len(item.text) for item in items) <= INLINE_PREPARE_CHARS

    def prepare(self, items: Sequence[TextItem]) -> list[Tokenized]:
        limit = getattr(self.tokenizer, "model_max_length", 512)
        limit = 512 if not isinstance(limit, int) or limit > 100_000 else limit
        encoded = self.tokenizer(
            [item.text for item in items], truncation=True, max_length=limit, padding=False,
            add_special_tokens=self.add_special_tokens,
        )
        return [
            Tokenized(list(ids), item.options)
            for ids, item in zip(encoded["input_ids"], items, strict=True)
        ]

    def run(self, batch: Sequence[Tokenized]) -> list[Any]:
        results: list[Any] = [None] * len(batch)
        real = padded = 0
        for group in token_groups(batch, self.max_batch_tokens):
            members = [batch[i] for i in group]
            longest = max(m.n_tokens for m in members)
            real += sum(m.n_tokens for m in members)
            padded += longest * len(members)
            for i, result in zip(group, self.run_group(members), strict=True):
                results[i] = result
        self._report = BatchReport(real_tokens=real, padded_tokens=padded)
        return results

    def pad(self, members: Sequence[Tokenized]) -> Any:
        batch = self.tokenizer.pad(
            {"input_ids": [m.input_ids for m in members]}, padding=True, return_tensors="pt"
        )
        return {k: v.to(self.device) for k, v in batch.items()}

    def run_group(self, members: Sequence[Tokenized]) -> list[Any]:
        raise NotImplementedError

    def last_batch_report(self) -> BatchReport:
        return self._report

    def warmup_instances(self) -> list[Any]:
        return ["warm-up", "a slightly longer warm-up sentence for the model"]
