"""The domain objects of elrwatch: a partition registration, a broker registration, a topic.

These mirror Kafka's `PartitionRegistration` / `BrokerRegistration` (see shared/reference/elr-semantics.md §1)
plus the few fields elrwatch derives (status, since when, last leader change, last applied position).
They are deliberately small (``__slots__``, tuples of ints, interned strings) because a cluster holds a
million partitions: the target is <= 1 KiB per partition.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

NO_LEADER = -1  # PartitionRegistration.leader when there is no leader
NO_LEADER_CHANGE = -2  # PartitionChangeRecord.leader when the leader is unchanged
LRS_RECOVERED = 0
LRS_RECOVERING = 1
LRS_NO_CHANGE = -1  # PartitionChangeRecord.leaderRecoveryState when unchanged

EMPTY: tuple[int, ...] = ()

# Kinds of the last leader change of a partition (monitor-spec §2).
LEADER_CHANGE_NONE = "none"  # never changed since creation (or unknown)
LEADER_CHANGE_CLEAN = "clean"  # new leader came from the ISR
LEADER_CHANGE_ELR = "elr"  # new leader came from the ELR (clean, KIP-966)
LEADER_CHANGE_LAST_KNOWN_LEADER = "last_known_leader"  # ISR and ELR empty, last known leader elected (RECOVERING)
LEADER_CHANGE_UNCLEAN = "unclean"  # classic unclean election (RECOVERING)
LEADER_CHANGE_LOST = "lost"  # the partition became leaderless


#: PartitionState's attributes, in the order its pickled form (a tuple) holds them.
PARTITION_FIELDS: Final = (
    "topic_id",
    "partition_id",
    "replicas",
    "isr",
    "elr",
    "last_known_elr",
    "leader",
    "leader_epoch",
    "partition_epoch",
    "leader_recovery_state",
    "adding_replicas",
    "removing_replicas",
    # derived bookkeeping
    "status",
    "status_since_ms",
    "status_since_offset",
    "last_leader_change",
    "last_position",
    "last_offset",
    "last_timestamp_ms",
    "flags",
)


class PartitionState:
    """One partition's registration (Kafka's fields) plus elrwatch's derived bookkeeping.

    Replica lists are tuples of broker ids in Kafka's order; ``elr`` and ``last_known_elr`` keep the order of
    the record that set them but must be compared as sets (Kafka builds them from a HashSet).
    """

    __slots__ = PARTITION_FIELDS

    def __init__(
        self,
        topic_id: str = "",
        partition_id: int = 0,
        replicas: tuple[int, ...] = EMPTY,
        isr: tuple[int, ...] = EMPTY,
        elr: tuple[int, ...] = EMPTY,
        last_known_elr: tuple[int, ...] = EMPTY,
        leader: int = NO_LEADER,
        leader_epoch: int = 0,
        partition_epoch: int = 0,
        leader_recovery_state: int = LRS_RECOVERED,
        adding_replicas: tuple[int, ...] = EMPTY,
        removing_replicas: tuple[int, ...] = EMPTY,
    ) -> None:
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.replicas = replicas
        self.isr = isr
        self.elr = elr
        self.last_known_elr = last_known_elr
        self.leader = leader
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.leader_recovery_state = leader_recovery_state
        self.adding_replicas = adding_replicas
        self.removing_replicas = removing_replicas
        self.status: str = ""
        self.status_since_ms: int | None = None
        self.status_since_offset: int | None = None
        self.last_leader_change: str = LEADER_CHANGE_NONE
        self.last_position: str | None = None
        self.last_offset: int | None = None
        self.last_timestamp_ms: int | None = None
        self.flags: int = 0

    def copy(self) -> PartitionState:
        """A shallow copy (tuples are immutable, so this is a full copy)."""
        other = PartitionState()
        _set_slot_values(other, _slot_values(self))
        return other

    def registration(self) -> dict[str, object]:
        """Kafka's registration fields, camelCase, lists as lists (as in the conformance cases)."""
        return {
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "elr": list(self.elr),
            "lastKnownElr": list(self.last_known_elr),
            "leader": self.leader,
            "leaderEpoch": self.leader_epoch,
            "partitionEpoch": self.partition_epoch,
            "leaderRecoveryState": self.leader_recovery_state,
            "addingReplicas": list(self.adding_replicas),
            "removingReplicas": list(self.removing_replicas),
        }

    def __repr__(self) -> str:
        return (
            f"PartitionState({self.topic_id}-{self.partition_id} replicas={list(self.replicas)} "
            f"isr={list(self.isr)} elr={list(self.elr)} lke={list(self.last_known_elr)} leader={self.leader} "
            f"le={self.leader_epoch} pe={self.partition_epoch} lrs={self.leader_recovery_state})"
        )

    def __getstate__(self) -> tuple:
        return _slot_values(self)

    def __setstate__(self, values: tuple) -> None:
        _set_slot_values(self, values)


# Pickling a million partitions (bucket snapshots, restarts) is dominated by these two per-object steps:
# read all slots as one tuple in C, and restore them with one unpacking assignment instead of a setattr loop.
_slot_values = operator.attrgetter(*PARTITION_FIELDS)
_namespace: dict[str, object] = {}
exec(  # generated from PARTITION_FIELDS, so it can never drift from them
    "def _set_slot_values(self, values):\n    "
    + ", ".join(f"self.{name}" for name in PARTITION_FIELDS)
    + " = values\n",
    _namespace,
)
_set_slot_values: Callable[[PartitionState, tuple], None] = _namespace["_set_slot_values"]  # type: ignore[assignment]


#: The incarnation id of a registration whose epoch and incarnation the source does not know: Kafka's
#: ``Uuid.ZERO_UUID``, which Kafka never assigns (``Uuid.randomUuid`` skips its reserved ids). `elrwatch bridge
#: --source admin` derives registrations with it (the admin API shows neither), and a document read back with a
#: null epoch gets it.
UNKNOWN_INCARNATION_ID: Final = "AAAAAAAAAAAAAAAAAAAAAA"

#: BrokerState's fields in order (its pickled form).
BROKER_FIELDS: Final = (
    "broker_id",
    "epoch",
    "incarnation_id",
    "fenced",
    "in_controlled_shutdown",
    "registered",
    "rack",
    "last_offset",
    "clean_shutdown",
)


@dataclass(slots=True)
class BrokerState:
    """A broker registration as the controller sees it (Kafka's BrokerRegistration, the fields elrwatch uses)."""

    broker_id: int
    epoch: int = -1
    incarnation_id: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    registered: bool = True
    rack: str | None = None
    last_offset: int | None = None
    #: The last CLEAN_SHUTDOWN_RECORD of its agent (`next_start.report_of`; kept across registrations), or None.
    clean_shutdown: dict[str, Any] | None = None

    # Pickled as the list of its field values, as dataclass(slots=True) does itself, but spelled out: bucket
    # snapshots hold these objects, and a named field list keeps their pickled form fixed.
    def __getstate__(self) -> list[object]:
        return [getattr(self, name) for name in BROKER_FIELDS]

    def __setstate__(self, state: list[object]) -> None:
        if len(state) < len(BROKER_FIELDS):  # pickled before a field was added: the new ones take their default
            state = [*state, *(None for _ in BROKER_FIELDS[len(state) :])]
        for name, value in zip(BROKER_FIELDS, state, strict=True):
            setattr(self, name, value)

    @property
    def active(self) -> bool:
        """Registered, not fenced, not in controlled shutdown: may be elected leader (elr-semantics §5)."""
        return self.registered and not self.fenced and not self.in_controlled_shutdown

    @property
    def epoch_known(self) -> bool:
        """Whether ``epoch`` and ``incarnation_id`` are Kafka's: False for a registration derived without them
        (`UNKNOWN_INCARNATION_ID`), whose epoch is the deriving bridge's own number."""
        return self.incarnation_id != UNKNOWN_INCARNATION_ID

    @property
    def state_name(self) -> str:
        """Kafka's BrokerRegistrationState naming: active, fenced, controlled_shutdown or unregistered."""
        if not self.registered:
            return "unregistered"
        if self.fenced:
            return "fenced"
        if self.in_controlled_shutdown:
            return "controlled_shutdown"
        return "active"


#: TopicState's fields in order (its pickled form).
TOPIC_FIELDS: Final = (
    "topic_id",
    "name",
    "last_offset",
)


@dataclass(slots=True)
class TopicState:
    """A topic: its id, its name and the metadata offset of the record that created it. (Its configs are the
    image's, `image.configs.Configs`; its partitions the partition store's.)"""

    topic_id: str
    name: str
    last_offset: int | None = None

    def __getstate__(self) -> list[object]:
        return [getattr(self, name) for name in TOPIC_FIELDS]

    def __setstate__(self, state: list[object]) -> None:
        if len(state) == 5:  # the older form: (topic_id, name, partitions, configs, last_offset)
            state = [state[0], state[1], state[4]]
        for name, value in zip(TOPIC_FIELDS, state, strict=True):
            setattr(self, name, value)
