"""The gateway's nginx config: rendered from routes (pure) and accepted by the real nginx."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from devstack import DevEnvError
from devstack._gateway import Gateway, Routes, render_config

STABLE, CANARY, SHADOW = ("127.0.0.1:9001",), ("127.0.0.1:9002",), ("127.0.0.1:9003",)
FRONTENDS = ("127.0.0.1:9004", "127.0.0.1:9005")


def _nginx_accepts(tmp_path: Path, routes: Routes) -> None:
    gateway = Gateway(tmp_path / "nginx", port=18999, admin_port=18998)
    gateway.write(routes)  # runs `nginx -t` on it first, raising if refused
    checked = subprocess.run(
        [*gateway.argv(), "-t"], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("routes", [
    Routes(1, STABLE),
    Routes(2, STABLE, CANARY, 0),
    Routes(3, STABLE, CANARY, 20),
    Routes(4, STABLE, CANARY, 100),
    Routes(5, STABLE, CANARY, 50, SHADOW),
    Routes(6, STABLE, shadow=SHADOW),
    Routes(7, FRONTENDS, ("127.0.0.1:9006", "127.0.0.1:9007"), 30, ("127.0.0.1:9008",)),
], ids=["stable", "canary-0", "canary-20", "canary-100", "canary-shadow", "shadow", "queue"])
def test_every_shape_of_routes_is_a_config_nginx_accepts(tmp_path: Path, routes: Routes) -> None:
    _nginx_accepts(tmp_path, routes)


def test_split_mirror_and_fallback_are_rendered_as_asked() -> None:
    config = render_config(Routes(7, STABLE, CANARY, 20, SHADOW), prefix=Path("/p"),
                           port=8080, admin_port=8081)
    assert "20% canary;\n        * stable;" in config
    assert (f"server {CANARY[0]} max_fails=0;\n        server {STABLE[0]} max_fails=0 backup;"
            in config)
    assert "mirror /__modelctl_mirror;" in config and f"server {SHADOW[0]}" in config
    assert "listen 127.0.0.1:8080;" in config and "listen 127.0.0.1:8081;" in config
    assert "keepalive_timeout 0;" in config
    assert '"generation": 7' in config and '"canary_weight_pct": 20' in config
    assert "user " not in config  # only when nginx starts as root

    alone = render_config(Routes(1, STABLE), prefix=Path("/p"), port=1, admin_port=2)
    assert "* stable;" in alone and "upstream canary" not in alone and "mirror" not in alone
    full = render_config(Routes(1, STABLE, CANARY, 100), prefix=Path("/p"), port=1, admin_port=2)
    assert "* canary;" in full and "% canary" not in full


def test_a_role_with_several_servers_is_one_upstream_and_stable_backs_the_canary() -> None:
    canary = ("127.0.0.1:9006", "127.0.0.1:9007")
    config = render_config(Routes(1, FRONTENDS, canary, 40), prefix=Path("/p"), port=1,
                           admin_port=2)
    assert ("    upstream stable {\n        server 127.0.0.1:9004 max_fails=0;\n"
            "        server 127.0.0.1:9005 max_fails=0;\n    }") in config
    assert ("    upstream canary {\n        server 127.0.0.1:9006 max_fails=0;\n"
            "        server 127.0.0.1:9007 max_fails=0;\n"
            "        server 127.0.0.1:9004 max_fails=0 backup;\n"
            "        server 127.0.0.1:9005 max_fails=0 backup;\n    }") in config


def test_routes_are_validated_and_round_trip() -> None:
    routes = Routes(3, STABLE, CANARY, 25, SHADOW)
    assert Routes.from_dict(routes.to_dict()) == routes
    assert routes.next(canary=(), canary_weight_pct=0) == Routes(4, STABLE, (), 0, SHADOW)
    assert routes.to_dict()["stable"] == list(STABLE)
    assert Routes(1, STABLE).to_dict()["canary"] is None  # no such role: null
    with pytest.raises(ValueError, match="needs a canary"):
        Routes(1, STABLE, (), 10)
    with pytest.raises(ValueError, match="outside 0-100"):
        Routes(1, STABLE, CANARY, 101)
    with pytest.raises(ValueError, match="at least one server"):
        Routes(1, ())
    with pytest.raises(ValueError, match="host:port"):
        Routes(1, ("127.0.0.1:1; include /etc/passwd",))  # nothing reaches the config unchecked
    with pytest.raises(TypeError, match="tuple of host:port"):
        Routes(1, "127.0.0.1:1")  # type: ignore[arg-type]


def test_routes_written_before_queue_mode_still_read() -> None:
    old = {"generation": 3, "stable": "127.0.0.1:9001", "canary": "127.0.0.1:9002",
           "canary_weight_pct": 20, "shadow": None}
    assert Routes.from_dict(old) == Routes(3, STABLE, CANARY, 20)


def test_paths_nginx_cannot_hold_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DevEnvError, match="characters an nginx config cannot hold"):
        render_config(Routes(1, STABLE), prefix=tmp_path / 'a"b', port=1, admin_port=2)


def test_a_config_nginx_refuses_is_never_installed(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    gateway = Gateway(tmp_path / "nginx", port=18997, admin_port=18996)
    gateway.write(Routes(1, STABLE, CANARY, 10))
    before = gateway.conf_path.read_text()
    monkeypatch.setattr(gateway, "render", lambda routes: "http { no_such_directive on; }\n")
    with pytest.raises(DevEnvError, match=r"nginx refused .*no_such_directive"):
        gateway.write(Routes(2, STABLE))
    assert gateway.conf_path.read_text() == before

    missing = Gateway(tmp_path / "nginx", port=1, admin_port=2, binary=str(tmp_path / "nope"))
    with pytest.raises(DevEnvError, match="make setup"):
        missing.write(Routes(2, STABLE))
