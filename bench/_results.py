"""Where a benchmark run comes from and where its results go, for the benchmarks that
write ``bench/results/<stem>.{json,md}`` (the queue and multi-model ones)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=False,
                          cwd=Path(__file__).parent.parent).stdout.strip()


def run_context(command: str, **extra: Any) -> dict[str, Any]:
    """The command, the commit (and whether predictor/ differed from it), the machine,
    the date and the load average at the start, plus ``extra``."""
    return {"command": command, "commit": _git("rev-parse", "--short", "HEAD"),
            "predictor_changed": _git("status", "--short", "--", "predictor").splitlines(),
            "machine": f"{platform.machine()} {os.cpu_count()} cores, Python "
                       f"{platform.python_version()}",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "load_avg_at_start": os.getloadavg(), **extra}


def write_results(stem: str, context: dict[str, Any], results: Sequence[dict[str, Any]],
                  markdown: Callable[[dict[str, Any], Sequence[dict[str, Any]]], str]) -> str:
    """``bench/results/<stem>.json`` (context and results) and ``<stem>.md`` (the report);
    returns the report."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(
        json.dumps({"context": context, "results": list(results)}, indent=2) + "\n")
    text = markdown(context, results)
    (RESULTS / f"{stem}.md").write_text(text)
    return text
