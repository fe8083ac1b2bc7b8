"""Mirroring, capture and the shadow report for an LLM, with two real demo-chat predictors.

The primary mirrors every generation to a shadow (``--role shadow``); both capture, and
both need a tenant's API key (the mirror carries the client's). The requests come from
the official ``openai`` client (whole and streamed) and from httpx (``/sample`` and a bad
body); the report is ``modelctl shadow report`` run in-process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from common.tenants import hash_key, new_key
from tests.support.fleet import records, run_cli, wait_records
from tests.support.predictor import RunningPredictor
from tests.system.llm.conftest import CACHE

MODEL = "demo-chat"
KEY, FRUGAL = new_key(), new_key()
TOKENS = 8
PROMPTS = [f"Name {n} colours, one word each." for n in range(1, 5)] + [
    "What is the capital of France?", "Say hello.", "Count to three.", "What is 2 + 2?"]


@pytest.fixture(scope="module")
def pair(registry_dir: Path, start_predictor: Callable[..., RunningPredictor],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningPredictor, Path]]:
    from scripts.demo_models import ensure_demo

    ensure_demo(str(registry_dir), MODEL)
    capture = tmp_path_factory.mktemp("llm-capture")
    # Both sides guard with the same tenants file: the mirror carries the client's key.
    tenants = capture.parent / "llm-tenants.yaml"
    tenants.write_text(yaml.safe_dump({"tenants": {
        "acme": {"keys": [hash_key(KEY)]},
        "frugal": {"keys": [hash_key(FRUGAL)], "tokens": "10 per 10 minutes"}}}))
    common = (*CACHE, "--capture_uri", str(capture), "--capture_flush_s", "0.5",
              "--tenants_file", str(tenants), "--enable_grpc", "false")
    shadow = start_predictor(MODEL, "stable", *common, "--role", "shadow", ready_timeout_s=300)
    primary = start_predictor(MODEL, "stable", *common, "--capture_inputs", "true",
                              "--shadow_url", shadow.url, "--shadow_timeout_ms", "60000",
                              ready_timeout_s=300)
    yield primary, capture
    primary.proc.stop()
    shadow.proc.stop()


@pytest.fixture(scope="module")
def sent(pair: tuple[RunningPredictor, Path]) -> dict[str, str]:
    """Each request ID and the text its client got: greedy (OpenAI's default temperature
    is 1, whose samples a report would rightly call disagreement), one at a time, so that
    the primary's and the shadow's batches hold the same sequences."""
    import openai

    primary, capture = pair
    client = openai.OpenAI(base_url=f"{primary.url}/openai/v1", api_key=KEY, max_retries=0)
    texts: dict[str, str] = {}
    for i, prompt in enumerate(PROMPTS):
        messages: Any = [{"role": "user", "content": prompt}]
        rid = f"whole-{i}"
        whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=TOKENS,
                                               temperature=0,
                                               extra_headers={"x-request-id": rid})
        texts[rid] = whole.choices[0].message.content or ""
        rid = f"stream-{i}"
        chunks = client.chat.completions.create(model=MODEL, messages=messages,
                                                max_tokens=TOKENS, stream=True, temperature=0,
                                                extra_headers={"x-request-id": rid})
        texts[rid] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    for i in range(2):
        rid = f"sample-{i}"
        answer = httpx.post(f"{primary.url}/sample", content=b"E equals ", timeout=120,
                            headers={"x-request-id": rid, "x-api-key": KEY})
        assert answer.status_code == 200
        texts[rid] = answer.text
    bad = httpx.post(f"{primary.url}/openai/v1/chat/completions", timeout=30,
                     json={"model": MODEL, "messages": "not a list"},
                     headers={"x-request-id": "bad-0", "authorization": f"Bearer {KEY}"})
    assert bad.status_code == 400
    total = len(texts) + 1
    wait_records(capture, total, timeout_s=120, role="stable")
    wait_records(capture, total, timeout_s=120, role="shadow")
    return texts


def test_every_generation_is_captured_as_its_client_got_it(
        pair: tuple[RunningPredictor, Path], sent: dict[str, str]) -> None:
    _, capture = pair
    primary = {r["request_id"]: r for r in records(capture, role="stable")}
    shadow = {r["request_id"]: r for r in records(capture, role="shadow")}
    assert set(primary) == set(shadow) == {*sent, "bad-0"}
    for rid, text in sent.items():
        record = primary[rid]
        assert (record["task"], record["status"], record["items"]) == ("llm", 200, 1), rid
        assert json.loads(record["output"]) == [text], rid
        assert record["input_hash"] == shadow[rid]["input_hash"], rid
        assert shadow[rid]["input"] is None  # the shadow keeps only the hash
    assert primary["stream-0"]["protocol"] == "openai-chat"
    assert primary["sample-0"]["protocol"] == "sample"
    assert json.loads(primary["sample-0"]["input"]) == {"prompt": "E equals "}
    # A streamed and a whole request for the same thing hash the same.
    assert primary["stream-3"]["input_hash"] == primary["whole-3"]["input_hash"]
    assert primary["bad-0"]["status"] == shadow["bad-0"]["status"] == 400
    assert "messages" in primary["bad-0"]["error"]


def test_a_tenant_key_is_needed_and_refusals_take_openais_shape(
        pair: tuple[RunningPredictor, Path]) -> None:
    import openai

    primary, _ = pair
    stranger = openai.OpenAI(base_url=f"{primary.url}/openai/v1", api_key="mk-wrong",
                             max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        stranger.chat.completions.create(model=MODEL, max_tokens=2,
                                         messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 401 and "not valid" in caught.value.message
    assert httpx.post(f"{primary.url}/sample", content=b"hi", timeout=30).status_code == 401


def test_the_shadow_report_compares_generations_and_latency(
        pair: tuple[RunningPredictor, Path], sent: dict[str, str],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _, capture = pair
    code, out, err = run_cli(monkeypatch, capsys, "shadow", "report", MODEL, "--primary",
                             str(capture), "--shadow", str(capture), "--format", "json",
                             "--threshold", "min_pairs=10")
    doc = json.loads(out)
    assert code == 0, (err, doc.get("checks"))
    assert doc["task"] == "llm" and doc["verdict"] == "Pass"
    assert doc["pairs"]["pairs"] == len(sent) + 1
    agreement = doc["agreement"]
    assert agreement["items"] == len(sent) and agreement["unpaired_items"] == 0
    assert agreement["exact_match_rate"] >= 0.75 and agreement["token_jaccard"]["mean"] >= 0.8
    latency = doc["pairs"]["latency_ms"]
    assert latency["primary"]["p50"] > 0 and latency["shadow"]["p50"] > 0
    checks = {c["name"] for c in doc["checks"]}
    assert {"token-jaccard-mean", "latency-p99-ratio", "error-rate"} <= checks
    code, table, _ = run_cli(monkeypatch, capsys, "shadow", "report", MODEL, "--primary",
                             str(capture), "--shadow", str(capture), "--threshold",
                             "min_pairs=10")
    assert code == 0 and "token Jaccard" in table


def test_a_tenant_over_its_generated_tokens_gets_429(
        pair: tuple[RunningPredictor, Path], sent: dict[str, str]) -> None:
    """Last in the module: its requests come after the report's window of pairs."""
    import openai

    primary, _ = pair
    client = openai.OpenAI(base_url=f"{primary.url}/openai/v1", api_key=FRUGAL, max_retries=0)

    def ask() -> int:
        try:
            client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8,
                                      temperature=0, extra_body={"ignore_eos": True})
        except openai.RateLimitError as exc:
            assert "generated-token rate" in exc.message
            assert int(exc.response.headers["retry-after"]) >= 1
            return 429
        return 200

    # 8 tokens, then 2 more fill the window of 10 (a generation is charged when it
    # ends, up to what the window holds), then refused.
    assert [ask() for _ in range(3)] == [200, 200, 429]
