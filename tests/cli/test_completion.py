"""Shell completion is typer's own: ``modelctl --show-completion bash`` prints a script,
and that script, sourced by a real bash, completes command names and options by
running the installed ``modelctl`` (typer's ``COMPLETION_SCRIPT_BASH``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MODELCTL = Path(sys.executable).parent / "modelctl"


def _complete(*words: str) -> list[str]:
    """What bash offers for the last of ``words`` after sourcing modelctl's script."""
    script = "\n".join([
        f"source <({MODELCTL} --show-completion bash)",
        "COMP_WORDS=(" + " ".join(f"'{w}'" for w in words) + ")",
        f"COMP_CWORD={len(words) - 1}",
        "_modelctl_completion modelctl",
        "printf '%s\\n' \"${COMPREPLY[@]}\"",
    ])
    env = {**os.environ, "PATH": f"{MODELCTL.parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                          timeout=120, check=True)
    return [line for line in done.stdout.splitlines() if line]


@pytest.mark.parametrize(("words", "offered"), [
    (("modelctl", "rol"), ["rollout"]),
    (("modelctl", "rollout", "st"), ["start", "status"]),
    (("modelctl", "registry", "push", "--al"), ["--alias"]),
])
def test_bash_completes_commands_and_options(words: tuple[str, ...],
                                             offered: list[str]) -> None:
    assert MODELCTL.is_file(), "make setup installs the modelctl entry point"
    assert _complete(*words) == offered
