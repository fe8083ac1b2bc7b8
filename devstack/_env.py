"""The dev environment's state and files: what it started, where, and its folders.

``modelctl dev up NAME`` (``devstack._lifecycle``) starts, for model NAME from a
registry, one predictor process per role (stable, and optionally canary and
shadow), nginx as the gateway that splits traffic between them
(``devstack._gateway``), and Prometheus scraping every predictor with the static
labels ``namespace="local"`` and ``isvc=NAME``, so the shipped analysis queries
work unchanged. Everything it starts is recorded in ``<state dir>/<NAME>/state.json``
(PID, start time, command-line marker), and ``down`` stops exactly those
processes. The rollout's state lives in the same file, where a cluster keeps it in
an annotation.

Layout of ``<state dir>/<NAME>/``: ``state.json``, ``.lock`` (writers hold it),
``events.jsonl`` (rollout decisions), ``nginx/`` (config, logs, temp files),
``prometheus/`` (config, targets, data) and ``logs/`` (one file per predictor).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import socket
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devstack._errors import DevEnvError, DevEnvNotFound
from devstack._gateway import Gateway, Routes
from devstack._processes import ProcessRecord, spawn

if TYPE_CHECKING:
    from registry import Registry

DEV_DIR_ENV = "MODELCTL_DEV_DIR"
NAMESPACE = "local"
ROLES = ("stable", "canary", "shadow")
SCHEMA = 1
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# Flags the dev environment sets itself; extra predictor arguments may not change them.
RESERVED_FLAGS = frozenset({"--model_name", "--model_dir", "--http_host", "--http_port",
                            "--grpc_port", "--enable_grpc", "--role"})


def default_state_dir() -> Path:
    """``$MODELCTL_DEV_DIR``, else ``~/.modelctl/dev``."""
    configured = os.environ.get(DEV_DIR_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".modelctl" / "dev"


def check_env_name(name: str) -> str:
    if not _NAME.match(name):
        raise DevEnvError(f"invalid dev environment name {name!r}: use letters, digits, "
                          "'.', '_' and '-' (at most 63), starting with a letter or digit")
    return name


def predictor_args(args: Sequence[str]) -> tuple[str, ...]:
    """Extra predictor flags: ``--flag=value``, ``--flag value`` or ``flag=value``.

    ``flag=value`` gets its ``--``; flags the environment sets itself are refused.
    """
    out: list[str] = []
    wants_value = False
    for arg in args:
        if not wants_value and not arg.startswith("-"):
            if "=" not in arg:
                raise DevEnvError(f"predictor argument {arg!r}: write flag=value or "
                                  "--flag=value")
            arg = f"--{arg}"
        if not wants_value and arg.startswith("-"):
            flag = arg.split("=", 1)[0]
            if flag in RESERVED_FLAGS:
                raise DevEnvError(f"predictor argument {flag} is set by modelctl dev itself")
            wants_value = "=" not in arg
        else:
            wants_value = False
        out.append(arg)
    return tuple(out)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class Predictor:
    """One predictor process: the version it serves, from the role it was started as."""

    started_as: str  # its metric ``role`` label; a promoted canary keeps "canary"
    version: int
    uri: str
    port: int
    args: tuple[str, ...]
    process: ProcessRecord

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def to_dict(self) -> dict[str, Any]:
        return {"started_as": self.started_as, "version": self.version, "uri": self.uri,
                "port": self.port, "args": list(self.args), "process": self.process.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Predictor:
        return cls(started_as=str(data["started_as"]), version=int(data["version"]),
                   uri=str(data["uri"]), port=int(data["port"]),
                   args=tuple(str(a) for a in data.get("args", [])),
                   process=ProcessRecord.from_dict(data["process"]))


@dataclass(frozen=True)
class EnvState:
    """Everything ``state.json`` holds: ports, processes, routes and the rollout.

    ``revision`` grows with every write: it is the rollout backend's optimistic
    concurrency token. ``rollout`` is a ``RolloutState`` as JSON (or None).
    ``role_args`` are the extra predictor flags ``up`` was given per role.
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

    @property
    def model(self) -> str:
        return self.name

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    def processes(self) -> dict[str, ProcessRecord]:
        """Every process this environment started, by a display name."""
        found = {f"predictor-{role}": p.process for role, p in self.predictors.items()}
        if self.nginx is not None:
            found["nginx"] = self.nginx
        if self.prometheus is not None:
            found["prometheus"] = self.prometheus
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
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EnvState:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"unknown schema {data.get('schema')!r}")
        nginx, prom = data.get("nginx"), data.get("prometheus")
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

    def start_predictor(self, registry: Registry, *, role: str, version: int,
                        args: Sequence[str]) -> Predictor:
        """Fetch ``version`` and start a predictor for it with metric label ``role``.

        Returns at once; the predictor is ready when ``/v2/health/ready`` says so.
        """
        model_dir = self.fetch(registry, version)
        port = free_port()
        argv = [sys.executable, "-m", "predictor", "--model_name", self.name,
                "--model_dir", str(model_dir), "--http_host", "127.0.0.1",
                "--http_port", str(port), "--enable_grpc", "false", "--role", role, *args]
        process = spawn(f"predictor-{role}", argv,
                        log_path=self.logs_dir / f"predictor-{role}-v{version}-{port}.log",
                        marker=f"--http_port {port}", env=_child_env())
        return Predictor(started_as=role, version=version,
                         uri=registry.storage_uri(self.name, version), port=port,
                         args=tuple(args), process=process)

    # -- Prometheus ------------------------------------------------------------------
    def prometheus_dir(self) -> Path:
        return self.dir / "prometheus"

    def write_targets(self, state: EnvState) -> None:
        """Point Prometheus at the recorded predictors (file discovery picks it up)."""
        labels = {"namespace": NAMESPACE, "isvc": self.name}
        groups = [{"targets": [p.address], "labels": labels}
                  for _, p in sorted(state.predictors.items())]
        folder = self.prometheus_dir()
        folder.mkdir(parents=True, exist_ok=True)
        staged = folder / "targets.json.new"
        staged.write_text(json.dumps(groups, indent=2) + "\n", encoding="utf-8")
        os.replace(staged, folder / "targets.json")


def _child_env() -> dict[str, str]:
    """Our environment, with the directory holding our packages on PYTHONPATH.

    ``python -m predictor`` must import the same code as this process, installed
    or run from a checkout. (Found without importing it: rollout talks to
    predictors only over HTTP.)
    """
    import importlib.util

    env = dict(os.environ)
    spec = importlib.util.find_spec("predictor")
    if spec is None or spec.origin is None:
        raise DevEnvError("the predictor package is not importable from this Python "
                          f"({sys.executable}); install modelctl into it")
    root = str(Path(spec.origin).resolve().parent.parent)
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = root if not existing else f"{root}{os.pathsep}{existing}"
    return env
