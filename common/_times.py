"""Times as reports write them: ISO 8601 in UTC, from a datetime or epoch milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime


def iso_utc(value: datetime | None) -> str | None:
    """``value`` in UTC as ISO 8601 (None stays None)."""
    return value.astimezone(UTC).isoformat() if value is not None else None


def iso_utc_ms(value: float | None) -> str | None:
    """Milliseconds since the epoch (DuckDB's ``epoch_ms``) in UTC as ISO 8601."""
    if value is None:
        return None
    return datetime.fromtimestamp(int(value) / 1000.0, tz=UTC).isoformat()
