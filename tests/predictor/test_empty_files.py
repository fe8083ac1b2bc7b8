"""Versions holding empty files serve although KServe's storage initializer skips them.

``Storage._download_s3`` leaves out every zero-byte object, so the pod's copy of such a
version lacks those files. The tests fetch a version from the registry and delete its
empty files (and a directory that held nothing else), as that download leaves it.
Running as root, a read-only model directory cannot be simulated with chmod; the tests
check the behaviour that matters instead: the model directory is never written to.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from predictor._artifact import build_overlay, missing_empty_files
from tests.support import ManagedProcess, free_port, wait_http_ok

EMPTY = ("empty.txt", "assets/.keep")  # assets/ holds nothing else


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def push_with_empty_files(registry_dir: Path, name: str, task: str, src: Path) -> int:
    from registry import Registry

    for rel in EMPTY:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(b"")
    return Registry.open(str(registry_dir)).push(src, name, task).version


def fixed_latency_with_empty_files(registry_dir: Path, tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "task.json").write_text('{"latency_ms": 1, "max_batch_size": 4}')
    version = push_with_empty_files(registry_dir, "with-empty", "fixed-latency", src)
    return fetch_as_kserve_does(registry_dir, "with-empty", version, tmp_path / "m")


def fetch_as_kserve_does(registry_dir: Path, name: str, version: int, dest: Path) -> Path:
    """The version as KServe's s3 download leaves it: no empty files, no empty dirs."""
    from registry import Registry

    Registry.open(str(registry_dir)).fetch(name, version, dest)
    for rel in EMPTY:
        (dest / rel).unlink()
    (dest / "assets").rmdir()
    return dest


def run_predictor(name: str, model_dir: Path, log_dir: Path) -> tuple[ManagedProcess, str]:
    """A predictor on ``model_dir``, ready; and its URL."""
    port = free_port()
    proc = ManagedProcess(
        f"{name}-{port}",
        [sys.executable, "-m", "predictor", "--model_name", name, "--model_dir", str(model_dir),
         "--http_host", "127.0.0.1", "--http_port", str(port), "--enable_grpc", "false"],
        log_dir=log_dir)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http_ok(f"{url}/v2/health/ready", timeout_s=120, proc=proc)
    except BaseException:
        proc.stop()
        raise
    return proc, url


def test_a_version_whose_empty_files_were_skipped_serves_without_touching_its_dir(
    registry_dir: Path, tmp_path: Path
) -> None:
    model_dir = fixed_latency_with_empty_files(registry_dir, tmp_path)
    before = snapshot(model_dir)
    proc, url = run_predictor("with-empty", model_dir, tmp_path)
    try:
        r = httpx.post(f"{url}/v1/models/with-empty:predict", json={"instances": ["x"]},
                       timeout=30)
        assert r.status_code == 200, r.text
        log = proc.output_tail(20000)
        assert "2 empty file(s) absent" in log and "assets/.keep, empty.txt" in log
        overlay = Path(re.findall(r"loading from (\S+)", log)[-1])
        assert (overlay / "assets" / ".keep").read_bytes() == b""
        assert (overlay / "task.json").is_symlink()
        proc.signal(signal.SIGTERM)
        assert proc.wait(timeout_s=30) == 0
    finally:
        proc.stop()
    assert snapshot(model_dir) == before  # nothing written where KServe mounts read-only
    assert not (model_dir / "empty.txt").exists() and not (model_dir / "assets").exists()
    assert not overlay.exists()  # removed on the way out


def test_a_real_transformers_model_loads_through_the_overlay(
    registry_dir: Path, tmp_path: Path
) -> None:
    from registry import Registry

    src = tmp_path / "src"
    Registry.open(str(registry_dir)).fetch("demo-embed", "stable", src)
    (src / "MANIFEST.json").unlink()
    version = push_with_empty_files(registry_dir, "embed-empty", "feature-extraction", src)
    model_dir = fetch_as_kserve_does(registry_dir, "embed-empty", version, tmp_path / "m")
    proc, url = run_predictor("embed-empty", model_dir, tmp_path)
    try:
        r = httpx.post(f"{url}/v1/models/embed-empty:predict",
                       json={"instances": ["hello world"]}, timeout=30)
        assert r.status_code == 200, r.text
        assert len(r.json()["predictions"][0]) == 384
    finally:
        proc.stop()


@pytest.mark.parametrize("damage", ["missing non-empty", "empty file now not empty"])
def test_other_damage_is_still_refused_naming_the_file(
    registry_dir: Path, tmp_path: Path, damage: str
) -> None:
    model_dir = fixed_latency_with_empty_files(registry_dir, tmp_path)
    if damage == "missing non-empty":
        (model_dir / "task.json").unlink()
        expected = "task.json: missing"
    else:
        (model_dir / "empty.txt").write_bytes(b"surprise")
        expected = "empty.txt: size is 8 bytes, the manifest says 0"
    done = subprocess.run(
        [sys.executable, "-m", "predictor", "--model_name", "with-empty", "--model_dir",
         str(model_dir), "--http_host", "127.0.0.1", "--enable_grpc", "false"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "refusing to load" in done.stderr and expected in done.stderr, done.stderr


def test_the_overlay_reads_like_the_directory_plus_the_empty_files(tmp_path: Path) -> None:
    source = tmp_path / "source"
    for rel, data in {"a.txt": b"a", "sub/b.bin": b"bb", "sub/deeper/c": b"c"}.items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_bytes(data)
    (source / "dangling").symlink_to(tmp_path / "nowhere")
    sizes = {"a.txt": 1, "sub/b.bin": 2, "sub/deeper/c": 1, "sub/empty": 0,
             "new/dir/empty": 0, "dangling": 0, "a-present-empty": 0}
    (source / "a-present-empty").write_bytes(b"")
    before = snapshot(source)
    missing = missing_empty_files(source, sizes)
    assert missing == ["dangling", "new/dir/empty", "sub/empty"]
    overlay = build_overlay(source, missing)
    try:
        assert snapshot(overlay) == {**before, "dangling": b"", "new/dir/empty": b"",
                                     "sub/empty": b""}
        # Real directories, so rglob (the handlers' weight checks) sees every file.
        assert not (overlay / "sub").is_symlink()
        assert sorted(p.name for p in overlay.rglob("*") if p.is_file()) == sorted(
            ["a.txt", "b.bin", "c", "empty", "empty", "dangling", "a-present-empty"])
    finally:
        shutil.rmtree(overlay)
    assert snapshot(source) == before
