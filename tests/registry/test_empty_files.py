"""verify_dir(missing_empty_ok=True): copies that lack only their empty files pass.

KServe's storage initializer (``Storage._download_s3``) skips objects of size 0, so a
pod's copy of a version lacks its empty files. The default stays strict: the
registry's own fetch writes every file, and ``modelctl serve`` refetches on any problem.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from registry import ArtifactStore, Registry, verify_dir
from registry._checksum import EMPTY_SHA256
from registry._manifest import FileEntry, Manifest
from registry._push import version_key
from tests.registry.conftest import SAMPLE, make_source

WITH_EMPTY = {**SAMPLE, "empty.txt": b"", "tokenizer/added/.keep": b""}


def manifest_of(files: dict[str, bytes]) -> Manifest:
    return Manifest(
        name="m", version=1, created="2024-01-01T00:00:00Z", task="fixed-latency",
        framework="transformers",
        files={p: FileEntry(hashlib.sha256(d).hexdigest(), len(d)) for p, d in files.items()},
    )


def test_the_empty_hash_is_that_of_no_bytes() -> None:
    assert EMPTY_SHA256.startswith("e3b0c44298fc1c14")


def test_missing_empty_files_pass_only_when_asked(tmp_path: Path) -> None:
    manifest = manifest_of(WITH_EMPTY)
    root = make_source(tmp_path / "copy", {p: d for p, d in WITH_EMPTY.items() if d})
    assert verify_dir(root, manifest) == ["empty.txt: missing", "tokenizer/added/.keep: missing"]
    assert verify_dir(root, manifest, missing_empty_ok=True) == []


def test_present_empty_files_and_missing_non_empty_ones_are_still_checked(
    tmp_path: Path,
) -> None:
    manifest = manifest_of(WITH_EMPTY)
    root = make_source(tmp_path / "copy", {**WITH_EMPTY, "empty.txt": b"not empty"})
    (root / "config.json").unlink()
    assert verify_dir(root, manifest, missing_empty_ok=True) == [
        "config.json: missing",
        "empty.txt: size is 9 bytes, the manifest says 0",
    ]


def test_a_missing_size_0_entry_with_another_hash_is_a_problem(tmp_path: Path) -> None:
    files = {"config.json": FileEntry(hashlib.sha256(b"{}").hexdigest(), 2),
             "odd": FileEntry(hashlib.sha256(b"x").hexdigest(), 0)}
    manifest = Manifest(name="m", version=1, created="2024-01-01T00:00:00Z",
                        task="fixed-latency", framework="transformers", files=files)
    root = make_source(tmp_path / "copy", {"config.json": b"{}"})
    [problem] = verify_dir(root, manifest, missing_empty_ok=True)
    assert problem.startswith("odd: missing, and the manifest records 0 bytes with a sha256")
    # Present, the same entry fails like any other mismatch.
    (root / "odd").write_bytes(b"")
    [problem] = verify_dir(root, manifest, missing_empty_ok=True)
    assert problem.startswith("odd: sha256 mismatch")


def download_like_kserve(store: ArtifactStore, version: str, dest: Path) -> list[str]:
    """What ``Storage._download_s3`` keeps: every object it lists under the version's
    prefix except keys ending in ``/`` and objects whose listed size is 0. Returns the
    skipped files."""
    prefix = store._key(version) + "/"  # type: ignore[attr-defined]
    listing = store._call("list_objects_v2", Prefix=prefix)  # type: ignore[attr-defined]
    skipped = []
    for obj in listing.get("Contents", []):
        rel = obj["Key"].removeprefix(prefix)
        if obj["Key"].endswith("/") or obj["Size"] == 0:
            skipped.append(rel)
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        store.get_file(f"{version}/{rel}", dest / rel, lambda chunk: None)
    return sorted(skipped)


@pytest.mark.usefixtures("seaweed")
def test_an_s3_version_downloaded_as_kserve_does_verifies_leniently(
    s3_url: str, tmp_path: Path
) -> None:
    reg = Registry.open(s3_url)
    manifest = reg.push(make_source(tmp_path / "src", WITH_EMPTY), "m", "fixed-latency")
    dest = tmp_path / "mnt-models"
    dest.mkdir()
    # The registry stores empty files as zero-byte objects: exactly what KServe skips.
    skipped = download_like_kserve(reg.store, version_key("m", manifest.version), dest)
    assert skipped == ["empty.txt", "tokenizer/added/.keep"]
    assert not (dest / "tokenizer" / "added").exists()
    assert verify_dir(dest, manifest) == ["empty.txt: missing", "tokenizer/added/.keep: missing"]
    assert verify_dir(dest, manifest, missing_empty_ok=True) == []
