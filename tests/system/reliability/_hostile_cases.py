"""The hand-written hostile inputs of test_hostile_input.py: bodies, and raw HTTP bytes.

Each body case is (id, V1/V2/NOPE path, body, headers, expected status); each raw case
is (id, parts to send for a V1 path, gap between parts, expected status, answer within
seconds). The predictor under test has the limits below.
"""

from __future__ import annotations

import json
from collections.abc import Callable

TIMEOUT_S = 1.0  # --request_timeout_ms: the body and head deadlines too
MAX_INSTANCES = 16
MAX_CHARS = 1000
ANSWER_WITHIN_S = 2.0  # every refusal that does not wait for a deadline
DEADLINE_SLACK_S = 1.5  # a 408 comes within the deadline plus this
RSS_BOUND_MIB = 200  # growth over the whole module, 8 MiB bodies included
JSON = {"content-type": "application/json"}


def deep(levels: int, leaf: bytes = b"1") -> bytes:
    return b"[" * levels + leaf + b"]" * levels


def v2(tensor: bytes, extra: bytes = b"") -> bytes:
    return b'{"inputs": [' + tensor + b"]" + extra + b"}"


def v2_bytes(data: bytes) -> bytes:
    return v2(b'{"name": "input", "datatype": "BYTES", "shape": [1], "data": [' + data + b"]}")


def v2_fp32(data: bytes) -> bytes:
    return v2(b'{"name": "input", "datatype": "FP32", "shape": [1], "data": [' + data + b"]}")


# (id, V1 or V2, body, headers, expected status)
MATRIX: list[tuple[str, str, bytes, dict[str, str], int]] = [
    ("invalid-utf8-v1", "V1", b'{"instances": ["\xff\xfe\xc3"]}', JSON, 400),
    ("invalid-utf8-v2", "V2", v2_bytes(b'"\xff\xfe"'), JSON, 400),
    ("lone-surrogate-v1", "V1", b'{"instances": ["\\ud800"]}', JSON, 400),
    ("lone-surrogate-v2", "V2", v2_bytes(b'"a\\udfffb"'), JSON, 400),
    ("nested-100k-v1", "V1", b'{"instances": ' + deep(100_000) + b"}", JSON, 400),
    ("nested-100k-v2", "V2", b'{"inputs": ' + deep(100_000) + b"}", JSON, 400),
    ("nested-100k-v2-data", "V2", v2_fp32(deep(100_000)), JSON, 400),
    ("nested-300-instance", "V1", b'{"instances": [' + deep(300) + b"]}", JSON, 400),
    ("nested-100k-objects", "V1", b'{"a":' * 100_000 + b"1" + b"}" * 100_000, JSON, 400),
    ("string-10MB", "V1", b'{"instances": ["' + b"x" * 10_000_000 + b'"]}', JSON, 413),
    ("string-7MB-v1", "V1", b'{"instances": ["' + b"x" * 7_000_000 + b'"]}', JSON, 400),
    ("string-7MB-v2", "V2", v2_bytes(b'"' + b"y" * 7_000_000 + b'"'), JSON, 400),
    ("nan-v1", "V1", b'{"instances": [NaN]}', JSON, 400),
    ("infinity-v1", "V1", b'{"instances": [Infinity]}', JSON, 400),
    ("nan-v2", "V2", v2_fp32(b"NaN"), JSON, 400),
    ("minus-infinity-v2", "V2", v2_fp32(b"-Infinity"), JSON, 400),
    ("overflow-1e400-v2", "V2", v2_fp32(b"1e400"), JSON, 400),
    ("nan-text-plain-v1", "V1", b'{"instances": [NaN]}', {"content-type": "text/plain"}, 400),
    ("huge-int-v1", "V1", b'{"instances": [' + b"9" * 5000 + b"]}", JSON, 400),
    ("huge-int-v2", "V2", v2(b'{"name": "input", "datatype": "INT64", "shape": [1], '
                             b'"data": [' + b"9" * 5000 + b"]}"), JSON, 400),
    ("duplicate-key-v1", "V1", b'{"instances": ["a"], "instances": ["b"]}', JSON, 400),
    ("duplicate-key-v2", "V2", v2(b'{"name": "input", "datatype": "BYTES", "shape": [1], '
                                  b'"data": ["a"]}', b', "inputs": []'), JSON, 400),
    ("duplicate-key-v2-tensor", "V2",
     v2(b'{"name": "input", "datatype": "BYTES", "shape": [1], "data": ["a"], "data": ["b"]}'),
     JSON, 400),
    ("duplicate-key-in-instance", "V1", b'{"instances": [{"k": 1, "k": 2}]}', JSON, 400),
    ("xml-v1", "V1", b"<instances><i>a</i></instances>", {"content-type": "application/xml"},
     400),
    ("form-v1", "V1", b"instances=a&instances=b",
     {"content-type": "application/x-www-form-urlencoded"}, 400),
    ("multipart-v1", "V1", b"--b\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--b--",
     {"content-type": "multipart/form-data; boundary=b"}, 400),
    ("octet-stream-v2", "V2", b"\x00\x01\x02\x03" * 64,
     {"content-type": "application/octet-stream"}, 400),
    ("json-says-form-is-json", "V1", b"a=1&b=2", JSON, 400),
    ("no-content-type-garbage-v2", "V2", b"\x89PNG\r\n\x1a\n", {}, 400),
    ("empty-body-v1", "V1", b"", JSON, 400),
    ("empty-body-v2", "V2", b"", JSON, 400),
    ("json-null", "V1", b"null", JSON, 400),
    ("json-array", "V1", b'[{"instances": [1]}]', JSON, 400),
    ("json-string", "V2", b'"inputs"', JSON, 400),
    ("too-many-instances", "V1", json.dumps({"instances": list(range(17))}).encode(), JSON, 400),
    ("too-many-rows-v2", "V2", v2(b'{"name": "input", "datatype": "BYTES", "shape": [100000], '
                                  b'"data": [' + b",".join([b'"r"'] * 100_000) + b"]}"), JSON, 400),
    ("shape-lies-v2", "V2", v2(b'{"name": "input", "datatype": "BYTES", '
                               b'"shape": [99999999999999999999], "data": ["a"]}'), JSON, 400),
    ("negative-shape-v2", "V2", v2(b'{"name": "input", "datatype": "BYTES", "shape": [-1], '
                                   b'"data": ["a"]}'), JSON, 400),
    ("binary-extension-lies-v2", "V2", b'{"inputs": []}xx',
     {"content-type": "application/octet-stream", "inference-header-content-length": "9999"},
     400),
    ("binary-extension-length-not-a-number", "V2", b'{"inputs": []}',
     {"content-type": "application/octet-stream", "inference-header-content-length": "abc"},
     400),
    ("binary-extension-short-fp32-tensor", "V2",
     b'{"inputs":[{"name":"input","datatype":"FP32","shape":[4],'
     b'"parameters":{"binary_data_size":16}}]}' + b"\x00" * 3,
     {"content-type": "application/octet-stream", "inference-header-content-length": "96"}, 400),
    ("cloudevent-bad-specversion", "V1", b'{"instances": ["a"]}',
     {**JSON, "ce-specversion": "9", "ce-id": "1", "ce-source": "s", "ce-type": "t"}, 400),
    ("timeout-header-nan", "V1", b'{"instances": ["a"]}', {**JSON, "x-request-timeout-ms": "NaN"},
     400),
    ("timeout-header-overflow", "V1", b'{"instances": ["a"]}',
     {**JSON, "x-request-timeout-ms": "1e999"}, 400),
    ("timeout-header-negative", "V1", b'{"instances": ["a"]}',
     {**JSON, "x-request-timeout-ms": "-5"}, 400),
    ("unknown-model", "NOPE", b'{"instances": ["a"]}', JSON, 404),
]


LONG_TEXT_BODY = b'{"instances": ["' + b"x" * 100_000 + b'"]}'  # over the head limit


def _head(path: str, *lines: str) -> bytes:
    return ("\r\n".join([f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *lines])
            + "\r\n\r\n").encode("latin-1")


RAW: list[tuple[str, Callable[[str], list[bytes]], float, int, float]] = [
    # (id, parts for the V1 path, gap between parts, expected status, answer within s)
    ("huge-content-length",
     lambda p: [_head(p, "Content-Type: application/json", "Content-Length: 99999999999999")
                + b'{"inst'], 0.0, 413, ANSWER_WITHIN_S),
    ("content-length-not-a-number",
     lambda p: [_head(p, "Content-Length: 12abc") + b"{}"], 0.0, 400, ANSWER_WITHIN_S),
    ("two-content-lengths",
     lambda p: [_head(p, "Content-Length: 2", "Content-Length: 20") + b"{}"], 0.0, 400,
     ANSWER_WITHIN_S),
    ("content-length-and-chunked",
     lambda p: [_head(p, "Content-Length: 5", "Transfer-Encoding: chunked") + b"0\r\n\r\n"],
     0.0, 400, ANSWER_WITHIN_S),
    ("body-shorter-than-declared",
     lambda p: [_head(p, "Content-Type: application/json", "Content-Length: 100")
                + b'{"instances"'], 0.0, 408, TIMEOUT_S + DEADLINE_SLACK_S),
    ("slow-drip-body",
     lambda p: [_head(p, "Content-Type: application/json", "Content-Length: 40")]
     + [bytes([b]) for b in b'{"instances": ["drip, drip, drip..."]}  '], 0.25, 408,
     TIMEOUT_S + DEADLINE_SLACK_S),
    ("slow-drip-chunked-body",
     lambda p: [_head(p, "Content-Type: application/json", "Transfer-Encoding: chunked")]
     + [b"1\r\n" + bytes([b]) + b"\r\n" for b in b'{"instances": ["drip"]}'] + [b"0\r\n\r\n"],
     0.25, 408, TIMEOUT_S + DEADLINE_SLACK_S),
    ("slow-drip-headers",
     lambda p: [f"POST {p} HTTP/1.1\r\n".encode()] + [f"X-Drip-{i}: y\r\n".encode()
                                                       for i in range(40)],
     0.25, 408, TIMEOUT_S + DEADLINE_SLACK_S),
    # The blank line that ends the head split across two reads, then a body larger
    # than the head limit: it is a body (400: text too long), not a head (431).
    ("head-end-split-across-reads",
     lambda p: [_head(p, "Content-Type: application/json",
                      f"Content-Length: {len(LONG_TEXT_BODY)}")[:-1],
                b"\n" + LONG_TEXT_BODY], 0.05, 400, ANSWER_WITHIN_S),
    ("one-200KiB-header",
     lambda p: [_head(p, "X-Big: " + "a" * 200 * 1024, "Content-Length: 2") + b"{}"], 0.0, 431,
     ANSWER_WITHIN_S),
    ("20000-headers",
     lambda p: [_head(p, *[f"X-H{i}: v" for i in range(20000)], "Content-Length: 2") + b"{}"],
     0.0, 431, ANSWER_WITHIN_S),
    ("8MiB-request-line",
     lambda p: [f"GET /{'a' * 8 * 1024 * 1024} HTTP/1.1\r\n\r\n".encode()], 0.0, 431,
     ANSWER_WITHIN_S),
    ("tls-handshake-on-plain-http",
     lambda p: [bytes.fromhex("16030100a5010000a10303") + b"\x00" * 160], 0.0, 400,
     ANSWER_WITHIN_S),
    ("not-http-at-all", lambda p: [b"\x00\xff" * 512 + b"\r\n\r\n"], 0.0, 400, ANSWER_WITHIN_S),
]
