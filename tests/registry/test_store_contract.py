"""One contract for every ``ArtifactStore`` adapter, run against each real store."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from registry import ArtifactStore, StoreError, open_store
from registry._checksum import CHUNK_BYTES, Digest
from registry._local_store import LocalStore
from registry._s3_store import S3Store


@pytest.fixture
def store(registry_url: str) -> ArtifactStore:
    return open_store(registry_url)


def test_factory_picks_the_adapter(local_url: str, s3_url: str, tmp_path: Path) -> None:
    assert isinstance(open_store(local_url), LocalStore)
    assert isinstance(open_store((tmp_path / "x").as_uri()), LocalStore)
    assert isinstance(open_store(s3_url), S3Store)
    with pytest.raises(StoreError, match="unsupported registry URL scheme 'gs'"):
        open_store("gs://bucket/models")
    with pytest.raises(StoreError, match="no bucket"):
        open_store("s3:///prefix")
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="not a directory"):
        open_store(str(tmp_path / "file"))


def test_create_exclusive_is_create_once(store: ArtifactStore) -> None:
    assert store.read_bytes("m/_claims/1") is None
    assert store.create_exclusive("m/_claims/1", b"first")
    assert not store.create_exclusive("m/_claims/1", b"second")
    assert store.read_bytes("m/_claims/1") == b"first"
    assert store.exists("m/_claims/1")
    assert not store.exists("m/_claims/2")


def test_write_if_is_compare_and_swap(store: ArtifactStore) -> None:
    data, token = store.read_with_token("m/aliases.json")
    assert (data, token) == (None, None)
    assert store.write_if("m/aliases.json", b"v1", None)
    assert not store.write_if("m/aliases.json", b"again", None)  # no longer absent
    data, token = store.read_with_token("m/aliases.json")
    assert data == b"v1"
    assert store.write_if("m/aliases.json", b"v2", token)
    assert not store.write_if("m/aliases.json", b"stale", token)  # token is spent
    assert store.read_bytes("m/aliases.json") == b"v2"


def test_listing(store: ArtifactStore) -> None:
    assert store.list_dir("m") == []
    assert store.list_files("m/1") == []
    store.create_exclusive("m/1/a.txt", b"a")
    store.create_exclusive("m/1/sub/b.txt", b"b")
    store.create_exclusive("m/10/c.txt", b"c")
    store.create_exclusive("m/aliases.json", b"{}")
    assert store.list_dir("m") == ["1", "10", "aliases.json"]
    assert "m" in store.list_dir("")
    assert store.list_files("m/1") == ["a.txt", "sub/b.txt"]  # not m/10's files
    store.delete_tree("m/1")
    assert store.list_files("m/1") == []
    assert store.list_files("m/10") == ["c.txt"]
    store.delete_tree("m/nothing-here")  # absent is fine


def test_streaming_put_get_scan(store: ArtifactStore, tmp_path: Path) -> None:
    content = bytes(range(256)) * (CHUNK_BYTES // 256) * 2 + b"tail-bytes"
    src = tmp_path / "big.bin"
    src.write_bytes(content)
    sizes: list[int] = []
    digest = Digest()

    def observe(chunk: memoryview) -> None:
        sizes.append(len(chunk))
        digest.update(chunk)

    store.put_file(src, "m/1/big.bin", observe)
    assert digest.hexdigest() == hashlib.sha256(content).hexdigest()
    assert max(sizes) <= CHUNK_BYTES and len(sizes) >= 3  # streamed, never whole

    back = tmp_path / "back.bin"
    got = Digest()
    store.get_file("m/1/big.bin", back, got.update)
    assert back.read_bytes() == content
    assert got.hexdigest() == digest.hexdigest()

    scanned: list[int] = []
    store.scan("m/1/big.bin", lambda c: scanned.append(len(c)))
    assert sum(scanned) == len(content) and max(scanned) <= CHUNK_BYTES

    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    store.put_file(empty, "m/1/empty", lambda c: None)
    store.get_file("m/1/empty", tmp_path / "empty-back", lambda c: None)
    assert (tmp_path / "empty-back").read_bytes() == b""


def test_missing_objects_raise_file_not_found(store: ArtifactStore, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        store.get_file("m/1/nope", tmp_path / "x", lambda c: None)
    with pytest.raises(FileNotFoundError):
        store.scan("m/1/nope", lambda c: None)


def test_uri(store: ArtifactStore, registry_url: str) -> None:
    uri = store.uri("demo/3")
    if registry_url.startswith("s3://"):
        assert uri == f"{registry_url}/demo/3/"
    else:
        assert uri == Path(registry_url, "demo", "3").as_uri()
