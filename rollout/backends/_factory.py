"""``make_backend``: the one way to build a traffic backend, by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rollout._errors import UnknownBackend
from rollout.backends._interface import TrafficBackend

BackendFactory = Callable[..., TrafficBackend]


def _kserve_factory(**kwargs: Any) -> TrafficBackend:
    from rollout.backends._kserve._backend import KServeBackend

    return KServeBackend(**kwargs)


def _local_factory(**kwargs: Any) -> TrafficBackend:
    from rollout.backends._local import LocalNginxBackend

    return LocalNginxBackend.open(**kwargs)


_FACTORIES: dict[str, BackendFactory] = {"kserve": _kserve_factory, "local": _local_factory}


def backend_names() -> tuple[str, ...]:
    return tuple(sorted(_FACTORIES))


def make_backend(name: str, **kwargs: Any) -> TrafficBackend:
    """Build the backend called ``name``; an unknown name is an error, never a fallback."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        known = ", ".join(backend_names())
        raise UnknownBackend(f"unknown traffic backend {name!r} (known: {known})") from None
    return factory(**kwargs)
