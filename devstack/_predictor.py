"""One role's serving unit: the version it serves and the predictor processes serving it.

Without ``--queue`` a unit is one in-process predictor (``predictor-<role>``). With it, a
unit is N frontends (``--queue_role frontend``, ``frontend-<role>-<i>``), the servers
nginx routes the role's traffic to, and M workers (``--queue_role worker``,
``worker-<role>-<i>``), each with its own HTTP port for health and ``/metrics``. The
stream a unit's frontends and workers share is named by model and version
(docs/QUEUE.md), so a canary of another version has its own stream and workers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack._errors import DevEnvError
from devstack._processes import ProcessRecord, free_port, is_alive, spawn, stop_all

# Flags the dev environment sets itself; extra predictor arguments may not change them.
RESERVED_FLAGS = frozenset({"--model_name", "--model_dir", "--http_host", "--http_port",
                            "--grpc_port", "--enable_grpc", "--role", "--queue_url",
                            "--queue_role"})
MAX_PROCESSES = 16


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
                hint = " (use `modelctl dev up --queue`)" if flag.startswith("--queue") else ""
                raise DevEnvError(f"predictor argument {flag} is set by modelctl dev "
                                  f"itself{hint}")
            wants_value = "=" not in arg
        else:
            wants_value = False
        out.append(arg)
    return tuple(out)


@dataclass(frozen=True)
class QueueSpec:
    """Queue mode's shape: per role, ``frontends`` behind nginx and ``workers``."""

    frontends: int = 2
    workers: int = 1

    def __post_init__(self) -> None:
        for flag, count in (("--frontends", self.frontends), ("--workers", self.workers)):
            if not 1 <= count <= MAX_PROCESSES:
                raise DevEnvError(f"{flag} must be within 1-{MAX_PROCESSES}, got {count}")

    def to_dict(self) -> dict[str, Any]:
        return {"frontends": self.frontends, "workers": self.workers}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueueSpec:
        return cls(frontends=int(data["frontends"]), workers=int(data["workers"]))


@dataclass(frozen=True)
class Member:
    """One process of a unit: its HTTP port (predict, or health and metrics) and record."""

    port: int
    process: ProcessRecord

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def to_dict(self) -> dict[str, Any]:
        return {"port": self.port, "process": self.process.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Member:
        return cls(port=int(data["port"]), process=ProcessRecord.from_dict(data["process"]))


@dataclass(frozen=True)
class Predictor:
    """One role's serving unit: the version it serves, from the role it was started as.

    ``servers`` take the role's traffic from nginx: the one in-process predictor, or
    queue mode's frontends. ``workers`` are queue mode's workers (none in-process).
    """

    started_as: str  # its metric ``role`` label; a promoted canary keeps "canary"
    version: int
    uri: str
    args: tuple[str, ...]
    servers: tuple[Member, ...]
    workers: tuple[Member, ...] = ()

    @property
    def is_queued(self) -> bool:
        return bool(self.workers)

    @property
    def addresses(self) -> tuple[str, ...]:
        """What nginx routes this role's traffic to."""
        return tuple(m.address for m in self.servers)

    @property
    def members(self) -> tuple[Member, ...]:
        """Every process of the unit, servers first."""
        return (*self.servers, *self.workers)

    def named(self, role: str) -> dict[str, Member]:
        """Every process of the unit by its display name as ``role`` (servers first)."""
        if not self.is_queued:
            return {f"predictor-{role}": m for m in self.servers}
        named = {f"frontend-{role}-{i}": m for i, m in enumerate(self.servers, 1)}
        named.update({f"worker-{role}-{i}": m for i, m in enumerate(self.workers, 1)})
        return named

    def is_running(self) -> bool:
        """True while every process of the unit runs."""
        return all(is_alive(m.process) for m in self.members)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the servers (they answer what they hold), then the workers they wait on."""
        stop_all([m.process for m in self.servers], timeout_s=timeout_s)
        stop_all([m.process for m in self.workers], timeout_s=timeout_s)

    def to_dict(self) -> dict[str, Any]:
        return {"started_as": self.started_as, "version": self.version, "uri": self.uri,
                "args": list(self.args), "servers": [m.to_dict() for m in self.servers],
                "workers": [m.to_dict() for m in self.workers]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Predictor:
        if "servers" in data:
            servers = tuple(Member.from_dict(m) for m in data["servers"])
        else:  # a state file from before queue mode: one predictor, its port and process
            servers = (Member.from_dict(data),)
        return cls(started_as=str(data["started_as"]), version=int(data["version"]),
                   uri=str(data["uri"]), args=tuple(str(a) for a in data.get("args", [])),
                   servers=servers,
                   workers=tuple(Member.from_dict(m) for m in data.get("workers") or ()))


def start_unit(name: str, *, role: str, version: int, uri: str, model_dir: Path,
               args: tuple[str, ...], logs_dir: Path, queue: QueueSpec | None = None,
               queue_url: str | None = None) -> Predictor:
    """Spawn the processes of ``name``@``version`` as ``role`` (all at once); returns
    without waiting for them to be ready. If a spawn fails, what was started is stopped.
    """
    kinds: Sequence[tuple[str, tuple[str, ...]]] = [("predictor", ())]
    if queue is not None:
        if not queue_url:
            raise DevEnvError("queue mode needs the environment's redis-server")
        flags = ("--queue_url", queue_url)
        kinds = ([("frontend", (*flags, "--queue_role", "frontend"))] * queue.frontends
                 + [("worker", (*flags, "--queue_role", "worker"))] * queue.workers)
    env = child_env()
    servers: list[Member] = []
    workers: list[Member] = []
    try:
        for kind, mode in kinds:
            port = free_port()
            argv = [sys.executable, "-m", "predictor", "--model_name", name,
                    "--model_dir", str(model_dir), "--http_host", "127.0.0.1",
                    "--http_port", str(port), "--enable_grpc", "false", "--role", role,
                    *mode, *args]
            process = spawn(f"{kind}-{role}", argv,
                            log_path=logs_dir / f"{kind}-{role}-v{version}-{port}.log",
                            marker=f"--http_port {port}", env=env)
            (workers if kind == "worker" else servers).append(Member(port, process))
    except BaseException:
        stop_all([m.process for m in (*servers, *workers)], timeout_s=10.0)
        raise
    return Predictor(started_as=role, version=version, uri=uri, args=args,
                     servers=tuple(servers), workers=tuple(workers))


def child_env() -> dict[str, str]:
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
