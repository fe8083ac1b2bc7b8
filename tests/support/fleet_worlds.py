"""The end-to-end worlds of tests/shadow: registries, versions and predictor processes.

Spawned (not waited for) by the session fixture ``spawned`` in conftest.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.support import free_port
from tests.support.fleet import Fleet, Predictor, fetch, push_fixed

FIXED = "demo-fixed"
CLASSIFY = "demo-classify"
FIXED_LATENCY_MS = 20


@dataclass
class FixedWorld:
    """demo-fixed: 1 primary, 4 agrees, 2 disagrees (prefixed outputs), 3 sleeps 5 s."""

    registry: Path
    capture: Path
    down_capture: Path
    primary: Predictor
    agree: Predictor
    disagree: Predictor
    slow_primary: Predictor
    down_primary: Predictor
    baseline: Predictor
    slow_shadow: Predictor

    @property
    def all(self) -> list[Predictor]:
        return [self.primary, self.agree, self.disagree, self.slow_primary, self.down_primary,
                self.baseline, self.slow_shadow]


def spawn_fixed(fleet: Fleet, root: Path) -> FixedWorld:
    registry = root / "registry"
    versions = {
        "primary": push_fixed(registry, root, {"latency_ms": FIXED_LATENCY_MS}),
        "disagree": push_fixed(registry, root, {"latency_ms": FIXED_LATENCY_MS,
                                                 "output_prefix": "v2:"}),
        "slow": push_fixed(registry, root, {"latency_ms": 5000}),
        "agree": push_fixed(registry, root, {"latency_ms": FIXED_LATENCY_MS,
                                              "max_batch_size": 50}),
    }
    assert versions == {"primary": 1, "disagree": 2, "slow": 3, "agree": 4}
    dirs = {k: fetch(registry, FIXED, v, root / f"m{v}") for k, v in versions.items()}
    capture, down_capture = root / "capture", root / "capture-down"
    fast = ["--capture_flush_s", "0.2"]
    agree = fleet.spawn(dirs["agree"], FIXED, "--role", "shadow", "--capture_uri", str(capture),
                        *fast)
    slow = fleet.spawn(dirs["slow"], FIXED, "--role", "shadow", "--drain_timeout_s", "1")
    return FixedWorld(
        registry, capture, down_capture,
        primary=fleet.spawn(dirs["primary"], FIXED, "--shadow_url", agree.url, "--capture_uri",
                            str(capture), "--capture_inputs", "true", *fast),
        agree=agree,
        disagree=fleet.spawn(dirs["disagree"], FIXED, "--role", "shadow", "--capture_uri",
                             str(capture), *fast),
        slow_primary=fleet.spawn(dirs["primary"], FIXED, "--shadow_url", slow.url,
                                 "--shadow_timeout_ms", "1500", "--shadow_max_pending", "4"),
        down_primary=fleet.spawn(dirs["primary"], FIXED, "--shadow_url",
                                 f"http://127.0.0.1:{free_port()}", "--capture_uri",
                                 str(down_capture), "--capture_flush_s", "300"),
        baseline=fleet.spawn(dirs["primary"], FIXED),
        slow_shadow=slow,
    )


@dataclass
class ClassifyWorld:
    """demo-classify: 1 primary, 3 the same files again (agrees), 2 labels permuted."""

    capture: Path
    primary: Predictor
    agree: Predictor
    disagree: Predictor

    @property
    def all(self) -> list[Predictor]:
        return [self.primary, self.agree, self.disagree]


def _push_classify(registry: Path, work: Path) -> None:
    from registry import Registry
    from scripts.demo_models import build_classify

    reg = Registry.open(str(registry))
    src = work / "classify"
    src.mkdir()
    build_classify(src)
    assert reg.push(src, CLASSIFY, "text-classification").version == 1
    config = json.loads((src / "config.json").read_text())
    labels = config["id2label"]
    config["id2label"] = {k: labels[str(len(labels) - 1 - int(k))] for k in labels}
    config["label2id"] = {v: int(k) for k, v in config["id2label"].items()}
    relabelled = work / "relabelled"
    relabelled.mkdir()
    for path in src.iterdir():
        (relabelled / path.name).write_bytes(path.read_bytes())
    (relabelled / "config.json").write_text(json.dumps(config))
    assert reg.push(relabelled, CLASSIFY, "text-classification").version == 2
    assert reg.push(src, CLASSIFY, "text-classification").version == 3


def spawn_classify(fleet: Fleet, root: Path) -> ClassifyWorld:
    registry = root / "registry"
    _push_classify(registry, root)
    capture = root / "capture"
    common = ["--capture_uri", str(capture), "--capture_flush_s", "0.2"]
    agree = fleet.spawn(fetch(registry, CLASSIFY, 3, root / "m3"), CLASSIFY, "--role",
                        "shadow", *common)
    return ClassifyWorld(
        capture,
        primary=fleet.spawn(fetch(registry, CLASSIFY, 1, root / "m1"), CLASSIFY,
                            "--shadow_url", agree.url, *common),
        agree=agree,
        disagree=fleet.spawn(fetch(registry, CLASSIFY, 2, root / "m2"), CLASSIFY, "--role",
                             "shadow", *common),
    )
