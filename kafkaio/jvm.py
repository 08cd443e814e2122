"""The same Kafka settings for Kafka's Java client, as Spark's Kafka connector (``format("kafka")``) takes them:
``kafka.*`` consumer properties, PEM key stores, a JAAS line for SASL."""

from __future__ import annotations

import json
from collections.abc import Mapping

from elrwatch.kafkaio.config import (
    NATIVE_MAX_POLL_RECORDS,
    READER_FETCH_MAX_WAIT_MS,
    Options,
    SourceError,
    kafka_python_config,
)


def _pem_blocks(path: str) -> set[str]:
    """The kinds of PEM blocks in a file ("CERTIFICATE", "PRIVATE KEY", ...)."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror}") from None
    return {line[len("-----BEGIN ") : -len("-----")] for line in text.splitlines() if line.startswith("-----BEGIN ")}


def pem_keystore(certfile: str | None, keyfile: str | None) -> str:
    """The one PEM file Kafka's Java client takes for mutual TLS (``ssl.keystore.type=PEM``): the private key and
    its certificate chain together. kafka-python takes them as two files; Spark's Kafka source cannot, so the
    file given must hold both (the same path for --ssl-certfile and --ssl-keyfile, or either one holding both)."""
    candidates = list(dict.fromkeys(p for p in (keyfile, certfile) if p))
    for path in candidates:
        blocks = _pem_blocks(path)
        if "CERTIFICATE" in blocks and any(b.endswith("PRIVATE KEY") for b in blocks):
            return path
    raise SourceError(
        "--source kafka-native: Spark's Kafka client reads mutual TLS from one PEM file holding the private key "
        f"and its certificate chain; {' and '.join(candidates)} do not: concatenate them "
        "(cat client.key client.crt > client.pem) and pass that file as --ssl-certfile and --ssl-keyfile"
    )


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
    }
    if options.get("maxOffsetsPerTrigger"):
        out["maxOffsetsPerTrigger"] = options["maxOffsetsPerTrigger"]
    # PEM files: Kafka's Java client takes PEM content through ssl.*.location with type PEM.
    if cfg.get("ssl_cafile"):
        out["kafka.ssl.truststore.type"] = "PEM"
        out["kafka.ssl.truststore.location"] = cfg["ssl_cafile"]
    if cfg.get("ssl_certfile") or cfg.get("ssl_keyfile"):
        out["kafka.ssl.keystore.type"] = "PEM"
        out["kafka.ssl.keystore.location"] = pem_keystore(cfg.get("ssl_certfile"), cfg.get("ssl_keyfile"))
    if cfg.get("ssl_password"):
        out["kafka.ssl.key.password"] = cfg["ssl_password"]
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
