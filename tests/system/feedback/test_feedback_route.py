"""The feedback route on a real predictor (the fixed-latency task echoes each instance,
so a label equal to the instance is correct): labels stored beside the captures before
the answer, judged per version, unknown IDs and repeats counted, the token required,
and the captures' readers never mistake a label file for a capture."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from captures import LABEL_COLUMNS, is_label_file
from tests.support.predictor import RunningPredictor, push_fixed_latency

NAME = "feedback-fixed"
TOKEN = secrets.token_hex(16)


@pytest.fixture(scope="module")
def served(registry_dir: Path, start_predictor: Callable[..., RunningPredictor],
           tmp_path_factory: pytest.TempPathFactory) -> tuple[RunningPredictor, Path]:
    push_fixed_latency(registry_dir, NAME, latency_ms=5)
    capture = tmp_path_factory.mktemp("feedback-capture")
    token = capture.parent / "feedback-token"
    token.write_text(TOKEN)
    predictor = start_predictor(NAME, "latest", "--capture_uri", str(capture),
                                "--capture_flush_s", "0.5", "--feedback_token_file", str(token))
    return predictor, capture


def _feedback(url: str, body: object, token: str | None = TOKEN) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.post(f"{url}/v2/models/{NAME}/feedback", json=body, headers=headers,
                      timeout=30)


def _metric(predictor: RunningPredictor, outcome: str) -> float:
    for line in predictor.metrics().splitlines():
        if line.startswith("modelctl_feedback_labels_total{") and f'outcome="{outcome}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no series for outcome {outcome}")


def test_labels_are_judged_stored_and_counted(served: tuple[RunningPredictor, Path]) -> None:
    predictor, capture = served
    for i in range(10):
        reply = httpx.post(f"{predictor.url}/v1/models/{NAME}:predict",
                           json={"instances": [f"item-{i}"]},
                           headers={"x-request-id": f"req-{i}"}, timeout=30)
        assert reply.status_code == 200
    labels = [{"request_id": f"req-{i}", "label": f"item-{i}" if i < 7 else "other"}
              for i in range(10)] + [{"request_id": "never-seen", "label": "x"}]
    reply = _feedback(predictor.url, {"labels": labels})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"accepted": 11, "matched": 10, "unmatched": 1, "duplicates": 0}
    again = _feedback(predictor.url, {"request_id": "req-0", "label": "item-0"})
    assert again.json()["duplicates"] == 1
    assert (_metric(predictor, "correct"), _metric(predictor, "wrong")) == (7, 3)
    assert (_metric(predictor, "unmatched"), _metric(predictor, "duplicate")) == (1, 1)
    # Stored before the answer: the files are there now, in the label schema.
    files = [p for p in capture.rglob("*.parquet") if is_label_file(str(p))]
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    assert len(rows) == 12 and {r["source"] for r in rows} == {"api"}
    assert list(rows[0]) == [name for name, _ in LABEL_COLUMNS]
    assert {json.loads(r["label"]) for r in rows if r["request_id"] == "req-9"} == {"other"}


def test_the_token_is_required(served: tuple[RunningPredictor, Path]) -> None:
    predictor, _ = served
    body = {"request_id": "req-1", "label": "x"}
    assert _feedback(predictor.url, body, token=None).status_code == 401
    assert _feedback(predictor.url, body, token="wrong-" + TOKEN).status_code == 401
    bad = _feedback(predictor.url, {"request_id": "req-1"})
    assert bad.status_code == 400 and "label" in bad.json()["error"]
    other = httpx.post(f"{predictor.url}/v2/models/not-served/feedback", json=body,
                       headers={"authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert other.status_code == 404
    assert httpx.get(f"{predictor.url}/v2/models/{NAME}/ready", timeout=10).status_code == 200


def test_the_shadow_report_reads_captures_past_the_label_files(
        served: tuple[RunningPredictor, Path]) -> None:
    from captures import find_captures
    from tests.support import wait_for

    _, capture = served
    found = wait_for(lambda: find_captures(str(capture), "primary").files or None,
                     timeout_s=30, what="a capture file")
    assert found and not any(is_label_file(f) for f in found)
