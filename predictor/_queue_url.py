"""``--queue_url``: the three topologies' URL forms, parsed without ever quoting the URL
(it may hold a password) in an error."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote

# --queue_url: the topology by its scheme (docs/QUEUE.md, "Past one Redis"). The Sentinel
# form is the redis+sentinel:// convention of the Redis-Sentinel-Url package (Prefect and
# RedisVL accept it too): the hosts are Sentinels, the path the monitored master's name
# and database. The cluster form follows it: the hosts are seed nodes.
PASSWORD_ENV = "MODELCTL_QUEUE_PASSWORD"
Topology = Literal["single", "sentinel", "cluster"]
QUEUE_SCHEMES: dict[str, tuple[Topology, bool]] = {  # scheme -> (topology, TLS)
    "redis": ("single", False), "rediss": ("single", True),
    "redis+sentinel": ("sentinel", False), "rediss+sentinel": ("sentinel", True),
    "redis+cluster": ("cluster", False), "rediss+cluster": ("cluster", True)}
QUEUE_FORMS: dict[Topology, str] = {
    "single": "redis[s]://[user:password@]host[:port][/db]",
    "sentinel": "redis[s]+sentinel://[user:password@]host[:port][,host[:port]...]/service[/db]",
    "cluster": "redis[s]+cluster://[user:password@]host[:port][,host[:port]...]"}
_QUEUE_DEFAULT_PORT: dict[Topology, int] = {"single": 6379, "sentinel": 26379, "cluster": 6379}


class QueueUrlError(ValueError):
    """``--queue_url`` is none of ``QUEUE_FORMS``. The message never quotes the URL (it may
    hold a password)."""


@dataclass(frozen=True)
class QueueTarget:
    """A parsed ``--queue_url``: the topology, where it is, and the credentials."""

    topology: Topology
    tls: bool
    nodes: tuple[tuple[str, int], ...]
    db: int = 0
    service: str = ""  # Sentinel: the monitored master's name
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    def shown(self) -> str:
        """The target as logs may show it: no userinfo, no options."""
        scheme = next(s for s, kind in QUEUE_SCHEMES.items() if kind == (self.topology, self.tls))
        hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.nodes)
        path = {"single": f"/{self.db}", "sentinel": f"/{self.service}/{self.db}", "cluster": ""}
        return f"{scheme}://{hosts}{path[self.topology]}"


class _Malformed(Exception):
    """One thing wrong with a --queue_url, said without quoting it."""


def _queue_node(text: str, default_port: int, index: int) -> tuple[str, int]:
    host, port_text = text, ""
    if text.startswith("["):  # [IPv6]:port
        host, bracket, tail = text[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise _Malformed(f"host {index + 1} has a malformed [IPv6] address")
        port_text = tail[1:]
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
    if not host or any(c in host for c in " /?#@[]"):
        raise _Malformed(f"host {index + 1} is empty or malformed")
    if port_text and (not port_text.isdigit() or not 0 < int(port_text) < 65536):
        raise _Malformed(f"host {index + 1} has a port that is not a number in 1-65535")
    return host, int(port_text) if port_text else default_port


def _queue_db(text: str) -> int:
    if text and not text.isdigit():
        raise _Malformed("has a database that is not a number")
    return int(text or 0)


def parse_queue_url(url: str, env: Mapping[str, str] | None = None) -> QueueTarget:
    """Parse ``url`` (the password from ``PASSWORD_ENV`` in ``env`` unless the URL has
    one); ``QueueUrlError`` if it is none of the forms. A single server's ?options are
    left to redis-py."""
    env = os.environ if env is None else env
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in QUEUE_SCHEMES:
        raise QueueUrlError("--queue_url has an unknown scheme (expected one of: "
                            f"{'; '.join(QUEUE_FORMS.values())})")
    topology, tls = QUEUE_SCHEMES[scheme.lower()]
    try:
        return _parse_queue_url(topology, tls, rest, env)
    except _Malformed as exc:
        raise QueueUrlError(f"--queue_url {exc} (expected {QUEUE_FORMS[topology]})") from None


def _parse_queue_url(topology: Topology, tls: bool, rest: str,
                     env: Mapping[str, str]) -> QueueTarget:
    if "#" in rest:
        raise _Malformed("must not have a #fragment (percent-encode # in a password)")
    rest, _, query = rest.partition("?")
    if query and topology != "single":
        raise _Malformed(f"takes no ?options in its {topology} form")
    netloc, _, path = rest.partition("/")
    userinfo, _, hosts = netloc.rpartition("@")
    user_text, _, password_text = userinfo.partition(":")
    username, password = unquote(user_text) or None, unquote(password_text) or None
    password = password or env.get(PASSWORD_ENV) or None
    if not hosts:
        raise _Malformed("names no host")
    port = _QUEUE_DEFAULT_PORT[topology]
    nodes = tuple(_queue_node(h, port, i) for i, h in enumerate(hosts.split(",")))
    segments = path.split("/") if path else []
    if topology == "sentinel":
        if not segments or not segments[0] or len(segments) > 2:
            raise _Malformed("needs the Sentinel service name as its path: /service[/db]")
        db = _queue_db(segments[1] if len(segments) > 1 else "")
        return QueueTarget(topology, tls, nodes, db, unquote(segments[0]), username, password)
    if len(nodes) > 1 and topology == "single":
        raise _Malformed("names several hosts: use redis+sentinel:// or redis+cluster://")
    if len(segments) > 1:
        raise _Malformed("has a path beyond /db")
    db = _queue_db(segments[0] if segments else "")
    if topology == "cluster" and db:
        raise _Malformed("names a database other than 0 (Redis Cluster has only database 0)")
    return QueueTarget(topology, tls, nodes, db, "", username, password)
