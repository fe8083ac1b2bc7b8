"""Online estimators the batching policy learns from: batch latency and arrival rate.

Pure: no I/O, time passed in as seconds of a monotonic clock.
"""

from __future__ import annotations

import math

# A batch-size spread below this (in items squared) cannot tell slope from noise.
_MIN_SIZE_VARIANCE = 0.25


def is_int(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """A finite int or float that is not a bool."""
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    )


class LatencyModel:
    """Batch latency ``t(b) = a + c*b``, learnt online from observed batches.

    The fit is least squares with exponentially decaying weights (``decay`` per
    observation), so it follows a device that warms up or slows down. Before any
    observation it predicts ``prior_s`` for every size. Both coefficients are
    kept non-negative; while the observed sizes do not vary enough to tell the
    slope from noise, the slope keeps its last value (0 at first).
    """

    def __init__(self, prior_s: float = 0.01, *, decay: float = 0.95) -> None:
        if not is_number(prior_s) or prior_s < 0:
            raise ValueError(f"prior_s must be a finite number >= 0, got {prior_s!r}")
        if not is_number(decay) or not 0 < decay < 1:
            raise ValueError(f"decay must be between 0 and 1, got {decay!r}")
        self._decay = decay
        self._intercept_s = float(prior_s)
        self._per_item_s = 0.0
        self._observations = 0
        # Decayed sums of weights, x, y, x*x and x*y.
        self._sw = self._sx = self._sy = self._sxx = self._sxy = 0.0

    @property
    def observations(self) -> int:
        """How many batches the model has seen."""
        return self._observations

    @property
    def intercept_s(self) -> float:
        """``a``: the fixed cost of a batch, in seconds."""
        return self._intercept_s

    @property
    def per_item_s(self) -> float:
        """``c``: the cost of each item in a batch, in seconds."""
        return self._per_item_s

    def observe(self, batch_size: int, seconds: float) -> None:
        """Learn from one batch of ``batch_size`` items that took ``seconds``."""
        if not is_int(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if not is_number(seconds) or seconds < 0:
            raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
        d, x, y = self._decay, float(batch_size), float(seconds)
        self._sw = self._sw * d + 1.0
        self._sx = self._sx * d + x
        self._sy = self._sy * d + y
        self._sxx = self._sxx * d + x * x
        self._sxy = self._sxy * d + x * y
        self._observations += 1
        self._refit()

    def _refit(self) -> None:
        mean_x, mean_y = self._sx / self._sw, self._sy / self._sw
        var_x = self._sxx / self._sw - mean_x * mean_x
        slope = self._per_item_s
        if var_x >= _MIN_SIZE_VARIANCE:
            slope = (self._sxy / self._sw - mean_x * mean_y) / var_x
        slope = max(0.0, slope)
        intercept = mean_y - slope * mean_x
        if intercept < 0:
            # The best line through the origin instead (sxx > 0: sizes are >= 1).
            intercept, slope = 0.0, max(0.0, self._sxy / self._sxx)
        self._intercept_s, self._per_item_s = intercept, slope

    def predict(self, batch_size: int) -> float:
        """Predicted seconds to run a batch of ``batch_size`` items (0 for none)."""
        if batch_size <= 0:
            return 0.0
        return self._intercept_s + self._per_item_s * batch_size


class ArrivalRate:
    """Items per second, as an exponentially decaying count of recent arrivals.

    The count decays with ``time_constant_s``, so the rate falls back towards 0
    while nothing arrives.
    """

    def __init__(self, time_constant_s: float = 1.0) -> None:
        if not is_number(time_constant_s) or time_constant_s <= 0:
            raise ValueError(f"time_constant_s must be > 0, got {time_constant_s!r}")
        self._tau = float(time_constant_s)
        self._level = 0.0
        self._last_at: float | None = None

    @property
    def last_arrival(self) -> float | None:
        """When the last items arrived, or None before any."""
        return self._last_at

    def record(self, now: float, n_items: int = 1) -> None:
        """Count ``n_items`` arriving at ``now``."""
        self._level = self._decayed(now) + n_items
        self._last_at = now if self._last_at is None else max(self._last_at, now)

    def rate(self, now: float) -> float:
        """Estimated arrival rate at ``now``, in items per second."""
        return self._decayed(now) / self._tau

    def _decayed(self, now: float) -> float:
        if self._last_at is None:
            return 0.0
        return self._level * math.exp(-max(0.0, now - self._last_at) / self._tau)
