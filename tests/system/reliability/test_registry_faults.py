"""Promise: a corrupted byte, a truncated file, a missing or garbled manifest, an S3 server
killed in the middle of a push or of a pull: nothing corrupt is ever loaded or aliased,
and a retried push (or pull) succeeds.

The local faults are made by hand in a real registry directory; the S3 faults kill a
real SeaweedFS (by PID, SIGKILL) while a real ``modelctl registry push`` or ``pull``
child process is moving a large file, then start it again on the same data and ports.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from registry import ManifestError, NotFound, Registry, VerificationFailed, verify_dir
from tests.support import ManagedProcess, wait_for
from tests.support.seaweed import SeaweedS3
from tests.system.reliability._support import ROOT, add, record, scaled

pytestmark = pytest.mark.soak

MODEL = "faulty"
BIG_MIB = 64  # large enough that the transfer is under way when the server dies


def make_source(root: Path, *, big_mib: int = 0) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "task.json").write_text(json.dumps({"latency_ms": 1}))
    block = os.urandom(1 << 20)
    with open(root / "model.safetensors", "wb") as f:
        for _ in range(max(1, big_mib)):
            f.write(block)
    return root


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".fetch-" in p.name or ".old-" in p.name)


def cli(*args: str, env: dict[str, str] | None = None,
        timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """The real ``modelctl`` in a child process."""
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd=ROOT, env={**os.environ, **(env or {})})


def assert_one_line_error(done: subprocess.CompletedProcess[str], *, says: str = "",
                          progress_lines: int = 0) -> None:
    """Exit 2 and one ``error:`` line (after ``progress_lines`` of progress), no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == progress_lines + 1 and lines[-1].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr and says in lines[-1], done.stderr


# -- local faults -------------------------------------------------------------------------
@pytest.fixture
def local(tmp_path: Path) -> tuple[Registry, Path]:
    root = tmp_path / "registry"
    return Registry.open(str(root)), root


def test_corrupt_truncated_and_unmanifested_versions_are_never_served(
    local: tuple[Registry, Path], tmp_path: Path
) -> None:
    reg, root = local
    src = make_source(tmp_path / "src", big_mib=2)
    versions = [reg.push(src, MODEL, "fixed-latency").version for _ in range(5)]
    reg.set_alias(MODEL, "stable", versions[0])
    stored = root / MODEL

    # 1. One byte flipped in the middle of the weights (same size, different hash).
    weights = stored / "1" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    # 2. Weights cut short.
    with open(stored / "2" / "model.safetensors", "r+b") as f:
        f.truncate(1000)
    # 3. The manifest gone (a push that died before its last write looks like this).
    (stored / "3" / "MANIFEST.json").unlink()
    # 4. The manifest garbled.
    (stored / "4" / "MANIFEST.json").write_bytes(b'{"name": "faulty", "vers')

    assert reg.verify(MODEL, 1) and "sha256 mismatch" in reg.verify(MODEL, 1)[0]
    assert "size is 1000 bytes" in reg.verify(MODEL, 2)[0]
    assert 3 not in reg.versions(MODEL)  # invisible: no manifest, no version
    expected = [(1, VerificationFailed, "model.safetensors: sha256 mismatch"),
                (2, VerificationFailed, "model.safetensors: size is 1000 bytes"),
                (3, NotFound, "has no version 3"),
                (4, ManifestError, "MANIFEST.json")]
    for version, error, says in expected:
        dest = tmp_path / f"pulled-{version}"
        with pytest.raises(error, match=says):
            reg.fetch(MODEL, version, dest)
        assert not dest.exists() and leftovers(tmp_path) == []
        done = cli("registry", "pull", f"{MODEL}@{version}", str(dest), "--registry", str(root))
        assert_one_line_error(done, says=says.split(":")[0])
        assert not dest.exists() and leftovers(tmp_path) == []
        if version in (1, 3):
            served = cli("serve", f"{MODEL}@{version}", "--registry", str(root),
                         "--cache-dir", str(tmp_path / "cache"), timeout_s=60)
            # Refused before any predictor starts (after a "fetching ..." line if it fetched).
            assert_one_line_error(served, progress_lines=int(version == 1))
        add("registry.local_faults")
    with pytest.raises(NotFound):
        reg.set_alias(MODEL, "canary", 3)  # what has no manifest cannot be aliased
    assert reg.aliases(MODEL) == {"stable": 1}
    reg.fetch(MODEL, 5, tmp_path / "good")  # the intact version is untouched
    assert verify_dir(tmp_path / "good", reg.manifest(MODEL, 5)) == []

    # 5. A garbled alias file is an error naming it, never a silent default.
    (stored / "aliases.json").write_text("{]")
    with pytest.raises(ManifestError, match="corrupted alias file"):
        reg.resolve(MODEL, "stable")
    assert_one_line_error(cli("registry", "pull", f"{MODEL}@stable", str(tmp_path / "x"),
                              "--registry", str(root)), says="corrupted alias file")


def test_the_predictor_refuses_a_local_copy_that_changed(
    local: tuple[Registry, Path], tmp_path: Path
) -> None:
    reg, _ = local
    version = reg.push(make_source(tmp_path / "src"), MODEL, "fixed-latency").version
    for fault in ("flip", "no-manifest", "extra-file"):
        model_dir = tmp_path / f"copy-{fault}"
        reg.fetch(MODEL, version, model_dir)
        weights = model_dir / "model.safetensors"
        if fault == "flip":
            data = bytearray(weights.read_bytes())
            data[-1] ^= 0xFF
            weights.write_bytes(bytes(data))
        elif fault == "no-manifest":
            (model_dir / "MANIFEST.json").unlink()
        else:
            (model_dir / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")
        done = subprocess.run(
            [sys.executable, "-m", "predictor", "--model_name", MODEL, "--model_dir",
             str(model_dir), "--http_host", "127.0.0.1", "--enable_grpc", "false"],
            capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert done.returncode == 2, (fault, done.stderr[-2000:])
        assert "Traceback" not in done.stderr, done.stderr[-2000:]
        assert ("refusing to load" in done.stderr or "no MANIFEST.json" in done.stderr), (
            fault, done.stderr[-500:])
        add("registry.local_faults")


# -- S3 faults ----------------------------------------------------------------------------
def kill(server: SeaweedS3) -> None:
    """SIGKILL the server (its process group, by PID)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait(timeout_s=10)
    server.process.stop()


def restart(server: SeaweedS3) -> None:
    """Start the killed server again on the same data, ports and keys."""
    for sock in [*server.grpc_sockets, *server.socket_dir.glob("*")]:
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()
    log_dir = server.process.log_path.parent
    # A restarted master waits out a Raft election (10 s by default) before serving.
    argv = [a for a in server.process.argv if not a.startswith("-master.electionTimeout")]
    server.process = ManagedProcess("seaweedfs-again", [*argv, "-master.electionTimeout=1s"],
                                    log_dir=log_dir, cwd=log_dir)
    server._fs = None

    def answers() -> bool:
        if server.process.poll() is not None:
            raise RuntimeError(server.process.output_tail())
        fs = server.filesystem()
        # A listing comes from the filer alone; reading a byte of every stored object also
        # needs the volume server back and known to the master again (until then reads
        # fail with InternalError, which once failed the retry after this restart).
        for path in fs.find("models"):
            fs.cat_file(path, start=0, end=1)
        return True

    wait_for(answers, timeout_s=60, interval_s=0.2, what="SeaweedFS to come back")


def kill_when(server: SeaweedS3, child: subprocess.Popen[str], ready: Any,
              what: str) -> None:
    """Wait until ``ready()`` (the transfer is under way), then kill the server."""

    def check() -> bool:
        if child.poll() is not None:
            raise AssertionError(f"the transfer ended before the kill ({what}): "
                                 f"{child.communicate()}")
        return bool(ready())

    wait_for(check, timeout_s=60, interval_s=0.01, what=what)
    kill(server)


@pytest.fixture
def s3(seaweed: SeaweedS3) -> SeaweedS3:
    return seaweed


@pytest.fixture
def s3_env(s3: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The AWS variables that reach this SeaweedFS, set for the test and its children."""
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    return s3.env()


def test_s3_killed_mid_push_leaves_nothing_and_a_retry_succeeds(
    s3: SeaweedS3, s3_env: dict[str, str], tmp_path: Path
) -> None:
    url = "s3://models/mid-push"
    env = s3_env
    cycles = scaled(1, 5)
    src = make_source(tmp_path / "big", big_mib=BIG_MIB)
    for _ in range(cycles):
        fs = s3.filesystem()
        args = [sys.executable, "-m", "cli", "registry", "push", str(src), "--model", MODEL,
                "--task", "fixed-latency", "--alias", "stable", "--registry", url]
        child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, cwd=ROOT, env={**os.environ, **env})
        try:
            kill_when(s3, child, lambda fs=fs: fs.call_s3(
                "list_multipart_uploads", Bucket="models").get("Uploads"),
                "a multipart upload under way")
            restart(s3)  # while the child still retries, as a real S3 blip would go
            out, err = child.communicate(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        reg = Registry.open(url)
        if child.returncode == 0:  # its retries rode out the restart: a whole version
            add("registry.s3_pushes_that_rode_out_the_kill")
            assert reg.aliases(MODEL) == {"stable": int(out.strip())}
        else:
            assert child.returncode == 2 and err.startswith("error: "), (out, err)
            assert err.count("\n") == 1 and "Traceback" not in err, err
            assert s3.secret_key not in err
        before = reg.versions(MODEL)
        assert reg.aliases(MODEL).get("stable") in (before[-1] if before else None, None)
        # Nothing half-pushed is visible: every version listed verifies.
        for version in before:
            assert reg.verify(MODEL, version) == []
        done = cli("registry", "push", str(src), "--model", MODEL, "--task", "fixed-latency",
                   "--alias", "stable", "--registry", url, env=env)
        assert done.returncode == 0, done.stderr
        version = int(done.stdout.strip())
        assert reg.versions(MODEL) == [*before, version]
        assert reg.aliases(MODEL) == {"stable": version}
        assert reg.verify(MODEL, version) == []
        add("registry.s3_kills_mid_push")
    record("registry.s3_big_file_mib", BIG_MIB)


def test_s3_killed_mid_pull_leaves_nothing_and_a_retry_succeeds(
    s3: SeaweedS3, s3_env: dict[str, str], tmp_path: Path
) -> None:
    url = "s3://models/mid-pull"
    env = s3_env
    reg = Registry.open(url)
    src = make_source(tmp_path / "big", big_mib=BIG_MIB)
    done = cli("registry", "push", str(src), "--model", MODEL, "--task", "fixed-latency",
               "--alias", "stable", "--registry", url, env=env)
    assert done.returncode == 0, done.stderr
    for cycle in range(scaled(1, 5)):
        dest = tmp_path / f"pulled-{cycle}"
        args = [sys.executable, "-m", "cli", "registry", "pull", f"{MODEL}@stable", str(dest),
                "--registry", url]
        child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, cwd=ROOT, env={**os.environ, **env})

        def partly_downloaded(dest: Path = dest) -> bool:
            return any(p.stat().st_size > 0 for d in tmp_path.glob(f".{dest.name}.fetch-*")
                       for p in d.glob("model.safetensors"))

        try:
            kill_when(s3, child, partly_downloaded, "a download under way")
            restart(s3)
            out, err = child.communicate(timeout=180)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert child.returncode == 2 and err.startswith("error: "), (out, err)
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert not dest.exists() and leftovers(tmp_path) == []
        done = cli("registry", "pull", f"{MODEL}@stable", str(dest), "--registry", url, env=env)
        assert done.returncode == 0, done.stderr
        assert verify_dir(dest, reg.manifest(MODEL, "stable")) == []
        add("registry.s3_kills_mid_pull")
