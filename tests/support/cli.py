"""Run the ``modelctl`` CLI in the test's own process, through its real main()."""

from __future__ import annotations

import sys

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
