"""Capture files for report tests, written by the predictor's own record builder and writer.

Each record starts as the ``Exchange`` the tap would see (request body, status,
response body), so the files are exactly what a predictor writes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from captures import ParquetFiles
from predictor.tap._exchange import Exchange
from predictor.tap._record import Identity, build_record

T0 = 1_795_900_000.0  # 2026-11-28T21:06:40Z


def exchange(request_id: str, instances: Sequence[Any], predictions: Sequence[Any] | None, *,
             status: int = 200, latency_ms: float = 10.0, at: float = T0,
             shadow: bool = False, v2: dict[str, Any] | None = None) -> Exchange:
    """A V1 exchange (or V2 when ``v2`` gives the response's ``outputs``)."""
    if v2 is not None:
        body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(instances)],
                            "data": list(instances)}]}
        response: dict[str, Any] = {"model_name": "m", "id": request_id, "outputs": v2["outputs"]}
        path = "/v2/models/m/infer"
    else:
        body = {"instances": list(instances)}
        response = {"predictions": list(predictions or [])}
        path = "/v1/models/m:predict"
    if status != 200:
        response = {"error": f"failed with {status}"}
    return Exchange(request_id=request_id, started_at=at, path=path, query="",
                    headers=(("content-type", "application/json"),),
                    body=json.dumps(body).encode(), status=status,
                    response=json.dumps(response).encode(), latency_s=latency_ms / 1000.0,
                    is_shadow=shadow)


def write(capture: Path, model: str, version: str, role: str, task: str,
          exchanges: Sequence[Exchange]) -> str:
    """One capture file of these exchanges; returns its path relative to ``capture``."""
    identity = Identity(model=model, version=version, role=role, task=task)
    records = [build_record(e, identity, with_input=False) for e in exchanges]
    return ParquetFiles(str(capture), model, version).write(role, records)


def pair(capture: Path, task: str, rows: Sequence[tuple[Sequence[Any], Sequence[Any],
                                                         Sequence[Any]]], *,
         model: str = "m", shadow_version: str = "2", start: float = T0,
         statuses: tuple[int, int] = (200, 200)) -> None:
    """Primary (version 1) and shadow records for each (instances, primary, shadow) row."""
    primary, shadow = [], []
    for i, (instances, p_out, s_out) in enumerate(rows):
        rid = f"r-{i:05d}"
        at = start + i
        primary.append(exchange(rid, instances, p_out, at=at, status=statuses[0]))
        shadow.append(exchange(rid, instances, s_out, at=at + 0.01, status=statuses[1],
                               shadow=True))
    write(capture, model, "1", "stable", task, primary)
    write(capture, model, shadow_version, "shadow", task, shadow)


def now() -> float:
    return time.time()
