"""What the tap copies: one answered predict exchange, as the client sent it and got it.

Plain data, built by ``TapMiddleware`` (``_tap``) and read by the mirror, which sends
it on, and by the capture, which records it (``_record``); it imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass

SHADOW_HEADER = "x-shadow"
# Request headers a mirrored copy keeps: what the body means, the client's deadline, and
# its API key (with --tenants_file the shadow serves the same tenant, or refuses it 401).
# They are held in memory until sent; a capture record keeps none of them.
FORWARDED_HEADERS = (b"content-type", b"inference-header-content-length",
                     b"x-request-timeout-ms", b"authorization", b"x-api-key")


@dataclass(frozen=True, slots=True)
class Exchange:
    """One answered predict request, as the client sent it and as it was answered."""

    request_id: str
    started_at: float  # wall clock (time.time()) when the request arrived
    path: str
    query: str
    headers: tuple[tuple[str, str], ...]  # FORWARDED_HEADERS that were present
    body: bytes
    status: int
    response: bytes
    latency_s: float
    is_shadow: bool  # it carried x-shadow: true (a mirrored request)

    @property
    def size_bytes(self) -> int:
        return len(self.body) + len(self.response) + 256
