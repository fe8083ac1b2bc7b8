"""The dev environment's state and files: what it started, where, and its folders.

``modelctl dev up NAME`` (``devstack._lifecycle``) starts, for model NAME from a
registry, one serving unit per role (stable, and optionally canary and shadow: one
predictor process, or with ``--queue`` frontends and workers around a redis-server,
``devstack._predictor`` and ``devstack._redis``), nginx as the gateway that splits
traffic between them (``devstack._gateway``), and Prometheus scraping every predictor
process with the static labels ``namespace="local"`` and ``isvc=NAME``, so the shipped
analysis queries work unchanged. Everything it starts is recorded in
``<state dir>/<NAME>/state.json`` (PID, start time, command-line marker), and ``down``
stops exactly those processes. The rollout's state lives in the same file, where a
cluster keeps it in an annotation.

Layout of ``<state dir>/<NAME>/``: ``state.json``, ``.lock`` (writers hold it),
``events.jsonl`` (rollout decisions), ``nginx/`` (config, logs, temp files),
``prometheus/`` (config, targets, data), ``redis/`` (queue mode: its AOF and log) and
``logs/`` (one file per predictor process).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devstack._errors import DevEnvError, DevEnvNotFound
from devstack._gateway import Gateway, Routes
from devstack._predictor import Predictor, QueueSpec, start_unit
from devstack._processes import ProcessRecord

if TYPE_CHECKING:
    from registry import Registry

DEV_DIR_ENV = "MODELCTL_DEV_DIR"
NAMESPACE = "local"
ROLES = ("stable", "canary", "shadow")
SCHEMA = 1
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def default_state_dir() -> Path:
    """``$MODELCTL_DEV_DIR``, else ``~/.modelctl/dev``."""
    configured = os.environ.get(DEV_DIR_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".modelctl" / "dev"


def check_env_name(name: str) -> str:
    if not _NAME.match(name):
        raise DevEnvError(f"invalid dev environment name {name!r}: use letters, digits, "
                          "'.', '_' and '-' (at most 63), starting with a letter or digit")
    return name


@dataclass(frozen=True)
class EnvState:
    """Everything ``state.json`` holds: ports, processes, routes and the rollout.

    ``revision`` grows with every write: it is the rollout backend's optimistic
    concurrency token. ``rollout`` is a ``RolloutState`` as JSON (or None).
    ``role_args`` are the extra predictor flags ``up`` was given per role. ``queue``
    is set in queue mode (``up --queue``), with the redis-server on ``redis_port``.
    """

    name: str
    registry: str
    port: int
    admin_port: int
    prometheus_port: int
    scrape_interval_s: float
    routes: Routes
    revision: int = 1
    created_at: float = 0.0
    nginx: ProcessRecord | None = None
    prometheus: ProcessRecord | None = None
    predictors: Mapping[str, Predictor] = field(default_factory=dict)
    role_args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    rollout: str | None = None
    queue: QueueSpec | None = None
    redis_port: int = 0
    redis: ProcessRecord | None = None

    @property
    def model(self) -> str:
        return self.name

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    @property
    def queue_url(self) -> str | None:
        """The redis-server of queue mode (None without ``--queue``)."""
        return f"redis://127.0.0.1:{self.redis_port}/0" if self.queue else None

    def processes(self) -> dict[str, ProcessRecord]:
        """Every process this environment started, by a display name."""
        found = {name: m.process for role, p in sorted(self.predictors.items())
                 for name, m in p.named(role).items()}
        for name, record in (("nginx", self.nginx), ("prometheus", self.prometheus),
                             ("redis", self.redis)):
            if record is not None:
                found[name] = record
        return found

    def evolve(self, **changes: Any) -> EnvState:
        return dataclasses.replace(self, **changes)

    def with_predictor(self, role: str, predictor: Predictor | None) -> EnvState:
        predictors = {k: v for k, v in self.predictors.items() if k != role}
        if predictor is not None:
            predictors[role] = predictor
        return self.evolve(predictors=predictors)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "name": self.name, "registry": self.registry,
            "port": self.port, "admin_port": self.admin_port,
            "prometheus_port": self.prometheus_port,
            "scrape_interval_s": self.scrape_interval_s, "routes": self.routes.to_dict(),
            "revision": self.revision, "created_at": self.created_at,
            "nginx": self.nginx.to_dict() if self.nginx else None,
            "prometheus": self.prometheus.to_dict() if self.prometheus else None,
            "predictors": {k: v.to_dict() for k, v in self.predictors.items()},
            "role_args": {k: list(v) for k, v in self.role_args.items()},
            "rollout": self.rollout,
            "queue": self.queue.to_dict() if self.queue else None,
            "redis_port": self.redis_port,
            "redis": self.redis.to_dict() if self.redis else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EnvState:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"unknown schema {data.get('schema')!r}")
        nginx, prom, redis = data.get("nginx"), data.get("prometheus"), data.get("redis")
        queue = data.get("queue")
        return cls(
            name=str(data["name"]), registry=str(data["registry"]), port=int(data["port"]),
            admin_port=int(data["admin_port"]), prometheus_port=int(data["prometheus_port"]),
            scrape_interval_s=float(data["scrape_interval_s"]),
            routes=Routes.from_dict(data["routes"]), revision=int(data["revision"]),
            created_at=float(data.get("created_at", 0.0)),
            nginx=ProcessRecord.from_dict(nginx) if nginx else None,
            prometheus=ProcessRecord.from_dict(prom) if prom else None,
            predictors={str(k): Predictor.from_dict(v)
                        for k, v in (data.get("predictors") or {}).items()},
            role_args={str(k): tuple(str(a) for a in v)
                       for k, v in (data.get("role_args") or {}).items()},
            rollout=data.get("rollout"),
            queue=QueueSpec.from_dict(queue) if queue else None,
            redis_port=int(data.get("redis_port") or 0),
            redis=ProcessRecord.from_dict(redis) if redis else None,
        )


class DevEnv:
    """The files of one dev environment, ``<state_dir>/<name>``; see the module docstring."""

    def __init__(self, name: str, state_dir: Path | None = None) -> None:
        self.name = check_env_name(name)
        self.state_dir = (state_dir or default_state_dir()).expanduser().absolute()
        self.dir = self.state_dir / name

    @property
    def state_path(self) -> Path:
        return self.dir / "state.json"

    @property
    def events_path(self) -> Path:
        return self.dir / "events.jsonl"

    @property
    def logs_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def cache_dir(self) -> Path:
        return self.state_dir / "cache"

    def gateway(self, state: EnvState) -> Gateway:
        return Gateway(self.dir / "nginx", port=state.port, admin_port=state.admin_port)

    # -- the state file ------------------------------------------------------------
    def exists(self) -> bool:
        return self.state_path.exists()

    def read(self) -> EnvState:
        """The recorded state; ``DevEnvNotFound`` when the environment is not up."""
        try:
            text = self.state_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise DevEnvNotFound(f"no dev environment {self.name!r} is up (in {self.state_dir});"
                                 f" start one with `modelctl dev up {self.name}`") from None
        try:
            return EnvState.from_dict(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise DevEnvError(f"{self.state_path} is damaged ({exc}); stop what it started "
                              "by hand and remove it") from exc

    def write(self, state: EnvState) -> EnvState:
        """Store ``state`` atomically with the next revision (hold ``locked()``)."""
        stored = state.evolve(revision=state.revision + 1)
        staged = self.state_path.with_suffix(".json.new")
        staged.write_text(json.dumps(stored.to_dict(), indent=2, sort_keys=True) + "\n",
                          encoding="utf-8")
        os.replace(staged, self.state_path)
        return stored

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the environment's write lock (one writer at a time, across processes)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def append_event(self, event: Mapping[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.events_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(dict(event), sort_keys=True) + "\n")

    def events(self) -> list[dict[str, Any]]:
        try:
            lines = self.events_path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    @staticmethod
    def names(state_dir: Path | None = None) -> list[str]:
        """The environments that have a state file under ``state_dir``."""
        root = (state_dir or default_state_dir()).expanduser()
        if not root.is_dir():
            return []
        return sorted(p.parent.name for p in root.glob("*/state.json"))

    # -- predictors ------------------------------------------------------------------
    def fetch(self, registry: Registry, version: int) -> Path:
        """A verified local copy of ``version`` (kept in the shared cache)."""
        from registry import verify_dir

        dest = self.cache_dir / self.name / str(version)
        if (dest / "MANIFEST.json").exists() and not verify_dir(
                dest, registry.manifest(self.name, version)):
            return dest
        registry.fetch(self.name, version, dest)
        return dest

    def start_predictor(self, registry: Registry, state: EnvState, *, role: str,
                        version: int, args: Sequence[str]) -> Predictor:
        """Fetch ``version`` and start its unit with metric label ``role``, in the mode of
        ``state`` (one predictor, or ``state.queue``'s frontends and workers).

        Returns at once; the unit is ready when each process's ``/v2/health/ready`` says so.
        """
        return start_unit(self.name, role=role, version=version,
                          uri=registry.storage_uri(self.name, version),
                          model_dir=self.fetch(registry, version), args=tuple(args),
                          logs_dir=self.logs_dir, queue=state.queue, queue_url=state.queue_url)

    # -- Prometheus and redis ----------------------------------------------------------
    def prometheus_dir(self) -> Path:
        return self.dir / "prometheus"

    def redis_dir(self) -> Path:
        return self.dir / "redis"

    def set_rollout_target(self, address: str | None) -> None:
        """Have Prometheus scrape a running ``rollout run``'s exporter at ``address``
        (``None``: stop), labelled like the predictors; ``targets-rollout.json``."""
        folder = self.prometheus_dir()
        folder.mkdir(parents=True, exist_ok=True)
        groups = ([{"targets": [address], "labels": {"job": "modelctl-rollout"}}]
                  if address else [])
        staged = folder / "targets-rollout.json.new"
        staged.write_text(json.dumps(groups, indent=2) + "\n", encoding="utf-8")
        os.replace(staged, folder / "targets-rollout.json")

    def write_targets(self, state: EnvState) -> None:
        """Point Prometheus at every recorded predictor process (file discovery picks it up)."""
        labels = {"namespace": NAMESPACE, "isvc": self.name}
        groups = [{"targets": [m.address for m in p.members], "labels": labels}
                  for _, p in sorted(state.predictors.items())]
        folder = self.prometheus_dir()
        folder.mkdir(parents=True, exist_ok=True)
        staged = folder / "targets.json.new"
        staged.write_text(json.dumps(groups, indent=2) + "\n", encoding="utf-8")
        os.replace(staged, folder / "targets.json")
