"""The help text of each predictor flag (``python -m predictor --help``), by field name.

Data only; ``_config`` builds the parser from ``ServerConfig``'s fields and these lines.
"""

from __future__ import annotations

FLAG_HELP: dict[str, str] = {
    "model_name": "Name served on /v1/models/NAME and /v2/models/NAME.",
    "model_dir": "Directory with the artifact and its MANIFEST.json (KServe mounts /mnt/models).",
    "http_host": "Address the HTTP server binds (0.0.0.0 in a pod, 127.0.0.1 locally).",
    "http_port": "HTTP port (V1, V2, health, /metrics).",
    "grpc_port": "gRPC port (V2 Open Inference Protocol).",
    "enable_grpc": "Serve gRPC as well as HTTP.",
    "role": "Role label on every metric: stable, canary or shadow.",
    "device": "auto (cuda when available), cpu or cuda.",
    "dtype": "auto (fp32 on CPU, bf16/fp16 on GPU), float32, float16 or bfloat16.",
    "max_batch_size": "Largest batch sent to the device (task llm: the most sequences the "
                      "engine runs at once).",
    "max_batch_wait_ms": "Longest time the oldest queued item waits for a batch to fill.",
    "max_queue_size": "Items that may wait; beyond it requests are refused with 429.",
    "request_timeout_ms": "Deadline per request; x-request-timeout-ms may lower it.",
    "max_batch_tokens": "If > 0, split batches by padded token count (length-sorted) at this cap.",
    "max_instances": "Most instances (V1) or rows (V2) in one request.",
    "max_input_chars": "Longest text accepted in one instance.",
    "max_body_bytes": "Largest request body; larger bodies get 413.",
    "drain_timeout_s": "On SIGTERM, how long queued and running items may take to finish.",
    "inject_latency_ms": "Testing: extra latency added to every batch (makes a slow version).",
    "inject_error_rate": "Testing: fraction of requests answered 500 (makes a failing version).",
    "verify_checksums": "Verify MANIFEST.json checksums before loading (refuse on mismatch).",
    "gil_switch_interval_ms": "How long a Python thread may hold the GIL while another "
    "waits (Python's default is 5): the device thread hands each finished batch back to "
    "the event loop through it.",
    "torch_threads": "Threads torch uses inside one forward pass; 0 keeps torch's choice (one "
    "per core). Fewer leave cores to the HTTP loop when it shares a small machine.",
    "request_log_sample": "Share of requests (0-1, chosen by request ID) that get an INFO log "
    "line; 0 (the default) logs only errors and slow requests, 1 logs every request.",
    "slow_request_ms": "A request slower than this gets a WARNING log line; 0: none do.",
    "request_log_max_per_s": "Most error and slow-request log lines a second; beyond it they "
    "are counted and left out (Prometheus still counts every request).",
    "fast_path": "Answer this model's V1 predict and V2 infer requests with KServe's "
    "endpoint code run straight from ASGI, skipping FastAPI's routing and validation layers "
    "(same answers, less CPU).",
    "shadow_url": "Mirror sampled requests, after answering them, to this base URL "
    "(http://host:port; the request's path is kept). Empty: no mirroring.",
    "shadow_sample_rate": "Fraction of requests mirrored to --shadow_url (0-1, by request ID).",
    "shadow_timeout_ms": "How long one mirrored request may take before it is dropped.",
    "shadow_max_pending": "Mirrored requests that may wait to be sent; beyond it they are dropped.",
    "capture_uri": "Record every predict request (ID, input hash, output, latency, status; "
    "with task llm every generation) as Parquet under this directory or s3://bucket/prefix. "
    "Empty: no capture.",
    "capture_inputs": "Also record each request's input (not only its sha256).",
    "feedback_token_file": "File holding the bearer token of POST /v2/models/NAME/feedback, "
    "which takes ground-truth labels for earlier predictions by request ID and stores them "
    "beside the captures (needs --capture_uri; docs/FEEDBACK.md). Empty: the route is "
    "refused.",
    "capture_flush_s": "Seconds between capture files (records become readable then).",
    "capture_max_file_mb": "Largest capture file, in MiB of uncompressed records.",
    "queue_url": "Queue-decoupled serving (docs/QUEUE.md): redis://[user:password@]host:port/db "
    "(or rediss://); Sentinel: redis+sentinel://[user:password@]host:port[,host:port...]/"
    "SERVICE[/db]; Cluster: redis+cluster://[user:password@]host:port[,host:port...]. The "
    "password may come from MODELCTL_QUEUE_PASSWORD instead. Not given: MODELCTL_QUEUE_URL "
    "(never printed here); neither: in-process batching.",
    "queue_role": "With --queue_url: frontend (validate and enqueue, load no weights) or worker "
    "(load the model, run batches from the queue; health and /metrics only).",
    "queue_max_deliveries": "Deliveries of one request to workers before it is dead-lettered "
    "(answered 500).",
    "queue_claim_timeout_ms": "A pending request idle this long (its worker presumably dead) is "
    "claimed by another worker; must be below --request_timeout_ms.",
    "queue_result_ttl_s": "Seconds a result stays readable in Redis (the fallback when a "
    "notification is missed).",
    "multi_model": "Serve every subdirectory of --model_dir holding a MANIFEST.json as a "
    "model of that name, loaded when first asked for and evicted least recently used "
    "(docs/MULTI_MODEL.md).",
    "memory_budget_mb": "With --multi_model: host memory the resident models' weights may "
    "take, in MiB (required).",
    "device_memory_budget_mb": "With --multi_model: device (GPU) memory the resident models "
    "may take, in MiB; 0: no device budget (CPU serving).",
    "min_residency_s": "With --multi_model: a loaded model is not evicted for this long, so "
    "two hot models that do not fit together take turns at most once per period.",
    "max_concurrent_loads": "With --multi_model: model loads that may run at once (never on "
    "the device thread).",
    "repository_token_file": "File holding the bearer token the repository routes' load and "
    "unload require (/v2/repository/models/NAME/load|unload, HTTP and gRPC). Empty: they are "
    "refused.",
    "model_catalog": "With --multi_model: the models are the registry versions this JSON file "
    "lists (modelctl serve --model writes it), each fetched and verified when first loaded, "
    "instead of the subdirectories of --model_dir.",
    "max_new_tokens_limit": "LLM (task llm): the most tokens one request may generate; a larger "
    "max_tokens is capped to it.",
    "default_max_tokens": "LLM (task llm): tokens generated when a request names no max_tokens "
    "(POST /sample always).",
    "adapter_catalog": "LLM (task llm): the LoRA adapters served on the model, a JSON file "
    "of registry versions (modelctl serve --adapter writes it; docs/TENANTS.md), each "
    "fetched, verified and merged when a tenant whose adapter it is first calls.",
    "max_resident_adapters": "LLM with --adapter_catalog: adapter engines running at once; "
    "the least recently used idle one is stopped when another is needed.",
    "tenants_file": "API keys and tenants (docs/TENANTS.md): a YAML file, usually a mounted "
    "Secret, of each tenant's key hashes, models and limits; re-read when it changes. Every "
    "predict or generation request then needs a tenant's key (401 without, 403 for a model "
    "it may not use, 429 over its limits). Empty: anyone may call.",
    "tenant_metrics_top": "With --tenants_file: tenants named in the per-tenant metrics (the "
    "busiest of the last minute); the rest are counted as tenant=\"other\".",
    "kv_cache_memory_mb": "LLM (task llm): the paged KV cache's size. 0: the engine's own "
    "default, 90 percent of the memory free once the weights are loaded (transformers' "
    "max_memory_percent), which suits one server a machine or GPU; set it where several "
    "share one (queue-mode workers, a test machine).",
}
