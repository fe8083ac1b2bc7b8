"""The accuracy report over captures written by the predictor's own record builder and
writer, and labels in the label files (the route's writer, and push): every number
against a hand computation, the latest label winning, late labels in their
prediction's window, unmatched IDs, each task's scores, and every bad input as one
line, exit 2."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from accuracy import AccuracyError, AccuracyRequest, build_accuracy_report, push_labels
from captures import LABELS_ROLE, CaptureError, ParquetFiles, canonical_label, label_schema
from tests.support.captures import T0, exchange, write
from tests.support.fleet import run_cli

START = datetime.fromtimestamp(T0, tz=UTC)  # 2026-11-28T21:06:40Z, in the 21:00 window
LATER = START + timedelta(days=3)  # when labels arrive


def _answer(label: str, score: float | None = None) -> dict[str, Any]:
    return {"label": label} if score is None else {"label": label, "score": score}


def _store_labels(capture: Path, rows: list[tuple[str, Any, datetime]], *, model: str = "m",
                  source: str = "api") -> None:
    """Labels as the feedback route stores them: (request ID, label, arrival)."""
    records = [{"request_id": rid, "ts": at, "model": model, "label": canonical_label(label),
                "source": source} for rid, label, at in rows]
    ParquetFiles(str(capture), model, "1", schema=label_schema).write(LABELS_ROLE, records)


def _classified(capture: Path) -> None:
    """Version 1 (stable) answers r1..r8, version 2 (shadow) a mirrored copy of r1."""
    def ex(rid: str, offset_s: float, answers: list[Any], status: int = 200) -> Any:
        return exchange(rid, ["text"] * len(answers), answers, at=T0 + offset_s, status=status)

    write(capture, "m", "1", "stable", "text-classification", [
        ex("r1", 10, [_answer("pos", 0.95)]),
        ex("r2", 20, [_answer("pos", 0.95)]),
        ex("r3", 30, [_answer("neg", 0.65)]),
        ex("r4", 4000, [_answer("neg", 0.15)]),  # the 22:00 window
        ex("r5", 4010, [_answer("pos", 0.9)], status=500),
        ex("r6", 4020, [_answer("pos", 1.0), _answer("neg", 0.5)]),
        ex("r7", 4030, [_answer("pos", 0.7), _answer("pos", 0.7)]),
        ex("r8", 4040, [_answer("pos", 0.7)]),  # never labelled
    ])
    write(capture, "m", "2", "shadow", "text-classification",
          [exchange("r1", ["text"], [_answer("neg", 0.8)], at=T0 + 10.01, shadow=True)])
    second = timedelta(seconds=1)
    _store_labels(capture, [
        ("r1", "neg", LATER - second),  # older than r1's next label: loses
        ("r1", "pos", LATER),
        ("r2", "pos", LATER),
        ("r4", "pos", LATER), ("r5", "pos", LATER),
        ("r6", ["pos", "pos"], LATER),  # one label per item
        ("r7", "pos", LATER),  # one label for two items: not comparable
    ])
    _store_labels(capture, [("r2", "neg", LATER + second)])  # a later label: wins


def _late_push(capture: Path, tmp: Path) -> None:
    """r3's label, pushed days after the 22:00 window's predictions, and an unknown ID."""
    file = tmp / "late.jsonl"
    file.write_text(json.dumps({"request_id": "r3", "label": "neg",
                                "ts": (LATER + timedelta(hours=5)).isoformat()}) + "\n"
                    + json.dumps({"request_id": "ghost", "label": "pos"}) + "\n")
    assert push_labels(file, str(capture), "m").written == 2


@pytest.fixture
def classified(tmp_path: Path) -> Path:
    capture = tmp_path / "cap"
    _classified(capture)
    _late_push(capture, tmp_path)
    return capture


def _groups(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(g["version"], g["role"]): g for g in doc["groups"]}


def test_a_classifier_by_hand(classified: Path) -> None:
    doc = build_accuracy_report(AccuracyRequest("m", str(classified)))
    stable = _groups(doc)[("1", "stable")]
    # r1 pos=pos, r2 pos!=neg (its later label), r3 neg=neg (pushed late), r4 neg!=pos,
    # r6 [pos, neg] against [pos, pos]; r5 failed, r7 not comparable, r8 unlabelled.
    assert {k: stable[k] for k in ("requests", "failed", "not_comparable", "items",
                                   "correct")} == {"requests": 7, "failed": 1,
                                                   "not_comparable": 1, "items": 6,
                                                   "correct": 3}
    assert stable["accuracy"] == 0.5
    # pos: answered 3 times (2 right), the label 4 times; neg: answered 3 (1 right), label 2.
    assert stable["classes"]["pos"] == pytest.approx(
        {"precision": 2 / 3, "recall": 2 / 4, "f1": 4 / 7, "support": 4})
    assert stable["classes"]["neg"] == pytest.approx(
        {"precision": 1 / 3, "recall": 1 / 2, "f1": 2 / 5, "support": 2})
    assert stable["macro_f1"] == pytest.approx((4 / 7 + 2 / 5) / 2)
    # Bins: 0.9-1.0 holds 0.95 (right), 0.95 (wrong) and 1.0 (right): |2 - 2.9|; 0.6-0.7
    # 0.65 (right): 0.35; 0.1-0.2 0.15 (wrong): 0.15; 0.5-0.6 0.5 (wrong): 0.5.
    assert stable["ece"] == pytest.approx((0.9 + 0.35 + 0.15 + 0.5) / 6)
    assert stable["scored_items"] == 6
    assert [b["items"] for b in stable["calibration"]] == [0, 1, 0, 0, 0, 1, 1, 0, 0, 3]
    shadow = _groups(doc)[("2", "shadow")]  # the mirrored copy of r1 answered neg
    assert (shadow["requests"], shadow["items"], shadow["correct"]) == (1, 1, 0)
    labels = doc["labels"]
    assert {k: labels[k] for k in ("rows", "request_ids", "repeated", "matched",
                                   "outside_window", "unmatched")} == {
        "rows": 10, "request_ids": 8, "repeated": 2, "matched": 7, "outside_window": 0,
        "unmatched": 1}
    assert labels["unmatched_examples"] == ["ghost"]
    assert labels["sources"] == {"api": 8, "push": 2} and labels["files"] == 3
    assert doc["captures"]["records"] == 9 and doc["captures"]["requests"] == 8


def test_windows_by_the_predictions_time(classified: Path) -> None:
    doc = build_accuracy_report(AccuracyRequest("m", str(classified), window_s=3600))
    windows = {w["start"]: {(g["version"], g["role"]): g for g in w["groups"]}
               for w in doc["windows"]}
    assert list(windows) == ["2026-11-28T21:00:00+00:00", "2026-11-28T22:00:00+00:00"]
    early = windows["2026-11-28T21:00:00+00:00"][("1", "stable")]
    # r3's label came last of all, yet counts where r3 was answered.
    assert (early["requests"], early["items"], early["correct"]) == (3, 3, 2)
    late = windows["2026-11-28T22:00:00+00:00"][("1", "stable")]
    assert (late["requests"], late["failed"], late["not_comparable"], late["items"],
            late["correct"]) == (4, 1, 1, 3, 1)
    assert "classes" not in late and late["macro_f1"] is not None
    assert doc["windows"][0]["end"] == "2026-11-28T22:00:00+00:00"
    ten = build_accuracy_report(AccuracyRequest("m", str(classified), window_s=600))
    assert [w["start"][11:16] for w in ten["windows"]] == ["21:00", "22:10"]


def test_since_and_until_select_predictions(classified: Path) -> None:
    doc = build_accuracy_report(AccuracyRequest(
        "m", str(classified), since=START + timedelta(hours=1), until=START + timedelta(days=1)))
    stable = _groups(doc)[("1", "stable")]
    assert (stable["requests"], stable["items"], stable["correct"]) == (4, 3, 1)
    assert ("2", "shadow") not in _groups(doc)
    labels = doc["labels"]
    assert (labels["matched"], labels["outside_window"], labels["unmatched"]) == (4, 3, 1)
    assert doc["captures"]["records"] == 5 and doc["window"]["since"].startswith("2026-11-28T22")


def test_numbers_are_scored_by_mean_absolute_error(tmp_path: Path) -> None:
    answers = [("a", 1.5, 2), ("b", 3, 3), ("c", "x", "x"), ("d", 10, 7.5)]
    write(tmp_path, "m", "4", "canary", "fixed-latency",
          [exchange(rid, [value], [value], at=T0 + i) for i, (rid, value, _) in
           enumerate(answers)])
    _store_labels(tmp_path, [(rid, label, LATER) for rid, _, label in answers])
    group = build_accuracy_report(AccuracyRequest("m", str(tmp_path)))["groups"][0]
    assert (group["version"], group["role"], group["kind"]) == ("4", "canary", "values")
    assert (group["items"], group["correct"], group["numeric_items"]) == (4, 2, 3)
    assert group["mae"] == pytest.approx((0.5 + 0 + 2.5) / 3)


def test_generations_by_exact_match_and_token_overlap(tmp_path: Path) -> None:
    answers = [("a", "The cat sat", "the cat ran"), ("b", "Paris", "Paris"),
               ("c", "", "")]
    write(tmp_path, "m", "1", "stable", "text-generation",
          [exchange(rid, ["prompt"], [text], at=T0 + i) for i, (rid, text, _) in
           enumerate(answers)])
    _store_labels(tmp_path, [(rid, label, LATER) for rid, _, label in answers])
    group = build_accuracy_report(AccuracyRequest("m", str(tmp_path)))["groups"][0]
    assert group["kind"] == "generation" and group["exact_match"] == pytest.approx(2 / 3)
    assert group["token_jaccard"] == pytest.approx((0.5 + 1 + 1) / 3)


def test_without_scores_there_is_no_calibration_error(tmp_path: Path) -> None:
    write(tmp_path, "m", "1", "stable", "text-classification",
          [exchange("a", ["t"], [_answer("pos")]), exchange("b", ["t"], [_answer("neg")])])
    _store_labels(tmp_path, [("a", "pos", LATER), ("b", "pos", LATER)])
    group = build_accuracy_report(AccuracyRequest("m", str(tmp_path)))["groups"][0]
    assert group["accuracy"] == 0.5 and group["ece"] is None
    assert group["ece_note"] == "not available: the captured answers hold no score"


def test_the_page_and_the_terminal(classified: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "accuracy.html"
    monkeypatch.setenv("COLUMNS", "160")
    code, out, err = run_cli(monkeypatch, capsys, "feedback", "report", "--capture-uri",
                             str(classified), "--model", "m", "--html", str(page))
    assert code == 0, err
    assert "Accuracy of m against ground-truth labels (text-classification)" in out
    assert "1 unmatched (no capture of the model): ghost" in out
    assert "Classes of version 1 (stable)" in out and "11-28 21:00" in out
    assert "1 labelled predictions failed" in out
    html = page.read_text()
    assert html.count("<svg") == 2 and "<script" not in html
    assert "Calibration" in html and "By window" in html and "ghost" in html
    code, out, _ = run_cli(monkeypatch, capsys, "feedback", "report", "--capture-uri",
                           str(classified), "--model", "m", "--json")
    assert code == 0 and json.loads(out)["kind"] == "modelctl.io/feedback-report"


# -- bad input: one line, exit 2 ------------------------------------------------------------

def _one_line_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                    capture: Path, *args: str, says: str) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "feedback", "report", "--capture-uri",
                             str(capture), "--model", "m", *args)
    assert code == 2 and out == "", (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and says in err, err


def test_bad_input(tmp_path: Path, classified: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> None:
    def fails(capture: Path, *args: str, says: str) -> None:
        _one_line_error(monkeypatch, capsys, capture, *args, says=says)

    fails(tmp_path / "missing", says="does not exist")
    bare = tmp_path / "bare"
    write(bare, "m", "1", "stable", "fixed-latency", [exchange("a", ["x"], ["x"])])
    fails(bare, says="holds no label files")
    _store_labels(bare, [("a", "x", LATER)], model="other")
    fails(bare, says="holds no labels of model 'm' (labels of: other (1))")
    fails(classified, "--since", "1h", says="no records of m between")
    fails(classified, "--window", "0s", says="must be greater than zero")
    fails(classified, "--since", "2h", "--until", "3h", says="--since must be before --until")
    fails(classified, "--window", "9000h", says="--window must be 1s to 366d")
    code, _, err = run_cli(monkeypatch, capsys, "feedback", "report", "--capture-uri",
                           str(classified), "--model", "other")
    assert code == 2 and "has no records of model 'other'; it holds m (9 records)" in err
    victim = sorted(p for p in classified.rglob("*.parquet") if "/labels/" in str(p))[0]
    victim.write_bytes(victim.read_bytes()[:40])
    fails(classified, says="truncated or not Parquet")


def test_errors_are_platform_errors(tmp_path: Path) -> None:
    with pytest.raises(CaptureError):
        build_accuracy_report(AccuracyRequest("m", str(tmp_path / "none")))
    with pytest.raises(AccuracyError, match="invalid model name"):
        AccuracyRequest("../m", str(tmp_path))


def test_labels_that_match_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "m", "1", "stable", "fixed-latency", [exchange("a", ["x"], ["x"])])
    _store_labels(tmp_path, [("elsewhere", "x", LATER)])
    page = tmp_path / "page.html"
    code, out, _ = run_cli(monkeypatch, capsys, "feedback", "report", "--capture-uri",
                           str(tmp_path), "--model", "m", "--html", str(page))
    assert code == 0 and "no labelled prediction in the window" in out
    assert "1 unmatched (no capture of the model): elsewhere" in out
    assert "no labelled predictions" in page.read_text()
