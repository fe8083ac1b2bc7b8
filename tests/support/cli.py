"""Run the ``modelctl`` CLI in the test's own process, through its real main(), or in a
child process where the command imports KServe (whose gRPC protos clash with
tritonclient's in one process). Nothing here stands in for another system: both run
our own entry point (source: cli/_app.py ``main``, cli/__main__.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            *args: str) -> tuple[int, str, str]:
    """``modelctl ARGS`` in this process through the CLI's own main(): (code, out, err)."""
    from cli._app import main

    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["modelctl", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    out = capsys.readouterr()
    return code, out.out, out.err


def run_cli_process(*args: str, timeout_s: float = 300.0) -> tuple[int, str, str]:
    """``modelctl ARGS`` as its own process (``python -m cli``): (code, out, err)."""
    done = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True,
                          text=True, timeout=timeout_s, cwd=Path(__file__).parents[2],
                          check=False)
    return done.returncode, done.stdout, done.stderr
