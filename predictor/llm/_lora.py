"""LoRA adapters (task ``lora-adapter``): the adapter catalog, an adapter's weights, and a
merged copy of the base.

An adapter is a registry version of its own: peft's ``adapter_config.json`` and
``adapter_model.safetensors`` (safetensors only), pushed with task ``lora-adapter`` and
the metadata ``base=NAME@VERSION``, the model version it was trained on. ``modelctl
serve BASE --adapter NAME@REF`` resolves each adapter and writes the catalog file that
``--adapter_catalog`` names::

    {"registry": URL, "adapters": [{"name", "version", "base", "dir", "files": {path: size}}]}

Each is fetched and verified into ``dir`` when it is first loaded. Its weights are read
once and kept in host memory (``Lora``, the cold set); an engine needs the base with
them merged in (``merged_model``: peft's ``merge_and_unload``), which is what the
continuous-batching engine can run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from predictor._errors import BadInput

ADAPTER_TASK = "lora-adapter"
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")  # as a tenant's adapter field


@dataclass(frozen=True)
class AdapterEntry:
    """One adapter of the catalog: a registry version and the base it was trained on."""

    name: str
    version: int
    base: str  # NAME@VERSION
    adapter_dir: Path
    registry: str = ""  # where to fetch it from; empty: adapter_dir is already there

    def fetch_if_needed(self) -> None:
        """Fetch the version into ``adapter_dir`` unless a verified copy is there, then
        check that it is an adapter of ``base`` (blocking: run on a thread)."""
        from registry import Registry, read_manifest_file, verify_dir

        manifest_path = self.adapter_dir / "MANIFEST.json"
        have = read_manifest_file(manifest_path) if manifest_path.is_file() else None
        if self.registry and (have is None or have.version != self.version
                              or verify_dir(self.adapter_dir, have)):
            Registry.open(self.registry).fetch(self.name, self.version, self.adapter_dir)
            have = read_manifest_file(manifest_path)
        if have is None:
            raise BadInput(f"adapter {self.name}: no MANIFEST.json in {self.adapter_dir}")
        check_adapter(self.name, have.task, dict(have.metadata), self.base)


def check_adapter(name: str, task: str, metadata: dict[str, str], served: str) -> None:
    """An adapter version may be served on ``served`` (NAME@VERSION), or BadInput says why."""
    if task != ADAPTER_TASK:
        raise BadInput(f"{name} is a {task!r} version, not a {ADAPTER_TASK!r}")
    base = metadata.get("base", "")
    if base != served:
        raise BadInput(f"adapter {name} was made for {base or 'no base (metadata base=)'}, "
                       f"not for {served}, the model served")


def read_adapter_catalog(path: Path, served: str) -> dict[str, AdapterEntry]:
    """The adapters of a catalog file, by name; ``BadInput`` (one line) when the file is
    not a catalog or an adapter's base is not ``served`` (NAME@VERSION)."""
    try:
        data: Any = json.loads(path.read_text())
        url = str(data.get("registry", ""))
        found: dict[str, AdapterEntry] = {}
        for row in data["adapters"]:
            name = str(row["name"])
            if not _NAME.match(name):
                raise ValueError(f"bad adapter name {name!r}")
            if name in found:
                raise ValueError(f"adapter {name} is listed twice")
            found[name] = AdapterEntry(name, int(row["version"]), str(row["base"]),
                                       Path(row["dir"]), url)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadInput(f"--adapter_catalog {path} is not an adapter catalog: {exc}") from None
    for entry in found.values():
        if entry.base != served:
            raise BadInput(f"adapter {entry.name} was made for {entry.base}, not for "
                           f"{served}, the model served")
    return found


@dataclass(frozen=True)
class Lora:
    """An adapter's LoRA weights in host memory, and peft's config for them."""

    name: str
    config: Any  # peft.LoraConfig
    weights: dict[str, Any]  # tensor name -> CPU tensor, as peft saved them

    @property
    def nbytes(self) -> int:
        return sum(int(t.numel() * t.element_size()) for t in self.weights.values())


def read_lora(name: str, adapter_dir: Path) -> Lora:
    """The adapter's config and weights (safetensors only); BadInput when it is not one."""
    from peft import LoraConfig
    from safetensors.torch import load_file

    pickles = sorted(p.name for p in adapter_dir.glob("*.bin")) + sorted(
        p.name for p in adapter_dir.glob("*.pt"))
    if pickles:
        raise BadInput(f"adapter {name}: pickle weights ({pickles[0]}) are refused: "
                       f"{WEIGHTS_FILE} only")
    for needed in (CONFIG_FILE, WEIGHTS_FILE):
        if not (adapter_dir / needed).is_file():
            raise BadInput(f"adapter {name}: {needed} is missing in {adapter_dir}")
    try:
        config = LoraConfig.from_pretrained(str(adapter_dir))
        weights = load_file(str(adapter_dir / WEIGHTS_FILE), device="cpu")
    except Exception as exc:  # a broken artifact: one line
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInput(f"adapter {name}: cannot read it: {type(exc).__name__}: {reason}") \
            from exc
    if getattr(config, "peft_type", None) is not None and str(
            getattr(config.peft_type, "value", config.peft_type)) != "LORA":
        raise BadInput(f"adapter {name}: peft type {config.peft_type}, not LORA")
    return Lora(name, config, weights)


def merged_model(base_dir: Path, lora: Lora, device: str, dtype: str) -> Any:
    """A fresh copy of the base (read from ``base_dir``) with ``lora`` merged into its
    weights: a plain model of the base's class, as fast as the base."""
    from peft import get_peft_model, set_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    from predictor.handlers._text import load_pretrained

    _, model, _ = load_pretrained(base_dir, AutoModelForCausalLM, device, dtype)
    try:
        wrapped = get_peft_model(model, lora.config)
        result = set_peft_model_state_dict(wrapped, lora.weights)
    except Exception as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInput(f"adapter {lora.name} does not fit the base: {reason}") from exc
    missing = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
    if missing:
        raise BadInput(f"adapter {lora.name} does not fit the base: {missing[0]} has no "
                       "place in it")
    merged = wrapped.merge_and_unload()
    merged.eval()
    return merged


def refuse_adapter_alone(config: Any, artifact: Any) -> int:
    """A ``lora-adapter`` version given as the model: served only on its base."""
    raise BadInput(f"{config.model_name} is a LoRA adapter: serve its base with it, "
                   f"modelctl serve BASE@REF --adapter {config.model_name}@REF")
