"""YAML as kubectl reads it: duplicate keys are errors, dates stay strings."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import yaml


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (the API server's strict field validation
    rejects them) and leaves timestamps as strings (kubectl's YAML-to-JSON does)."""


def _construct_mapping(loader: StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
# Copy the resolver table before editing it: SafeLoader's own must stay untouched.
StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class YamlDocumentError(ValueError):
    """A YAML stream that does not parse; ``document`` is the index it failed in."""

    def __init__(self, document: int, message: str) -> None:
        super().__init__(message)
        self.document = document


def load_documents(text: str) -> Iterator[tuple[int, Any]]:
    """Yield ``(index, document)`` for every document in the stream, empty ones included
    as ``None`` so that indexes match what a reader counts between ``---`` lines."""
    loader = StrictLoader(text)
    has_more: Callable[[], bool] = loader.check_data  # untyped in PyYAML's stubs
    index = 0
    try:
        while has_more():
            yield index, loader.get_data()
            index += 1
    except yaml.YAMLError as exc:
        raise YamlDocumentError(index, " ".join(str(exc).split())) from exc
    finally:
        loader.dispose()


def fast_load_all(text: str) -> list[Any]:
    """Trusted, large YAML (upstream CRDs): libyaml when present, no strictness needed."""
    loader_cls: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(text, Loader=loader_cls) if doc is not None]
