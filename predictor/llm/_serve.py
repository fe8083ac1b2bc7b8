"""An LLM predictor process (task ``llm``): KServe's ModelServer with the LLM routes in front.

KServe's own routes stay: liveness, readiness (``/v2/health/ready``, the pod's probe:
true while the engine runs and the server is not draining), model metadata and
``/metrics``. The model's V1 ``:predict`` and V2 ``/infer`` answer 400 pointing at the
generation routes (``_routes``). SIGTERM drains: readiness goes false, new sequences get
503, running ones finish within ``--drain_timeout_s``, then the engine stops.
``--shadow_url`` and ``--capture_uri`` mirror and capture the generation routes, as the
predict routes of other tasks (``predictor.tap``; a generation's record: ``_generation``).

In queue mode the frontend is the same server with ``QueuedLLM`` in the model's place
(no weights; readiness follows Redis), and the worker is queue mode's worker process
(health and ``/metrics`` only) around ``LLMQueueWorker``.

In-process, ``_adapters.AdapterRouter`` stands in front of the model: each tenant's
generations run on its LoRA adapter (``--adapter_catalog``), or on the base.
"""

from __future__ import annotations

import logging
from functools import cache
from pathlib import Path
from typing import Any

from predictor._artifact import Artifact
from predictor._config import ServerConfig
from predictor._errors import BadInput
from predictor.llm._model import Generating, load_llm

logger = logging.getLogger("predictor.llm")


@cache
def _server() -> type[Any]:
    """The KServe subclasses, built on first use (kserve parses argv on import)."""
    import kserve

    from predictor._http import PredictorMiddleware
    from predictor._metrics import PredictorMetrics
    from predictor._requestlog import RequestLog, RequestLogConfig
    from predictor._server import _server_class
    from predictor._versions import VersionRoutes
    from predictor.llm._routes import LLMRoutes, generation_paths, openai_prefix
    from predictor.tap import LLM_TASK, Tap, TapMiddleware
    from predictor.tenants import guard

    class ServedLLM(kserve.Model):
        """The model as KServe's repository and health routes see it."""

        def __init__(self, llm: Generating) -> None:
            super().__init__(llm.name)
            self.llm = llm
            self.version = llm.version
            self.ready = True

        async def healthy(self) -> bool:
            return self.ready and await self.llm.healthy()

        async def predict(
            self, payload: Any, headers: Any = None, response_headers: Any = None
        ) -> Any:
            prefix = openai_prefix() or ""
            raise BadInput(
                f"model {self.name} generates text: POST /sample (the prompt as the "
                f"body) or {prefix}/v1/completions and {prefix}/v1/chat/completions"
            )

    base = _server_class()

    class LLMServer(base):  # type: ignore[misc,valid-type]
        def __init__(self, config: ServerConfig, llm: Generating) -> None:
            super().__init__(config)
            self.llm = llm
            self.served = ServedLLM(llm)
            self.request_metrics = PredictorMetrics.create(
                config.model_name, llm.version, config.role
            )

        def start_llm(self) -> None:
            self._register_and_check_atleast_one_model_is_ready([self.served])
            self.serve_app(self._wrap_llm, is_serving=lambda: not self._draining)

        def _wrap_llm(self, app: Any) -> Any:
            # As ``_wrap``: request IDs, limits and metrics outermost, then the version
            # routes, the tenant check, then mirroring and capture of the generation routes.
            prefix = openai_prefix()
            paths = generation_paths(prefix)
            asgi: Any = LLMRoutes(app, self.llm, prefix)
            self._tap = Tap.from_config(self.config, version=self.llm.version, task=LLM_TASK)
            if self._tap is not None:
                asgi = TapMiddleware(asgi, tap=self._tap, paths=paths)
                self._tap.start()
            asgi = guard(asgi, self.config, version=self.llm.version, paths=paths,
                         model_of=lambda path: self.llm.name)
            return PredictorMiddleware(
                VersionRoutes(asgi, self.registered_models),
                max_body_bytes=self.config.max_body_bytes,
                body_timeout_s=max(1.0, self.config.request_timeout_ms / 1000.0),
                metrics=self.request_metrics,
                request_log=RequestLog(RequestLogConfig.from_config(self.config)),
                predict_paths=paths,
            )

        async def drain_models(self) -> None:
            await self.llm.drain(self.config.drain_timeout_s)
            self.llm.stop()

    return LLMServer


def serve_llm(config: ServerConfig, artifact: Artifact) -> int:
    """Load the LLM of ``artifact``, start its engine and serve it (in-process, or as a
    queue-mode worker); a queue-mode frontend loads nothing. The process exit code."""
    if config.queue_role == "worker" and (config.shadow_url or config.capture_uri):
        raise BadInput(
            "a queue worker answers no HTTP request to mirror or capture: give "
            "--shadow_url and --capture_uri to the frontends"
        )
    version = str(artifact.version)
    if config.queue_role == "frontend":
        from predictor.llm.queue import QueuedLLM

        _server()(config, QueuedLLM(config, version)).start_llm()
        return 0
    if config.torch_threads:
        import torch

        torch.set_num_threads(config.torch_threads)
    adapters = {}
    if config.adapter_catalog:  # checked before the weights load: a bad one fails fast
        from predictor.llm._lora import read_adapter_catalog
        from registry import read_manifest_file

        base = read_manifest_file(Path(config.model_dir) / "MANIFEST.json").name
        adapters = read_adapter_catalog(Path(config.adapter_catalog), f"{base}@{version}")
    llm = load_llm(config, artifact.load_dir, version)
    logger.info(
        "llm %s: context %d tokens, max_tokens limit %d, default %d",
        llm.name,
        llm.context_tokens,
        llm.max_tokens_limit,
        llm.default_max_tokens,
    )
    try:
        if config.queue_role == "worker":
            from predictor.llm.queue import serve_llm_worker

            return serve_llm_worker(config, llm)
        from predictor.llm._adapters import with_adapters

        router = with_adapters(llm, adapters, base_dir=artifact.load_dir)
        if adapters:
            logger.info("llm %s: adapters %s, at most %d resident", llm.name,
                        ", ".join(sorted(adapters)), router.max_resident)
        _server()(config, router).start_llm()
    finally:
        llm.stop()
    return 0
