"""A discrete-event simulation of one or N predictor replicas under open arrivals.

Pure: no I/O, no asyncio, no sleeping; time is a float that jumps from event to event.
Each replica runs the predictor's real batching policy, ``predictor.batching.BatchPolicy``
(built as the ``Batcher`` builds it: ``BatchPolicy(config)``), and this module only
replays what the asyncio batcher does with its decisions, step by step:

- ``Batcher.submit``: ``policy.admit`` at the arrival; a refusal is a 429 (``rejected``);
  otherwise the request's items join the queue with ``enqueued_at = now`` and
  ``policy.record_arrivals(now, k)``, and the loop decides at once.
- ``Batcher._step``: ``policy.decide`` until it says Wait; its ``expired`` indices fail
  their whole request (``Batcher._expire``: every queued item of that request leaves)
  and it decides afresh; a ``Dispatch`` starts a batch (``Batcher._dispatch``:
  ``busy_until = now + t(n)`` predicted) and it decides afresh; a ``Wait`` arms the one
  timer at its ``until`` (``_decide_forever``: the next decision replaces it).
- ``Batcher._execute``: at the batch's end ``policy.latency_model.observe(n, finished -
  started)``, the device is free, ``_step`` runs *before* the results fan out, then each
  request whose last item finished is answered.

The batch's service time is one draw of the profile's measured t(n) (``Profile.service_s``
with a seeded ``random.Random``), so the policy learns t(b) online from the same samples
the real batcher would see. A request's latency is its time in the batcher plus the
profile's ``edge_ms`` (decode, route, encode); its deadline in the batcher is its arrival
plus ``request_timeout_ms`` less ``edge_ms``, the edge's share being spent around it.

Replicas sit behind a load balancer: ``random`` (kube-proxy's choice of endpoint) or
``least-loaded`` (fewest queued + running items). In ``queue`` mode there is no balancer:
requests enter one shared FIFO (the Redis stream) and each worker pulls from it while it
holds fewer than ``2 x max_batch_size`` entries, as ``QueueWorker._read_loop`` reads with
``XREADGROUP COUNT=room``: blocked readers are served in the order they blocked, a worker
whose entry finishes reads again at once, and an entry read past its deadline is dropped
unrun (``QueueWorker._serve``). The Redis round trips are not modelled.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from capacity._planfile import Mode
from capacity._profile import Profile, ProfileError, quantile
from predictor.batching import BatchConfig, BatchPolicy, Dispatch

Balancer = Literal["random", "least-loaded"]
BALANCERS: tuple[Balancer, ...] = ("random", "least-loaded")
Outcome = Literal["answered", "expired", "rejected"]

_PENDING, _ANSWERED, _EXPIRED, _REJECTED = 0, 1, 2, 3
_OUTCOMES: dict[int, Outcome] = {_ANSWERED: "answered", _EXPIRED: "expired",
                                 _REJECTED: "rejected"}
_BATCH_END, _TIMER = 0, 1


@dataclass(frozen=True)
class SimResult:
    """What the simulated replicas did with the offered requests (latencies in ms)."""

    requests: int
    answered: int
    on_time: int  # answered within request_timeout_ms, edge included
    rejected: int  # refused at admission (429)
    expired: int  # dropped in the queue at their deadline
    p50_ms: float  # of answered requests (nan when none)
    p99_ms: float
    mean_ms: float
    utilisation: float  # device-busy share of the simulated span, over all replicas
    offered_rps: float
    cpu_limit_rps: float  # per replica: cpus x 1000 / edge_cpu_ms (inf when 0)
    replicas: int
    latencies_s: tuple[float, ...] = ()  # per request, in order (nan when not answered)
    outcomes: tuple[Outcome, ...] = ()

    @property
    def success_rate(self) -> float:
        """On-time answers over every offered request."""
        return self.on_time / self.requests if self.requests else 1.0

    @property
    def is_cpu_bound(self) -> bool:
        """The offered rate per replica is more than the edge's CPU can take."""
        return self.offered_rps / self.replicas > self.cpu_limit_rps


class _Request:
    __slots__ = ("arrival", "deadline", "index", "remaining", "state", "worker")

    def __init__(self, index: int, arrival: float, deadline: float, items: int) -> None:
        self.index = index
        self.arrival = arrival
        self.deadline = deadline
        self.remaining = items
        self.state = _PENDING
        self.worker: _Replica | None = None


class _Item:
    """What ``QueuedItem`` asks for: ``enqueued_at`` and ``deadline``."""

    __slots__ = ("deadline", "enqueued_at", "request")

    def __init__(self, enqueued_at: float, deadline: float, request: _Request) -> None:
        self.enqueued_at = enqueued_at
        self.deadline = deadline
        self.request = request


class _Replica:
    __slots__ = (
        "armed_at",
        "busy_s",
        "busy_until",
        "in_flight",
        "in_hand",
        "index",
        "is_reading",
        "last_end",
        "policy",
        "queue",
        "timer_at",
    )

    def __init__(self, index: int, config: BatchConfig) -> None:
        self.index = index
        self.policy = BatchPolicy(config)  # as Batcher.__init__ builds it
        self.queue: deque[_Item] = deque()
        self.in_flight = 0
        self.busy_until: float | None = None
        self.busy_s = 0.0
        self.timer_at: float | None = None  # the batcher's one timer
        self.armed_at: float | None = None  # the earliest timer event in the heap
        self.in_hand = 0  # queue mode: entries read and not yet answered
        self.is_reading = True  # queue mode: blocked in XREADGROUP
        self.last_end = 0.0


class _Simulation:
    """One run; ``run`` returns its ``SimResult``."""

    def __init__(self, profile: Profile, config: BatchConfig, replicas: int, balancer: Balancer,
                 mode: Mode, items_per_request: int, seed: int, slowdown: float = 1.0) -> None:
        if config.max_batch_size > profile.max_batch_size:
            raise ProfileError(f"max_batch_size {config.max_batch_size} is larger than the "
                               f"profile's largest batch ({profile.max_batch_size})")
        if replicas < 1 or items_per_request < 1:
            raise ProfileError("replicas and items_per_request must be >= 1")
        if balancer not in BALANCERS:
            raise ProfileError(f"unknown balancer {balancer!r}: use {' or '.join(BALANCERS)}")
        self.profile = profile
        self.slowdown = slowdown
        self.config = config
        self.mode = mode
        self.balancer = balancer
        self.k = items_per_request
        self.replicas = [_Replica(i, config) for i in range(replicas)]
        self.service_rng = random.Random(seed)
        self.balance_rng = random.Random(seed + 1)
        self.edge_s = profile.edge_ms / 1000.0
        self.events: list[tuple[float, int, int, _Replica, _Batch | None]] = []
        self.seq = 0
        self.finished: list[float] = []
        self.states = bytearray()
        self.end_s = 0.0
        self.to_read: list[_Replica] = []  # queue mode: workers whose room was set
        # Queue mode: the stream, and the workers blocked reading it, in blocking order.
        self.stream: deque[_Request] = deque()
        self.readers: deque[_Replica] = deque(self.replicas)
        self.prefetch = 2 * config.max_batch_size  # QueueWorker: self._prefetch = 2 * cap

    # -- the event loop --------------------------------------------------------------------
    def run(self, arrivals: Sequence[float]) -> None:
        timeout_s = self.config.request_timeout_s - self.edge_s
        if timeout_s <= 0:
            raise ProfileError(f"request_timeout_ms {self.config.request_timeout_ms:g} leaves "
                               f"nothing after the edge's {self.profile.edge_ms:g} ms")
        events = self.events
        pop = heapq.heappop
        n = len(arrivals)
        self.finished = [math.nan] * n
        self.states = bytearray(n)
        queue_mode = self.mode == "queue"
        i = 0
        while i < n or events:
            if i < n and (not events or arrivals[i] <= events[0][0]):
                now = arrivals[i]
                request = _Request(i, now, now + timeout_s, self.k)
                i += 1
                if queue_mode:
                    self.stream.append(request)
                    self._feed_readers(now)
                    self._flush_reads(now)
                else:
                    replica = self._choose()
                    self._submit(replica, request, now)
                    self._set_timer(replica, self._step(replica, now))
                continue
            now, _, kind, replica, batch = pop(events)
            if kind == _BATCH_END:
                assert batch is not None
                self._batch_end(replica, batch, now)
            elif now == replica.armed_at:
                replica.armed_at = None
                until = replica.timer_at
                if until is not None:
                    # A timer armed earlier than the one in force now is re-armed.
                    self._set_timer(replica, until if until > now else self._step(replica, now))
            if queue_mode:
                self._flush_reads(now)
        self.end_s = max([arrivals[-1] if n else 0.0, *(r.last_end for r in self.replicas)])

    def _push(self, at: float, kind: int, replica: _Replica, batch: _Batch | None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, replica, batch))

    def _set_timer(self, replica: _Replica, until: float | None) -> None:
        replica.timer_at = until
        if until is not None and (replica.armed_at is None or until < replica.armed_at):
            replica.armed_at = until
            self._push(until, _TIMER, replica, None)

    def _choose(self) -> _Replica:
        replicas = self.replicas
        if len(replicas) == 1:
            return replicas[0]
        if self.balancer == "random":
            return replicas[self.balance_rng.randrange(len(replicas))]
        return min(replicas, key=_load)

    # -- Batcher.submit / _step / _dispatch / _expire / _execute ---------------------------
    def _submit(self, replica: _Replica, request: _Request, now: float) -> None:
        policy = replica.policy
        admission = policy.admit(now, len(replica.queue), self.k, request.deadline,
                                 replica.busy_until)
        if not admission.accepted:
            self._end(request, _REJECTED, now)
            return
        replica.queue.extend(_Item(now, request.deadline, request) for _ in range(self.k))
        policy.record_arrivals(now, self.k)

    def _step(self, replica: _Replica, now: float) -> float | None:
        policy = replica.policy
        while True:
            decision = policy.decide(now, replica.queue, replica.in_flight > 0,
                                     replica.busy_until)
            if decision.expired:
                self._expire(replica, decision.expired, now)
                continue  # dropping may remove siblings further back: decide afresh
            if isinstance(decision, Dispatch):
                self._dispatch(replica, decision.n, now)
                continue
            return decision.until

    def _dispatch(self, replica: _Replica, n: int, now: float) -> None:
        queue = replica.queue
        items = [queue.popleft() for _ in range(n)]
        replica.in_flight = n
        replica.busy_until = now + replica.policy.latency_model.predict(n)
        service = self.profile.service_s(n, self.service_rng.random()) * self.slowdown
        replica.busy_s += service
        self._push(now + service, _BATCH_END, replica, _Batch(now, items))

    def _expire(self, replica: _Replica, indices: Sequence[int], now: float) -> None:
        queued = replica.queue
        failed = {id(queued[i].request): queued[i].request for i in indices}
        replica.queue = deque(item for item in queued if id(item.request) not in failed)
        for request in failed.values():
            self._end(request, _EXPIRED, now)

    def _batch_end(self, replica: _Replica, batch: _Batch, now: float) -> None:
        items = batch.items
        replica.policy.latency_model.observe(len(items), now - batch.started)
        replica.in_flight = 0
        replica.busy_until = None
        replica.last_end = now
        self._set_timer(replica, self._step(replica, now))  # before the results fan out
        for item in items:
            request = item.request
            if request.state != _PENDING:
                continue  # failed already: a sibling item expired
            request.remaining -= 1
            if request.remaining == 0:
                self._end(request, _ANSWERED, now)

    def _end(self, request: _Request, state: int, now: float) -> None:
        if request.state != _PENDING:
            return
        request.state = state
        self.states[request.index] = state
        if state == _ANSWERED:
            self.finished[request.index] = now - request.arrival
        worker = request.worker
        if worker is not None:
            worker.in_hand -= 1
            if not worker.is_reading:
                self.to_read.append(worker)

    # -- queue mode: QueueWorker._read_loop / _serve ---------------------------------------
    def _feed_readers(self, now: float) -> None:
        """Entries go to the workers blocked in XREADGROUP, first blocked first served."""
        readers, stream = self.readers, self.stream
        while stream and readers:
            worker = readers.popleft()
            worker.is_reading = False
            self._take(worker, now)

    def _flush_reads(self, now: float) -> None:
        while self.to_read:
            self._read(self.to_read.pop(0), now)

    def _read(self, worker: _Replica, now: float) -> None:
        """A worker whose entries finished reads again (``room`` was set)."""
        if worker.is_reading:
            return
        if self.stream and worker.in_hand < self.prefetch:
            self._take(worker, now)
        elif worker.in_hand < self.prefetch:
            worker.is_reading = True
            self.readers.append(worker)

    def _take(self, worker: _Replica, now: float) -> None:
        """XREADGROUP COUNT=room: take what is there, serve each entry, then read again."""
        room = self.prefetch - worker.in_hand
        submitted = False
        while room > 0 and self.stream:
            request = self.stream.popleft()
            room -= 1
            worker.in_hand += 1
            request.worker = worker
            if request.deadline <= now:
                worker.is_reading = True  # its own room: no second read for it
                self._end(request, _EXPIRED, now)  # QueueWorker._serve: not run
                worker.is_reading = False
                room += 1
                continue
            self._submit(worker, request, now)
            submitted = True
        if submitted:
            self._set_timer(worker, self._step(worker, now))
        if worker.in_hand < self.prefetch:
            worker.is_reading = True
            self.readers.append(worker)

    # -- the result ------------------------------------------------------------------------
    def result(self, arrivals: Sequence[float], cpus: float, keep: bool) -> SimResult:
        n = len(arrivals)
        states = self.states
        latencies = [t + self.edge_s for t in self.finished if t == t]
        latencies.sort()
        timeout_s = self.config.request_timeout_s + 1e-9
        on_time = sum(1 for t in latencies if t <= timeout_s)
        span = (self.end_s - arrivals[0]) if n else 0.0
        busy = sum(r.busy_s for r in self.replicas)
        cpu_limit = self.profile.cpu_limit_rps(cpus, self.config.max_batch_size)
        ms = [t * 1000.0 for t in latencies]
        return SimResult(
            requests=n, answered=len(latencies), on_time=on_time,
            rejected=states.count(_REJECTED), expired=states.count(_EXPIRED),
            p50_ms=quantile(ms, 0.50) if ms else math.nan,
            p99_ms=quantile(ms, 0.99) if ms else math.nan,
            mean_ms=sum(ms) / len(ms) if ms else math.nan,
            utilisation=busy / (span * len(self.replicas)) if span > 0 else 0.0,
            offered_rps=(n - 1) / (arrivals[-1] - arrivals[0]) if n > 1 and span > 0 else 0.0,
            cpu_limit_rps=cpu_limit, replicas=len(self.replicas),
            latencies_s=tuple(self.finished) if keep else (),
            outcomes=tuple(_OUTCOMES[s] for s in states) if keep else ())


@dataclass(frozen=True, slots=True)
class _Batch:
    started: float
    items: list[_Item]


def _load(replica: _Replica) -> int:
    return len(replica.queue) + replica.in_flight


def simulate(profile: Profile, config: BatchConfig, arrivals: Sequence[float], *,
             replicas: int = 1, balancer: Balancer = "least-loaded",
             mode: Mode = "in-process", items_per_request: int = 1, cpus: float = 1.0,
             seed: int = 0, keep_requests: bool = False, slowdown: float = 1.0) -> SimResult:
    """Offer ``arrivals`` (ascending seconds) to ``replicas`` predictors batching with
    ``config`` on the device ``profile`` measured; ``keep_requests`` keeps each request's
    outcome and latency (seconds in the batcher, edge excluded) in the result.
    ``slowdown`` stretches every drawn batch time (``Profile.cpu_slowdown``: a CPU device
    shared with the HTTP edge)."""
    if not (math.isfinite(cpus) and cpus > 0):
        raise ProfileError(f"cpus must be a number > 0, got {cpus!r}")
    if not (math.isfinite(slowdown) and slowdown >= 1.0):
        raise ProfileError(f"slowdown must be a finite number >= 1, got {slowdown!r}")
    sim = _Simulation(profile, config, replicas, balancer, mode, items_per_request, seed,
                      slowdown)
    sim.run(arrivals)
    return sim.result(arrivals, cpus, keep_requests)
