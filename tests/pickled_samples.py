"""The core's picklable objects, one of each class with every field set (test_compiled_core.py)."""

from __future__ import annotations

from elrwatch.state.cluster import Changes
from elrwatch.state.model import BrokerState, PartitionState, TopicState
from elrwatch.state.partitions.objects import Transition
from elrwatch.state.records import Record, RecordError


def messages() -> list[object]:
    """One of each pickled class, with every field set."""
    partition = PartitionState("AAAAAAAAAAAAAAAAAAAAAQ", 3, (1, 2, 3), (1, 2), (3,), (), 1, 4, 7)
    transition = Transition("AAAAAAAAAAAAAAAAAAAAAQ", 3, "t", "HEALTHY", "AT_MIN_ISR", 5, 6, "sim:7")
    error = RecordError("sim:9", "invalid_field", "isr", "duplicate broker id", "{}", "PARTITION_CHANGE_RECORD", 9)
    return [
        partition,
        transition,
        error,
        BrokerState(4, 10, "x", False, True, True, "r1", 12),
        TopicState("AAAAAAAAAAAAAAAAAAAAAQ", "t", 2),
        Record("PARTITION_CHANGE_RECORD", 2, {"isr": (1, 2)}, "sim", 8, None, 8, 1_700_000_000_000),
        Changes(partitions=[], transitions=[transition], quarantined=[error]),
    ]
