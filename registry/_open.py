"""``open_store``: the one factory from a registry URL to its ``ArtifactStore`` adapter."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from registry._errors import StoreError
from registry._local_store import LocalStore
from registry._s3_store import S3Store
from registry._store import ArtifactStore


def default_url() -> str:
    """``MODELCTL_REGISTRY`` if set, else ``~/.modelctl/registry``."""
    env = os.environ.get("MODELCTL_REGISTRY", "").strip()
    return env or str(Path.home() / ".modelctl" / "registry")


def open_store(url: str) -> ArtifactStore:
    """The adapter for a registry URL: a path or ``file://`` (local), or ``s3://``.

    Other fsspec schemes are refused: the registry's guarantees need an atomic
    create and a compare-and-swap, which only these adapters provide.
    """
    if not url or not url.strip():
        raise StoreError("empty registry URL")
    scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    if scheme in ("", "file"):
        return LocalStore.from_url(url)
    if scheme in ("s3", "s3a"):
        return S3Store.from_url(url)
    raise StoreError(
        f"unsupported registry URL scheme {scheme!r} in {url!r}: use a directory, "
        "file:///path or s3://bucket/prefix (other stores lack the atomic create and "
        "compare-and-swap the registry relies on)"
    )
