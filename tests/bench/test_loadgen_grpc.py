"""The open-loop schedule over gRPC against a real predictor (V2 ``ModelInfer``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bench.loadgen._grpc import bytes_request, run_open_loop_grpc
from tests.support.predictor import RunningPredictor, push_fixed_latency


def test_calls_go_out_on_schedule_and_statuses_map_to_http_codes(
    start_predictor: Callable[..., RunningPredictor], registry_dir: Path
) -> None:
    push_fixed_latency(registry_dir, "grpc-load", latency_ms=20, max_batch_size=8)
    server = start_predictor("grpc-load", "latest", grpc=True)
    target = f"127.0.0.1:{server.grpc_port}"
    result = run_open_loop_grpc(target, bytes_request("grpc-load", ["a"]), rate=100,
                                duration_s=1.0, warmup_s=0.5)
    assert result.sent == 100 and result.status_counts == {"200": 100}
    assert result.is_on_schedule()
    # Each call waited for a 20 ms batch: its latency, counted from when it was due.
    assert result.latency_ok.p50_s is not None and result.latency_ok.p50_s >= 0.02
    assert result.url.endswith("/inference.GRPCInferenceService/ModelInfer")
    unknown = run_open_loop_grpc(target, bytes_request("no-such-model", ["a"]), rate=20,
                                 duration_s=0.5)
    assert set(unknown.status_counts) == {"404"}, unknown.status_counts
