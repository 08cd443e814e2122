"""Kafka's replay rules for partition records (elr-semantics.md §1.1, `PartitionRegistration.merge`).

Both the replay of the event stream and the controller model apply records through these two functions, so
there is exactly one implementation of "how a record changes a partition".

Record data uses Kafka's camelCase field names; replica lists are tuples of ints (records.py converts them).
"""

from __future__ import annotations

from collections.abc import Mapping

from elrwatch.state.model import (
    EMPTY,
    LRS_NO_CHANGE,
    LRS_RECOVERED,
    NO_LEADER_CHANGE,
    PartitionState,
)


def partition_from_record(data: Mapping[str, object]) -> PartitionState:
    """Build a registration from PartitionRecord data: it replaces the whole registration.

    Absent ELR / LastKnownElr (null, or record version < 2) become empty; absent leaderRecoveryState is 0.
    """
    get = data.get
    return PartitionState(
        data["topicId"],  # type: ignore[arg-type]
        data["partitionId"],  # type: ignore[arg-type]
        get("replicas") or EMPTY,  # type: ignore[arg-type]
        get("isr") or EMPTY,  # type: ignore[arg-type]
        get("eligibleLeaderReplicas") or EMPTY,  # type: ignore[arg-type]
        get("lastKnownElr") or EMPTY,  # type: ignore[arg-type]
        get("leader", -1),  # type: ignore[arg-type]
        get("leaderEpoch", 0),  # type: ignore[arg-type]
        get("partitionEpoch", 0),  # type: ignore[arg-type]
        get("leaderRecoveryState", LRS_RECOVERED),  # type: ignore[arg-type]
        get("addingReplicas") or EMPTY,  # type: ignore[arg-type]
        get("removingReplicas") or EMPTY,  # type: ignore[arg-type]
    )


#: A PartitionChangeRecord's broker-id lists and the registration attribute each one replaces.
CHANGE_LISTS: tuple[tuple[str, str], ...] = (
    ("replicas", "replicas"),
    ("isr", "isr"),
    ("removingReplicas", "removing_replicas"),
    ("addingReplicas", "adding_replicas"),
    ("eligibleLeaderReplicas", "elr"),
    ("lastKnownElr", "last_known_elr"),
)


def merge_partition_change(partition: PartitionState, data: Mapping[str, object]) -> None:
    """Apply PartitionChangeRecord data to ``partition`` in place, exactly as `PartitionRegistration.merge`.

    * list fields are replaced when present (an empty list clears; absent or null keeps);
    * ``leader`` is replaced unless -2, and then leaderEpoch += 1 (even for the same leader: an epoch bump);
    * ``leaderRecoveryState`` is replaced unless -1;
    * partitionEpoch += 1 for every merged record.
    """
    get = data.get
    for key, attribute in CHANGE_LISTS:
        value = get(key)
        if value is not None:
            setattr(partition, attribute, value)
    leader = get("leader", NO_LEADER_CHANGE)
    if leader is not None and leader != NO_LEADER_CHANGE:
        partition.leader = leader  # type: ignore[assignment]
        partition.leader_epoch += 1
    lrs = get("leaderRecoveryState", LRS_NO_CHANGE)
    if lrs is not None and lrs != LRS_NO_CHANGE:
        partition.leader_recovery_state = lrs  # type: ignore[assignment]
    partition.partition_epoch += 1


CLEAR_ELR_CHANGE: Mapping[str, object] = {"eligibleLeaderReplicas": EMPTY, "lastKnownElr": EMPTY}


def clear_elr(partition: PartitionState) -> bool:
    """ClearElrRecord replay for one partition: merge ``{elr: [], lastKnownElr: []}`` if either is non-empty.

    Returns whether the partition changed (partitions with both empty are left alone, epochs untouched).
    """
    if not partition.elr and not partition.last_known_elr:
        return False
    merge_partition_change(partition, CLEAR_ELR_CHANGE)
    return True
