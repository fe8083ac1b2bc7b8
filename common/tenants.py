"""The tenants file: who may call, with which keys, which models and limits.

Shared by the command line that makes keys and checks files (``modelctl tenants``) and
the predictor that reads the file (``predictor.tenants``, ``--tenants_file``).

A YAML (or JSON) file, meant to be a Kubernetes Secret mounted as a volume::

    tenants:
      acme:
        keys: ["sha256:9f86d0…"]     # sha256 of each API key (modelctl tenants key)
        models: [demo-chat]          # may use only these; omitted: every model served
        requests: "20 per 2 seconds" # at most 20 in any 2 s: bursts of 20, 10/s sustained
        tokens: "6000 per minute"    # generated tokens (task llm), same notation
        concurrent: 4                # requests (streams) in flight at once
        weight: 1                    # share under contention (fair share)
        adapter: demo-chat-acme      # an LLM's LoRA adapter for this tenant (by name)
      beta:
        keys: ["sha256:…", "sha256:…"]   # a second key: rotate without downtime

Keys are stored as their SHA-256, never in the clear: a request's key is hashed and
looked up, so neither the file nor a timing difference gives a key away. ``requests``
and ``tokens`` are rates in the notation of the ``limits`` library (``limits.parse``:
"10/second", "600 per minute", "20 per 2 seconds"). Every field but ``keys`` is
optional.

``TenantsFile.current()`` re-reads the file when its identity (inode, size, mtime)
changes, at most once a second: a Secret's volume swaps a symlink when the Secret
changes, and the next request sees the new keys. A file that no longer parses keeps
the last good tenants (logged, without its content) rather than locking everyone out.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import PlatformError

logger = logging.getLogger("predictor.tenants")

KEY_PREFIX = "mk-"  # what a generated key starts with, so a leaked one is recognisable
HASH_PREFIX = "sha256:"
_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
_FIELDS = {"keys", "models", "requests", "tokens", "concurrent", "weight", "adapter"}
RECHECK_S = 1.0


class TenantsError(PlatformError):
    """The tenants file cannot be used (unreadable, not YAML, a bad field)."""


@dataclass(frozen=True)
class Tenant:
    """One tenant: its name, what it may use, its limits and weight."""

    name: str
    models: frozenset[str] | None = None  # None: every model served here
    requests: str | None = None  # a ``limits`` rate, e.g. "20 per 2 seconds"
    tokens: str | None = None  # generated tokens, the same notation (task llm)
    concurrent: int | None = None
    weight: float = 1.0
    adapter: str | None = None  # the LoRA adapter its generations use (None: the base)

    def may_use(self, model: str) -> bool:
        return self.models is None or model in self.models


@dataclass(frozen=True)
class Tenants:
    """The parsed file: each key's hash to its tenant."""

    by_hash: Mapping[str, Tenant] = field(default_factory=dict)

    def tenant_for(self, key: str) -> Tenant | None:
        return self.by_hash.get(hash_key(key))

    @property
    def names(self) -> list[str]:
        return sorted({t.name for t in self.by_hash.values()})


def hash_key(key: str) -> str:
    return HASH_PREFIX + hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    """A new random API key (256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def parse_tenants(data: Any, where: str) -> Tenants:
    """``data`` (the loaded YAML) as Tenants; TenantsError naming the first problem."""
    if not isinstance(data, dict) or not isinstance(data.get("tenants"), dict):
        raise TenantsError(f"{where}: expected a mapping with 'tenants:' (name: settings)")
    by_hash: dict[str, Tenant] = {}
    for name, spec in data["tenants"].items():
        tenant = _tenant(str(name), spec, where)
        for key_hash in spec["keys"]:
            if key_hash in by_hash:
                raise TenantsError(f"{where}: tenants {by_hash[key_hash].name!r} and "
                                   f"{tenant.name!r} share a key")
            by_hash[key_hash] = tenant
    return Tenants(by_hash)


def _tenant(name: str, spec: Any, where: str) -> Tenant:
    at = f"{where}: tenant {name!r}"
    if not _NAME.match(name):
        raise TenantsError(f"{at}: a name is lower-case letters, digits, '.', '_' or '-' "
                           "(at most 63)")
    if not isinstance(spec, dict):
        raise TenantsError(f"{at}: expected a mapping (keys, models, requests, ...)")
    unknown = sorted(set(spec) - _FIELDS)
    if unknown:
        raise TenantsError(f"{at}: unknown field {unknown[0]!r} (known: "
                           f"{', '.join(sorted(_FIELDS))})")
    keys = spec.get("keys")
    if not isinstance(keys, list) or not keys:
        raise TenantsError(f"{at}: 'keys' must list at least one key hash")
    for key in keys:
        if not isinstance(key, str) or not _HASH.match(key):
            # Never echo the value: it may be a key pasted in the clear.
            raise TenantsError(f"{at}: each of 'keys' must be 'sha256:' and 64 hex digits "
                               "(make one with: modelctl tenants key)")
    models = spec.get("models")
    if models is not None and (not isinstance(models, list)
                               or not all(isinstance(m, str) and m for m in models)):
        raise TenantsError(f"{at}: 'models' must be a list of model names")
    requests, tokens = spec.get("requests"), spec.get("tokens")
    for key, rate in (("requests", requests), ("tokens", tokens)):
        if rate is not None:
            _check_rate(key, str(rate), at)
    concurrent = spec.get("concurrent")
    if concurrent is not None and (not isinstance(concurrent, int) or isinstance(
            concurrent, bool) or concurrent < 1):
        raise TenantsError(f"{at}: 'concurrent' must be a whole number >= 1")
    weight = spec.get("weight", 1)
    if not isinstance(weight, int | float) or isinstance(weight, bool) or not weight > 0:
        raise TenantsError(f"{at}: 'weight' must be a number > 0")
    adapter = spec.get("adapter")
    if adapter is not None and (not isinstance(adapter, str) or not _NAME.match(adapter)):
        raise TenantsError(f"{at}: 'adapter' must be the name of an adapter served here")
    return Tenant(name, frozenset(models) if models is not None else None,
                  str(requests) if requests is not None else None,
                  str(tokens) if tokens is not None else None, concurrent, float(weight),
                  adapter)


def _check_rate(key: str, text: str, at: str) -> None:
    from limits import parse

    try:
        parse(text)
    except ValueError:
        raise TenantsError(f"{at}: {key!r} {text!r} is not a rate (e.g. '10/second', "
                           "'20 per 2 seconds')") from None


def read_tenants(path: Path) -> Tenants:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TenantsError(f"cannot read the tenants file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise TenantsError(f"the tenants file {path} is not YAML{line}") from None
    return parse_tenants(data, str(path))


class TenantsFile:
    """The tenants of a file, re-read when the file changes (at most once a second)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tenants = read_tenants(path)  # a bad file at start: the server does not start
        self._identity = self._stat()
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)  # follows the Secret volume's ..data symlink
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def current(self) -> Tenants:
        now = time.monotonic()
        if now - self._checked < RECHECK_S or not self._lock.acquire(blocking=False):
            return self._tenants
        try:
            self._checked = now
            identity = self._stat()
            if identity is not None and identity != self._identity:
                self._identity = identity
                try:
                    self._tenants = read_tenants(self.path)
                    logger.info("tenants file reloaded: %d tenants",
                                len(self._tenants.names))
                except TenantsError as exc:
                    logger.error("%s; keeping the %d tenants read before", exc,
                                 len(self._tenants.names))
        finally:
            self._lock.release()
        return self._tenants
