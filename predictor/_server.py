"""The process: verify the artifact, load the model, serve it with KServe's ModelServer.

``PredictorServer`` is a ``kserve.ModelServer`` that binds where it is told (the
stock one always binds 0.0.0.0 and [::]), refuses the model repository's load and
unload (``_repository``) and drains on SIGTERM: readiness goes false, new requests
get 503, queued and running items finish, then it exits.

TLS is KServe's: with ``KSERVE_TLS_CERT_FILE`` and ``KSERVE_TLS_KEY_FILE`` (or
``--ssl_certfile`` and ``--ssl_keyfile``) both set, HTTP is served over TLS, on 8443
when ``--http_port`` is KServe's default 8080 (``ModelServer.__init__``). One of the
two alone is refused before the model loads. gRPC stays plaintext.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
from collections.abc import Callable, Mapping
from typing import Any

from predictor._artifact import Artifact, open_artifact
from predictor._build import build_model
from predictor._config import ServerConfig
from predictor._errors import PredictorError, TLSMisconfigured
from predictor._fastpath import FastPath
from predictor._head import MAX_HEAD_BYTES, head_limited_protocol
from predictor._http import (
    PREDICT_PATH,
    PredictorMiddleware,
    model_of_path,
    predictor_error_handler,
    validation_error_handler,
)
from predictor._model import BatchingModel
from predictor._repository import repository_classes
from predictor._requestlog import RequestLog, RequestLogConfig
from predictor._versions import VersionRoutes, with_versions
from predictor.feedback import feedback_routes
from predictor.tap._record import Identity
from predictor.tap._tap import Tap, TapMiddleware
from predictor.tenants import guard

logger = logging.getLogger("predictor")


def check_tls() -> None:
    """Refuse half a TLS configuration, as KServe's parser read it from flags or env.

    KServe would keep 8080 and hand uvicorn a certificate without its key (or the
    reverse), failing only after the model has loaded.
    """
    from kserve import model_server as kserve_model_server

    args = kserve_model_server.args
    cert, key = getattr(args, "ssl_certfile", None), getattr(args, "ssl_keyfile", None)
    if bool(cert) != bool(key):
        given, lacking = ("certificate", "key") if cert else ("key", "certificate")
        raise TLSMisconfigured(
            f"a TLS {given} is set but no {lacking}: set both KSERVE_TLS_CERT_FILE and "
            "KSERVE_TLS_KEY_FILE (HTTPS, on 8443 when --http_port is 8080) or neither")


def _server_class() -> type[Any]:
    """PredictorServer (and its gRPC server), built on first use: kserve parses argv on import."""
    from kserve import ModelServer
    from kserve import model_server as kserve_model_server
    from kserve.protocol.dataplane import DataPlane
    from kserve.protocol.grpc.server import GRPCServer
    from kserve.protocol.rest.server import RESTServer

    class BoundGRPCServer(GRPCServer):
        """KServe's gRPC server, bound to one host instead of [::]."""

        def __init__(self, host: str, servicer_class: type[Any], *args: Any,
                     **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._host = host
            self._servicer_class = servicer_class

        async def start(self, max_workers: int) -> None:
            from concurrent import futures

            from grpc import aio
            from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc
            from kserve.protocol.grpc.interceptors import ExceptionToStatusInterceptor

            servicer = self._servicer_class(self._data_plane, self._model_repository_extension)
            # KServe's LoggingInterceptor (an INFO line per call) is left out: failed
            # calls are still logged by ExceptionToStatusInterceptor (_requestlog.py).
            self._server = aio.server(
                futures.ThreadPoolExecutor(max_workers=max_workers),
                interceptors=(ExceptionToStatusInterceptor(),),
            )
            grpc_predict_v2_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
                servicer, self._server
            )
            self._server.add_insecure_port(f"{self._host}:{self._port}")
            await self._server.start()
            await self._server.wait_for_termination()

    class LeanRESTServer(RESTServer):
        """KServe's REST server without its TimingMiddleware.

        That middleware measures per-request CPU time only to log it at debug level;
        profiling showed it costing ~4% of the request path. Our own middleware
        records request latency as Prometheus metrics instead.
        """

        def _add_middlewares(self, app: Any) -> None:
            return None

        not_ready: Any = None

        def _add_exception_handlers(self, app: Any) -> None:
            # KServe registers its handlers when the server starts; ours replaces its
            # ModelNotReady one (a 503 without Retry-After, logged with a traceback).
            from kserve.errors import ModelNotReady

            super()._add_exception_handlers(app)
            if self.not_ready is not None:
                app.add_exception_handler(ModelNotReady, self.not_ready)

    class ModelReadyDataPlane(DataPlane):
        async def ready(self) -> bool:
            models = list(self.model_registry.get_models().values())
            return bool(models) and all([await m.healthy() for m in models]) and (
                await super().ready())

        async def model_metadata(self, model_name: str) -> dict[str, Any]:
            metadata = await super().model_metadata(model_name)
            return with_versions(metadata, self.model_registry, model_name)

    class PredictorServer(ModelServer):
        def __init__(self, config: ServerConfig) -> None:
            super().__init__(
                http_port=config.http_port,
                grpc_port=config.grpc_port,
                enable_grpc=config.enable_grpc,
                grace_period=int(config.drain_timeout_s) + 5,
                workers=1,
                # KServe's INFO line per request (Model.__call__); ours is _requestlog's.
                enable_latency_logging=False,
            )
            quiet_access_log()
            self.config = config
            # KServe's server readiness (/v2/health/ready, the pod's readinessProbe) is true
            # whenever the process is up; ours follows the model, so draining turns it off.
            self.dataplane = ModelReadyDataPlane(model_registry=self.registered_models)
            read_only_repository, _ = repository_classes()
            self.model_repository_extension = read_only_repository(
                model_registry=self.registered_models)
            self._model: BatchingModel | None = None
            self.servicer_class: type[Any] = repository_classes()[1]
            self._tap: Tap | None = None
            self._draining = False

        def start(self, models: list[Any]) -> None:
            self._register_and_check_atleast_one_model_is_ready(models)
            self._model = models[0]
            self.serve_app(self._wrap, is_serving=lambda: bool(self._model and self._model.ready))

        def serve_app(self, wrap: Any, *, is_serving: Any) -> None:
            """Serve KServe's app, wrapped by ``wrap`` (its ASGI layers), until stopped;
            ``is_serving`` tells a 503 for a model not ready from one for draining."""
            app = kserve_model_server.app
            from fastapi.exceptions import RequestValidationError

            app.add_exception_handler(PredictorError, predictor_error_handler)
            app.add_exception_handler(RequestValidationError, validation_error_handler)
            self._rest_server = LeanRESTServer(
                "kserve.model_server:app", self.dataplane, self.model_repository_extension,
                self.http_port, workers=1, grace_period=self.grace_period,
                timeout_keep_alive=self.timeout_keep_alive,
                ssl_certfile=self.ssl_certfile, ssl_keyfile=self.ssl_keyfile,
            )
            self._rest_server.not_ready = not_ready_handler(is_serving)
            self._rest_server.config.app = wrap(app)
            self._rest_server.config.host = self.config.http_host
            # uvicorn bounds neither the size nor the arrival time of request headers.
            self._rest_server.config.http = head_limited_protocol(
                MAX_HEAD_BYTES, head_timeout_s=max(1.0, self.config.request_timeout_ms / 1000.0))
            self.servers.append(self._rest_server.start())
            if self.enable_grpc:
                self._grpc_server = BoundGRPCServer(
                    self.config.http_host, self.servicer_class, self.grpc_port, self.dataplane,
                    self.model_repository_extension, kwargs={}, grace_period=self.grace_period,
                )
                self.servers.append(self._grpc_server.start(self.max_threads))
            import uvloop

            freeze_heap()
            # The device thread and the event loop pass every batch to each other; with
            # Python's 5 ms switch interval each handoff waited up to 5 ms for the GIL
            # (measured: 8 ms per 100 ms batch at saturation; 3.6 ms at 1 ms).
            sys.setswitchinterval(self.config.gil_switch_interval_ms / 1000.0)
            # uvicorn only picks uvloop for loops it creates itself; this one is ours.
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(self._setup_and_serve())

        def _wrap(self, app: Any) -> Any:
            # KServe's app, wrapped (outermost first): request IDs, body limits and
            # metrics; the V2 version routes; the tenant check (--tenants_file); the
            # feedback route (labels, --feedback_token_file); mirroring and capture; the V1
            # fast path. All see KServe's own answers too (404, 400 for bad JSON), so
            # counts and captures are complete.
            assert self._model is not None
            asgi: Any = app
            if self.config.fast_path:
                asgi = FastPath(asgi, model=self._model, dataplane=self.dataplane,
                                  exception_handlers=app.exception_handlers)
            self._tap = Tap.from_config(self.config, version=self._model.version,
                                        task=self._model.handler.task)
            if self._tap is not None:
                asgi = TapMiddleware(asgi, tap=self._tap)
                self._tap.start()
                identity = Identity(model=self.config.model_name, version=self._model.version,
                                    role=self.config.role, task=self._model.handler.task)
                asgi = feedback_routes(asgi, self.config, identity, self._tap.recent)
            asgi = guard(asgi, self.config, version=self._model.version, paths=PREDICT_PATH,
                         model_of=model_of_path)
            return PredictorMiddleware(
                VersionRoutes(asgi, self.registered_models),
                max_body_bytes=self.config.max_body_bytes,
                body_timeout_s=max(1.0, self.config.request_timeout_ms / 1000.0),
                metrics=self._model.metrics,
                request_log=RequestLog(RequestLogConfig.from_config(self.config)),
            )

        async def _setup_and_serve(self) -> None:
            self.setup_event_loop()
            try:
                await self._serve()
            finally:
                if self._tap is not None:  # flush captures however the server stops
                    await self._tap.close()

        async def _serve(self) -> None:
            asyncio.get_running_loop().create_task(self._install_drain_handler())
            await asyncio.gather(*self.servers)

        async def _install_drain_handler(self) -> None:
            # uvicorn installs its own SIGTERM handler when it starts serving; ours goes
            # on top once it is up, so that SIGTERM drains before uvicorn shuts down.
            server = self._rest_server._server
            while not server.started and not server.should_exit:
                await asyncio.sleep(0.05)
            loop = asyncio.get_running_loop()

            def on_sigterm(signum: int, frame: Any) -> None:
                loop.call_soon_threadsafe(self._begin_drain, signum)

            signal.signal(signal.SIGTERM, on_sigterm)
            logger.info("serving %s on %s://%s:%d", self.config.model_name,
                        "https" if self.ssl_certfile else "http", self.config.http_host,
                        self.http_port)

        def _begin_drain(self, signum: int) -> None:
            if self._draining:
                return
            self._draining = True
            asyncio.get_running_loop().create_task(self._drain_and_exit(signum))

        async def drain_models(self) -> None:
            """SIGTERM: what the models hold finishes; new requests are refused."""
            assert self._model is not None
            await self._model.drain()

        async def _drain_and_exit(self, signum: int) -> None:
            logger.info("SIGTERM: draining (readiness false, new requests refused)")
            try:
                await self.drain_models()
            except Exception:
                logger.exception("drain did not finish cleanly")
            if self._tap is not None:
                await self._tap.close()
            logger.info("drained; stopping servers")
            if self._grpc_server is not None:
                await self._grpc_server.stop(signum)
            self._rest_server._server.should_exit = True

    return PredictorServer


def not_ready_handler(is_serving: Any) -> Any:
    """KServe's ModelNotReady (its routes ask ``healthy()`` first) as a 503: with
    Retry-After while ``is_serving()`` (not draining): a queue frontend whose Redis is
    away, a multi-model predictor's model that is not resident."""
    from fastapi.responses import JSONResponse

    async def handler(request: Any, exc: Exception) -> Any:
        headers = {"retry-after": "2"} if is_serving() else {}
        return JSONResponse(status_code=503, content={"error": str(exc)}, headers=headers)

    return handler


def quiet_access_log() -> None:
    """uvicorn's access line per request off, as its own ``Config(access_log=False)`` does
    (uvicorn/config.py ``configure_logging``: no handlers, no propagation); KServe's
    logging config gives ``uvicorn.access`` a handler, and the httptools protocol logs
    whenever the logger ``hasHandlers()``. The request log replaces it."""
    access = logging.getLogger("uvicorn.access")
    access.handlers = []
    access.propagate = False


def freeze_heap() -> None:
    """Move everything loaded so far out of the garbage collector's sight.

    The weights, torch, transformers and KServe leave ~150k long-lived objects that a
    full (generation 2) collection walks every time: measured at 90-120 ms each, every
    couple of seconds at 800 req/s, which was the p99 tail. None of them is garbage,
    so after one last collection they go to the permanent generation (gc.freeze, as
    Instagram's Django servers do); collections then walk only what serving allocates.
    The cost: a reference cycle among frozen objects that later becomes garbage is
    never collected (reference counting still frees everything else).
    """
    gc.collect()
    gc.freeze()
    logger.debug("gc: %d objects frozen", gc.get_freeze_count())


def serve(config: ServerConfig,
          by_task: Mapping[str, Callable[[ServerConfig, Artifact], int]] | None = None) -> int:
    """Verify, load, warm up and serve; returns the process exit code. ``by_task``: the
    tasks served by a process of their own (``_main`` passes predictor.llm's)."""
    by_task = by_task or {}
    from common import PlatformError

    try:
        check_tls()
        artifact = open_artifact(config)  # a corrupt manifest is a RegistryError
    except PlatformError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    try:
        if artifact.task in by_task:  # a task with a server of its own (task llm)
            return by_task[artifact.task](config, artifact)
        if config.queue_role == "worker":  # queue mode (docs/QUEUE.md): no predict endpoint
            from predictor.queue._serve import serve_worker

            return serve_worker(config, build_model(config, artifact))
        if config.queue_role == "frontend":  # validates and enqueues; loads no weights
            model = build_model(config, artifact, frontend=True)
        else:
            model = build_model(config, artifact)
        _server_class()(config).start([model])
    except PlatformError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    finally:
        artifact.close()
    return 0
