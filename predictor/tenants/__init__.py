"""Tenants: API keys, per-tenant model access, limits and metrics (``--tenants_file``).

``common.tenants`` reads the tenants file (key hashes, models, limits, weights) and
re-reads it when it changes; ``_limits`` admits each request by its tenant's rate (the
``limits`` library, in memory or in the queue's Redis) and requests in flight;
``_metrics`` counts per tenant with bounded cardinality; ``_edge`` is the ASGI layer that
puts them in front of the routes, and ``guard`` builds it from the server's flags.
"""

from predictor.tenants._edge import CURRENT, TENANT, TenantMiddleware, guard, key_of, note_tokens
from predictor.tenants._limits import TenantLimits
from predictor.tenants._metrics import TenantMetrics

__all__ = ["CURRENT", "TENANT", "TenantLimits", "TenantMetrics", "TenantMiddleware", "guard",
           "key_of", "note_tokens"]
