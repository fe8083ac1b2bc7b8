"""What travels through Redis: stream entries (requests) and result records. Pure.

An entry holds the frontend's own unique request ID (the result key's suffix), the
caller's ``x-request-id``, the validated instances and request options as JSON (the
worker parses them again with the same handler: ``parse`` is deterministic and cheap,
and a handler's parsed items are not all JSON), the absolute deadline and the enqueue
time in Unix milliseconds (monotonic clocks differ between processes) and the reply
channel. A result record is JSON: ``{"ok": true, "results": [...]}`` with one raw
handler result per item, encoded to V1/V2 by the frontend (``BatchingModel._encode``,
the same code as in-process), or ``{"ok": false, "error": {...}}`` naming the error and
the fields its HTTP status needs. Never pickle: a record is data, not code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from predictor._errors import (
    BadInput,
    DeadLettered,
    DeadlineExpired,
    ItemFailed,
    Overloaded,
    PredictorError,
    RemoteItemFailed,
)

FORMAT = "1"


@dataclass(frozen=True)
class Entry:
    """One request as it sits in the stream."""

    request_id: str
    client_request_id: str
    instances: list[Any]
    options: dict[str, Any]
    deadline_ms: float
    timeout_ms: float
    enqueued_ms: float
    reply_to: str


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # integers past 64 bits (V2 bodies go through Python's json)
        return json.dumps(value, allow_nan=False).encode()


def _loads(raw: bytes | str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def encode_entry(entry: Entry) -> dict[str, bytes | str]:
    """The XADD fields of ``entry``."""
    return {
        "v": FORMAT,
        "request_id": entry.request_id,
        "client_request_id": entry.client_request_id,
        "items": _dumps(entry.instances),
        "options": _dumps(entry.options),
        "deadline_ms": repr(entry.deadline_ms),
        "timeout_ms": repr(entry.timeout_ms),
        "enqueued_ms": repr(entry.enqueued_ms),
        "reply_to": entry.reply_to,
    }


def decode_entry(fields: Mapping[bytes | str, bytes | str]) -> Entry:
    """An entry from its stream fields; ValueError when it is not one of ours."""
    f = {(k.decode() if isinstance(k, bytes) else k): v for k, v in fields.items()}

    def text(name: str) -> str:
        value = f.get(name)
        if value is None:
            raise ValueError(f"queue entry without {name!r}")
        return value.decode() if isinstance(value, bytes) else value

    if text("v") != FORMAT:
        raise ValueError(f"queue entry of format {text('v')!r}, expected {FORMAT}")
    instances = _loads(f["items"])
    options = _loads(f["options"])
    if not isinstance(instances, list) or not isinstance(options, dict):
        raise ValueError("queue entry items must be a list and options an object")
    return Entry(text("request_id"), text("client_request_id"), instances, options,
                 float(text("deadline_ms")), float(text("timeout_ms")),
                 float(text("enqueued_ms")), text("reply_to"))


def request_id_of(fields: Mapping[bytes | str, bytes | str]) -> str | None:
    """The request ID of entry fields that may not decode as a whole."""
    for key in ("request_id", b"request_id"):
        value = fields.get(key)
        if value is not None:
            return value.decode() if isinstance(value, bytes) else value
    return None


def ok_record(request_id: str, results: Sequence[Any]) -> bytes:
    return _dumps({"request_id": request_id, "ok": True, "results": list(results)})


def error_record(request_id: str, exc: PredictorError) -> bytes:
    """The record of a request that failed with ``exc`` (its HTTP status survives)."""
    error: dict[str, Any] = {"message": str(exc)}
    if isinstance(exc, DeadlineExpired):
        error.update(kind="deadline", timeout_ms=exc.timeout_ms, waited_ms=exc.waited_ms)
    elif isinstance(exc, Overloaded):
        error.update(kind="overloaded", reason=exc.reason, retry_after_s=exc.retry_after_s)
    elif isinstance(exc, ItemFailed):
        error.update(kind="item_failed", item_index=exc.item_index,
                     is_input_error=exc.is_input_error)
    elif isinstance(exc, DeadLettered):
        error.update(kind="dead_lettered")
    elif isinstance(exc, BadInput):  # what only the worker can check (an LLM's context)
        error.update(kind="bad_input")
    else:
        error.update(kind="internal")
    return _dumps({"request_id": request_id, "ok": False, "error": error})


def decode_record(raw: bytes | str) -> dict[str, Any]:
    record = _loads(raw)
    if not isinstance(record, dict) or "ok" not in record:
        raise ValueError("not a result record")
    return record


def results_of(record: Mapping[str, Any]) -> list[Any]:
    """The results of a decoded record, or raise the error it carries."""
    if record.get("ok"):
        return list(record["results"])
    raise error_of(record.get("error") or {})


def error_of(error: Mapping[str, Any]) -> PredictorError:
    """The error a record's ``error`` part stands for (the same status as on the worker)."""
    kind = error.get("kind")
    message = str(error.get("message", "the worker failed"))
    if kind == "deadline":
        return DeadlineExpired(float(error["timeout_ms"]), float(error["waited_ms"]))
    if kind == "overloaded":
        return Overloaded(error.get("reason", "deadline"), float(error["retry_after_s"]),
                          message)
    if kind == "item_failed":
        return RemoteItemFailed(int(error["item_index"]), message,
                                is_input_error=bool(error["is_input_error"]))
    if kind == "dead_lettered":
        return DeadLettered(message)
    if kind == "bad_input":
        return BadInput(message)
    return PredictorError(message)
