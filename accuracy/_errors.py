"""The accuracy report's branch of the error tree.

    PlatformError              (common)
    ├── AccuracyError          a report or push that cannot be asked for: a bad model
    │                          name, capture URI, window or time span
    ├── CaptureError           (captures/_errors.py) captures or labels that cannot be
    │                          read: a URI that does not exist, no capture or label
    │                          files, truncated or foreign files, another model
    └── LabelError             (captures/_errors.py) a pushed row that is not a label:
                               the message names its line

The CLI maps every one of them to exit code 2 (``cli/_errors.py``).
"""

from __future__ import annotations

from common import PlatformError


class AccuracyError(PlatformError):
    """A feedback push or accuracy report was asked for with arguments that cannot work."""
