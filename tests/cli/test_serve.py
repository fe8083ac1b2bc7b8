"""``modelctl serve NAME@REF -- FLAGS``: the flags after ``--`` reach the predictor, and
every ``serve`` form that ``--help`` and docs/MULTI_MODEL.md show works as written.

A real ``modelctl serve`` frontend and a real ``modelctl serve`` worker, both given
``--queue_url … --queue_role …`` after ``--``, share a real redis-server: a request
sent to the frontend is answered by way of the version's stream, which only happens
when both processes run in the role they were given. The worker takes its queue URL
from ``MODELCTL_QUEUE_URL`` instead, as the ``queue-external-redis`` overlay gives it
(from a Secret, never in args).
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from common.tenants import hash_key, new_key
from tests.support import ManagedProcess, free_port, wait_http_ok
from tests.support.devstack import MODEL
from tests.support.redis import RedisServer

ROOT = Path(__file__).resolve().parents[2]
Start = Callable[..., tuple[ManagedProcess, str]]


@pytest.fixture
def serve(dev_registry: Path, tmp_path: Path) -> Iterator[Start]:
    """Starts ``modelctl serve rehearse@1 -- EXTRA`` as a process; returns it and its URL."""
    started: list[ManagedProcess] = []

    def start(role: str, *extra: str, env: dict[str, str] | None = None,
              what: tuple[str, ...] = (f"{MODEL}@1",)) -> tuple[ManagedProcess, str]:
        """``what``: the serve command's own arguments; ``extra`` go after ``--``."""
        port = free_port()
        argv = [sys.executable, "-m", "cli", "serve", *what, "--registry",
                str(dev_registry), "--cache-dir", str(tmp_path / "cache"), "--port", str(port),
                "--grpc-port", str(free_port()), "--", *extra]
        proc = ManagedProcess(f"serve-{role}", argv, log_dir=tmp_path, cwd=ROOT, env=env)
        started.append(proc)
        return proc, f"http://127.0.0.1:{port}"

    yield start
    for proc in started:
        proc.stop()


def test_queue_flags_after_the_double_dash_reach_the_predictor(
        serve: Start, redis_server: RedisServer) -> None:
    queue = ("--queue_url", redis_server.url)
    frontend, frontend_url = serve("frontend", *queue, "--queue_role", "frontend")
    worker, worker_url = serve("worker", "--queue_role", "worker",
                               env={"MODELCTL_QUEUE_URL": redis_server.url})
    wait_http_ok(f"{frontend_url}/v2/health/ready", timeout_s=60, proc=frontend)
    wait_http_ok(f"{worker_url}/v2/health/ready", timeout_s=60, proc=worker)

    reply = httpx.post(f"{frontend_url}/v1/models/{MODEL}:predict",
                       json={"instances": ["through the queue"]}, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"predictions": ["through the queue"]}
    stream = f"modelctl:{{{MODEL}:1}}:requests"
    groups = redis_server.client().xinfo_groups(stream)
    assert groups[0]["entries-read"] >= 1  # it went through the stream, to the worker
    assert 'role="stable"' in next(line for line in httpx.get(
        f"{frontend_url}/metrics", timeout=10).text.splitlines()
        if line.startswith("modelctl_stream_depth{"))
    refused = httpx.post(f"{worker_url}/v1/models/{MODEL}:predict", json={"instances": ["x"]},
                         timeout=10)
    assert refused.status_code == 404 and "queue worker" in refused.text


def test_several_models_are_served_and_each_fetched_when_first_asked_for(
        serve: Start, dev_registry: Path, tmp_path: Path) -> None:
    from registry import Registry

    reg = Registry.open(str(dev_registry))
    src = tmp_path / "other-src"
    src.mkdir()
    (src / "task.json").write_text('{"latency_ms": 1, "output_prefix": "other:"}')
    other = reg.push(src, "serve-other", "fixed-latency").version
    proc, url = serve("multi", what=("--model", f"{MODEL}@1", "--model",
                                     f"serve-other@{other}", "--memory-budget-mb", "64"))
    wait_http_ok(f"{url}/v2/health/ready", timeout_s=60, proc=proc)
    cache = tmp_path / "cache"
    assert not (cache / MODEL / "1").exists()  # nothing fetched before it is needed
    index = httpx.post(f"{url}/v2/repository/index", timeout=10).json()
    assert [(r["name"], r["version"], r["state"]) for r in index] == [
        (MODEL, "1", "UNAVAILABLE"), ("serve-other", str(other), "UNAVAILABLE")]
    reply = httpx.post(f"{url}/v1/models/serve-other:predict", json={"instances": ["x"]},
                       timeout=60)
    assert reply.status_code == 200 and reply.json() == {"predictions": ["other:x"]}
    assert (cache / "serve-other" / str(other) / "MANIFEST.json").is_file()
    assert not (cache / MODEL / "1").exists()
    assert httpx.post(f"{url}/v1/models/{MODEL}:predict", json={"instances": ["y"]},
                      timeout=60).status_code == 200
    assert (cache / MODEL / "1" / "MANIFEST.json").is_file()


@pytest.mark.parametrize("args", [
    ["--model", f"{MODEL}@1"],  # no budget
    ["--model", f"{MODEL}@1", "--model", f"{MODEL}@1", "--memory-budget-mb", "64"],
    [f"{MODEL}@1", "--model", f"{MODEL}@1", "--memory-budget-mb", "64"],
    [],  # nothing to serve
])
def test_a_bad_multi_model_command_line_exits_2(args: list[str], dev_registry: Path) -> None:
    import subprocess

    done = subprocess.run([sys.executable, "-m", "cli", "serve", *args, "--registry",
                           str(dev_registry)], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr


def documented_forms() -> list[list[str]]:
    """The arguments of every ``modelctl serve`` example in ``serve --help`` and in
    docs/MULTI_MODEL.md's console blocks, continuation lines joined."""
    from cli._serve import serve as command

    texts = [(command.__doc__ or "").split("Examples:")[1],
             *re.findall(r"```console\n(.*?)```", (ROOT / "docs/MULTI_MODEL.md").read_text(),
                         re.S)]
    forms = []
    for text in texts:
        for line in re.sub(r"\\\n\s*", "", text).splitlines():
            words = shlex.split(line)
            if words[:2] == ["modelctl", "serve"]:
                forms.append(words[2:])
    return forms


@pytest.fixture(scope="module")
def demo_registry(registry_dir: Path) -> Path:
    """The models the examples name, as ``make demo`` builds them: the session's demo
    registry, with ``demo-fixed`` too (``ensure_demo`` pushes only what changed)."""
    from scripts.demo_models import ensure_demo

    for name in ("demo-fixed", "demo-chat-acme", "demo-chat-beta"):  # the adapters: demo-chat's
        ensure_demo(str(registry_dir), name)
    return registry_dir


def test_every_documented_serve_form_serves(demo_registry: Path, redis_server: RedisServer,
                                            tmp_path: Path) -> None:
    forms = documented_forms()
    assert len(forms) >= 7, forms  # the help's six examples and MULTI_MODEL's one
    token = tmp_path / "repository-token"
    token.write_text("s3cret-for-the-test\n")
    key = new_key()  # the adapter form's tenants.yaml: acme, on its adapter
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(yaml.safe_dump({"tenants": {"acme": {
        "keys": [hash_key(key)], "adapter": "demo-chat-acme"}}}))
    started: list[tuple[ManagedProcess, str, list[str], list[str]]] = []
    try:
        for number, form in enumerate(forms):
            own, _, after = (form[:form.index("--")], "--", form[form.index("--") + 1:]) \
                if "--" in form else (form, "", [])
            after = [word.replace("redis://127.0.0.1:6379/0", redis_server.url)
                     .replace("~/.modelctl/repository-token", str(token))
                     .replace("tenants.yaml", str(tenants)) for word in after]
            if own[0].startswith("demo-chat@"):  # an LLM: a cache of its own size
                after += ["--kv_cache_memory_mb", "512"]
            if "--port" in own:
                del own[own.index("--port"):own.index("--port") + 2]
            port = free_port()
            argv = [sys.executable, "-m", "cli", "serve", *own, "--registry",
                    str(demo_registry), "--cache-dir", str(tmp_path / "cache"), "--port",
                    str(port), "--grpc-port", str(free_port()), "--", *after]
            proc = ManagedProcess(f"form-{number}", argv, log_dir=tmp_path, cwd=ROOT)
            names = [ref.split("@")[0] for ref in
                     ([own[i + 1] for i, word in enumerate(own) if word == "--model"]
                      or own[:1])]
            started.append((proc, f"http://127.0.0.1:{port}", names, after))
        for proc, url, names, after in started:
            wait_http_ok(f"{url}/v2/health/ready", timeout_s=120, proc=proc)
            if "--adapter" in proc.argv:  # an LLM: a generation on acme's adapter
                reply = httpx.post(f"{url}/sample", content=b"E equals ", timeout=120,
                                   headers={"x-api-key": key})
                assert reply.status_code == 200 and reply.text, (proc.argv, reply.text)
                continue
            for name in names:
                reply = httpx.post(f"{url}/v1/models/{name}:predict",
                                   json={"instances": ["as written"]}, timeout=60)
                if "worker" in after:  # a queue worker serves the stream, not HTTP
                    assert reply.status_code == 404 and "queue worker" in reply.text
                else:
                    assert reply.status_code == 200, (proc.argv, reply.text)
            if "--repository_token_file" in after:  # the token reached the predictor
                load = f"{url}/v2/repository/models/{names[0]}/load"
                assert httpx.post(load, timeout=60).status_code == 401
                assert httpx.post(load, timeout=60, headers={
                    "Authorization": "Bearer s3cret-for-the-test"}).status_code == 200
    finally:
        for proc, *_ in started:
            proc.stop()
