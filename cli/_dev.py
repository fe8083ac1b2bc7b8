"""``modelctl dev``: the serving platform on one machine, for rehearsing rollouts."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli._common import JsonOption, RegistryOption
from cli._output import emit, print_json, stderr, stdout, table

if TYPE_CHECKING:
    from rich.console import Console

    from devstack import DevEnv

app = typer.Typer(
    name="dev",
    help=(
        "Run the platform on this machine: one predictor per role from the registry (or, "
        "with `up --queue`, a redis-server and per role frontends and workers), nginx "
        "splitting traffic between stable and canary (and mirroring to a shadow), and "
        "Prometheus scraping them, all on 127.0.0.1. Rehearse a rollout with "
        "`modelctl rollout ... --target local`."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
)

Name = Annotated[str, typer.Argument(metavar="NAME", help="Model name in the registry; also "
                                     "the environment's name.")]
OptionalName = Annotated[str | None, typer.Argument(
    metavar="[NAME]", help="Environment (default: the only one that is up).",
    show_default=False)]
StateDir = Annotated[Path | None, typer.Option(
    "--state-dir", envvar="MODELCTL_DEV_DIR",
    help="Where environments keep their state and logs (default ~/.modelctl/dev).",
    show_default=False)]
RoleArgs = Annotated[list[str] | None, typer.Option(
    show_default=False, metavar="FLAG=VALUE",
    help="Extra predictor flag (repeatable), e.g. inject_latency_ms=100.")]


def _pick(name: str | None, state_dir: Path | None) -> DevEnv:
    from devstack import DevEnv, DevEnvNotFound

    if name is not None:
        return DevEnv(name, state_dir)
    names = DevEnv.names(state_dir)
    if len(names) == 1:
        return DevEnv(names[0], state_dir)
    if not names:
        raise DevEnvNotFound("no dev environment is up; start one with `modelctl dev up NAME`")
    raise DevEnvNotFound(f"several dev environments are up ({', '.join(names)}); name one")


class _ReadyProgress:
    """Each component's state while ``up`` waits: live on a terminal, lines otherwise."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._seen: dict[str, str] = {}
        self._live: Any = None

    def __enter__(self) -> _ReadyProgress:
        if self.console.is_terminal:
            from rich.live import Live

            self._live = Live(console=self.console, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def __call__(self, found: Mapping[str, str]) -> None:
        if self._live is not None:
            self._live.update(table("starting", ("component", "state"), sorted(found.items())))
        for name, state in sorted(found.items()):
            if self._seen.get(name) != state:
                self._seen[name] = state
                if self._live is None:
                    self.console.print(f"  {name}: {state}", markup=False)


def _render_status(console: Console, doc: Mapping[str, Any]) -> None:
    lines = [f"dev environment {doc['name']} ({doc['dir']})"]
    for c in doc["components"]:
        serves = f"{doc['name']}@{c['version']}" if "version" in c else ""
        flags = " ".join(c.get("args") or [])
        lines.append(f"  {c['name']:<18} {c['state']:<8} pid {c['pid'] or '-':<7} "
                     f"{c['url']:<23} {serves} {flags}".rstrip())
    lines.append(f"predict     {doc['predict_url']}")
    lines.append(f"prometheus  {doc['prometheus']}")
    queue = doc.get("queue")
    if queue:
        lines.append(f"queue       {queue['url']}: {queue['frontends']} frontends and "
                     f"{queue['workers']} workers per role")
    routes = doc.get("routes")
    if routes:
        def servers(role: str) -> str:
            return ", ".join(routes[role])

        split = (f"{routes['canary_weight_pct']}% to canary ({servers('canary')}), the rest to "
                 f"stable ({servers('stable')})" if routes.get("canary") else
                 f"all to stable ({servers('stable')})")
        mirror = (f", mirrored to shadow ({servers('shadow')})" if routes.get("shadow")
                  else "")
        lines.append(f"routes      {split}{mirror}; nginx config generation "
                     f"{routes['generation']}")
    else:
        lines.append("routes      nginx is not answering")
    rollout = doc.get("rollout")
    if rollout:
        lines.append(f"rollout     {rollout['phase']}: @{rollout['stable']} -> "
                     f"@{rollout['canary']} at {rollout['weight_pct']}% (modelctl rollout "
                     f"status {doc['name']} --target local)")
    for line in lines:
        console.print(line, markup=False)


@app.command()
def up(
    name: Name,
    stable: Annotated[str, typer.Option(help="Version for the stable role: NUMBER, alias "
                                        "or latest.")] = "stable",
    canary: Annotated[str | None, typer.Option(help="Also start a canary (no traffic until a "
                                               "rollout).", show_default=False)] = None,
    shadow: Annotated[str | None, typer.Option(help="Also start a shadow: nginx mirrors every "
                                               "request to it.", show_default=False)] = None,
    port: Annotated[int, typer.Option(help="Gateway port on 127.0.0.1.")] = 8080,
    prometheus_port: Annotated[int, typer.Option(help="Prometheus port (0: any free one).")]
    = 0,
    scrape_interval: Annotated[str, typer.Option(help="Prometheus scrape interval (1s for "
                                                 "short rehearsals).")] = "5s",
    stable_arg: RoleArgs = None,
    canary_arg: RoleArgs = None,
    shadow_arg: RoleArgs = None,
    queue: Annotated[bool, typer.Option(
        "--queue", help="Queue-decoupled serving (docs/QUEUE.md): start a redis-server and, "
        "per role, --frontends behind nginx and --workers reading its stream.")] = False,
    frontends: Annotated[int | None, typer.Option(
        help="With --queue: frontends per role (validate, enqueue, answer; default 2).",
        show_default=False)] = None,
    workers: Annotated[int | None, typer.Option(
        help="With --queue: workers per role (load the model, run the batches; "
        "default 1).", show_default=False)] = None,
    timeout: Annotated[str, typer.Option(help="How long to wait for everything to be "
                                         "ready.")] = "3m",
    registry: RegistryOption = None,
    state_dir: StateDir = None,
    json_out: JsonOption = False,
) -> None:
    """Start predictors, the nginx gateway and Prometheus for NAME; wait until ready.

    With --queue, each role is served queue-decoupled instead: --frontends
    processes behind nginx put requests on a redis-server's stream (started
    here, stopped by `dev down`) and --workers processes run them; a rollout
    with --target local gives its canary its own frontends and workers.

    Stops what it started if anything fails to start. A second `up` of the
    same NAME while it runs is refused (exit 2).

    Examples:

        modelctl dev up demo-fixed

        modelctl dev up demo-fixed --stable 1 --canary 2 --port 9000

        modelctl dev up demo-fixed --canary 2 --canary-arg inject_latency_ms=100 \\
            --scrape-interval 1s

        modelctl dev up demo-fixed --queue --frontends 2 --workers 3
    """
    import devstack
    from common import parse_duration_s
    from devstack import DevEnv, DevEnvError, QueueSpec, UpSpec

    given = {k: v for k, v in (("frontends", frontends), ("workers", workers)) if v is not None}
    if given and not queue:
        raise DevEnvError("--frontends and --workers need --queue")
    shape = QueueSpec(**given) if queue else None
    env = DevEnv(name, state_dir)
    spec = UpSpec(name=name, registry=registry, stable=stable, canary=canary, shadow=shadow,
                  port=port, prometheus_port=prometheus_port,
                  scrape_interval_s=parse_duration_s(scrape_interval),
                  role_args={"stable": tuple(stable_arg or ()),
                             "canary": tuple(canary_arg or ()),
                             "shadow": tuple(shadow_arg or ())},
                  queue=shape)
    err = stderr()
    state = devstack.up(env, spec, on_event=lambda line: err.print(line, markup=False))
    try:
        with _ReadyProgress(err) as progress:
            devstack.wait_ready(env, state, timeout_s=parse_duration_s(timeout), tick=progress)
    except BaseException:
        err.print("stopping what was started")
        devstack.down(env)
        raise
    doc = devstack.status_doc(env)
    if json_out:
        print_json(doc)
        return
    console = stdout()
    _render_status(console, doc)
    console.print(f"next: modelctl dev load {name} --rate 100 --duration 60s, and "
                  f"modelctl rollout start {name} --to {name}@VERSION --target local",
                  markup=False)


@app.command()
def status(name: OptionalName = None, state_dir: StateDir = None,
           json_out: JsonOption = False) -> None:
    """Each process (pid, ready or not), the URLs, the routes nginx serves, the rollout.

    Example:

        modelctl dev status demo-fixed
    """
    import devstack

    doc = devstack.status_doc(_pick(name, state_dir))
    emit(doc, json_out, lambda console: _render_status(console, doc))


@app.command()
def down(name: OptionalName = None, state_dir: StateDir = None,
         json_out: JsonOption = False) -> None:
    """Stop exactly the processes this environment started (by PID); keep logs.

    Example:

        modelctl dev down demo-fixed
    """
    import devstack

    env = _pick(name, state_dir)
    stopped = devstack.down(env)
    doc = {"name": env.name, "stopped": stopped}
    emit(doc, json_out, lambda console: console.print(
        f"dev environment {env.name} is down; stopped {', '.join(stopped) or 'nothing'} "
        f"(logs in {env.dir})", markup=False))


# Failures a gateway, a restart or a reload would cause: never a model's own answer.
TRANSPORT_FAILURES = ("conn_error", "timeout", "502", "503", "504")


@app.command()
def load(
    name: OptionalName = None,
    rate: Annotated[float, typer.Option(help="Requests per second (open loop: sent on "
                                        "schedule, whatever the answers).")] = 40.0,
    duration: Annotated[str, typer.Option(help="How long (30s, 2m).")] = "30s",
    body: Annotated[str | None, typer.Option(help="JSON body (default: one V1 instance, "
                                             '{"instances": ["hello world"]}).',
                                             show_default=False)] = None,
    path: Annotated[str | None, typer.Option(help="Request path (default "
                                             "/v1/models/NAME:predict).",
                                             show_default=False)] = None,
    timeout: Annotated[str, typer.Option(help="Per-request timeout.")] = "30s",
    state_dir: StateDir = None,
    json_out: JsonOption = False,
) -> None:
    """Send open-loop traffic through the gateway and summarise what came back.

    Every request is counted by status. conn_error, timeout, 502, 503 and 504
    are what a gateway, a reload or a stopping predictor would cause; they are
    summed as transport_failures (a model's own 500s are not among them).

    Example:

        modelctl dev load demo-fixed --rate 40 --duration 2m
    """
    from common import parse_duration_s
    from devstack import DevEnvError

    env = _pick(name, state_dir)
    state = env.read()
    try:
        from bench.loadgen import run_open_loop
    except ImportError as exc:
        raise DevEnvError("`modelctl dev load` needs the bench package of the modelctl "
                          "checkout on the Python path") from exc
    try:
        payload = json.loads(body) if body is not None else {"instances": ["hello world"]}
    except ValueError as exc:
        raise DevEnvError(f"--body is not JSON: {exc}") from exc
    url = state.gateway_url + (path or f"/v1/models/{env.name}:predict")
    result = run_open_loop(url, rate=rate, duration_s=parse_duration_s(duration),
                           body=payload, timeout_s=parse_duration_s(timeout))
    doc = result.to_dict()
    doc["transport_failures"] = sum(doc["status_counts"].get(s, 0) for s in TRANSPORT_FAILURES)
    emit(doc, json_out, lambda console: _render_load(console, doc))
    sys.stdout.flush()


def _render_load(console: Console, doc: Mapping[str, Any]) -> None:
    lat = doc["latency_all"]

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:.1f} ms"

    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(doc["status_counts"].items()))
    rows = [
        ("url", doc["url"]),
        ("offered", f"{doc['offered_rate_rps']:g} req/s for {doc['duration_s']:g}s "
                    f"({doc['sent']} sent)"),
        ("answered 2xx", f"{doc['ok']} ({doc['success_ratio']:.2%})"),
        ("statuses", statuses),
        ("transport failures", f"{doc['transport_failures']} (conn_error, timeout, 502-504)"),
        ("latency", f"p50 {ms(lat['p50_s'])}, p99 {ms(lat['p99_s'])}, max {ms(lat['max_s'])}"),
    ]
    console.print(table("load through the gateway", ("", ""), rows))
