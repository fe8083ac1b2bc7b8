"""The shadow report over capture files (written by the predictor's own writer): every
task's agreement, verdicts and thresholds, and every bad input as one line, exit 2."""

from __future__ import annotations

import json
import math
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from captures import LABELS_ROLE, ParquetFiles, canonical_label, label_schema
from cli._shadow_view import summary_rows
from predictor.tap import Exchange
from rollout.analysis import Verdict
from shadow import CaptureError, ReportRequest, Thresholds, build_report, parse_time
from shadow.page import render_html
from tests.support.captures import T0, exchange, pair, write
from tests.support.fleet import run_cli

N = 60


def _report(capture: Path, **kwargs: Any) -> Any:
    return build_report(ReportRequest("m", str(capture), str(capture), **kwargs))


def _checks(report: Any) -> dict[str, Any]:
    return {c.name: c for c in report.checks}


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


def test_embeddings_that_agree_pass_and_perturbed_ones_fail(tmp_path: Path) -> None:
    rng = random.Random(1)
    vectors = [_unit([rng.gauss(0, 1) for _ in range(16)]) for _ in range(2 * N)]
    same = [(["a", "b"], vectors[2 * i:2 * i + 2], vectors[2 * i:2 * i + 2]) for i in range(N)]
    pair(tmp_path / "agree", "feature-extraction", same)
    report = _report(tmp_path / "agree")
    assert report.verdict is Verdict.PASS, [c.to_dict() for c in report.checks]
    cosine = report.document["agreement"]["cosine"]
    assert cosine["mean"] == pytest.approx(1.0) and cosine["p1"] == pytest.approx(1.0)

    noisy = [(["a", "b"], vectors[2 * i:2 * i + 2],
              [_unit([x + rng.gauss(0, 0.5) for x in v]) for v in vectors[2 * i:2 * i + 2]])
             for i in range(N)]
    pair(tmp_path / "noisy", "feature-extraction", noisy)
    report = _report(tmp_path / "noisy")
    checks = _checks(report)
    assert report.verdict is Verdict.FAIL
    assert checks["cosine-mean"].verdict is Verdict.FAIL
    assert checks["cosine-p5"].verdict is Verdict.FAIL
    cosine = report.document["agreement"]["cosine"]
    assert cosine["p1"] < cosine["p5"] < cosine["p50"] < 1.0
    # The percentiles the page draws are the ones p1/p5/p50 come from, in order.
    assert len(cosine["percentiles"]) == 99 and cosine["percentiles"][4] == cosine["p5"]
    assert cosine["percentiles"] == sorted(cosine["percentiles"])
    latency = report.document["pairs"]["latency_ms"]["shadow"]
    assert latency["percentiles"][98] == latency["p99"]

    from shadow.page import render_html

    page = render_html(report.to_dict())
    assert page.count("<svg") == 2  # the cosine distribution and the latency CDFs
    assert "Cosine similarity" in page and "p5 threshold 0.95" in page
    assert "<script" not in page and "cosine-p5" in page and ">Fail<" in page


def test_embedding_dimension_mismatch_is_counted_not_compared(tmp_path: Path) -> None:
    rows = [(["a"], [[1.0, 0.0]], [[1.0, 0.0, 0.0]]) for _ in range(3)]
    rows += [(["a"], [[1.0, 0.0]], [[1.0, 0.0]]) for _ in range(3)]
    pair(tmp_path, "feature-extraction", rows)
    agreement = _report(tmp_path).document["agreement"]
    assert agreement["items"] == 6 and agreement["compared"] == 3
    assert agreement["dimension_mismatches"] == 3


def test_generation_exact_match_and_token_overlap(tmp_path: Path) -> None:
    same = [([f"p{i}"], [f"the cat sat on mat {i}"], [f"the cat sat on mat {i}"])
            for i in range(N)]
    pair(tmp_path / "same", "text-generation", same)
    report = _report(tmp_path / "same")
    assert report.verdict is Verdict.PASS
    assert report.document["agreement"]["exact_match_rate"] == 1.0
    assert report.document["agreement"]["token_jaccard"]["mean"] == pytest.approx(1.0)

    # 3 shared tokens of 7 distinct: Jaccard 3/7, case and spacing ignored.
    other = [([f"p{i}"], ["The cat  sat down"], ["the cat sat on a mat"]) for i in range(N)]
    pair(tmp_path / "other", "text-generation", other)
    report = _report(tmp_path / "other")
    jaccard = report.document["agreement"]["token_jaccard"]
    assert jaccard["mean"] == pytest.approx(3 / 7)
    assert report.document["agreement"]["exact_matches"] == 0
    assert _checks(report)["token-jaccard-mean"].verdict is Verdict.FAIL


def _sample(rid: str, prompt: str, text: str, *, at: float, shadow: bool) -> Exchange:
    return Exchange(request_id=rid, started_at=at, path="/sample", query="",
                    headers=(("content-type", "text/plain"),), body=prompt.encode(),
                    status=200, response=text.encode(), latency_s=0.2, is_shadow=shadow)


@pytest.mark.parametrize(("shadow_text", "verdict"), [
    ("Paris is the capital of France {i}", Verdict.PASS),
    ("I do not know {i}", Verdict.FAIL)])
def test_llm_generations_are_judged_by_token_overlap(tmp_path: Path, shadow_text: str,
                                                      verdict: Verdict) -> None:
    primary = [_sample(f"r{i}", f"q{i}", f"Paris is the capital of France {i}", at=T0 + i,
                       shadow=False) for i in range(N)]
    shadow = [_sample(f"r{i}", f"q{i}", shadow_text.format(i=i), at=T0 + i, shadow=True)
              for i in range(N)]
    write(tmp_path, "m", "1", "stable", "llm", primary)
    write(tmp_path, "m", "2", "shadow", "llm", shadow)
    report = _report(tmp_path)
    assert report.task == "llm" and report.verdict is verdict
    assert report.document["agreement"]["items"] == N
    assert _checks(report)["token-jaccard-mean"].verdict is verdict


def _v2_labels(labels: list[str]) -> dict[str, Any]:
    return {"outputs": [
        {"name": "label", "datatype": "BYTES", "shape": [len(labels)], "data": labels},
        {"name": "score", "datatype": "FP32", "shape": [len(labels)], "data": [0.9] * len(labels)},
    ]}


def test_classification_label_match_and_confusion_over_v2(tmp_path: Path) -> None:
    primary, shadow = [], []
    for i in range(N):
        labels = ["pos", "neg"] if i % 4 else ["pos", "pos"]
        primary.append(exchange(f"r{i}", ["x", "y"], None, v2=_v2_labels(["pos", "neg"])))
        shadow.append(exchange(f"r{i}", ["x", "y"], None, v2=_v2_labels(labels), shadow=True))
    write(tmp_path, "m", "1", "stable", "text-classification", primary)
    write(tmp_path, "m", "2", "shadow", "text-classification", shadow)
    report = _report(tmp_path)
    agreement = report.document["agreement"]
    assert agreement["items"] == 2 * N
    assert agreement["label_matches"] == 2 * N - N // 4
    assert {"primary": "neg", "shadow": "pos", "count": N // 4} in agreement["confusion"]
    assert agreement["labels"]["neg"] == {"primary": N, "shadow": N - N // 4,
                                          "match": N - N // 4}
    assert _checks(report)["label-match"].verdict is Verdict.FAIL  # 87.5% < 95%


def test_errors_timeouts_and_latency_are_judged(tmp_path: Path) -> None:
    primary, shadow = [], []
    for i in range(200):
        primary.append(exchange(f"r{i}", ["x"], ["x"], latency_ms=10))
        status = 500 if i % 10 == 0 else 503 if i % 10 == 1 else 200
        shadow.append(exchange(f"r{i}", ["x"], ["x"], status=status, latency_ms=40,
                               shadow=True))
    write(tmp_path, "m", "1", "stable", "fixed-latency", primary)
    write(tmp_path, "m", "2", "shadow", "fixed-latency", shadow)
    report = _report(tmp_path)
    checks = _checks(report)
    status = report.document["pairs"]["status"]["shadow"]
    assert (status["errors"], status["timeouts"], status["ok"]) == (20, 20, 160)
    assert checks["error-rate"].verdict is Verdict.FAIL
    assert checks["error-rate"].value == pytest.approx(0.1)
    assert checks["timeout-rate"].verdict is Verdict.FAIL
    assert checks["latency-p99-ratio"].verdict is Verdict.FAIL
    assert checks["latency-p99-ratio"].value == pytest.approx(4.0, rel=0.05)
    assert checks["exact-match"].verdict is Verdict.PASS  # over the 160 comparable pairs
    assert report.document["agreement"]["items"] == 160


def test_coverage_and_a_small_sample(tmp_path: Path) -> None:
    primary = [exchange(f"r{i}", ["x"], ["x"]) for i in range(100)]
    shadow = [exchange(f"r{i}", ["x"], ["x"], shadow=True) for i in range(0, 100, 10)]
    write(tmp_path, "m", "1", "stable", "fixed-latency", primary)
    write(tmp_path, "m", "2", "shadow", "fixed-latency", shadow)
    report = _report(tmp_path, thresholds=Thresholds(min_coverage=0.05))
    assert report.document["coverage"] == pytest.approx(0.1)
    checks = _checks(report)
    assert checks["coverage"].verdict is Verdict.PASS
    assert checks["pairs"].verdict is Verdict.INCONCLUSIVE  # 10 pairs < min_pairs 30
    assert checks["exact-match"].verdict is Verdict.INCONCLUSIVE
    assert report.verdict is Verdict.INCONCLUSIVE


def test_duplicate_request_ids_keep_the_latest_record(tmp_path: Path) -> None:
    rows = [(["x"], ["x"], ["x"]) for _ in range(40)]
    pair(tmp_path, "fixed-latency", rows)
    # A retried request: an earlier failure and a later success under the same ID.
    write(tmp_path, "m", "2", "shadow", "fixed-latency",
          [exchange("r-00000", ["x"], None, status=500, at=T0 - 100, shadow=True)])
    report = _report(tmp_path)
    assert report.document["shadow"]["records"] == 41
    assert report.document["pairs"]["pairs"] == 40
    assert report.document["pairs"]["status"]["shadow"]["errors"] == 0
    assert report.verdict is Verdict.PASS


def test_the_window_selects_records(tmp_path: Path) -> None:
    rows = [(["x"], ["x"], ["x"]) for _ in range(100)]
    pair(tmp_path, "fixed-latency", rows, start=T0)
    now = parse_time("2026-11-28T21:06:40Z", _utc())
    assert now.timestamp() == T0
    report = _report(tmp_path, since=parse_time("2026-11-28T21:07:20", now),
                     until=parse_time("2026-11-28T21:08:00Z", now))
    assert report.document["pairs"]["pairs"] == 40  # seconds 40..79


def _utc() -> Any:
    from datetime import UTC, datetime

    return datetime.now(tz=UTC)


def test_parse_time_forms() -> None:
    now = parse_time("2026-11-29T12:00:00Z", _utc())
    assert parse_time("30m", now).isoformat() == "2026-11-29T11:30:00+00:00"
    assert parse_time("1.5h", now).isoformat() == "2026-11-29T10:30:00+00:00"
    assert parse_time("2d", now).isoformat() == "2026-11-27T12:00:00+00:00"
    assert parse_time("2026-11-29T13:00:00+01:00", now).timestamp() == now.timestamp()
    from shadow import ShadowError

    with pytest.raises(ShadowError, match="expected ISO 8601"):
        parse_time("yesterday", now)


# -- bad input: one line, exit 2 ------------------------------------------------------------

def _cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], primary: Path,
         shadow: Path, *extra: str) -> tuple[int, str, str]:
    return run_cli(monkeypatch, capsys, "shadow", "report", "m", "--primary", str(primary),
                   "--shadow", str(shadow), *extra)


def _good(capture: Path, count: int = N) -> None:
    pair(capture, "fixed-latency", [(["x"], ["x"], ["x"]) for _ in range(count)])


def _one_line_error(result: tuple[int, str, str], *parts: str) -> None:
    code, out, err = result
    assert code == 2, (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for part in parts:
        assert part in err, err


def test_a_truncated_capture_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    _good(tmp_path)
    victim = sorted(tmp_path.rglob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    _one_line_error(_cli(monkeypatch, capsys, tmp_path, tmp_path), str(victim), "truncated")


def test_files_that_are_not_captures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    other = tmp_path / "other"
    other.mkdir()
    pq.write_table(pa.table({"a": [1, 2]}), other / "x.parquet")
    _good(tmp_path / "cap")
    _one_line_error(_cli(monkeypatch, capsys, tmp_path / "cap", other), "not a modelctl capture",
                    "request_id")
    _one_line_error(_cli(monkeypatch, capsys, tmp_path / "missing", other), "does not exist")
    (tmp_path / "empty").mkdir()
    _one_line_error(_cli(monkeypatch, capsys, tmp_path / "cap", tmp_path / "empty"),
                    "holds no .parquet capture files")


def test_captures_of_another_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    _good(tmp_path / "mine")
    pair(tmp_path / "theirs", "fixed-latency", [(["x"], ["x"], ["x"])] * 5, model="other")
    _one_line_error(_cli(monkeypatch, capsys, tmp_path / "mine", tmp_path / "theirs"),
                    "has no records of model 'm'", "other (5 records)")


def test_no_common_request_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "m", "1", "stable", "fixed-latency",
          [exchange(f"a{i}", ["x"], ["x"]) for i in range(5)])
    write(tmp_path, "m", "2", "shadow", "fixed-latency",
          [exchange(f"b{i}", ["x"], ["x"], shadow=True) for i in range(5)])
    _one_line_error(_cli(monkeypatch, capsys, tmp_path, tmp_path),
                    "no request ID is in both captures")


def test_an_empty_window_and_one_sided_captures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    _good(tmp_path)
    _one_line_error(_cli(monkeypatch, capsys, tmp_path, tmp_path, "--since", "1h"),
                    "no primary records of m between", "the capture spans")
    only_primary = tmp_path / "primary-only"
    write(only_primary, "m", "1", "stable", "fixed-latency", [exchange("a", ["x"], ["x"])])
    _one_line_error(_cli(monkeypatch, capsys, tmp_path, only_primary),
                    "holds no shadow records")
    _one_line_error(_cli(monkeypatch, capsys, tmp_path, tmp_path, "--since", "2h",
                         "--until", "3h"), "--since must be before --until")


def test_captures_of_different_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "m", "1", "stable", "fixed-latency", [exchange("a", ["x"], ["x"])])
    write(tmp_path, "m", "2", "shadow", "text-generation",
          [exchange("a", ["x"], ["x"], shadow=True)])
    _one_line_error(_cli(monkeypatch, capsys, tmp_path, tmp_path), "disagree on the task")


def test_thresholds_from_a_file_and_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    _good(tmp_path / "cap")
    file = tmp_path / "t.yaml"
    file.write_text("min_pairs: 500\ntasks:\n  fixed-latency: {min_exact_match: 0.5}\n")
    code, out, _ = _cli(monkeypatch, capsys, tmp_path / "cap", tmp_path / "cap",
                        "--thresholds", str(file), "--format", "json")
    doc = json.loads(out)
    assert code == 3 and doc["verdict"] == "Inconclusive"
    assert doc["thresholds"]["min_pairs"] == 500
    assert doc["thresholds"]["tasks"]["fixed-latency"]["min_exact_match"] == 0.5
    code, out, _ = _cli(monkeypatch, capsys, tmp_path / "cap", tmp_path / "cap", "--thresholds",
                        str(file), "--threshold", "min_pairs=10", "--threshold",
                        "max_latency_p99_ratio=null", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and "latency-p99-ratio" not in {c["name"] for c in doc["checks"]}
    file.write_text("tasks:\n  fixed-latency: {min_exact: 0.5}\n")
    _one_line_error(_cli(monkeypatch, capsys, tmp_path / "cap", tmp_path / "cap",
                         "--thresholds", str(file)),
                    "unknown threshold 'fixed-latency.min_exact'")
    _one_line_error(_cli(monkeypatch, capsys, tmp_path / "cap", tmp_path / "cap",
                         "--threshold", "min_label_match=2"), "must be in [0, 1]")
    _one_line_error(_cli(monkeypatch, capsys, tmp_path / "cap", tmp_path / "cap",
                         "--format", "xml"), "--format must be table, json or md")


def test_table_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    _good(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = _cli(monkeypatch, capsys, tmp_path, tmp_path)
    assert code == 0
    assert "Shadow report: m@2" in out and "exact-match" in out and "verdict: Pass" in out


def test_report_errors_are_capture_errors(tmp_path: Path) -> None:
    with pytest.raises(CaptureError):
        _report(tmp_path / "nothing")


def _classified_pairs(capture: Path, shadow_capture: Path | None = None) -> None:
    """Primary (version 1) answers pos to all; the shadow (version 2) neg to every 4th."""
    primary = [exchange(f"r{i}", ["t"], [{"label": "pos", "score": 0.9}]) for i in range(N)]
    shadow = [exchange(f"r{i}", ["t"], [{"label": "neg" if i % 4 == 0 else "pos",
                                         "score": 0.8}], shadow=True) for i in range(N)]
    write(capture, "m", "1", "stable", "text-classification", primary)
    write(shadow_capture or capture, "m", "2", "shadow", "text-classification", shadow)


def test_each_sides_accuracy_against_labels_when_there_are_some(tmp_path: Path) -> None:
    """Labels beside the primary's captures score both sides: the truth of the first 20
    requests is neg for every 4th of them (r0, r4, ... r16) and pos for the rest."""
    capture = tmp_path / "cap"
    _classified_pairs(capture)
    assert _report(capture).document["accuracy"] is None  # no labels: as before
    at = datetime.fromtimestamp(T0 + 3600, tz=UTC)
    rows = [{"request_id": f"r{i}", "ts": at, "model": "m", "source": "push",
             "label": canonical_label("neg" if i % 4 == 0 else "pos")} for i in range(20)]
    ParquetFiles(str(capture), "m", "1", schema=label_schema).write(LABELS_ROLE, rows)
    accuracy = _report(capture).document["accuracy"]
    assert accuracy["primary"] == {"versions": ["1"], "requests": 20, "items": 20,
                                   "correct": 15, "accuracy": 0.75}
    assert accuracy["shadow"] == {"versions": ["2"], "requests": 20, "items": 20,
                                  "correct": 20, "accuracy": 1.0}
    # The shadow capturing apart: its answers joined with the primary's labels.
    apart = tmp_path / "apart"
    _classified_pairs(apart / "primary", apart / "shadow")
    ParquetFiles(str(apart / "primary"), "m", "1", schema=label_schema).write(LABELS_ROLE, rows)
    report = build_report(ReportRequest("m", str(apart / "primary"), str(apart / "shadow")))
    assert report.document["accuracy"] == accuracy
    shown = dict(summary_rows(report.to_dict()))
    assert shown["shadow accuracy (labels)"] == "100.00%: 20 of 20 labelled items right"
    assert shown["primary accuracy (labels)"] == "75.00%: 15 of 20 labelled items right"
    page = render_html(report.to_dict())
    assert "Accuracy of the shadow (ground-truth labels)" in page and "20 of 20" in page
