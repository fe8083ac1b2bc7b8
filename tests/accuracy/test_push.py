"""``modelctl feedback push``: JSON lines and Parquet into the label files, in the label
schema the route writes; every bad row named by its line, exit 2, nothing written."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from accuracy import push_labels
from captures import LABEL_COLUMNS, is_label_file, label_schema
from tests.support.fleet import run_cli

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _stored(capture: Path) -> list[dict[str, Any]]:
    files = sorted(p for p in capture.rglob("*.parquet") if is_label_file(str(p)))
    for f in files:
        assert pq.read_schema(f).equals(label_schema(), check_metadata=False)
    return [row for f in files for row in pq.read_table(f).to_pylist()]


def _lines(path: Path, *rows: Any) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_json_lines_are_stored_as_the_route_stores_labels(tmp_path: Path) -> None:
    file = _lines(tmp_path / "labels.jsonl",
                  {"request_id": "a", "label": "spam"},
                  "",  # blank lines are skipped
                  {"request_id": "b", "label": [1, 2.5], "ts": "2026-11-30T10:00:00Z"},
                  {"request_id": "c", "label": {"z": 1, "a": "é"}, "ts": "2026-11-30T10:00:00"},
                  {"request_id": "d", "label": 3, "ts": 1_795_900_000},
                  {"request_id": "e", "label": True, "ts": None})
    result = push_labels(file, str(tmp_path / "cap"), "m", now=NOW)
    assert result.written == 5 and len(result.files) == 1
    assert result.files[0].startswith("m/labels/")
    rows = {r["request_id"]: r for r in _stored(tmp_path / "cap")}
    assert list(rows["a"]) == [name for name, _ in LABEL_COLUMNS]
    assert {r["source"] for r in rows.values()} == {"push"}
    assert {r["model"] for r in rows.values()} == {"m"}
    assert [rows[k]["label"] for k in "abcde"] == ['"spam"', "[1,2.5]", '{"a":"é","z":1}', "3",
                                                   "true"]
    assert rows["a"]["ts"] == NOW and rows["e"]["ts"] == NOW
    assert rows["b"]["ts"] == rows["c"]["ts"] == datetime(2026, 11, 30, 10, tzinfo=UTC)
    assert rows["d"]["ts"] == datetime.fromtimestamp(1_795_900_000, tz=UTC)


def test_parquet_rows_hold_the_values_themselves(tmp_path: Path) -> None:
    file = tmp_path / "labels.bin"  # told by its magic bytes, not its name
    pq.write_table(pa.table({
        "request_id": ["a", "b"], "label": ["positive", "[1]"],  # text, not JSON
        "ts": pa.array([datetime(2026, 11, 30, 9), None], pa.timestamp("us")),
    }), file)
    assert push_labels(file, f"file://{tmp_path / 'cap'}", "m", now=NOW).written == 2
    rows = {r["request_id"]: r for r in _stored(tmp_path / "cap")}
    assert rows["a"]["label"] == '"positive"' and rows["b"]["label"] == '"[1]"'
    assert rows["a"]["ts"] == datetime(2026, 11, 30, 9, tzinfo=UTC) and rows["b"]["ts"] == NOW
    lists = tmp_path / "lists.parquet"
    pq.write_table(pa.table({"request_id": ["c"], "label": [["x", "y"]]}), lists)
    push_labels(lists, str(tmp_path / "cap"), "m", now=NOW)
    assert {r["request_id"]: r["label"] for r in _stored(tmp_path / "cap")}["c"] == '["x","y"]'


def test_the_cli_prints_how_many_it_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    file = _lines(tmp_path / "l.jsonl", *({"request_id": f"r{i}", "label": i} for i in range(3)))
    code, out, _ = run_cli(monkeypatch, capsys, "feedback", "push", str(file), "--capture-uri",
                           str(tmp_path / "cap"), "--model", "m")
    assert code == 0 and out.startswith(f"wrote 3 labels of m to {tmp_path / 'cap'}/m/labels/")
    code, out, _ = run_cli(monkeypatch, capsys, "feedback", "push", str(file), "--capture-uri",
                           str(tmp_path / "cap"), "--model", "m", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["written"] == 3 and doc["source"] == "push"
    assert len(_stored(tmp_path / "cap")) == 6


GOOD = {"request_id": "ok", "label": "x"}


@pytest.mark.parametrize(("rows", "says"), [
    ([GOOD, "{not json"], "l.jsonl line 2: not JSON"),
    ([GOOD, GOOD, {"request_id": "a"}], "l.jsonl line 3 must hold 'request_id' and 'label', "
                                        "and at most 'ts' besides"),
    ([{"request_id": "a", "label": "x", "score": 1}], "line 1 must hold"),
    (["[1, 2]"], "line 1 must hold"),
    ([{"request_id": "a", "label": None}], "line 1: 'label' must not be null"),
    (['{"request_id": "a", "label": NaN}'], "line 1: 'label' must be JSON"),
    ([{"request_id": "", "label": 1}], "line 1: 'request_id' must be a string of 1 to 200"),
    ([{"request_id": "r" * 201, "label": 1}], "'request_id' must be a string"),
    ([{"request_id": 7, "label": 1}], "'request_id' must be a string"),
    ([GOOD, {"request_id": "a", "label": 1, "ts": "yesterday"}],
     "line 2: 'ts' must be ISO 8601"),
    ([{"request_id": "a", "label": 1, "ts": True}], "'ts' must be ISO 8601"),
    ([], "holds no labels"),
])
def test_a_bad_row_is_named_and_nothing_is_written(
        rows: list[Any], says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    file = _lines(tmp_path / "l.jsonl", *rows)
    code, out, err = run_cli(monkeypatch, capsys, "feedback", "push", str(file),
                             "--capture-uri", str(tmp_path / "cap"), "--model", "m")
    assert code == 2 and out == "", (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "cap").exists()


@pytest.mark.parametrize(("columns", "says"), [
    ({"request_id": ["a"]}, "no label"),
    ({"request_id": ["a"], "label": ["x"], "weight": [1.0]}, "also weight"),
    ({"request_id": ["a", None], "label": ["x", "y"]}, "labels.parquet row 2: 'request_id'"),
])
def test_bad_parquet(columns: dict[str, list[Any]], says: str, tmp_path: Path,
                     monkeypatch: pytest.MonkeyPatch,
                     capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "labels.parquet"
    pq.write_table(pa.table(columns), file)
    code, _, err = run_cli(monkeypatch, capsys, "feedback", "push", str(file),
                           "--capture-uri", str(tmp_path / "cap"), "--model", "m")
    assert code == 2 and says in err and err.count("\n") == 1, err
    assert not (tmp_path / "cap").exists()


@pytest.mark.parametrize(("args", "says"), [
    (("--model", "../m"), "invalid model name '../m'"),
    (("--capture-uri", "gs://bucket/x"), "use a directory, file:// or s3://"),
    (("--capture-uri", "s3://key:secret@bucket/x"), "put S3 credentials in AWS_* variables"),
    (("--file", "missing.jsonl"), "cannot read"),
])
def test_bad_arguments(args: tuple[str, str], says: str, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    given = {"--file": str(_lines(tmp_path / "l.jsonl", GOOD)),
             "--capture-uri": str(tmp_path / "cap"), "--model": "m"}
    given[args[0]] = str(tmp_path / args[1]) if args[0] == "--file" else args[1]
    code, _, err = run_cli(monkeypatch, capsys, "feedback", "push", given["--file"],
                           "--capture-uri", given["--capture-uri"], "--model", given["--model"])
    assert code == 2 and says in err and err.count("\n") == 1, err


def test_a_store_that_refuses_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cap").mkdir()
    (tmp_path / "cap" / "m").write_text("a file where the model's directory would be")
    file = _lines(tmp_path / "l.jsonl", GOOD)
    code, _, err = run_cli(monkeypatch, capsys, "feedback", "push", str(file), "--capture-uri",
                           str(tmp_path / "cap"), "--model", "m")
    assert code == 2 and err.count("\n") == 1, err
    assert f"cannot write labels to {tmp_path / 'cap'}: " in err
    assert "(0 of 1 written before)" in err


@pytest.mark.parametrize(("args", "says"), [
    ((), "give --capture-uri (the label store) or --url (predictors), one of the two"),
    (("--capture-uri", "CAP", "--url", "http://127.0.0.1:9"), "one of the two"),
    (("--url", "http://127.0.0.1:9"), "--url needs --token-file"),
    (("--url", "ftp://host", "--token-file", "TOKEN"), "give a predictor's http(s) URL"),
    (("--url", "http://u:p@host", "--token-file", "TOKEN"), "not in the URL"),
    (("--url", "http://127.0.0.1:9", "--token-file", "EMPTY"), "is empty"),
    (("--url", "http://127.0.0.1:9", "--token-file", "TOKEN"),
     "cannot send labels to http://127.0.0.1:9/v2/models/m/feedback (0 of 1 labels"),
])
def test_push_to_predictors_bad_arguments(args: tuple[str, ...], says: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """``push --url``: the target asked for wrongly, or a predictor that is not there
    (port 9, discard: nothing listens), one line and exit 2; the token never shown."""
    (tmp_path / "TOKEN").write_text("a-secret-token-value\n")
    (tmp_path / "EMPTY").write_text("\n")
    given = [str(tmp_path / a) if a in ("TOKEN", "EMPTY", "CAP") else a for a in args]
    file = _lines(tmp_path / "l.jsonl", GOOD)
    code, out, err = run_cli(monkeypatch, capsys, "feedback", "push", str(file), "--model",
                             "m", *given)
    assert code == 2 and says in err and err.count("\n") == 1, err
    assert "a-secret-token-value" not in out + err
