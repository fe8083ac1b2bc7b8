"""Dynamic batching, standard library only: the pure policy, its estimators, and the loop.

``BatchPolicy`` (``_policy``) decides, from the queue and an injected clock, whether
to admit an item, dispatch a batch or wait; it learns batch latency t(b) and the
arrival rate online (``_estimators``). ``Batcher`` (``_batcher``) is the asyncio
loop that carries those decisions out, one batch at a time per device in its own
executor thread, and ``run_isolating`` (``_isolation``) bisects a failing batch so
one bad item never fails its neighbours.
"""

from predictor.batching._batcher import Batcher
from predictor.batching._estimators import ArrivalRate, LatencyModel
from predictor.batching._fair import FairOrder, position
from predictor.batching._isolation import Outcome, is_out_of_memory, run_isolating
from predictor.batching._items import BatchStats
from predictor.batching._policy import Admission, BatchConfig, BatchPolicy, Dispatch, Wait

__all__ = [
    "Admission",
    "ArrivalRate",
    "BatchConfig",
    "BatchPolicy",
    "BatchStats",
    "Batcher",
    "Dispatch",
    "FairOrder",
    "LatencyModel",
    "Outcome",
    "Wait",
    "is_out_of_memory",
    "position",
    "run_isolating",
]
