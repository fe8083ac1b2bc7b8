"""Trimming what every consumer group has read and acknowledged, and nothing else.

Redis facts this relies on (Redis's command documentation):

- ``XTRIM key MINID ~ id`` evicts entries whose IDs are lower than ``id`` and keeps every
  entry at or above it; ``~`` (approximate) may keep a few more, never fewer.
- ``XINFO GROUPS key`` reports each group's ``last-delivered-id``: every entry above it
  is unread by that group.
- ``XPENDING key group`` (the summary form) reports the group's pending count and the
  smallest pending ID: every entry below it that the group has read is acknowledged.

So an entry below ``min(smallest pending ID, last-delivered-id)`` of every group has been
read and acknowledged by all of them, and trimming below that floor loses nothing. The
floor only rises while we compute it (new deliveries and new pending entries have higher
IDs), so a trim from a stale floor is still safe. Redis 8.2's ``XTRIM ... ACKED`` does
the same in one command; Debian's 7.0 has no such option.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _parse(entry_id: Any) -> tuple[int, int]:
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    millis, _, seq = text.partition("-")
    return int(millis), int(seq or 0)


def trim_floor(groups: Sequence[Mapping[str, Any]],
               pending_min: Mapping[str, Any | None]) -> str | None:
    """The ID below which every group has read and acknowledged every entry, or None
    when there is no group (nothing may be trimmed: an entry may still be unread).

    ``groups`` is XINFO GROUPS's reply, ``pending_min`` each group's smallest pending ID
    (None when nothing is pending)."""
    if not groups:
        return None
    floor: tuple[int, int] | None = None
    for group in groups:
        name = group["name"].decode() if isinstance(group["name"], bytes) else group["name"]
        bound = _parse(group["last-delivered-id"])
        smallest = pending_min.get(name)
        if smallest is not None:
            bound = min(bound, _parse(smallest))
        floor = bound if floor is None else min(floor, bound)
    assert floor is not None
    return None if floor == (0, 0) else f"{floor[0]}-{floor[1]}"


async def trim_acknowledged(client: Any, stream: str, *, approximate: bool = True) -> int:
    """Evict the entries every group has read and acknowledged; how many went.

    Approximate by default (whole macro nodes only: cheap, may keep a few more)."""
    groups = await client.xinfo_groups(stream)
    pending_min: dict[str, Any | None] = {}
    for group in groups:
        name = group["name"].decode() if isinstance(group["name"], bytes) else group["name"]
        summary = await client.xpending(stream, name)
        pending_min[name] = summary.get("min") if summary.get("pending") else None
    floor = trim_floor(groups, pending_min)
    if floor is None:
        return 0
    removed: int = await client.xtrim(stream, minid=floor, approximate=approximate)
    return removed
