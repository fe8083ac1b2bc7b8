"""The two benchmark workloads as plain batch functions, shared by every peer server.

Each peer wraps one of these in its own batching (or none), so the servers differ
only in how they form and schedule batches, never in the work a batch does:

- ``FixedLatencyModel``: sleeps ``latency_ms`` per batch whatever its size (1 to
  ``max_batch_size``), like the predictor's ``fixed-latency`` task.
- ``EmbeddingModel``: all-MiniLM-L6-v2 sentence embeddings with the same steps as
  the predictor's ``feature-extraction`` handler (tokenise with truncation to 512,
  pad to the longest, mean-pool over real tokens, L2-normalise), fp32 on CPU and
  bf16 on CUDA.

This module runs in the peers' own virtualenv as well as the project's, so it
imports nothing of ours and loads torch and transformers only when asked to.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

WORKLOADS = ("fixed-latency", "embedding")


class BatchModel(Protocol):
    """One batch in, one result per item out; called from one thread at a time."""

    def run(self, items: Sequence[Any]) -> list[Any]: ...


class BatchCounter:
    """Counts batches and items so that a peer can report its mean batch size."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items = 0
        self.batches = 0

    def record(self, size: int) -> None:
        with self._lock:
            self.items += size
            self.batches += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {"items": self.items, "batches": self.batches}


class FixedLatencyModel:
    """Sleeps ``latency_ms`` per batch of 1..``max_batch_size`` items; echoes them."""

    def __init__(self, latency_ms: float = 100.0, max_batch_size: int = 100) -> None:
        if latency_ms < 0 or max_batch_size < 1:
            raise ValueError("fixed-latency needs latency_ms >= 0 and max_batch_size >= 1")
        self.latency_s = latency_ms / 1000.0
        self.max_batch_size = max_batch_size

    def run(self, items: Sequence[Any]) -> list[Any]:
        if not 1 <= len(items) <= self.max_batch_size:
            raise ValueError(f"batch of {len(items)} is outside 1..{self.max_batch_size}")
        time.sleep(self.latency_s)
        return list(items)


class EmbeddingModel:
    """Mean-pooled, L2-normalised sentence embeddings from a local transformers encoder."""

    def __init__(self, model_dir: str | Path, device: str = "auto") -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        # The predictor's dtype rule (--dtype auto): fp32 on CPU, bf16 (or fp16) on GPU.
        dtype = torch.float32
        if device == "cuda":
            dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        self.model = AutoModel.from_pretrained(
            str(model_dir), local_files_only=True, use_safetensors=True, dtype=dtype
        )
        self.model.to(device)
        self.model.eval()
        self.run(["warm-up", "a slightly longer warm-up sentence for the model"])

    def run(self, items: Sequence[Any]) -> list[Any]:
        import torch

        texts = [str(item) for item in items]
        batch = self.tokenizer(texts, truncation=True, max_length=512, padding=True,
                               return_tensors="pt")
        batch = {k: v.to(self.device) for k, v in batch.items()}
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return [row.tolist() for row in pooled.float().cpu()]


def build_model(workload: str, *, model_dir: str = "", latency_ms: float = 100.0,
                max_batch_size: int = 100, device: str = "auto") -> BatchModel:
    """The model for ``workload``; an unknown name is an error."""
    if workload == "fixed-latency":
        return FixedLatencyModel(latency_ms, max_batch_size)
    if workload == "embedding":
        if not model_dir:
            raise ValueError("the embedding workload needs --model_dir")
        return EmbeddingModel(model_dir, device)
    raise ValueError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")
