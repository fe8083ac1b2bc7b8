"""What a load run is: the validated spec, the bytes of each request, the arrival schedule."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from common import PlatformError

Body = bytes | str | Mapping[str, Any]
BodySpec = Body | Sequence[Body] | Callable[[int], bytes] | None

ARRIVALS = ("constant", "poisson")
METHODS = ("DELETE", "GET", "PATCH", "POST", "PUT")
MAX_REQUESTS = 20_000_000  # 8 bytes x 3 arrays each: keeps a run's records under ~0.5 GiB


class LoadgenError(PlatformError):
    """A load run was asked for with arguments that cannot work."""


@dataclass(frozen=True)
class Target:
    """Where requests go: the TCP endpoint and the request target of an http:// URL."""

    host: str
    port: int
    path: str
    host_header: str


@dataclass(frozen=True)
class LoadSpec:
    """One open-loop run: ``rate`` requests per second for ``warmup_s + duration_s``.

    Requests scheduled in the first ``warmup_s`` are sent but left out of the
    statistics. ``timeout_s`` counts from the moment a request is due to go out.
    """

    url: str
    rate: float
    duration_s: float
    method: str = "POST"
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 30.0
    workers: int = 1
    arrival: str = "constant"
    seed: int = 0
    warmup_s: float = 0.0
    max_connections: int = 4096

    def __post_init__(self) -> None:
        parse_target(self.url)
        _require(math.isfinite(self.rate) and self.rate > 0, f"rate must be > 0, got {self.rate}")
        _require(
            math.isfinite(self.duration_s) and self.duration_s > 0,
            f"duration must be > 0 s, got {self.duration_s}",
        )
        _require(
            math.isfinite(self.warmup_s) and self.warmup_s >= 0,
            f"warm-up must be >= 0 s, got {self.warmup_s}",
        )
        _require(
            math.isfinite(self.timeout_s) and self.timeout_s > 0,
            f"timeout must be > 0 s, got {self.timeout_s}",
        )
        _require(self.method in METHODS, f"method must be one of {', '.join(METHODS)}")
        _require(self.arrival in ARRIVALS, f"arrival must be one of {', '.join(ARRIVALS)}")
        _require(1 <= self.workers <= 64, f"workers must be 1..64, got {self.workers}")
        _require(self.max_connections >= 1, "max_connections must be >= 1")
        _require(self.seed >= 0, f"seed must be >= 0, got {self.seed}")
        expected = self.rate * self.total_s
        _require(expected >= 1, "rate x (warm-up + duration) must schedule at least one request")
        _require(
            expected <= MAX_REQUESTS,
            f"rate x (warm-up + duration) schedules {expected:.0f} requests, over {MAX_REQUESTS}",
        )
        for name, value in self.headers:
            _require(
                bool(name) and _is_header_safe(name) and ":" not in name and " " not in name,
                f"bad header name {name!r}",
            )
            _require(_is_header_safe(value), f"header {name} has a line break in its value")

    @property
    def total_s(self) -> float:
        return self.warmup_s + self.duration_s


def parse_target(url: str) -> Target:
    """Split an ``http://host[:port]/path?query`` URL; anything else is a LoadgenError."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise LoadgenError(f"bad URL {url!r}: {exc}") from exc
    if parts.scheme != "http":
        raise LoadgenError(f"only http:// URLs are supported, got {url!r}")
    if not parts.hostname:
        raise LoadgenError(f"URL {url!r} has no host")
    if parts.username or parts.password:
        raise LoadgenError("credentials in the URL are not supported; pass a header instead")
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    port = port or 80
    host_header = parts.hostname if port == 80 else f"{parts.hostname}:{port}"
    if ":" in parts.hostname:  # IPv6 literal
        host_header = f"[{parts.hostname}]" + ("" if port == 80 else f":{port}")
    return Target(host=parts.hostname, port=port, path=path, host_header=host_header)


def schedule(arrival: str, rate: float, total_s: float, seed: int) -> np.ndarray:
    """Send offsets in seconds from t0, ascending: ``i / rate`` or Poisson arrivals."""
    if arrival == "constant":
        n = math.ceil(rate * total_s - 1e-9)
        return np.arange(n, dtype=np.float64) / rate
    if arrival == "poisson":
        rng = np.random.default_rng(seed)
        chunks: list[np.ndarray] = []
        last = 0.0
        while last < total_s:
            gaps = rng.exponential(1.0 / rate, size=max(1024, int(rate * total_s * 0.1)))
            chunk = last + np.cumsum(gaps)
            chunks.append(chunk)
            last = float(chunk[-1])
        offsets = np.concatenate(chunks)
        return offsets[offsets < total_s]
    raise LoadgenError(f"arrival must be one of {', '.join(ARRIVALS)}, got {arrival!r}")


def request_source(spec: LoadSpec, body: BodySpec) -> Callable[[int], bytes]:
    """``i -> bytes`` of the whole HTTP/1.1 request for global request index ``i``."""
    target = parse_target(spec.url)
    names = {name.lower() for name, _ in spec.headers}
    lines = [f"{spec.method} {target.path} HTTP/1.1", f"Host: {target.host_header}"]
    if body is not None and "content-type" not in names:
        lines.append("Content-Type: application/json")
    lines.extend(f"{name}: {value}" for name, value in spec.headers)
    head = ("\r\n".join(lines) + "\r\n").encode("latin-1")

    def assemble(payload: bytes) -> bytes:
        return head + b"Content-Length: %d\r\n\r\n" % len(payload) + payload

    if body is None:
        fixed = assemble(b"") if spec.method in ("POST", "PUT", "PATCH") else head + b"\r\n"
        return lambda _i: fixed
    if callable(body):
        body_for = body

        def build(i: int) -> bytes:
            payload = body_for(i)
            if not isinstance(payload, bytes | bytearray):
                raise LoadgenError(f"body_for({i}) returned {type(payload).__name__}, not bytes")
            return assemble(bytes(payload))

        return build
    if isinstance(body, bytes | str | Mapping):
        one = assemble(encode_body(body))
        return lambda _i: one
    requests = [assemble(encode_body(item)) for item in body]
    if not requests:
        raise LoadgenError("the list of bodies is empty")
    count = len(requests)
    return lambda i: requests[i % count]


def encode_body(body: Body) -> bytes:
    """Bytes as they are, text as UTF-8, a mapping as compact JSON."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, Mapping):
        return json.dumps(body, separators=(",", ":")).encode()
    raise LoadgenError(f"a body must be bytes, str or a mapping, got {type(body).__name__}")


def _is_header_safe(text: str) -> bool:
    return "\r" not in text and "\n" not in text and text.isascii()


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise LoadgenError(message)
