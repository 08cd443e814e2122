"""Kafka connection settings: bootstrap servers, TLS and SASL, and the secrets they need.

Two forms of the same settings:

* :class:`KafkaSettings`, the typed form the command line builds (one frozen object per connection);
* string options (``bootstrap.servers``, ``security.protocol``, ``ssl.cafile``/``ssl.certfile``/``ssl.keyfile``,
  ``sasl.mechanism``, ``sasl.username``, ``timeout.ms``, ...), the form Spark hands its data sources, made by
  :meth:`KafkaSettings.options`.

Secrets travel only by reference: ``ssl.password.env``/``ssl.password.file`` and
``sasl.password.env``/``sasl.password.file`` name an environment variable or a file whose first line is the secret.
:func:`read_secret` reads them when a client is configured (:func:`kafka_python_config`); neither form holds a
secret, so their repr and the logs never show one.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_TIMEOUT_MS = 15000
#: The readers' ``fetch.max.wait.ms``. They read offset ranges known to exist, so a fetch never needs to wait for
#: data; with Kafka's default (500 ms) the broker holds a fetch that reaches the end of what is there, and a read
#: task of a storm waits for it. A bare Spark read of a 100k-record storm on 8 partitions: 3.3-3.5 s with the
#: default, 1.5-2.1 s with 10 ms (medians; docs/PERFORMANCE.md, Storm).
READER_FETCH_MAX_WAIT_MS = 10
#: Spark's Kafka source's ``max.poll.records`` (Kafka's default: 500). Spark's consumer polls once per 500 records
#: of what it already fetched; a bare Spark read + routing + shuffle of a 100k-record storm on 8 partitions took
#: 0.91 s (median of 6) with 500 and 0.79 s with 10,000 (docs/PERFORMANCE.md, Storm). A poll hands out records
#: already fetched, so the fetch sizes, not this, bound the memory.
NATIVE_MAX_POLL_RECORDS = 10_000
#: The Python reader's (``streaming.sources``) kafka-python fetch and poll sizes; the benchmarks' raw consumption
#: (bench/consume_raw.py), the ceiling its throughput is compared to, reads with the same ones.
READER_FETCH_SIZES: dict[str, int] = {
    "max_poll_records": 5000,
    "fetch_max_bytes": 64 * 1024 * 1024,
    "max_partition_fetch_bytes": 16 * 1024 * 1024,
}
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: Environment variables holding the secrets when no password file is given.
SASL_PASSWORD_ENV = "ELRWATCH_SASL_PASSWORD"
SSL_PASSWORD_ENV = "ELRWATCH_SSL_PASSWORD"


class SourceError(RuntimeError):
    """A configuration or connectivity problem of a Kafka client or an event source, with a one-line message."""


class Options(dict):
    """Case-insensitive options (Spark hands data sources lower-cased keys)."""

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        super().__init__({str(k).lower(): v for k, v in (options or {}).items()})

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return super().__contains__(str(key).lower())

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)


def security_options(
    security_protocol: str | None = None,
    ssl_cafile: str | None = None,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
    ssl_password_file: str | None = None,
    sasl_mechanism: str | None = None,
    sasl_username: str | None = None,
    sasl_password_file: str | None = None,
) -> dict[str, str]:
    """TLS/SASL options from the command line's values; secrets only by reference (a file, or the name of the
    env var ELRWATCH_SASL_PASSWORD / ELRWATCH_SSL_PASSWORD when it is set and no file is given)."""
    pairs = {
        "security.protocol": security_protocol,
        "ssl.cafile": ssl_cafile,
        "ssl.certfile": ssl_certfile,
        "ssl.keyfile": ssl_keyfile,
        "ssl.password.file": ssl_password_file,
        "sasl.mechanism": sasl_mechanism,
        "sasl.username": sasl_username,
        "sasl.password.file": sasl_password_file,
    }
    opts = {k: v for k, v in pairs.items() if v}
    if not sasl_password_file and os.environ.get(SASL_PASSWORD_ENV):
        opts["sasl.password.env"] = SASL_PASSWORD_ENV
    if not ssl_password_file and os.environ.get(SSL_PASSWORD_ENV):
        opts["ssl.password.env"] = SSL_PASSWORD_ENV
    return opts


@dataclass(frozen=True)
class KafkaSettings:
    """How to connect to one Kafka cluster: its bootstrap servers, TLS files and SASL user. Secrets are held by
    reference only (password files, or the ELRWATCH_SSL_PASSWORD / ELRWATCH_SASL_PASSWORD environment variables),
    so neither this object nor its repr ever holds a password."""

    bootstrap_servers: str | None = None
    security_protocol: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password_file: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password_file: str | None = None

    def with_servers(self, bootstrap_servers: str | None) -> KafkaSettings:
        """The same security settings for other servers (``None`` or empty: these)."""
        return dataclasses.replace(self, bootstrap_servers=bootstrap_servers) if bootstrap_servers else self

    def security_options(self) -> dict[str, str]:
        """The TLS/SASL string options (secrets by reference)."""
        return security_options(
            self.security_protocol,
            self.ssl_cafile,
            self.ssl_certfile,
            self.ssl_keyfile,
            self.ssl_password_file,
            self.sasl_mechanism,
            self.sasl_username,
            self.sasl_password_file,
        )

    def options(self, topic: str | None = None, **extra: str) -> dict[str, str]:
        """The string options of a client or data source: servers, ``topic`` if given, security, ``extra``."""
        opts: dict[str, str] = {}
        if self.bootstrap_servers:
            opts["bootstrap.servers"] = self.bootstrap_servers
        if topic:
            opts["topic"] = topic
        return {**opts, **self.security_options(), **extra}

    def client_config(self) -> dict[str, Any]:
        """kafka-python settings (secrets read now: never log the result)."""
        return kafka_python_config(self.options())


def read_secret(options: Mapping[str, str], name: str) -> str | None:
    """The secret ``name`` (e.g. ``sasl.password``) from ``<name>.env`` (an env var) or ``<name>.file``."""
    options = Options(options)
    env_name = options.get(f"{name}.env")
    if env_name:
        value = os.environ.get(env_name)
        if value is None:
            raise SourceError(f"{name}: environment variable {env_name} is not set")
        return value
    path = options.get(f"{name}.file")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.readline().rstrip("\r\n")
        except OSError as exc:
            raise SourceError(f"{name}: cannot read {path}: {exc.strerror}") from None
    return None


def kafka_python_config(options: Mapping[str, str]) -> dict[str, Any]:
    """kafka-python client settings from string options (secrets read now: never log the result)."""
    options = Options(options)
    servers = options.get("bootstrap.servers") or options.get("kafka.bootstrap.servers")
    if not servers:
        raise SourceError("option bootstrap.servers is required")
    timeout_ms = int(options.get("timeout.ms", DEFAULT_TIMEOUT_MS))
    config: dict[str, Any] = {
        "bootstrap_servers": servers.split(","),
        "request_timeout_ms": timeout_ms,
        "bootstrap_timeout_ms": timeout_ms,
        "reconnect_backoff_max_ms": 1000,
        "security_protocol": options.get("security.protocol", "PLAINTEXT").upper(),
    }
    for key in ("cafile", "certfile", "keyfile"):
        if options.get(f"ssl.{key}"):
            config[f"ssl_{key}"] = options[f"ssl.{key}"]
    ssl_password = read_secret(options, "ssl.password")
    if ssl_password is not None:
        config["ssl_password"] = ssl_password
    if options.get("ssl.check.hostname", "true").lower() == "false":
        config["ssl_check_hostname"] = False
    mechanism = options.get("sasl.mechanism")
    if mechanism:
        mechanism = mechanism.upper()
        if mechanism not in SASL_MECHANISMS:
            raise SourceError(f"sasl.mechanism {mechanism} is not supported (PLAIN, SCRAM-SHA-256/512)")
        config["sasl_mechanism"] = mechanism
        config["sasl_plain_username"] = options.get("sasl.username")
        config["sasl_plain_password"] = read_secret(options, "sasl.password")
    return config
