"""An emulated Kubernetes API server on 127.0.0.1, for the official client to talk HTTP to.

``kmock.KubernetesEmulator`` stores objects and merges patches; this subclass adds
what a real API server does and the rollout relies on:

* ``metadata.resourceVersion`` on every write, and a 409 Conflict when a patch
  carries a ``resourceVersion`` that is no longer current (optimistic concurrency);
* ``metadata.generation`` bumped when ``spec`` changes;
* the ``status`` subresource: a patch to ``.../status`` changes only ``status``,
  a patch to the object never changes ``status``;
* a request log, so tests can prove that a dry run sends no writes;
* ``race_next_patch``: make another writer's change land between a client's read
  and its write, to drive the 409 path deterministically.

The server runs its asyncio loop in a daemon thread; ``stop()`` ends it.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attrs
import kmock
import yaml
from kmock._internal import enums, k8s

ISVC = "serving.kserve.io/v1beta1/inferenceservices"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Logged:
    """One request the emulated server received."""

    method: str
    path: str
    body: Any


@attrs.define(kw_only=True)
class _Emulator(kmock.KubernetesEmulator):
    _rv: int = 0
    _write_lock: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)
    log: list[Logged] = attrs.field(factory=list, init=False)
    races: list[tuple[str, str, dict[str, Any]]] = attrs.field(factory=list, init=False)
    outage: int = attrs.field(default=0, init=False)
    outage_status: int = attrs.field(default=503, init=False)
    delays: list[tuple[float, bool]] = attrs.field(factory=list, init=False)

    async def _handle(self, request: Any) -> Any:
        self.log.append(Logged(str(request.method.value).upper(), request.url.path, request.data))
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
        writes = (enums.action.CREATE, enums.action.UPDATE)
        if request.resource is None or request.action not in writes:
            return await super()._handle(request)
        async with self._write_lock:  # one write at a time: check-then-apply is atomic
            if request.action == enums.action.CREATE:
                self._prepare_create(request.data)
            else:
                self._run_race(request)
                self._prepare_update(request)
            return await super()._handle(request)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _prepare_create(self, data: dict[str, Any]) -> None:
        meta = data.setdefault("metadata", {})
        meta["resourceVersion"] = self._next_rv()
        meta.setdefault("generation", 1)
        meta.setdefault("uid", secrets.token_hex(8))

    def _stored(self, request: Any) -> Any:
        key = (request.resource, request.namespace, request.name)
        if key not in self._objects:  # ObjectsArray has no .get()
            return None
        obj = self._objects[key]
        return None if obj.deleted else obj

    def _run_race(self, request: Any) -> None:
        for index, (namespace, name, patch) in enumerate(self.races):
            if namespace == request.namespace and name == request.name:
                del self.races[index]
                obj = self._stored(request)
                if obj is not None:
                    obj.patch({**patch, "metadata": {**patch.get("metadata", {}),
                                                     "resourceVersion": self._next_rv()}})
                return

    def _prepare_update(self, request: Any) -> None:
        obj = self._stored(request)
        data = request.data
        if obj is None or not isinstance(data, dict):
            return  # the emulator answers 404 (or rejects the body) itself
        current = obj.raw
        meta = data.get("metadata") or {}
        wanted = meta.get("resourceVersion")
        have = (current.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and str(wanted) != str(have):
            name = request.name
            raise k8s.KubernetesError(
                status=409, reason="Conflict",
                message=(f'Operation cannot be fulfilled on {request.resource.plural} "{name}": '
                         "the object has been modified; please apply your changes to the "
                         "latest version and try again"))
        if request.subresource == "status":
            for key in [k for k in data if k != "status"]:
                del data[key]
            data["metadata"] = {}
        else:
            data.pop("status", None)
            data.setdefault("metadata", {})
            spec_patch = data.get("spec")
            if spec_patch is not None:
                before = current.get("spec") or {}
                after = _merge(before, spec_patch)
                if after != before:
                    data["metadata"]["generation"] = int(
                        (current.get("metadata") or {}).get("generation") or 1) + 1
        data["metadata"]["resourceVersion"] = self._next_rv()


def _merge(base: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return patch
    out = dict(base) if isinstance(base, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


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
            emulator.resources["v1/events"] = kmock.ResourceInfo()
            emulator.resources[ISVC] = kmock.ResourceInfo()
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

    def writes(self, since: int = 0, *, include_status: bool = False) -> list[Logged]:
        """Write requests (POST, PUT, PATCH, DELETE) received after request number ``since``;
        without ``include_status``, not those to ``/status`` (the KServe stand-in's)."""
        return [r for r in self.log[since:] if r.method in WRITE_METHODS
                and (include_status or not r.path.endswith("/status"))]

    def race_next_patch(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Apply ``patch`` as another writer just before the next patch to ``name`` lands."""
        assert self._emulator is not None
        self._emulator.races.append((namespace, name, patch))

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
