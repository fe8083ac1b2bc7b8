"""The registry aliases a rollout moves: ``canary`` on start, ``stable`` on promotion."""

from __future__ import annotations

from typing import Any, Protocol

from rollout._errors import Conflict

MAX_TRIES = 8


class AliasRegistry(Protocol):
    """The part of ``registry.Registry`` a rollout uses."""

    def resolve(self, model: str, ref: str | int) -> int: ...

    def storage_uri(self, model: str, ref: str | int) -> str: ...

    def aliases(self, model: str) -> dict[str, int]: ...

    def set_alias(self, model: str, alias: str, version: int, *, expected: Any = ...) -> Any: ...

    def remove_alias(self, model: str, alias: str, *, expected: Any = ...) -> Any: ...


def move_aliases(registry: AliasRegistry, model: str, *, stable: int | None = None,
                 canary: int | None = None, drop_canary: int | None = None) -> None:
    """Point ``stable``/``canary`` at these versions, or drop ``canary`` while it names
    ``drop_canary``; idempotent, and safe when another process does the same at once
    (a lost compare-and-swap re-reads and checks again)."""
    from registry import AliasConflict
    from registry import NotFound as AliasMissing

    for _ in range(MAX_TRIES):
        aliases = registry.aliases(model)
        try:
            for alias, version in (("stable", stable), ("canary", canary)):
                if version is not None and aliases.get(alias) != version:
                    registry.set_alias(model, alias, version, expected=aliases.get(alias))
        except AliasConflict:
            continue  # someone else moved it meanwhile: look again
        try:
            if drop_canary is not None and aliases.get("canary") == drop_canary:
                registry.remove_alias(model, "canary", expected=drop_canary)
        except (AliasConflict, AliasMissing):
            continue  # removed or moved by someone else meanwhile: look again
        return
    raise Conflict(f"the registry aliases of {model} kept changing; try again")
