"""One capture record per answered request: what a shadow report needs, in one flat row
(its columns: ``captures.CAPTURE_COLUMNS``).

Pure functions over an ``Exchange``. The input is hashed in a canonical form (keys
sorted, no whitespace, the request's own ID left out) so that the same input hashes
the same on the primary and on its shadow, whichever client sent it. The output is
stored as canonical JSON of one value per item, the same for V1 and V2: a V1
``predictions`` list as it is; a V2 response row by row, each row the value of its
one output tensor (or an object ``{name: value}`` when there are several), so a
classification row reads ``{"label": ..., "score": ...}`` in both protocols. A
generation (task ``llm``) is recorded as text in, ``[text]`` out (``_generation``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from predictor._protocol import TRANSPORT_PARAMETERS
from predictor.tap._generation import generation_input, generation_output, protocol_of

if TYPE_CHECKING:
    from predictor.tap._exchange import Exchange

MAX_ERROR_CHARS = 500
LLM_TASK = "llm"  # its records come from ``_generation``
@dataclass(frozen=True)
class Identity:
    """Who writes the records: the served model, its version, role and task."""

    model: str
    version: str
    role: str
    task: str


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=True)


def build_record(exchange: Exchange, identity: Identity, *, with_input: bool) -> dict[str, Any]:
    """The record of one exchange (a shadow copy is recorded with role ``shadow``)."""
    if identity.task == LLM_TASK:
        return _generation_record(exchange, identity, with_input=with_input)
    is_v2 = exchange.path.endswith("/infer")
    binary = any(name == "inference-header-content-length" for name, _ in exchange.headers)
    request = None if binary else _json(exchange.body)
    canonical, items = _canonical_input(request, is_v2)
    digest = hashlib.sha256(canonical.encode() if canonical is not None else exchange.body)
    output = error = None
    if 200 <= exchange.status < 300:
        output = _canonical_output(_json(exchange.response), is_v2)
        if output is None:
            error = "response not captured (not a JSON V1/V2 body)"
    else:
        error = _error_text(exchange.response)
    return _record(exchange, identity, protocol="v2" if is_v2 else "v1",
                   status=exchange.status, items=items, input_hash=digest.hexdigest(),
                   canonical=canonical if with_input else None, output=output, error=error)


def _generation_record(exchange: Exchange, identity: Identity, *,
                       with_input: bool) -> dict[str, Any]:
    """A generation's record (``_generation``): text in, ``[text]`` out."""
    protocol = protocol_of(exchange.path)
    value = generation_input(protocol, exchange.body)
    canonical = canonical_json(value) if value is not None else None
    digest = hashlib.sha256(canonical.encode() if canonical is not None else exchange.body)
    status, text, error = generation_output(protocol, exchange.status, exchange.response)
    if not 200 <= exchange.status < 300:
        error = _error_text(exchange.response)
    return _record(exchange, identity, protocol=protocol, status=status,
                   items=1 if text is not None else None, input_hash=digest.hexdigest(),
                   canonical=canonical if with_input else None,
                   output=canonical_json(text) if text is not None else None,
                   error=error[:MAX_ERROR_CHARS] if error is not None else None)


def _record(exchange: Exchange, identity: Identity, *, protocol: str, status: int,
            items: int | None, input_hash: str, canonical: str | None, output: str | None,
            error: str | None) -> dict[str, Any]:
    return {
        "request_id": exchange.request_id,
        "ts": datetime.fromtimestamp(exchange.started_at, tz=UTC),
        "model": identity.model,
        "version": identity.version,
        "role": "shadow" if exchange.is_shadow else identity.role,
        "task": identity.task,
        "protocol": protocol,
        "status": status,
        "latency_ms": exchange.latency_s * 1000.0,
        "items": items,
        "input_hash": input_hash,
        "input": canonical,
        "output": output,
        "error": error,
    }


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None


def _canonical_input(request: Any, is_v2: bool) -> tuple[str | None, int | None]:
    if not isinstance(request, dict):
        return None, None
    raw = request.get("parameters")
    parameters = ({k: v for k, v in raw.items() if k not in TRANSPORT_PARAMETERS}
                  if isinstance(raw, dict) else raw)
    if is_v2:
        inputs = request.get("inputs")
        value = {"inputs": inputs, "parameters": parameters or {}}
        first = inputs[0] if isinstance(inputs, list) and inputs else {}
        shape = first.get("shape") if isinstance(first, dict) else None
        items = shape[0] if isinstance(shape, list) and shape and isinstance(shape[0], int) \
            else None
    else:
        instances = request.get("instances")
        value = {"instances": instances, "parameters": parameters or {}}
        items = len(instances) if isinstance(instances, list) else None
    return canonical_json(value), items


def _canonical_output(response: Any, is_v2: bool) -> str | None:
    if not isinstance(response, dict):
        return None
    if not is_v2:
        predictions = response.get("predictions")
        return canonical_json(predictions) if isinstance(predictions, list) else None
    outputs = response.get("outputs")
    if not isinstance(outputs, list) or not outputs:
        return None
    try:
        columns = [(str(o["name"]), _rows(o["data"], [int(d) for d in o["shape"]]))
                   for o in outputs]
    except (KeyError, TypeError, ValueError):
        return None
    count = len(columns[0][1])
    if any(len(rows) != count for _, rows in columns):
        return None
    if len(columns) == 1:
        return canonical_json(columns[0][1])
    return canonical_json([{name: rows[i] for name, rows in columns} for i in range(count)])


def _rows(data: Sequence[Any], shape: list[int]) -> list[Any]:
    """A flat V2 tensor's data, split into its rows (first dimension)."""
    if not shape:
        return [data[0]] if data else []
    width = math.prod(shape[1:]) if len(shape) > 1 else 1
    if width * shape[0] != len(data):
        raise ValueError("shape does not match data")
    if len(shape) == 1:
        return list(data)
    return [_nest(data[i * width:(i + 1) * width], shape[1:]) for i in range(shape[0])]


def _nest(data: Sequence[Any], shape: list[int]) -> list[Any]:
    if len(shape) == 1:
        return list(data)
    width = math.prod(shape[1:])
    return [_nest(data[i * width:(i + 1) * width], shape[1:]) for i in range(shape[0])]


def _error_text(raw: bytes) -> str:
    body = _json(raw)
    if isinstance(body, dict) and isinstance(body.get("error"), dict) \
            and "message" in body["error"]:  # OpenAI's error shape
        text = str(body["error"]["message"])
    elif isinstance(body, dict) and "error" in body:
        text = str(body["error"])
    elif isinstance(body, dict) and "detail" in body:
        text = str(body["detail"])
    else:
        text = raw.decode("utf-8", "replace")
    return text[:MAX_ERROR_CHARS]
