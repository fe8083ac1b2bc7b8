"""Redis past one server, on 127.0.0.1, from Debian's redis-server: a Sentinel set (one
master, one replica, three Sentinels) and a three-master Cluster. Started and stopped by
PID, polled with deadlines; nothing stands in for Redis.

Redis facts this relies on (redis.io: "High availability with Redis Sentinel", "Scale
with Redis Cluster"; the directives as redis/redis's annotated ``sentinel.conf`` and
``redis.conf`` document them): ``redis-server FILE --sentinel`` runs a Sentinel from a
config file it rewrites (so each gets its own file; github.com/redis/redis
``src/sentinel.c`` ``sentinelHandleConfiguration`` reads it); Sentinels find the
replicas from the master's INFO and each other through the master's
``__sentinel__:hello`` channel, every two seconds (``sentinelSendHello``,
``SENTINEL_PUBLISH_PERIOD``), so a fixture waits until each Sentinel counts the replica
and two peers before it hands the set over (a failover needs a majority of Sentinels to
authorise it). ``--cluster-enabled yes`` nodes are joined by ``redis-cli --cluster
create`` (``src/redis-cli.c`` ``clusterManagerCommandCreate``); the cluster serves once
every node reports ``cluster_state:ok`` in ``CLUSTER INFO``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import ManagedProcess, free_port, wait_for

SERVICE = "queue"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000


def _binary(name: str) -> str:
    path = shutil.which(name) or f"/usr/bin/{name}"
    if not Path(path).exists():
        pytest.fail(f"{name} is not installed: run `make setup`")
    return path


def _client(port: int, **kwargs: Any) -> Any:
    import redis

    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2,
                       socket_connect_timeout=2, **kwargs)


def _server(name: str, port: int, directory: Path, *extra: str) -> ManagedProcess:
    directory.mkdir(parents=True, exist_ok=True)
    argv = [_binary("redis-server"), "--bind", "127.0.0.1", "--port", str(port),
            "--dir", str(directory), "--save", "", "--appendonly", "yes",
            "--appendfsync", "everysec", "--protected-mode", "yes", "--daemonize", "no",
            *extra]
    return ManagedProcess(name, argv, log_dir=directory)


def _answers(port: int) -> bool:
    return bool(_client(port).ping())


def start_server(directory: Path, *extra: str) -> tuple[int, ManagedProcess]:
    """One more plain server with these redis.conf directives, answering PING."""
    port = free_port()
    process = _server(f"redis-{port}", port, directory, *extra)
    try:
        wait_for(lambda: _answers(port), timeout_s=20, what=f"redis {port} to answer PING")
    except BaseException:
        process.stop()
        raise
    return port, process


@dataclass
class SentinelSet:
    """One master, one replica and three Sentinels monitoring them as ``SERVICE``."""

    directory: Path
    servers: dict[int, ManagedProcess] = field(default_factory=dict)  # port -> process
    sentinels: dict[int, ManagedProcess] = field(default_factory=dict)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def master_port(self) -> int:
        """The master's port as a majority of the Sentinels report it."""
        seen: dict[int, int] = {}
        for port in self.sentinels:
            try:
                _host, master = _client(port).sentinel_get_master_addr_by_name(SERVICE)
            except Exception:
                continue
            seen[int(master)] = seen.get(int(master), 0) + 1
        best = max(seen.items(), key=lambda item: item[1], default=(0, 0))
        return best[0] if best[1] >= 2 else 0

    def is_master(self, port: int) -> bool:
        return bool(_client(port).info("replication")["role"] == "master")

    def client(self, port: int | None = None) -> Any:
        return _client(port or self.master_port())

    def kill(self, port: int, sig: int) -> None:
        process = self.servers[port]
        process.signal(sig)
        wait_for(lambda: process.poll() is not None, timeout_s=10, what=f"redis {port} to exit")

    def stop(self) -> None:
        for process in [*self.sentinels.values(), *self.servers.values()]:
            process.stop()


def _sentinel_config(path: Path, port: int, master_port: int) -> None:
    path.write_text("\n".join([
        f"port {port}", "bind 127.0.0.1", "daemonize no", f"dir {path.parent}",
        f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2",
        f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
        f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
        f"sentinel parallel-syncs {SERVICE} 1", ""]))


def _sentinel_sees_everyone(port: int) -> bool:
    state = _client(port).sentinel_master(SERVICE)
    return bool(int(state["num-slaves"]) >= 1 and int(state["num-other-sentinels"]) >= 2)


def start_sentinel_set(directory: Path) -> SentinelSet:
    """Start the set and wait until a failover could happen (replica linked, quorum met)."""
    found = SentinelSet(directory)
    try:
        master, replica = free_port(), free_port()
        found.servers[master] = _server(f"redis-master-{master}", master, directory / "master")
        wait_for(lambda: _answers(master), timeout_s=20, what="the master to answer PING")
        found.servers[replica] = _server(f"redis-replica-{replica}", replica,
                                         directory / "replica",
                                         "--replicaof", "127.0.0.1", str(master))
        wait_for(lambda: _client(replica).info("replication").get("master_link_status") == "up",
                 timeout_s=20, what="the replica to link to its master")
        for _ in range(3):
            port = free_port()
            config = directory / f"sentinel-{port}" / "sentinel.conf"
            config.parent.mkdir(parents=True)
            _sentinel_config(config, port, master)
            found.sentinels[port] = ManagedProcess(
                f"sentinel-{port}", [_binary("redis-server"), str(config), "--sentinel"],
                log_dir=config.parent)
        for port in found.sentinels:
            wait_for(lambda p=port: _sentinel_sees_everyone(p), timeout_s=30,
                     what=f"sentinel {port} to see the replica and two peers")
        return found
    except BaseException:
        found.stop()
        raise


@pytest.fixture
def redis_sentinel(tmp_path: Path) -> Iterator[SentinelSet]:
    """A fresh Sentinel set per test: a failover test changes which server is master."""
    found = start_sentinel_set(tmp_path / "sentinel")
    try:
        yield found
    finally:
        found.stop()


@pytest.fixture(scope="session")
def redis_sentinel_shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSet]:
    """One Sentinel set for the tests that never fail it over."""
    found = start_sentinel_set(tmp_path_factory.mktemp("sentinel-shared"))
    try:
        yield found
    finally:
        found.stop()


@dataclass
class RedisCluster:
    """Three masters, no replicas; the 16384 slots split by redis-cli."""

    directory: Path
    nodes: dict[int, ManagedProcess] = field(default_factory=dict)

    @property
    def url(self) -> str:
        seeds = list(self.nodes)[:2]  # two seeds: the client discovers the third
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in seeds)

    def node(self, port: int) -> Any:
        """A plain client of one node (its own keys only: KEYS, DBSIZE are per node)."""
        return _client(port)

    def keyslot(self, key: str) -> int:
        return int(_client(next(iter(self.nodes))).cluster("KEYSLOT", key))

    def owner(self, slot: int) -> int:
        """The port of the master serving ``slot``."""
        for start, end, master, *_replicas in _client(next(iter(self.nodes))).execute_command(
                "CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return int(master[1])
        raise LookupError(f"no node serves slot {slot}")

    def keys_by_node(self, pattern: str) -> dict[int, list[str]]:
        return {port: sorted(k.decode() for k in _client(port).keys(pattern))
                for port in self.nodes}

    def stop(self) -> None:
        for process in self.nodes.values():
            process.stop()


def _cluster_ok(port: int) -> bool:
    return "cluster_state:ok" in _client(port).execute_command("CLUSTER", "INFO").decode()


def start_cluster(directory: Path, masters: int = 3) -> RedisCluster:
    found = RedisCluster(directory)
    try:
        for _ in range(masters):
            port = free_port()
            found.nodes[port] = _server(
                f"redis-cluster-{port}", port, directory / str(port), "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
                # The bus port defaults to port + 10000, past 65535 for a high free port.
                "--cluster-port", str(free_port()))
        for port in found.nodes:
            wait_for(lambda p=port: _answers(p), timeout_s=20, what=f"node {port} to answer")
        done = subprocess.run(
            [_binary("redis-cli"), "--cluster", "create",
             *(f"127.0.0.1:{port}" for port in found.nodes), "--cluster-replicas", "0",
             "--cluster-yes"], capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{done.stdout}{done.stderr}")
        for port in found.nodes:
            wait_for(lambda p=port: _cluster_ok(p), timeout_s=30,
                     what=f"node {port} to report cluster_state:ok")
        return found
    except BaseException:
        found.stop()
        raise


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    found = start_cluster(tmp_path_factory.mktemp("redis-cluster"))
    try:
        yield found
    finally:
        found.stop()


