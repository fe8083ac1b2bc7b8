"""Model registry: immutable, checksummed model versions in a directory or an S3 bucket.

    from registry import Registry, parse_ref

    reg = Registry.open()                      # $MODELCTL_REGISTRY or ~/.modelctl/registry
    name, ref = parse_ref("demo-embed@stable")
    manifest = reg.fetch(name, ref, "/mnt/models")
"""

from registry._aliases import CURRENT, Expect
from registry._checksum import verify_dir
from registry._errors import (
    AliasConflict,
    InvalidName,
    ManifestError,
    NotFound,
    RegistryError,
    SourceError,
    StoreError,
    VerificationFailed,
)
from registry._manifest import FileEntry, Manifest, read_manifest_file
from registry._names import LATEST, TASKS, parse_ref
from registry._open import open_store
from registry._progress import NO_PROGRESS, Progress
from registry._registry import Registry
from registry._store import ArtifactStore

__all__ = [
    "CURRENT",
    "LATEST",
    "NO_PROGRESS",
    "TASKS",
    "AliasConflict",
    "ArtifactStore",
    "Expect",
    "FileEntry",
    "InvalidName",
    "Manifest",
    "ManifestError",
    "NotFound",
    "Progress",
    "Registry",
    "RegistryError",
    "SourceError",
    "StoreError",
    "VerificationFailed",
    "open_store",
    "parse_ref",
    "read_manifest_file",
    "verify_dir",
]
