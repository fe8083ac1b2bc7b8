"""TLS as KServe defines it: with KSERVE_TLS_CERT_FILE and KSERVE_TLS_KEY_FILE both set,
HTTP is served over TLS, on 8443 when --http_port is KServe's default 8080.

Before, the variables moved the listener to 8443 (KServe's ModelServer.__init__) while
our REST server was built without them: plain HTTP on 8443, probes on a closed 8080.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support import ManagedProcess, free_port, wait_for
from tests.support.predictor import push_fixed_latency


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.mark.parametrize(("http_port", "listens"), [(8080, 8443), (9000, 9000)])
def test_the_tls_variables_move_the_default_port_to_8443(http_port: int, listens: int) -> None:
    # Constructing the server binds nothing; KServe reads the variables on import.
    code = ("from predictor._config import ServerConfig; "
            "from predictor._server import _server_class; "
            f"s = _server_class()(ServerConfig(model_name='m', http_port={http_port})); "
            "print(s.http_port, s.ssl_certfile, s.ssl_keyfile)")
    env = {"KSERVE_TLS_CERT_FILE": "/certs/tls.crt", "KSERVE_TLS_KEY_FILE": "/certs/tls.key"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**_base_env(), **env})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(listens), "/certs/tls.crt", "/certs/tls.key"]


def test_https_is_served_where_the_port_says(registry_dir: Path, tmp_path: Path) -> None:
    from registry import Registry

    cert, key = self_signed(tmp_path)
    version = push_fixed_latency(registry_dir, "tls", latency_ms=1, max_batch_size=4)
    Registry.open(str(registry_dir)).fetch("tls", version, tmp_path / "m")
    port = free_port()
    proc = ManagedProcess(
        f"tls-{port}",
        [sys.executable, "-m", "predictor", "--model_name", "tls", "--model_dir",
         str(tmp_path / "m"), "--http_host", "127.0.0.1", "--http_port", str(port),
         "--enable_grpc", "false"],
        log_dir=tmp_path,
        env={"KSERVE_TLS_CERT_FILE": str(cert), "KSERVE_TLS_KEY_FILE": str(key)})
    url = f"https://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(proc.output_tail())
            r = httpx.get(f"{url}/v2/health/ready", verify=str(cert), timeout=2)
            return r.status_code == 200

        wait_for(ready, timeout_s=90, what="HTTPS readiness")
        r = httpx.post(f"{url}/v1/models/tls:predict", json={"instances": ["secret"]},
                       verify=str(cert), timeout=30)
        assert r.status_code == 200 and r.json() == {"predictions": ["secret"]}, r.text
        with pytest.raises(httpx.TransportError):  # no plain HTTP on the TLS port
            httpx.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=5)
        assert f"serving tls on https://127.0.0.1:{port}" in proc.output_tail()
    finally:
        proc.stop()


@pytest.mark.parametrize("only", ["KSERVE_TLS_CERT_FILE", "KSERVE_TLS_KEY_FILE"])
def test_half_a_tls_configuration_is_refused_before_loading(tmp_path: Path, only: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "predictor", "--model_name", "m", "--model_dir",
         str(tmp_path / "nothing-here"), "--enable_grpc", "false"],
        capture_output=True, text=True, timeout=120,
        env={**_base_env(), only: "/certs/one-of-two.pem"})
    assert done.returncode == 2
    assert "set both KSERVE_TLS_CERT_FILE and KSERVE_TLS_KEY_FILE" in done.stderr, done.stderr
    assert "MANIFEST.json" not in done.stderr  # refused before the artifact is even read


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("KSERVE_TLS_")}
