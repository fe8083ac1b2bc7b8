"""The registry's branch of the error tree (the root, ``PlatformError``, is in ``common``).

    PlatformError               (common/_errors.py)
    └── RegistryError
        ├── InvalidName         a model, alias, ref, task or metadata key is malformed
        ├── NotFound            no such model, version or alias
        ├── AliasConflict       a compare-and-swap on an alias lost a race
        ├── SourceError         the directory given to ``push`` cannot be pushed
        ├── ManifestError       a MANIFEST.json (or aliases.json) is corrupted
        ├── VerificationFailed  files do not match their manifest (``problems``)
        └── StoreError          the store is unreachable, refuses us, or cannot
                                do what we need (unknown URL scheme, no bucket)
"""

from __future__ import annotations

from collections.abc import Sequence

from common import PlatformError


class RegistryError(PlatformError):
    """Something about the registry, its names, refs or artifacts is wrong."""


class InvalidName(RegistryError):
    """A model name, alias, ref, task, framework or metadata key is malformed."""


class NotFound(RegistryError):
    """The model, version or alias asked for does not exist."""


class AliasConflict(RegistryError):
    """An alias changed between reading it and writing it: the caller lost a race."""


class SourceError(RegistryError):
    """The directory given to ``push`` is missing, empty or unsafe to copy."""


class ManifestError(RegistryError):
    """A manifest or alias file cannot be parsed or breaks the schema."""


class VerificationFailed(RegistryError):
    """Artifact files do not match their manifest; ``problems`` names each file."""

    def __init__(self, what: str, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        count = len(self.problems)
        first = self.problems[0] if self.problems else "no details"
        more = f" (and {count - 1} more)" if count > 1 else ""
        super().__init__(f"{what} failed verification: {first}{more}")


class StoreError(RegistryError):
    """The artifact store cannot be used: unreachable, bad credentials, no bucket,
    an unsupported URL, or a store that lacks a primitive we rely on."""
