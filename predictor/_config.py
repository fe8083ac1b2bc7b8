"""The predictor's knobs: one frozen dataclass, filled from flags and MODELCTL_* env."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from predictor._flag_help import FLAG_HELP
from predictor._queue_url import QueueUrlError, parse_queue_url

ROLES = ("stable", "canary", "shadow")
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "float16", "bfloat16")
QUEUE_ROLES = ("frontend", "worker")
MULTI_MODEL_NAME = "multi-model"  # the server's own name with --multi_model (logs only)


@dataclass(frozen=True)
class ServerConfig:
    """Everything the predictor process is configured with (units in names)."""

    model_name: str
    model_dir: str = "/mnt/models"
    http_host: str = "0.0.0.0"
    http_port: int = 8080
    grpc_port: int = 8081
    enable_grpc: bool = True
    role: str = "stable"
    device: str = "auto"
    dtype: str = "auto"
    max_batch_size: int = 32
    max_batch_wait_ms: float = 10.0
    max_queue_size: int = 1024
    request_timeout_ms: float = 30000.0
    max_batch_tokens: int = 0
    max_instances: int = 256
    max_input_chars: int = 20000
    max_body_bytes: int = 8 * 1024 * 1024
    drain_timeout_s: float = 25.0
    inject_latency_ms: float = 0.0
    inject_error_rate: float = 0.0
    verify_checksums: bool = True
    fast_path: bool = True
    gil_switch_interval_ms: float = 1.0
    torch_threads: int = 0
    request_log_sample: float = 0.0
    slow_request_ms: float = 1000.0
    request_log_max_per_s: float = 20.0
    shadow_url: str = ""
    shadow_sample_rate: float = 1.0
    shadow_timeout_ms: float = 10000.0
    shadow_max_pending: int = 256
    capture_uri: str = ""
    capture_inputs: bool = False
    capture_flush_s: float = 30.0
    capture_max_file_mb: float = 64.0
    queue_url: str = ""
    queue_role: str = ""
    queue_max_deliveries: int = 3
    queue_claim_timeout_ms: int = 5000
    queue_result_ttl_s: int = 60
    multi_model: bool = False
    memory_budget_mb: float = 0.0
    device_memory_budget_mb: float = 0.0
    min_residency_s: float = 30.0
    max_concurrent_loads: int = 1
    repository_token_file: str = ""
    model_catalog: str = ""
    max_new_tokens_limit: int = 1024
    default_max_tokens: int = 256
    kv_cache_memory_mb: float = 0.0
    adapter_catalog: str = ""
    max_resident_adapters: int = 2
    tenants_file: str = ""
    tenant_metrics_top: int = 20
    feedback_token_file: str = ""

    def __post_init__(self) -> None:
        problems = []
        if not self.model_name:
            problems.append("--model_name is required")
        if self.role not in ROLES:
            problems.append(f"--role must be one of {', '.join(ROLES)}, got {self.role!r}")
        if self.device not in DEVICES:
            problems.append(f"--device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.dtype not in DTYPES:
            problems.append(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        for name in ("max_batch_size", "max_queue_size", "max_instances", "max_input_chars",
                     "max_body_bytes", "max_new_tokens_limit", "default_max_tokens"):
            if getattr(self, name) < 1:
                problems.append(f"--{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_batch_wait_ms", "max_batch_tokens", "inject_latency_ms",
                     "kv_cache_memory_mb"):
            if getattr(self, name) < 0:
                problems.append(f"--{name} must be >= 0, got {getattr(self, name)}")
        if self.max_resident_adapters < 1:
            problems.append(f"--max_resident_adapters must be >= 1, got "
                            f"{self.max_resident_adapters}")
        if self.adapter_catalog and (self.queue_url or self.multi_model):
            problems.append("--adapter_catalog cannot be combined with --queue_url or "
                            "--multi_model (yet)")
        if self.adapter_catalog and not Path(self.adapter_catalog).is_file():
            problems.append("--adapter_catalog must name an existing file")
        if self.torch_threads < 0:
            problems.append(f"--torch_threads must be >= 0, got {self.torch_threads}")
        if not 0 < self.gil_switch_interval_ms <= 100:
            problems.append("--gil_switch_interval_ms must be in (0, 100], got "
                            f"{self.gil_switch_interval_ms}")
        if self.request_timeout_ms <= 0:
            problems.append(f"--request_timeout_ms must be > 0, got {self.request_timeout_ms}")
        if self.drain_timeout_s <= 0:
            problems.append(f"--drain_timeout_s must be > 0, got {self.drain_timeout_s}")
        if not 0.0 <= self.request_log_sample <= 1.0:
            problems.append(f"--request_log_sample must be in [0, 1], got "
                            f"{self.request_log_sample}")
        if self.slow_request_ms < 0:
            problems.append(f"--slow_request_ms must be >= 0, got {self.slow_request_ms}")
        if self.request_log_max_per_s <= 0:
            problems.append(f"--request_log_max_per_s must be > 0, got "
                            f"{self.request_log_max_per_s}")
        if not 0.0 <= self.inject_error_rate <= 1.0:
            problems.append(f"--inject_error_rate must be in [0, 1], got {self.inject_error_rate}")
        if self.max_queue_size < self.max_batch_size:
            problems.append("--max_queue_size must be >= --max_batch_size")
        problems.extend(tap_problems(self))
        problems.extend(queue_problems(self))
        problems.extend(tenant_problems(self))
        problems.extend(multi_model_problems(self))
        if problems:
            raise ValueError("; ".join(problems))


def tenant_problems(config: ServerConfig) -> list[str]:
    """What is wrong with the tenant flags (empty: nothing); the file is read at start."""
    problems = []
    if config.tenant_metrics_top < 0:
        problems.append(f"--tenant_metrics_top must be >= 0, got {config.tenant_metrics_top}")
    if not config.tenants_file:
        return problems
    if config.enable_grpc:
        problems.append("--tenants_file guards the HTTP routes only: add --enable_grpc false")
    if config.multi_model:
        problems.append("--tenants_file cannot be combined with --multi_model (yet)")
    if config.queue_role == "worker":
        problems.append("--tenants_file belongs on the frontends: a queue worker answers no "
                        "HTTP request")
    return problems


def queue_problems(config: ServerConfig) -> list[str]:
    """What is wrong with the queue flags (empty: nothing). The URL is never echoed."""
    problems = []
    if config.queue_url:
        try:
            parse_queue_url(config.queue_url, env={})
        except QueueUrlError as exc:
            problems.append(str(exc))
        if config.queue_role not in QUEUE_ROLES:
            problems.append(f"--queue_role must be one of {', '.join(QUEUE_ROLES)} with "
                            "--queue_url")
    elif config.queue_role:
        problems.append("--queue_role needs --queue_url")
    if config.queue_max_deliveries < 1:
        problems.append(f"--queue_max_deliveries must be >= 1, got {config.queue_max_deliveries}")
    if config.queue_claim_timeout_ms <= 0 or (
            config.queue_url and config.queue_claim_timeout_ms >= config.request_timeout_ms):
        problems.append("--queue_claim_timeout_ms must be > 0 and below --request_timeout_ms")
    if config.queue_result_ttl_s < 1:
        problems.append(f"--queue_result_ttl_s must be >= 1, got {config.queue_result_ttl_s}")
    return problems


def multi_model_problems(config: ServerConfig) -> list[str]:
    """What is wrong with the multi-model flags (empty: nothing)."""
    problems = []
    for name in ("memory_budget_mb", "device_memory_budget_mb", "min_residency_s"):
        if getattr(config, name) < 0:
            problems.append(f"--{name} must be >= 0, got {getattr(config, name)}")
    if config.max_concurrent_loads < 1:
        problems.append(f"--max_concurrent_loads must be >= 1, got {config.max_concurrent_loads}")
    if not config.multi_model:
        if config.model_catalog:
            problems.append("--model_catalog needs --multi_model")
        return problems
    if config.memory_budget_mb <= 0:
        problems.append("--multi_model needs --memory_budget_mb > 0")
    if config.model_catalog and not Path(config.model_catalog).is_file():
        problems.append("--model_catalog must name an existing file")
    for flag in ("queue_role", "shadow_url", "capture_uri"):
        if getattr(config, flag):
            problems.append(f"--multi_model cannot be combined with --{flag} (yet)")
    return problems


def tap_problems(config: ServerConfig) -> list[str]:
    """What is wrong with the mirroring and capture flags (empty: nothing).

    URLs are never echoed back: they could hold credentials.
    """
    from urllib.parse import urlsplit

    problems = []
    if config.shadow_url:
        parts = urlsplit(config.shadow_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append("--shadow_url must be http(s)://host[:port][/prefix]")
        elif parts.username or parts.password or parts.query or parts.fragment:
            problems.append("--shadow_url must not hold credentials, a query or a fragment")
        if config.role == "shadow":
            problems.append("--shadow_url cannot be used with --role shadow: a shadow never "
                            "mirrors")
    if not 0.0 <= config.shadow_sample_rate <= 1.0:
        problems.append(f"--shadow_sample_rate must be in [0, 1], got {config.shadow_sample_rate}")
    if config.capture_uri and "://" in config.capture_uri:
        parts = urlsplit(config.capture_uri)
        if parts.scheme.lower() not in ("file", "s3"):
            problems.append("--capture_uri must be a directory, file:///path or "
                            f"s3://bucket/prefix, not a {parts.scheme!r} URL")
        elif parts.username or parts.password:
            problems.append("--capture_uri must not hold credentials: use the AWS_* variables")
    for name in ("shadow_timeout_ms", "capture_flush_s", "capture_max_file_mb"):
        if getattr(config, name) <= 0:
            problems.append(f"--{name} must be > 0, got {getattr(config, name)}")
    if config.shadow_max_pending < 1:
        problems.append(f"--shadow_max_pending must be >= 1, got {config.shadow_max_pending}")
    if config.feedback_token_file and not config.capture_uri:
        problems.append("--feedback_token_file needs --capture_uri: labels are stored beside "
                        "the captures they label")
    if config.feedback_token_file and (config.multi_model or config.queue_role == "worker"):
        problems.append("--feedback_token_file is for a predictor that answers predict "
                        "requests itself (not --multi_model, not a queue worker) (yet)")
    return problems


def _env_name(field_name: str) -> str:
    return "MODELCTL_" + field_name.upper()


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The predictor's argument parser; defaults come from MODELCTL_<FLAG> in ``env``."""
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(
        prog="python -m predictor",
        description=(
            "modelctl's batching KServe predictor. Every flag can also be set with the "
            "environment variable MODELCTL_<FLAG IN UPPER CASE>."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for f in fields(ServerConfig):
        default: Any = f.default
        kind: Any = type(default) if f.name != "model_name" else str
        converter = _parse_bool if kind is bool else kind
        # --help prints every default: the queue URL's (it may hold a password) is read
        # from the environment in parse_config instead.
        if _env_name(f.name) in env and f.name != "queue_url":
            default = env[_env_name(f.name)]
        kwargs: dict[str, object] = {"type": converter, "help": FLAG_HELP[f.name]}
        if f.name == "model_name" and default is f.default:
            kwargs["default"] = None
        else:
            kwargs["default"] = converter(default) if isinstance(default, str) else default
        if kind is bool:  # --multi_model alone means true; --enable_grpc false still works
            kwargs.update(nargs="?", const=True)
        if f.name in ("role", "device", "dtype"):
            kwargs["choices"] = {"role": ROLES, "device": DEVICES, "dtype": DTYPES}[f.name]
        parser.add_argument(f"--{f.name}", **kwargs)  # type: ignore[arg-type]
    return parser


def parse_config(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ServerConfig:
    """Parse flags (unknown ones are left to KServe's own parser) into a ServerConfig."""
    parser = build_parser(env)
    namespace, _unknown = parser.parse_known_args(list(argv))
    values = vars(namespace)
    if not values.get("queue_url"):
        values["queue_url"] = (os.environ if env is None else env).get(
            _env_name("queue_url"), "")
    if not values.get("model_name") and values.get("multi_model"):
        values["model_name"] = MULTI_MODEL_NAME  # each model is named by its directory
    if not values.get("model_name"):
        parser.error("--model_name is required (or MODELCTL_MODEL_NAME)")
    try:
        return ServerConfig(**values)
    except ValueError as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits
