"""The batching KServe predictor: ``python -m predictor --model_name NAME --model_dir DIR``."""

from predictor._config import ServerConfig, build_parser, parse_config
from predictor._errors import BadInput, DeadlineExpired, ItemFailed, Overloaded, PredictorError
from predictor.handlers import HANDLERS, Handler, TensorSpec, create_handler

__all__ = [
    "HANDLERS",
    "BadInput",
    "DeadlineExpired",
    "Handler",
    "ItemFailed",
    "Overloaded",
    "PredictorError",
    "ServerConfig",
    "TensorSpec",
    "build_parser",
    "create_handler",
    "parse_config",
]
