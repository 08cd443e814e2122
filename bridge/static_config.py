"""A node's static configs from its ``server.properties``: what the metadata-log bridge publishes as
STATIC_BROKER_CONFIG_RECORD (the metadata log never carries them; with ELR off, or on Kafka 3.x, the cluster's
min.insync.replicas often lives only there)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import javaproperties

from elrwatch.state.record_types import CONFIG_NAMES, STATIC_BROKER_CONFIG_RECORD


class PropertiesError(ValueError):
    """A server.properties that cannot be read or names no node."""


@dataclass(frozen=True)
class StaticConfig:
    """One node's static layer: its id and `CONFIG_NAMES` → value (None: the file does not set it)."""

    node_id: int
    values: dict[str, str | None]

    def events(self, published: dict[str, str | None] | None) -> list[dict[str, Any]]:
        """The STATIC_BROKER_CONFIG_RECORD envelopes for the values that differ from ``published`` (None: nothing
        published yet: every value)."""
        return [
            {
                "type": STATIC_BROKER_CONFIG_RECORD,
                "version": 0,
                "data": {"nodeId": self.node_id, "name": name, "value": value},
            }
            for name, value in sorted(self.values.items())
            if published is None or name not in published or published[name] != value
        ]


def parse_server_properties(text: str, where: str = "server.properties") -> StaticConfig:
    """The node id (``node.id``, else ``broker.id``) and the configs elrwatch reads, from a properties file's text
    (Java's format: ``=``, ``:`` or blanks, comments, continuation lines, escapes)."""
    props = javaproperties.loads(text)
    raw_id = props.get("node.id", props.get("broker.id"))
    if raw_id is None:
        raise PropertiesError(f"{where}: neither node.id nor broker.id is set")
    try:
        node_id = int(raw_id.strip())
    except ValueError:
        raise PropertiesError(f"{where}: node.id/broker.id is not an integer: {raw_id!r}") from None
    values: dict[str, str | None] = {}
    for name in CONFIG_NAMES:
        value = props.get(name)
        values[name] = value.strip() if value is not None and value.strip() else None
    return StaticConfig(node_id, values)


def read_server_properties(path: str | Path) -> StaticConfig:
    """`parse_server_properties` of a file; a PropertiesError in one line when it cannot be read."""
    try:
        text = Path(path).read_text(encoding="latin-1")  # Java's Properties.load(InputStream) reads ISO 8859-1
    except OSError as exc:
        raise PropertiesError(f"{path}: {exc.strerror or exc}") from None
    return parse_server_properties(text, str(path))
