"""A test-side stand-in for the KServe controller, ported from KServe's own source.

The port lives in :mod:`tests.support.kserve` (one module per upstream area, each citing
the files and functions it follows); this module re-exports its public API.
"""

from tests.support.kserve import KSERVE_DEFAULTS, KServeConfig, KServeSim

__all__ = ["KSERVE_DEFAULTS", "KServeConfig", "KServeSim"]
