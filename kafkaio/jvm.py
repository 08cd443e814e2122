"""The same Kafka settings for Kafka's Java client, as Spark's Kafka connector (``format("kafka")``) takes them:
``kafka.*`` consumer properties, PEM key stores, a JAAS line for SASL."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from elrwatch.kafkaio.config import (
    NATIVE_MAX_POLL_RECORDS,
    READER_FETCH_MAX_WAIT_MS,
    Options,
    SourceError,
    kafka_python_config,
)

#: The key encodings Kafka's Java client reads (``ssl.keystore.type=PEM`` takes PKCS#8 only).
PKCS8_KEYS = frozenset({"PRIVATE KEY", "ENCRYPTED PRIVATE KEY"})
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----\r?\n?", re.DOTALL)


def _pem_blocks(path: str) -> list[tuple[str, str]]:
    """The PEM blocks of a file, in order, as (kind, text): kind is "CERTIFICATE", "PRIVATE KEY", ..."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror}") from None
    return [(m[1], m[0] if m[0].endswith("\n") else m[0] + "\n") for m in _PEM_BLOCK.finditer(text)]


def _pkcs8(key_pem: str, password: str | None, path: str) -> str:
    """A PKCS#1 (``RSA PRIVATE KEY``) or SEC1 (``EC PRIVATE KEY``) key as unencrypted PKCS#8, which Kafka's Java
    client reads (a Kubernetes TLS Secret from cert-manager holds PKCS#1 by default); kept in memory only."""
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(key_pem.encode(), password.encode() if password else None)
    except (ValueError, TypeError) as exc:
        raise SourceError(f"cannot read the private key in {path}: {exc}") from None
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def native_keystore(certfile: str | None, keyfile: str | None, password: str | None) -> dict[str, str]:
    """Kafka's Java client's PEM key store for mutual TLS (``kafka.ssl.keystore.*``), from the same files
    kafka-python takes.

    A file holding a PKCS#8 key and its certificate chain is passed by location (every Spark executor reads it
    itself). A key and a chain in separate files (a Kubernetes TLS Secret's ``tls.key`` and ``tls.crt``), or a key
    that is not PKCS#8, are passed as values (``ssl.keystore.key``, ``ssl.keystore.certificate.chain``): the key
    converted to PKCS#8 in memory where needed. Spark redacts them from its logs and UI (``spark.redaction.regex``,
    `streaming.query`); elrwatch never logs them."""
    paths = list(dict.fromkeys(p for p in (keyfile, certfile) if p))
    blocks = {path: _pem_blocks(path) for path in paths}
    store: dict[str, str] | None = None
    for path in paths:
        kinds = {kind for kind, _ in blocks[path]}
        if "CERTIFICATE" in kinds and kinds & PKCS8_KEYS:  # one file holds both: by location
            store = {"kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.location": path}
            break
    if store is None:
        keys = [(path, kind, text) for path in paths for kind, text in blocks[path] if kind.endswith("PRIVATE KEY")]
        chain_from = [p for p in (certfile, keyfile) if p and any(k == "CERTIFICATE" for k, _ in blocks[p])]
        if not keys or not chain_from:
            missing = "private key" if not keys else "certificate"
            raise SourceError(
                f"--source kafka-native: mutual TLS needs a private key and its certificate chain; no {missing} in "
                f"{' or '.join(paths)} (PEM: --ssl-keyfile the key, --ssl-certfile the certificate chain)"
            )
        path, kind, key = keys[0]
        if kind not in PKCS8_KEYS:
            key, password = _pkcs8(key, password, path), None  # decrypted in memory: no password for it
        chain = "".join(text for k, text in blocks[chain_from[0]] if k == "CERTIFICATE")
        store = {
            "kafka.ssl.keystore.type": "PEM",
            "kafka.ssl.keystore.key": key,
            "kafka.ssl.keystore.certificate.chain": chain,
        }
    if password:
        store["kafka.ssl.key.password"] = password
    return store


def native_kafka_options(options: Mapping[str, str]) -> dict[str, str]:
    """The same options for Spark's built-in Kafka source (``kafka.*`` consumer properties)."""
    options = Options(options)
    cfg = kafka_python_config(options)
    out = {
        "kafka.bootstrap.servers": ",".join(cfg["bootstrap_servers"]),
        "subscribe": options["topic"],
        "startingOffsets": options.get("startingOffsets", "earliest"),
        "failOnDataLoss": options.get("failOnDataLoss", "true"),
        "kafka.security.protocol": cfg["security_protocol"],
        "kafka.request.timeout.ms": str(cfg["request_timeout_ms"]),
        "kafka.default.api.timeout.ms": str(cfg["request_timeout_ms"]),
        "kafka.fetch.max.wait.ms": str(READER_FETCH_MAX_WAIT_MS),
        "kafka.max.poll.records": str(NATIVE_MAX_POLL_RECORDS),
        "includeHeaders": "true",  # the routing headers (kafkaio/headers.py): routed without reading the JSON
    }
    for limit in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
        if options.get(limit):
            out[limit] = options[limit]
    # PEM files: Kafka's Java client reads them with type PEM (by location, or the key store as values).
    if cfg.get("ssl_cafile"):
        out["kafka.ssl.truststore.type"] = "PEM"
        out["kafka.ssl.truststore.location"] = cfg["ssl_cafile"]
    if cfg.get("ssl_certfile") or cfg.get("ssl_keyfile"):
        out.update(native_keystore(cfg.get("ssl_certfile"), cfg.get("ssl_keyfile"), cfg.get("ssl_password")))
    if cfg.get("sasl_mechanism"):
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if cfg["sasl_mechanism"] == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        out["kafka.sasl.mechanism"] = cfg["sasl_mechanism"]
        user = json.dumps(cfg.get("sasl_plain_username") or "")
        password = json.dumps(cfg.get("sasl_plain_password") or "")
        out["kafka.sasl.jaas.config"] = f"{module} required username={user} password={password};"
    return out
