"""Task handlers: one per task, picked by the manifest's ``task``.

``Handler`` (``_base``) is the protocol each task implements (``load``, ``parse``,
``prepare``, ``run``, ``to_v1``, ``to_v2``), with ``TensorSpec`` for its V2 tensors
and ``RequestOptions`` for a request's parameters; ``create_handler`` (``_factory``)
builds the one ``HANDLERS`` names for a task and refuses any other.
"""

from predictor.handlers._base import Handler, RequestOptions, TensorSpec
from predictor.handlers._factory import HANDLERS, create_handler

__all__ = [
    "HANDLERS",
    "Handler",
    "RequestOptions",
    "TensorSpec",
    "create_handler",
]
