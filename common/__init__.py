"""Small definitions every package shares, with no import of ours: a leaf of the house.

Today: durations as people write them on the command line (``90s``, ``500ms``,
``1.5h``), parsed and rendered back, and as Prometheus writes them (``5s``,
``1500ms``), and times as reports write them (``iso_utc``, ISO 8601 in UTC). And
``lazy_exports``, the ``__getattr__`` of a package whose heavy names load on first use.
And the root of the error tree, ``PlatformError``, which every package's errors
subclass (``InvalidDuration`` is one, and also a ``ValueError``). ``common.pages`` holds
the pieces of a self-contained HTML report page (style, escaping, inline SVG figures);
``common.tenants`` the tenants file (API key hashes, models, limits) that ``modelctl
tenants`` helps write and the predictor's ``--tenants_file`` reads.
"""

from common._durations import (
    InvalidDuration,
    format_duration_s,
    format_promql_duration,
    parse_duration_s,
)
from common._errors import PlatformError
from common._lazy import lazy_exports
from common._times import iso_utc, iso_utc_ms

__all__ = [
    "InvalidDuration",
    "PlatformError",
    "format_duration_s",
    "format_promql_duration",
    "iso_utc",
    "iso_utc_ms",
    "lazy_exports",
    "parse_duration_s",
]
