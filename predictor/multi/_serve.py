"""A multi-model predictor process: KServe's ModelServer over a ``ModelHost``.

KServe looks models up by name in its ``ModelRepository``; here that repository is the
host: a resident model is its ``BatchingModel``, a known model that is not resident a
``ColdModel`` (not ready: ``GET /v2/models/NAME/ready`` says 503 until it is loaded), an
unknown name None (404). The server is ready whenever it is not draining, however many
models are resident (models load on demand). gRPC's ``ModelInfer`` makes the model
resident first like the HTTP routes (``_routes``); ``RepositoryModelLoad`` and
``RepositoryModelUnload`` need the bearer token in the ``authorization`` metadata. KServe's
gRPC service has no repository index (its proto lists load and unload only): the index
is HTTP's ``POST /v2/repository/index``.
"""

from __future__ import annotations

import logging
import sys
import time
from functools import cache
from typing import Any

from predictor._config import ServerConfig
from predictor._errors import PredictorError, grpc_error_for
from predictor._secrets import read_token_file
from predictor._versions import VersionRoutes, with_versions
from predictor.multi._host import ModelHost
from predictor.multi._routes import MultiModelRoutes, check_token

logger = logging.getLogger("predictor.multi")


def read_token(config: ServerConfig) -> str | None:
    """The repository token (None: no --repository_token_file). Never logged."""
    return read_token_file(config.repository_token_file, "--repository_token_file")


@cache
def _classes() -> dict[str, type[Any]]:
    """The KServe subclasses, built on first use (kserve parses argv on import)."""
    import kserve
    from kserve.model_repository import ModelRepository
    from kserve.protocol.dataplane import DataPlane
    from kserve.protocol.model_repository_extension import ModelRepositoryExtension

    from predictor._repository import repository_classes
    from predictor._server import _server_class

    class ColdModel(kserve.Model):
        """A known model that is not resident: not ready, and KServe's ``load()`` (which
        its data plane calls on a model that is not ready) does nothing: the routes load."""

        def load(self) -> bool:
            return False

    class HostRepository(ModelRepository):
        def __init__(self, host: ModelHost) -> None:
            super().__init__(models_dir=str(host.models_dir))
            self.host = host

        def get_model(self, name: str) -> Any:
            model = self.host.model(name)
            if model is not None:
                return model
            if name not in self.host.names():
                return None
            cold = ColdModel(name)
            cold.version = self.host.slot(name).entry.version  # as BatchingModel has it
            return cold

        def get_models(self) -> dict[str, Any]:
            return {name: self.get_model(name) for name in self.host.names()}

        async def is_model_ready(self, name: str) -> bool:
            return self.host.model(name) is not None

    class HostRepositoryExtension(ModelRepositoryExtension):
        def __init__(self, host: ModelHost, registry: HostRepository) -> None:
            super().__init__(model_registry=registry)
            self.host = host

        async def index(self, filter_ready: bool | None = False) -> list[dict[str, Any]]:
            rows = self.host.index()
            return [r for r in rows if r["state"] == "READY"] if filter_ready else rows

        async def load(self, model_name: str) -> dict[str, Any]:
            await self.host.load(model_name)
            return {"name": model_name, "load": True}

        async def unload(self, model_name: str) -> dict[str, Any]:
            await self.host.unload(model_name)
            return {"name": model_name, "unload": True}

    class ServingDataPlane(DataPlane):
        serving: Any = None

        async def ready(self) -> bool:
            return bool(self.serving()) and await super().ready()

        async def model_metadata(self, model_name: str) -> dict[str, Any]:
            metadata = await super().model_metadata(model_name)
            return with_versions(metadata, self.model_registry, model_name)

    guarded = repository_classes()[1]

    class MultiServicer(guarded):  # type: ignore[misc,valid-type]
        host: ModelHost
        token: str | None

        async def ModelInfer(self, request: Any, context: Any) -> Any:
            deadline = time.monotonic() + self.host.config.request_timeout_ms / 1000.0
            try:
                async with self.host.using(request.model_name, deadline):
                    return await super().ModelInfer(request, context)
            except PredictorError as exc:
                raise grpc_error_for(exc) from exc

        async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
            self._authorize(context, "load")
            return await super().RepositoryModelLoad(request, context)

        async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
            self._authorize(context, "unload")
            return await super().RepositoryModelUnload(request, context)

        def _authorize(self, context: Any, action: str) -> None:
            metadata = dict(context.invocation_metadata() or ())
            try:
                check_token(self.token, metadata.get("authorization"), action)
            except PredictorError as exc:
                raise grpc_error_for(exc) from exc

    base = _server_class()

    class MultiModelServer(base):  # type: ignore[misc,valid-type]
        def __init__(self, config: ServerConfig, host: ModelHost, token: str | None) -> None:
            super().__init__(config)
            from predictor._metrics import PredictorMetrics

            self.host = host
            self.registered_models = HostRepository(host)
            self.dataplane = ServingDataPlane(model_registry=self.registered_models)
            self.dataplane.serving = lambda: not self._draining
            self.model_repository_extension = HostRepositoryExtension(host, self.registered_models)
            servicer = type("HostServicer", (MultiServicer,), {"host": host, "token": token})
            self.servicer_class = servicer
            self._token = token
            # Requests naming no known model are counted under the server's own name.
            self._unknown = PredictorMetrics.create(config.model_name, "-", config.role)

        def start_multi(self) -> None:
            self.serve_app(self._wrap_multi, is_serving=lambda: not self._draining)

        def _wrap_multi(self, app: Any) -> Any:
            from predictor._http import PredictorMiddleware
            from predictor._requestlog import RequestLog, RequestLogConfig

            routes = MultiModelRoutes(app, self.host, token=self._token,
                                      is_draining=lambda: self._draining)
            return PredictorMiddleware(
                VersionRoutes(routes, self.registered_models),
                max_body_bytes=self.config.max_body_bytes,
                body_timeout_s=max(1.0, self.config.request_timeout_ms / 1000.0),
                metrics=self._unknown, metrics_for=self.host.metrics_of,
                request_log=RequestLog(RequestLogConfig.from_config(self.config)))

        async def drain_models(self) -> None:
            await self.host.close(self.config.drain_timeout_s)

        async def _serve(self) -> None:
            import asyncio

            watcher = asyncio.get_running_loop().create_task(self.host.watch())
            try:
                await super()._serve()
            finally:
                watcher.cancel()

    return {"server": MultiModelServer}


def serve_multi(config: ServerConfig) -> int:
    """Serve every model of ``config.model_dir`` on demand; the process exit code."""
    from common import PlatformError
    from predictor._server import check_tls

    try:
        check_tls()
        token = read_token(config)
        host = ModelHost(config)
    except PlatformError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    names = host.names()
    logger.info("multi-model: %d models in %s (%s), budget %.0f MiB host%s", len(names),
                config.model_dir, ", ".join(names[:10]) + (" ..." if len(names) > 10 else ""),
                config.memory_budget_mb, f", {config.device_memory_budget_mb:.0f} MiB device"
                if config.device_memory_budget_mb else "")
    _classes()["server"](config, host, token).start_multi()
    return 0
