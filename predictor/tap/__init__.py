"""The tap: a copy of each answered predict exchange, for the mirror and the capture.

``TapMiddleware`` (``_tap``) keeps the request and response bytes and, only after
the last byte has gone to the client, hands an ``Exchange`` (``_exchange``) to the
``Tap``, whose two consumers only enqueue: the ``Mirror`` (``_mirror``) sends a
sampled copy to a shadow from its own tasks, and the ``CaptureSink`` (``_capture``)
writes one record (``_record``, in the capture schema of ``captures``, which ``shadow``
reads; ``_generation`` for an LLM's text) from its own thread. Neither can
delay, fail or change the answer the client got.
"""

from predictor.tap._capture import CaptureConfig, CaptureSink
from predictor.tap._exchange import Exchange
from predictor.tap._mirror import Mirror, MirrorConfig
from predictor.tap._record import LLM_TASK, Identity, build_record
from predictor.tap._tap import Tap, TapMiddleware

__all__ = [
    "LLM_TASK",
    "CaptureConfig",
    "CaptureSink",
    "Exchange",
    "Identity",
    "Mirror",
    "MirrorConfig",
    "Tap",
    "TapMiddleware",
    "build_record",
]
