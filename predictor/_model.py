"""The KServe model: requests in, items through the batcher, results out.

``BatchingModel`` is a ``kserve.Model``: KServe's V1, V2 and gRPC endpoints call
``predict``; it validates the request, prepares the items on a thread pool,
submits them to the batcher (which runs the handler on the one device thread) and
encodes the results in the request's protocol.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kserve
from kserve import InferOutput, InferRequest, InferResponse

from predictor._config import ServerConfig
from predictor._errors import (
    InjectedFailure,
    Overloaded,
    PredictorError,
    grpc_error_for,
    status_for,
)
from predictor._http import request_timeout_ms
from predictor._metrics import PredictorMetrics
from predictor._protocol import DecodedRequest, decode_v1, decode_v2
from predictor.batching import Batcher, BatchStats
from predictor.batching._device import DeviceLane
from predictor.batching._policy import BatchConfig
from predictor.handlers._base import Handler, RequestOptions, TensorSpec
from predictor.tenants import CURRENT

logger = logging.getLogger("predictor")

_NO_OPTIONS = RequestOptions()


class BatchingModel(kserve.Model):
    """A KServe model that batches single requests onto one device."""

    def __init__(self, config: ServerConfig, handler: Handler, version: str, *,
                 device: DeviceLane | None = None,
                 prepare_pool: ThreadPoolExecutor | None = None) -> None:
        """``device`` and ``prepare_pool`` are shared by a multi-model predictor's models;
        by default the model has a device thread and a prepare pool of its own."""
        super().__init__(config.model_name, return_response_headers=True)
        self._device_lane = device
        self.config = config
        self.handler = handler
        self.version = version
        self.metrics = PredictorMetrics.create(config.model_name, version, config.role)
        # Children bound once: labels() per request or per item showed in profiles.
        labels = self.metrics.labels
        self._queue_depth = self.metrics.queue_depth.labels(**labels)
        self._queue_wait = self.metrics.queue_wait.labels(**labels)
        self._batch_size = self.metrics.batch_size.labels(**labels)
        self._batch_duration = self.metrics.batch_duration.labels(**labels)
        self._batch_cap = self.metrics.batch_cap.labels(**labels)
        cap = config.max_batch_size
        if handler.max_batch_size is not None and handler.max_batch_size < cap:
            logger.warning("max_batch_size %d lowered to the task's limit of %d",
                           cap, handler.max_batch_size)
            cap = handler.max_batch_size
        self.batch_config = BatchConfig(
            max_batch_size=cap,
            max_batch_wait_ms=config.max_batch_wait_ms,
            max_queue_size=max(config.max_queue_size, cap),
            request_timeout_ms=config.request_timeout_ms,
        )
        self._prepare_pool = prepare_pool or ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="prepare")
        self._batcher: Batcher[Any, Any] | None = None
        self._batcher_lock: asyncio.Lock | None = None
        self._random = random.Random()
        self._warmup: tuple[int, float] | None = None
        self._expired_seen: dict[int, int] = {}  # per batcher (a queue worker has its own)

    # -- lifecycle ---------------------------------------------------------------------------
    def load(self) -> bool:
        """Load the weights and run one warm-up batch; only then is the model ready."""
        self.handler.load()
        started = time.monotonic()
        items = [self.handler.parse(x, _NO_OPTIONS) for x in self.handler.warmup_instances()]
        prepared = self.handler.prepare(items)
        run_started = time.monotonic()
        self.handler.run(prepared)
        self._warmup = (len(items), time.monotonic() - run_started)
        logger.info("model %s version %s warm (%.0f ms warm-up batch)", self.name, self.version,
                    (time.monotonic() - started) * 1000)
        self._batch_cap.set(self.batch_config.max_batch_size)
        self.ready = True
        return True

    async def batcher(self) -> Batcher[Any, Any]:
        """The batcher, started on the serving event loop the first time it is needed."""
        if self._batcher is None:
            if self._batcher_lock is None:
                self._batcher_lock = asyncio.Lock()
            async with self._batcher_lock:
                if self._batcher is None:
                    batcher = self.make_batcher()
                    await batcher.start()
                    self._batcher = batcher
        return self._batcher

    def make_batcher(self, executor: Any = None) -> Batcher[Any, Any]:
        """A new, unstarted batcher over this model (``executor``: its device thread)."""
        def on_batch(stats: BatchStats) -> None:
            self._on_batch(stats)
            self._sync_expired(batcher)

        batcher: Batcher[Any, Any] = Batcher(
            self.run_batch, self.batch_config, on_batch=on_batch, executor=executor,
            device=self._device_lane)
        if self._warmup is not None:
            # Admission starts from a measured batch latency, not a prior.
            batcher.policy.latency_model.observe(*self._warmup)
        return batcher

    async def drain(self) -> None:
        """Stop admitting, let queued and running items finish (SIGTERM)."""
        self.ready = False
        batcher = await self.batcher()
        await batcher.drain(self.config.drain_timeout_s)

    # -- the device thread -------------------------------------------------------------------
    def run_batch(self, batch: list[Any]) -> list[Any]:
        """Run one batch of prepared items (on the device thread)."""
        results = self.handler.run(batch)
        if self.config.inject_latency_ms > 0:
            time.sleep(self.config.inject_latency_ms / 1000.0)
        report = self.handler.last_batch_report()
        if report.real_tokens:
            self.metrics.padding_ratio.labels(**self.metrics.labels).set(
                report.padded_tokens / report.real_tokens
            )
        return results

    def _on_batch(self, stats: BatchStats) -> None:
        self._batch_size.observe(stats.size)
        self._batch_duration.observe(stats.duration_s)
        for wait_s in stats.queue_waits_s:
            self._queue_wait.observe(wait_s)
        self._batch_cap.set(stats.cap)

    def _sync_expired(self, batcher: Batcher[Any, Any] | None = None) -> None:
        # The batcher's own counter is exact (BatchStats only sees drops before a batch).
        batcher = batcher or self._batcher
        if batcher is None:
            return
        total, seen = batcher.items_expired, self._expired_seen.get(id(batcher), 0)
        if total > seen:
            self.metrics.items_expired.labels(**self.metrics.labels).inc(total - seen)
            self._expired_seen[id(batcher)] = total

    # -- the request path --------------------------------------------------------------------
    async def predict(
        self,
        payload: Any,
        headers: dict[str, str] | None = None,
        response_headers: dict[str, str] | None = None,
    ) -> Any:
        headers = headers or {}
        from_grpc = isinstance(payload, InferRequest) and bool(payload.from_grpc)
        started = time.monotonic()
        code = "200"
        try:
            request = self._decode(payload)
            request_id = headers.get("x-request-id") or request.request_id or uuid.uuid4().hex
            if response_headers is not None:
                response_headers["x-request-id"] = request_id
            results = await self._infer(request, headers, started)
            return self._encode(request, results, request_id)
        except PredictorError as exc:
            code = str(status_for(exc)[0])
            if isinstance(exc, Overloaded):
                self.metrics.rejections.labels(**self.metrics.labels, reason=exc.reason).inc()
            self._sync_expired()
            if from_grpc:
                raise grpc_error_for(exc) from exc
            raise
        finally:
            # HTTP requests are counted by the middleware (it sees 413s and 404s too).
            if from_grpc:
                labels = self.metrics.labels
                self.metrics.requests.labels(**labels, code=code).inc()
                self.metrics.request_duration.labels(**labels).observe(
                    time.monotonic() - started
                )

    async def prepare(self, instances: list[Any], options: RequestOptions) -> list[Any]:
        """Parse and prepare one request's items, as the batcher takes them."""
        items = [self.handler.parse(x, options) for x in instances]
        if self.handler.prepare_is_cheap(items):
            return self.handler.prepare(items)
        # Tokenisation of long texts runs on its own pool: never stalling the event
        # loop, never behind the forward pass on the device thread.
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._prepare_pool, self.handler.prepare, items)

    def _decode(self, payload: Any) -> DecodedRequest:
        if isinstance(payload, InferRequest):
            return decode_v2(payload, self.handler, self.config.max_instances)
        return decode_v1(payload, self.config.max_instances)

    async def _infer(self, request: DecodedRequest, headers: dict[str, str],
                     started: float) -> list[Any]:
        timeout_ms = request_timeout_ms(headers, self.config.request_timeout_ms)
        deadline = started + timeout_ms / 1000.0
        prepared = await self.prepare(request.instances, request.options)
        batcher = await self.batcher()
        self._queue_depth.set(batcher.queue_depth)
        try:
            tenant = CURRENT.get()  # with --tenants_file: queued in fair order by tenant
            results = await batcher.submit(
                prepared, deadline, timeout_ms=timeout_ms,
                flow=tenant.name if tenant else None, weight=tenant.weight if tenant else 1.0)
        finally:
            self._queue_depth.set(batcher.queue_depth)
        if self.config.inject_error_rate > 0 and (
            self._random.random() < self.config.inject_error_rate
        ):
            raise InjectedFailure("injected failure (--inject_error_rate)")
        return results

    def _encode(self, request: DecodedRequest, results: list[Any], request_id: str) -> Any:
        if not request.is_v2:
            return {"predictions": [self.handler.to_v1(r) for r in results]}
        outputs = []
        for spec, data in self.handler.to_v2(results):
            output = InferOutput(name=spec.name, shape=list(spec.shape),
                                 datatype=spec.datatype, data=data)
            if request.from_grpc:
                # gRPC clients (tritonclient, Triton itself) read raw_output_contents.
                output.set_data_from_numpy(_as_numpy(spec, data), binary_data=True)
            outputs.append(output)
        return InferResponse(response_id=request_id, model_name=self.name,
                             model_version=self.version, infer_outputs=outputs,
                             from_grpc=request.from_grpc)

    # -- metadata (V2 /v2/models/NAME) -------------------------------------------------------
    def get_input_types(self) -> list[dict[str, Any]]:
        return [spec.to_dict() for spec in self.handler.inputs]

    def get_output_types(self) -> list[dict[str, Any]]:
        return [spec.to_dict() for spec in self.handler.outputs]


def _as_numpy(spec: TensorSpec, data: list[Any]) -> Any:
    import numpy as np

    if spec.datatype == "BYTES":
        array = np.array([str(v).encode() for v in data], dtype=np.object_)
    else:
        array = np.array(data, dtype=np.float32 if spec.datatype == "FP32" else None)
    return array.reshape(spec.shape)
