"""The tenant check at the HTTP edge: who is calling, may they use this model, are they
within their limits.

``TenantMiddleware`` sits inside ``PredictorMiddleware`` (request ID, body limits and
the request counters see its refusals too) and outside the tap and the routes, so a
refused request is neither mirrored, captured nor queued. On the routes it guards
(predict, or an LLM's generation routes):

- the key comes from ``Authorization: Bearer <key>`` (what the ``openai`` client sends)
  or ``X-API-Key``; none, or one no tenant holds: 401 with ``WWW-Authenticate``;
- a model the tenant may not use: 403;
- over its request rate, its generated-token rate (charged when a generation ends,
  from ``note_tokens``) or its requests in flight: 429 with ``Retry-After``.

Health, readiness, metadata and ``/metrics`` stay open (probes and scrapes carry no key).
An admitted request carries its tenant in the scope (``TENANT``) and in ``CURRENT`` for
the layers inside (the batcher queues it in fair order by tenant and weight).
The key itself is never logged, counted or echoed: errors name the tenant, not the key.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.tenants import Tenant, TenantsError, TenantsFile
from predictor._errors import Forbidden, PredictorError, Unauthorized
from predictor._http import ASGIApp, Message, Receive, Scope, Send, header, send_error
from predictor.tenants._limits import TenantLimits
from predictor.tenants._metrics import TenantMetrics

if TYPE_CHECKING:
    from predictor._config import ServerConfig

TENANT = "modelctl.tenant"
REALM = "modelctl"
# The admitted request's tenant, for the layers inside that are not ASGI (the batcher's
# fair order, through BatchingModel): set around the app, so its tasks see it too.
CURRENT: ContextVar[Tenant | None] = ContextVar("modelctl_tenant", default=None)


@dataclass
class Usage:
    """What an admitted request consumed, noted by the layers inside (``note_tokens``)."""

    tokens: int = 0


USAGE: ContextVar[Usage | None] = ContextVar("modelctl_usage", default=None)


def note_tokens(tokens: int) -> None:
    """Tell the tenant check that the request has generated ``tokens`` so far (task llm);
    a no-op without tenants."""
    usage = USAGE.get()
    if usage is not None and tokens > usage.tokens:
        usage.tokens = tokens
_OPENAI = re.compile(r"/v1/(chat/)?completions$")


def key_of(scope: Scope) -> str | None:
    """The API key a request carries, or None."""
    auth = header(scope, b"authorization")
    if auth is not None:
        scheme, _, value = auth.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = header(scope, b"x-api-key")
    if key is None:
        return None
    return key.decode("latin-1").strip() or None


class TenantMiddleware:
    """Authenticate, authorise and limit each request of ``paths`` by its tenant."""

    def __init__(self, app: ASGIApp, *, tenants: TenantsFile, limits: TenantLimits,
                 metrics: TenantMetrics, paths: re.Pattern[str],
                 model_of: Callable[[str], str]) -> None:
        """``model_of(path)``: the model a request on ``path`` uses."""
        self.app = app
        self.tenants = tenants
        self.limits = limits
        self.metrics = metrics
        self.paths = paths
        self.model_of = model_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not self.paths.match(path):
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = [500]
        tenant: Tenant | None = None

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            tenant = self._authenticate(scope)
            model = self.model_of(path)
            if not tenant.may_use(model):
                raise Forbidden(f"tenant {tenant.name} may not use model {model}")
            await self.limits.admit(tenant)
        except PredictorError as exc:
            status[0] = await _refuse(send, exc, path)
            self.metrics.observe(tenant.name if tenant else None, status[0],
                                 time.monotonic() - started)
            return
        token, usage = CURRENT.set(tenant), Usage()
        usage_token = USAGE.set(usage)
        try:
            await self.app({**scope, TENANT: tenant.name}, receive, watched)
        finally:
            USAGE.reset(usage_token)
            CURRENT.reset(token)
            self.limits.release(tenant)
            await self.limits.charge_tokens(tenant, usage.tokens)
            self.metrics.observe(tenant.name, status[0], time.monotonic() - started)

    def _authenticate(self, scope: Scope) -> Tenant:
        key = key_of(scope)
        if key is None:
            raise Unauthorized("this model needs an API key: Authorization: Bearer <key> "
                               "(or X-API-Key)", realm=REALM)
        tenant = self.tenants.current().tenant_for(key)
        if tenant is None:
            raise Unauthorized("the API key is not valid", realm=REALM)
        return tenant


async def _refuse(send: Send, exc: PredictorError, path: str) -> int:
    if not _OPENAI.search(path):
        return await send_error(send, exc)
    from predictor.llm._openai import send_openai_error  # OpenAI's routes: OpenAI's shape

    return await send_openai_error(send, exc)


def guard(app: ASGIApp, config: ServerConfig, *, version: str, paths: re.Pattern[str],
          model_of: Callable[[str], str]) -> ASGIApp:
    """``app`` behind the tenant check when ``--tenants_file`` is given, else ``app``.

    In queue mode (``--queue_url``) the rate limits are shared through the queue's Redis.
    A tenants file that cannot be read stops the server at start (TenantsError).
    """
    if not config.tenants_file:
        return app
    tenants = TenantsFile(Path(config.tenants_file))
    limits: TenantLimits
    if config.queue_url:
        from predictor.queue._client import connect

        client: Any = connect(config.queue_url, socket_timeout_s=2.0)
        try:
            limits = TenantLimits.on_redis(client)
        except ValueError as exc:
            raise TenantsError(str(exc)) from None
    else:
        limits = TenantLimits.in_memory()
    metrics = TenantMetrics({"model": config.model_name, "version": version,
                             "role": config.role}, top=config.tenant_metrics_top)
    return TenantMiddleware(app, tenants=tenants, limits=limits, metrics=metrics,
                            paths=paths, model_of=model_of)
