"""The metadata image every partition store shares: one small area per kind of record, as Kafka's own
``metadata/.../image/`` splits it (brokers, topics, configurations, features), plus the positions that make the
input exactly-once. Each area applies its record types (the registry, state/record_types.py, names the handler:
``"<area>.<method>"``), keeps what changed since the last drain (its delta: ``changed``), and says what its change
means for the partitions (`Effects`): a broker's partitions, a topic's, or every partition derive again; a topic's
partitions go; a topic's ELR clears. The partition store reacts to those (state/partitions/).

No area knows any partition store; nothing here imports numpy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from elrwatch.state import record_types
from elrwatch.state.image.brokers import Brokers
from elrwatch.state.image.configs import Configs
from elrwatch.state.image.effects import Effects
from elrwatch.state.image.features import Features
from elrwatch.state.image.positions import Positions
from elrwatch.state.image.topics import Topics


class MetadataImage:
    """The shared areas of one cluster state (a bucket's, or a whole cluster's)."""

    def __init__(self, default_min_isr: int | None = None) -> None:
        self.effects = Effects()
        self.positions = Positions()
        self.features = Features(self.effects)
        self.brokers = Brokers(self.effects)
        self.configs = Configs(self.effects, default_min_isr)
        self.topics = Topics(self.effects, self.configs.of_topic)
        self.configs.topics = self.topics

    def handler(self, entry: record_types.RecordType) -> Callable[[Any], Any]:
        """A non-partition type's handler (the registry's ``"<area>.<method>"`` or function), bound to this image."""
        named = entry.handler
        if named is None:
            raise KeyError(f"record type {entry.name} is skipped, not applied")
        if isinstance(named, str):
            area, _, method = named.partition(".")
            return getattr(getattr(self, area), method)
        return functools.partial(named, self)


#: The class of each area a registry handler may name (record_types.AREAS).
AREA_CLASSES: dict[str, type] = {"features": Features, "brokers": Brokers, "topics": Topics, "configs": Configs}


def _check_handler(entry: record_types.RecordType) -> None:
    """A non-partition type's ``"<area>.<method>"`` names a method its area defines (else one line)."""
    if isinstance(entry.handler, str) and entry.scope != record_types.SCOPE_PARTITION:
        area, _, method = entry.handler.partition(".")
        if not callable(getattr(AREA_CLASSES[area], method, None)):
            raise ValueError(f"record type {entry.name}: the {area} area has no handler {method!r}")


record_types.add_check(_check_handler)
