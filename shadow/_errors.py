"""The shadow evaluation's branch of the error tree.

    PlatformError              (common)
    ├── ShadowError            mirroring, capture evaluation and the shadow gate
    │   ├── ThresholdsError    a thresholds file or --threshold flag is wrong
    │   └── ShadowGateError    --require-shadow-pass: no passing report for the version
    └── CaptureError           (captures/_errors.py; shadow re-exports it) captures that
                               cannot be evaluated: truncated or foreign files, another
                               model, no common request IDs, an empty window

The CLI maps every one of them to exit code 2 (``cli/_errors.py``).
"""

from __future__ import annotations

from common import PlatformError


class ShadowError(PlatformError):
    """Something about shadow traffic, its captures or its report is wrong."""


class ThresholdsError(ShadowError):
    """A shadow-report threshold (file or flag) is unknown or out of range."""


class ShadowGateError(ShadowError):
    """A rollout that requires a passing shadow report has none for its version."""
