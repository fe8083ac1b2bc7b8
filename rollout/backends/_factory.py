"""``make_backend``: the one way to build a traffic backend, by name.

``kserve`` takes ``isvc`` and either a ``kube`` client or the ``kubeconfig`` and
``context`` to build one from (``namespace`` defaults to the context's); ``local``
takes ``isvc`` (the dev environment's name), ``state_dir`` and ``canary_args``. Any
other keyword goes to the backend's constructor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rollout._errors import UnknownBackend
from rollout.backends._interface import TrafficBackend

if TYPE_CHECKING:
    from rollout.backends._kserve._kube import KubeClient

BackendFactory = Callable[..., TrafficBackend]


def _kserve_factory(*, isvc: str, namespace: str | None = None, kube: KubeClient | None = None,
                    kubeconfig: str | None = None, context: str | None = None,
                    **kwargs: Any) -> TrafficBackend:
    from rollout.backends._kserve._backend import KServeBackend
    from rollout.backends._kserve._kube import KubeClient

    if kube is None:
        kube = KubeClient.from_kubeconfig(kubeconfig, context)
    return KServeBackend(kube, namespace or kube.namespace, isvc, **kwargs)


def _local_factory(**kwargs: Any) -> TrafficBackend:
    from rollout.backends._local import LocalNginxBackend

    return LocalNginxBackend.open(**kwargs)


_FACTORIES: dict[str, BackendFactory] = {"kserve": _kserve_factory, "local": _local_factory}


def backend_names() -> tuple[str, ...]:
    """The names ``make_backend`` knows, sorted."""
    return tuple(sorted(_FACTORIES))


def make_backend(name: str, **kwargs: Any) -> TrafficBackend:
    """Build the backend called ``name``; an unknown name is an error, never a fallback."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        known = ", ".join(backend_names())
        raise UnknownBackend(f"unknown traffic backend {name!r} (known: {known})") from None
    return factory(**kwargs)
