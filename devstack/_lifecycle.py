"""Bringing a dev environment up, reading its health, and taking it down by PID."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from common import format_promql_duration
from devstack._env import ROLES, DevEnv, EnvState
from devstack._errors import DevEnvError, DevEnvRunning
from devstack._gateway import Routes
from devstack._predictor import QueueSpec, predictor_args
from devstack._processes import (
    ProcessRecord,
    free_port,
    is_alive,
    log_tail,
    port_is_free,
    spawn,
    stop_all,
)
from devstack._redis import redis_answers, start_redis

PROMETHEUS_BIN = "/usr/bin/prometheus"
READY = "ready"
STARTING = "starting"
EXITED = "exited"

Tick = Callable[[Mapping[str, str]], None]
"""Called while waiting, with each component's state (``ready``, ``starting``, ``exited``)."""


@dataclass(frozen=True)
class UpSpec:
    """What ``modelctl dev up`` starts: refs per role, ports, scrape interval, extra flags,
    and ``queue`` (None: one in-process predictor per role)."""

    name: str
    registry: str | None = None
    stable: str = "stable"
    canary: str | None = None
    shadow: str | None = None
    port: int = 8080
    prometheus_port: int = 0  # 0: any free port
    scrape_interval_s: float = 5.0
    role_args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    queue: QueueSpec | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise DevEnvError(f"--port must be within 1-65535, got {self.port}")
        if not 0 <= self.prometheus_port <= 65535:
            raise DevEnvError(f"--prometheus-port must be within 0-65535, got "
                              f"{self.prometheus_port}")
        if not 0.1 <= self.scrape_interval_s <= 300:
            raise DevEnvError(f"--scrape-interval must be within 100ms-5m, got "
                              f"{self.scrape_interval_s}s")
        unknown = set(self.role_args) - set(ROLES)
        if unknown:
            raise DevEnvError(f"unknown roles {sorted(unknown)} (known: {', '.join(ROLES)})")
        for args in self.role_args.values():
            predictor_args(args)


def up(env: DevEnv, spec: UpSpec, *, on_event: Callable[[str], None] | None = None) -> EnvState:
    """Start redis-server (queue mode), the predictors, nginx and Prometheus; return at
    once (see ``wait_ready``).

    Refuses (``DevEnvRunning``) while a process of an earlier ``up`` still runs. If
    starting fails half-way, what was started is stopped again.
    """
    from registry import Registry

    say = on_event or (lambda _: None)
    with env.locked():
        _check_not_running(env)
        if not Path(PROMETHEUS_BIN).exists():
            raise DevEnvError(f"Prometheus is not installed at {PROMETHEUS_BIN}: run "
                              "`make setup` (or apt-get install prometheus)")
        if not port_is_free(spec.port):
            raise DevEnvError(f"port {spec.port} on 127.0.0.1 is in use; pick another "
                              "with --port")
        registry = Registry.open(spec.registry)
        refs = {"stable": spec.stable, "canary": spec.canary, "shadow": spec.shadow}
        versions = {role: registry.resolve(env.name, ref) for role, ref in refs.items()
                    if ref is not None}
        state = EnvState(
            name=env.name, registry=registry.url, port=spec.port, admin_port=free_port(),
            prometheus_port=spec.prometheus_port or free_port(),
            scrape_interval_s=spec.scrape_interval_s, routes=Routes(1, ("127.0.0.1:1",)),
            created_at=time.time(),
            role_args={role: predictor_args(a) for role, a in spec.role_args.items() if a},
            queue=spec.queue, redis_port=free_port() if spec.queue else 0,
        )
        state = env.write(state)
        try:
            return _start_all(env, state, registry, versions, say)
        except BaseException:
            _stop_all(env.read())
            env.state_path.unlink(missing_ok=True)
            raise


def _check_not_running(env: DevEnv) -> None:
    if not env.exists():
        return
    try:
        old = env.read()
    except DevEnvError:
        raise DevEnvRunning(f"{env.state_path} exists but cannot be read; stop what it "
                            "started and remove it") from None
    alive = [name for name, p in old.processes().items() if is_alive(p)]
    if alive:
        raise DevEnvRunning(f"dev environment {env.name!r} is already up (gateway "
                            f"{old.gateway_url}; running: {', '.join(sorted(alive))}); "
                            f"`modelctl dev down {env.name}` first")
    env.state_path.unlink()  # left by a machine that went down: nothing of it runs


def _start_all(env: DevEnv, state: EnvState, registry: Any, versions: Mapping[str, int],
               say: Callable[[str], None]) -> EnvState:
    if state.queue is not None:
        say(f"starting redis-server on {state.queue_url}")
        state = env.write(state.evolve(redis=start_redis(env.redis_dir(), state.redis_port)))
    for role, version in versions.items():
        shape = (f" ({state.queue.frontends} frontends, {state.queue.workers} workers)"
                 if state.queue else "")
        say(f"starting predictor-{role}: {env.name}@{version}{shape}")
        predictor = env.start_predictor(registry, state, role=role, version=version,
                                        args=state.role_args.get(role, ()))
        state = env.write(state.with_predictor(role, predictor))

    def addresses(role: str) -> tuple[str, ...]:
        unit = state.predictors.get(role)
        return unit.addresses if unit else ()

    routes = Routes(1, addresses("stable"), addresses("canary"), 0, addresses("shadow"))
    gateway = env.gateway(state)
    say(f"starting nginx on {gateway.url}")
    state = env.write(state.evolve(routes=routes, nginx=gateway.start(routes)))
    say(f"starting Prometheus on {state.prometheus_url}")
    return env.write(state.evolve(prometheus=_start_prometheus(env, state)))


def _start_prometheus(env: DevEnv, state: EnvState) -> ProcessRecord:
    folder = env.prometheus_dir()
    (folder / "data").mkdir(parents=True, exist_ok=True)
    env.write_targets(state)
    every = format_promql_duration(state.scrape_interval_s)
    config = {
        "global": {"scrape_interval": every, "scrape_timeout": every,
                   "evaluation_interval": every},
        "scrape_configs": [{
            "job_name": "modelctl-dev",
            # targets.json: the predictors; targets-rollout.json: a `rollout run`'s
            # exporter while one runs (its series carry namespace and isvc themselves).
            "file_sd_configs": [{"files": [str(folder / "targets*.json")],
                                 "refresh_interval": every}],
        }],
    }
    config_path = folder / "prometheus.yml"
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")  # JSON is YAML
    argv = [PROMETHEUS_BIN, f"--config.file={config_path}",
            f"--storage.tsdb.path={folder / 'data'}", "--storage.tsdb.retention.time=2d",
            f"--web.listen-address=127.0.0.1:{state.prometheus_port}", "--log.level=warn"]
    return spawn("prometheus", argv, log_path=folder / "prometheus.log",
                 marker=f"--config.file={config_path}")


# -- health --------------------------------------------------------------------------
def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _predictor_ready(url: str) -> Callable[[], bool]:
    return lambda: _http_ok(f"{url}/v2/health/ready")


def readiness(env: DevEnv, state: EnvState) -> dict[str, str]:
    """Each component's state now: ``ready``, ``starting`` or ``exited``."""
    checks: dict[str, tuple[ProcessRecord | None, Callable[[], bool]]] = {}
    if state.queue is not None:
        checks["redis"] = (state.redis, lambda: redis_answers(state.redis_port))
    for role, p in sorted(state.predictors.items()):
        for name, member in p.named(role).items():
            checks[name] = (member.process, _predictor_ready(member.url))
    gateway = env.gateway(state)

    def gateway_ready() -> bool:
        loaded = gateway.loaded()
        return loaded is not None and loaded.generation >= state.routes.generation

    checks["nginx"] = (state.nginx, gateway_ready)
    checks["prometheus"] = (state.prometheus,
                            lambda: _http_ok(f"{state.prometheus_url}/-/ready"))
    found = {}
    for name, (process, check) in checks.items():
        if process is None or not is_alive(process):
            found[name] = EXITED
        else:
            found[name] = READY if check() else STARTING
    return found


def wait_ready(env: DevEnv, state: EnvState, *, timeout_s: float = 180.0,
               tick: Tick | None = None) -> None:
    """Wait until every component is ready; ``DevEnvError`` (with its log) if one exits."""
    deadline = time.monotonic() + timeout_s
    logs = {name: p.log for name, p in state.processes().items()}
    while True:
        found = readiness(env, state)
        if tick is not None:
            tick(found)
        exited = [name for name, s in found.items() if s == EXITED]
        if exited:
            name = exited[0]
            raise DevEnvError(f"{name} exited while starting; the end of {logs[name]}:\n"
                              f"{log_tail(logs[name], 1500).rstrip()}")
        if all(s == READY for s in found.values()):
            return
        if time.monotonic() >= deadline:
            waiting = ", ".join(n for n, s in found.items() if s != READY)
            raise DevEnvError(f"not ready after {timeout_s:g}s: {waiting} (logs in {env.dir})")
        time.sleep(0.2)


# -- down --------------------------------------------------------------------------------
def _stop_all(state: EnvState, timeout_s: float = 30.0) -> list[str]:
    """Stop every recorded process that is still ours, in stages; SIGKILL stragglers.

    nginx first, gracefully (SIGQUIT: it finishes what it holds), so that no request
    reaches a predictor that is shutting down; then the predictors and queue frontends
    (they answer what they hold) with Prometheus; then the workers those frontends wait
    on; redis-server last, once the workers have acknowledged what they finished.
    """
    names = {record: name for name, record in state.processes().items()}
    units = [p for _, p in sorted(state.predictors.items())]
    stages: list[tuple[Sequence[ProcessRecord | None], signal.Signals]] = [
        ((state.nginx,), signal.SIGQUIT),
        ((*(m.process for p in units for m in p.servers), state.prometheus), signal.SIGTERM),
        (tuple(m.process for p in units for m in p.workers), signal.SIGTERM),
        ((state.redis,), signal.SIGTERM),
    ]
    stopped: list[str] = []
    for records, sig in stages:
        present = [r for r in records if r is not None]
        stopped += [names[r] for r in stop_all(present, sig=sig, timeout_s=timeout_s)]
    return stopped


def down(env: DevEnv, *, timeout_s: float = 30.0) -> list[str]:
    """Stop exactly the processes ``up`` (and rollouts) started; returns their names.

    Logs and the model cache stay; the state file goes, so ``status`` says it is down.
    """
    with env.locked():
        state = env.read()
        stopped = _stop_all(state, timeout_s)
        env.state_path.unlink(missing_ok=True)
        return stopped


def status_doc(env: DevEnv) -> dict[str, Any]:
    """What ``modelctl dev status`` shows: URLs, each process and the routes nginx serves."""
    state = env.read()
    found = readiness(env, state)
    components: list[dict[str, Any]] = []
    for role, p in sorted(state.predictors.items()):
        for name, member in p.named(role).items():
            components.append({
                "name": name, "kind": name.partition("-")[0], "role": role,
                "pid": member.process.pid, "state": found[name], "url": member.url,
                "version": p.version, "role_label": p.started_as, "args": list(p.args),
                "log": member.process.log,
            })
    others = [("nginx", state.nginx, state.gateway_url),
              ("prometheus", state.prometheus, state.prometheus_url)]
    if state.queue is not None:
        others.append(("redis", state.redis, state.queue_url or ""))
    for name, process, url in others:
        components.append({"name": name, "pid": process.pid if process else None,
                           "state": found[name], "url": url,
                           "log": process.log if process else None})
    loaded = env.gateway(state).loaded()
    rollout = None
    if state.rollout:
        data = json.loads(state.rollout)
        rollout = {"phase": data.get("phase"), "stable": data["stable"]["version"],
                   "canary": data["canary"]["version"], "weight_pct": data.get("weight_pct")}
    return {
        "name": env.name, "dir": str(env.dir), "registry": state.registry,
        "gateway": state.gateway_url,
        "predict_url": f"{state.gateway_url}/v1/models/{env.name}:predict",
        "prometheus": state.prometheus_url,
        "queue": ({**state.queue.to_dict(), "url": state.queue_url} if state.queue
                  else None),
        "components": components,
        "routes": loaded.to_dict() if loaded else None,
        "rollout": rollout,
    }
