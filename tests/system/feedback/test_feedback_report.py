"""``modelctl feedback push`` and ``feedback report`` against a real predictor.

demo-classify (a seeded random BERT, three classes) serves with capture and the
feedback route on. Predictions go in with our own x-request-ids in two groups, the
second in a later report window; some labels go through the route, the others through
``modelctl feedback push`` as its own process: among them a late label for a
prediction of the first window, a repeated ID (the later label wins, the older one
loses whichever came last), an ID no prediction had and a two-item request. The
report's numbers are checked against the plan (which labels are right) and against the
answers' own labels and scores, computed here from the definitions.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from captures import is_label_file
from tests.support import wait_for
from tests.support.predictor import RunningPredictor

NAME = "demo-classify"
CLASSES = ("negative", "neutral", "positive")
TOKEN = secrets.token_hex(16)
WINDOW_MS = 1000
MODELCTL = str(Path(sys.executable).parent / "modelctl")


@pytest.fixture(scope="module")
def served(start_predictor: Callable[..., RunningPredictor],
           tmp_path_factory: pytest.TempPathFactory) -> tuple[RunningPredictor, Path]:
    capture = tmp_path_factory.mktemp("accuracy-capture")
    token = tmp_path_factory.mktemp("accuracy-token") / "token"
    token.write_text(TOKEN)
    predictor = start_predictor(NAME, "latest", "--capture_uri", str(capture),
                                "--capture_flush_s", "0.5", "--feedback_token_file",
                                str(token), ready_timeout_s=180)
    return predictor, capture


def _predict(url: str, rid: str, texts: list[str]) -> list[dict[str, Any]]:
    reply = httpx.post(f"{url}/v1/models/{NAME}:predict", json={"instances": texts},
                       headers={"x-request-id": rid}, timeout=60)
    assert reply.status_code == 200, reply.text
    predictions: list[dict[str, Any]] = reply.json()["predictions"]
    return predictions


def _other(label: str) -> str:
    return CLASSES[(CLASSES.index(label) + 1) % len(CLASSES)]


def _modelctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MODELCTL, "feedback", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def _capture_times(capture: Path) -> dict[str, int]:
    """Request ID -> its capture time in ms, read from the capture files themselves."""
    out = {}
    for path in capture.rglob("*.parquet"):
        if not is_label_file(str(path)):
            for row in pq.read_table(path, columns=["request_id", "ts"]).to_pylist():
                out[row["request_id"]] = round(row["ts"].timestamp() * 1000)
    return out


def _expected_scores(judged: list[tuple[str, float, str]]) -> dict[str, Any]:
    """Accuracy, F1 per class and ECE of (answer, score, truth) items, by definition."""
    classes = sorted({a for a, _, _ in judged} | {t for _, _, t in judged})
    f1 = {}
    for name in classes:
        tp = sum(a == name == t for a, _, t in judged)
        fp = sum(a == name != t for a, _, t in judged)
        fn = sum(t == name != a for a, _, t in judged)
        f1[name] = 2 * tp / (2 * tp + fp + fn)
    bins: dict[int, list[tuple[float, bool]]] = {}
    for answer, score, truth in judged:
        bins.setdefault(min(int(score * 10), 9), []).append((score, answer == truth))
    ece = sum(abs(sum(right for _, right in b) - sum(s for s, _ in b))
              for b in bins.values()) / len(judged)
    return {"f1": f1, "ece": ece}


def test_route_and_pushed_labels_give_the_accuracy_per_version_and_window(
        served: tuple[RunningPredictor, Path], tmp_path: Path) -> None:
    predictor, capture = served
    answers = {f"a-{i}": _predict(predictor.url, f"a-{i}", [f"a fine day {i}"])
               for i in range(10)}
    answers["m-0"] = _predict(predictor.url, "m-0", ["the first of two", "the second"])
    first_done = time.time()
    # Every prediction of the second group is in a later window than the first's.
    wait_for(lambda: time.time() * 1000 // WINDOW_MS > first_done * 1000 // WINDOW_MS,
             timeout_s=5, interval_s=0.01, what="the next report window")
    answers |= {f"b-{i}": _predict(predictor.url, f"b-{i}", [f"shipping took {i} days"])
                for i in range(10)}
    said = {rid: [p["label"] for p in predictions] for rid, predictions in answers.items()}

    def right(rid: str) -> str:
        return said[rid][0]

    def wrong(rid: str) -> str:
        return _other(said[rid][0])

    # Through the route: a-0..a-6 right, a-7 and a-8 wrong, b-0..b-4 right.
    routed = ([{"request_id": f"a-{i}", "label": right(f"a-{i}")} for i in range(7)]
              + [{"request_id": f"a-{i}", "label": wrong(f"a-{i}")} for i in (7, 8)]
              + [{"request_id": f"b-{i}", "label": right(f"b-{i}")} for i in range(5)])
    reply = httpx.post(f"{predictor.url}/v2/models/{NAME}/feedback", json={"labels": routed},
                       headers={"authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert reply.status_code == 200 and reply.json()["accepted"] == 14, reply.text
    # Pushed, later: b-5 and b-6 right, b-7..b-9 wrong; a-9 right (late, for the first
    # window); a-8 again, right (newer: wins); b-0 again, wrong but dated 2000 (older:
    # loses); an ID nothing answered; the two-item request, its first item right.
    pushed = ([{"request_id": f"b-{i}", "label": right(f"b-{i}")} for i in (5, 6)]
              + [{"request_id": f"b-{i}", "label": wrong(f"b-{i}")} for i in (7, 8, 9)]
              + [{"request_id": "a-9", "label": right("a-9")},
                 {"request_id": "a-8", "label": right("a-8")},
                 {"request_id": "b-0", "label": wrong("b-0"), "ts": "2000-01-01T00:00:00Z"},
                 {"request_id": "never-answered", "label": "positive"},
                 {"request_id": "m-0", "label": [said["m-0"][0], _other(said["m-0"][1])]}])
    file = tmp_path / "labels.jsonl"
    file.write_text("".join(json.dumps(row) + "\n" for row in pushed))
    done = _modelctl("push", str(file), "--capture-uri", str(capture), "--model", NAME,
                     "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["written"] == 10

    truth = {row["request_id"]: row["label"] for row in routed}
    truth |= {row["request_id"]: row["label"] for row in pushed if "ts" not in row}
    truth.pop("never-answered")
    times = wait_for(lambda: (t := _capture_times(capture)).keys() >= answers.keys() and t,
                     timeout_s=30, what="every prediction captured")

    page = tmp_path / "accuracy.html"
    done = _modelctl("report", "--capture-uri", str(capture), "--model", NAME, "--window",
                     f"{WINDOW_MS}ms", "--json", "--html", str(page))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)

    labels = doc["labels"]
    assert {k: labels[k] for k in ("rows", "request_ids", "repeated", "matched",
                                   "outside_window", "unmatched", "unmatched_examples",
                                   "sources")} == {
        "rows": 24, "request_ids": 22, "repeated": 2, "matched": 21, "outside_window": 0,
        "unmatched": 1, "unmatched_examples": ["never-answered"],
        "sources": {"api": 14, "push": 10}}
    [group] = doc["groups"]
    assert (group["role"], group["task"]) == ("stable", "text-classification")
    assert {k: group[k] for k in ("requests", "failed", "not_comparable", "items",
                                  "correct")} == {"requests": 21, "failed": 0,
                                                  "not_comparable": 0, "items": 22,
                                                  "correct": 9 + 7 + 1}
    assert group["accuracy"] == pytest.approx(17 / 22)

    judged = [(p["label"], p["score"], want) for rid, label in truth.items()
              for p, want in zip(answers[rid], label if rid == "m-0" else [label],
                                 strict=True)]
    expected = _expected_scores(judged)
    assert {name: c["f1"] for name, c in group["classes"].items()} == pytest.approx(
        expected["f1"], abs=1e-12)
    assert group["ece"] == pytest.approx(expected["ece"], abs=1e-12)
    assert group["scored_items"] == 22

    # Per window of the prediction's capture time: a-9's late label counts in its window,
    # which is before every window of the second group.
    per_window: dict[int, list[int]] = {}
    for rid, label in truth.items():
        counts = per_window.setdefault(times[rid] // WINDOW_MS, [0, 0, 0])
        items = said[rid]
        wants = label if rid == "m-0" else [label]
        counts[0] += 1
        counts[1] += len(items)
        counts[2] += sum(a == w for a, w in zip(items, wants, strict=True))
    got = {w["start"]: [w["groups"][0][k] for k in ("requests", "items", "correct")]
           for w in doc["windows"]}
    from datetime import UTC, datetime

    assert got == {datetime.fromtimestamp(k * WINDOW_MS / 1000, tz=UTC).isoformat(): v
                   for k, v in sorted(per_window.items())}
    assert times["a-9"] // WINDOW_MS < min(times[f"b-{i}"] for i in range(10)) // WINDOW_MS
    html = page.read_text()
    assert html.count("<svg") == 2 and "<script" not in html and "never-answered" in html


def test_a_bad_push_writes_nothing(served: tuple[RunningPredictor, Path],
                                   tmp_path: Path) -> None:
    _, capture = served
    before = sorted(p for p in capture.rglob("*.parquet") if is_label_file(str(p)))
    file = tmp_path / "bad.jsonl"
    file.write_text('{"request_id": "x-1", "label": "positive"}\n'
                    '{"request_id": "x-2", "label": null}\n')
    done = _modelctl("push", str(file), "--capture-uri", str(capture), "--model", NAME)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "error: bad.jsonl line 2: 'label' must not be null\n"
    assert sorted(p for p in capture.rglob("*.parquet") if is_label_file(str(p))) == before
