"""Fixtures shared by every test package, and the repository root on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Fixtures that tests in more than one folder use (a unit folder and tests/system/):
# registered once here, so a session fixture starts its processes once per run.
pytest_plugins = [
    "tests.support.cluster.fixtures",
    "tests.support.devstack",
    "tests.support.fleet",
    "tests.support.manifests",
    "tests.support.multi",
    "tests.support.predictor",
    "tests.support.redis",
    "tests.support.redis_ha",
]
