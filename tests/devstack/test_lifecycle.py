"""``modelctl dev up / status / down`` for real, and nginx reloads under load.

One environment (stable and canary predictors, nginx, Prometheus) comes up; a second
``up`` is refused; the gateway is reloaded back to back (every 0.2-1 s, depending on
the machine) while open-loop load runs through it, and not one request fails or needs
a retry; ``down`` stops exactly the recorded processes and leaves a look-alike alone.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import httpx
import psutil

from devstack import DevEnv
from tests.support import ManagedProcess, free_port, wait_for
from tests.support.devstack import DevCli, push_version, state_of, stop_recorded

NAME = "lifecycle"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_up_reload_under_load_and_down(dev_cli: DevCli, dev_registry: Path,
                                       tmp_path: Path) -> None:
    push_version(dev_registry, NAME)
    port = free_port()
    # Looks like ours by name; a broad kill would take it down.
    decoy = ManagedProcess("decoy", [sys.executable, "-c", "import time; time.sleep(120)",
                                     "nginx: master process", "-m predictor --role stable"],
                           log_dir=tmp_path)
    try:
        up = dev_cli.run("dev", "up", NAME, "--canary", "1", "--port", str(port),
                         "--scrape-interval", "1s")
        assert up.returncode == 0, up.stderr
        assert f"predict     http://127.0.0.1:{port}/v1/models/{NAME}:predict" in up.stdout
        assert "predictor-canary: ready" in up.stderr and "nginx: ready" in up.stderr
        _second_up_is_refused(dev_cli, port)
        _status_and_routing(dev_cli, port)
        _reloads_lose_nothing(dev_cli)
        _prometheus_scrapes_with_static_labels(dev_cli)
        _down_stops_exactly_what_it_started(dev_cli)
        assert decoy.poll() is None
    finally:
        decoy.stop()
        stop_recorded(dev_cli.state_dir, NAME)


def _second_up_is_refused(dev_cli: DevCli, port: int) -> None:
    again = dev_cli.run("dev", "up", NAME, "--port", str(free_port()))
    assert again.returncode == 2
    assert again.stderr.startswith(f"error: dev environment '{NAME}' is already up (gateway "
                                   f"http://127.0.0.1:{port}")


def _status_and_routing(dev_cli: DevCli, port: int) -> None:
    doc = dev_cli.json("dev", "status", NAME)
    assert {c["name"]: c["state"] for c in doc["components"]} == {
        "predictor-stable": "ready", "predictor-canary": "ready", "nginx": "ready",
        "prometheus": "ready"}
    assert doc["routes"]["canary_weight_pct"] == 0 and doc["routes"]["canary"] is not None
    reply = httpx.post(f"http://127.0.0.1:{port}/v1/models/{NAME}:predict",
                       json={"instances": ["hi"]}, headers={"x-request-id": "abc-1"}, timeout=10)
    assert reply.status_code == 200 and reply.json() == {"predictions": ["hi"]}
    assert reply.headers["x-modelctl-route"] == "stable"  # no rollout: the canary gets 0%
    assert reply.headers["x-request-id"] == "abc-1"  # passed through to the predictor
    text = dev_cli.ok("dev", "status")  # the only environment: no name needed
    assert "routes      all to stable" not in text and "0% to canary" in text


def _reloads_lose_nothing(dev_cli: DevCli) -> None:
    env = DevEnv(NAME, dev_cli.state_dir)
    state = env.read()
    gateway = env.gateway(state)
    assert state.nginx is not None
    load = dev_cli.load(NAME, rate=150, duration_s=8)
    routes, reloads = state.routes, 0
    for weight in itertools.cycle((30, 100, 0, 70)):
        if load.proc.poll() is not None:
            break
        routes = routes.next(canary_weight_pct=weight)
        gateway.reload(state.nginx, routes)
        assert gateway.loaded() == routes
        reloads += 1
    summary, lines = load.finish()
    assert reloads >= 3, reloads
    assert summary["status_counts"] == {"200": summary["sent"]}, summary["status_counts"]
    assert summary["transport_failures"] == 0
    assert len(lines) == summary["sent"]  # every request reached nginx and was answered
    assert all(a.status == 200 and len(a.upstreams) == 1 for a in lines)  # none retried
    assert {a.route for a in lines} == {"stable", "canary"}


def _prometheus_scrapes_with_static_labels(dev_cli: DevCli) -> None:
    state = state_of(dev_cli.state_dir, NAME)
    url = f"http://127.0.0.1:{state['prometheus_port']}/api/v1/query"
    query = f'sum by (role) (modelctl_requests_total{{namespace="local",isvc="{NAME}"}})'

    def both_roles() -> bool:
        result = httpx.get(url, params={"query": query}, timeout=5).json()["data"]["result"]
        return {r["metric"]["role"] for r in result} == {"stable", "canary"}

    wait_for(both_roles, timeout_s=20, interval_s=0.5, what="scrapes of both predictors")


def _down_stops_exactly_what_it_started(dev_cli: DevCli) -> None:
    state = state_of(dev_cli.state_dir, NAME)
    pids = [state["nginx"]["pid"], state["prometheus"]["pid"]]
    pids += [m["process"]["pid"] for p in state["predictors"].values() for m in p["servers"]]
    pids += [c.pid for c in psutil.Process(state["nginx"]["pid"]).children()]  # its workers
    assert all(_running(pid) for pid in pids)
    down = dev_cli.json("dev", "down", NAME)
    assert sorted(down["stopped"]) == ["nginx", "predictor-canary", "predictor-stable",
                                       "prometheus"]
    assert not any(_running(pid) for pid in pids)
    assert not (dev_cli.state_dir / NAME / "state.json").exists()
    gone = dev_cli.run("dev", "status", NAME)
    assert gone.returncode == 2 and f"no dev environment '{NAME}' is up" in gone.stderr
    logs = json.dumps(state)  # the logs stay for a post-mortem
    assert all(Path(m["process"]["log"]).exists() for p in state["predictors"].values()
               for m in p["servers"]), logs
