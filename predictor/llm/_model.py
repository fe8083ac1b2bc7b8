"""One served LLM: its tokenizer, its engine, and one generation from request to last token.

``LLMModel.generate`` is the whole life of a sequence: refused at the door when the
server drains or too many wait, its prompt built (the chat template for messages) and
checked against the context, submitted to the engine, its text released as tokens come
(``_text.TextStream``: stop strings, whole characters), measured (``_metrics``), and
cancelled, freeing its cache, whenever its consumer stops early (a client that
disconnects, a stop string) or its first token misses the deadline.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from predictor._config import ServerConfig
from predictor._errors import BadInput, DeadlineExpired, ItemFailed, ModelUnavailable, Overloaded
from predictor.llm._engine import Engine, Output
from predictor.llm._gate import AdmissionGate
from predictor.llm._metrics import LLMMetrics
from predictor.llm._params import GenerationRequest
from predictor.llm._text import TextStream
from predictor.tenants import CURRENT

logger = logging.getLogger("predictor.llm")


@dataclass(frozen=True)
class Piece:
    """Text released to the client; the last piece of a sequence carries why it ended."""

    text: str
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


class EngineFailed(ItemFailed):
    """The engine failed a sequence (a 500: the request was fine)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, RuntimeError(message), is_input_error=False)


class Generating(Protocol):
    """What the routes and the server need of a model: an ``LLMModel`` in-process, a
    ``QueuedLLM`` on a queue-mode frontend."""

    config: ServerConfig
    name: str
    version: str
    draining: bool

    def generate(
        self, request: GenerationRequest, *, timeout_ms: float, arrived: float | None = None
    ) -> AsyncGenerator[Piece, None]: ...

    async def healthy(self) -> bool: ...

    async def drain(self, timeout_s: float) -> None: ...

    def stop(self) -> None: ...


class LLMModel:
    """A loaded causal LM behind a continuous-batching engine."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        tokenizer: Any,
        engine: Engine,
        version: str,
        context_tokens: int,
        metrics: LLMMetrics,
        gate: AdmissionGate | None = None,
    ) -> None:
        self.config = config
        self.name = config.model_name
        self.version = version
        self.tokenizer = tokenizer
        self.engine = engine
        self.gate = gate or admission_gate(config, engine)
        self.context_tokens = context_tokens
        self.metrics = metrics
        self.max_tokens_limit = config.max_new_tokens_limit
        self.default_max_tokens = min(config.default_max_tokens, config.max_new_tokens_limit)
        self._ids = itertools.count()
        self._waiting = 0  # submitted, no first token yet
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.draining = False

    # -- the prompt ------------------------------------------------------------------------
    def prompt_ids(self, request: GenerationRequest) -> list[int]:
        if request.messages is not None:
            if not getattr(self.tokenizer, "chat_template", None):
                raise BadInput(f"model {self.name} has no chat template: use /v1/completions")
            ids = self.tokenizer.apply_chat_template(
                [dict(m) for m in request.messages],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            )
            return list(ids)
        assert request.prompt is not None
        return list(self.tokenizer.encode(request.prompt))

    def max_tokens_for(self, request: GenerationRequest, n_prompt: int) -> int:
        """The request's output budget: its own (capped by the server's limit) or the
        server's default, within what the context leaves; a 400 when nothing is left."""
        room = self.context_tokens - n_prompt
        if room < 1:
            raise BadInput(
                f"the prompt is {n_prompt} tokens; model {self.name}'s context is "
                f"{self.context_tokens} tokens, prompt and output together"
            )
        if request.max_tokens is None:
            return min(self.default_max_tokens, room)
        wanted = min(request.max_tokens, self.max_tokens_limit)
        if wanted > room:
            raise BadInput(
                f"the prompt is {n_prompt} tokens and max_tokens {wanted}: model "
                f"{self.name}'s context is {self.context_tokens} tokens, prompt and "
                "output together"
            )
        return wanted

    # -- one generation --------------------------------------------------------------------
    async def generate(
        self, request: GenerationRequest, *, timeout_ms: float, arrived: float | None = None
    ) -> AsyncGenerator[Piece, None]:
        """The sequence's text as it comes; the deadline ``timeout_ms`` covers the first token."""
        arrived = time.monotonic() if arrived is None else arrived
        tenant = CURRENT.get()  # with --tenants_file: into the engine in fair order
        flow = tenant.name if tenant is not None else None
        self._admit()
        ids = self.prompt_ids(request)
        max_tokens = self.max_tokens_for(request, len(ids))
        self._make_room(flow)  # only for a request that is fine: it may push another out
        sequence_id = f"{self.name}-{next(self._ids)}"
        outputs: asyncio.Queue[Output] = asyncio.Queue()
        text = TextStream(self.tokenizer, request.stop, self.engine.eos_token_ids)
        self._active += 1
        self._waiting += 1
        self._idle.clear()
        started = False
        finished: str | None = None
        try:
            self.gate.submit(sequence_id, ids, request.sampling(max_tokens), outputs.put_nowait,
                             flow=flow, weight=tenant.weight if tenant is not None else 1.0)
            self.metrics.prompt_tokens.inc(len(ids))
            last_at = arrived  # set at the first token
            sent_tokens = 0
            while finished is None:
                if not started:
                    left_s = timeout_ms / 1000.0 - (time.monotonic() - arrived)
                    try:
                        async with asyncio.timeout(max(left_s, 0.0)):
                            output = await outputs.get()
                    except TimeoutError:
                        finished = "deadline"
                        raise DeadlineExpired(
                            timeout_ms, (time.monotonic() - arrived) * 1000
                        ) from None
                else:
                    output = await outputs.get()
                now = time.monotonic()
                if output.finished == "error":
                    finished = "error"
                    raise EngineFailed(f"the engine failed the sequence: {output.error}")
                if output.finished == "rejected":
                    finished = "rejected"
                    raise Overloaded("queue_full", 1.0, output.error or "pushed out")
                new = len(output.token_ids) - sent_tokens
                if new > 0:
                    if not started:  # the first token is TTFT; those that came with it
                        started = True  # have no gap of their own to measure
                        self._waiting -= 1
                        self.metrics.ttft.observe(now - arrived)
                    else:
                        for _ in range(new):  # tokens that came together share the gap
                            self.metrics.tpot.observe((now - last_at) / new)
                    self.metrics.generation_tokens.inc(new)
                    sent_tokens = len(output.token_ids)
                    last_at = now
                piece = text.feed(output.token_ids, final=output.finished is not None)
                if text.stopped:
                    finished = "stop"
                    self.gate.cancel(sequence_id)
                elif output.finished is not None:
                    finished = output.finished
                if finished is not None:
                    self.metrics.e2e.observe(now - arrived)
                    yield Piece(piece, finished, len(ids), sent_tokens)
                elif piece:
                    yield Piece(piece)
        finally:
            if finished is None:  # the consumer went away
                finished = "cancelled"
            if finished in ("cancelled", "deadline"):  # free the sequence's cache
                self.gate.cancel(sequence_id)
            if not started:
                self._waiting -= 1
            self.metrics.finished[finished].inc()
            self._active -= 1
            if self._active == 0:
                self._idle.set()

    def _admit(self) -> None:
        if self.draining:
            raise Overloaded("draining", 0.0, "the server is shutting down")
        if not self.engine.healthy():
            raise ModelUnavailable(f"model {self.name}'s engine is not running", 5.0)

    def _make_room(self, flow: str | None) -> None:
        """Refused when --max_queue_size sequences wait, unless one tagged later than this
        one's turn (another tenant's, with tenants) is pushed out for it."""
        if self._waiting >= self.config.max_queue_size and not self.gate.push_out(flow):
            raise Overloaded(
                "queue_full",
                1.0,
                f"{self._waiting} sequences wait for their first "
                f"token (--max_queue_size {self.config.max_queue_size})",
            )

    async def healthy(self) -> bool:
        return not self.draining and self.engine.healthy()

    def stop(self) -> None:
        self.engine.stop()

    async def drain(self, timeout_s: float) -> None:
        """New sequences refused; those running finish, for up to ``timeout_s``."""
        self.draining = True
        try:
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        except TimeoutError:
            logger.warning(
                "drain: %d sequences still running after %.0f s", self._active, timeout_s
            )


def load_llm(config: ServerConfig, model_dir: Path, version: str) -> LLMModel:
    """The tokenizer and weights of ``model_dir`` (safetensors only, no remote code), and
    a started engine; loading errors are one line (``BadInput``)."""
    from transformers import AutoModelForCausalLM

    from predictor.handlers._text import load_pretrained
    from predictor.llm._engine import TransformersEngine

    tokenizer, model, _ = load_pretrained(model_dir, AutoModelForCausalLM, config.device,
                                          config.dtype)
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    eos_ids = frozenset([eos] if isinstance(eos, int) else eos or [])
    engine = TransformersEngine(model, eos_token_ids=eos_ids, vocab_size=len(tokenizer),
                                cache_bytes=int(config.kv_cache_memory_mb * 2**20))
    engine.start()
    context = int(getattr(model.config, "max_position_embeddings", 0) or 2048)
    gate = admission_gate(config, engine)
    metrics = LLMMetrics.create(config.model_name, version, config.role, gate.stats)
    return LLMModel(
        config,
        tokenizer=tokenizer,
        engine=engine,
        version=version,
        context_tokens=context,
        metrics=metrics,
        gate=gate,
    )


def admission_gate(config: ServerConfig, engine: Engine) -> AdmissionGate:
    """At most ``--max_batch_size`` sequences in the engine; fair order with tenants."""
    return AdmissionGate(engine, max_running=config.max_batch_size,
                         fair=bool(config.tenants_file))
