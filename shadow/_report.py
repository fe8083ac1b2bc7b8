"""The shadow report: join primary and shadow captures by request ID and judge the shadow.

    find_captures ──> DuckDB views p (primary) and s (shadow), filtered by model and window
        │  side summaries: records, versions, task, time span    (one scan per side)
        │  pairs: p JOIN s USING (request_id): statuses, latency  (one join)
        │  agreement on the comparable pairs, per task            (_shadow_agreement)
        v
    checks (pure, _shadow_stats) ──> verdict Pass / Fail / Inconclusive

Everything is an aggregate that DuckDB streams; memory is bounded by its
``memory_limit`` (past it the join spills to disk), not by the number of records.
Records with the same request ID on one side (a client's retries) keep the latest.
Problems a user can cause (a truncated file, captures of another model, no common
request IDs, an empty window) raise ``CaptureError`` with one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from captures import (
    CaptureError,
    CaptureSource,
    check_columns,
    connect_duckdb,
    explain_read_error,
    find_captures,
    parquet_scan,
)
from common import iso_utc, iso_utc_ms
from rollout.analysis._results import Verdict
from shadow._agreement import PERCENTILES, agreement, agreement_checks
from shadow._errors import ShadowError
from shadow._labels import label_accuracy
from shadow._stats import Check, at_least, at_most, newcombe, overall, wilson, z_for
from shadow._thresholds import Thresholds

REPORT_KIND = "modelctl.io/shadow-report"
REPORT_NAME = "shadow"  # the registry report it is saved as
P99_MIN_SAMPLES = 100
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
_STATUS_CLASSES = {
    "ok": "{x}.status BETWEEN 200 AND 299",
    "client_errors": "{x}.status BETWEEN 400 AND 499 AND {x}.status NOT IN (408, 429)",
    "throttled": "{x}.status = 429",
    "timeouts": "{x}.status IN (408, 503, 504)",
    "errors": "{x}.status >= 500 AND {x}.status NOT IN (503, 504)",
}


@dataclass(frozen=True)
class ReportRequest:
    """What to evaluate: a model's primary and shadow captures over a time window."""

    model: str
    primary_uri: str
    shadow_uri: str
    since: datetime | None = None
    until: datetime | None = None
    shadow_version: str | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    memory_limit_mb: int = 1024

    def __post_init__(self) -> None:
        if not _NAME.match(self.model):
            raise ShadowError(f"invalid model name {self.model!r}")
        if self.shadow_version is not None and not _NAME.match(self.shadow_version):
            raise ShadowError(f"invalid shadow version {self.shadow_version!r}")
        if self.since and self.until and self.since >= self.until:
            raise ShadowError("--since must be before --until")
        if self.memory_limit_mb < 64:
            raise ShadowError("memory limit must be at least 64 MB")


def parse_time(text: str, now: datetime) -> datetime:
    """``2026-11-29T10:00:00Z`` (naive means UTC), ``now``, or ``30m``/``2h``/``1d`` ago."""
    value = text.strip()
    if value.lower() == "now":
        return now
    match = _RELATIVE.match(value)
    if match:
        unit_s = {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        return now - timedelta(seconds=float(match.group(1)) * unit_s)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ShadowError(f"time {text!r}: expected ISO 8601 (2026-11-29T10:00:00Z), "
                          "'now', or a duration ago (30m, 2h, 1d)") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class ShadowReport:
    """The evaluation: numbers, checks and the verdict; ``to_dict`` is what is stored."""

    model: str
    task: str
    shadow_version: str
    verdict: Verdict
    checks: tuple[Check, ...]
    document: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {**self.document, "verdict": self.verdict.value,
                "checks": [c.to_dict() for c in self.checks]}


def build_report(request: ReportRequest, *, now: datetime | None = None) -> ShadowReport:
    """Evaluate the shadow against the primary; raises CaptureError on unusable input."""
    now = now or datetime.now(tz=UTC)
    primary = find_captures(request.primary_uri, "primary")
    shadow = find_captures(request.shadow_uri, "shadow")
    con = connect_duckdb([primary, shadow], memory_limit_mb=request.memory_limit_mb)
    try:
        check_columns(con, primary, "primary")
        check_columns(con, shadow, "shadow")
        return _evaluate(con, request, primary, shadow, now)
    finally:
        con.close()


def _evaluate(con: Any, request: ReportRequest, primary: CaptureSource, shadow: CaptureSource,
              now: datetime) -> ShadowReport:
    sides = {"primary": primary, "shadow": shadow}
    for side, source in sides.items():
        role = "role <> 'shadow'" if side == "primary" else "role = 'shadow'"
        _run(con, f"CREATE TEMP VIEW {side[0]}_all AS SELECT * FROM {parquet_scan(source)} "
                  f"WHERE {role}", source, side)
        _check_model(con, request.model, source, side)
        _window_view(con, side, request)
    summaries = {side: _summary(con, side, source, request)
                 for side, source in sides.items()}
    task = _one_task(summaries)
    shadow_version = _one_version(summaries["shadow"], request)
    for side in sides:
        _dedupe(con, side, summaries[side])
    pairs = _pairs(con)
    if pairs["pairs"] == 0:
        raise CaptureError(
            f"no request ID is in both captures ({summaries['primary']['records']} primary, "
            f"{summaries['shadow']['records']} shadow records in the window): is the primary "
            "mirroring to this shadow, and do both capture the same period?")
    con.execute("""CREATE TEMP VIEW comparable AS
        SELECT p.output AS po, s.output AS so FROM p JOIN s USING (request_id)
        WHERE p.status BETWEEN 200 AND 299 AND s.status BETWEEN 200 AND 299
          AND p.input_hash = s.input_hash AND p.output IS NOT NULL AND s.output IS NOT NULL""")
    task_thresholds = dict(request.thresholds.for_task(task))
    numbers = agreement(con, task, task_thresholds)
    coverage = pairs["pairs"] / summaries["primary"]["requests"]
    checks = _checks(request.thresholds, task, numbers, pairs, summaries, coverage)
    document = {
        "kind": REPORT_KIND, "schema": 1, "model": request.model, "task": task,
        "shadow_version": shadow_version, "generated_at": now.isoformat(),
        "window": {"since": iso_utc(request.since), "until": iso_utc(request.until)},
        "primary": summaries["primary"], "shadow": summaries["shadow"],
        "pairs": pairs, "coverage": coverage,
        "shadow_unmatched": summaries["shadow"]["requests"] - pairs["pairs"],
        "agreement": numbers, "thresholds": request.thresholds.to_dict(),
        "accuracy": label_accuracy(
            request.model, request.primary_uri, request.shadow_uri, since=request.since,
            until=request.until, shadow_version=shadow_version,
            memory_limit_mb=request.memory_limit_mb, now=now),
    }
    return ShadowReport(request.model, task, shadow_version, overall(checks), tuple(checks),
                        document)


def _run(con: Any, sql: str, source: CaptureSource, side: str) -> Any:
    try:
        return con.execute(sql)
    except Exception as exc:
        raise explain_read_error(exc, source, side) from None


def _check_model(con: Any, model: str, source: CaptureSource, side: str) -> None:
    rows = _run(con, f"SELECT model, count(*) FROM {side[0]}_all GROUP BY model ORDER BY 2 DESC",
                source, side).fetchall()
    if not rows:
        which = "no shadow records (role shadow)" if side == "shadow" else \
            "only shadow records (role shadow), no primary ones"
        raise CaptureError(f"{side} capture {source.uri} holds {which}")
    if model not in {r[0] for r in rows}:
        found = ", ".join(f"{m} ({n} records)" for m, n in rows[:5])
        raise CaptureError(f"{side} capture {source.uri} has no records of model {model!r}; "
                           f"it holds {found}")


def _window_view(con: Any, side: str, request: ReportRequest) -> None:
    where = [f"model = '{request.model}'"]
    if request.since is not None:
        where.append(f"ts >= TIMESTAMPTZ '{request.since.isoformat()}'")
    if request.until is not None:
        where.append(f"ts < TIMESTAMPTZ '{request.until.isoformat()}'")
    if side == "shadow" and request.shadow_version is not None:
        where.append(f"version = '{request.shadow_version}'")
    con.execute(f"CREATE TEMP VIEW {side[0]}_win AS SELECT request_id, ts, version, task, "
                f"status, latency_ms, input_hash, output FROM {side[0]}_all "
                f"WHERE {' AND '.join(where)}")


def _summary(con: Any, side: str, source: CaptureSource, request: ReportRequest) -> dict[str, Any]:
    v = side[0]
    records, requests, first, last = _run(con, f"""SELECT count(*), count(DISTINCT request_id),
        epoch_ms(min(ts)), epoch_ms(max(ts)) FROM {v}_win""", source, side).fetchone()
    if records == 0:
        span = con.execute(f"""SELECT epoch_ms(min(ts)), epoch_ms(max(ts)) FROM {v}_all
            WHERE model = '{request.model}'""").fetchone()
        version = f" of version {request.shadow_version}" if side == "shadow" and \
            request.shadow_version else ""
        raise CaptureError(
            f"no {side} records{version} of {request.model} between "
            f"{iso_utc(request.since) or 'the start'} and {iso_utc(request.until) or 'now'} "
            f"(the capture spans {iso_utc_ms(span[0])} to {iso_utc_ms(span[1])})")
    groups = con.execute(f"SELECT version, task, count(*) FROM {v}_win GROUP BY ALL "
                         "ORDER BY 3 DESC").fetchall()
    return {"uri": source.uri, "files": len(source.files), "records": records,
            "requests": requests, "versions": sorted({str(g[0]) for g in groups}),
            "tasks": sorted({str(g[1]) for g in groups}),
            "first": iso_utc_ms(first), "last": iso_utc_ms(last)}


def _one_task(summaries: dict[str, dict[str, Any]]) -> str:
    tasks = {side: s["tasks"] for side, s in summaries.items()}
    if len(tasks["primary"]) != 1 or tasks["primary"] != tasks["shadow"]:
        raise CaptureError(f"the captures disagree on the task (primary: "
                           f"{', '.join(tasks['primary'])}; shadow: {', '.join(tasks['shadow'])}):"
                           " compare versions of the same model")
    return str(tasks["primary"][0])


def _one_version(summary: dict[str, Any], request: ReportRequest) -> str:
    versions = summary["versions"]
    if len(versions) != 1:
        raise CaptureError(f"the shadow capture holds versions {', '.join(versions)} in the "
                           "window: pass --shadow-version (or narrow --since/--until)")
    return str(versions[0])


def _dedupe(con: Any, side: str, summary: dict[str, Any]) -> None:
    v = side[0]
    if summary["records"] == summary["requests"]:
        con.execute(f"CREATE TEMP VIEW {v} AS SELECT * FROM {v}_win")
        return
    con.execute(f"""CREATE TEMP VIEW {v} AS
        SELECT request_id, unnest(arg_max({{'ts': ts, 'version': version, 'status': status,
               'latency_ms': latency_ms, 'input_hash': input_hash, 'output': output}}, ts))
        FROM {v}_win GROUP BY request_id""")


def _pairs(con: Any) -> dict[str, Any]:
    counts = ", ".join(f"count(*) FILTER (WHERE {cond.format(x=side)})"
                       for side in ("p", "s") for cond in _STATUS_CLASSES.values())
    row = con.execute(f"""SELECT count(*), count(*) FILTER (WHERE p.input_hash <> s.input_hash),
        approx_quantile(p.latency_ms, {PERCENTILES}) FILTER (WHERE p.status BETWEEN 200 AND 299),
        approx_quantile(s.latency_ms, {PERCENTILES}) FILTER (WHERE s.status BETWEEN 200 AND 299),
        {counts} FROM p JOIN s USING (request_id)""").fetchone()
    n, mismatched, p_lat, s_lat = row[:4]
    names = list(_STATUS_CLASSES)
    per_side = {}
    for index, side in enumerate(("primary", "shadow")):
        values = row[4 + index * len(names): 4 + (index + 1) * len(names)]
        per_side[side] = dict(zip(names, (int(x) for x in values), strict=True))
    # p50 and p99 are the 50th and 99th of the percentiles 1-99 the page draws as CDFs.
    latency = {side: {"p50": q[49] if q else None, "p99": q[98] if q else None,
                      "percentiles": list(q or [])}
               for side, q in (("primary", p_lat), ("shadow", s_lat))}
    return {"pairs": int(n), "input_mismatches": int(mismatched), "status": per_side,
            "latency_ms": latency}


def _checks(thresholds: Thresholds, task: str, numbers: dict[str, Any], pairs: dict[str, Any],
            summaries: dict[str, dict[str, Any]], coverage: float) -> list[Check]:
    z = z_for(thresholds.confidence)
    n = pairs["pairs"]
    enough = n >= thresholds.min_pairs
    checks = [at_least("pairs", float(n), None, float(thresholds.min_pairs),
                       what=f"{n} paired requests")]
    if not enough:
        checks[0] = Check("pairs", Verdict.INCONCLUSIVE, float(n), float(thresholds.min_pairs),
                          None, f"{n} paired requests, fewer than min_pairs "
                          f"{thresholds.min_pairs}: collect more")
    checks += agreement_checks(task, numbers, dict(thresholds.for_task(task)), z=z,
                               enough=enough)
    status = pairs["status"]
    for key, name, kind in (("max_error_rate_increase", "error-rate", "errors"),
                            ("max_timeout_rate_increase", "timeout-rate", "timeouts")):
        tolerance = getattr(thresholds, key)
        if tolerance is None:
            continue
        k_s, k_p = status["shadow"][kind], status["primary"][kind]
        low, high = newcombe(k_s, n, k_p, n, z)
        checks.append(at_most(name, (k_s - k_p) / n, (low, high), tolerance, enough=enough,
                              what=f"shadow {k_s}, primary {k_p} of {n}"))
    if thresholds.max_latency_p99_ratio is not None:
        checks.append(_latency_check(pairs, thresholds.max_latency_p99_ratio, enough))
    if thresholds.min_coverage is not None:
        requests = summaries["primary"]["requests"]
        checks.append(at_least("coverage", coverage, wilson(n, requests, z),
                               thresholds.min_coverage, what=f"{n}/{requests} requests"))
    return checks


def _latency_check(pairs: dict[str, Any], limit: float, enough: bool) -> Check:
    """Shadow / primary latency of the successful pairs: the p99 once both sides have
    P99_MIN_SAMPLES of them (below that a p99 is little more than the slowest request,
    one scheduling hiccup), else the median."""
    ok = min(pairs["status"]["primary"]["ok"], pairs["status"]["shadow"]["ok"])
    quantile = "p99" if ok >= P99_MIN_SAMPLES else "p50"
    lat = pairs["latency_ms"]
    primary, shadow = lat["primary"][quantile], lat["shadow"][quantile]
    ratio = shadow / primary if primary and shadow is not None else None
    check = at_most("latency-p99-ratio", ratio, None, limit, enough=enough,
                    what="no successful pairs")
    note = "" if quantile == "p99" else f" (p50s: fewer than {P99_MIN_SAMPLES} successful pairs)"
    return Check(check.name, check.verdict, ratio, limit, None, check.reason + note,
                 {"primary_ms": primary or 0.0, "shadow_ms": shadow or 0.0})
