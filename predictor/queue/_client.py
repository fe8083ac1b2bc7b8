"""The one place a Redis client is built (redis-py's asyncio API) and its errors named.

The password comes from the URL's userinfo or ``MODELCTL_QUEUE_PASSWORD``; logs and
errors show the URL without userinfo (``safe_uri``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from predictor.tap._capture import safe_uri

PASSWORD_ENV = "MODELCTL_QUEUE_PASSWORD"


def redis_errors() -> tuple[type[BaseException], ...]:
    """What a Redis call raises when Redis cannot answer (mapped to 503 at the frontend)."""
    import redis.exceptions as rex

    return (rex.ConnectionError, rex.TimeoutError, rex.BusyLoadingError, OSError)


def connect(url: str, *, socket_timeout_s: float, max_connections: int = 64,
            env: Mapping[str, str] | None = None) -> Any:
    """A ``redis.asyncio.Redis`` for ``url`` (nothing is sent until the first command)."""
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff

    env = os.environ if env is None else env
    kwargs: dict[str, Any] = {}
    password = env.get(PASSWORD_ENV)
    if password and "@" not in url.split("://", 1)[-1].split("/", 1)[0]:
        kwargs["password"] = password
    # A bounded pool: a burst of requests shares connections instead of opening hundreds.
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=socket_timeout_s,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=min(2.0, socket_timeout_s),
        health_check_interval=5,
        **kwargs,
    )
    # A short retry: a request answers 503 rather than hang while Redis is away.
    return aioredis.Redis(connection_pool=pool,
                          retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2))


def shown(url: str) -> str:
    """``url`` as logs and messages may show it (no userinfo)."""
    return safe_uri(url)
