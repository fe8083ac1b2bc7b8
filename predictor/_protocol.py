"""Decoding V1/V2 request bodies into items and encoding results back.

Pure functions over KServe's types: what the request holds, validated, with a
message that names the problem (the caller maps it to 400).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

from predictor._errors import BadInput
from predictor.handlers._base import Handler, RequestOptions

V2_NUMERIC = {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
              "FP16", "FP32", "FP64"}

# Request parameters that only say how the data travels (the binary extension, headers
# passed as parameters): part of neither the task's options nor the captured input.
TRANSPORT_PARAMETERS = frozenset({"binary_data_output", "binary_data", "binary_data_size",
                                  "headers"})
# Every request parameter that belongs to the protocol, not to the task (the above and
# Triton's scheduling hints): never passed to the handler as options.
V2_PROTOCOL_PARAMETERS = TRANSPORT_PARAMETERS | frozenset({
    "priority", "timeout", "sequence_id", "sequence_start", "sequence_end",
})


@dataclass(frozen=True)
class DecodedRequest:
    """The request's instances (one per V1 instance or V2 row) and its parameters."""

    instances: list[Any]
    options: RequestOptions
    is_v2: bool
    from_grpc: bool = False
    request_id: str | None = None


def decode_v1(payload: Any, max_instances: int) -> DecodedRequest:
    if isinstance(payload, bytes | str):
        # KServe hands over the raw body when the content-type is not JSON (curl -d
        # sends application/x-www-form-urlencoded): accept it if it is JSON anyway, read
        # by KServe's own parser (Python's json would let NaN and lone surrogates in).
        try:
            payload = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise BadInput(
                "the body is not JSON: send a JSON object with an \"instances\" list and "
                "content-type: application/json"
            ) from None
    if not isinstance(payload, dict):
        raise BadInput(
            "expected a JSON object with an \"instances\" list (check the content-type is "
            "application/json)"
        )
    if "instances" not in payload:
        hint = " (\"inputs\" is the V2 field: use /v2/models/NAME/infer)" if "inputs" in payload \
            else ""
        raise BadInput(f"missing \"instances\"{hint}")
    instances = payload["instances"]
    _check_count(instances, max_instances, "instances")
    parameters = payload.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise BadInput("\"parameters\" must be a JSON object")
    unknown = set(payload) - {"instances", "parameters"}
    if unknown:
        raise BadInput(f"unknown fields in request: {', '.join(sorted(unknown))}")
    return DecodedRequest(list(instances), RequestOptions(dict(parameters)), is_v2=False)


def decode_v2(request: Any, handler: Handler, max_instances: int) -> DecodedRequest:
    """Rows of the handler's one input tensor; datatype and shape are checked."""
    expected = handler.inputs[0]
    inputs = list(request.inputs or [])
    if len(inputs) != 1:
        raise BadInput(f"expected exactly one input named {expected.name!r}, got {len(inputs)}")
    tensor = inputs[0]
    if tensor.name != expected.name:
        raise BadInput(f"unknown input {tensor.name!r}; this model takes {expected.name!r}")
    datatype = tensor.datatype
    if expected.datatype == "BYTES" and datatype != "BYTES" and handler.task != "fixed-latency":
        raise BadInput(f"input {tensor.name!r} must have datatype BYTES, got {datatype}")
    if datatype != "BYTES" and datatype not in V2_NUMERIC:
        raise BadInput(f"unknown datatype {datatype!r}")
    shape = list(tensor.shape or [])
    if not shape or any(not isinstance(d, int) or d < 0 for d in shape):
        raise BadInput(f"input {tensor.name!r} has an invalid shape {shape}")
    rows = shape[0]
    if len(shape) > 2 or (len(shape) == 2 and shape[1] != 1 and datatype == "BYTES"):
        raise BadInput(f"input {tensor.name!r} must have shape [N] or [N, 1], got {shape}")
    data = _v2_values(tensor)
    width = 1 if len(shape) == 1 else shape[1]
    if len(data) != rows * width:
        raise BadInput(
            f"input {tensor.name!r} has shape {shape} but holds {len(data)} values"
        )
    _check_count(list(range(rows)), max_instances, "rows")
    instances = data if width == 1 else [data[i * width:(i + 1) * width] for i in range(rows)]
    params = request.parameters or {}
    options = {k: _param_value(v) for k, v in dict(params).items()
               if k not in V2_PROTOCOL_PARAMETERS}
    return DecodedRequest(list(instances), RequestOptions(options), is_v2=True,
                          from_grpc=bool(getattr(request, "from_grpc", False)),
                          request_id=getattr(request, "id", None))


def _v2_values(tensor: Any) -> list[Any]:
    data = tensor.data
    if getattr(tensor, "_raw_data", None) is not None:
        # The binary extension (HTTP) or raw_input_contents (gRPC): KServe decodes it.
        try:
            data = tensor.as_numpy().reshape(-1).tolist()
        except Exception as exc:
            raise BadInput(f"input {tensor.name!r}: cannot decode binary data ({exc})") from exc
    if data is None:
        raise BadInput(f"input {tensor.name!r} has no data")
    if tensor.datatype == "BYTES":
        values = [data] if isinstance(data, str | bytes) else list(_flatten(data))
        out = []
        for value in values:
            if isinstance(value, bytes):
                try:
                    value = value.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise BadInput(f"input {tensor.name!r} holds bytes that are not UTF-8") \
                        from exc
            if not isinstance(value, str):
                raise BadInput(f"input {tensor.name!r} is BYTES but holds {type(value).__name__}")
            if not value.isascii() and not _is_valid_unicode(value):
                # JSON's \ud800 escapes decode to lone surrogates, which no encoder can emit.
                raise BadInput(f"input {tensor.name!r} holds a string that is not valid Unicode "
                               "(a lone surrogate escape)")
            out.append(value)
        return out
    if hasattr(data, "tolist"):
        return list(_flatten(data.tolist()))
    values = list(_flatten(data))
    for value in values:
        if not isinstance(value, int | float) or isinstance(value, str):
            raise BadInput(f"input {tensor.name!r} is {tensor.datatype} but holds non-numbers")
        if isinstance(value, float) and not math.isfinite(value):
            # The V2 body goes through Python's json, which accepts NaN and Infinity.
            raise BadInput(f"input {tensor.name!r} holds NaN or Infinity, which JSON does "
                           "not allow")
    return values


def _is_valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _flatten(data: Any) -> Any:
    if isinstance(data, list | tuple):
        for item in data:
            yield from _flatten(item)
    else:
        yield data


def _param_value(value: Any) -> Any:
    # gRPC parameters arrive as InferParameter messages; REST ones as plain JSON.
    for field in ("bool_param", "int64_param", "string_param", "double_param"):
        if hasattr(value, "HasField") and value.HasField(field):
            return getattr(value, field)
    return value


def _check_count(instances: Any, max_instances: int, what: str) -> None:
    if not isinstance(instances, list):
        raise BadInput(f"\"{what}\" must be a list")
    if not instances:
        raise BadInput(f"\"{what}\" is empty")
    if len(instances) > max_instances:
        raise BadInput(f"{len(instances)} {what} in one request; the limit is {max_instances}")

