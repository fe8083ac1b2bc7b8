"""Queue mode for task ``llm`` (docs/LLM.md, "Queue mode"): frontends that check and
enqueue, workers that generate in their continuous batch and write each request's pieces
to a Redis stream of its own, which the frontend passes on as they come.

``QueuedLLM`` is the frontend's model (no weights); ``LLMQueueWorker`` the worker's loop
and ``serve_llm_worker`` its process; ``Follower`` the pure rule that passes on one
attempt's pieces and never splices two. The roles import Redis's client and KServe, so
they load on first use.
"""

from typing import TYPE_CHECKING, Any

from common import lazy_exports as _lazy_exports
from predictor.llm.queue._tokens import Arrived, Follower, Spliced, decode_arrived

if TYPE_CHECKING:
    from predictor.llm.queue._frontend import QueuedLLM
    from predictor.llm.queue._worker import LLMQueueWorker

_LAZY = {
    "LLMQueueWorker": "predictor.llm.queue._worker",
    "QueuedLLM": "predictor.llm.queue._frontend",
}

__getattr__ = _lazy_exports(__name__, _LAZY)


def serve_llm_worker(config: Any, llm: Any) -> int:
    """Run ``llm`` (a loaded ``LLMModel``) as a queue worker until SIGTERM; the exit code."""
    from predictor.llm.queue._worker import LLMQueueWorker
    from predictor.queue._serve import run_worker

    return run_worker(config, llm.version, lambda client, keys, consumer, _startup_s:
                      LLMQueueWorker(llm, client, keys, consumer))


__all__ = [
    "Arrived",
    "Follower",
    "LLMQueueWorker",
    "QueuedLLM",
    "Spliced",
    "decode_arrived",
    "serve_llm_worker",
]
