"""Which waiting sequence enters the engine next: a cap, and fair share across tenants.

transformers' continuous-batching scheduler takes its waiting sequences first come,
first served, as far as its cache and token budget allow (``scheduler.py``,
``FIFOScheduler``: ``waiting_requests_order`` is a deque, new requests appended). Left
to it, a tenant that floods the server fills the running batch and the engine's own
queue, and every other tenant's sequence waits behind that backlog.

``AdmissionGate`` keeps sequences out of the engine until they can run:

- at most ``--max_batch_size`` sequences are in the engine at once (vLLM's
  ``max_num_seqs``; a queue-mode worker holds as many), so a flood cannot grow the
  batch, and everyone's time per token, without bound. With tenants, a tenant that
  runs fewer than its share of those slots (``max_batch_size`` x its weight / the
  weights of the tenants with sequences running or waiting) enters even when they are
  all taken: a running sequence cannot be stopped, and a generation holds its slot for
  seconds, so waiting for one to end would cost a light tenant a whole generation. The
  batch then grows past the cap, to twice it at most, until the heavy tenant's
  sequences end and leave it at its share;
- with tenants, at most ``AHEAD`` of them have no first token yet, so the engine's own
  first-come queue stays short (without tenants every sequence enters as soon as the
  cap allows, as before, so a burst is prefilled together);
- the rest wait here in start-time fair queuing order, the request batcher's
  (``predictor.batching.FairOrder``): a light tenant's sequence goes in ahead of a
  heavy tenant's backlog, and two backlogged tenants of weights 3 and 1 enter 3 : 1 in
  tokens. A sequence's cost is its token budget, prompt plus ``max_tokens``, so a
  tenant of long generations gets as many tokens as one of short ones, not as many
  sequences. With one flow (no tenants) the order is first come, first served.

A full server makes room for an earlier-tagged sequence by pushing out the one tagged
last (``push_out``): the flooding tenant's newest, which gets ``finished="rejected"``
(a 429). Everything here runs on the event loop: the engine delivers outputs there.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from predictor.batching import FairOrder, position
from predictor.llm._engine import Engine, EngineStats, Output, Sampling

# Sequences in the engine with no first token yet, when tenants share it: enough for
# the scheduler to prefill a few together, few enough that a light tenant's sequence
# waits behind at most this many of the heavy tenant's in the engine's own FIFO.
AHEAD = 2


@dataclass(eq=False)
class _Held:
    sequence_id: str
    prompt_ids: list[int]
    sampling: Sampling
    on_output: Callable[[Output], None]
    tag: float
    flow: str | None = None


class AdmissionGate:
    """In front of one engine: the sequences waiting to enter, in fair order."""

    def __init__(self, engine: Engine, *, max_running: int, fair: bool) -> None:
        self.engine = engine
        self.max_running = max(1, max_running)
        self.fair = fair
        self.ahead = min(AHEAD, self.max_running) if fair else self.max_running
        self._order = FairOrder()
        self._held: list[_Held] = []  # by tag
        self._running: dict[str, str | None] = {}  # in the engine: its flow
        self._unstarted: set[str] = set()  # in the engine, no output yet
        self._per_flow: Counter[str | None] = Counter()  # running, by flow
        self._weights: dict[str | None, float] = {}  # each flow's, as last submitted

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def running(self) -> int:
        return len(self._running)

    def submit(self, sequence_id: str, prompt_ids: list[int], sampling: Sampling,
               on_output: Callable[[Output], None], *, flow: str | None = None,
               weight: float = 1.0) -> None:
        """Queue a sequence of ``flow`` (a tenant's name; None: no tenants); it enters
        the engine now if there is room and nobody is ahead of it."""
        cost = max(1, len(prompt_ids) + sampling.max_tokens)
        [tag] = self._order.tags(flow, 1, weight / cost)
        self._weights[flow] = weight
        held = _Held(sequence_id, prompt_ids, sampling, on_output, tag, flow)
        self._held.insert(position(self._held, tag), held)
        self._dispatch()

    def push_out(self, flow: str | None) -> bool:
        """Make room for the next sequence of ``flow``: drop the waiting sequence tagged
        last if it is tagged after that one would be. True if one was dropped."""
        if not self._held or self._held[-1].tag <= self._order.start(flow):
            return False
        victim = self._held.pop()
        victim.on_output(Output((), "rejected", "pushed out by a tenant with an earlier "
                                               "turn (fair share)"))
        return True

    def cancel(self, sequence_id: str) -> None:
        """Forget a sequence: out of the queue, or out of the engine (its cache freed)."""
        for i, held in enumerate(self._held):
            if held.sequence_id == sequence_id:
                del self._held[i]
                return
        self._left(sequence_id)
        self._unstarted.discard(sequence_id)
        self.engine.cancel(sequence_id)
        self._dispatch()

    def stats(self) -> EngineStats:
        """The engine's, with the sequences waiting here counted as waiting."""
        stats = self.engine.stats()
        return dataclasses.replace(stats, waiting=stats.waiting + len(self._held))

    def share(self, flow: str | None) -> float:
        """The slots ``flow`` is due: the cap split by weight among the flows with
        sequences running or waiting (``flow`` counted among them)."""
        active = {h.flow for h in self._held} | {f for f, n in self._per_flow.items() if n}
        active.add(flow)
        total = sum(self._weights.get(f, 1.0) for f in active)
        return self.max_running * self._weights.get(flow, 1.0) / total

    def _next(self) -> int | None:
        """The index of the held sequence to enter now, if any: the head while the cap
        leaves room; past it, the first in order whose flow runs fewer than its share."""
        if not self._held or len(self._unstarted) >= self.ahead:
            return None
        if len(self._running) < self.max_running:
            return 0
        if not self.fair or len(self._running) >= 2 * self.max_running:
            return None
        for i, held in enumerate(self._held):
            if self._per_flow[held.flow] + 1 <= self.share(held.flow):
                return i
        return None

    def _dispatch(self) -> None:
        while (i := self._next()) is not None:
            held = self._held.pop(i)
            self._order.dispatched([held])
            self._enter(held)

    def _left(self, sequence_id: str) -> None:
        if sequence_id in self._running:
            self._per_flow[self._running.pop(sequence_id)] -= 1

    def _enter(self, held: _Held) -> None:
        sequence_id = held.sequence_id

        def deliver(output: Output) -> None:
            room = sequence_id in self._unstarted or output.finished is not None
            self._unstarted.discard(sequence_id)
            if output.finished is not None:
                self._left(sequence_id)
            held.on_output(output)
            if room:
                self._dispatch()

        self._running[sequence_id] = held.flow
        self._per_flow[held.flow] += 1
        self._unstarted.add(sequence_id)
        try:
            self.engine.submit(sequence_id, held.prompt_ids, held.sampling, deliver)
        except RuntimeError as exc:  # the engine stopped: the sequence fails, no one else
            self._left(sequence_id)
            self._unstarted.discard(sequence_id)
            held.on_output(Output((), "error", str(exc)))
