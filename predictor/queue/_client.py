"""The one place a Redis client is built (redis-py's asyncio API), for each topology the
queue runs on, and its errors named.

The scheme of ``--queue_url`` picks the topology (``predictor._queue_url.parse_queue_url``,
docs/QUEUE.md "Past one Redis"): ``redis[s]://`` one server, ``redis[s]+sentinel://``
a master found through Sentinels, ``redis[s]+cluster://`` a Redis Cluster.

``connect`` returns a client with redis-py's command methods on every topology, so the
frontend and the worker run unchanged: a plain client on a ``BlockingConnectionPool``; a
Sentinel-managed master on the same kind of pool (a new connection asks the Sentinels
where the master is, so after a failover the client follows by itself); a ``RedisCluster``
whose PUBLISH is SPUBLISH (sharded Pub/Sub: the version's notifications stay on its
shard) and whose commands in flight are bounded like the pool (a burst waits for a
connection instead of failing). ``uses_sharded_pubsub`` tells the reply router which
subscription to make.

The password comes from the URL's userinfo or ``MODELCTL_QUEUE_PASSWORD`` (Sentinels' own
from ``MODELCTL_QUEUE_SENTINEL_PASSWORD``); logs and errors show the URL without userinfo
or options (``shown``), and no error message quotes the URL.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Mapping
from typing import Any

from predictor._queue_url import QueueTarget, QueueUrlError, parse_queue_url

SENTINEL_PASSWORD_ENV = "MODELCTL_QUEUE_SENTINEL_PASSWORD"
# Connections beyond the commands in flight on one cluster node: the reply subscription
# and a worker's blocking read each hold one.
_CLUSTER_SPARE_CONNECTIONS = 8


def redis_errors() -> tuple[type[BaseException], ...]:
    """What a Redis call raises when Redis cannot answer (mapped to 503 at the frontend).

    On Sentinel, ``MasterNotFoundError`` (no Sentinel knows a master: mid-failover) is a
    ``ConnectionError``; on Cluster, so is ``MaxConnectionsError``; ``ClusterDownError``
    (a shard without a master) and ``TryAgainError`` (a slot mid-migration) are listed."""
    import redis.exceptions as rex

    return (rex.ConnectionError, rex.TimeoutError, rex.BusyLoadingError,
            rex.ClusterDownError, rex.TryAgainError, OSError)


def uses_sharded_pubsub(client: Any) -> bool:
    """Whether replies on ``client`` travel by sharded Pub/Sub (SSUBSCRIBE / SPUBLISH)."""
    return bool(getattr(client, "sharded_pubsub", False))


def _retry() -> Any:
    """A short retry of a broken connection (a stale pooled socket, a master that moved):
    at most two reconnects and resends, 20-200 ms apart, then the caller's 503. Timeouts
    are not retried: a request must answer before its deadline rather than wait three
    times. A resent XADD may enqueue a request twice; it is still answered once (SET NX)."""
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError

    return Retry(ExponentialBackoff(cap=0.2, base=0.02), 2,
                 supported_errors=(RedisConnectionError,))


def _unavailable(exc: BaseException) -> BaseException:
    """A write refused for want of replicas (``NOREPLICAS``, from ``min-replicas-to-write``)
    means Redis cannot take it now, as a lost connection does (503 and the callers'
    retries), not a fault of the request (500). redis-py raises a plain ``ResponseError``,
    inside a pipeline with the command's position in front of Redis's message."""
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import ResponseError

    if isinstance(exc, ResponseError) and "NOREPLICAS" in str(exc):
        return RedisConnectionError(f"Redis refused the write: {exc}")
    return exc


async def _refusal_as_unavailable(call: Awaitable[Any]) -> Any:
    try:
        return await call
    except Exception as exc:
        mapped = _unavailable(exc)
        if mapped is exc:
            raise
        raise mapped from exc


async def execute_pipeline(pipe: Any) -> list[Any]:
    """Runs a redis-py pipeline (plain or cluster) and returns its replies; the first
    command that failed raises, a refusal for want of replicas as unavailable."""
    replies = list(await _refusal_as_unavailable(pipe.execute(raise_on_error=False)))
    for reply in replies:
        if isinstance(reply, BaseException):
            mapped = _unavailable(reply)
            raise mapped from (None if mapped is reply else reply)
    return replies


def connect(url: str, *, socket_timeout_s: float, max_connections: int = 64,
            env: Mapping[str, str] | None = None) -> Any:
    """A client for ``url`` on its topology (nothing is sent until the first command)."""
    env = os.environ if env is None else env
    target = parse_queue_url(url, env)
    common: dict[str, Any] = {"socket_timeout": socket_timeout_s,
                              "socket_connect_timeout": min(2.0, socket_timeout_s),
                              "health_check_interval": 5, "retry": _retry()}
    if target.topology == "sentinel":
        return _sentinel_master(target, env, max_connections, socket_timeout_s, common)
    if target.topology == "cluster":
        return _cluster(target, max_connections, socket_timeout_s, common)
    import redis.asyncio as aioredis

    kwargs = dict(common)
    if target.password:  # the URL's own (redis-py parses it again) or the environment's
        kwargs["password"] = target.password
    # A bounded pool: a burst of requests shares connections instead of opening hundreds.
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=socket_timeout_s, **kwargs)

    class QueueRedis(aioredis.Redis):
        """One server's client."""

        async def execute_command(self, *args: Any, **options: Any) -> Any:
            parent: Any = super()  # redis-py's own method is untyped
            return await _refusal_as_unavailable(parent.execute_command(*args, **options))

    return QueueRedis.from_pool(pool)


def _sentinel_master(target: QueueTarget, env: Mapping[str, str], max_connections: int,
                     socket_timeout_s: float, common: dict[str, Any]) -> Any:
    import redis.asyncio as aioredis
    from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

    class BlockingSentinelPool(SentinelConnectionPool, aioredis.BlockingConnectionPool):
        """The Sentinel pool's master discovery with the blocking pool's bounded wait."""

    class SentinelMaster(aioredis.Redis):
        """The master's client; closing it closes the Sentinels' connections too."""

        async def execute_command(self, *args: Any, **options: Any) -> Any:
            parent: Any = super()  # redis-py's own method is untyped
            return await _refusal_as_unavailable(parent.execute_command(*args, **options))

        async def aclose(self, close_connection_pool: bool | None = None) -> None:
            await super().aclose(close_connection_pool)
            await manager.aclose()  # the Sentinels' own connections

    sentinel_kwargs: dict[str, Any] = {
        "socket_timeout": min(1.0, socket_timeout_s),
        "socket_connect_timeout": min(1.0, socket_timeout_s), "ssl": target.tls}
    if env.get(SENTINEL_PASSWORD_ENV):
        sentinel_kwargs["password"] = env[SENTINEL_PASSWORD_ENV]
    sentinel: Any = Sentinel  # untyped in redis-py
    manager = sentinel(list(target.nodes), sentinel_kwargs=sentinel_kwargs)
    return manager.master_for(
        target.service, redis_class=SentinelMaster, connection_pool_class=BlockingSentinelPool,
        db=target.db, username=target.username, password=target.password, ssl=target.tls,
        max_connections=max_connections, timeout=socket_timeout_s, **common)


def _cluster(target: QueueTarget, max_connections: int, socket_timeout_s: float,
             common: dict[str, Any]) -> Any:
    from redis.asyncio.cluster import ClusterNode, RedisCluster
    from redis.exceptions import ConnectionError as RedisConnectionError

    class ShardedCluster(RedisCluster):
        """RedisCluster whose PUBLISH is SPUBLISH, with its commands in flight bounded."""

        sharded_pubsub = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_flight = asyncio.Semaphore(max_connections)

        async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
            try:
                await asyncio.wait_for(self._in_flight.acquire(), socket_timeout_s)
            except TimeoutError:
                raise RedisConnectionError("No connection available.") from None
            try:
                return await _refusal_as_unavailable(super().execute_command(*args, **kwargs))
            finally:
                self._in_flight.release()

        async def publish(self, channel: Any, message: Any, **kwargs: Any) -> Any:
            # Sharded Pub/Sub: the message stays on the channel's shard (Redis 7.0+).
            return await self.spublish(channel, message)

    kwargs = {key: value for key, value in common.items() if key != "retry"}
    return ShardedCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
        username=target.username, password=target.password, ssl=target.tls,
        max_connections=max_connections + _CLUSTER_SPARE_CONNECTIONS,
        retry=common["retry"], **kwargs)


def shown(url: str) -> str:
    """``url`` as logs and messages may show it (no userinfo, no options)."""
    try:
        return parse_queue_url(url, env={}).shown()
    except QueueUrlError:
        scheme, sep, _ = url.partition("://")
        is_scheme = sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]{0,30}", scheme)
        return f"{scheme}://(unparsable)" if is_scheme else "(unparsable)"
