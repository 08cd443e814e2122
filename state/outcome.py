"""What applying one record did (`Outcome`), and the two helpers every handler uses to say why not."""

from __future__ import annotations

import enum

from elrwatch.state.records import Record, RecordError


class Outcome(enum.Enum):
    """What `ClusterState.apply` did with a record."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"
    QUARANTINED = "quarantined"
    NOT_OWNED = "not_owned"  # a partition record routed to a bucket that does not own it (ignored)
    COVERED = "covered"  # a log record below the end offset of the snapshot applied before it (not applied)


def record_error(record: Record, reason: str, field: str | None, message: str) -> RecordError:
    """The quarantine error of ``record`` (its position, type and offset) for ``reason``."""
    return RecordError(record.position, reason, field, message, "", record.type, record.offset)


def is_duplicate(entity_offset: int | None, record: Record) -> bool:
    """Whether ``record`` carries a metadata offset at or below the last one applied to its entity."""
    return record.offset is not None and entity_offset is not None and record.offset <= entity_offset
