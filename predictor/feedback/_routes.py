"""``POST /v2/models/NAME/feedback``: ground-truth labels for earlier predictions.

Authenticated like the repository routes: ``Authorization: Bearer <token>``, the token
of ``--feedback_token_file`` compared in constant time (401 without it or with another).
Without that flag the route is not there (KServe answers 404).

The labels are written to the label files beside the captures (``--capture_uri``,
``captures.ParquetFiles`` with the role ``labels``) before the answer, so a 200 means
they are stored and survive a restart; a store that refuses them is a 503 to retry.
Each label whose prediction this process still holds (``_recent``) is judged at once
and counted in ``modelctl_feedback_labels_total`` by the version and role that answered
it and its outcome: ``correct`` and ``wrong`` (items), ``unmatched`` (a request ID this
process no longer or never held: still stored, for the offline join), ``duplicate`` (a
second label for one ID: stored, the latest counts offline; counted once here) and
``not_comparable``.
"""

from __future__ import annotations

import asyncio
import json
import re
import weakref
from datetime import UTC, datetime
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter

from captures import LABELS_ROLE, ParquetFiles, canonical_label
from predictor._errors import (
    BadInput,
    ModelUnknown,
    PredictorError,
    StoreUnavailable,
)
from predictor._http import ASGIApp, Receive, Scope, Send, header, request_body, send_error
from predictor._secrets import check_bearer
from predictor.feedback._labels import judge, parse_labels
from predictor.feedback._recent import RecentOutputs
from predictor.tap._record import Identity, build_record

FEEDBACK_PATH = re.compile(r"^/v2/models/(?P<name>[^/]+)/feedback$")
OUTCOMES = ("correct", "wrong", "unmatched", "duplicate", "not_comparable")

_FAMILIES: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()


def _counter(registry: CollectorRegistry) -> Counter:
    found = _FAMILIES.get(registry)
    if found is None:
        found = _FAMILIES[registry] = Counter(
            "modelctl_feedback_labels", "Ground-truth labels received, by the version and "
            "role that answered and outcome (correct and wrong count items).",
            ("model", "version", "role", "outcome"), registry=registry)
    return found


class FeedbackRoutes:
    """The feedback route of one served model; anything else goes to ``app``."""

    def __init__(self, app: ASGIApp, *, identity: Identity, token: str,
                 files: ParquetFiles, recent: RecentOutputs,
                 registry: CollectorRegistry = REGISTRY) -> None:
        self.app = app
        self.identity = identity
        self.token = token
        self.files = files
        self.recent = recent
        self.counter = _counter(registry)
        for outcome in OUTCOMES:  # exported at 0 from the start
            self.counter.labels(identity.model, identity.version, identity.role, outcome)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = FEEDBACK_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        try:
            if scope.get("method") != "POST":
                raise BadInput("use POST on the feedback route")
            if match["name"] != self.identity.model:
                raise ModelUnknown(f"model {match['name']} is not served here")
            self._authenticate(header(scope, b"authorization"))
            labels = parse_labels(request_body(scope) or b"")
            await self._store(labels)  # stored first: a retry after a 503 is no duplicate
            counts = self._judge(labels)
        except PredictorError as exc:
            await send_error(send, exc)
            return
        body = json.dumps({"accepted": len(labels), **counts}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    def _authenticate(self, authorization: bytes | None) -> None:
        check_bearer(self.token, (authorization or b"").decode("latin-1"), needs="feedback",
                     flag="--feedback_token_file")

    def _judge(self, labels: list[tuple[str, Any]]) -> dict[str, int]:
        counts = dict.fromkeys(("matched", "unmatched", "duplicates"), 0)
        for request_id, label in labels:
            recent = self.recent.get(request_id)
            if recent is None:
                self._count(self.identity.version, self.identity.role, "unmatched")
                counts["unmatched"] += 1
                continue
            record = build_record(recent.exchange, self.identity, with_input=False)
            version, role = record["version"], record["role"]
            if recent.labelled:
                self._count(version, role, "duplicate")
                counts["duplicates"] += 1
                continue
            recent.labelled = True
            counts["matched"] += 1
            items = json.loads(record["output"]) if record["output"] is not None else None
            judged = judge(items, label) if isinstance(items, list) else None
            if judged is None:
                self._count(version, role, "not_comparable")
                continue
            labelled, correct = judged
            self._count(version, role, "correct", correct)
            self._count(version, role, "wrong", labelled - correct)
        return counts

    def _count(self, version: str, role: str, outcome: str, n: int = 1) -> None:
        if n:
            self.counter.labels(self.identity.model, version, role, outcome).inc(n)

    async def _store(self, labels: list[tuple[str, Any]]) -> None:
        now = datetime.now(tz=UTC)
        rows = [{"request_id": rid, "ts": now, "model": self.identity.model,
                 "label": canonical_label(label), "source": "api"} for rid, label in labels]
        try:
            await asyncio.to_thread(self.files.write, LABELS_ROLE, rows)
        except Exception as exc:  # the store refuses: the client keeps its labels, retries
            raise StoreUnavailable(f"the labels could not be stored ({type(exc).__name__}); "
                                   "retry", 2.0) from None
