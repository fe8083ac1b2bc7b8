"""The CustomResourceDefinitions a cluster serves, read with the official client: the
schemas its KServe, Istio, KEDA, Gateway API and prometheus-operator versions define.

One call, ``GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions`` (paged), with
the kubeconfig found as kubectl finds it. Library errors become one-line
``DeployError``s here. The body is parsed as plain JSON: the client's typed models would
drop nothing we need but take seconds to build for the InferenceService schema.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deploycheck._crds import CrdIndex, CrdSource
from deploycheck._errors import DeployError

PAGE = 100


def kubeconfig_paths(kubeconfig: str | None) -> list[Path]:
    """The kubeconfig files the client would read: ``kubeconfig``, else each entry of
    $KUBECONFIG, else ~/.kube/config; only those that exist."""
    raw = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    return [
        Path(p).expanduser() for p in raw.split(os.pathsep) if p and Path(p).expanduser().is_file()
    ]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or exc.__class__.__name__
    return text.splitlines()[0][:300]


def _api_client(kubeconfig: str | None, context: str | None) -> Any:
    from kubernetes import config

    paths = kubeconfig_paths(kubeconfig)
    shown = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    if not paths:
        raise DeployError(f"no kubeconfig at {shown}: pass --kubeconfig FILE, or --crds DIR")
    new_client: Callable[..., Any] = config.new_client_from_config  # untyped upstream
    try:
        return new_client(
            config_file=os.pathsep.join(str(p) for p in paths),
            context=context,
            persist_config=False,
        )
    except (config.ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        raise DeployError(f"kubeconfig {shown}: {_one_line(exc)}") from exc


def _api_error(host: str, exc: Any) -> DeployError:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or ""
    detail = reason
    with contextlib.suppress(ValueError, AttributeError):
        detail = json.loads(getattr(exc, "body", "") or "{}").get("message") or reason
    if status in (401, 403):
        what = "may not list customresourcedefinitions.apiextensions.k8s.io"
        return DeployError(f"cluster {host} {what} ({status} {detail}): pass --crds DIR")
    return DeployError(f"cannot read CRDs from cluster {host}: {status} {detail}".rstrip())


def read_cluster_crds(
    kubeconfig: str | None = None, context: str | None = None, *, timeout_s: float = 30.0
) -> CrdIndex:
    """Every CustomResourceDefinition the cluster of ``kubeconfig``/``context`` serves."""
    from kubernetes import client
    from urllib3.exceptions import HTTPError

    api_client = _api_client(kubeconfig, context)
    host = str(api_client.configuration.host)
    api = client.ApiextensionsV1Api(api_client)
    docs: list[Any] = []
    token: str | None = None
    try:
        while True:
            kwargs: dict[str, Any] = {"limit": PAGE, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            response = api.list_custom_resource_definition(_request_timeout=timeout_s, **kwargs)
            body = json.loads(response.data)  # type: ignore[attr-defined]  # raw response
            docs += [
                {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", **d}
                for d in body.get("items") or []
                if isinstance(d, dict)
            ]
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                break
    except client.ApiException as exc:
        raise _api_error(host, exc) from exc
    except (HTTPError, OSError) as exc:
        raise DeployError(f"cannot reach cluster {host}: {_one_line(exc)}") from exc
    except ValueError as exc:
        raise DeployError(f"cluster {host} answered a CRD list that is not JSON") from exc
    finally:
        api_client.close()
    source = CrdSource("cluster", host, len(docs))
    return CrdIndex.from_documents(docs, source, origin=f"cluster {host}")
