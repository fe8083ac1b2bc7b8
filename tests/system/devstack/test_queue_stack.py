"""``modelctl dev up --queue`` for real: redis-server, frontends behind nginx, workers.

One environment comes up with 2 frontends and 2 workers for stable; requests through the
gateway are answered by way of the version's stream; ``dev status`` shows every process;
Prometheus scrapes each frontend and worker. A rollout with ``--target local`` then gives
its canary its own frontends and workers on its own stream; promotion stops the old
stable's processes while load runs (nothing fails), a second rollout is rolled back
(only the canary's go), and ``dev down`` stops every recorded PID, redis-server included.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.support import free_port, wait_for
from tests.support.devstack import DevCli, push_version, state_of, stop_recorded
from tests.support.grafana import ALL, Prometheus, load, no_data, queries_in

NAME = "queued"
TARGET = ("--target", "local")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _pids(state: dict[str, Any], role: str, kind: str) -> list[int]:
    return [m["process"]["pid"] for m in state["predictors"][role][kind]]


def _components(dev_cli: DevCli) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in dev_cli.json("dev", "status", NAME)["components"]}


def _predict(port: int, text: str) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{port}/v1/models/{NAME}:predict",
                      json={"instances": [text]}, timeout=30)


def _xinfo_read(redis_port: int, version: int) -> int:
    """Entries the workers' group has read from ``version``'s stream."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=redis_port)
    try:
        groups = client.xinfo_groups(f"modelctl:{{{NAME}:{version}}}:requests")
        return int(groups[0]["entries-read"] or 0)
    finally:
        client.close()


@pytest.fixture(scope="module")
def queued(dev_cli: DevCli, dev_registry: Path) -> Iterator[int]:
    """The environment: stable = version 1 as 2 frontends and 2 workers; yields its port."""
    push_version(dev_registry, NAME)
    port = free_port()
    try:
        up = dev_cli.run("dev", "up", NAME, "--queue", "--frontends", "2", "--workers", "2",
                         "--port", str(port), "--scrape-interval", "1s")
        assert up.returncode == 0, up.stderr
        assert "redis: ready" in up.stderr and "worker-stable-2: ready" in up.stderr
        yield port
    finally:
        stop_recorded(dev_cli.state_dir, NAME)


def test_a_queue_stack_serves_rolls_out_and_goes_down_by_pid(
        dev_cli: DevCli, dev_registry: Path, queued: int) -> None:
    first = state_of(dev_cli.state_dir, NAME)
    _serves_through_the_queue(dev_cli, queued, first)
    _status_lists_every_process(dev_cli)
    _prometheus_scrapes_every_frontend_and_worker(first)

    canary = _a_canary_gets_its_own_frontends_and_workers(dev_cli, dev_registry, queued)
    _promotion_stops_the_old_stable_and_load_sees_no_failure(dev_cli, queued, first, canary)
    promoted = state_of(dev_cli.state_dir, NAME)
    _a_rollback_stops_only_the_canary(dev_cli, dev_registry, queued, promoted)
    _the_serving_dashboard_shows_the_queue(promoted)
    _down_stops_every_pid(dev_cli, first)


def _serves_through_the_queue(dev_cli: DevCli, port: int, state: dict[str, Any]) -> None:
    for i in range(20):
        reply = _predict(port, f"q-{i}")
        assert reply.status_code == 200 and reply.json() == {"predictions": [f"q-{i}"]}
    assert _xinfo_read(state["redis_port"], 1) >= 20  # every one went through the stream
    access = (dev_cli.state_dir / NAME / "nginx" / "logs" / "access.log").read_text()
    frontends = [f"127.0.0.1:{m['port']}" for m in state["predictors"]["stable"]["servers"]]
    assert all(f'"{address}"' in access for address in frontends)  # nginx used both
    worker = state["predictors"]["stable"]["workers"][0]["port"]
    refused = httpx.post(f"http://127.0.0.1:{worker}/v1/models/{NAME}:predict",
                         json={"instances": ["x"]}, timeout=10)
    assert refused.status_code == 404  # a worker serves no predict endpoint


def _status_lists_every_process(dev_cli: DevCli) -> None:
    doc = dev_cli.json("dev", "status", NAME)
    assert {c["name"]: c["state"] for c in doc["components"]} == {
        "frontend-stable-1": "ready", "frontend-stable-2": "ready",
        "worker-stable-1": "ready", "worker-stable-2": "ready",
        "nginx": "ready", "prometheus": "ready", "redis": "ready"}
    assert doc["queue"]["frontends"] == 2 and doc["queue"]["workers"] == 2
    assert doc["queue"]["url"].startswith("redis://127.0.0.1:")
    assert len(doc["routes"]["stable"]) == 2 and doc["routes"]["canary"] is None
    text = dev_cli.ok("dev", "status", NAME)
    assert "worker-stable-2" in text and f"queue       {doc['queue']['url']}" in text


def _prometheus_scrapes_every_frontend_and_worker(state: dict[str, Any]) -> None:
    url = f"http://127.0.0.1:{state['prometheus_port']}/api/v1/query"
    stable = state["predictors"]["stable"]
    wanted = {f"127.0.0.1:{m['port']}" for m in stable["servers"] + stable["workers"]}

    def all_up() -> bool:
        result = httpx.get(url, params={"query": f'up{{isvc="{NAME}"}} == 1'},
                           timeout=5).json()["data"]["result"]
        return {r["metric"]["instance"] for r in result} >= wanted

    wait_for(all_up, timeout_s=20, interval_s=0.5, what="scrapes of every frontend and worker")


def _the_serving_dashboard_shows_the_queue(state: dict[str, Any]) -> None:
    """Every query of the serving dashboard, as Grafana sends it, over this stack's
    Prometheus: all run, and the queue-mode row has data (tests/support/grafana.py)."""
    prom = Prometheus(f"http://127.0.0.1:{state['prometheus_port']}", scrape_s=1.0)
    board = load("modelctl-serving")
    end = time.time()
    chosen = {"namespace": "local", "isvc": NAME, "model": NAME, "version": ALL, "role": ALL}
    # A queue stack runs no multi-model predictor and no LLM, and fixed-latency pads no
    # tokens.
    padding = ("Batch cap and padding", "{{model}}@{{version}} {{role}} padding")
    absent = queries_in(board, rows=("Multi-model", "LLM", "Accuracy"), panels=[padding])
    assert no_data(board, prom, chosen, end - 600, end, step_s=2.0) == absent


def _a_canary_gets_its_own_frontends_and_workers(dev_cli: DevCli, dev_registry: Path,
                                                 port: int) -> int:
    version = push_version(dev_registry, NAME, output_prefix="v2:")
    start = ("rollout", "start", NAME, "--to", f"{NAME}@{version}", "--steps", "50",
             "--interval", "1m", *TARGET)
    planned = dev_cli.json(*start, "--dry-run")["planned"]
    assert planned["start"] == [f"predictor-canary {NAME}@{version} (2 frontends, 2 workers)"]
    dev_cli.json(*start)
    found = _components(dev_cli)
    for name in ("frontend-canary-1", "frontend-canary-2", "worker-canary-1",
                 "worker-canary-2"):
        assert found[name]["state"] == "ready" and found[name]["version"] == version
    answers = {r.headers["x-modelctl-route"]: r.json()["predictions"][0]
               for r in (_predict(port, "split") for _ in range(30))}
    assert answers == {"stable": "split", "canary": "v2:split"}  # 50%: both, surely
    state = state_of(dev_cli.state_dir, NAME)
    assert _xinfo_read(state["redis_port"], version) >= 1  # the canary's own stream
    return version


def _promotion_stops_the_old_stable_and_load_sees_no_failure(
        dev_cli: DevCli, port: int, before: dict[str, Any], version: int) -> None:
    during = state_of(dev_cli.state_dir, NAME)
    old = _pids(before, "stable", "servers") + _pids(before, "stable", "workers")
    new = _pids(during, "canary", "servers") + _pids(during, "canary", "workers")
    load = dev_cli.load(NAME, rate=40, duration_s=8)
    promoted = dev_cli.json("rollout", "promote", NAME, "--full", *TARGET)
    assert promoted["phase"] == "Promoted"
    summary, _ = load.finish()
    assert summary["transport_failures"] == 0 and set(summary["status_counts"]) == {"200"}
    assert not any(_running(pid) for pid in old) and all(_running(pid) for pid in new)
    after = state_of(dev_cli.state_dir, NAME)
    assert list(after["predictors"]) == ["stable"]
    assert _pids(after, "stable", "servers") + _pids(after, "stable", "workers") == new
    assert _predict(port, "after").json() == {"predictions": ["v2:after"]}
    assert sorted(_components(dev_cli)) == [
        "frontend-stable-1", "frontend-stable-2", "nginx", "prometheus", "redis",
        "worker-stable-1", "worker-stable-2"]


def _a_rollback_stops_only_the_canary(dev_cli: DevCli, dev_registry: Path, port: int,
                                      promoted: dict[str, Any]) -> None:
    version = push_version(dev_registry, NAME, output_prefix="v3:")
    dev_cli.json("rollout", "start", NAME, "--to", f"{NAME}@{version}", "--steps", "20",
                 "--interval", "1m", *TARGET)
    during = state_of(dev_cli.state_dir, NAME)
    canary = _pids(during, "canary", "servers") + _pids(during, "canary", "workers")
    assert len(canary) == 4 and all(_running(pid) for pid in canary)
    back = dev_cli.json("rollout", "rollback", NAME, "--reason", "test", *TARGET)
    assert back["phase"] == "RolledBack"
    assert not any(_running(pid) for pid in canary)
    stable = _pids(promoted, "stable", "servers") + _pids(promoted, "stable", "workers")
    assert all(_running(pid) for pid in stable)
    assert state_of(dev_cli.state_dir, NAME)["routes"]["canary"] is None
    assert _predict(port, "back").json() == {"predictions": ["v2:back"]}


def _down_stops_every_pid(dev_cli: DevCli, first: dict[str, Any]) -> None:
    state = state_of(dev_cli.state_dir, NAME)
    pids = [state["nginx"]["pid"], state["prometheus"]["pid"], state["redis"]["pid"]]
    pids += _pids(state, "stable", "servers") + _pids(state, "stable", "workers")
    assert all(_running(pid) for pid in pids)
    down = dev_cli.json("dev", "down", NAME)
    assert sorted(down["stopped"]) == [
        "frontend-stable-1", "frontend-stable-2", "nginx", "prometheus", "redis",
        "worker-stable-1", "worker-stable-2"]
    assert not any(_running(pid) for pid in pids)
    assert first["redis"]["pid"] == state["redis"]["pid"]  # one redis-server all along
    assert not (dev_cli.state_dir / NAME / "state.json").exists()
    assert (dev_cli.state_dir / NAME / "redis" / "appendonlydir").is_dir()  # AOF was on
