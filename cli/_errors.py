"""The CLI's one edge table: which errors become which exit codes.

Expected failures print one line on stderr and exit 2 (usage, input, cluster or
store errors); nothing else is printed, no traceback.
"""

from __future__ import annotations

import sys

from registry import PlatformError

EXIT_OK = 0
EXIT_USAGE = 2


def exit_code_for(exc: BaseException) -> int | None:
    """The exit code for an expected error, or None if it is a bug."""
    if isinstance(exc, PlatformError):
        return EXIT_USAGE
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return None


def report(exc: BaseException) -> None:
    message = str(exc) or exc.__class__.__name__
    sys.stderr.write(f"error: {message}\n")
