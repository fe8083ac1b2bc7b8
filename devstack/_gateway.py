"""The dev environment's gateway: nginx splitting traffic between stable and canary.

The routes (which predictor processes serve each role, the canary's share, the shadow
that gets a mirrored copy) are rendered into an nginx config: one upstream per role
with a server per process (queue mode's frontends; otherwise the one predictor),
``split_clients`` on
nginx's random ``$request_id`` picks canary or stable per request, and ``mirror``
sends a copy to the shadow without delaying the answer. A change rewrites the
config, checks it with ``nginx -t``, and sends SIGHUP to the master: new workers
start with the new routes while the old ones finish what they hold and exit.

Two settings make reloads lossless: client connections close after each response
(``keepalive_timeout 0``), because a reload closes idle keep-alive connections and a
request a client sends on one at that instant would be lost; and every upstream
has ``max_fails=0``, so one refused connection never takes a predictor out of
rotation (the canary's group falls back to stable for a request it cannot take).

The loaded routes are served as JSON on an admin port (``GET /routes``): that is
how a rollout reads the weight nginx actually routes, not the one it asked for.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from devstack._errors import DevEnvError
from devstack._processes import (
    ProcessRecord,
    children,
    log_tail,
    pid_running,
    send_signal,
    spawn,
)

NGINX_BIN = "/usr/sbin/nginx"
_ADDRESS = re.compile(r"^[A-Za-z0-9.-]+:[0-9]{1,5}$")
_UNSAFE_IN_PATH = set('"\\$;{}\n\r\'')
_POLL_S = 0.02


Addresses = tuple[str, ...]


def _addresses(value: Any) -> Addresses:
    """A role's addresses as JSON holds them: a list, null (no such role), or one string
    (state files and configs from before queue mode)."""
    if value is None:
        return ()
    return (str(value),) if isinstance(value, str) else tuple(str(a) for a in value)


@dataclass(frozen=True)
class Routes:
    """Where the gateway sends traffic: the ``host:port`` servers of each role (empty: no
    such role), and the canary's share.

    ``generation`` grows with every change, so a reload can be seen to have landed.
    """

    generation: int
    stable: Addresses
    canary: Addresses = ()
    canary_weight_pct: int = 0
    shadow: Addresses = ()

    def __post_init__(self) -> None:
        if self.generation < 1:
            raise ValueError(f"generation must be >= 1, got {self.generation}")
        if not 0 <= self.canary_weight_pct <= 100:
            raise ValueError(f"canary weight {self.canary_weight_pct}% outside 0-100")
        if not self.canary and self.canary_weight_pct:
            raise ValueError("a canary weight needs a canary")
        if not self.stable:
            raise ValueError("the stable route needs at least one server")
        for role in (self.stable, self.canary, self.shadow):
            if not isinstance(role, tuple):
                raise TypeError(f"a route is a tuple of host:port addresses, not {role!r}")
            for address in role:
                if not _ADDRESS.match(address):
                    raise ValueError(f"not a host:port address: {address!r}")

    def next(self, **changes: Any) -> Routes:
        """These routes with ``changes`` and the next generation."""
        return dataclasses.replace(self, generation=self.generation + 1, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON: each role a list of addresses, null when it has none."""
        return {"generation": self.generation, "stable": list(self.stable),
                "canary": list(self.canary) or None,
                "canary_weight_pct": self.canary_weight_pct, "shadow": list(self.shadow) or None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Routes:
        return cls(generation=int(data["generation"]), stable=_addresses(data["stable"]),
                   canary=_addresses(data.get("canary")),
                   canary_weight_pct=int(data.get("canary_weight_pct") or 0),
                   shadow=_addresses(data.get("shadow")))


def _quoted(path: Path) -> str:
    text = str(path)
    if _UNSAFE_IN_PATH & set(text):
        raise DevEnvError(f"path {text!r} has characters an nginx config cannot hold; "
                          "use a --state-dir without quotes, $, ; or braces")
    return f'"{text}"'


def _split(routes: Routes) -> str:
    weight = routes.canary_weight_pct
    if weight == 0:
        return "        * stable;"
    if weight == 100:
        return "        * canary;"
    return f"        {weight}% canary;\n        * stable;"


def _servers(addresses: Addresses, extra: str = "") -> list[str]:
    return [f"        server {a} max_fails=0{extra};" for a in addresses]


def _upstreams(routes: Routes) -> str:
    groups = {"stable": _servers(routes.stable)}
    if routes.canary:
        groups["canary"] = _servers(routes.canary) + _servers(routes.stable, " backup")
    if routes.shadow:
        groups["shadow"] = _servers(routes.shadow)
    return "\n".join(f"    upstream {name} {{\n" + "\n".join(lines) + "\n    }"
                     for name, lines in groups.items())


def _mirror(routes: Routes) -> tuple[str, str]:
    """The ``mirror`` lines of the main location, and the internal mirror location."""
    if not routes.shadow:
        return "", ""
    return (
        "            mirror /__modelctl_mirror;\n            mirror_request_body on;\n",
        "        location = /__modelctl_mirror {\n"
        "            internal;\n"
        "            proxy_pass http://shadow$request_uri;\n"
        "            proxy_set_header X-Request-ID $req_id;\n"
        "            proxy_connect_timeout 1s;\n"
        "            proxy_read_timeout 30s;\n"
        "        }\n")


def render_config(routes: Routes, *, prefix: Path, port: int, admin_port: int,
                  user: str | None = None) -> str:
    """The nginx config for ``routes`` (pure; ``user`` only when nginx starts as root)."""
    p = prefix
    mirror, mirror_location = _mirror(routes)
    routes_json = json.dumps(routes.to_dict(), sort_keys=True)
    user_line = f"user {user};\n" if user else ""
    ups = _upstreams(routes)
    return f"""# modelctl dev gateway, generation {routes.generation}; written by modelctl
{user_line}worker_processes 1;
daemon off;
pid {_quoted(p / "nginx.pid")};
error_log {_quoted(p / "logs" / "error.log")} warn;
events {{
    worker_connections 4096;
}}
http {{
    log_format modelctl '$msec $status $modelctl_route "$upstream_addr" "$upstream_status" '
                        '$request_time $req_id';
    access_log {_quoted(p / "logs" / "access.log")} modelctl;
    client_body_temp_path {_quoted(p / "tmp" / "client_body")};
    proxy_temp_path {_quoted(p / "tmp" / "proxy")};
    fastcgi_temp_path {_quoted(p / "tmp" / "fastcgi")};
    uwsgi_temp_path {_quoted(p / "tmp" / "uwsgi")};
    scgi_temp_path {_quoted(p / "tmp" / "scgi")};
    client_max_body_size 16m;
    # A reload closes idle keep-alive connections; a request sent on one at that
    # moment would be lost, so every response closes its connection.
    keepalive_timeout 0;
    proxy_read_timeout 60s;
    map $http_x_request_id $req_id {{
        default $http_x_request_id;
        "" $request_id;
    }}
{ups}
    split_clients "${{request_id}}" $modelctl_route {{
{_split(routes)}
    }}
    server {{
        listen 127.0.0.1:{int(port)};
        location / {{
{mirror}            proxy_pass http://$modelctl_route;
            proxy_set_header X-Request-ID $req_id;
            add_header X-Modelctl-Route $modelctl_route always;
        }}
{mirror_location}    }}
    server {{
        listen 127.0.0.1:{int(admin_port)};
        access_log off;
        location = /routes {{
            default_type application/json;
            return 200 '{routes_json}\\n';
        }}
    }}
}}
"""


def _nginx_user() -> str | None:
    """Workers run as the invoking user (nginx switches to ``nobody`` only under root)."""
    if os.geteuid() != 0:
        return None
    return pwd.getpwuid(os.geteuid()).pw_name


class Gateway:
    """One nginx under ``prefix``, listening on 127.0.0.1:``port`` (admin: ``admin_port``)."""

    def __init__(self, prefix: Path, *, port: int, admin_port: int,
                 binary: str = NGINX_BIN) -> None:
        self.prefix = prefix
        self.port = port
        self.admin_port = admin_port
        self.binary = binary

    @property
    def conf_path(self) -> Path:
        return self.prefix / "nginx.conf"

    @property
    def error_log(self) -> Path:
        return self.prefix / "logs" / "error.log"

    @property
    def access_log(self) -> Path:
        return self.prefix / "logs" / "access.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def argv(self, conf: Path | None = None) -> list[str]:
        return [self.binary, "-c", str(conf or self.conf_path), "-p", f"{self.prefix}/",
                "-e", str(self.error_log)]

    def render(self, routes: Routes) -> str:
        return render_config(routes, prefix=self.prefix, port=self.port,
                             admin_port=self.admin_port, user=_nginx_user())

    def write(self, routes: Routes) -> None:
        """Install the config for ``routes`` after ``nginx -t`` accepts it."""
        if not Path(self.binary).exists():
            raise DevEnvError(f"nginx is not installed at {self.binary}: run `make setup` "
                              "(or apt-get install nginx)")
        for sub in ("logs", "tmp"):
            (self.prefix / sub).mkdir(parents=True, exist_ok=True)
        staged = self.prefix / "nginx.conf.new"
        staged.write_text(self.render(routes), encoding="utf-8")
        checked = subprocess.run([*self.argv(staged), "-t", "-q"], capture_output=True,
                                 text=True, timeout=30, check=False)
        if checked.returncode != 0:
            raise DevEnvError(f"nginx refused the gateway config {staged}: "
                              f"{checked.stderr.strip() or checked.stdout.strip()}")
        os.replace(staged, self.conf_path)

    def start(self, routes: Routes) -> ProcessRecord:
        """Write the config and start nginx in the foreground of its own session."""
        self.write(routes)
        return spawn("nginx", self.argv(), log_path=self.prefix / "logs" / "nginx.out",
                     marker=str(self.conf_path))

    def loaded(self, timeout_s: float = 1.0) -> Routes | None:
        """The routes nginx serves now (None when it does not answer)."""
        try:
            reply = httpx.get(f"{self.admin_url}/routes", timeout=timeout_s)
            reply.raise_for_status()
            return Routes.from_dict(reply.json())
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None

    def reload(self, master: ProcessRecord, routes: Routes, *, timeout_s: float = 30.0,
               drain_timeout_s: float = 60.0) -> bool:
        """Load ``routes`` gracefully; wait until nginx serves them and old workers are gone.

        Returns False if old workers still hold requests after ``drain_timeout_s``
        (the new routes are in effect either way). Raises ``DevEnvError`` if nginx
        is not running or does not take the new config in ``timeout_s``.
        """
        old_workers = children(master)
        self.write(routes)
        if not send_signal(master, signal.SIGHUP):
            raise DevEnvError(f"the gateway's nginx (pid {master.pid}) is not running; "
                              "`modelctl dev down` then `modelctl dev up` again")
        deadline = time.monotonic() + timeout_s
        while True:
            now_serving = self.loaded(timeout_s=1.0)
            if now_serving is not None and now_serving.generation >= routes.generation:
                break
            if time.monotonic() >= deadline:
                raise DevEnvError(f"nginx did not load the new routes in {timeout_s:g}s; "
                                  f"its log says: {log_tail(self.error_log, 600).strip()}")
            time.sleep(_POLL_S)
        drain_deadline = time.monotonic() + drain_timeout_s
        while any(pid_running(pid) for pid in old_workers):
            if time.monotonic() >= drain_deadline:
                return False
            time.sleep(_POLL_S)
        return True
