"""What a model holds: measured after its load from the tensors it keeps, estimated
before its first load from its weight files.

The measurement walks the handler's attributes: a ``torch.nn.Module`` counts its
parameters and buffers, a tensor itself, each by where it lives (``cpu``: host bytes;
anything else: device bytes). Tensors shared between modules (tied embeddings) count
once. The tokenizer and Python objects around the weights are not counted: for the
models this serves they are small beside the weights, and they cannot be told apart
from the process's other memory (RSS moves with every allocation of every thread).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from predictor.multi._residency import Size

WEIGHT_SUFFIXES = (".safetensors",)


def measure(handler: Any) -> Size:
    """Bytes of the tensors ``handler`` holds, on the host and on the device."""
    host = device = 0
    seen: set[int] = set()
    for tensor in _tensors(vars(handler) if hasattr(handler, "__dict__") else {}):
        key = tensor.untyped_storage().data_ptr() if tensor.numel() else id(tensor)
        if key in seen:
            continue
        seen.add(key)
        nbytes = tensor.untyped_storage().nbytes()
        if tensor.device.type == "cpu":
            host += nbytes
        else:
            device += nbytes
    return Size(host, device)


def estimate(file_sizes: Mapping[str, int], *, on_device: bool) -> Size:
    """A model's size before it was ever loaded: its weight files' bytes, where it will
    hold them (safetensors stores the tensors as they are laid out in memory)."""
    weights = sum(size for path, size in file_sizes.items() if path.endswith(WEIGHT_SUFFIXES))
    return Size(0, weights) if on_device else Size(weights, 0)


def _tensors(attributes: Mapping[str, Any]) -> Iterator[Any]:
    import torch

    for value in attributes.values():
        if isinstance(value, torch.nn.Module):
            yield from value.parameters()
            yield from value.buffers()
        elif isinstance(value, torch.Tensor):
            yield value
