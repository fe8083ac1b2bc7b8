"""Registry transfers report their progress: a bar on a terminal (files, bytes, rate,
time left), nothing when stderr is piped or the output is ``--json``.

The CLI runs as a real process with its stderr on a pseudo-terminal (``os.openpty``),
so rich decides it is a terminal the way it would in a user's shell; the registry's
``Progress`` calls are checked directly against both stores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from registry import Registry
from tests.registry.conftest import ROOT_DIR, make_source

FILES = {"model.safetensors": os.urandom(3 * 1024 * 1024), "config.json": b"{}",
         "nested/tokenizer.json": b'{"v": 1}'}
TOTAL = sum(len(v) for v in FILES.values())


class Recorder:
    """registry's Progress protocol, counting what it is told (from any thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.begun: list[tuple[int, int]] = []
        self.bytes = self.files = 0

    def begin(self, files: int, total_bytes: int) -> None:
        self.begun.append((files, total_bytes))

    def advance(self, nbytes: int) -> None:
        with self.lock:
            self.bytes += nbytes

    def file_done(self) -> None:
        with self.lock:
            self.files += 1


def test_push_verify_and_fetch_report_every_file_and_byte(registry_url: str,
                                                           tmp_path: Path) -> None:
    reg = Registry.open(registry_url)
    src = make_source(tmp_path / "src", FILES)
    for step in ("push", "verify", "fetch"):
        seen = Recorder()
        if step == "push":
            reg.push(src, "demo", "fixed-latency", progress=seen)
        elif step == "verify":
            assert reg.verify("demo", 1, progress=seen) == []
        else:
            reg.fetch("demo", 1, tmp_path / "out", progress=seen)
        assert seen.begun == [(3, TOTAL)], step
        assert (seen.files, seen.bytes) == (3, TOTAL), step


def _run_on_terminal(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """``modelctl ARGS`` with stderr on a pseudo-terminal: (code, stdout, terminal text)."""
    leader, follower = os.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO once the child has closed its end
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        done = subprocess.run([sys.executable, "-m", "cli", *args], stdout=subprocess.PIPE,
                              stderr=follower, cwd=ROOT_DIR, env=env, timeout=120, check=False)
    finally:
        os.close(follower)
    reader.join(timeout=10)
    os.close(leader)
    return done.returncode, done.stdout.decode(), b"".join(chunks).decode(errors="replace")


@pytest.fixture
def terminal_env(local_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in {"NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE",
                        "TERM", "COLUMNS"}}
    return {**env, "TERM": "xterm-256color", "COLUMNS": "120", "MODELCTL_REGISTRY": local_url}


def test_a_terminal_shows_the_bar_and_scripts_get_clean_output(
        terminal_env: dict[str, str], tmp_path: Path) -> None:
    src = make_source(tmp_path / "src", FILES)
    code, out, shown = _run_on_terminal("registry", "push", str(src), "--model", "demo",
                                        "--task", "fixed-latency", env=terminal_env)
    assert (code, out) == (0, "1\n")  # the version alone on stdout, as before
    assert "pushing demo" in shown and "3/3 files" in shown and "MB" in shown, shown
    code, out, shown = _run_on_terminal("registry", "verify", "demo@1", env=terminal_env)
    assert code == 0 and "all checksums match" in out
    assert "verifying demo@1" in shown and "3/3 files" in shown, shown
    code, out, shown = _run_on_terminal("registry", "pull", "demo@1", str(tmp_path / "out"),
                                        env=terminal_env)
    assert code == 0 and "pulling demo@1" in shown and "3/3 files" in shown, shown
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == FILES["model.safetensors"]

    # --json on a terminal: the document alone, and no bar.
    code, out, shown = _run_on_terminal("registry", "verify", "demo@1", "--json",
                                        env=terminal_env)
    assert code == 0 and json.loads(out)["ok"] is True and shown == ""
    # Piped stderr: nothing but the result.
    done = subprocess.run([sys.executable, "-m", "cli", "registry", "push", str(src),
                           "--model", "demo", "--task", "fixed-latency"], capture_output=True,
                          cwd=ROOT_DIR, env=terminal_env, timeout=120, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"2\n", b"")
