"""The captures' branch of the error tree: the files themselves, written or read.

    PlatformError              (common)
    ├── CaptureSetupError      the capture location cannot be used (a local directory
    │                          that cannot be created); at the predictor's start, exit 2
    ├── CaptureError           captures or labels that cannot be read or evaluated: a URI
    │                          that does not exist or holds no files, truncated or foreign
    │                          files, another model, an empty window (shadow and accuracy
    │                          reports raise it too)
    └── LabelError             a label that is not well-formed: no request ID, a null or
                               non-JSON label, a bad time (the feedback route answers 400;
                               ``modelctl feedback push`` names the row, exit 2)

The CLI maps every one of them to exit code 2 (``cli/_errors.py``).
"""

from __future__ import annotations

from common import PlatformError


class CaptureSetupError(PlatformError):
    """The capture location cannot be used (a local directory that cannot be created)."""


class CaptureError(PlatformError):
    """The captures (or labels) cannot be evaluated; the message names the file or reason."""


class LabelError(PlatformError):
    """A ground-truth label is not well-formed; the message names where it is."""
