"""A throw-away certificate authority and a broker certificate for TLS tests and demos (never the product's runtime).

:func:`make_pki` writes, into a directory it creates with mode 0700:

* ``ca.pem``: the CA's certificate, the clients' trust store (``--ssl-cafile``);
* ``broker.pem``: the broker's private key (unencrypted PKCS#8) followed by its certificate and the CA's: the
  single PEM file Kafka takes as ``ssl.keystore.type=PEM`` / ``ssl.keystore.location``;
* ``client.pem``: a client key and certificate signed by the same CA, in the same layout (mutual TLS);
* ``client.key`` and ``client.crt``: the same client key and chain split the way a Kubernetes TLS Secret
  (``tls.key``, ``tls.crt``) holds them, the key in OpenSSL's traditional form (SEC1 ``EC PRIVATE KEY``, as
  cert-manager writes by default), which Kafka's Java client cannot read as it is.

The broker's certificate names ``localhost`` and ``127.0.0.1`` (subject alternative names), so clients keep
hostname verification on. Keys are EC P-256 (fast to generate). Needs ``cryptography``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    """Paths of the files :func:`make_pki` wrote."""

    directory: Path
    ca_cert: Path
    broker_pem: Path
    client_pem: Path
    client_key: Path
    client_crt: Path


def make_pki(directory: str | os.PathLike, hosts: Iterable[str] = ("localhost", "127.0.0.1"), days: int = 2) -> Pki:
    """Write a CA, a broker key + chain and a client key + chain (see the module docstring) into ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o700)
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    def name(common: str) -> x509.Name:
        return x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "elrwatch tests"),
                x509.NameAttribute(NameOID.COMMON_NAME, common),
            ]
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name("elrwatch test CA"))
        .issuer_name(name("elrwatch test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        common: str, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName], split: tuple[Path, Path] | None = None
    ) -> bytes:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(common))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        pem = serialization.Encoding.PEM
        chain = cert.public_bytes(pem) + ca_cert.public_bytes(pem)
        if split is not None:
            traditional = key.private_bytes(
                pem, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
            )
            _write_private(split[0], traditional)
            _write_private(split[1], chain)
        return key_pem + chain

    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    pki = Pki(out, out / "ca.pem", out / "broker.pem", out / "client.pem", out / "client.key", out / "client.crt")
    _write_private(pki.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(pki.broker_pem, leaf("elrwatch test broker", ExtendedKeyUsageOID.SERVER_AUTH, sans))
    split = (pki.client_key, pki.client_crt)
    _write_private(pki.client_pem, leaf("elrwatch test client", ExtendedKeyUsageOID.CLIENT_AUTH, [], split))
    return pki


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file only its owner can read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
