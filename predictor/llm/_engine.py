"""The engine behind LLM serving: token-level continuous batching, behind one small interface.

``Engine`` is what the server needs of an engine: start it, submit a sequence (prompt
token IDs and its sampling), be told its tokens as they come, cancel it, and read how
full it is. ``TransformersEngine`` is transformers' own continuous batching
(``transformers.generation.continuous_batching``: ``ContinuousBatchingManager``, its
scheduler and paged KV cache): sequences join the running batch between decode steps
and leave when they end. We write no scheduler. vLLM, which KServe's huggingfaceserver
runs on GPUs, fits the same interface (docs/LLM.md says what each engine gives).

What transformers' manager does, read in its source (transformers 5.25,
``generation/continuous_batching/continuous_api.py``):

- ``add_request(input_ids, request_id, max_new_tokens, streaming, eos_token_id,
  **logit_processor_kwargs)`` queues a sequence; with ``streaming=True`` every decode
  step delivers a ``GenerationOutput`` whose ``generated_tokens`` holds all tokens so far.
- ``register_result_handler(request_id, callback)`` calls ``callback`` on the event loop
  (``call_soon_threadsafe``) for each output, and forgets it once one is finished.
- Sampling per request needs ``per_request_processors`` and a generation config whose
  temperature, top-k and top-p processors exist (a default of 1.0 or None makes none:
  ``cb_logits_processors.py``); greedy is top-k 1, as ``transformers serve`` does
  (``cli/serving/utils.py``, ``CBGenerateRunner._build_continuous_batching_kwargs``).
- The random numbers are shared by every running sequence, so a ``seed`` makes a
  sequence reproducible only when it runs alone (``transformers serve`` says the same).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

logger = logging.getLogger("predictor.llm")

# The generation config's sampling defaults: not 1.0, so that transformers builds the
# temperature and top-p processors that each request then sets (see the module docstring).
_DEFAULT_TEMPERATURE = 0.7
_DEFAULT_TOP_P = 0.95


@dataclass(frozen=True)
class Sampling:
    """How one sequence picks its tokens: ``temperature`` 0 is greedy."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False  # vLLM's extension: run to max_tokens (benchmarks)


@dataclass(frozen=True)
class Output:
    """What the engine has made of a sequence so far: every token, and whether it ended.

    ``finished`` is None while it runs, else ``"stop"`` (an end-of-sequence token),
    ``"length"`` (``max_tokens``), ``"error"`` (with ``error``) or ``"rejected"`` (never
    ran: pushed out of the admission gate's queue, ``_gate``)."""

    token_ids: tuple[int, ...]
    finished: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class EngineStats:
    """How full the engine is: sequences running and waiting (``preempted``: those of the
    waiting that had started and were taken off the device for room), and its KV blocks."""

    running: int
    waiting: int
    preempted: int
    kv_blocks_total: int
    kv_blocks_free: int
    kv_tokens_total: int = 0  # tokens the paged cache holds


class Engine(Protocol):
    """A continuous-batching engine, as the server sees it."""

    eos_token_ids: frozenset[int]

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def healthy(self) -> bool: ...

    def submit(
        self,
        sequence_id: str,
        prompt_ids: list[int],
        sampling: Sampling,
        on_output: Callable[[Output], None],
    ) -> None:
        """Queue a sequence; ``on_output`` is called on the running event loop."""

    def cancel(self, sequence_id: str) -> None:
        """Stop a sequence and free its cache; no more outputs reach its callback."""

    def stats(self) -> EngineStats: ...


def kv_bytes_per_token(config: Any, dtype: Any) -> int:
    """K and V of one token in every layer: 2 · layers · KV heads · head size · bytes."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    itemsize = int(getattr(dtype, "itemsize", 4))
    return 2 * int(text.num_hidden_layers) * kv_heads * head_dim * itemsize


class TransformersEngine:
    """transformers' ``ContinuousBatchingManager`` over a loaded causal LM."""

    def __init__(
        self,
        model: Any,
        *,
        eos_token_ids: frozenset[int],
        vocab_size: int,
        num_blocks: int | None = None,
        max_batch_tokens: int | None = None,
        cache_bytes: int = 0,
    ) -> None:
        self.model = model
        self.eos_token_ids = eos_token_ids
        self._vocab_size = vocab_size
        self._num_blocks = num_blocks
        self._max_batch_tokens = max_batch_tokens
        self._cache_bytes = cache_bytes  # 0: the engine sizes the cache from free memory
        self._manager: Any = None
        self._live: set[str] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        from transformers import ContinuousBatchingConfig, GenerationConfig

        generation = GenerationConfig(
            do_sample=True,
            temperature=_DEFAULT_TEMPERATURE,
            top_p=_DEFAULT_TOP_P,
            top_k=self._vocab_size,
            eos_token_id=sorted(self.eos_token_ids),
            pad_token_id=min(self.eos_token_ids),
            max_new_tokens=16,
        )
        batching = ContinuousBatchingConfig(
            num_blocks=self._num_blocks, max_batch_tokens=self._max_batch_tokens
        )
        if self._cache_bytes and batching.num_blocks is None:
            # A block holds page_size tokens of every layer's K and V.
            per_block = kv_bytes_per_token(self.model.config, self.model.dtype) * batching.page_size
            batching.num_blocks = max(1, self._cache_bytes // per_block)
        batching.per_request_processors = True
        manager = self.model.init_continuous_batching(
            generation_config=generation, continuous_batching_config=batching
        )
        manager.warmup()
        manager.start()
        self._manager = manager

    def stop(self) -> None:
        if self._manager is not None:
            self._manager.stop(block=True, timeout=10.0)
            self._manager = None

    def healthy(self) -> bool:
        manager = self._manager
        return (
            manager is not None
            and manager.is_running()
            and manager.background_thread_status.fatal_error is None
        )

    def submit(
        self,
        sequence_id: str,
        prompt_ids: list[int],
        sampling: Sampling,
        on_output: Callable[[Output], None],
    ) -> None:
        import torch

        manager = self._manager
        if manager is None:
            raise RuntimeError("the engine is not started")
        from transformers.generation.continuous_batching.requests import RequestStatus

        def deliver(raw: Any) -> None:
            with self._lock:
                if sequence_id not in self._live:
                    return  # cancelled: its last outputs are dropped
            finished = None
            error = raw.error
            if raw.status == RequestStatus.FAILED or error is not None:
                finished = "error"
            elif raw.is_finished():
                last = raw.generated_tokens[-1] if raw.generated_tokens else None
                finished = ("stop" if last in self.eos_token_ids and not sampling.ignore_eos
                            else "length")
            if finished is not None:
                with self._lock:
                    self._live.discard(sequence_id)
            on_output(Output(tuple(raw.generated_tokens), finished, error))

        if sampling.temperature == 0.0:
            knobs: dict[str, Any] = {"top_k": 1}
        else:
            knobs = {
                "temperature": float(sampling.temperature),
                "top_p": float(sampling.top_p),
                "top_k": self._vocab_size,
            }
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        with self._lock:
            self._live.add(sequence_id)
        manager.register_result_handler(sequence_id, deliver)
        added = manager.add_request(
            list(prompt_ids),
            request_id=sequence_id,
            max_new_tokens=sampling.max_tokens,
            streaming=True,
            eos_token_id=-1 if sampling.ignore_eos else sorted(self.eos_token_ids),
            **knobs,
        )
        if added is None:  # the manager refuses requests once it stops
            self._forget(sequence_id)
            raise RuntimeError("the engine does not accept sequences now")

    def cancel(self, sequence_id: str) -> None:
        with self._lock:
            live = sequence_id in self._live
        if live and self._manager is not None:
            self._manager.cancel_request(sequence_id)
        self._forget(sequence_id)

    def _forget(self, sequence_id: str) -> None:
        with self._lock:
            self._live.discard(sequence_id)
        manager = self._manager
        if manager is not None:  # a cancelled sequence never finishes: drop its handler
            with manager.output_router._lock:
                manager.output_router.result_handlers.pop(sequence_id, None)

    def stats(self) -> EngineStats:
        processor = self._manager.batch_processor if self._manager is not None else None
        if processor is None:
            return EngineStats(0, 0, 0, 0, 0)
        cache = processor.cache
        total = int(cache.num_blocks)
        free = round(total * float(cache.compute_free_capacity(relative=True)))
        scheduler = processor.scheduler
        waiting = list(scheduler.waiting_requests.values())
        # A preempted sequence waits again, either with its cache copied to the CPU or
        # reset with its tokens so far as its new prompt (offloading_manager.py).
        preempted = sum(
            1
            for state in waiting
            if state.is_cpu_offloaded or getattr(state, "_true_initial_tokens", 0)
        )
        return EngineStats(len(scheduler.active_requests), len(waiting), preempted, total, free,
                           int(getattr(cache, "max_tokens_read", 0) or 0))
