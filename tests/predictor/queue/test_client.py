"""``--queue_url``: the three topologies' URL forms, their errors (never the password), and
the client each builds (nothing is sent until the first command)."""

from __future__ import annotations

import asyncio
import re

import pytest

from predictor._config import ServerConfig, parse_config
from predictor._queue_url import PASSWORD_ENV, QueueUrlError, parse_queue_url
from predictor.queue._client import connect, shown, uses_sharded_pubsub

SECRET = "s3cr3t-pw"  # appears in every URL below; must appear in no message


@pytest.mark.parametrize(("url", "topology", "tls", "nodes", "db", "service"), [
    ("redis://127.0.0.1:6379/0", "single", False, [("127.0.0.1", 6379)], 0, ""),
    ("rediss://cache.internal/3", "single", True, [("cache.internal", 6379)], 3, ""),
    ("redis://[::1]:7000", "single", False, [("::1", 7000)], 0, ""),
    ("redis+sentinel://s1:26380,s2,s3:5000/mymaster", "sentinel", False,
     [("s1", 26380), ("s2", 26379), ("s3", 5000)], 0, "mymaster"),
    ("rediss+sentinel://s1/queue/2", "sentinel", True, [("s1", 26379)], 2, "queue"),
    ("redis+cluster://n1:7000,n2:7001", "cluster", False, [("n1", 7000), ("n2", 7001)], 0, ""),
    ("REDISS+CLUSTER://n1/", "cluster", True, [("n1", 6379)], 0, ""),
    ("redis+cluster://n1/0", "cluster", False, [("n1", 6379)], 0, ""),
])
def test_each_form_names_its_topology(url: str, topology: str, tls: bool,
                                      nodes: list[tuple[str, int]], db: int,
                                      service: str) -> None:
    target = parse_queue_url(url, env={})
    assert (target.topology, target.tls, list(target.nodes), target.db, target.service) == (
        topology, tls, nodes, db, service)
    assert target.password is None


def test_the_password_comes_from_the_url_or_else_the_environment() -> None:
    url = f"redis+sentinel://app:{SECRET}%40x@s1,s2/queue"
    target = parse_queue_url(url, env={PASSWORD_ENV: "from-env"})
    assert (target.username, target.password) == ("app", f"{SECRET}@x")  # percent-decoded
    target = parse_queue_url("redis+cluster://n1:7000", env={PASSWORD_ENV: SECRET})
    assert (target.username, target.password) == (None, SECRET)
    assert SECRET not in repr(target)
    assert parse_queue_url("redis://:@h", env={}).password is None


@pytest.mark.parametrize(("url", "says"), [
    (f"http://u:{SECRET}@h:6379", "unknown scheme"),
    (f"redis:/u:{SECRET}@h", "unknown scheme"),
    (f"redis://u:{SECRET}@", "names no host"),
    (f"redis://u:{SECRET}@h:{SECRET}", "port that is not a number"),
    (f"redis://u:{SECRET}@h:0", "port that is not a number"),
    (f"redis://u:{SECRET}@h:70000", "port that is not a number"),
    (f"redis://u:pa/{SECRET}@h:6379", "port that is not a number"),  # an unencoded /
    (f"redis://u:{SECRET}@h1,h2", "several hosts"),
    (f"redis://u:{SECRET}@h/{SECRET}", "database that is not a number"),
    (f"redis://u:{SECRET}@h/0/x", "path beyond /db"),
    (f"redis://u:{SECRET}#x@h", "#fragment"),
    (f"redis+sentinel://u:{SECRET}@s1,s2", "service name"),
    (f"redis+sentinel://u:{SECRET}@s1//0", "service name"),
    (f"redis+sentinel://u:{SECRET}@s1/m/0/x", "service name"),
    (f"redis+sentinel://u:{SECRET}@s1/m?db=1", "no ?options"),
    (f"redis+sentinel://u:{SECRET}@s1,,s2/m", "host 2 is empty"),
    (f"redis+sentinel://u:{SECRET}@[::1/m", "malformed [IPv6]"),
    (f"redis+cluster://u:{SECRET}@n1/1", "only database 0"),
    (f"redis+cluster://u:{SECRET}@n1?x={SECRET}", "no ?options"),
])
def test_a_malformed_url_is_refused_without_quoting_it(url: str, says: str) -> None:
    with pytest.raises(QueueUrlError, match=re.escape(says)) as raised:
        parse_queue_url(url, env={})
    assert SECRET not in str(raised.value)
    assert SECRET not in shown(url)


def test_the_server_refuses_a_malformed_url_at_start_with_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--model_name", "m", "--queue_role", "frontend",
            "--queue_url", f"redis+sentinel://u:{SECRET}@s1:26379"]
    with pytest.raises(SystemExit) as exited:
        parse_config(argv, env={})
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--queue_url needs the Sentinel service name" in err and SECRET not in err
    for url in ("redis://h/0", "redis+sentinel://s1,s2/queue/1", "redis+cluster://n1,n2"):
        assert ServerConfig(model_name="m", queue_url=url, queue_role="worker").queue_url == url


def test_the_url_may_come_from_the_environment_and_help_never_prints_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://app:{SECRET}@h:6379/0"
    env = {"MODELCTL_QUEUE_URL": url}
    config = parse_config(["--model_name", "m", "--queue_role", "worker"], env=env)
    assert config.queue_url == url  # what kustomize/overlays/queue-external-redis relies on
    given = parse_config(["--model_name", "m", "--queue_role", "worker",
                          "--queue_url", "redis://other:6379/1"], env=env)
    assert given.queue_url == "redis://other:6379/1"  # the flag wins, as for every flag
    with pytest.raises(SystemExit) as exited:
        parse_config(["--help"], env=env)
    assert exited.value.code == 0
    shown_help = capsys.readouterr().out
    assert "MODELCTL_QUEUE_URL" in shown_help and SECRET not in shown_help


def test_shown_drops_credentials_and_options() -> None:
    assert shown(f"redis://app:{SECRET}@h:6380/2?password={SECRET}") == "redis://h:6380/2"
    assert shown(f"rediss+sentinel://:{SECRET}@s1,[::1]:5/q") == (
        "rediss+sentinel://s1:26379,[::1]:5/q/0")
    assert shown(f"redis+cluster://u:{SECRET}@n1:7000") == "redis+cluster://n1:7000"
    assert shown(f"nope://u:{SECRET}@h") == "nope://(unparsable)"


def test_each_topology_builds_its_client_without_sending_anything() -> None:
    async def build() -> list[tuple[str, bool, int]]:
        built = []
        for url in ("redis://127.0.0.1:1/0", "redis+sentinel://127.0.0.1:1,127.0.0.1:2/q/0",
                    "redis+cluster://127.0.0.1:1"):  # nothing listens on these ports
            client = connect(url, socket_timeout_s=1.0, max_connections=7,
                             env={PASSWORD_ENV: SECRET})
            pool = getattr(client, "connection_pool", None)
            size = pool.max_connections if pool is not None else -1
            built.append((type(client).__name__, uses_sharded_pubsub(client), size))
            if pool is not None:
                assert pool.connection_kwargs["password"] == SECRET
                assert pool.timeout == 1.0  # a burst waits for a connection, bounded
            await client.aclose()
        return built

    assert asyncio.run(build()) == [("QueueRedis", False, 7), ("SentinelMaster", False, 7),
                                    ("ShardedCluster", True, -1)]
