"""Promise: hostile input to the predictor gets a 4xx within a bounded time, memory stays
bounded, and a good request right after succeeds.

One real predictor (fixed-latency: it echoes each instance, so every 200 can be checked
exactly) takes a hand-written matrix of malformed bodies and broken HTTP, then
property-based fuzzing of V1 and V2 bodies, byte-level mutations and odd headers. Its
limits here: 2 s request timeout (so 2 s for a head or a body to arrive), 16 instances,
1000 characters per text, the default 8 MiB body.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.system.reliability._hostile_cases import (
    ANSWER_WITHIN_S,
    DEADLINE_SLACK_S,
    JSON,
    MATRIX,
    MAX_CHARS,
    MAX_INSTANCES,
    RAW,
    RSS_BOUND_MIB,
    TIMEOUT_S,
)
from tests.system.reliability._support import (
    Predictor,
    RssSampler,
    add,
    is_soak,
    raw_exchange,
    record,
    scaled,
)

pytestmark = pytest.mark.soak

FUZZ = settings(
    max_examples=scaled(300, 5000), deadline=None, database=None, derandomize=not is_soak(),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def server(launch: Callable[..., Predictor]) -> Predictor:
    return launch("hostile", "--request_timeout_ms", str(int(TIMEOUT_S * 1000)),
                  "--max_instances", str(MAX_INSTANCES), "--max_input_chars", str(MAX_CHARS),
                  options={"latency_ms": 1, "max_batch_size": 64})


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    """One keep-alive client: a new httpx client per request costs ~50 ms (TLS context)."""
    with httpx.Client(timeout=30) as http:
        yield http


@pytest.fixture(scope="module")
def rss(server: Predictor) -> Iterator[RssSampler]:
    with RssSampler(server.proc.pid) as sampler:
        yield sampler
    record("hostile.rss_baseline_mib", round(sampler.baseline / 2**20))
    record("hostile.rss_growth_mib", round(sampler.growth_mib, 1))


def assert_still_serving(server: Predictor, client: httpx.Client | None = None) -> None:
    body = {"instances": ["still fine"]}
    r = (client.post(server.url + server.v1_path, json=body) if client is not None
         else server.v1(["still fine"]))
    assert r.status_code == 200, r.text
    assert r.json() == {"predictions": ["still fine"]}


def _path(server: Predictor, kind: str) -> str:
    return {"V1": server.v1_path, "V2": server.v2_path, "NOPE": "/v1/models/nope:predict"}[kind]


@pytest.mark.parametrize(("kind", "body", "headers", "expected"), [c[1:] for c in MATRIX],
                         ids=[c[0] for c in MATRIX])
def test_hostile_body_gets_a_4xx_and_serving_goes_on(
    server: Predictor, client: httpx.Client, rss: RssSampler, kind: str, body: bytes,
    headers: dict[str, str], expected: int,
) -> None:
    started = time.monotonic()
    r = client.post(server.url + _path(server, kind), content=body, headers=headers)
    elapsed = time.monotonic() - started
    assert r.status_code == expected, r.text[:300]
    document = r.json()
    assert document.get("error") or document.get("detail"), document
    assert elapsed < ANSWER_WITHIN_S, f"answered after {elapsed:.2f} s"
    add("hostile.matrix_cases")
    assert_still_serving(server, client)


@pytest.mark.parametrize(("parts", "gap_s", "expected", "within_s"), [c[1:] for c in RAW],
                         ids=[c[0] for c in RAW])
def test_broken_http_gets_a_4xx_in_bounded_time(
    server: Predictor, client: httpx.Client, rss: RssSampler,
    parts: Callable[[str], list[bytes]], gap_s: float, expected: int, within_s: float,
) -> None:
    result = raw_exchange(server.port, parts(server.v1_path), gap_s=gap_s,
                          timeout_s=within_s + 5)
    assert result.outcome == "answered", (result.outcome, result.body[:200])
    assert result.status == expected, result.body[:300]
    assert result.elapsed_s < within_s, f"answered after {result.elapsed_s:.2f} s"
    add("hostile.matrix_cases")
    assert_still_serving(server, client)


def test_idle_and_half_open_connections_are_closed(
    server: Predictor, client: httpx.Client, rss: RssSampler
) -> None:
    """Slowloris: connections that send nothing, or half a head, do not stay open."""
    count = scaled(100, 400)
    socks = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(count)]
    try:
        for i, sock in enumerate(socks):
            if i % 2:
                sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n")
        assert_still_serving(server, client)  # held connections do not block new ones
        started = time.monotonic()
        for sock in socks:
            sock.settimeout(max(0.1, TIMEOUT_S + DEADLINE_SLACK_S - (time.monotonic() - started)))
            data = b""
            while chunk := sock.recv(4096):  # until the server closes it
                data += chunk
            assert data == b"" or data.startswith(b"HTTP/1.1 408"), data[:100]
        record("hostile.idle_connections_closed_within_s",
               round(time.monotonic() - started, 2))
    finally:
        for sock in socks:
            sock.close()
    add("hostile.matrix_cases")
    record("hostile.idle_connections_held", count)
    assert_still_serving(server, client)


# -- property-based fuzzing ---------------------------------------------------------------
LEAF = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40))
VALUE = st.recursive(LEAF, lambda inner: st.lists(inner, max_size=6)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=5), max_leaves=25)
V1_BODY = st.fixed_dictionaries(
    {"instances": st.lists(VALUE, max_size=MAX_INSTANCES + 3) | VALUE},
    optional={"parameters": VALUE, "extra": VALUE},
)


def _as_orjson_reads(value: Any) -> Any:
    """``value`` as orjson reads it back: integers beyond 64 bits become floats."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else float(value)
    if isinstance(value, list):
        return [_as_orjson_reads(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_orjson_reads(v) for k, v in value.items()}
    return value


def _depth_and_count(value: Any) -> tuple[int, int]:
    if not isinstance(value, list | dict):
        return 0, 0
    children = list(value.values()) if isinstance(value, dict) else value
    inner = [_depth_and_count(c) for c in children]
    return 1 + max((d for d, _ in inner), default=0), len(children) + sum(n for _, n in inner)


def _instance_ok(instance: Any) -> bool:
    if isinstance(instance, str):
        return len(instance) <= MAX_CHARS
    if isinstance(instance, list | dict):
        depth, count = _depth_and_count(instance)
        return depth <= 64 and count <= MAX_CHARS and len(str(instance)) <= MAX_CHARS
    return True


def v1_is_valid(body: dict[str, Any]) -> bool:
    """The oracle: would the predictor accept this V1 body (fixed-latency, these limits)?"""
    instances = _as_orjson_reads(body["instances"])
    return (
        set(body) <= {"instances", "parameters"}
        and isinstance(instances, list) and 1 <= len(instances) <= MAX_INSTANCES
        and isinstance(body.get("parameters") or {}, dict)
        and all(_instance_ok(i) for i in instances)
    )


def _post(client: httpx.Client, server: Predictor, path: str, content: bytes,
          headers: dict[str, str] | None = None) -> httpx.Response:
    started = time.monotonic()
    r = client.post(server.url + path, content=content, headers=headers or JSON)
    assert r.status_code < 500, (r.status_code, r.text[:300], content[:300])
    assert time.monotonic() - started < ANSWER_WITHIN_S + 1
    return r


@FUZZ
@given(body=V1_BODY, ascii_only=st.booleans())
def test_fuzz_v1_bodies(server: Predictor, client: httpx.Client, rss: RssSampler,
                        body: dict[str, Any], ascii_only: bool) -> None:
    content = json.dumps(body, ensure_ascii=ascii_only).encode()
    r = _post(client, server, server.v1_path, content)
    add("hostile.fuzz_v1_cases")
    if v1_is_valid(body):
        assert r.status_code == 200, (r.text[:300], content[:300])
        assert r.json() == {"predictions": _as_orjson_reads(body["instances"])}
    else:
        assert 400 <= r.status_code < 500 and r.json().get("error"), (r.status_code, r.text)


TENSOR = st.fixed_dictionaries(
    {"name": st.sampled_from(["input", "input", "text", ""]),
     "datatype": st.sampled_from(["BYTES", "BYTES", "FP32", "INT64", "BOOL", "TEXT", ""]),
     "shape": st.lists(st.integers(min_value=-2, max_value=MAX_INSTANCES + 2), max_size=3),
     "data": st.lists(VALUE, max_size=MAX_INSTANCES + 2) | VALUE},
    optional={"parameters": st.dictionaries(st.text(max_size=8), LEAF, max_size=3)},
)
V2_BODY = st.fixed_dictionaries(
    {"inputs": st.lists(TENSOR, min_size=0, max_size=2)},
    optional={"id": st.text(max_size=20), "parameters": st.dictionaries(
        st.text(max_size=8), LEAF, max_size=3), "outputs": VALUE},
)


@FUZZ
@given(body=V2_BODY)
def test_fuzz_v2_bodies(server: Predictor, client: httpx.Client, rss: RssSampler,
                        body: dict[str, Any]) -> None:
    r = _post(client, server, server.v2_path, json.dumps(body).encode())
    add("hostile.fuzz_v2_cases")
    if r.status_code != 200:
        assert 400 <= r.status_code < 500, r.text
        return
    [tensor] = body["inputs"]
    [output] = r.json()["outputs"]
    rows = tensor["shape"][0]
    assert output["shape"] == [rows] and len(output["data"]) == rows
    data = tensor["data"]
    if tensor["datatype"] == "BYTES" and tensor["shape"] == [rows] and isinstance(data, list):
        assert output["data"] == data  # strings echoed exactly


SEEDS = [
    ("V1", b'{"instances": ["hello", {"text": "x", "k": [1, 2.5, null]}], "parameters": {}}'),
    ("V2", b'{"inputs": [{"name": "input", "datatype": "BYTES", "shape": [2], '
           b'"data": ["a", "b"]}], "parameters": {"p": 1}}'),
]
MUTATION = st.tuples(st.sampled_from(["insert", "delete", "replace", "duplicate", "truncate"]),
                     st.integers(min_value=0, max_value=200), st.binary(min_size=1, max_size=8))


def _mutate(data: bytes, mutations: list[tuple[str, int, bytes]]) -> bytes:
    for op, position, blob in mutations:
        at = position % (len(data) + 1)
        if op == "insert":
            data = data[:at] + blob + data[at:]
        elif op == "delete":
            data = data[:at] + data[at + len(blob):]
        elif op == "replace":
            data = data[:at] + blob + data[at + len(blob):]
        elif op == "duplicate":
            data = data[:at] + data[at:at + 2 * len(blob)] * 2 + data[at + 2 * len(blob):]
        else:
            data = data[:at]
    return data


@FUZZ
@given(seed=st.sampled_from(SEEDS), mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_fuzz_mutated_bytes(server: Predictor, client: httpx.Client, rss: RssSampler,
                            seed: tuple[str, bytes],
                            mutations: list[tuple[str, int, bytes]]) -> None:
    kind, original = seed
    content = _mutate(original, mutations)
    r = _post(client, server, _path(server, kind), content)
    add("hostile.fuzz_mutation_cases")
    if r.status_code != 200:
        assert 400 <= r.status_code < 500
        return
    if kind == "V1":  # a mutant that is still a valid request is answered exactly
        assert r.json() == {"predictions": orjson.loads(content)["instances"]}


HEADER_TEXT = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E),
                      max_size=60).map(str.strip)  # h11 refuses to send padded values


@FUZZ
@given(content_type=st.sampled_from(["application/json", "text/plain", "application/xml", "",
                                     "application/json; charset=latin-1", "*/*", "json"])
       | HEADER_TEXT, timeout_ms=st.none() | HEADER_TEXT | st.integers().map(str),
       request_id=HEADER_TEXT, encoding=st.sampled_from(["", "gzip", "br", "identity"]))
def test_fuzz_headers(server: Predictor, client: httpx.Client, rss: RssSampler,
                      content_type: str, timeout_ms: str | None, request_id: str,
                      encoding: str) -> None:
    headers = {"content-type": content_type, "x-request-id": request_id}
    if timeout_ms is not None:
        headers["x-request-timeout-ms"] = timeout_ms
    if encoding:
        headers["content-encoding"] = encoding
    r = _post(client, server, server.v1_path, b'{"instances": ["h"]}', headers)
    add("hostile.fuzz_header_cases")
    if r.status_code == 200:
        assert r.json() == {"predictions": ["h"]}
        if 0 < len(request_id) <= 200:
            assert r.headers["x-request-id"] == request_id
    else:
        assert 400 <= r.status_code < 500


def test_memory_stayed_bounded_and_the_server_still_serves(
    server: Predictor, client: httpx.Client, rss: RssSampler
) -> None:
    """Runs last in the module: the whole matrix and every fuzz case are behind us."""
    assert_still_serving(server, client)
    assert rss.growth_mib < RSS_BOUND_MIB, f"RSS grew by {rss.growth_mib:.0f} MiB"
    assert server.proc.poll() is None
    metrics = server.metrics()
    assert 'code="500"' not in metrics and 'code="503"' not in metrics
