"""Manifests: round trips, corruption reports, and checking a local copy."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from registry import FileEntry, Manifest, ManifestError, RegistryError, read_manifest_file
from registry import verify_dir as verify_dir_public
from registry._checksum import CHUNK_BYTES, hash_file, verify_dir


def entry_for(content: bytes) -> FileEntry:
    return FileEntry(hashlib.sha256(content).hexdigest(), len(content))


FILES = {"a.bin": b"alpha" * 1000, "sub/b.txt": b"beta\n", "empty": b""}


def manifest_for(files: dict[str, bytes], **overrides: Any) -> Manifest:
    fields: dict[str, Any] = {
        "name": "demo", "version": 3, "created": "2026-11-29T10:00:00Z",
        "task": "feature-extraction", "framework": "transformers",
        "files": {rel: entry_for(c) for rel, c in files.items()},
        "parent": 2, "metadata": {"commit": "3f2a"}, "metrics": {"accuracy": 0.91},
    }
    fields.update(overrides)
    return Manifest(**fields)


def write_dir(root: Path, files: dict[str, bytes]) -> Path:
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content)
    return root


def test_round_trip_and_shape() -> None:
    m = manifest_for(FILES)
    data = m.to_dict()
    assert Manifest.from_dict(data) == m
    assert Manifest.from_json(m.to_json(), "x") == m
    assert data["files"]["a.bin"] == {"sha256": hashlib.sha256(FILES["a.bin"]).hexdigest(),
                                      "size": 5000}
    assert list(data["files"]) == sorted(FILES)
    assert data["schema"] == 1
    assert m.total_size == 5000 + 5
    json.dumps(data)  # JSON-ready


def test_manifest_is_frozen() -> None:
    m = manifest_for(FILES)
    with pytest.raises(AttributeError):
        m.version = 4  # type: ignore[misc]


def corrupt(change: Any) -> dict[str, Any]:
    data = manifest_for(FILES).to_dict()
    change(data)
    return data


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda d: d.pop("files"), "lacks files"),
        (lambda d: d.pop("name"), "lacks name"),
        (lambda d: d.update(version="3"), "bad version"),
        (lambda d: d.update(version=0), "bad version"),
        (lambda d: d.update(version=True), "bad version"),
        (lambda d: d.update(name="Bad/Name"), "invalid model name"),
        (lambda d: d.update(created="yesterday"), "bad created time"),
        (lambda d: d.update(created="2026-11-29T10:00:00"), "bad created time"),
        (lambda d: d.update(files={}), "at least one file"),
        (lambda d: d.update(files=[]), "'files' is not an object"),
        (lambda d: d["files"].update({"../etc/passwd": d["files"]["a.bin"]}), "unsafe file path"),
        (lambda d: d["files"].update({"/abs": d["files"]["a.bin"]}), "unsafe file path"),
        (lambda d: d["files"].update({"MANIFEST.json": d["files"]["a.bin"]}), "cannot list itself"),
        (lambda d: d["files"]["a.bin"].update(sha256="xyz"), "bad sha256"),
        (lambda d: d["files"]["a.bin"].update(size=-1), "bad size"),
        (lambda d: d["files"]["a.bin"].pop("size"), "want sha256 and size"),
        (lambda d: d.update(parent="two"), "bad parent"),
        (lambda d: d.update(metrics={"acc": "high"}), "bad metric"),
        (lambda d: d.update(metadata={"k": 1}), "must be a string"),
        (lambda d: d.update(schema=2), "unsupported manifest schema"),
    ],
)
def test_corrupted_manifests_are_named(change: Any, fragment: str) -> None:
    with pytest.raises(ManifestError, match=fragment) as exc:
        Manifest.from_json(json.dumps(corrupt(change)).encode(), "demo/3/MANIFEST.json")
    assert "corrupted manifest demo/3/MANIFEST.json" in str(exc.value)
    assert isinstance(exc.value, RegistryError)


def test_not_json_at_all() -> None:
    with pytest.raises(ManifestError, match="not valid JSON"):
        Manifest.from_json(b'{"name": "demo", "vers', "here")
    with pytest.raises(ManifestError, match="not a JSON object"):
        Manifest.from_json(b"[1, 2]", "here")


def test_read_manifest_file(tmp_path: Path) -> None:
    m = manifest_for(FILES)
    (tmp_path / "MANIFEST.json").write_bytes(m.to_json())
    assert read_manifest_file(tmp_path / "MANIFEST.json") == m
    with pytest.raises(RegistryError, match="no manifest at"):
        read_manifest_file(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ManifestError):
        read_manifest_file(tmp_path / "bad.json")


def test_hash_file_streams_large_files(tmp_path: Path) -> None:
    content = bytes(range(256)) * (CHUNK_BYTES // 256) * 2 + b"tail"
    path = tmp_path / "big"
    path.write_bytes(content)
    assert hash_file(path) == entry_for(content)


def test_verify_dir_accepts_an_exact_copy(tmp_path: Path) -> None:
    m = manifest_for(FILES)
    root = write_dir(tmp_path / "copy", FILES)
    (root / "MANIFEST.json").write_bytes(m.to_json())
    assert verify_dir(root, m) == []
    assert verify_dir_public is verify_dir


def test_verify_dir_names_every_problem(tmp_path: Path) -> None:
    m = manifest_for(FILES)
    root = write_dir(tmp_path / "copy", FILES)
    flipped = bytearray(FILES["a.bin"])
    flipped[1234] ^= 0x01
    (root / "a.bin").write_bytes(bytes(flipped))
    (root / "sub/b.txt").unlink()
    (root / "empty").write_bytes(b"x")
    (root / "stray.pt").write_bytes(b"extra")
    problems = verify_dir(root, m)
    assert problems == sorted(problems)
    assert len(problems) == 4
    assert any(p.startswith("a.bin: sha256 mismatch") for p in problems)
    assert "sub/b.txt: missing" in problems
    assert "empty: size is 1 bytes, the manifest says 0" in problems
    assert "stray.pt: extra file, not in the manifest" in problems


def test_verify_dir_on_a_missing_directory(tmp_path: Path) -> None:
    assert verify_dir(tmp_path / "nope", manifest_for(FILES)) == [
        f"{tmp_path / 'nope'}: not a directory"
    ]
