"""The Registry against a local directory and a real S3 server: push, resolve,
aliases, verify, fetch, storage URIs, and every bad input the issue names."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from registry import (
    CURRENT,
    AliasConflict,
    InvalidName,
    Manifest,
    ManifestError,
    NotFound,
    Registry,
    RegistryError,
    SourceError,
    StoreError,
    VerificationFailed,
    read_manifest_file,
    verify_dir,
)
from registry._checksum import Observer
from registry._local_store import LocalStore
from tests.registry.conftest import SAMPLE, make_source


@pytest.fixture
def reg(registry_url: str) -> Registry:
    return Registry.open(registry_url)


def tamper(reg: Registry, key: str, content: bytes | None) -> None:
    """Change a stored object behind the registry's back (None deletes it)."""
    root = reg.store.local_root
    if root is not None:
        path = root / key
        if path.exists():
            os.chmod(path, stat.S_IWUSR | stat.S_IRUSR)
            path.unlink()
        if content is not None:
            path.write_bytes(content)
        return
    fs = reg.store._fs  # type: ignore[attr-defined]
    full = f"{reg.url.removeprefix('s3://')}/{key}"
    if content is None:
        fs.rm(full)
    else:
        fs.pipe_file(full, content)


def test_push_and_read_back(reg: Registry, sample_src: Path) -> None:
    m = reg.push(sample_src, "demo", "feature-extraction", metadata={"commit": "3f2a"},
                 metrics={"accuracy": 0.9})
    assert (m.name, m.version, m.task, m.framework, m.parent) == (
        "demo", 1, "feature-extraction", "transformers", None)
    assert set(m.files) == set(SAMPLE)
    assert m.files["config.json"].size == len(SAMPLE["config.json"])
    assert m.created.endswith("Z")
    assert dict(m.metadata) == {"commit": "3f2a"} and dict(m.metrics) == {"accuracy": 0.9}
    m2 = reg.push(sample_src, "demo", "feature-extraction", parent=1, alias="stable")
    assert m2.version == 2 and m2.parent == 1
    assert reg.versions("demo") == [1, 2]
    assert reg.models() == ["demo"]
    assert reg.aliases("demo") == {"stable": 2}
    assert reg.resolve("demo", "latest") == 2
    assert reg.resolve("demo", "stable") == 2
    assert reg.resolve("demo", "1") == 1 and reg.resolve("demo", 1) == 1
    assert reg.manifest("demo", 1) == m
    assert reg.verify("demo", "latest") == []


def test_versions_are_immutable_and_numbered(reg: Registry, sample_src: Path) -> None:
    first = reg.push(sample_src, "demo", "fixed-latency")
    (sample_src / "config.json").write_bytes(b'{"hidden_size": 16}\n')
    second = reg.push(sample_src, "demo", "fixed-latency")
    assert (first.version, second.version) == (1, 2)
    assert reg.manifest("demo", 1).files["config.json"] == first.files["config.json"]
    assert first.files["config.json"] != second.files["config.json"]
    assert reg.verify("demo", 1) == [] and reg.verify("demo", 2) == []


def test_a_version_without_manifest_does_not_exist(reg: Registry, sample_src: Path) -> None:
    reg.push(sample_src, "demo", "fixed-latency")
    # What a push that died before its manifest leaves: a claim and some files.
    reg.store.create_exclusive("demo/_claims/2", b"{}")
    reg.store.create_exclusive("demo/2/config.json", b"{}")
    assert reg.versions("demo") == [1]
    assert reg.resolve("demo", "latest") == 1
    with pytest.raises(NotFound, match="model demo has no version 2"):
        reg.resolve("demo", 2)
    with pytest.raises(NotFound):
        reg.set_alias("demo", "stable", 2)
    assert reg.push(sample_src, "demo", "fixed-latency").version == 3  # 2 stays claimed


def test_aliases_compare_and_swap(reg: Registry, sample_src: Path) -> None:
    for _ in range(3):
        reg.push(sample_src, "demo", "text-generation")
    assert reg.set_alias("demo", "stable", 1, expected=None) is None
    assert reg.set_alias("demo", "canary", 2) is None
    assert reg.set_alias("demo", "stable", 2, expected=1) == 1
    with pytest.raises(AliasConflict, match="alias 'stable' of demo is version 2, expected "
                                            "version 1"):
        reg.set_alias("demo", "stable", 3, expected=1)
    with pytest.raises(AliasConflict, match="expected unset"):
        reg.set_alias("demo", "stable", 3, expected=None)
    assert reg.set_alias("demo", "stable", 3, expected=CURRENT) == 2
    with pytest.raises(AliasConflict):
        reg.remove_alias("demo", "canary", expected=1)
    assert reg.remove_alias("demo", "canary", expected=2) == 2
    with pytest.raises(NotFound, match="no alias 'canary'"):
        reg.remove_alias("demo", "canary")
    assert reg.aliases("demo") == {"stable": 3}
    with pytest.raises(NotFound, match="has no alias 'canary' \\(its aliases: stable\\)"):
        reg.resolve("demo", "canary")


def test_bad_alias_inputs(reg: Registry, sample_src: Path) -> None:
    reg.push(sample_src, "demo", "text-generation")
    with pytest.raises(NotFound, match="model demo has no version 7"):
        reg.set_alias("demo", "stable", 7)
    with pytest.raises(InvalidName, match="reserved"):
        reg.set_alias("demo", "latest", 1)
    with pytest.raises(InvalidName, match="upper-case"):
        reg.set_alias("demo", "Stable", 1)
    with pytest.raises(InvalidName, match=re.escape("'..'")):
        reg.push(sample_src, "demo", "text-generation", alias="a..b")
    assert reg.versions("demo") == [1]  # the bad alias stopped the push before it began


def test_unknown_refs(reg: Registry, sample_src: Path) -> None:
    with pytest.raises(NotFound, match="no model 'ghost' in the registry"):
        reg.resolve("ghost", "latest")
    reg.push(sample_src, "demo", "text-generation")
    with pytest.raises(NotFound, match="model demo has no version 9"):
        reg.manifest("demo", 9)
    with pytest.raises(NotFound, match="has no alias 'stable'"):
        reg.fetch("demo", "stable", "/nonexistent/never-created")
    with pytest.raises(InvalidName):
        reg.resolve("demo", "Bad Ref")
    with pytest.raises(NotFound):
        reg.push(sample_src, "demo", "text-generation", parent=5)


@pytest.mark.parametrize("name", ["org/model", "..", "my model", "Model"])
def test_bad_model_names_are_refused(reg: Registry, sample_src: Path, name: str) -> None:
    with pytest.raises(InvalidName, match="invalid model name"):
        reg.push(sample_src, name, "text-generation")
    assert reg.models() == []


def test_bad_sources(reg: Registry, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="does not exist"):
        reg.push(tmp_path / "nope", "demo", "fixed-latency")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "sub").mkdir()
    with pytest.raises(SourceError, match="is empty"):
        reg.push(tmp_path / "empty", "demo", "fixed-latency")
    pulled = make_source(tmp_path / "pulled", {"a.bin": b"a", "MANIFEST.json": b"{}"})
    with pytest.raises(SourceError, match=re.escape("contains MANIFEST.json")):
        reg.push(pulled, "demo", "fixed-latency")
    outside = make_source(tmp_path / "outside", {"secret.txt": b"s"})
    escaping = make_source(tmp_path / "escaping", {"a.bin": b"a"})
    (escaping / "link.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(SourceError, match=re.escape("symlink link.txt points outside")):
        reg.push(escaping, "demo", "fixed-latency")
    dir_link = make_source(tmp_path / "dirlink", {"a.bin": b"a"})
    (dir_link / "up").symlink_to(tmp_path)
    with pytest.raises(SourceError, match="symlink up points outside"):
        reg.push(dir_link, "demo", "fixed-latency")
    with pytest.raises(InvalidName, match="unknown task"):
        reg.push(escaping, "demo", "translation")
    with pytest.raises(InvalidName, match="metadata key"):
        reg.push(outside, "demo", "fixed-latency", metadata={"bad key": "v"})
    assert reg.models() == []


def test_symlinks_inside_the_source_are_copied(reg: Registry, tmp_path: Path) -> None:
    src = make_source(tmp_path / "src", {"weights/model.bin": b"w" * 100})
    (src / "model.bin").symlink_to(src / "weights" / "model.bin")
    m = reg.push(src, "demo", "fixed-latency")
    assert m.files["model.bin"] == m.files["weights/model.bin"]


def test_verify_reports_each_problem_by_name(reg: Registry, sample_src: Path) -> None:
    m = reg.push(sample_src, "demo", "feature-extraction")
    flipped = bytearray(SAMPLE["model.safetensors"])
    flipped[5000] ^= 0xFF
    tamper(reg, "demo/1/model.safetensors", bytes(flipped))
    tamper(reg, "demo/1/tokenizer/vocab.txt", None)
    tamper(reg, "demo/1/extra.bin", b"sneaky")
    problems = reg.verify("demo", 1)
    assert len(problems) == 3, problems
    assert problems[0] == "extra.bin: extra file, not in the manifest"
    assert problems[1].startswith("model.safetensors: sha256 mismatch (manifest "
                                  f"{m.files['model.safetensors'].sha256[:12]}")
    assert problems[2] == "tokenizer/vocab.txt: missing"


def test_fetch_verifies_and_lands_atomically(reg: Registry, sample_src: Path,
                                             tmp_path: Path) -> None:
    m = reg.push(sample_src, "demo", "feature-extraction", alias="stable")
    dest = tmp_path / "models" / "demo"
    assert reg.fetch("demo", "stable", dest) == m
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == (
        sorted([*SAMPLE, "MANIFEST.json"]))
    assert read_manifest_file(dest / "MANIFEST.json") == m
    assert verify_dir(dest, m) == []
    # An earlier fetch is replaced by a new one; leftovers do not survive.
    (dest / "stale.txt").write_text("old")
    reg.fetch("demo", 1, dest)
    assert not (dest / "stale.txt").exists()
    assert [p.name for p in dest.parent.iterdir()] == ["demo"]  # no temp siblings


def test_fetch_of_a_tampered_version_leaves_nothing(reg: Registry, sample_src: Path,
                                                    tmp_path: Path) -> None:
    reg.push(sample_src, "demo", "feature-extraction")
    tamper(reg, "demo/1/config.json", b'{"hidden_size": 9}\n')
    dest = tmp_path / "out" / "demo"
    with pytest.raises(VerificationFailed, match=re.escape("config.json: sha256 mismatch")) as exc:
        reg.fetch("demo", 1, dest)
    assert exc.value.problems == [p for p in exc.value.problems if "config.json" in p]
    assert not dest.exists()
    assert list((tmp_path / "out").iterdir()) == []


def test_fetch_refuses_to_clobber(reg: Registry, sample_src: Path, tmp_path: Path) -> None:
    reg.push(sample_src, "demo", "feature-extraction")
    precious = make_source(tmp_path / "home", {"thesis.tex": b"years of work"})
    with pytest.raises(RegistryError, match=re.escape("not empty and holds no MANIFEST.json")):
        reg.fetch("demo", 1, precious)
    assert (precious / "thesis.tex").read_bytes() == b"years of work"
    (tmp_path / "empty").mkdir()
    reg.fetch("demo", 1, tmp_path / "empty")
    assert (tmp_path / "empty" / "MANIFEST.json").exists()


def test_corrupted_manifest_is_a_clear_error(reg: Registry, sample_src: Path) -> None:
    reg.push(sample_src, "demo", "feature-extraction")
    tamper(reg, "demo/1/MANIFEST.json", b'{"name": "demo", "version": 1, "files": ')
    with pytest.raises(ManifestError, match=r"corrupted manifest .*demo/1/MANIFEST\.json: not "
                                            r"valid JSON"):
        reg.manifest("demo", 1)
    with pytest.raises(ManifestError):
        reg.verify("demo", 1)
    good = reg.push(sample_src, "demo", "feature-extraction")
    tamper(reg, "demo/1/MANIFEST.json", good.to_json())  # a manifest of another version
    with pytest.raises(RegistryError, match="it describes demo version 2"):
        reg.manifest("demo", 1)
    tamper(reg, "demo/aliases.json", b"[]")
    with pytest.raises(ManifestError, match="corrupted alias file"):
        reg.aliases("demo")


def test_storage_uri(reg: Registry, registry_url: str, sample_src: Path) -> None:
    reg.push(sample_src, "demo", "feature-extraction", alias="stable")
    uri = reg.storage_uri("demo", "stable")
    if registry_url.startswith("s3://"):
        assert uri == f"{registry_url}/demo/1/"
        with pytest.raises(InvalidName, match="--pvc needs a registry on a filesystem"):
            reg.storage_uri("demo", "stable", pvc="models")
    else:
        assert uri == Path(registry_url, "demo", "1").resolve().as_uri()
        assert reg.storage_uri("demo", 1, pvc="models") == "pvc://models/demo/1"
        assert reg.storage_uri("demo", 1, pvc="models/registry") == (
            "pvc://models/registry/demo/1")
        with pytest.raises(InvalidName, match="invalid PVC"):
            reg.storage_uri("demo", 1, pvc="Bad_PVC")


def test_local_files_are_read_only(local_url: str, sample_src: Path) -> None:
    reg = Registry.open(local_url)
    reg.push(sample_src, "demo", "feature-extraction")
    stored = Path(local_url) / "demo" / "1" / "config.json"
    assert not os.access(stored, os.W_OK) or os.geteuid() == 0
    assert stat.S_IMODE(stored.stat().st_mode) == 0o444


def test_open_uses_env_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MODELCTL_REGISTRY", str(tmp_path / "from-env"))
    assert Registry.open().url == str(tmp_path / "from-env")
    monkeypatch.delenv("MODELCTL_REGISTRY")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert Registry.open().url == str(tmp_path / "home" / ".modelctl" / "registry")
    assert Registry.open(str(tmp_path / "explicit")).url == str(tmp_path / "explicit")


def test_manifest_in_store_is_canonical_json(reg: Registry, sample_src: Path) -> None:
    m = reg.push(sample_src, "demo", "feature-extraction")
    raw = reg.store.read_bytes("demo/1/MANIFEST.json")
    assert raw is not None
    assert Manifest.from_dict(json.loads(raw)) == m


class FailingStore(LocalStore):
    """The real local store with one injected fault: uploading ``fail_on`` fails
    after writing part of it (as a full disk or a dropped connection would)."""

    def __init__(self, root: Path, fail_on: str) -> None:
        super().__init__(root)
        self.fail_on = fail_on

    def put_file(self, local: Path, key: str, observe: Observer) -> None:
        if key.endswith(self.fail_on):
            (self.local_root / key).parent.mkdir(parents=True, exist_ok=True)
            (self.local_root / key).write_bytes(b"partial")
            raise StoreError("disk full (injected)")
        super().put_file(local, key, observe)


def test_a_failed_push_leaves_nothing_and_frees_its_number(tmp_path: Path,
                                                           sample_src: Path) -> None:
    root = tmp_path / "reg"
    broken = Registry(FailingStore(root, "vocab.txt"))
    with pytest.raises(StoreError, match="injected"):
        broken.push(sample_src, "demo", "feature-extraction", alias="stable")
    assert broken.versions("demo") == []
    assert not (root / "demo" / "1").exists()
    assert broken.store.list_dir("demo/_claims") == []
    assert broken.aliases("demo") == {}
    assert Registry.open(str(root)).push(sample_src, "demo", "feature-extraction").version == 1


class AmnesicStore(LocalStore):
    """A store that claims every exclusive create succeeded (what an S3 server
    that ignores If-None-Match does)."""

    def create_exclusive(self, key: str, data: bytes) -> bool:
        path = self.local_root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return True


def test_a_store_that_ignores_exclusive_create_is_caught(tmp_path: Path,
                                                         sample_src: Path) -> None:
    reg = Registry(AmnesicStore(tmp_path / "reg"))
    with pytest.raises(StoreError, match="ignored an exclusive create"):
        reg.push(sample_src, "demo", "feature-extraction")
    assert reg.versions("demo") == []


def test_verify_dir_accepts_only_the_extra_files_it_is_told_to(
        reg: Registry, sample_src: Path, tmp_path: Path) -> None:
    from registry import verify_dir

    m = reg.push(sample_src, "demo", "feature-extraction")
    copy = tmp_path / "copy"
    reg.fetch("demo", 1, copy)
    (copy / "SUCCESS.0f").write_text("{}")  # a downloader's marker
    (copy / "other.bin").write_bytes(b"x")
    assert verify_dir(copy, m) == ["SUCCESS.0f: extra file, not in the manifest",
                                   "other.bin: extra file, not in the manifest"]
    assert verify_dir(copy, m, extra_ok=lambda rel: rel.startswith("SUCCESS.")) == [
        "other.bin: extra file, not in the manifest"]
