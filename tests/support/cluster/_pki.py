"""The test control plane's PKI: one CA, and the certificates signed by it.

What each component needs, as kubeadm lays it out (kubernetes ``cmd/kubeadm/app/phases/
certs``): a serving certificate for kube-apiserver with the Service's DNS names and the
loopback address, client certificates whose CN is the user and whose O is the group
(``system:masters`` for the admin; the apiserver's x509 authenticator,
``staging/src/k8s.io/apiserver/pkg/authentication/request/x509/x509.go``
``CommonNameUserConversion``), and a key pair that signs and verifies service-account
tokens. Everything here is written once per test session into its own folder.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _name(common: str, org: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if org:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(parts)


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


class PKI:
    """A CA in ``folder`` and the certificates it signs, each as ``NAME.crt``/``NAME.key``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._ca_name = _name("modelctl-test-ca")
        self._ca_cert = (
            x509.CertificateBuilder().subject_name(self._ca_name).issuer_name(self._ca_name)
            .public_key(self._ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY).not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(self._ca_key, hashes.SHA256()))
        self.ca = KeyPair(folder / "ca.crt", folder / "ca.key")
        self.ca.cert.write_bytes(self._ca_cert.public_bytes(serialization.Encoding.PEM))
        _write_key(self._ca_key, self.ca.key)

    @property
    def ca_pem(self) -> bytes:
        return self.ca.cert.read_bytes()

    def issue(self, name: str, *, common: str, org: str | None = None,
              server_names: tuple[str, ...] = (), client: bool = False) -> KeyPair:
        """A certificate ``name`` for ``common`` (and group ``org``): a server's when
        ``server_names`` are given (DNS names or IP addresses), a client's when ``client``."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = []
        if server_names:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder().subject_name(_name(common, org))
            .issuer_name(self._ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY).not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
        if server_names:
            alt: list[x509.GeneralName] = []
            for entry in server_names:
                try:
                    alt.append(x509.IPAddress(ipaddress.ip_address(entry)))
                except ValueError:
                    alt.append(x509.DNSName(entry))
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        pair = KeyPair(self.folder / f"{name}.crt", self.folder / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair

    def signing_key(self, name: str) -> KeyPair:
        """A bare key pair (``.key`` private, ``.crt`` holding the public key in PEM), for
        service-account tokens (``--service-account-signing-key-file`` and ``-key-file``)."""
        key = ec.generate_private_key(ec.SECP256R1())
        pair = KeyPair(self.folder / f"{name}.pub", self.folder / f"{name}.key")
        _write_key(key, pair.key)
        pair.cert.write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        return pair
