"""Labels joined with captures in DuckDB: one ``Tally`` per time window, version, role, task.

    labels   ── the model's labels; the latest per request ID (its ts, then the
                later file and row: the last of one request's labels)           table l
    captures ── the model's records of those request IDs; the latest per
                (request ID, version, role)                                     table c
    c JOIN l USING (request_id), the prediction's ts in [since, until)           view m
        │  per request: answered (2xx with an output), and comparable (one label
        │  for its one item, or a list of one label per item)                    view r
        │  per item: the answer's value (a classification's ``label`` field) and
        │  ``score``, beside its label                                           view i
        v
    GROUP BY window, version, role, task: counts and sums (``_scores.Tally``)

A prediction mirrored to a shadow was captured twice, once per role: its label
counts for both. Windows are fixed intervals of the *prediction's* capture time,
aligned to the Unix epoch (UTC), so a label that arrives late lands in the window of
the prediction it labels. Every number is a DuckDB aggregate, bounded by its memory
limit like the shadow report's; only the classifiers' (answer, label, score bin)
cells come back per class.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from accuracy._scores import (
    CLASSIFICATION_TASKS,
    ECE_BINS,
    GENERATION_TASKS,
    Tally,
    set_jaccard_sql,
    token_set_sql,
)
from captures import CaptureError, CaptureSource, explain_read_error, parquet_scan
from common import iso_utc, iso_utc_ms

Key = tuple[int, str, str, str]  # (window index, version, role, task)
UNMATCHED_EXAMPLES = 10
_NUMBER = "('BIGINT', 'UBIGINT', 'HUGEINT', 'DOUBLE')"
_IN_GROUP = "win, version, role, task"


def _tasks(names: frozenset[str]) -> str:
    return "(" + ", ".join(f"'{t}'" for t in sorted(names)) + ")"


class Join:
    """The views over one capture URI's captures and labels of one model."""

    def __init__(self, con: Any, captures: CaptureSource, labels: CaptureSource,
                 model: str) -> None:
        self.con = con
        self.captures = captures
        self.model = model
        # A read can fail in either set of files: look for a broken one in both.
        self._files = CaptureSource(captures.uri, captures.files + labels.files,
                                    captures.fs or labels.fs)
        self._query(f"CREATE TEMP VIEW c_all AS SELECT * FROM {parquet_scan(captures)}")
        self._query("CREATE TEMP VIEW l_all AS SELECT * FROM "
                    f"{parquet_scan(labels, file_order=True)}")

    def _query(self, sql: str) -> Any:
        try:
            return self.con.execute(sql)
        except Exception as exc:
            raise explain_read_error(exc, self._files) from None

    def open(self, since: datetime | None, until: datetime | None,
             window_ms: int) -> dict[str, Any]:
        """Check the model has records and labels, build the views; the captures'
        summary over the window."""
        self._check_model()
        # Both read once, kept as tables (DuckDB spills them past its memory limit):
        # the labels, and the captures of labelled request IDs only, usually a small
        # part of the captures.
        self._query(f"""CREATE TEMP TABLE l AS
            SELECT request_id, label FROM l_all WHERE model = '{self.model}'
            QUALIFY row_number() OVER (PARTITION BY request_id
                ORDER BY ts DESC, filename DESC, file_row_number DESC) = 1""")
        self._query(f"""CREATE TEMP TABLE c AS
            SELECT request_id, ts, version, role, task, status, output
            FROM c_all SEMI JOIN l USING (request_id) WHERE model = '{self.model}'
            QUALIFY row_number() OVER (PARTITION BY request_id, version, role
                                       ORDER BY ts DESC) = 1""")
        within = _within(since, until, "ts")
        summary = self._summary(within, since, until)
        self._query(f"""CREATE TEMP VIEW m AS
            SELECT c.*, l.label, epoch_ms(c.ts) // {int(window_ms)} AS win,
                   c.status BETWEEN 200 AND 299 AND c.output IS NOT NULL AS answered
            FROM c JOIN l USING (request_id) WHERE {_within(since, until, 'c.ts')}""")
        self._query("""CREATE TEMP VIEW r AS
            WITH n AS (
                SELECT win, version, role, task, answered, output,
                       CASE WHEN NOT answered THEN NULL
                            WHEN json_array_length(output) = 1
                                 AND NOT (json_type(label::JSON) = 'ARRAY'
                                          AND json_array_length(label::JSON) = 1)
                            THEN json_array(label::JSON) ELSE label::JSON END AS labels
                FROM m)
            SELECT *, answered AND json_type(labels) = 'ARRAY' AND json_array_length(output) > 0
                      AND json_array_length(labels) = json_array_length(output) AS comparable
            FROM n""")
        self._query("""CREATE TEMP VIEW i AS
            WITH p AS (
                SELECT win, version, role, task, unnest(from_json(output, '["JSON"]')) AS a,
                       unnest(from_json(labels, '["JSON"]')) AS b
                FROM r WHERE comparable)
            SELECT win, version, role, task, b,
                   CASE WHEN json_type(a) = 'OBJECT' AND json_extract(a, '$.label') IS NOT NULL
                        THEN json_extract(a, '$.label') ELSE a END AS v,
                   CASE WHEN json_type(a) = 'OBJECT'
                             AND json_type(json_extract(a, '$.score')) IN """ + _NUMBER + """
                        THEN try_cast(json_extract(a, '$.score') AS DOUBLE) END AS score
            FROM p""")
        return summary

    def _check_model(self) -> None:
        rows = self._query("SELECT model, count(*) FROM c_all GROUP BY model "
                           "ORDER BY 2 DESC").fetchall()
        uri = self.captures.uri
        if not rows:
            raise CaptureError(f"capture {uri} holds no records")
        if self.model not in {r[0] for r in rows}:
            found = ", ".join(f"{m} ({n} records)" for m, n in rows[:5])
            raise CaptureError(f"capture {uri} has no records of model {self.model!r}; it "
                               f"holds {found}")
        labelled = self._query("SELECT model, count(*) FROM l_all GROUP BY model "
                               "ORDER BY 2 DESC").fetchall()
        if self.model not in {r[0] for r in labelled}:
            others = ", ".join(f"{m} ({n})" for m, n in labelled[:5])
            raise CaptureError(
                f"capture {uri} holds no labels of model {self.model!r} (labels of: "
                f"{others}): send some with POST /v2/models/{self.model}/feedback or "
                "modelctl feedback push")

    def _summary(self, within: str, since: datetime | None,
                 until: datetime | None) -> dict[str, Any]:
        records, requests, first, last = self._query(f"""
            SELECT count(*), count(DISTINCT request_id), epoch_ms(min(ts)), epoch_ms(max(ts))
            FROM c_all WHERE model = '{self.model}' AND {within}""").fetchone()
        if records == 0:
            span = self._query(f"""SELECT epoch_ms(min(ts)), epoch_ms(max(ts)) FROM c_all
                WHERE model = '{self.model}'""").fetchone()
            raise CaptureError(
                f"no records of {self.model} between {iso_utc(since) or 'the start'} and "
                f"{iso_utc(until) or 'now'} (the capture spans {iso_utc_ms(span[0])} to "
                f"{iso_utc_ms(span[1])})")
        groups = self._query(f"""SELECT version, role, task, count(*) FROM c_all
            WHERE model = '{self.model}' AND {within} GROUP BY ALL ORDER BY ALL""").fetchall()
        return {"uri": self.captures.uri, "files": len(self.captures.files),
                "records": records, "requests": requests, "first": iso_utc_ms(first),
                "last": iso_utc_ms(last),
                "versions": [{"version": str(v), "role": str(r), "task": str(t), "records": n}
                             for v, r, t, n in groups]}

    def labels(self, since: datetime | None, until: datetime | None) -> dict[str, Any]:
        """The model's labels: rows, request IDs, sources, and how many request IDs
        matched a prediction in the window, one outside it, or none at all."""
        rows, ids = self._query(f"""SELECT count(*), count(DISTINCT request_id) FROM l_all
            WHERE model = '{self.model}'""").fetchone()
        sources = self._query(f"""SELECT coalesce(source, 'unknown'), count(*) FROM l_all
            WHERE model = '{self.model}' GROUP BY ALL ORDER BY ALL""").fetchall()
        matched, outside, unmatched = self._query(f"""
            WITH hits AS (
                SELECT l.request_id, bool_or(c.request_id IS NOT NULL) AS seen,
                       bool_or(coalesce({_within(since, until, 'c.ts')}, false)
                               AND c.request_id IS NOT NULL) AS inside
                FROM l LEFT JOIN c USING (request_id) GROUP BY l.request_id)
            SELECT count(*) FILTER (WHERE inside), count(*) FILTER (WHERE seen AND NOT inside),
                   count(*) FILTER (WHERE NOT seen) FROM hits""").fetchone()
        examples = self._query(f"""SELECT request_id FROM l ANTI JOIN c USING (request_id)
            ORDER BY request_id LIMIT {UNMATCHED_EXAMPLES}""").fetchall()
        return {"rows": rows, "request_ids": ids, "repeated": rows - ids,
                "sources": {str(s): n for s, n in sources},
                "matched": matched, "outside_window": outside, "unmatched": unmatched,
                "unmatched_examples": [str(r[0]) for r in examples]}

    def tallies(self) -> dict[Key, Tally]:
        """Every group's counts: requests, then items, then the classifiers' cells."""
        out: dict[Key, Tally] = {}

        def tally(row: Any) -> Tally:
            return out.setdefault((int(row[0]), str(row[1]), str(row[2]), str(row[3])),
                                  Tally())

        for row in self._query(f"""SELECT {_IN_GROUP}, count(*),
                count(*) FILTER (WHERE NOT answered),
                count(*) FILTER (WHERE answered AND NOT comparable)
                FROM r GROUP BY ALL""").fetchall():
            t = tally(row)
            t.requests, t.failed, t.not_comparable = int(row[4]), int(row[5]), int(row[6])
        for row in self._items():
            t = tally(row)
            t.items, t.correct, t.numeric, t.texts = (int(x) for x in row[4:8])
            t.abs_error, t.jaccard = float(row[8]), float(row[9])
        for row in self._cells():
            t = tally(row)
            answer, label, bin_index, n, score = row[4:]
            cell = (_name(answer), _name(label))
            t.confusion[cell] = t.confusion.get(cell, 0) + int(n)
            if bin_index is not None:
                counts = t.bins[int(bin_index)]
                counts[0] += int(n)
                counts[1] += float(score)
                counts[2] += int(n) if answer == label else 0
        return out

    def _items(self) -> list[Any]:
        numbers = f"json_type(v) IN {_NUMBER} AND json_type(b) IN {_NUMBER}"
        texts = (f"task IN {_tasks(GENERATION_TASKS)} AND json_type(v) = 'VARCHAR' "
                 "AND json_type(b) = 'VARCHAR'")
        rows: list[Any] = self._query(f"""
            WITH k AS (SELECT *, {texts} AS is_text FROM i),
            t AS (
                SELECT *,
                  CASE WHEN is_text THEN {token_set_sql("json_extract_string(v, '$')")} END AS ta,
                  CASE WHEN is_text THEN {token_set_sql("json_extract_string(b, '$')")} END AS tb
                FROM k)
            SELECT {_IN_GROUP}, count(*), count(*) FILTER (WHERE v::VARCHAR = b::VARCHAR),
                   count(*) FILTER (WHERE {numbers}), count(*) FILTER (WHERE is_text),
                   coalesce(sum(abs(try_cast(v AS DOUBLE) - try_cast(b AS DOUBLE)))
                            FILTER (WHERE {numbers}), 0),
                   coalesce(sum(CASE WHEN is_text THEN {set_jaccard_sql('ta', 'tb')} END), 0)
            FROM t GROUP BY ALL""").fetchall()
        return rows

    def _cells(self) -> list[Any]:
        rows: list[Any] = self._query(f"""
            SELECT {_IN_GROUP}, v::VARCHAR, b::VARCHAR,
                   CASE WHEN score IS NOT NULL  -- least and greatest skip NULLs
                        THEN least(greatest(floor(score * {ECE_BINS}), 0), {ECE_BINS - 1})
                        END::INTEGER,
                   count(*), coalesce(sum(score), 0)
            FROM i WHERE task IN {_tasks(CLASSIFICATION_TASKS)} GROUP BY ALL""").fetchall()
        return rows


def _within(since: datetime | None, until: datetime | None, column: str) -> str:
    where = ["true"]
    if since is not None:
        where.append(f"{column} >= TIMESTAMPTZ '{since.isoformat()}'")
    if until is not None:
        where.append(f"{column} < TIMESTAMPTZ '{until.isoformat()}'")
    return " AND ".join(where)


def _name(text: Any) -> str:
    """A class as people read it: a JSON string's text, any other JSON value as JSON."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return str(text)
    return value if isinstance(value, str) else str(text)
