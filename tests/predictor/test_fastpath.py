"""The V1 fast path answers exactly what KServe's route answers, and hands off the rest.

Two real predictors serve the same version, one with the fast path (the default) and
one with ``--fast_path false`` (KServe's FastAPI route); every request in the matrix
goes to both and the answers must match: status, headers and body bytes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.predictor import RunningPredictor, push_fixed_latency

JSON = {"content-type": "application/json"}
FLAGS = ("--max_instances", "8", "--max_input_chars", "100", "--max_body_bytes", "20000")
CE_HEADERS = {"ce-specversion": "1.0", "ce-source": "tests", "ce-type": "predict",
              "ce-id": "42", "content-type": "application/json"}
STRUCTURED_CE = json.dumps({"specversion": "1.0", "source": "tests", "type": "predict",
                            "id": "7", "data": {"instances": ["in a cloudevent"]}}).encode()



def _v2(datatype: str = "BYTES", data: str = '["a"]', shape: str = "[1]") -> bytes:
    return (f'{{"inputs": [{{"name": "input", "datatype": "{datatype}", "shape": {shape}, '
            f'"data": {data}}}]}}').encode()


BINARY_V2_JSON = (b'{"inputs": [{"name": "input", "datatype": "BYTES", "shape": [1], '
                  b'"parameters": {"binary_data_size": 5}}]}')
BINARY_V2 = BINARY_V2_JSON + b"\x01\x00\x00\x00b"  # one BYTES element: length 1, "b"

Headers = dict[str, str] | list[tuple[str, str]]
# (id, path suffix after the model name, body, headers)
MATRIX: list[tuple[str, str, bytes, Headers]] = [
    ("good", ":predict", b'{"instances": ["a", "b"]}', JSON),
    ("good, no content-type", ":predict", b'{"instances": ["a"]}', {}),
    ("good, form content-type (curl -d)", ":predict", b'{"instances": ["a"]}',
     {"content-type": "application/x-www-form-urlencoded"}),
    ("good, json with charset", ":predict", b'{"instances": ["a"]}',
     {"content-type": "application/json; charset=utf-8"}),
    ("good, octet-stream", ":predict", b'{"instances": ["a"]}',
     {"content-type": "application/octet-stream"}),
    ("good, parameters", ":predict", b'{"instances": [1, {"k": [2]}], "parameters": {}}', JSON),
    ("client request id", ":predict", b'{"instances": ["a"]}',
     {**JSON, "x-request-id": "client-chosen-id"}),
    ("request timeout header", ":predict", b'{"instances": ["a"]}',
     {**JSON, "x-request-timeout-ms": "5000"}),
    ("unicode", ":predict", '{"instances": ["é ✓ 你好"]}'.encode(), JSON),
    ("structured cloudevent", ":predict", STRUCTURED_CE, JSON),
    ("binary cloudevent", ":predict", b'{"instances": ["a"]}', CE_HEADERS),
    ("malformed json", ":predict", b'{"instances": [', JSON),
    ("NaN", ":predict", b'{"instances": [NaN]}', JSON),
    ("not an object", ":predict", b"[1, 2]", JSON),
    ("missing instances", ":predict", b'{"inputs": []}', JSON),
    ("empty list", ":predict", b'{"instances": []}', JSON),
    ("too many instances", ":predict", b'{"instances": [1,2,3,4,5,6,7,8,9]}', JSON),
    ("text too long", ":predict", b'{"instances": ["' + b"x" * 150 + b'"]}', JSON),
    ("unknown field", ":predict", b'{"instances": [1], "extra": 1}', JSON),
    ("parameters not an object", ":predict", b'{"instances": [1], "parameters": []}', JSON),
    ("poison item", ":predict", b'{"instances": ["ok", {"poison": true}]}', JSON),
    ("bad timeout header", ":predict", b'{"instances": [1]}',
     {**JSON, "x-request-timeout-ms": "soon"}),
    ("repeated key", ":predict", b'{"instances": [1], "instances": [2]}', JSON),
    ("body over limit", ":predict", b'{"instances": ["' + b"y" * 30000 + b'"]}', JSON),
    *[(f"v2 {name}", suffix, body, headers) for name, suffix, body, headers in [
        ("infer", "/infer", _v2(), JSON),
        ("two rows", "/infer", _v2(data='["a", "b"]', shape="[2]"), JSON),
        ("client id", "/infer", b'{"id": "mine", ' + _v2()[1:], JSON),
        ("parameters", "/infer", b'{"parameters": {"k": 1}, ' + _v2()[1:], JSON),
        ("requested output", "/infer", b'{"outputs": [{"name": "output"}], ' + _v2()[1:],
         JSON),
        ("unknown requested output", "/infer", b'{"outputs": [{"name": "nope"}], '
         + _v2()[1:], JSON),
        ("binary output", "/infer", b'{"parameters": {"binary_data_output": true}, '
         + _v2()[1:], JSON),
        ("no content-type", "/infer", _v2(), {}),
        ("json with charset", "/infer", _v2(),
         {"content-type": "application/json; charset=utf-8"}),
        ("client request id", "/infer", _v2(), {**JSON, "x-request-id": "client-chosen-id"}),
        ("repeated timeout header: the first counts", "/infer", _v2(),
         [("content-type", "application/json"), ("x-request-timeout-ms", "5000"),
          ("x-request-timeout-ms", "soon")]),
        ("bad timeout header", "/infer", _v2(), {**JSON, "x-request-timeout-ms": "soon"}),
        ("malformed json", "/infer", b'{"inputs": [', JSON),
        ("NaN", "/infer", _v2(datatype="FP32", data="[NaN]"), JSON),
        ("not an object", "/infer", b"[1, 2]", JSON),
        ("missing inputs", "/infer", b'{"instances": ["a"]}', JSON),
        ("empty inputs", "/infer", b'{"inputs": []}', JSON),
        ("input without datatype", "/infer",
         b'{"inputs": [{"name": "input", "shape": [1], "data": ["a"]}]}', JSON),
        ("FP16 as JSON", "/infer", _v2(datatype="FP16", data="[1.5]"), JSON),
        ("shape and data disagree", "/infer", _v2(shape="[3]"), JSON),
        ("too many rows", "/infer", _v2(data=json.dumps(["r"] * 9), shape="[9]"), JSON),
        ("text too long", "/infer", _v2(data=json.dumps(["x" * 150])), JSON),
        ("unknown field", "/infer", b'{"extra": 1, ' + _v2()[1:], JSON),
        ("repeated key", "/infer", b'{"inputs": [], ' + _v2()[1:], JSON),
        ("binary cloudevent", "/infer", _v2(), CE_HEADERS),
        ("a version's path", "/versions/1/infer", _v2(), JSON),
        ("binary tensor extension", "/infer", BINARY_V2,
         {"inference-header-content-length": str(len(BINARY_V2_JSON))}),
    ]],
]


@pytest.fixture(scope="module")
def pair(start_predictor: Callable[..., RunningPredictor],
         registry_dir: Path) -> tuple[RunningPredictor, RunningPredictor]:
    push_fixed_latency(registry_dir, "fastpath", latency_ms=5, max_batch_size=100)
    fast = start_predictor("fastpath", "latest", *FLAGS)
    kserve = start_predictor("fastpath", "latest", *FLAGS, "--fast_path", "false")
    return fast, kserve


def _answer(server: RunningPredictor, path: str, body: bytes,
            headers: Headers) -> tuple[int, list[tuple[str, str]], bytes]:
    r = httpx.post(server.url + path, content=body, headers=headers, timeout=30)
    kept = [(k, v) for k, v in r.headers.multi_items() if k not in ("date",)]
    # A generated request ID is the V2 response's id too: the same place, another value.
    content = r.content.replace(r.headers.get("x-request-id", "-").encode(), b"<request-id>")
    return r.status_code, kept, content


@pytest.mark.parametrize(("suffix", "body", "headers"), [c[1:] for c in MATRIX],
                         ids=[c[0] for c in MATRIX])
def test_fast_path_answers_what_kserve_answers(
    pair: tuple[RunningPredictor, RunningPredictor], suffix: str, body: bytes,
    headers: Headers,
) -> None:
    fast, kserve = pair
    prefix = "/v2/models/fastpath" if suffix.endswith("/infer") else "/v1/models/fastpath"
    f_status, f_headers, f_body = _answer(fast, prefix + suffix, body, headers)
    k_status, k_headers, k_body = _answer(kserve, prefix + suffix, body, headers)
    assert f_status == k_status, (f_body, k_body)
    assert f_body == k_body
    # Generated request IDs differ from process to process; their place and form do not.
    ids = {"x-request-id", "ce-id", "ce-time"} if "x-request-id" not in headers else set()
    assert [k for k, _ in f_headers] == [k for k, _ in k_headers]
    assert [(k, v) for k, v in f_headers if k not in ids] == \
        [(k, v) for k, v in k_headers if k not in ids]
    # Either way the server goes on serving.
    assert fast.v1(["after"]).json() == {"predictions": ["after"]}


def test_both_paths_count_requests_alike(pair: tuple[RunningPredictor, RunningPredictor]) -> None:
    fast, kserve = pair
    for server in pair:
        server.v1(["counted"])
        httpx.post(server.url + "/v1/models/fastpath:predict", content=b"{", headers=JSON,
                   timeout=10)

    def counted(server: RunningPredictor) -> set[str]:
        return {line.split("{")[1].split(",")[0] for line in server.metrics().splitlines()
                if line.startswith("modelctl_requests_total{")}

    assert counted(fast) == counted(kserve) >= {'code="200"', 'code="400"'}
    # KServe's own per-stage histograms keep counting on the fast path.
    assert "request_predict_seconds_count" in fast.metrics()


# -- which requests the fast path takes (in process, with a recording app behind it) ---------

class Recorder:
    """The app behind the fast path: records what reaches it and answers 299."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.seen.append((scope["path"], body))
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b"kserve"})


def _in_process_fast_path(tmp_path: Path) -> tuple[Any, Recorder, Any]:
    from kserve.model_repository import ModelRepository
    from kserve.protocol.dataplane import DataPlane

    from predictor._config import ServerConfig
    from predictor._errors import PredictorError
    from predictor._fastpath import FastPath
    from predictor._http import PredictorMiddleware, predictor_error_handler
    from predictor._model import BatchingModel
    from predictor._requestlog import RequestLog, RequestLogConfig
    from predictor.handlers._factory import create_handler

    (tmp_path / "task.json").write_text(json.dumps({"latency_ms": 1}))
    config = ServerConfig(model_name="m", model_dir=str(tmp_path), max_instances=4)
    model = BatchingModel(config, create_handler("fixed-latency", tmp_path), "1")
    model.load()
    repository = ModelRepository()
    repository.update(model)
    recorder = Recorder()
    fast = FastPath(recorder, model=model, dataplane=DataPlane(model_registry=repository),
                      exception_handlers={PredictorError: predictor_error_handler})
    # As served: the edge in front reads the body once and hands it to the fast path.
    app = PredictorMiddleware(fast, max_body_bytes=20000, body_timeout_s=5.0,
                              metrics=model.metrics,
                              request_log=RequestLog(RequestLogConfig()))
    return app, recorder, model


def _routing_scenario(model_dir: str) -> None:
    """Run in a child process (kserve's protos clash with tritonclient's in this one);
    prints what each request got and what reached the app behind the fast path."""
    app, recorder, model = _in_process_fast_path(Path(model_dir))

    async def scenario() -> dict[str, tuple[int, str]]:
        out = {}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            async def post(name: str, path: str, body: bytes,
                           headers: dict[str, str] | None = None) -> None:
                r = await client.post(path, content=body, headers=headers or JSON)
                out[name] = (r.status_code, r.text)

            await post("predict", "/v1/models/m:predict", b'{"instances": ["x"]}')
            await post("bad input", "/v1/models/m:predict", b'{"instances": []}')
            await post("not json", "/v1/models/m:predict", b"{nope")
            await post("other model", "/v1/models/other:predict", b'{"instances": ["x"]}')
            await post("v2", "/v2/models/m/infer", _v2())
            await post("v2 invalid", "/v2/models/m/infer", b"{}")
            await post("binary ce", "/v1/models/m:predict", b'{"instances": ["x"]}',
                       CE_HEADERS)
            out["get"] = ((await client.get("/v1/models/m")).status_code, "")
            model.ready = False
            await post("not ready", "/v1/models/m:predict", b'{"instances": ["x"]}')
        return out

    out = asyncio.run(scenario())
    print(json.dumps({"out": out, "seen": [[p, b.decode()] for p, b in recorder.seen]}))


def test_fast_path_answers_predict_itself_and_hands_off_the_rest(tmp_path: Path) -> None:
    code = ("import sys; from tests.predictor.test_fastpath import _routing_scenario; "
            "_routing_scenario(sys.argv[1])")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    out = {name: tuple(answer) for name, answer in result["out"].items()}
    assert out["predict"] == (200, '{"predictions":["x"]}')
    assert out["bad input"][0] == 400 and "empty" in out["bad input"][1]
    assert out["v2"][0] == 200 and '"data":["a"]' in out["v2"][1]
    for handed_off in ("not json", "other model", "v2 invalid", "binary ce", "get",
                       "not ready"):
        assert out[handed_off][0] == 299, handed_off
    # What KServe gets is the request as sent, body included.
    assert ["/v1/models/m:predict", "{nope"] in result["seen"]
    assert len(result["seen"]) == 6


def test_the_heap_is_frozen_before_serving() -> None:
    """freeze_heap leaves the loaded objects out of every later collection."""
    code = ("import gc, predictor._server as s, kserve; s.freeze_heap(); "
            "assert gc.get_freeze_count() > 10000, gc.get_freeze_count(); "
            "print(gc.get_freeze_count())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
