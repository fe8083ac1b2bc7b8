"""Multi-model serving (issue 16): many registry versions on one predictor, loaded on
demand, evicted least recently used under a memory budget, one device shared fairly.

``ModelHost`` holds the models (``_host``); ``make_room`` decides evictions (``_residency``,
pure); ``scan`` finds the models of a directory (``_catalog``); ``measure`` and
``estimate`` size them (``_measure``); ``MultiModelRoutes`` is the HTTP side (repository
routes, load on demand); ``serve_multi`` the process (``_serve``). docs/MULTI_MODEL.md.
"""

from __future__ import annotations

from predictor.multi._catalog import Entry, scan
from predictor.multi._residency import Budget, Resident, Room, Size, make_room

__all__ = ["Budget", "Entry", "Resident", "Room", "Size", "make_room", "scan"]
