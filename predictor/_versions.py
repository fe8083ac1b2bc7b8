"""The Open Inference Protocol's version routes, for the one version each model serves.

The protocol names a version in the path (``GET /v2/models/NAME/versions/V`` for the
metadata, ``…/versions/V/ready``, ``POST …/versions/V/infer``; required_api.md of the
KServe/Open Inference Protocol) and, in gRPC, in each request's ``version`` field.
KServe's routes answer every HTTP one with 501 "Model versioning not supported yet"
(``kserve/protocol/rest/v2_endpoints.py``: ``model_metadata``, ``model_ready``,
``infer``, also for the ``?model_version=`` query those handlers take) and its gRPC
servicer ignores the field. A predictor here serves one registry version of each model,
and knows which, so:

- a request naming the version served is the request without a version (the path
  rewritten, the query parameter dropped) and KServe's route answers it;
- one naming any other version is 404 (``ModelUnknown``), saying which version is
  served, in HTTP and in gRPC (NOT_FOUND);
- a model the predictor does not know is left to KServe's own 404;
- the metadata lists the served version in ``versions`` (optional in the protocol).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from predictor._errors import ModelUnknown, PredictorError
from predictor._http import ASGIApp, Receive, Scope, Send, send_error

VERSIONED = re.compile(
    r"^/v2/models/(?P<name>[^/]+)/versions/(?P<version>[^/]+)(?P<rest>/ready|/infer)?$")
UNVERSIONED = re.compile(r"^/v2/models/(?P<name>[^/]+)(?P<rest>/ready|/infer)?$")
QUERY = "model_version"


def served_version(registry: Any, name: str) -> str | None:
    """The version ``registry`` (KServe's ModelRepository) serves of ``name``: None for a
    model it does not know, "" for one whose version is not known."""
    model = registry.get_model(name)
    if model is None:
        return None
    return str(getattr(model, "version", "") or "")


def check_version(registry: Any, name: str, asked: str) -> None:
    """Raise ``ModelUnknown`` unless ``asked`` is empty or the version served of ``name``
    (a model ``registry`` does not know is left to the caller's own 404)."""
    served = served_version(registry, name)
    if not asked or served is None or asked == served:
        return
    if not served:
        raise ModelUnknown(f"model {name} has no known version: ask without one")
    raise ModelUnknown(f"model {name} serves version {served}, not version {asked}: ask for "
                       f"{served}, or without a version")


def with_versions(metadata: dict[str, Any], registry: Any, name: str) -> dict[str, Any]:
    """KServe's model metadata with the served version listed, as the protocol allows."""
    served = served_version(registry, name)
    return {**metadata, "versions": [served]} if served else metadata


class VersionRoutes:
    """ASGI, in front of KServe's app: the version routes answered for the version served
    (rewritten to the unversioned route), 404 for another."""

    def __init__(self, app: ASGIApp, registry: Any) -> None:
        self.app = app
        self.registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith("/v2/models/"):
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"),
                          keep_blank_values=True)
        asked = [value for key, value in query if key == QUERY]
        versioned = VERSIONED.match(path)
        plain = None if versioned else UNVERSIONED.match(path)
        match = versioned or plain
        if match is None or (plain is not None and not asked):
            await self.app(scope, receive, send)
            return
        wanted = {match["version"]} if versioned else set()
        wanted.update(asked)
        name = match["name"]
        try:
            for version in sorted(wanted):
                check_version(self.registry, name, version)
        except PredictorError as exc:
            await send_error(send, exc)
            return
        plain_path = f"/v2/models/{name}{match['rest'] or ''}"
        rest = urlencode([(key, value) for key, value in query if key != QUERY])
        await self.app({**scope, "path": plain_path, "raw_path": quote(plain_path).encode(),
                        "query_string": rest.encode("latin-1")}, receive, send)
