"""The runtime's probes: a startup probe sized for the largest model, and every probe on
the port and scheme the predictor really listens on, in the runtime and in every overlay.

The predictor opens its port only once the model is verified, loaded and warm; until
then a liveness probe without a startup probe in front of it kills a slow load. And
KServe's ModelServer moves HTTP to 8443 with TLS when KSERVE_TLS_CERT_FILE and
KSERVE_TLS_KEY_FILE are both set and --http_port is 8080: a ServingRuntime cannot make
its probes conditional, so ``probe_problems`` is the rule, checked here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from deploycheck._canary import canary_predictor
from tests.support.manifests import load_all, overlay_names, runtime_doc

PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
TLS_VARS = ("KSERVE_TLS_CERT_FILE", "KSERVE_TLS_KEY_FILE")
TLS_FLAGS = ("--ssl_certfile", "--ssl_keyfile")  # KServe's flags for the same two files
KSERVE_HTTP_PORT, KSERVE_HTTPS_PORT = 8080, 8443  # kserve.constants DEFAULT_HTTP(S)_PORT

# The sizing in manifests/10-serving-runtime.yaml, as numbers.
LARGEST_MODEL_MIB = 16 * 1024
SLOWEST_READ_MIB_S = 125
IMPORTS_S, TO_DEVICE_AND_WARMUP_S = 10, 20
READS = 2  # verification, then loading (no page cache assumed)


def flag_values(args: Sequence[str], flag: str) -> list[str]:
    """Every value given to ``flag`` (``--f=v`` or ``--f v``), in order."""
    values = []
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            values.append(arg.split("=", 1)[1])
        elif arg == flag and i + 1 < len(args):
            values.append(args[i + 1])
    return values


def listening(container: Mapping[str, Any]) -> tuple[int, str, list[str]]:
    """(port, scheme) the predictor serves HTTP on, and problems with the TLS settings."""
    args = [str(a) for a in container.get("args", [])]
    env = {e["name"] for e in container.get("env", [])}
    tls = [var in env or bool(flag_values(args, flag)) for var, flag in zip(TLS_VARS, TLS_FLAGS,
                                                                          strict=True)]
    problems = []
    if any(tls) and not all(tls):
        problems.append("only one of the TLS certificate and key is set (the predictor "
                        "refuses to start): set both or neither")
    ports = flag_values(args, "--http_port")  # argparse keeps the last one
    http_port = int(ports[-1]) if ports else KSERVE_HTTP_PORT
    if all(tls):
        port = KSERVE_HTTPS_PORT if http_port == KSERVE_HTTP_PORT else http_port
        return port, "HTTPS", problems
    return http_port, "HTTP", problems


def probe_problems(container: Mapping[str, Any]) -> list[str]:
    """Why the container's declared port or probes miss where the predictor listens."""
    port, scheme, problems = listening(container)
    declared = container.get("ports", [])
    if not declared or declared[0].get("containerPort") != port:
        problems.append(f"the first declared port must be {port}, where the predictor "
                        f"listens ({scheme}); it is "
                        f"{declared[0].get('containerPort') if declared else 'missing'}")
    by_name = {p["name"]: p["containerPort"] for p in declared if "name" in p}
    for kind in PROBES:
        probe = container.get(kind)
        if probe is None:
            problems.append(f"{kind} is missing")
            continue
        get = probe.get("httpGet") or {}
        target = get.get("port")
        resolved = by_name.get(target) if isinstance(target, str) else target
        if resolved != port:
            problems.append(f"{kind} probes port {target!r}; the predictor listens on {port}")
        if get.get("scheme", "HTTP") != scheme:
            problems.append(f"{kind} uses scheme {get.get('scheme', 'HTTP')}; the predictor "
                            f"serves {scheme}")
    return problems


def merged(runtime: Mapping[str, Any], model: Mapping[str, Any]) -> dict[str, Any]:
    """The kserve-container KServe builds (MergeRuntimeContainers): a strategic merge of
    the predictor's model spec over the runtime's container, args concatenated."""
    out = copy.deepcopy(dict(runtime))
    out["args"] = [*runtime.get("args", []), *model.get("args", [])]
    env = {e["name"]: e for e in runtime.get("env", [])}
    env.update({e["name"]: e for e in model.get("env", [])})
    out["env"] = list(env.values())
    ports = {p["containerPort"]: p for p in runtime.get("ports", [])}
    for p in model.get("ports", []):
        ports[p["containerPort"]] = {**ports.get(p["containerPort"], {}), **p}
    out["ports"] = list(ports.values())
    for kind in PROBES:
        if kind in model:
            out[kind] = deep_merged(runtime.get(kind) or {}, model[kind])
    return out


def deep_merged(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A strategic merge of maps without list keys (a Probe): fields merge, recursively."""
    out = dict(base)
    for key, value in patch.items():
        both_maps = isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
        out[key] = deep_merged(out[key], value) if both_maps else value
    return out


def runtime_container() -> dict[str, Any]:
    container: dict[str, Any] = runtime_doc()["spec"]["containers"][0]
    return container


def with_tls(container: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(container))
    out["env"] = [*out.get("env", []),
                  {"name": "KSERVE_TLS_CERT_FILE", "value": "/etc/tls/tls.crt"},
                  {"name": "KSERVE_TLS_KEY_FILE", "value": "/etc/tls/tls.key"}]
    return out


def test_the_runtime_probes_where_the_predictor_listens() -> None:
    assert probe_problems(runtime_container()) == []


def test_the_startup_probe_covers_the_largest_model_twice_over() -> None:
    container = runtime_container()
    startup = container["startupProbe"]
    budget_s = startup["periodSeconds"] * startup["failureThreshold"]
    estimate_s = (IMPORTS_S + READS * LARGEST_MODEL_MIB / SLOWEST_READ_MIB_S
                  + TO_DEVICE_AND_WARMUP_S)
    assert budget_s >= 2 * estimate_s, (budget_s, estimate_s)
    assert startup["timeoutSeconds"] < startup["periodSeconds"]
    assert startup.get("initialDelaySeconds", 0) == 0
    # Liveness and readiness only run once the startup probe has passed: no delay of
    # their own that a slow load would outgrow, nor a liveness path the startup probe skips.
    for kind in ("readinessProbe", "livenessProbe"):
        assert container[kind].get("initialDelaySeconds", 0) == 0, kind
    assert startup["httpGet"]["path"] == container["livenessProbe"]["httpGet"]["path"]


def test_knative_mode_allows_the_runtime_one_port() -> None:
    # knative/serving validateContainersPorts: "more than one container port is set".
    [port] = runtime_container()["ports"]
    assert port["name"] in ("http1", "h2c")


def test_tls_variables_without_moving_port_and_probes_are_refused() -> None:
    problems = probe_problems(with_tls(runtime_container()))
    assert "the first declared port must be 8443, where the predictor listens (HTTPS)" in \
        problems[0]
    for kind in PROBES:
        assert f"{kind} probes port 8080; the predictor listens on 8443" in problems
        assert f"{kind} uses scheme HTTP; the predictor serves HTTPS" in problems


@pytest.mark.parametrize("by_name", [False, True])
def test_tls_with_port_and_probes_moved_is_accepted(by_name: bool) -> None:
    container = with_tls(runtime_container())
    container["ports"] = [{"name": "http1", "containerPort": 8443, "protocol": "TCP"}]
    for kind in PROBES:
        container[kind]["httpGet"].update(port="http1" if by_name else 8443, scheme="HTTPS")
    assert probe_problems(container) == []


def test_an_explicit_port_other_than_8080_keeps_tls_where_it_is() -> None:
    container = with_tls(runtime_container())
    container["args"] = [*container["args"], "--http_port=9443"]
    container["ports"] = [{"name": "http1", "containerPort": 9443}]
    for kind in PROBES:
        container[kind]["httpGet"].update(port=9443, scheme="HTTPS")
    assert probe_problems(container) == []
    container["args"].append("--ssl_keyfile=/elsewhere.key")  # a flag counts like the variable
    assert probe_problems(container) == []


def test_an_overlay_patching_only_the_scheme_keeps_the_runtime_port() -> None:
    model = {"env": with_tls({})["env"],
             "ports": [{"name": "http1", "containerPort": 8443}],
             **{kind: {"httpGet": {"scheme": "HTTPS"}} for kind in PROBES}}
    container = merged(runtime_container(), model)
    assert container["startupProbe"]["httpGet"] == {
        "path": "/v2/health/live", "port": 8080, "scheme": "HTTPS"}
    # The merge keeps 8080 too (ports merge by containerPort), first: still refused.
    assert "the first declared port must be 8443" in probe_problems(container)[0]
    assert "startupProbe probes port 8080; the predictor listens on 8443" in \
        probe_problems(container)


def test_half_a_tls_configuration_is_refused() -> None:
    container = copy.deepcopy(runtime_container())
    container["env"] = [{"name": "KSERVE_TLS_CERT_FILE", "value": "/etc/tls/tls.crt"}]
    assert probe_problems(container)[0].startswith("only one of the TLS certificate and key")


@pytest.mark.parametrize("overlay", overlay_names())
def test_every_overlay_probes_where_its_predictor_listens(
    overlay: str, rendered: dict[str, str]
) -> None:
    [isvc] = [d for d in load_all(rendered[overlay]) if d["kind"] == "InferenceService"]
    stable = isvc["spec"]["predictor"]
    mode = isvc["metadata"].get("annotations", {}).get("serving.kserve.io/deploymentMode")
    for predictor in [stable] + [canary_predictor(stable, c)
                                 for c in isvc["spec"].get("canary", [])]:
        container = merged(runtime_container(), predictor["model"])
        assert probe_problems(container) == [], overlay
        extra = container["ports"][1:]
        if mode == "Knative":
            assert extra == [], f"{overlay}: Knative allows one port"
        grpc_port = int((flag_values(container["args"], "--grpc_port") or ["8081"])[-1])
        for port in extra:  # Standard mode: gRPC, named so KServe marks it h2c
            assert "grpc" in port["name"] or "h2c" in port["name"], (overlay, port)
            assert port["containerPort"] == grpc_port, (overlay, port)
