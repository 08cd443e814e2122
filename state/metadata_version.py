"""Kafka's ``metadata.version`` (MV): names like ``"3.6-IV0"`` <-> FEATURE_LEVEL_RECORD feature levels.

Levels are those of Kafka's ``server-common/.../MetadataVersion.java`` (``IBP_3_0_IV1`` = 1 ...
``IBP_4_5_IV0`` = 34). A bare release (``"3.7"``) means its latest internal version, as Kafka's
``MetadataVersion.fromVersionString``.
The helpers answer the few MV-gated questions the controller model and the simulator need.
"""

from __future__ import annotations

from elrwatch.state import record_types

FEATURE_NAME = record_types.METADATA_VERSION
ELR_FEATURE_NAME = record_types.ELR_FEATURE

# (name, feature level) in Kafka's enum order.
_VERSIONS: tuple[tuple[str, int], ...] = (
    ("3.0-IV1", 1),
    ("3.1-IV0", 2),
    ("3.2-IV0", 3),
    ("3.3-IV0", 4),
    ("3.3-IV1", 5),
    ("3.3-IV2", 6),
    ("3.3-IV3", 7),
    ("3.4-IV0", 8),
    ("3.5-IV0", 9),
    ("3.5-IV1", 10),
    ("3.5-IV2", 11),
    ("3.6-IV0", 12),
    ("3.6-IV1", 13),
    ("3.6-IV2", 14),
    ("3.7-IV0", 15),
    ("3.7-IV1", 16),
    ("3.7-IV2", 17),
    ("3.7-IV3", 18),
    ("3.7-IV4", 19),
    ("3.8-IV0", 20),
    ("3.9-IV0", 21),
    ("4.0-IV0", 22),
    ("4.0-IV1", 23),
    ("4.0-IV2", 24),
    ("4.0-IV3", 25),
    ("4.1-IV0", 26),
    ("4.1-IV1", 27),
    ("4.2-IV0", 28),
    ("4.2-IV1", 29),
    ("4.3-IV0", 30),
    ("4.4-IV0", 31),
    ("4.4-IV1", 32),
    ("4.4-IV2", 33),
    ("4.5-IV0", 34),
)

LEVEL_BY_NAME: dict[str, int] = dict(_VERSIONS)
NAME_BY_LEVEL: dict[int, str] = {level: name for name, level in _VERSIONS}
for _name, _level in _VERSIONS:  # a bare release maps to its latest internal version
    LEVEL_BY_NAME[_name.split("-")[0]] = _level

MV_3_2_IV0 = 3  # leader recovery state (KIP-704)
MV_3_3_IV2 = 6  # BrokerRegistrationChangeRecord instead of Fence/UnfenceBrokerRecord
MV_3_3_IV3 = 7  # inControlledShutdown in registrations (KIP-841)
MV_3_4_IV0 = 8  # RegisterBrokerRecord v2
MV_3_6_IV0 = 12  # no leader epoch bump on ISR shrink (KAFKA-15021)
MV_3_7_IV2 = 17  # directory assignment: PartitionRecord/PartitionChangeRecord v1, RegisterBrokerRecord v3
MV_4_0_IV1 = 23  # ELR: PartitionRecord/PartitionChangeRecord v2, ClearElrRecord
MV_4_1_IV0 = 26  # ELR on by default for new clusters
MV_4_3_IV0 = 30  # RegisterBrokerRecord v4 (cordonedLogDirs)
LATEST_LEVEL = 34
DEFAULT_LEVEL = MV_4_1_IV0


def parse_metadata_version(value: str | int) -> int:
    """Feature level of an MV given as a name (``"4.0-IV1"``, ``"3.7"``) or a level (23, "23")."""
    if isinstance(value, bool):
        raise ValueError(f"invalid metadata version {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"invalid metadata version level {value}")
        return value
    text = str(value).strip()
    if text.isdigit():
        return parse_metadata_version(int(text))
    level = LEVEL_BY_NAME.get(text)
    if level is None:
        level = LEVEL_BY_NAME.get(text.upper().removeprefix("IBP_").replace("_", ".", 1).replace("_", "-"))
    if level is None:
        raise ValueError(f"unknown metadata version {value!r}")
    return level


def metadata_version_name(level: int) -> str:
    """Kafka's name of a feature level (``23`` -> ``"4.0-IV1"``); unknown levels print as ``"level-<n>"``."""
    return NAME_BY_LEVEL.get(level, f"level-{level}")


def partition_change_record_version(level: int) -> int:
    """PartitionChangeRecord (and PartitionRecord) version the controller writes at this MV."""
    if level >= MV_4_0_IV1:
        return 2
    if level >= MV_3_7_IV2:
        return 1
    return 0


partition_record_version = partition_change_record_version


def register_broker_record_version(level: int) -> int:
    """RegisterBrokerRecord version the controller writes at this MV."""
    if level >= MV_4_3_IV0:
        return 4
    if level >= MV_3_7_IV2:
        return 3
    if level >= MV_3_4_IV0:
        return 2
    if level >= MV_3_3_IV3:
        return 1
    return 0


def is_elr_supported(level: int) -> bool:
    """Whether ELR may be enabled at this MV (``eligible.leader.replicas.version`` 1 needs 4.0-IV1)."""
    return level >= MV_4_0_IV1


def is_leader_epoch_bump_required_on_isr_shrink(level: int) -> bool:
    """MV < 3.6-IV0: an ISR shrink re-sets the leader to bump its epoch (KAFKA-15021)."""
    return level < MV_3_6_IV0


def is_leader_recovery_supported(level: int) -> bool:
    """MV >= 3.2-IV0: unclean elections mark the partition RECOVERING."""
    return level >= MV_3_2_IV0


def is_broker_registration_change_record_supported(level: int) -> bool:
    """MV >= 3.3-IV2: fencing is written as BrokerRegistrationChangeRecord, not Fence/UnfenceBrokerRecord."""
    return level >= MV_3_3_IV2
