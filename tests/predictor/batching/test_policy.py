"""The batching policy, tick by tick on a fake clock: examples, then properties."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictor.batching._estimators import ArrivalRate, LatencyModel
from predictor.batching._policy import BatchConfig, BatchPolicy, Dispatch, Wait
from tests.fakes.clock import FakeClock


@dataclass(frozen=True)
class Item:
    id: int
    enqueued_at: float
    deadline: float


def trained(a_s: float, c_s: float, sizes: range = range(1, 33)) -> LatencyModel:
    """A model that has seen noiseless batches of t(b) = a + c*b."""
    model = LatencyModel(prior_s=0.0)
    for b in sizes:
        model.observe(b, a_s + c_s * b)
    return model


# -- config ---------------------------------------------------------------------------------------
def test_config_defaults_and_units() -> None:
    config = BatchConfig()
    assert (config.max_batch_size, config.max_queue_size) == (32, 1024)
    assert config.max_batch_wait_s == pytest.approx(0.010)
    assert config.request_timeout_s == pytest.approx(30.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_batch_size": 0}, "max_batch_size must be an integer >= 1"),
        ({"max_batch_size": 2.5}, "max_batch_size must be an integer >= 1"),
        ({"max_batch_size": True}, "max_batch_size must be an integer >= 1"),
        ({"max_batch_wait_ms": -1}, "max_batch_wait_ms must be a finite number >= 0"),
        ({"max_batch_wait_ms": math.nan}, "max_batch_wait_ms must be a finite number >= 0"),
        ({"max_batch_size": 64, "max_queue_size": 63}, "max_queue_size must be an integer >= "
                                                       "max_batch_size (64)"),
        ({"request_timeout_ms": 0}, "request_timeout_ms must be a finite number > 0"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        BatchConfig(**kwargs)  # type: ignore[arg-type]


def test_config_accepts_zero_wait_and_queue_equal_to_batch() -> None:
    BatchConfig(max_batch_size=8, max_batch_wait_ms=0, max_queue_size=8)


# -- latency model --------------------------------------------------------------------------------
def test_latency_model_uses_prior_until_it_has_data() -> None:
    model = LatencyModel(prior_s=0.05)
    assert model.observations == 0
    assert model.predict(1) == model.predict(100) == pytest.approx(0.05)
    assert model.predict(0) == 0.0


def test_latency_model_learns_a_line_exactly() -> None:
    model = trained(0.02, 0.003)
    assert model.observations == 32
    assert model.intercept_s == pytest.approx(0.02)
    assert model.per_item_s == pytest.approx(0.003)
    assert model.predict(50) == pytest.approx(0.17)


def test_latency_model_with_one_size_keeps_a_flat_line() -> None:
    model = LatencyModel(prior_s=0.5)
    for _ in range(5):
        model.observe(4, 0.1)
    assert model.per_item_s == 0.0
    assert model.predict(1) == model.predict(64) == pytest.approx(0.1)


def test_latency_model_fixed_latency_has_no_slope() -> None:
    model = LatencyModel()
    for b in (1, 7, 80, 33, 100, 2, 64):
        model.observe(b, 0.1)
    assert model.predict(1) == pytest.approx(0.1)
    assert model.predict(100) == pytest.approx(0.1)


def test_latency_model_clamps_to_non_negative() -> None:
    shrinking = LatencyModel()
    for b in range(1, 20):
        shrinking.observe(b, 0.2 - 0.01 * b)  # faster when larger: no negative slope
    assert shrinking.per_item_s == 0.0
    assert shrinking.intercept_s > 0
    steep = LatencyModel()
    for b in range(1, 20):
        steep.observe(b, max(0.0, 0.01 * b - 0.05))  # negative intercept: through 0
    assert steep.intercept_s == 0.0
    assert steep.per_item_s > 0
    assert all(steep.predict(b) >= 0 for b in range(1, 20))


def test_latency_model_follows_a_change() -> None:
    model = trained(0.1, 0.0)
    for i in range(200):
        model.observe(1 + i % 16, 0.01 + 0.001 * (1 + i % 16))
    assert model.predict(8) == pytest.approx(0.018, rel=1e-3)


def test_latency_model_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        LatencyModel().observe(0, 0.1)
    with pytest.raises(ValueError, match="seconds"):
        LatencyModel().observe(1, -0.1)
    with pytest.raises(ValueError, match="decay"):
        LatencyModel(decay=1.0)


# -- arrival rate ---------------------------------------------------------------------------------
def test_arrival_rate_tracks_a_steady_stream_and_decays() -> None:
    clock = FakeClock()
    rate = ArrivalRate(time_constant_s=1.0)
    assert rate.rate(clock()) == 0.0
    for _ in range(1000):  # 200 items/s for 5 s
        rate.record(clock.advance(0.005))
    assert rate.rate(clock()) == pytest.approx(200 * (1 - math.exp(-5)), rel=0.01)
    assert rate.last_arrival == clock()
    clock.advance(3.0)
    assert rate.rate(clock()) == pytest.approx(200 * math.exp(-3), rel=0.02)


# -- admission ------------------------------------------------------------------------------------
def fixed_policy(t_s: float = 0.1, **config: float) -> BatchPolicy:
    return BatchPolicy(BatchConfig(**config), trained(t_s, 0.0))  # type: ignore[arg-type]


def test_admit_queue_full_at_the_exact_boundary() -> None:
    policy = fixed_policy(max_batch_size=10, max_queue_size=30)
    assert policy.admit(0.0, 27, 3, 100.0, None).accepted
    refused = policy.admit(0.0, 28, 3, 100.0, None)
    assert (refused.accepted, refused.reason) == (False, "queue_full")


def test_admit_refuses_what_cannot_finish_by_its_deadline() -> None:
    policy = fixed_policy(0.1, max_batch_size=10, max_queue_size=100)
    # 25 queued + 2 new = 27 items: 2 full batches then a batch of 7, after the
    # running batch ends at 0.05: finish at 0.05 + 3 * 0.1 = 0.35.
    accepted = policy.admit(0.0, 25, 2, 0.36, busy_until=0.05)
    assert accepted.accepted
    assert accepted.predicted_finish == pytest.approx(0.35)
    refused = policy.admit(0.0, 25, 2, 0.34, busy_until=0.05)
    assert (refused.accepted, refused.reason) == (False, "deadline")
    # The busy device does not count once its batch is predicted to be over.
    assert policy.admit(1.0, 0, 1, 1.11, busy_until=0.05).accepted


def test_admit_uses_the_lowered_cap() -> None:
    policy = fixed_policy(0.1, max_batch_size=10, max_queue_size=100)
    assert policy.admit(0.0, 9, 1, 0.15, None).accepted
    assert not policy.admit(0.0, 9, 1, 0.15, None, cap=5).accepted  # 2 batches of 5


def test_retry_after_is_the_predicted_drain_time() -> None:
    policy = fixed_policy(0.1, max_batch_size=10, max_queue_size=100)
    assert policy.retry_after_s(0.0, 25, busy_until=0.05) == pytest.approx(0.35)
    assert policy.admit(0.0, 95, 10, 100.0, 0.05).retry_after_s == pytest.approx(1.05)
    learnt = BatchPolicy(BatchConfig(max_batch_size=10), trained(0.02, 0.008))
    assert learnt.retry_after_s(0.0, 15, None) == pytest.approx(0.10 + 0.06)
    # Never 0: rounding up for Retry-After always gives at least 1 s.
    assert 0 < fixed_policy().retry_after_s(0.0, 0, None) <= 0.01


# -- decisions, by example ------------------------------------------------------------------------
def items(*enqueued_at: float, timeout_s: float = 10.0) -> list[Item]:
    return [Item(i, t, t + timeout_s) for i, t in enumerate(enqueued_at)]


def wait_until(until: float) -> object:
    """What a Wait(until) decision compares equal to, up to rounding."""
    return Wait(pytest.approx(until))  # type: ignore[arg-type]


def test_a_busy_device_never_dispatches() -> None:
    policy = fixed_policy(0.01, max_batch_size=2, max_queue_size=8)
    decision = policy.decide(5.0, items(0.0, 0.1, 0.2), True, 5.005)
    assert isinstance(decision, Wait)
    assert decision.expired == ()


def test_full_queue_dispatches_at_once() -> None:
    policy = fixed_policy(0.01, max_batch_size=4, max_queue_size=8)
    decision = policy.decide(0.0, items(0, 0, 0, 0, 0), False, None)
    assert decision == Dispatch(4, "full")


def test_oldest_item_at_max_wait_dispatches() -> None:
    policy = fixed_policy(0.1, max_batch_size=100, max_batch_wait_ms=50, max_queue_size=1000)
    for i in range(1, 2001):  # overload: waiting to fill pays, up to max_wait
        policy.record_arrivals(i * 0.0005 - 1.0, 1)
    queue = items(0.0, 0.0)
    assert policy.decide(0.0, queue, False, None) == wait_until(0.05)
    policy.record_arrivals(0.049, 1)
    queue = items(0.0, 0.0, 0.049)
    assert policy.decide(0.049, queue, False, None) == wait_until(0.05)
    assert policy.decide(0.050, queue, False, None) == Dispatch(3, "max_wait")


def test_light_traffic_dispatches_without_waiting() -> None:
    policy = fixed_policy(0.1, max_batch_size=100, max_batch_wait_ms=50, max_queue_size=100)
    for i in range(50):  # 50 items/s: far below the 1000 items/s full batches can serve
        policy.record_arrivals(i * 0.02, 1)
    now = 0.98
    assert policy.decide(now, items(now), False, None) == Dispatch(1, "no_gain")


def test_overload_waits_to_fill_the_batch_until_the_window_ends() -> None:
    policy = fixed_policy(0.1, max_batch_size=100, max_batch_wait_ms=50, max_queue_size=1000)
    clock = FakeClock(0.0)
    for _ in range(2000):  # 2000 items/s against 1000 items/s of capacity
        policy.record_arrivals(clock.advance(0.0005), 1)
    now = clock()
    decision = policy.decide(now, items(now - 0.01, now), False, None)
    assert decision == wait_until(now + 0.04)
    # ... but a pause in traffic ends the wait: nothing will join in time.
    later = now + 0.025
    assert policy.decide(later, items(now - 0.01, now), False, None) == Dispatch(2, "no_gain")


def test_draining_never_waits() -> None:
    policy = fixed_policy(0.1, max_batch_size=100, max_batch_wait_ms=50, max_queue_size=1000)
    for i in range(2000):
        policy.record_arrivals(i * 0.0005, 1)
    queue = items(0.999, 0.9995)
    assert isinstance(policy.decide(1.0, queue, False, None), Wait)
    assert policy.decide(1.0, queue, False, None, is_draining=True) == Dispatch(2, "draining")


def test_waiting_stops_before_it_would_cost_a_deadline() -> None:
    policy = fixed_policy(0.1, max_batch_size=100, max_batch_wait_ms=50, max_queue_size=1000)
    for i in range(2000):
        policy.record_arrivals(i * 0.0005, 1)
    now = 1.0
    tight = [Item(0, now, now + 0.13), Item(1, now, now + 10)]
    decision = policy.decide(now, tight, False, None)
    # Latest start: 0.13 - t(3) less 2 ms of slack for a late timer.
    assert decision == wait_until(now + 0.028)
    assert policy.decide(now + 0.028, tight, False, None) == Dispatch(2, "deadline")


def test_expired_items_are_reported_not_dispatched() -> None:
    policy = fixed_policy(0.1, max_batch_size=4, max_queue_size=8)
    queue = [Item(0, 0.0, 1.05), Item(1, 0.0, 5.0), Item(2, 0.5, 1.09), Item(3, 0.9, 5.0)]
    decision = policy.decide(1.0, queue, False, None)
    assert decision.expired == (0, 2)
    assert isinstance(decision, Dispatch)
    assert decision.n == 2  # the two live items
    busy = policy.decide(1.0, queue, True, busy_until=1.5)
    assert isinstance(busy, Wait)
    assert busy.expired == (0, 2)  # nothing but items 1 and 3 can start before 1.5
    assert busy.until == pytest.approx(4.9)  # when item 1 would expire


def test_batch_is_cut_short_when_that_keeps_more_items_on_time() -> None:
    policy = BatchPolicy(BatchConfig(max_batch_size=8), trained(0.01, 0.01))
    # t(b) = 0.01 + 0.01 b: the whole batch ends at 0.09, a batch of 5 at 0.06.
    tight = [Item(i, 0.0, 0.065) for i in range(6)] + [Item(i, 0.0, 9.0) for i in (6, 7)]
    assert policy.decide(0.0, tight, False, None) == Dispatch(5, "full")
    # Only the head misses in the whole batch: saving it would leave 7 out.
    one_late = [Item(0, 0.0, 0.065)] + [Item(i, 0.0, 9.0) for i in range(1, 8)]
    assert policy.decide(0.0, one_late, False, None) == Dispatch(8, "full")


def test_lowered_cap_bounds_the_batch() -> None:
    policy = fixed_policy(0.01, max_batch_size=8, max_queue_size=16)
    assert policy.decide(0.0, items(*[0.0] * 8), False, None, cap=3) == Dispatch(3, "full")


# -- properties, by simulation ------------------------------------------------------------------
@dataclass
class Sim:
    config: BatchConfig
    cap: int
    service_s: Callable[[int], float]
    arrival_time_constant_s: float = 1.0
    clock: FakeClock = field(default_factory=lambda: FakeClock(0.0))
    dispatched: list[int] = field(default_factory=list)
    expired: list[int] = field(default_factory=list)
    refused: int = 0
    admitted: int = 0
    batches: list[int] = field(default_factory=list)
    free_waits: int = 0  # decisions to wait while the device was free

    def __post_init__(self) -> None:
        self.policy = BatchPolicy(
            self.config, arrivals=ArrivalRate(self.arrival_time_constant_s)
        )
        self.queue: list[Item] = []
        self.running_until: float | None = None
        self.running_size = 0
        self.predicted_until: float | None = None
        self.free_since = self.clock()

    def run(self, arrivals: list[tuple[float, int, float]]) -> None:
        """Arrivals are (gap_s, n_items, timeout_s); run until everything is out."""
        pending: deque[tuple[float, int, float]] = deque()
        t = self.clock()
        for gap, n, timeout in arrivals:
            t += gap
            pending.append((t, n, timeout))
        next_id = 0
        for _ in range(100_000):
            now = self.clock()
            if self.running_until is not None and now >= self.running_until:
                size = self.running_size
                self.policy.latency_model.observe(size, self.service_s(size))
                self.running_until = self.predicted_until = None
                self.free_since = now
            while pending and pending[0][0] <= now:
                _, n, timeout = pending.popleft()
                next_id = self.arrive(now, n, timeout, next_id)
            if self.step(now):
                continue  # something changed: decide again at the same time
            events = [e for e in (self.running_until, self.wait_until) if e is not None]
            if pending:
                events.append(pending[0][0])
            if not events:
                assert not self.queue, "items left in the queue with nothing to wake on"
                return
            nxt = min(events)
            assert nxt > now, f"no progress at {now}: next event {nxt}"
            self.clock.advance_to(nxt)
        raise AssertionError("the simulation did not finish")

    def arrive(self, now: float, n: int, timeout: float, next_id: int) -> int:
        admission = self.policy.admit(now, len(self.queue), n, now + timeout,
                                      self.predicted_until, cap=self.cap)
        if not admission.accepted:
            self.refused += 1
            assert admission.retry_after_s > 0
            if admission.reason == "queue_full":
                assert len(self.queue) + n > self.config.max_queue_size
            return next_id
        self.admitted += n
        for _ in range(n):
            self.queue.append(Item(next_id, now, now + timeout))
            next_id += 1
        self.policy.record_arrivals(now, n)
        assert len(self.queue) <= self.config.max_queue_size
        return next_id

    def predict(self, size: int) -> float:
        return self.policy.latency_model.predict(size)

    def on_time(self, now: float, batch: list[Item]) -> int:
        finish = now + self.predict(len(batch))
        return sum(1 for item in batch if finish <= item.deadline)

    def step(self, now: float) -> bool:
        """One decision; True if it changed anything."""
        busy = self.running_until is not None
        decision = self.policy.decide(now, self.queue, busy, self.predicted_until, cap=self.cap)
        self.wait_until = None
        dropped = set(decision.expired)
        start = max(now, self.predicted_until or now) if busy else now
        for i in sorted(dropped):
            item = self.queue[i]
            # Only what cannot finish even if it started alone when the device frees.
            assert start >= item.deadline - self.policy.latency_model.predict(1)
            self.expired.append(item.id)
        live = [item for i, item in enumerate(self.queue) if i not in dropped]
        self.queue = live
        if isinstance(decision, Dispatch):
            assert not busy, "dispatched while the device was busy"
            assert 1 <= decision.n <= min(self.cap, len(live))
            batch, self.queue = live[: decision.n], live[decision.n :]
            t1 = self.policy.latency_model.predict(1)
            for item in batch:
                assert now < item.deadline - t1, "dispatched an item that cannot make it"
                # Never past max_wait while the device was free.
                limit = max(item.enqueued_at + self.config.max_batch_wait_s, self.free_since)
                assert now <= limit + 1e-9, f"item {item.id} waited past max_wait"
            # Shrunk only to save deadlines; never so that fewer items are on time.
            head = live[: self.cap]
            assert decision.n == len(head) or now + self.predict(decision.n + 1) > min(
                item.deadline for item in head[: decision.n + 1]
            )
            assert self.on_time(now, batch) >= max(
                m for m in range(1, len(head) + 1) if self.on_time(now, head[:m]) == m
            )
            self.dispatched.extend(item.id for item in batch)
            self.batches.append(decision.n)
            self.running_size = decision.n
            self.running_until = now + self.service_s(decision.n)
            self.predicted_until = now + self.policy.latency_model.predict(decision.n)
            return True
        if not busy and live:
            assert decision.until is not None
            assert now < decision.until <= live[0].enqueued_at + self.config.max_batch_wait_s
            # Waiting never postpones the head past its latest start alone.
            assert decision.until + self.policy.latency_model.predict(1) <= live[0].deadline + 1e-9
            self.free_waits += 1
        self.wait_until = decision.until
        return bool(dropped)


arrival = st.tuples(
    st.one_of(st.just(0.0), st.floats(0.0, 0.05), st.floats(0.0, 0.5)),  # gap, s
    st.integers(1, 4),  # items in the request
    st.floats(0.001, 1.0),  # timeout, s
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    max_batch_size=st.integers(1, 16),
    max_batch_wait_ms=st.one_of(st.just(0.0), st.floats(0.0, 80.0)),
    extra_queue=st.integers(0, 40),
    cap=st.one_of(st.none(), st.integers(1, 16)),
    fixed_s=st.floats(0.0, 0.1),
    per_item_s=st.one_of(st.just(0.0), st.floats(0.0, 0.01)),
    tau_s=st.floats(0.01, 1.0),
    arrivals=st.lists(arrival, min_size=1, max_size=80),
)
def test_simulated_queues_keep_every_promise(
    max_batch_size: int,
    max_batch_wait_ms: float,
    extra_queue: int,
    cap: int | None,
    fixed_s: float,
    per_item_s: float,
    tau_s: float,
    arrivals: list[tuple[float, int, float]],
) -> None:
    config = BatchConfig(max_batch_size=max_batch_size, max_batch_wait_ms=max_batch_wait_ms,
                         max_queue_size=max_batch_size + extra_queue)
    effective_cap = max_batch_size if cap is None else max(1, min(cap, max_batch_size))
    sim = Sim(config, effective_cap, lambda b: fixed_s + per_item_s * b, tau_s)
    sim.run(arrivals)
    assert sim.dispatched == sorted(sim.dispatched), "FIFO order broken"
    assert max(sim.batches, default=0) <= effective_cap
    everything = sorted(sim.dispatched + sim.expired)
    assert everything == list(range(sim.admitted)), "an admitted item was lost or duplicated"


@settings(max_examples=60, deadline=None)
@given(
    max_batch_size=st.integers(2, 16),
    max_batch_wait_ms=st.floats(5.0, 80.0),
    fixed_s=st.floats(0.01, 0.1),
    bursts=st.lists(st.tuples(st.integers(1, 12), st.floats(0.0, 0.1)), min_size=5,
                    max_size=40),
    timeouts=st.lists(st.floats(0.05, 1.0), min_size=1, max_size=8),
)
def test_bursty_queues_wait_within_the_window(
    max_batch_size: int,
    max_batch_wait_ms: float,
    fixed_s: float,
    bursts: list[tuple[int, float]],
    timeouts: list[float],
) -> None:
    """Bursts of arrivals, often beyond what full batches serve: the policy then
    waits to fill batches, and every wait still ends by the oldest item's window
    and deadline (the checks in ``Sim.step``)."""
    config = BatchConfig(max_batch_size=max_batch_size, max_batch_wait_ms=max_batch_wait_ms,
                         max_queue_size=4 * max_batch_size)
    sim = Sim(config, max_batch_size, lambda b: fixed_s, arrival_time_constant_s=0.02)
    gaps = [pause if i == 0 else 0.0 for size, pause in bursts for i in range(size)]
    sim.run([(gap, 1, timeouts[i % len(timeouts)]) for i, gap in enumerate(gaps)])
    assert sim.dispatched == sorted(sim.dispatched)
    assert max(sim.batches, default=0) <= max_batch_size
    assert sorted(sim.dispatched + sim.expired) == list(range(sim.admitted))


def test_overload_simulation_exercises_waiting() -> None:
    """The property above is not vacuous: under overload the free device waits."""
    config = BatchConfig(max_batch_size=16, max_batch_wait_ms=40, max_queue_size=64)
    sim = Sim(config, 16, lambda b: 0.05, arrival_time_constant_s=0.02)
    # Bursts of 10 items every 30 ms: 333 items/s against 320 items/s in full batches.
    sim.run([(0.03 if i % 10 == 0 else 0.0, 1, 1.0) for i in range(400)])
    assert sim.free_waits > 0
    assert max(sim.batches) == 16
    assert sorted(sim.dispatched + sim.expired) == list(range(sim.admitted))


@settings(max_examples=40, deadline=None)
@given(gaps=st.lists(st.floats(0.0, 0.002), min_size=50, max_size=300))
def test_heavy_traffic_forms_batches_larger_than_one(gaps: list[float]) -> None:
    config = BatchConfig(max_batch_size=32, max_batch_wait_ms=20, max_queue_size=4096)
    sim = Sim(config, 32, lambda b: 0.02 + 0.0005 * b)
    sim.run([(gap, 1, 30.0) for gap in gaps])
    assert sim.expired == []
    assert sim.dispatched == list(range(len(gaps)))
    # Arrivals at least every 2 ms against 20 ms batches: later batches fill up.
    assert max(sim.batches) >= 5
