"""Strict validation of a custom resource against its CRD's structural OpenAPI v3 schema.

What a real API server does with ``kubectl apply`` (server-side strict field validation)
and a plain JSON-Schema check misses:

- a field the schema does not declare is an error, unless the node (or an ancestor
  without properties) has ``x-kubernetes-preserve-unknown-fields: true``;
- ``x-kubernetes-int-or-string`` nodes take an integer or a string;
- ``x-kubernetes-embedded-resource`` objects carry ``apiVersion``, ``kind`` and an
  ObjectMeta ``metadata``; so does the document root;
- ``x-kubernetes-list-type: set|map`` lists must not repeat an item or a key;
- ``format: int32|int64`` bound integers; ``nullable`` decides whether null is allowed.

Not evaluated: CEL rules (``x-kubernetes-validations``) and defaulting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from deploycheck._problems import Finding, JsonPath

MetaValidator = Callable[[Any, JsonPath], list[Finding]]

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_ROOT_FIELDS = ("apiVersion", "kind", "metadata")


def type_name(value: Any) -> str:
    """The OpenAPI type a YAML value arrived as (for messages)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_type(value: Any, wanted: str) -> bool:
    actual = type_name(value)
    return actual == wanted or (wanted == "number" and actual == "integer")


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None  # an RE2-only construct: the API server checks it, we cannot


class StructuralValidator:
    """Walks a document and its schema together; collects every problem, not the first."""

    def __init__(self, validate_meta: MetaValidator) -> None:
        self._validate_meta = validate_meta

    def validate_document(self, doc: Mapping[str, Any], schema: Mapping[str, Any]) -> list[Finding]:
        out: list[Finding] = []
        props = schema.get("properties") or {}
        for key, value in doc.items():
            if key == "metadata":
                out.extend(self._validate_meta(value, ("metadata",)))
            elif key in ("apiVersion", "kind"):
                continue  # matched against the CRD already
            elif key in props:
                self._node(value, props[key], (key,), out, strict=True)
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                out.append(Finding((key,), f'unknown field "{key}"'))
        for key in schema.get("required") or []:
            if key not in doc:
                out.append(Finding((), f'missing required field "{key}"'))
        return out

    # -- one node ---------------------------------------------------------------------

    def _node(
        self,
        value: Any,
        schema: Mapping[str, Any],
        path: JsonPath,
        out: list[Finding],
        *,
        strict: bool,
    ) -> None:
        """``strict`` is False inside anyOf/oneOf/allOf/not, which only add value checks."""
        if value is None:
            if not schema.get("nullable") and schema.get("type"):
                out.append(Finding(path, f"must be {schema['type']}, not null"))
            return
        if schema.get("x-kubernetes-int-or-string"):
            if type_name(value) not in ("integer", "string"):
                out.append(Finding(path, f"must be an integer or a string, not {type_name(value)}"))
                return
        elif schema.get("type") and not _is_type(value, schema["type"]):
            out.append(
                Finding(path, f"must be {schema['type']}, not {type_name(value)} ({_short(value)})")
            )
            return
        if isinstance(value, dict):
            self._object(value, schema, path, out, strict=strict)
        elif isinstance(value, list):
            self._array(value, schema, path, out, strict=strict)
        else:
            _scalar(value, schema, path, out)
        self._junctors(value, schema, path, out)

    def _object(
        self,
        value: dict[Any, Any],
        schema: Mapping[str, Any],
        path: JsonPath,
        out: list[Finding],
        *,
        strict: bool,
    ) -> None:
        props: Mapping[str, Any] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        # A node that declares nothing about its fields (no properties, no
        # additionalProperties) is free-form only when it says so; otherwise the API
        # server prunes, and strict validation rejects, whatever it holds.
        free = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or extra is True
        for key, item in value.items():
            child = (*path, str(key))
            if key in props:
                self._node(item, props[key], child, out, strict=strict)
            elif isinstance(extra, dict):
                self._node(item, extra, child, out, strict=strict)
            elif embedded and key in _ROOT_FIELDS:
                if key == "metadata":
                    out.extend(self._validate_meta(item, child))
                elif not isinstance(item, str):
                    out.append(Finding(child, f"must be string, not {type_name(item)}"))
            elif strict and not free:
                out.append(Finding(child, f'unknown field "{key}"'))
        for key in schema.get("required") or []:
            if key not in value:
                out.append(Finding(path, f'missing required field "{key}"'))
        _bounds(len(value), schema, "Properties", "properties", path, out)

    def _array(
        self,
        value: list[Any],
        schema: Mapping[str, Any],
        path: JsonPath,
        out: list[Finding],
        *,
        strict: bool,
    ) -> None:
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                self._node(item, items, (*path, index), out, strict=strict)
        _bounds(len(value), schema, "Items", "items", path, out)
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            _unique(value, [repr(v) for v in value], path, out, "duplicate item")
        elif list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            marks = [
                repr(tuple(v.get(k) for k in keys)) if isinstance(v, dict) else repr(v)
                for v in value
            ]
            _unique(value, marks, path, out, f"duplicate entry for key {'/'.join(keys)}")

    def _junctors(
        self, value: Any, schema: Mapping[str, Any], path: JsonPath, out: list[Finding]
    ) -> None:
        if schema.get("x-kubernetes-int-or-string"):
            return  # its anyOf only restates "integer or string"
        for sub in schema.get("allOf") or []:
            self._node(value, sub, path, out, strict=False)
        for key, want in (("anyOf", "at least one"), ("oneOf", "exactly one")):
            branches = schema.get(key) or []
            if not branches:
                continue
            passing = sum(1 for sub in branches if not self._trial(value, sub, path))
            if (key == "anyOf" and passing == 0) or (key == "oneOf" and passing != 1):
                out.append(
                    Finding(path, f"must match {want} of the {key} schemas ({passing} match)")
                )
        if "not" in schema and not self._trial(value, schema["not"], path):
            out.append(Finding(path, "matches a schema it must not match"))

    def _trial(self, value: Any, schema: Mapping[str, Any], path: JsonPath) -> list[Finding]:
        found: list[Finding] = []
        self._node(value, schema, path, found, strict=False)
        return found


def _scalar(value: Any, schema: Mapping[str, Any], path: JsonPath, out: list[Finding]) -> None:
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(str(v) for v in schema["enum"])
        out.append(Finding(path, f"{_short(value)} is not one of: {allowed}"))
    if isinstance(value, str):
        pattern = schema.get("pattern")
        compiled = _compiled(pattern) if pattern else None
        if compiled is not None and not compiled.search(value):
            out.append(Finding(path, f"{_short(value)} does not match pattern {pattern}"))
        _bounds(len(value), schema, "Length", "characters", path, out)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _numeric(value, schema, path, out)


def _numeric(value: float, schema: Mapping[str, Any], path: JsonPath, out: list[Finding]) -> None:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and (value < low or (schema.get("exclusiveMinimum") and value == low)):
        out.append(Finding(path, f"{value} is below the minimum {low}"))
    if high is not None and (value > high or (schema.get("exclusiveMaximum") and value == high)):
        out.append(Finding(path, f"{value} is above the maximum {high}"))
    bounds = _INT_RANGES.get(str(schema.get("format")))
    if bounds and isinstance(value, int) and not bounds[0] <= value <= bounds[1]:
        out.append(Finding(path, f"{value} does not fit in {schema['format']}"))


def _bounds(
    size: int, schema: Mapping[str, Any], suffix: str, unit: str, path: JsonPath, out: list[Finding]
) -> None:
    low, high = schema.get(f"min{suffix}"), schema.get(f"max{suffix}")
    if low is not None and size < low:
        out.append(Finding(path, f"has {size} {unit}, fewer than the minimum {low}"))
    if high is not None and size > high:
        out.append(Finding(path, f"has {size} {unit}, more than the maximum {high}"))


def _unique(
    values: list[Any], marks: list[str], path: JsonPath, out: list[Finding], what: str
) -> None:
    seen: set[str] = set()
    for index, mark in enumerate(marks):
        if mark in seen:
            out.append(Finding((*path, index), f"{what}: {_short(values[index])}"))
        seen.add(mark)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
