"""A real Prometheus server (the Debian binary) for tests, and a synthetic predictor exporter.

``PrometheusServer`` runs ``/usr/bin/prometheus`` on a free loopback port with a 1 s
scrape interval, the given scrape targets and their static labels, and storage in a
temporary directory; it waits until ready and stops by PID.

``python -m tests.support.prom exporter ...`` is a real HTTP process serving the
predictor's own metrics (``predictor._metrics.PredictorMetrics``) for one version,
fed by deterministic synthetic traffic, for analysis tests that need series with
known shapes (a slower or failing canary) without loading a model. With
``--ttft-ms`` it is a generative model's predictor: each request also streams
``--tokens`` output tokens into the LLM server's own series
(``predictor.llm._metrics.LLMMetrics``: one TTFT observation, one TPOT observation
per gap between two tokens), and its request duration is TTFT plus the gaps.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.procs import ManagedProcess, free_port, wait_for, wait_http_ok

PROMETHEUS_BIN = "/usr/bin/prometheus"


@dataclass(frozen=True)
class ScrapeTarget:
    """One ``host:port`` Prometheus scrapes at ``/metrics``, with static labels added."""

    address: str
    labels: Mapping[str, str] = field(default_factory=dict)


class PrometheusServer:
    """A Prometheus process scraping ``targets`` every second; use as a context manager."""

    def __init__(self, targets: Sequence[ScrapeTarget], workdir: Path) -> None:
        if shutil.which(PROMETHEUS_BIN) is None:
            raise RuntimeError(f"{PROMETHEUS_BIN} is missing: apt-get install prometheus")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._workdir = workdir
        self._targets = list(targets)
        self._proc: ManagedProcess | None = None

    def start(self, timeout_s: float = 30.0) -> PrometheusServer:
        config = self._workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self._config()))
        data = self._workdir / "tsdb"
        data.mkdir(exist_ok=True)
        self._proc = ManagedProcess(
            "prometheus",
            [
                PROMETHEUS_BIN,
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            log_dir=self._workdir,
        )
        wait_http_ok(f"{self.url}/-/ready", timeout_s=timeout_s, proc=self._proc)
        return self

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop()
            self._proc = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _config(self) -> dict[str, Any]:
        return {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {
                    "job_name": "predictors",
                    "static_configs": [
                        {"targets": [t.address], "labels": dict(t.labels)} for t in self._targets
                    ],
                }
            ],
        }

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result of an instant query now (straight over HTTP, for polling in tests)."""
        reply = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5.0)
        reply.raise_for_status()
        result: list[dict[str, Any]] = reply.json()["data"]["result"]
        return result

    def wait_for_history(self, seconds: float, targets: int, timeout_s: float = 60.0) -> None:
        """Wait until every one of ``targets`` has been scraped for about ``seconds``."""
        window = f"{int(seconds) + 5}s"

        def ready() -> bool:
            counts = self.query(f'count_over_time(up{{job="predictors"}}[{window}])')
            return len(counts) >= targets and all(
                float(r["value"][1]) >= seconds for r in counts
            )

        wait_for(ready, timeout_s=timeout_s, interval_s=0.5, what=f"{seconds}s of scrapes")


# --- the synthetic exporter ---------------------------------------------------------

# Latency multipliers one cycle of requests goes through: the same shape for every
# version, so two versions with the same base latency are indistinguishable.
_CYCLE = (0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.1, 1.2, 1.5, 2.5)


@dataclass(frozen=True)
class Generation:
    """A generative model's requests: time to first token, time per output token (each
    gap between two tokens) and output tokens per request."""

    ttft_ms: float
    tpot_ms: float
    tokens: int = 11


class Exporter:
    """A synthetic exporter process: ``version``/``role`` with the given traffic shape;
    with ``generation``, an LLM predictor's (``latency_ms`` is then unused)."""

    def __init__(
        self,
        workdir: Path,
        *,
        version: str,
        role: str,
        latency_ms: float = 0.0,
        error_every: int = 0,
        model: str = "demo",
        rps: int = 200,
        generation: Generation | None = None,
    ) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        argv = [
            sys.executable, "-m", "tests.support.prom", "exporter",
            "--port", str(self.port), "--model", model, "--version", version, "--role", role,
            "--latency-ms", str(latency_ms), "--error-every", str(error_every), "--rps", str(rps),
        ]
        if generation is not None:
            argv += ["--ttft-ms", str(generation.ttft_ms), "--tpot-ms", str(generation.tpot_ms),
                     "--tokens", str(generation.tokens)]
        root = Path(__file__).resolve().parents[2]
        self._proc = ManagedProcess(f"exporter-{version}", argv, log_dir=workdir, cwd=root)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        wait_http_ok(f"http://{self.address}/metrics", timeout_s=timeout_s, proc=self._proc)

    def stop(self) -> None:
        self._proc.stop()


@contextmanager
def scraped(exporters: Sequence[Exporter], workdir: Path, labels: Sequence[Mapping[str, str]],
            history_s: float) -> Iterator[PrometheusServer]:
    """A real Prometheus scraping every exporter once per label set in ``labels``, yielded
    once it holds ``history_s`` of scrapes of each; the exporters are stopped after."""
    try:
        for exporter in exporters:
            exporter.wait_ready()
        targets = [ScrapeTarget(e.address, dict(lab)) for lab in labels for e in exporters]
        with PrometheusServer(targets, workdir) as server:
            server.wait_for_history(history_s, targets=len(targets))
            yield server
    finally:
        for exporter in exporters:
            exporter.stop()


def _serve(args: argparse.Namespace) -> None:
    from prometheus_client import CollectorRegistry, start_http_server

    from predictor._metrics import PredictorMetrics

    registry = CollectorRegistry()
    metrics = PredictorMetrics.create(args.model, args.version, args.role, registry=registry)
    codes = {code: metrics.requests.labels(**metrics.labels, code=code) for code in ("200", "500")}
    duration = metrics.request_duration.labels(**metrics.labels)
    generate = _generator(args, registry) if args.ttft_ms is not None else None
    start_http_server(args.port, addr="127.0.0.1", registry=registry)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    tick_s, per_tick, sent = 0.05, args.rps * 0.05, 0
    while not stop.wait(tick_s):
        for _ in range(round(per_tick)):
            sent += 1
            failed = args.error_every > 0 and sent % args.error_every == 0
            codes["500" if failed else "200"].inc()
            if generate is not None:
                duration.observe(generate(sent))
            else:
                duration.observe(args.latency_ms / 1000 * _CYCLE[sent % len(_CYCLE)])


def _generator(args: argparse.Namespace, registry: Any) -> Callable[[int], float]:
    """Request ``n`` of an LLM predictor: its first token and ``--tokens - 1`` gaps into
    the LLM series, each from the cycle of shapes; returns its duration in seconds."""
    from predictor.llm._engine import EngineStats
    from predictor.llm._metrics import LLMMetrics

    llm = LLMMetrics.create(args.model, args.version, args.role,
                            stats=lambda: EngineStats(0, 0, 0, 0, 0), registry=registry)

    def generate(n: int) -> float:
        ttft = args.ttft_ms / 1000 * _CYCLE[n % len(_CYCLE)]
        llm.ttft.observe(ttft)
        total = ttft
        for gap in range(1, args.tokens):
            seconds = args.tpot_ms / 1000 * _CYCLE[(n + gap) % len(_CYCLE)]
            llm.tpot.observe(seconds)
            total += seconds
        llm.generation_tokens.inc(args.tokens)
        llm.e2e.observe(total)
        llm.finished["length"].inc()
        return total

    return generate


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.prom")
    sub = parser.add_subparsers(dest="command", required=True)
    exporter = sub.add_parser("exporter", help="serve synthetic predictor metrics")
    exporter.add_argument("--port", type=int, required=True)
    exporter.add_argument("--model", default="demo")
    exporter.add_argument("--version", required=True)
    exporter.add_argument("--role", required=True)
    exporter.add_argument("--latency-ms", type=float, required=True)
    exporter.add_argument("--error-every", type=int, default=0, help="every Nth request is a 500")
    exporter.add_argument("--rps", type=int, default=200)
    exporter.add_argument("--ttft-ms", type=float, help="an LLM's: time to first token")
    exporter.add_argument("--tpot-ms", type=float, help="an LLM's: time per output token")
    exporter.add_argument("--tokens", type=int, default=11, help="an LLM's: tokens a request")
    _serve(parser.parse_args(argv))


if __name__ == "__main__":
    main()
