"""Rollouts judged on accuracy alone, on ``modelctl dev``: real predictors, nginx, Prometheus.

Issue 35's rehearsal. The environment serves a fixed-latency "classifier" whose right
answer is its input (it echoes it); its predictors capture and take labels
(``--feedback_token_file``). The application here sends requests through the gateway,
each with its own ``x-request-id``, and labels each answered one with the truth: three
in four at once, through every predictor's feedback route, as an application fanning
out to the replicas does; the rest one interval late or more, in bulk, with ``modelctl
feedback push FILE --url`` (every predictor). Each predictor counts the labels of the
answers it gave (``modelctl_feedback_labels_total``) and the rest as unmatched.

The analysis is ``rollout/analysis/accuracy_check.yaml`` alone, so nothing but the
labels decides:

1. a canary that answers 10% of the items wrong (``prefix_share`` 0.1 of a
   ``wrong:`` prefix; stable answers all right), with the same latency and no errors,
   is rolled back on ``accuracy``;
2. a canary that answers like stable is promoted.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import free_port
from tests.support.devstack import DevCli, push_version, state_of, stop_recorded
from tests.support.grafana import ALL, Prometheus, load, no_data, queries_in

MODEL = "labelled"
ANALYSIS = Path(__file__).resolve().parents[3] / "rollout" / "analysis" / "accuracy_check.yaml"
RATE = 60  # requests a second through the gateway
INTERVAL_S = 4
STEPS = "20,50"
LATE_SHARE = 4  # every 4th label is sent one interval late


@dataclass(frozen=True)
class Env:
    token: str
    token_file: Path
    captures: Path


@pytest.fixture(scope="module")
def env(dev_cli: DevCli, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """Stable = version 1 (always right), capturing and taking labels; a canary started by
    a rollout gets the same flags."""
    root = tmp_path_factory.mktemp("labelled")
    token = secrets.token_hex(24)
    (root / "token").write_text(token)
    captures = root / "captures"
    push_version(dev_cli.registry, MODEL)
    flags = [f"capture_uri={captures}", f"feedback_token_file={root / 'token'}",
             "capture_flush_s=1"]
    roles = [f"--{role}-arg={flag}" for role in ("stable", "canary") for flag in flags]
    up = dev_cli.run("dev", "up", MODEL, "--port", str(free_port()), "--scrape-interval",
                     "1s", *roles)
    try:
        assert up.returncode == 0, up.stderr
        yield Env(token, root / "token", captures)
        down = dev_cli.run("dev", "down", MODEL)
        assert down.returncode == 0, down.stderr
    finally:
        stop_recorded(dev_cli.state_dir, MODEL)


def _predictor_urls(dev_cli: DevCli) -> list[str]:
    """Every predictor of the environment now (stable, and the canary while it runs)."""
    state = state_of(dev_cli.state_dir, MODEL)
    return [f"http://127.0.0.1:{server['port']}" for unit in state["predictors"].values()
            for server in unit["servers"]]


async def _gone(dev_cli: DevCli, urls: list[str]) -> bool:
    """Whether one of ``urls`` leaves the environment within 10 s: the canary that a
    rollback stops (its process ends before the state file says so)."""
    for _ in range(50):
        if set(urls) - set(_predictor_urls(dev_cli)):
            return True
        await asyncio.sleep(0.2)
    return False


async def _push_late(dev_cli: DevCli, env: Env, labels: list[dict[str, str]],
                     folder: Path) -> None:
    """``modelctl feedback push FILE --url ...`` of ``labels``, to every predictor now."""
    file = folder / f"late-{uuid.uuid4().hex}.jsonl"
    file.write_text("".join(json.dumps(label) + "\n" for label in labels))
    for _ in range(3):  # a rollout may stop the canary while the push runs: push again
        targets = _predictor_urls(dev_cli)
        urls = [arg for url in targets for arg in ("--url", url)]
        proc = await asyncio.create_subprocess_exec(
            *dev_cli.argv("feedback", "push", str(file), "--model", MODEL, "--token-file",
                          str(env.token_file), *urls, "--json"),
            env=dev_cli.env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        if proc.returncode == 0 or not await _gone(dev_cli, targets):
            break
    assert proc.returncode == 0, err.decode()
    assert json.loads(out)["labels"] == len(labels)


async def _traffic(dev_cli: DevCli, env: Env, seconds: float) -> dict[str, int]:
    """Requests at RATE through the gateway for ``seconds``, each labelled with the truth
    (its instance): at once through every predictor's route, or, one in LATE_SHARE, an
    interval late with ``modelctl feedback push --url``."""
    gateway = f"http://127.0.0.1:{state_of(dev_cli.state_dir, MODEL)['port']}"
    now_due: list[dict[str, str]] = []
    late: list[tuple[float, dict[str, str]]] = []
    counts = {"sent": 0, "answered": 0, "labelled": 0, "late": 0}
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
    pushes: list[asyncio.Task[None]] = []

    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        async def predict(n: int) -> None:
            rid, truth = str(uuid.uuid4()), f"item-{n}-{secrets.token_hex(4)}"
            r = await client.post(f"{gateway}/v1/models/{MODEL}:predict",
                                  json={"instances": [truth]}, headers={"x-request-id": rid})
            if r.status_code == 200:
                counts["answered"] += 1
                label = {"request_id": rid, "label": truth}
                if n % LATE_SHARE == 0:
                    late.append((time.monotonic() + INTERVAL_S, label))
                else:
                    now_due.append(label)

        async def send_labels(final: bool = False) -> None:
            due = [label for at, label in late if final or at <= time.monotonic()]
            late[:] = [(at, label) for at, label in late if not final and at > time.monotonic()]
            if due and (final or len(due) >= RATE // LATE_SHARE * INTERVAL_S // 2):
                counts["late"] += len(due)
                counts["labelled"] += len(due)
                pushes.append(asyncio.create_task(_push_late(dev_cli, env, due,
                                                             env.token_file.parent)))
            else:  # not enough yet for a push: they wait for the next round
                late[:0] = [(0.0, label) for label in due]
            batch = now_due[:]
            now_due.clear()
            if not batch:
                return
            counts["labelled"] += len(batch)
            for url in _predictor_urls(dev_cli):
                for start in range(0, len(batch), 1000):
                    body = {"labels": batch[start:start + 1000]}
                    try:
                        r = await client.post(f"{url}/v2/models/{MODEL}/feedback", json=body,
                                              headers={"authorization": f"Bearer {env.token}"})
                    except httpx.ConnectError:
                        if await _gone(dev_cli, [url]):
                            break  # the canary the rollout just stopped
                        raise
                    assert r.status_code == 200, r.text

        tasks = []
        start = time.monotonic()
        next_labels = start + 0.5
        while time.monotonic() - start < seconds:
            tasks.append(asyncio.create_task(predict(counts["sent"])))
            counts["sent"] += 1
            if time.monotonic() >= next_labels:
                await send_labels()
                next_labels += 0.5
            await asyncio.sleep(max(0.0, start + counts["sent"] / RATE - time.monotonic()))
        await asyncio.gather(*tasks)
        await send_labels(final=True)
        await asyncio.gather(*pushes)
    return counts


@dataclass
class Rehearsal:
    version: int
    run_code: int
    run_out: str
    status: dict[str, Any]
    history: list[dict[str, Any]]
    traffic: dict[str, int]

    def kinds(self) -> list[str]:
        return [d["kind"] for d in self.history]


def _rehearse(dev_cli: DevCli, env: Env, *, wrong_share: float, seconds: float) -> Rehearsal:
    options: dict[str, object] = {}
    if wrong_share:
        options = {"output_prefix": "wrong:", "prefix_share": wrong_share}
    version = push_version(dev_cli.registry, MODEL, **options)
    dev_cli.json("rollout", "start", MODEL, "--to", f"{MODEL}@{version}", "--target", "local",
                 "--steps", STEPS, "--interval", f"{INTERVAL_S}s", "--analysis", str(ANALYSIS))
    run = dev_cli.background("rollout", "run", MODEL, "--target", "local", "--poll", "1s",
                             "--deadline", f"{seconds:g}s")
    finished = False
    try:
        traffic = asyncio.run(_traffic(dev_cli, env, seconds))
        out, err = run.communicate(timeout=120)
        status = dev_cli.json("rollout", "status", MODEL, "--target", "local")
        history = dev_cli.json("rollout", "history", MODEL, "--target", "local")
        finished = status["state"]["phase"] in ("Promoted", "RolledBack")
    finally:
        if not finished:
            dev_cli.run("rollout", "rollback", MODEL, "--target", "local")
    return Rehearsal(version, run.returncode, out + err, status, history, traffic)


def _accuracy_verdicts(r: Rehearsal) -> list[str]:
    return [d["numbers"]["accuracy.verdict"] for d in r.history
            if "accuracy.verdict" in d.get("numbers", {})]


@pytest.fixture(scope="module")
def rolled_back(dev_cli: DevCli, env: Env) -> Rehearsal:
    """Rehearsal 1: a canary that answers a tenth of the items wrong."""
    return _rehearse(dev_cli, env, wrong_share=0.1, seconds=40)


@pytest.fixture(scope="module")
def promoted(dev_cli: DevCli, env: Env, rolled_back: Rehearsal) -> Rehearsal:
    """Rehearsal 2 (after the first): a canary that answers like stable."""
    return _rehearse(dev_cli, env, wrong_share=0.0, seconds=60)


def test_a_less_accurate_canary_is_rolled_back_on_accuracy_alone(rolled_back: Rehearsal) -> None:
    r = rolled_back
    assert r.run_code == 1, r.run_out  # rolled back
    assert r.kinds()[-2:] == ["RollbackStarted", "RolledBack"], r.run_out
    assert "Fail" in _accuracy_verdicts(r), r.history
    metric = {m["name"]: m for m in r.status["state"]["last_analysis"]["metrics"]}["accuracy"]
    assert metric["verdict"] == "Fail" and metric["stable"] == 0.0, metric
    # Over the whole rollout's labels, the canary answered about a tenth more wrong.
    stats = metric["statistics"]
    assert 0.05 < stats["difference"] < 0.2 and stats["lower"] > 0, metric
    assert r.traffic["late"] > 0 and r.traffic["answered"] == r.traffic["sent"], r.traffic


def test_an_equally_accurate_canary_is_promoted(promoted: Rehearsal, env: Env) -> None:
    r = promoted
    assert r.run_code == 0, r.run_out  # promoted
    assert r.kinds()[-1] == "Promoted", r.run_out
    assert set(_accuracy_verdicts(r)) <= {"Pass", "Inconclusive"}, r.history
    assert r.status["state"]["phase"] == "Promoted"
    # The labels were stored beside the captures too, for the offline report.
    assert any(env.captures.glob(f"{MODEL}/labels/*/*.parquet"))


def test_the_dashboards_accuracy_row_shows_the_labels(dev_cli: DevCli, rolled_back: Rehearsal,
                                                      promoted: Rehearsal) -> None:
    """The Serving dashboard's accuracy row, as Grafana would send its queries, over what
    both rehearsals left in the environment's Prometheus: both panels have data."""
    state = state_of(dev_cli.state_dir, MODEL)
    prom = Prometheus(f"http://127.0.0.1:{state['prometheus_port']}", scrape_s=1.0)
    end = time.time()
    chosen = {"namespace": "local", "isvc": MODEL, "model": MODEL, "version": ALL,
              "role": ALL}
    board = load("modelctl-serving")
    row = queries_in(board, rows=("Accuracy",))
    assert len(row) == 2
    assert not no_data(board, prom, chosen, end - 600, end, step_s=2.0) & row
