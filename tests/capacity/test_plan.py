"""The planner's properties: load, SLO and floor; Knative's arithmetic; the plan file."""

from __future__ import annotations

import itertools
import math

import pytest

from capacity import (
    BatchTiming,
    Burst,
    PlanFile,
    PlanRequest,
    Profile,
    ProfileError,
    knative_targets,
    parse_burst,
    parse_ms,
    parse_rate,
    plan,
)

PROFILE = Profile("m", 1, "cpu", (BatchTiming(1, (4.0, 5.0, 6.0), 0.0),
                                  BatchTiming(4, (6.0, 7.0, 9.0), 0.0),
                                  BatchTiming(16, (12.0, 14.0, 18.0), 0.0)),
                  edge_ms=1.0, edge_cpu_ms=0.2, load_s=15.0)
FAST = {"trial_requests": 600, "predict_requests": 1500}


def test_more_load_never_plans_fewer_replicas() -> None:
    plans = [plan(PROFILE, PlanRequest(80.0, peak, burst=Burst(1.5, 30), **FAST))
             for peak in (100.0, 800.0, 3000.0)]
    for a, b in itertools.pairwise(plans):
        assert b.replicas.for_peak >= a.replicas.for_peak
        assert b.replicas.max >= a.replicas.max and b.replicas.min >= a.replicas.min


def test_a_tighter_slo_never_plans_a_longer_wait() -> None:
    waits = [plan(PROFILE, PlanRequest(slo, 500.0, **FAST)).knobs.max_batch_wait_ms
             for slo in (150.0, 60.0, 30.0, 15.0)]
    assert waits == sorted(waits, reverse=True)


def test_an_slo_under_the_floor_is_refused_naming_it() -> None:
    with pytest.raises(ProfileError, match=r"floor of 7\.0 ms"):
        plan(PROFILE, PlanRequest(5.0, 100.0, **FAST))


def test_a_plan_is_a_valid_plan_file_and_meets_its_slo() -> None:
    p = plan(PROFILE, PlanRequest(60.0, 2000.0, burst=Burst(2.0, 30.0), **FAST))
    assert PlanFile.from_json(p.to_json()) == p
    assert p.knobs.request_timeout_ms == 60.0 and p.knobs.max_batch_size in PROFILE.sizes
    assert p.replicas.cold_start > 0 and p.replicas.max == (
        p.replicas.for_peak + p.replicas.spare + p.replicas.cold_start)
    assert p.peak.p99_ms <= 60.0 and p.peak.success_rate >= 0.999
    assert p.capacity_rps <= 1000 / PROFILE.edge_cpu_ms
    a = p.autoscaler
    assert a.scale_target is not None and a.target_utilization_percentage is not None
    queue = plan(PROFILE, PlanRequest(60.0, 2000.0, mode="queue", **FAST))
    assert queue.autoscaler.lag_per_worker and queue.autoscaler.scale_target is None
    assert p.knobs.queue_claim_timeout_ms is None
    claim = queue.knobs.queue_claim_timeout_ms  # above a healthy worker's hold, below 60 ms
    held = queue.knobs.max_batch_wait_ms + 2 * PROFILE.batch_ms(queue.knobs.max_batch_size, 0.99)
    assert claim is not None and min(held, 59) <= claim < 60
    # the stream's depth counts every worker's prefetch: the limit leaves room above it
    assert queue.knobs.max_queue_size > queue.replicas.max * 2 * queue.knobs.max_batch_size


@pytest.mark.parametrize(("concurrency", "pods"), [(0.5, 1), (12.3, 3), (300.0, 40),
                                                   (1000.0, 150)])
def test_knative_arithmetic_gives_the_planned_pods(concurrency: float, pods: int) -> None:
    target, percent = knative_targets(concurrency, pods)
    assert math.ceil(concurrency / (target * percent / 100)) == pods


def test_a_burst_no_replica_count_absorbs_is_refused() -> None:
    with pytest.raises(ProfileError, match="absorbs"):
        plan(PROFILE, PlanRequest(60.0, 2000.0, burst=Burst(1000.0, 10.0), **FAST))


def test_units() -> None:
    assert parse_ms("200ms") == 200.0 and parse_ms("0.2s") == 200.0
    assert parse_rate("5k") == 5000.0 and parse_rate("250/s") == 250.0
    assert parse_burst("2x:30s") == Burst(2.0, 30.0)
    for bad in ("200", "fast"):
        with pytest.raises(ProfileError):
            parse_ms(bad)
    for bad_burst in ("2:30s", "0.5x:30s", "2x:soon"):
        with pytest.raises(ProfileError):
            parse_burst(bad_burst)


def _on(device: str, **host: float) -> Profile:
    return Profile("m", 1, device, PROFILE.batches, edge_ms=1.0, edge_cpu_ms=1.0, load_s=1.0,
                   host=host)


def test_a_cpu_device_shared_with_the_edge_stretches_batches_by_the_share_it_takes() -> None:
    busy = _on("cpu", torch_threads=2, cpus_usable=2, server_model_cpu_ms=18.0,
               t1_median_ms=10.0)
    # 300 req/s x 1 ms = 0.3 of a core, all on torch's (none idle); the model keeps 0.9 of
    # its two threads busy: batches stand 0.3 / 0.7 of their time longer, 90% of that.
    assert busy.cpu_slowdown(300.0) == pytest.approx(1 + 0.9 * 0.3 / 0.7)
    assert busy.cpu_slowdown(0.0) == 1.0 and math.isinf(busy.cpu_slowdown(950.0))
    spare_core = _on("cpu", torch_threads=1, cpus_usable=2, server_model_cpu_ms=9.0,
                     t1_median_ms=10.0)
    assert spare_core.cpu_slowdown(300.0) == 1.0  # the edge fits on the idle core
    assert spare_core.cpu_slowdown(1300.0) == pytest.approx(1 + 0.9 * 0.3 / 0.7)
    sleeping = _on("cpu", torch_threads=2, server_model_cpu_ms=0.0, t1_median_ms=10.0)
    assert sleeping.cpu_slowdown(500.0) == 1.0  # a model that does not compute is not slowed
    assert _on("cuda", torch_threads=2).cpu_slowdown(500.0) == 1.0  # the batch is on the GPU
    on_cpu = plan(busy, PlanRequest(80.0, 300.0, **FAST)).capacity_rps
    on_gpu = plan(_on("cuda"), PlanRequest(80.0, 300.0, **FAST)).capacity_rps
    assert on_cpu < 0.9 * on_gpu


def test_a_cpu_plan_serves_with_the_threads_its_profile_was_measured_with() -> None:
    assert plan(_on("cpu", torch_threads=3), PlanRequest(80.0, 300.0, **FAST)
                ).knobs.torch_threads == 3
    assert plan(_on("cuda", torch_threads=3), PlanRequest(80.0, 300.0, **FAST)
                ).knobs.torch_threads is None
    old = plan(_on("cpu", torch_threads=3), PlanRequest(80.0, 300.0, **FAST)).to_json()
    del old["knobs"]["torch_threads"]  # a plan file written before the field existed
    assert PlanFile.from_json(old).knobs.torch_threads is None


def test_the_edge_under_load_sets_the_cpu_limit_at_full_batches() -> None:
    import dataclasses

    # Seed 1's numbers: 1.10 ms a request alone, 0.29 ms in batches of 22 on average.
    loaded = dataclasses.replace(PROFILE, edge_cpu_ms=1.10, edge_cpu_loaded_ms=0.29,
                                 edge_loaded_batch=22.0)
    assert loaded.edge_cpu_at(1) == pytest.approx(1.10)
    assert loaded.edge_cpu_at(22) == pytest.approx(0.29)
    assert loaded.edge_cpu_at(100) < loaded.edge_cpu_at(22) < loaded.edge_cpu_at(4) < 1.10
    assert loaded.cpu_limit_rps(1.0, 22) == pytest.approx(1000.0 / 0.29)
    idle = dataclasses.replace(PROFILE, edge_cpu_ms=1.10)
    assert idle.edge_cpu_at(100) == 1.10  # a profile from before: the idle edge
    dearer = dataclasses.replace(PROFILE, edge_cpu_ms=0.2, edge_cpu_loaded_ms=0.5,
                                 edge_loaded_batch=8.0)
    assert dearer.edge_cpu_at(16) == 0.5  # costlier under load: taken as measured
    back = Profile.from_json(loaded.to_json())
    assert (back.edge_cpu_loaded_ms, back.edge_loaded_batch) == (0.29, 22.0)
    old = {k: v for k, v in loaded.to_json().items()
           if k not in ("edge_cpu_loaded_ms", "edge_loaded_batch")}
    assert Profile.from_json(old).edge_cpu_loaded_ms is None
    with pytest.raises(ProfileError, match="edge_cpu_loaded_ms"):
        dataclasses.replace(PROFILE, edge_cpu_loaded_ms=-1.0)
