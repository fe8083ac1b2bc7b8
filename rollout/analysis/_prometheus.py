"""``PrometheusSource``: the ``MetricSource`` over Prometheus' HTTP API, via prometheus-api-client.

Every failure leaves as a ``MetricSourceError``: ``SourceUnreachableError`` for no
connection or no answer in time, ``BadQueryError`` when Prometheus rejects the
query (HTTP 400 ``bad_data``), the base class for the rest. Messages never carry
the credentials a URL may hold.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from rollout._errors import (
    BadQueryError,
    MetricSourceError,
    RolloutError,
    SourceUnreachableError,
)
from rollout.analysis._source import Series

T = TypeVar("T")
_MANY_SERIES = "returned {n} series where one is needed: aggregate it, e.g. sum(...)"


def redact_url(url: str) -> str:
    """``url`` without the user and password it may carry."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class PrometheusSource:
    """Queries one Prometheus server; ``timeout_s`` bounds each HTTP request.

    A connection that fails, or a 502/503/504, is retried once after a short pause;
    the rollout loop asks again at its next interval anyway.
    """

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise RolloutError(
                f"Prometheus URL must start with http:// or https://: {redact_url(url)!r}"
            )
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise RolloutError(f"Prometheus timeout_s must be > 0, got {timeout_s}")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._where = redact_url(self.url)
        self._last_error = threading.local()
        session = requests.Session()
        # prometheus-api-client folds a non-200 answer into a message string; keep the
        # response itself so a 400 bad_data can be told from an outage.
        session.hooks["response"].append(self._remember_error)
        retry = Retry(
            total=1, connect=1, read=0, status=1, backoff_factor=0.2,
            status_forcelist=(502, 503, 504), allowed_methods=None, raise_on_status=False,
        )
        self._client = PrometheusConnect(
            url=self.url, retry=retry, session=session, timeout=timeout_s
        )

    def close(self) -> None:
        """Release the HTTP connections."""
        self._client.close()

    def query(self, promql: str, at: float) -> float | None:
        series = self.query_vector(promql, at)
        if len(series) > 1:
            raise BadQueryError(_MANY_SERIES.format(n=len(series)))
        return series[0][1] if series else None

    def query_vector(self, promql: str, at: float) -> list[Series]:
        def parse(result: Any) -> list[Series]:
            if _is_scalar(result):
                pairs: list[Series] = [({}, _number(result))]
            else:
                pairs = [(dict(item.get("metric", {})), _number(item["value"])) for item in result]
            return [(labels, value) for labels, value in pairs if math.isfinite(value)]

        return self._call(lambda: self._client.custom_query(promql, params={"time": at}), parse)

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[float]:
        return [value for _, value in self.query_points(promql, start, end, step_s)]

    def query_points(self, promql: str, start: float, end: float,
                     step_s: float) -> list[tuple[float, float]]:
        """(unix time, value) of a range query's one series; no series is no points."""
        def ask() -> Any:
            return self._client.custom_query_range(
                promql,
                start_time=datetime.fromtimestamp(start, tz=UTC),
                end_time=datetime.fromtimestamp(end, tz=UTC),
                step=f"{step_s:g}",
            )

        def parse(result: Any) -> list[tuple[float, float]]:
            if len(result) > 1:
                raise BadQueryError(_MANY_SERIES.format(n=len(result)))
            points = [(float(point[0]), _number(point))
                      for point in (result[0]["values"] if result else [])]
            return [(t, v) for t, v in points if math.isfinite(v)]

        return self._call(ask, parse)

    def _call(self, ask: Callable[[], Any], parse: Callable[[Any], T]) -> T:
        """Run one client call and parse its result; every failure becomes ours."""
        self._last_error.reply = None
        try:
            return parse(ask())
        except BadQueryError:
            raise
        except requests.Timeout:
            raise SourceUnreachableError(
                f"Prometheus at {self._where} did not answer within {self.timeout_s:g}s"
            ) from None
        except (requests.ConnectionError, requests.exceptions.RetryError) as exc:
            raise SourceUnreachableError(
                f"Prometheus at {self._where} is unreachable ({_short(exc)})"
            ) from None
        except PrometheusApiClientException:
            raise self._http_error() from None
        except (ValueError, KeyError, TypeError, IndexError):  # 200, but not the API's JSON
            raise MetricSourceError(
                f"{self._where} did not answer like a Prometheus server"
            ) from None
        except requests.RequestException as exc:
            raise MetricSourceError(f"Prometheus at {self._where}: {_short(exc)}") from None

    def _remember_error(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        if response.status_code != 200:
            self._last_error.reply = response

    def _http_error(self) -> MetricSourceError:
        reply: requests.Response | None = getattr(self._last_error, "reply", None)
        if reply is None:
            return MetricSourceError(f"Prometheus at {self._where} answered with an error")
        kind, message = _error_body(reply)
        if reply.status_code == 400 and kind == "bad_data":
            return BadQueryError(message.removeprefix('invalid parameter "query": ') or "bad query")
        detail = f": {kind}: {message}" if kind else ""
        return MetricSourceError(
            f"Prometheus at {self._where} answered HTTP {reply.status_code}{detail}"
        )


def _error_body(reply: requests.Response) -> tuple[str, str]:
    try:
        body = reply.json()
    except ValueError:
        return "", ""
    if not isinstance(body, Mapping):
        return "", ""
    return str(body.get("errorType", "")), str(body.get("error", ""))


def _is_scalar(result: Any) -> bool:
    # custom_query returns data.result only: a vector is a list of objects, a scalar
    # is one [unix_time, "value"] pair.
    return isinstance(result, list) and len(result) == 2 and isinstance(result[1], str)


def _number(point: Any) -> float:
    # Prometheus sends [unix_time, "value"]; values may be "NaN", "+Inf", "-Inf".
    if not isinstance(point[1], str):
        raise TypeError("a sample value must be a string")
    return float(point[1])


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


def _short(exc: BaseException) -> str:
    """The operating system's reason inside a requests error (e.g. "Connection refused"),
    else the error's type: never the whole message, which repeats the URL."""
    found = _ERRNO.search(str(exc))
    return found.group(1).strip() if found else type(exc).__name__
