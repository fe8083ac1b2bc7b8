"""The predictions a label may still find: the last answered exchanges, bounded.

The tap hands every answered predict exchange to ``RecentOutputs.add`` on the event
loop (a dict insert, no parsing). A label looks its request ID up (``take``); the output
is decoded then, once, by the capture's own record builder. At most ``max_entries``
exchanges and ``max_bytes`` of their bodies are kept, oldest out first: a label for an
older prediction is counted as unmatched here, and is still written to the label files,
where ``modelctl feedback report`` joins it with the captures.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from predictor.tap._exchange import Exchange


@dataclass
class Recent:
    exchange: Exchange
    labelled: bool = False


class RecentOutputs:
    """Request ID to its answered exchange, least recent out first."""

    def __init__(self, max_entries: int = 100_000, max_bytes: int = 64 * 2**20) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._by_id: OrderedDict[str, Recent] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._by_id)

    def add(self, exchange: Exchange) -> None:
        if exchange.is_shadow or not exchange.request_id:
            return
        old = self._by_id.pop(exchange.request_id, None)
        if old is not None:
            self._bytes -= old.exchange.size_bytes
        self._by_id[exchange.request_id] = Recent(exchange)
        self._bytes += exchange.size_bytes
        while self._by_id and (len(self._by_id) > self.max_entries
                               or self._bytes > self.max_bytes):
            _, gone = self._by_id.popitem(last=False)
            self._bytes -= gone.exchange.size_bytes

    def get(self, request_id: str) -> Recent | None:
        return self._by_id.get(request_id)
