"""``modelctl feedback push FILE --url URL``: labels in bulk, through the predictors' route.

Written straight to the label store (``_push``), labels reach the offline report but
no predictor's counters, which a rollout's ``accuracy`` check reads. Sent to the
feedback route of every predictor named (each one of the model's replicas, or the
canary and the stable), each predictor judges those of the answers it gave, counts
them by the version that answered, and stores them all: so bulk labels, however late,
count in the rollout under way. Every row is checked first by ``read_labels`` (the
route's rules; one bad row stops the push before anything is sent); then batches of
``MAX_LABELS`` go to each predictor with the bearer token. A row's ``ts`` is not sent:
the route records each label's arrival. A predictor that cannot take a batch stops
the push with what was delivered; sending the file again is harmless (a repeated label
is counted once, and the latest of an ID counts offline).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from accuracy._errors import AccuracyError
from accuracy._push import check_model, read_labels
from captures import LabelError, safe_uri

MAX_LABELS = 1000  # the route's limit a request
_COUNTS = ("accepted", "matched", "unmatched", "duplicates")


@dataclass
class SendResult:
    """What each predictor answered, summed over the batches sent to it."""

    model: str
    labels: int
    predictors: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "labels": self.labels, "predictors": self.predictors}


def send_labels(path: Path, urls: list[str], model: str, token: str, *,
                timeout_s: float = 30.0) -> SendResult:
    """Check every row of ``path``, then send them all to each predictor in ``urls``."""
    check_model(model)
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AccuracyError(f"--url {safe_uri(url)}: give a predictor's http(s) URL")
        if parts.username or parts.password:
            raise AccuracyError("--url: put the token in --token-file, not in the URL")
    try:
        rows = read_labels(path, model, now=datetime.now(tz=UTC))
    except LabelError as exc:
        raise AccuracyError(str(exc)) from None
    labels = [{"request_id": row["request_id"], "label": json.loads(row["label"])}
              for row in rows]
    result = SendResult(model, len(labels))
    headers = {"authorization": f"Bearer {token}"}
    with httpx.Client(timeout=timeout_s, headers=headers) as client:
        for url in urls:
            route = f"{url.rstrip('/')}/v2/models/{model}/feedback"
            counts = result.predictors.setdefault(url.rstrip("/"), dict.fromkeys(_COUNTS, 0))
            for start in range(0, len(labels), MAX_LABELS):
                body = {"labels": labels[start:start + MAX_LABELS]}
                answer = _post(client, route, body, sent=counts["accepted"],
                               total=len(labels))
                for key in _COUNTS:
                    counts[key] += int(answer.get(key, 0))
    return result


def _post(client: httpx.Client, route: str, body: dict[str, Any], *, sent: int,
          total: int) -> dict[str, Any]:
    where = f"{safe_uri(route)} ({sent} of {total} labels delivered there; sending again " \
            "is harmless)"
    try:
        reply = client.post(route, json=body)
    except httpx.HTTPError as exc:
        raise AccuracyError(f"cannot send labels to {where}: {type(exc).__name__}") from None
    if reply.status_code != 200:
        try:
            message = str(reply.json().get("error", reply.text))
        except ValueError:
            message = reply.text
        raise AccuracyError(f"{reply.status_code} from {where}: {message[:300]}")
    answer: dict[str, Any] = reply.json()
    return answer
