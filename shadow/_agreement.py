"""Per-task agreement between primary and shadow outputs, item by item, in DuckDB.

Each query reads the comparable pairs (both sides answered 2xx for the same input)
from the view ``comparable(po, so)`` (the primary's and the shadow's output, canonical
JSON of one value per item), unnests the items side by side and aggregates:

- ``text-classification``: a (primary label, shadow label) count table, small (labels
  squared), from which the match rate and the confusion summary come;
- ``feature-extraction``: cosine similarity per item, as count, mean, standard
  deviation, approximate quantiles (t-digest) and the count below the p5 threshold;
- ``text-generation`` and ``llm`` (an LLM's generations, one text per request): exact
  match, and token-set Jaccard similarity (lower-cased, whitespace tokens; the SQL the
  accuracy report scores generations with, ``accuracy.token_set_sql``) with its mean,
  deviation and quantiles;
- anything else (``fixed-latency``): exact match of each item's canonical JSON.

Items whose counts differ between the sides (a pair with 3 items on one side and 2
on the other) are counted as ``unpaired_items`` and never compared.
"""

from __future__ import annotations

from typing import Any

from accuracy import set_jaccard_sql, token_set_sql
from shadow._stats import Check, at_least, mean_interval, wilson

CONFUSION_CELLS = 20
# Every percentile 1-99: the distributions the HTML report draws, and p1/p5/p50 of them.
PERCENTILES = [round(q / 100, 2) for q in range(1, 100)]

_ITEMS = """
SELECT unnest(from_json(po, '{t}')) AS a, unnest(from_json(so, '{t}')) AS b FROM comparable
"""


def agreement(con: Any, task: str, thresholds: dict[str, float | None]) -> dict[str, Any]:
    """The task's agreement numbers (JSON-ready)."""
    if task == "text-classification":
        return _classification(con)
    if task == "feature-extraction":
        return _embedding(con, thresholds.get("min_cosine_p5"))
    if task in ("text-generation", "llm"):
        return _generation(con)
    return _exact(con)


def _classification(con: Any) -> dict[str, Any]:
    rows = con.execute(f"""
        WITH items AS ({_ITEMS.format(t='["JSON"]')})
        SELECT json_extract_string(a, '$.label') AS pl, json_extract_string(b, '$.label') AS sl,
               (a IS NULL OR b IS NULL) AS unpaired, count(*) AS n
        FROM items GROUP BY ALL""").fetchall()
    unpaired = sum(n for _, _, lost, n in rows if lost)
    cells = sorted(((pl, sl, n) for pl, sl, lost, n in rows if not lost),
                   key=lambda c: (-c[2], str(c[0]), str(c[1])))
    items = sum(n for _, _, n in cells)
    matches = sum(n for pl, sl, n in cells if pl == sl)
    per_label: dict[str, dict[str, int]] = {}
    for pl, sl, n in cells:
        entry = per_label.setdefault(str(pl), {"primary": 0, "shadow": 0, "match": 0})
        entry["primary"] += n
        entry["match"] += n if pl == sl else 0
        per_label.setdefault(str(sl), {"primary": 0, "shadow": 0, "match": 0})["shadow"] += n
    return {
        "items": items, "unpaired_items": unpaired, "label_matches": matches,
        "label_match_rate": matches / items if items else None,
        "confusion": [{"primary": pl, "shadow": sl, "count": n} for pl, sl, n in
                      cells[:CONFUSION_CELLS]],
        "confusion_cells": len(cells),
        "labels": per_label,
    }


def _embedding(con: Any, p5_threshold: float | None) -> dict[str, Any]:
    below = "NULL" if p5_threshold is None else f"{float(p5_threshold)!r}"
    row = con.execute(f"""
        WITH items AS ({_ITEMS.format(t='[["DOUBLE"]]')}),
        sims AS (
            SELECT CASE WHEN a IS NULL OR b IS NULL OR len(a) <> len(b) OR len(a) = 0 THEN NULL
                        ELSE list_cosine_similarity(a, b) END AS raw,
                   (a IS NULL OR b IS NULL) AS unpaired
            FROM items),
        c AS (SELECT CASE WHEN isnan(raw) THEN NULL ELSE raw END AS cos, unpaired FROM sims)
        SELECT count(*) FILTER (WHERE NOT unpaired), count(*) FILTER (WHERE unpaired),
               count(cos), avg(cos), stddev_samp(cos),
               approx_quantile(cos, {PERCENTILES}), min(cos),
               count(*) FILTER (WHERE cos < {below}) FROM c""").fetchone()
    items, unpaired, compared, mean, stddev, quantiles, lowest, n_below = row
    q = quantiles or [None] * len(PERCENTILES)
    return {
        "items": items, "unpaired_items": unpaired, "compared": compared,
        "dimension_mismatches": items - compared,
        "cosine": {"mean": mean, "stddev": stddev, "p1": q[0], "p5": q[4], "p50": q[49],
                   "min": lowest, "percentiles": list(q) if quantiles else []},
        "below_p5_threshold": n_below if p5_threshold is not None else None,
    }


def _generation(con: Any) -> dict[str, Any]:
    row = con.execute(f"""
        WITH items AS ({_ITEMS.format(t='["VARCHAR"]')}),
        t AS (SELECT a, b, {token_set_sql('a')} AS ta, {token_set_sql('b')} AS tb,
                     (a IS NULL OR b IS NULL) AS unpaired FROM items),
        sims AS (
            SELECT unpaired, a = b AS exact,
                   CASE WHEN unpaired THEN NULL ELSE {set_jaccard_sql('ta', 'tb')} END
                       AS jaccard
            FROM t)
        SELECT count(*) FILTER (WHERE NOT unpaired), count(*) FILTER (WHERE unpaired),
               count(*) FILTER (WHERE exact), avg(jaccard), stddev_samp(jaccard),
               approx_quantile(jaccard, [0.05, 0.5]) FROM sims""").fetchone()
    items, unpaired, exact, mean, stddev, quantiles = row
    q = quantiles or [None, None]
    return {
        "items": items, "unpaired_items": unpaired, "exact_matches": exact,
        "exact_match_rate": exact / items if items else None,
        "token_jaccard": {"mean": mean, "stddev": stddev, "p5": q[0], "p50": q[1]},
    }


def _exact(con: Any) -> dict[str, Any]:
    row = con.execute(f"""
        WITH items AS ({_ITEMS.format(t='["JSON"]')})
        SELECT count(*) FILTER (WHERE a IS NOT NULL AND b IS NOT NULL),
               count(*) FILTER (WHERE a IS NULL OR b IS NULL),
               count(*) FILTER (WHERE a::VARCHAR = b::VARCHAR) FROM items""").fetchone()
    items, unpaired, exact = row
    return {"items": items, "unpaired_items": unpaired, "exact_matches": exact,
            "exact_match_rate": exact / items if items else None}


def agreement_checks(task: str, numbers: dict[str, Any], thresholds: dict[str, float | None],
                     *, z: float, enough: bool) -> list[Check]:
    """The task's threshold checks over its agreement numbers."""
    checks: list[Check] = []
    items = int(numbers.get("items") or 0)
    rate_keys = {"min_label_match": "label_matches", "min_exact_match": "exact_matches"}
    for key, count_key in rate_keys.items():
        threshold = thresholds.get(key)
        if threshold is None or count_key not in numbers:
            continue
        hits = int(numbers[count_key])
        value = hits / items if items else None
        checks.append(at_least(key.removeprefix("min_").replace("_", "-"), value,
                               wilson(hits, items, z), threshold, enough=enough,
                               what=f"{hits}/{items} items"))
    for key, block in (("min_cosine_mean", "cosine"), ("min_token_jaccard_mean", "token_jaccard")):
        threshold = thresholds.get(key)
        if threshold is None or block not in numbers:
            continue
        stats = numbers[block]
        n = int(numbers.get("compared", items))
        mean = stats["mean"]
        interval = mean_interval(mean, stats["stddev"], n, z) if mean is not None else None
        checks.append(at_least(key.removeprefix("min_").replace("_", "-"), mean, interval,
                               threshold, enough=enough, what=f"{n} items"))
    threshold = thresholds.get("min_cosine_p5")
    if threshold is not None and "cosine" in numbers:
        checks.append(_p5_check(numbers, threshold, z, enough))
    return checks


def _p5_check(numbers: dict[str, Any], threshold: float, z: float, enough: bool) -> Check:
    """p5 >= t is the same as 'at most 5% of items below t': a proportion, judged by the
    Wilson interval of the share below (the t-digest p5 is shown, not judged)."""
    n = int(numbers.get("compared") or 0)
    below = int(numbers.get("below_p5_threshold") or 0)
    share = below / n if n else None
    low, high = wilson(below, n, z)
    check = at_least("cosine-p5", None if share is None else 1.0 - share,
                     (1.0 - high, 1.0 - low), 0.95, enough=enough,
                     what=f"{below}/{n} items below {threshold:g}")
    reason = (f"{below}/{n} items ({(share or 0):.2%}) have cosine < {threshold:g} "
              f"(at most 5% may); " + check.reason)
    return Check("cosine-p5", check.verdict, numbers["cosine"]["p5"], threshold, None, reason,
                 {"share_below": share or 0.0, "share_below_low": low,
                  "share_below_high": high, "below": below, "n": n})
