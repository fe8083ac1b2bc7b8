"""Queue-decoupled serving on Redis Streams (docs/QUEUE.md): frontends that validate and
enqueue, workers that batch from the stream and answer by request ID.

``QueueKeys`` names one model version's keys (a fixed contract); ``QueueFrontend`` is the
frontend role's KServe model; ``QueueWorker`` the worker role's loop and
``serve_worker`` its process; ``ResultStore`` writes results once; the codec and the
backpressure maths are pure. The two roles import KServe (and with it KServe's gRPC
protos), so they load on first use: importing this package for its keys or codec
stays light.
"""

from typing import TYPE_CHECKING

from common import lazy_exports as _lazy_exports
from predictor.queue._backpressure import Verdict, WorkerInfo, admit, depth_of, predicted_wait_s
from predictor.queue._codec import (
    Entry,
    decode_entry,
    decode_record,
    encode_entry,
    error_record,
    ok_record,
    results_of,
)
from predictor.queue._keys import QueueKeys
from predictor.queue._results import ResultStore

if TYPE_CHECKING:
    from predictor.queue._frontend import QueueFrontend
    from predictor.queue._serve import serve_worker
    from predictor.queue._worker import QueueWorker

_LAZY = {
    "QueueFrontend": "predictor.queue._frontend",
    "QueueWorker": "predictor.queue._worker",
    "serve_worker": "predictor.queue._serve",
}


__getattr__ = _lazy_exports(__name__, _LAZY)


__all__ = [
    "Entry",
    "QueueFrontend",
    "QueueKeys",
    "QueueWorker",
    "ResultStore",
    "Verdict",
    "WorkerInfo",
    "admit",
    "decode_entry",
    "decode_record",
    "depth_of",
    "encode_entry",
    "error_record",
    "ok_record",
    "predicted_wait_s",
    "results_of",
    "serve_worker",
]
