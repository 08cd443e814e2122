"""Value checks shared by the parser (records.py) and the straight-line validators it builds from the schemas
(`records.validator_source`): the invalid-value error, Kafka Uuids, and the impossible values the schemas allow.
"""

from __future__ import annotations

import base64
import re
from typing import Any

#: A key absent from a record's data (``data.get(name, MISSING)``).
MISSING = object()


class Invalid(Exception):
    """A value a record may not hold: its quarantine reason, the field, and a message."""

    def __init__(self, reason: str, field: str | None, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.field = field
        self.message = message


UUID_CHARS = re.compile(r"^[A-Za-z0-9_-]{22}$")  # URL-safe base64 alphabet only, as Kafka's Uuid.fromString
VALID_UUIDS: set[str] = set()  # Uuids already checked (topic ids repeat on every partition record)
UUID_CACHE_LIMIT = 1_000_000


def is_uuid(value: object) -> bool:
    """A Kafka Uuid string: 22 chars of URL-safe base64 without padding (16 bytes)."""
    if not isinstance(value, str):
        return False
    if value in VALID_UUIDS:
        return True
    if not UUID_CHARS.match(value):
        return False
    try:
        ok = len(base64.urlsafe_b64decode(value + "==")) == 16
    except (ValueError, TypeError):
        return False
    if ok:
        if len(VALID_UUIDS) >= UUID_CACHE_LIMIT:
            VALID_UUIDS.clear()
        VALID_UUIDS.add(value)
    return ok


def nonneg(data: dict[str, Any], *names: str) -> None:
    for name in names:
        value = data.get(name)
        if value is not None and value < 0:
            raise Invalid("invalid_field", name, f"must be >= 0, got {value}")


def _partition_record_semantics(data: dict[str, Any]) -> None:
    for name in ("partitionId", "leaderEpoch", "partitionEpoch"):
        if data[name] < 0:
            raise Invalid("invalid_field", name, f"must be >= 0, got {data[name]}")
    if data["leader"] < -1:
        raise Invalid("invalid_field", "leader", f"must be a broker id or -1, got {data['leader']}")
    if data.get("leaderRecoveryState", 0) not in (0, 1):
        raise Invalid("invalid_field", "leaderRecoveryState", "must be 0 or 1")
    if not data["replicas"]:
        raise Invalid("invalid_field", "replicas", "a partition needs at least one replica")


def _partition_change_semantics(data: dict[str, Any]) -> None:
    if data["partitionId"] < 0:
        raise Invalid("invalid_field", "partitionId", f"must be >= 0, got {data['partitionId']}")
    if data.get("leader", -2) < -2:
        raise Invalid("invalid_field", "leader", f"must be a broker id, -1 or -2, got {data['leader']}")
    if data.get("leaderRecoveryState", -1) not in (-1, 0, 1):
        raise Invalid("invalid_field", "leaderRecoveryState", "must be -1, 0 or 1")
    if data.get("replicas") == ():
        raise Invalid("invalid_field", "replicas", "a partition needs at least one replica")


def _broker_change_semantics(data: dict[str, Any]) -> None:
    nonneg(data, "brokerId")
    if data.get("fenced", 0) not in (-1, 0, 1):
        raise Invalid("invalid_field", "fenced", "must be -1 (unfence), 0 (none) or 1 (fence)")
    if data.get("inControlledShutdown", 0) not in (0, 1):
        raise Invalid("invalid_field", "inControlledShutdown", "must be 0 or 1")


def _config_semantics(data: dict[str, Any]) -> None:
    if data["name"] == "min.insync.replicas" and data["value"] is not None:
        try:
            if int(data["value"]) < 1:
                raise ValueError
        except ValueError:
            raise Invalid(  # noqa: B904 - the int() error adds nothing
                "invalid_field", "value", f"min.insync.replicas must be an int >= 1: {data['value']!r}"
            )
    if (
        data["name"] == "unclean.leader.election.enable"
        and data["value"] is not None
        and data["value"].strip().lower() not in ("true", "false")
    ):
        raise Invalid("invalid_field", "value", f"must be true or false: {data['value']!r}")


def _clean_shutdown_semantics(data: dict[str, Any]) -> None:
    nonneg(data, "brokerId", "logDirs", "logDirsWithFile")
    if data["logDirsWithFile"] > data["logDirs"]:
        raise Invalid("invalid_field", "logDirsWithFile", "more log dirs with the file than log dirs checked")


def no_semantics(data: dict[str, Any]) -> None:
    return None


def _operator_recovery_semantics(data: dict[str, Any]) -> None:
    from elrwatch.state.recovery import OUTCOMES, STEPS

    nonneg(data, "partitionId", "candidate")
    if data["step"] not in STEPS:
        raise Invalid("invalid_field", "step", f"must be one of {', '.join(STEPS)}: {data['step']!r}")
    if data["outcome"] not in OUTCOMES:
        raise Invalid("invalid_field", "outcome", f"must be one of {', '.join(OUTCOMES)}: {data['outcome']!r}")
    for loss in data["losses"]:
        if not (
            type(loss.get("brokerId")) is int
            and loss["brokerId"] >= 0
            and type(loss.get("records")) is int
            and type(loss.get("exact")) is bool
        ):
            raise Invalid("invalid_field", "losses", f"each loss is {{brokerId, records, exact}}: {loss!r}")


#: Impossible values that the schema alone allows, per record type.
SEMANTICS = {
    "PARTITION_RECORD": _partition_record_semantics,
    "PARTITION_CHANGE_RECORD": _partition_change_semantics,
    "REGISTER_BROKER_RECORD": lambda data: nonneg(data, "brokerId"),
    "BROKER_REGISTRATION_CHANGE_RECORD": _broker_change_semantics,
    "UNREGISTER_BROKER_RECORD": lambda data: nonneg(data, "brokerId"),
    "FENCE_BROKER_RECORD": lambda data: nonneg(data, "id"),
    "UNFENCE_BROKER_RECORD": lambda data: nonneg(data, "id"),
    "CONFIG_RECORD": _config_semantics,
    "FEATURE_LEVEL_RECORD": lambda data: nonneg(data, "featureLevel"),
    "REPLICA_LOG_INFO_RECORD": lambda data: nonneg(data, "partitionId", "brokerId", "logEndOffset"),
    "STATIC_BROKER_CONFIG_RECORD": lambda data: (nonneg(data, "nodeId"), _config_semantics(data)),
    "OPERATOR_RECOVERY_RECORD": _operator_recovery_semantics,
    "CLEAN_SHUTDOWN_RECORD": _clean_shutdown_semantics,
}
