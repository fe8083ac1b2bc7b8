"""The serving dashboard over a multi-model predictor: a real ``--multi_model``
predictor with three fixed-latency models and a text classifier under a memory budget
for two, scraped by a real Prometheus with the labels a cluster's PodMonitor adds.
Every query runs as Grafana would send it (tests/support/grafana.py); the multi-model
row has data (loads, load time, resident memory, evictions, cold starts), and so has
the padding ratio, which only a text model reports."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

from scripts.demo_models import build_classify
from tests.support import wait_for
from tests.support.grafana import ALL, Prometheus, load, no_data, queries_in
from tests.support.multi import Multi, fill_models_dir
from tests.support.prom import PrometheusServer, ScrapeTarget

LABELS = {"namespace": "ml", "isvc": "fleet"}


def test_the_serving_dashboard_shows_a_multi_model_predictor(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    fixed = {f"m{i}": {"latency_ms": 5, "hold_mb": 10} for i in range(3)}
    models = fill_models_dir(tmp_path, fixed, {"cls": lambda d: build_classify(d, seed=3)})
    multi = start_multi(models, "--memory_budget_mb", "25", "--min_residency_s", "0")
    address = multi.url.removeprefix("http://")
    (tmp_path / "prom").mkdir()
    with PrometheusServer([ScrapeTarget(address, LABELS)], tmp_path / "prom") as server:
        started = time.time()
        for _ in range(2):  # the second round finds each evicted again: lru evictions
            for name in ("m0", "m1", "m2"):
                assert multi.v1(name, ["x"]).status_code == 200
        for text in ("a short one", "a rather longer sentence to pad the short one against"):
            assert multi.v1("cls", [text, "hi"]).status_code == 200
        wait_for(lambda: server.query('modelctl_padding_ratio{isvc="fleet"}')
                 and server.query('modelctl_model_evictions_total{reason="lru"} > 0'),
                 timeout_s=30, interval_s=0.5, what="Prometheus scraping the multi-model series")
        board = load("modelctl-serving")
        chosen = {"namespace": "ml", "isvc": "fleet", "model": ALL, "version": ALL,
                  "role": ALL}
        prom = Prometheus(server.url, scrape_s=1.0)
        absent = queries_in(board, rows=("Queue mode", "LLM", "Accuracy"))
        seen: dict[str, set[tuple[str, str]]] = {}

        def settled() -> bool:  # rate() needs two samples of a series in its window
            seen["empty"] = no_data(board, prom, chosen, started - 5, time.time(), step_s=1.0)
            return seen["empty"] == absent

        with contextlib.suppress(TimeoutError):
            wait_for(settled, timeout_s=30, interval_s=1.0, what="every panel with data")
        assert seen["empty"] == absent
