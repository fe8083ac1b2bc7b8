"""Peer 5: NVIDIA Triton Inference Server through PyTriton, as PyTriton's own examples set
it up (``examples/linear_random_pytorch``, ``examples/huggingface_bert_jax``).

``Triton.bind`` puts one model, ``bench``, into the ``tritonserver`` that the
``nvidia-pytriton`` wheel ships; its ``ModelConfig`` turns Triton's dynamic batcher on
with ``max_batch_size`` and ``DynamicBatcher(max_queue_delay_microseconds=...)``. Triton
(C++) parses HTTP and queues each request; its dynamic batcher hands the batch to
PyTriton's proxy backend, which sends it over ZeroMQ to the ``@batch`` inference
callable below, running in this Python process: one model instance, one batch at a
time. A request is KServe V2 (Triton's own protocol): one ``INPUT`` of datatype
``BYTES`` and shape ``[1, 1]``. Batch counts come from Triton's own counters on its
metrics port: ``nv_inference_count`` (items) and ``nv_inference_exec_count``
(executions).

    bench/.venv-peers-np1/bin/python -m bench.peers.pytriton_service \\
        --workload fixed-latency --http_port 8000 --grpc_port 8001 --metrics_port 8002 \\
        --max_batch_size 100 --max_queue_delay_us 50000

The wheel's Python backend stub links ``libpython3.11.so.1.0`` by name; where the
dynamic linker would find another build of it first (a system Python beside the one
this runs on), the stub would pair that library with this interpreter's standard
library and fail. ``main`` puts this interpreter's own library folder first.
"""

from __future__ import annotations

import argparse
import os
import sysconfig
from typing import Any

from bench.peers._workloads import WORKLOADS, build_model

MODEL_NAME = "bench"


def _own_libpython_first() -> None:
    """Put this interpreter's ``LIBDIR`` first on ``LD_LIBRARY_PATH`` (see the docstring);
    ``tritonserver`` and the stubs it starts inherit the environment."""
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        return
    libdir = str(sysconfig.get_config_var("LIBDIR"))
    current = os.environ.get("LD_LIBRARY_PATH", "")
    os.environ["LD_LIBRARY_PATH"] = libdir + (f":{current}" if current else "")


def make_infer(model: Any, workload: str) -> Any:
    """The ``@batch`` callable: a ``[n, 1]`` BYTES array in, one output per item out."""
    import numpy as np
    from pytriton.decorators import batch

    @batch  # type: ignore[untyped-decorator]  # pytriton ships no type stubs
    def infer(INPUT: Any) -> dict[str, Any]:  # the name is the tensor's, as Triton sends it
        items = [row[0].decode() for row in INPUT]
        results = model.run(items)
        if workload == "fixed-latency":
            return {"OUTPUT": np.array([[str(r).encode()] for r in results], dtype=object)}
        return {"OUTPUT": np.asarray(results, dtype=np.float32)}

    return infer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--model_dir", default="")
    parser.add_argument("--latency_ms", type=float, default=100.0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--http_port", type=int, required=True)
    parser.add_argument("--grpc_port", type=int, required=True)
    parser.add_argument("--metrics_port", type=int, required=True)
    parser.add_argument("--max_batch_size", type=int, default=100)
    parser.add_argument("--max_queue_delay_us", type=int, default=50_000)
    args = parser.parse_args(argv)
    _own_libpython_first()

    import numpy as np
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    model = build_model(args.workload, model_dir=args.model_dir, latency_ms=args.latency_ms,
                        max_batch_size=args.max_batch_size, device=args.device)
    output = (Tensor(name="OUTPUT", dtype=bytes, shape=(1,)) if args.workload == "fixed-latency"
              else Tensor(name="OUTPUT", dtype=np.float32, shape=(-1,)))
    config = TritonConfig(http_address="127.0.0.1", http_port=args.http_port,
                          grpc_address="127.0.0.1", grpc_port=args.grpc_port,
                          metrics_address="127.0.0.1", metrics_port=args.metrics_port,
                          allow_gpu_metrics=False, log_verbose=0)
    with Triton(config=config) as triton:
        triton.bind(
            model_name=MODEL_NAME, infer_func=make_infer(model, args.workload),
            inputs=[Tensor(name="INPUT", dtype=bytes, shape=(1,))], outputs=[output],
            config=ModelConfig(max_batch_size=args.max_batch_size, batcher=DynamicBatcher(
                max_queue_delay_microseconds=args.max_queue_delay_us)),
            strict=True)
        triton.serve()


if __name__ == "__main__":
    main()
