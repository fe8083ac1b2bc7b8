"""The structural-schema validator on small schemas: each API-server behaviour it
copies, tested on its own."""

from __future__ import annotations

from typing import Any

from deploycheck._openapi import StructuralValidator
from deploycheck._problems import Finding, JsonPath


def no_meta(meta: Any, path: JsonPath) -> list[Finding]:
    return [] if isinstance(meta, dict) else [Finding(path, "bad metadata")]


def check(spec: Any, schema: dict[str, Any]) -> list[tuple[str, str]]:
    root = {"type": "object", "properties": {"spec": schema}}
    doc = {"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "x"}, "spec": spec}
    found = StructuralValidator(no_meta).validate_document(doc, root)
    return [(".".join(str(p) for p in f.path), f.message) for f in found]


OBJ = {"type": "object", "properties": {"a": {"type": "integer", "format": "int32"}}}


def test_unknown_fields_are_errors_at_any_depth() -> None:
    nested = {"type": "object", "properties": {"inner": OBJ}}
    assert check({"inner": {"a": 1, "b": 2}}, nested) == [("spec.inner.b", 'unknown field "b"')]


def test_preserve_unknown_fields_allows_them() -> None:
    schema = {**OBJ, "x-kubernetes-preserve-unknown-fields": True}
    assert check({"a": 1, "b": {"anything": [1]}}, schema) == []
    assert check({"a": "one"}, schema) == [("spec.a", "must be integer, not string ('one')")]


def test_object_without_properties_holds_nothing() -> None:
    assert check({"k": 1}, {"type": "object"}) == [("spec.k", 'unknown field "k"')]
    assert check({"k": "v"}, {"type": "object", "additionalProperties": {"type": "string"}}) == []


def test_int_or_string() -> None:
    schema = {
        "type": "object",
        "properties": {
            "q": {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": True,
                "pattern": "^[0-9]+(m|Gi)?$",
            }
        },
    }
    assert check({"q": 2}, schema) == []
    assert check({"q": "500m"}, schema) == []
    assert check({"q": 1.5}, schema) == [("spec.q", "must be an integer or a string, not number")]
    assert check({"q": "lots"}, schema) == [
        ("spec.q", "'lots' does not match pattern ^[0-9]+(m|Gi)?$")
    ]


def test_embedded_resource_takes_api_version_kind_and_metadata() -> None:
    schema = {
        "type": "object",
        "x-kubernetes-embedded-resource": True,
        "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    }
    ok = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}}
    assert check(ok, schema) == []
    assert check({**ok, "metadata": "p"}, schema) == [("spec.metadata", "bad metadata")]
    assert check({**ok, "status": {}}, schema) == [("spec.status", 'unknown field "status"')]


def test_bounds_enums_formats_and_nulls() -> None:
    schema = {
        "type": "object",
        "required": ["n"],
        "properties": {
            "n": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 100},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 1},
            "maybe": {"type": "string", "nullable": True},
            "never": {"type": "string"},
        },
    }
    assert check({"n": 5, "maybe": None}, schema) == []
    assert check({"n": 101, "mode": "c", "tags": ["x", "y"], "never": None}, schema) == [
        ("spec.n", "101 is above the maximum 100"),
        ("spec.mode", "'c' is not one of: a, b"),
        ("spec.tags", "has 2 items, more than the maximum 1"),
        ("spec.never", "must be string, not null"),
    ]
    assert check({}, schema) == [("spec", 'missing required field "n"')]
    assert check({"n": True}, schema) == [("spec.n", "must be integer, not boolean (True)")]
    wide = {"type": "object", "properties": {"n": {"type": "integer", "format": "int32"}}}
    assert check({"n": 2**31}, wide) == [("spec.n", "2147483648 does not fit in int32")]


def test_list_types_refuse_duplicates() -> None:
    schema = {
        "type": "object",
        "properties": {
            "set": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
            "map": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "v": {"type": "integer"}},
                },
            },
        },
    }
    assert (
        check({"set": ["a", "b"], "map": [{"name": "a", "v": 1}, {"name": "b", "v": 1}]}, schema)
        == []
    )
    found = check(
        {"set": ["a", "a"], "map": [{"name": "a", "v": 1}, {"name": "a", "v": 2}]}, schema
    )
    assert found == [
        ("spec.set.1", "duplicate item: 'a'"),
        ("spec.map.1", "duplicate entry for key name: {'name': 'a', 'v': 2}"),
    ]


def test_junctors() -> None:
    one_of = {
        "type": "object",
        "properties": {"x": {"type": "string", "oneOf": [{"pattern": "^a"}, {"pattern": "b$"}]}},
    }
    assert check({"x": "ax"}, one_of) == []
    assert check({"x": "ab"}, one_of) == [
        ("spec.x", "must match exactly one of the oneOf schemas (2 match)")
    ]
    negated = {"type": "object", "properties": {"x": {"type": "string", "not": {"enum": ["no"]}}}}
    assert check({"x": "no"}, negated) == [("spec.x", "matches a schema it must not match")]


def test_unknown_top_level_field() -> None:
    doc = {"apiVersion": "x/v1", "kind": "X", "metadata": {}, "spce": {}}
    found = StructuralValidator(no_meta).validate_document(
        doc, {"type": "object", "properties": {}}
    )
    assert found == [Finding(("spce",), 'unknown field "spce"')]
