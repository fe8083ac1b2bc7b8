"""Per-request log lines: none by default, a sample on request, errors and slow ones always.

Stock KServe writes up to three INFO lines per request: uvicorn's access line
(``uvicorn.Config(access_log=True)``, its default, which KServe's ``RESTServer`` keeps),
the ``kserve.trace`` latency line of ``Model.__call__`` (``--enable_latency_logging``,
True by default in ``kserve/model_server.py``), and for gRPC the "grpc method" line of
``LoggingInterceptor`` (``kserve/protocol/grpc/interceptors.py``). Each is formatted and
written on the event loop, for every request (docs/BENCHMARKS.md, "Request logs").
The predictor turns all three off and writes its own line from ``PredictorMiddleware``,
which times every request anyway:

- a share of requests, ``--request_log_sample`` (0 by default, 1 for all), chosen by
  request ID the way the mirror chooses (``is_sampled``), so a request sampled at one
  hop is sampled at every hop with the same rate; INFO;
- every request slower than ``--slow_request_ms`` and every answer >= 500, WARNING;
  every other 4xx, INFO;
- the error and slow lines at most ``--request_log_max_per_s`` a second: an overload
  that refuses thousands of requests a second with 429 writes that many, then one line
  a second saying how many it left out (written with the next such line). Prometheus
  counts every request regardless.

gRPC calls get no line of ours: KServe's ``ExceptionToStatusInterceptor`` logs the
ones that fail, and the "grpc method" line per call is dropped (``_server.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from predictor.tap._mirror import is_sampled

if TYPE_CHECKING:
    from predictor._config import ServerConfig

logger = logging.getLogger("predictor.request")


@dataclass(frozen=True)
class RequestLogConfig:
    """What gets a line (``ServerConfig`` checks the flags): ``sample_rate`` in [0, 1],
    ``slow_ms`` 0 turns slow lines off, ``max_per_s`` > 0."""

    sample_rate: float = 0.0
    slow_ms: float = 1000.0
    max_per_s: float = 20.0

    @classmethod
    def from_config(cls, config: ServerConfig) -> RequestLogConfig:
        return cls(sample_rate=config.request_log_sample, slow_ms=config.slow_request_ms,
                   max_per_s=config.request_log_max_per_s)


class RequestLog:
    """Decides, per answered request, whether it gets a line, and writes it."""

    def __init__(self, config: RequestLogConfig, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._slow_s = config.slow_ms / 1000.0 if config.slow_ms > 0 else float("inf")
        self._clock = clock
        self._window = -1.0  # the second the rate limit counts in
        self._written = 0
        self._left_out = 0

    def record(self, request_id: str, method: str, path: str, status: int,
               seconds: float) -> None:
        """One answered request: ``status`` sent after ``seconds``."""
        if status < 400 and seconds < self._slow_s:  # the common case: one comparison pair
            if self.config.sample_rate and is_sampled(request_id, self.config.sample_rate):
                logger.info("request %s %s %s -> %d in %.1f ms", request_id, method, path,
                            status, seconds * 1000.0)
            return
        if not self._admit():
            return
        slow = seconds >= self._slow_s
        level = logging.WARNING if status >= 500 or slow else logging.INFO
        logger.log(level, "request %s %s %s -> %d in %.1f ms%s", request_id, method, path,
                   status, seconds * 1000.0,
                   f" (slower than --slow_request_ms {self.config.slow_ms:g})" if slow else "")

    def _admit(self) -> bool:
        """Whether an error or slow line may be written now (``max_per_s`` per second)."""
        now = self._clock()
        if now - self._window >= 1.0:
            if self._left_out:
                logger.warning("%d request log lines left out in the last %.0f s "
                               "(--request_log_max_per_s %g)", self._left_out,
                               now - self._window, self.config.max_per_s)
            self._window, self._written, self._left_out = now, 0, 0
        if self._written >= self.config.max_per_s:
            self._left_out += 1
            return False
        self._written += 1
        return True
