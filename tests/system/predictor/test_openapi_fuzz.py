"""schemathesis over the predictor's own OpenAPI document (``/openapi.json``, KServe's
routes as FastAPI describes them): every generated request, the model name fixed to the
one served, gets an answer that is not a server error, and the server stays ready.

The one 5xx allowed is 501 for ``:explain``: the predictor has no explainer, a feature
that does not exist here, where 501 is the truthful answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings

from tests.support.predictor import RunningPredictor, push_fixed_latency

MODEL = "fuzzed"


@pytest.fixture(scope="module")
def fuzzed(start_predictor: Callable[..., RunningPredictor],
           registry_dir: Path) -> RunningPredictor:
    push_fixed_latency(registry_dir, MODEL, latency_ms=1, max_batch_size=8)
    return start_predictor(MODEL, "latest")


def test_no_generated_request_is_a_server_error(fuzzed: RunningPredictor) -> None:
    """Each operation's cases drawn by schemathesis's strategies and sent one by one
    (its pytest plugin does not run under pytest 9); the answers are gathered rather
    than raised, so one bad answer does not stop the rest (nor start a shrink)."""
    schema = schemathesis.openapi.from_url(f"{fuzzed.url}/openapi.json")
    sent: Counter[str] = Counter()
    wrong: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()

        # A function per operation, each drawing from its own strategy.
        @settings(max_examples=40, deadline=None, database=None,
                  phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def send(case: Any) -> None:
            if "model_name" in (case.path_parameters or {}):
                case.path_parameters["model_name"] = MODEL
            response = case.call(timeout=30)
            sent[case.operation.label] += 1
            explain = case.path.endswith(":explain")
            if response.status_code >= 500 and not (explain and response.status_code == 501):
                wrong.append(f"{case.method} {case.formatted_path} {case.query}: "
                             f"{response.status_code} {response.text[:200]}")

        send()
    assert len(sent) >= 10 and sum(sent.values()) >= 200, sent  # the document was read
    assert not wrong, "\n".join(wrong[:20])
    assert httpx.get(f"{fuzzed.url}/v2/health/ready", timeout=10).status_code == 200
    assert fuzzed.proc.poll() is None
