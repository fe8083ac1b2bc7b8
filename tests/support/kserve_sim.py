"""A test-side stand-in for the KServe controller, ported from KServe's own source.

The port lives in :mod:`tests.support.kserve` (one module per upstream area, each citing
the files and functions it follows); this module re-exports its public API.
Source: github.com/kserve/kserve at aaac4e294 (see ``tests/support/kserve/__init__.py``).
"""

from tests.support.kserve import KSERVE_DEFAULTS, KServeConfig, KServeSim

__all__ = ["KSERVE_DEFAULTS", "KServeConfig", "KServeSim"]
