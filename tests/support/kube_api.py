"""An emulated Kubernetes API server on 127.0.0.1, for the official client to talk HTTP to.

``kmock.KubernetesEmulator`` stores objects; this subclass adds what a real API server
does and the tests rely on:

* ``metadata.resourceVersion`` on every write that changes something (an update that
  changes nothing keeps it, as etcd's guaranteed update does), and a 409 Conflict when a
  write carries a ``resourceVersion`` that is no longer current;
* PUT replaces and PATCH merges (a dict body: RFC 7386 merge patch, also for strategic
  merge patches; a list body: RFC 6902 JSON patch); either way ``uid``,
  ``creationTimestamp``, ``name``, ``namespace`` and ``deletionTimestamp`` stay the
  server's;
* ``metadata.generation`` 1 on create, bumped when the update changes what the kind's
  registry strategy counts: for custom resources anything but ``metadata`` and ``status``
  (apiextensions-apiserver ``customResourceStrategy.PrepareForUpdate``), for Deployments
  ``spec`` or ``metadata.annotations`` (pkg/registry/apps/deployment/strategy.go
  ``PrepareForUpdate``), for other built-in kinds ``spec``;
* Deployment defaults (``SetDefaults_Deployment``) applied to what is stored;
* the ``status`` subresource: a write to ``.../status`` changes only ``status``, a write
  to the object never does, and a create drops it (``PrepareForCreate``);
* InferenceServices go through KServe's validating webhook
  (``cli/_deploycheck/webhook/_isvc.py`` ``admit_inferenceservice``) on create and update,
  denied as the API server reports a controller-runtime validator's denial: 403
  Forbidden, ``admission webhook "inferenceservice.kserve-webhook-server.validator"
  denied the request: <error>`` (controller-runtime pkg/webhook/admission/response.go
  ``ValidationResponse``; apiserver pkg/admission/plugin/webhook/errors ``ToStatusErr``);
* POST answers 201 Created; PUT works (kmock itself knows only PATCH);
* a request log with each request's User-Agent, so tests can prove that a dry run sends
  no writes; ``writes()`` leaves out the emulated controllers' own (tests/support/kserve,
  ``User-Agent: kserve-sim/...``) unless asked;
* faults: ``race_next_patch`` (another writer's change lands between a client's read and
  its write, to drive the 409 path deterministically; never on the controllers' writes),
  ``fail_next``, ``delay_next``.

The server runs its asyncio loop in a daemon thread; ``stop()`` ends it.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import jsonpatch
import kmock
import yaml
from kmock._internal import enums, k8s

ISVC = "serving.kserve.io/v1beta1/inferenceservices"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
WEBHOOK = "inferenceservice.kserve-webhook-server.validator"
CONTROLLER_AGENT = "kserve-sim"  # the User-Agent of tests/support/kserve's controllers
# resource -> (kind, namespaced): what the emulated cluster serves.
RESOURCES: dict[str, tuple[str, bool]] = {
    ISVC: ("InferenceService", True),
    "v1/events": ("Event", True),
    "v1/configmaps": ("ConfigMap", True),
    "v1/services": ("Service", True),
    "apps/v1/deployments": ("Deployment", True),
    "autoscaling/v2/horizontalpodautoscalers": ("HorizontalPodAutoscaler", True),
    "networking.k8s.io/v1/ingresses": ("Ingress", True),
    "gateway.networking.k8s.io/v1/httproutes": ("HTTPRoute", True),
    "serving.knative.dev/v1/services": ("Service", True),
    "serving.knative.dev/v1/configurations": ("Configuration", True),
    "serving.knative.dev/v1/routes": ("Route", True),
    "serving.knative.dev/v1/revisions": ("Revision", True),
    "coordination.k8s.io/v1/leases": ("Lease", True),
    "keda.sh/v1alpha1/scaledobjects": ("ScaledObject", True),
    "apiextensions.k8s.io/v1/customresourcedefinitions": ("CustomResourceDefinition", False),
}
CUSTOM_GROUPS = frozenset({"serving.kserve.io", "serving.knative.dev",
                           "gateway.networking.k8s.io", "keda.sh"})
NO_STATUS = frozenset({"v1/events", "v1/configmaps", "coordination.k8s.io/v1/leases"})


@dataclass(frozen=True)
class Logged:
    """One request the emulated server received."""

    method: str
    path: str
    body: Any
    agent: str = ""  # the User-Agent header

    @property
    def by_controller(self) -> bool:
        """Sent by the emulated cluster's controllers (tests/support/kserve)."""
        return self.agent.startswith(CONTROLLER_AGENT)


@attrs.frozen
class WebhookDenied(k8s.KubernetesError):
    """A validating webhook's refusal: a Status with no details."""


def _key(resource: Any) -> str:
    group = resource.group or ""
    return f"{group}/{resource.version}/{resource.plural}" if group else (
        f"{resource.version}/{resource.plural}")


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge(base: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(base) if isinstance(base, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _defaulted(key: str, obj: dict[str, Any]) -> dict[str, Any]:
    """API defaulting on decode, for the fields the tests read: kubernetes
    pkg/apis/apps/v1/defaults.go ``SetDefaults_Deployment`` (replicas 1, RollingUpdate
    25%/25%, revisionHistoryLimit 10, progressDeadlineSeconds 600)."""
    if key != "apps/v1/deployments" or not isinstance(obj.get("spec"), dict):
        return obj
    deployment_defaults(obj["spec"])
    return obj


def deployment_defaults(spec: dict[str, Any]) -> dict[str, Any]:
    """kubernetes pkg/apis/apps/v1/defaults.go ``SetDefaults_Deployment`` on a
    Deployment's ``spec``, in place (returned for convenience)."""
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    return spec


def _generation_moves(key: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    group = key.split("/")[0] if key.count("/") == 2 else ""
    if group in CUSTOM_GROUPS:
        def content(obj: Mapping[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in obj.items() if k not in ("metadata", "status")}
        return content(before) != content(after)
    if before.get("spec") != after.get("spec"):
        return True
    if key == "apps/v1/deployments":
        return ((before.get("metadata") or {}).get("annotations") or {}) != (
            (after.get("metadata") or {}).get("annotations") or {})
    return False


def _admit(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> None:
    from deploycheck.webhook._isvc import admit_inferenceservice

    errors = admit_inferenceservice(new, old)
    if errors:
        raise WebhookDenied(status=403, reason="Forbidden",
                            message=f'admission webhook "{WEBHOOK}" denied the request: '
                                    f"{errors[0]}")


@attrs.define(kw_only=True)
class _Emulator(kmock.KubernetesEmulator):
    _rv: int = 0
    _write_lock: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)
    log: list[Logged] = attrs.field(factory=list, init=False)
    races: list[tuple[str | None, str, str, dict[str, Any]]] = attrs.field(factory=list,
                                                                           init=False)
    outage: int = attrs.field(default=0, init=False)
    outage_status: int = attrs.field(default=503, init=False)
    delays: list[tuple[float, bool]] = attrs.field(factory=list, init=False)

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        if isinstance(exc, WebhookDenied):
            return aiohttp.web.json_response({
                "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                "message": exc.message, "reason": exc.reason, "code": exc.status},
                status=exc.status)
        return await super()._render_error(exc)

    async def _handle(self, request: Any) -> Any:
        agent = str((request.headers or {}).get("User-Agent", ""))
        self.log.append(Logged(str(request.method.value).upper(), request.url.path, request.data,
                               agent))
        if self.outage > 0:
            self.outage -= 1
            raise k8s.KubernetesError(status=self.outage_status, reason="ServiceUnavailable",
                                      message="the API server is restarting")
        delay_s, after = self.delays.pop(0) if self.delays else (0.0, False)
        if delay_s and not after:
            await asyncio.sleep(delay_s)  # the client gives up; the request still lands
        try:
            return await self._handle_logged(request)
        finally:
            if delay_s and after:
                await asyncio.sleep(delay_s)  # it landed, but the answer comes too late
            # kmock matches each request by scanning every request it has kept, so
            # matching slows down linearly; keep only the recent ones (``log`` has all).
            del self._requests[:-32]

    async def _handle_logged(self, request: Any) -> Any:
        if (request.resource is not None and request.name is not None and request.action is None
                and str(request.method.value).upper() == "PUT"):
            request = self._swap(request, action=enums.action.UPDATE)  # kmock knows no PUT
        writes = (enums.action.CREATE, enums.action.UPDATE)
        if request.resource is None or request.action not in writes:
            return await super()._handle(request)
        async with self._write_lock:  # one write at a time: check-then-apply is atomic
            if request.action == enums.action.CREATE:
                request = self._swap(request, data=self._prepare_create(request))
                response = await super()._handle(request)
                if response.status == 200 and not response.prepared:
                    response.set_status(201)  # Created, as the API server answers a POST
                return response
            self._run_race(request)
            data = self._prepare_update(request)
            if data is not None:
                request = self._swap(request, data=data)
            return await super()._handle(request)

    def _swap(self, request: Any, **changes: Any) -> Any:
        """The request with ``changes``, in the place of the original (kmock finds
        requests by identity)."""
        evolved = attrs.evolve(request, **changes)
        for index in range(len(self._requests) - 1, -1, -1):
            if self._requests[index] is request:
                self._requests[index] = evolved
                break
        return evolved

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _prepare_create(self, request: Any) -> Any:
        data = request.data
        if not isinstance(data, dict):
            return data  # the emulator rejects the body itself
        data = copy.deepcopy(data)
        key = _key(request.resource)
        meta = data.setdefault("metadata", {})
        if request.namespace and RESOURCES.get(key, ("", True))[1]:
            meta.setdefault("namespace", request.namespace)
        meta["resourceVersion"] = self._next_rv()
        meta["generation"] = 1
        meta["uid"] = secrets.token_hex(8)
        meta["creationTimestamp"] = _now()
        if key not in NO_STATUS:
            data.pop("status", None)
        data = _defaulted(key, data)
        if key == ISVC:
            existing = self._stored(request.resource, meta.get("namespace"), meta.get("name"))
            if existing is None:
                _admit(data, None)
        return data

    def _stored(self, resource: Any, namespace: str | None, name: str | None) -> Any:
        key: Any = (resource, namespace, name)
        if key not in self._objects:  # ObjectsArray has no .get()
            return None
        obj = self._objects[key]
        return None if obj.deleted else obj

    def _run_race(self, request: Any) -> None:
        agent = str((request.headers or {}).get("User-Agent", ""))
        if request.subresource == "status" or agent.startswith(CONTROLLER_AGENT):
            return  # races are for the client under test, not for the controllers
        for index, (resource, namespace, name, patch) in enumerate(self.races):
            if resource in (None, _key(request.resource)) and (namespace, name) == (
                    request.namespace, request.name):
                del self.races[index]
                obj = self._stored(request.resource, request.namespace, request.name)
                if obj is not None:
                    current = obj.raw
                    new = self._updated(_key(request.resource), current, _merge(current, patch),
                                        status=False)
                    obj.patch([{"op": "replace", "path": "", "value": new}])
                return

    def _updated(self, key: str, current: dict[str, Any], wanted: Any, *,
                 status: bool) -> dict[str, Any]:
        """``wanted`` as the server stores it: only its status (``status``) or all but its
        status, the server's metadata kept, generation and resourceVersion moved."""
        wanted = dict(wanted) if isinstance(wanted, Mapping) else {}
        if status:
            new = copy.deepcopy(current)
            if "status" in wanted:
                new["status"] = copy.deepcopy(wanted["status"])
            else:
                new.pop("status", None)
        else:
            new = copy.deepcopy(wanted)
            new.pop("status", None)
            if "status" in current and key not in NO_STATUS:
                new["status"] = copy.deepcopy(current["status"])
        meta = dict(new.get("metadata") or {})
        old_meta = current.get("metadata") or {}
        for field in ("uid", "creationTimestamp", "name", "namespace", "deletionTimestamp",
                      "generation", "resourceVersion"):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        new["metadata"] = meta
        new = _defaulted(key, new)
        if _generation_moves(key, current, new):
            meta["generation"] = int(old_meta.get("generation") or 1) + 1
        if new != current:
            meta["resourceVersion"] = self._next_rv()
        return new

    def _prepare_update(self, request: Any) -> list[dict[str, Any]] | None:
        obj = self._stored(request.resource, request.namespace, request.name)
        data = request.data
        if obj is None or not isinstance(data, dict | list):
            return None  # the emulator answers 404 (or rejects the body) itself
        current = obj.raw
        key = _key(request.resource)
        if isinstance(data, dict):
            wanted = (data.get("metadata") or {}).get("resourceVersion")
            have = (current.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and str(wanted) != str(have):
                raise k8s.KubernetesError(
                    status=409, reason="Conflict",
                    message=(f'Operation cannot be fulfilled on {request.resource.plural} '
                             f'"{request.name}": the object has been modified; please apply '
                             "your changes to the latest version and try again"))
        if str(request.method.value).upper() == "PUT":
            merged: Any = data
        elif isinstance(data, list):
            try:
                merged = jsonpatch.apply_patch(copy.deepcopy(current), data)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise k8s.KubernetesError(status=422, reason="Invalid", message=str(exc)) from exc
        else:
            merged = _merge(current, data)
        new = self._updated(key, current, merged, status=request.subresource == "status")
        if key == ISVC and request.subresource != "status":
            _admit(new, current)
        return [{"op": "replace", "path": "", "value": new}]


class KubeAPI:
    """The emulated API server in a background thread, with helpers for tests."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="kube-api", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._emulator: _Emulator | None = None
        self._error: BaseException | None = None
        self.port = 0

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 10.0) -> KubeAPI:
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError("emulated Kubernetes API did not start")
        if self._error is not None:
            raise RuntimeError("emulated Kubernetes API failed") from self._error
        return self

    def _serve(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            emulator = _Emulator()
            for resource, (kind, namespaced) in RESOURCES.items():
                subresources = set() if resource in NO_STATUS else {"status"}
                emulator.resources[resource] = kmock.ResourceInfo(
                    kind=kind, namespaced=namespaced, subresources=subresources)
            async with emulator, kmock.Server(emulator) as server:
                self._emulator = emulator
                self.port = server.port
                self._ready.set()
                await self._stop.wait()

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to start()
            self._error = exc
            self._ready.set()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)

    # -- inspection -------------------------------------------------------------------
    @property
    def log(self) -> list[Logged]:
        assert self._emulator is not None
        return list(self._emulator.log)

    def writes(self, since: int = 0, *, include_status: bool = False,
               include_controllers: bool = False) -> list[Logged]:
        """Write requests (POST, PUT, PATCH, DELETE) received after request number ``since``;
        without ``include_status``, not those to ``/status``; without
        ``include_controllers``, not those of the KServe stand-in and the cluster under it
        (tests/support/kserve, which sends ``User-Agent: kserve-sim``)."""
        return [r for r in self.log[since:] if r.method in WRITE_METHODS
                and (include_status or not r.path.endswith("/status"))
                and (include_controllers or not r.by_controller)]

    def race_next_patch(self, namespace: str, name: str, patch: dict[str, Any], *,
                        resource: str | None = None) -> None:
        """Apply ``patch`` (a merge patch) as another writer just before the next write
        (PATCH or PUT, not to ``/status``, not by the emulated controllers) to ``name``
        (of ``resource``, e.g. ``"v1/configmaps"``, if given) lands."""
        assert self._emulator is not None
        self._emulator.races.append((resource, namespace, name, patch))

    def fail_next(self, requests: int, status: int = 503) -> None:
        """Answer the next ``requests`` requests with ``status`` (503: an API server that
        restarts; 500: one that fails)."""
        assert self._emulator is not None
        self._emulator.outage_status = status
        self._emulator.outage = requests

    def clear_faults(self) -> None:
        """Drop every failure, delay and race still waiting for a request."""
        assert self._emulator is not None
        self._emulator.outage = 0
        self._emulator.delays.clear()
        self._emulator.races.clear()

    def delay_next(self, requests: int, seconds: float, *, after: bool = False) -> None:
        """Hold the next ``requests`` requests for ``seconds`` (longer than a client's timeout
        makes it a timeout): before handling them, or ``after`` (the change lands, the
        answer is late)."""
        assert self._emulator is not None
        self._emulator.delays.extend([(seconds, after)] * requests)

    # -- clients ----------------------------------------------------------------------
    def api_client(self) -> Any:
        from kubernetes import client

        return client.ApiClient(client.Configuration(host=self.host))

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig whose current context points at this server."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulated", "cluster": {"server": self.host}}],
            "users": [{"name": "tester", "user": {"token": "not-a-secret"}}],
            "contexts": [{"name": "emulated", "context": {
                "cluster": "emulated", "user": "tester", "namespace": namespace}}],
            "current-context": "emulated",
        }
        path.write_text(yaml.safe_dump(config))
        return path
