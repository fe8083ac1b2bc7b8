"""The tenants file, the limits (the real ``limits`` library, in memory) and the bounded
per-tenant metrics."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from common import tenants as tenants_file
from common.tenants import Tenant, TenantsError, TenantsFile, hash_key, new_key, parse_tenants
from predictor._errors import Throttled
from predictor.tenants import TenantLimits, TenantMetrics, _metrics

KEY_A, KEY_B = new_key(), new_key()


def _doc(**tenants: dict[str, Any]) -> dict[str, Any]:
    return {"tenants": tenants}


def test_a_key_finds_its_tenant_by_hash_and_another_finds_none() -> None:
    tenants = parse_tenants(_doc(acme={"keys": [hash_key(KEY_A)], "models": ["m"],
                                       "requests": "20 per 2 seconds", "concurrent": 2,
                                       "weight": 3}), "t.yaml")
    acme = tenants.tenant_for(KEY_A)
    assert acme == Tenant("acme", frozenset({"m"}), "20 per 2 seconds", concurrent=2,
                          weight=3.0)
    assert acme.may_use("m") and not acme.may_use("other")
    assert tenants.tenant_for(KEY_B) is None and tenants.tenant_for("") is None
    assert KEY_A.startswith("mk-") and len(KEY_A) > 40


@pytest.mark.parametrize(("spec", "words"), [
    ({"keys": [KEY_A]}, "'sha256:' and 64 hex digits"),  # a key in the clear
    ({"keys": []}, "at least one key hash"),
    ({"keys": [hash_key(KEY_A)], "requests": "lots"}, "is not a rate"),
    ({"keys": [hash_key(KEY_A)], "concurrent": 0}, "'concurrent'"),
    ({"keys": [hash_key(KEY_A)], "weight": -1}, "'weight'"),
    ({"keys": [hash_key(KEY_A)], "model": ["m"]}, "unknown field 'model'"),
    ({"keys": [hash_key(KEY_A)], "models": "m"}, "'models' must be a list"),
])
def test_a_bad_tenant_is_named_and_a_key_never_echoed(spec: dict[str, Any], words: str) -> None:
    with pytest.raises(TenantsError) as caught:
        parse_tenants(_doc(acme=spec), "t.yaml")
    assert words in str(caught.value) and "acme" in str(caught.value)
    assert KEY_A not in str(caught.value)


def test_two_tenants_cannot_share_a_key() -> None:
    with pytest.raises(TenantsError, match="share a key"):
        parse_tenants(_doc(a={"keys": [hash_key(KEY_A)]}, b={"keys": [hash_key(KEY_A)]}), "t")


def test_the_file_is_reread_when_it_changes_and_a_broken_one_keeps_the_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tenants_file, "RECHECK_S", 0.0)
    path = tmp_path / "tenants.yaml"
    path.write_text(yaml.safe_dump(_doc(acme={"keys": [hash_key(KEY_A)]})))
    tenants = TenantsFile(path)
    assert tenants.current().tenant_for(KEY_A) is not None
    # A Secret volume swaps the file: a new inode, new content.
    new = tmp_path / "new.yaml"
    new.write_text(yaml.safe_dump(_doc(beta={"keys": [hash_key(KEY_B)]})))
    os.replace(new, path)
    assert tenants.current().tenant_for(KEY_A) is None
    assert tenants.current().tenant_for(KEY_B).name == "beta"  # type: ignore[union-attr]
    path.write_text("tenants: [unclosed")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert tenants.current().tenant_for(KEY_B) is not None


def test_a_file_that_cannot_be_read_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(TenantsError, match="cannot read"):
        TenantsFile(tmp_path / "absent.yaml")
    (tmp_path / "bad.yaml").write_text("tenants:\n  acme: {keys: [\n")
    with pytest.raises(TenantsError, match="not YAML"):
        TenantsFile(tmp_path / "bad.yaml")


def test_a_rate_admits_its_burst_then_429s_with_retry_after() -> None:
    acme = Tenant("acme", requests="5 per 10 seconds")
    beta = Tenant("beta", requests="5 per 10 seconds")
    limits = TenantLimits.in_memory()

    async def run() -> tuple[int, float, int]:
        admitted, retry = 0, 0.0
        for _ in range(8):
            try:
                await limits.admit(acme)
                limits.release(acme)
                admitted += 1
            except Throttled as exc:
                retry = exc.retry_after_s
        other = 0
        for _ in range(5):
            await limits.admit(beta)
            limits.release(beta)
            other += 1
        return admitted, retry, other

    admitted, retry, other = asyncio.run(run())
    assert admitted == 5 and 1 <= retry <= 10
    assert other == 5  # one tenant's burst costs another nothing


def test_requests_in_flight_are_bounded_and_released() -> None:
    acme = Tenant("acme", concurrent=2)
    limits = TenantLimits.in_memory()

    async def run() -> None:
        await limits.admit(acme)
        await limits.admit(acme)
        with pytest.raises(Throttled, match="2 requests in flight"):
            await limits.admit(acme)
        limits.release(acme)
        await limits.admit(acme)

    asyncio.run(run())


def _series(registry: CollectorRegistry) -> set[str]:
    return {s.labels["tenant"] for m in registry.collect() for s in m.samples
            if s.name == "modelctl_tenant_requests_total"}


def test_metrics_name_the_busiest_tenants_and_count_the_rest_as_other(
        monkeypatch: pytest.MonkeyPatch) -> None:
    registry = CollectorRegistry()
    metrics = TenantMetrics({"model": "m", "version": "1", "role": "stable"}, top=2,
                            registry=registry)
    for name in ("a", "b", "c", "d"):
        metrics.observe(name, 200, 0.01)
    metrics.observe(None, 401, 0.001)
    assert _series(registry) == {"a", "b", "other", "none"}
    # Next minute: d and c are the busiest; a and b's series go, so the count stays bound.
    clock = [time.monotonic() + _metrics.WINDOW_S + 1]
    monkeypatch.setattr(_metrics.time, "monotonic", lambda: clock[0])
    for _ in range(5):
        metrics.observe("d", 200, 0.01)
        metrics.observe("c", 429, 0.01)
    assert _series(registry) <= {"a", "b", "c", "d", "other", "none"}
    clock[0] += _metrics.WINDOW_S + 1
    metrics.observe("c", 200, 0.01)
    assert _series(registry) == {"c", "d", "other", "none"}


def test_generated_tokens_are_charged_after_and_refuse_once_spent() -> None:
    frugal = Tenant("frugal", tokens="10 per 60 seconds")
    limits = TenantLimits.in_memory()

    async def run() -> None:
        await limits.admit(frugal)
        limits.release(frugal)
        await limits.charge_tokens(frugal, 8)
        await limits.admit(frugal)  # 2 left: admitted
        limits.release(frugal)
        await limits.charge_tokens(frugal, 8)  # only 2 fit: the window is now full
        with pytest.raises(Throttled, match="generated-token rate"):
            await limits.admit(frugal)

    asyncio.run(run())
