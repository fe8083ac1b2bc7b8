"""Building a served model: its handler for the artifact's task, loaded and warm."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from predictor._artifact import Artifact
from predictor._config import ServerConfig
from predictor._model import BatchingModel
from predictor.batching._device import DeviceLane
from predictor.handlers._factory import create_handler


def build_model(config: ServerConfig, artifact: Artifact, *, frontend: bool = False,
                device: DeviceLane | None = None,
                prepare_pool: ThreadPoolExecutor | None = None) -> BatchingModel:
    """The model, loaded and warm; a queue frontend's handler is built but never loaded.
    ``device`` and ``prepare_pool``: a multi-model predictor's, shared by its models."""
    if config.torch_threads:
        import torch

        torch.set_num_threads(config.torch_threads)
    handler = create_handler(
        artifact.task,
        artifact.load_dir,
        device=config.device,
        dtype=config.dtype,
        max_input_chars=config.max_input_chars,
        max_batch_tokens=config.max_batch_tokens,
    )
    model: BatchingModel
    if frontend:
        from predictor.queue._frontend import QueueFrontend

        model = QueueFrontend(config, handler, artifact.version)
    else:
        model = BatchingModel(config, handler, artifact.version, device=device,
                              prepare_pool=prepare_pool)
    model.load()
    return model
