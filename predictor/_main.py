"""Entry point: parse flags (and MODELCTL_* env), configure logging, serve."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from predictor._config import parse_config


def main(argv: Sequence[str]) -> int:
    config = parse_config(argv)
    logging.basicConfig(
        level=os.environ.get("MODELCTL_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Caches go to /tmp: the container's root filesystem is read-only.
    os.environ.setdefault("HF_HOME", "/tmp/hf")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if config.multi_model:  # every model of --model_dir, on demand (docs/MULTI_MODEL.md)
        from predictor.multi._serve import serve_multi

        return serve_multi(config)
    from predictor._server import serve
    from predictor.llm._lora import refuse_adapter_alone
    from predictor.llm._serve import serve_llm

    # docs/LLM.md; an adapter is served on its base only (docs/TENANTS.md)
    return serve(config, by_task={"llm": serve_llm, "lora-adapter": refuse_adapter_alone})
