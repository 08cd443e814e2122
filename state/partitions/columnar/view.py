"""What the columnar store's helper modules (admission, audit, derive, elections, output, segment) read and call on
the store. `ColumnarPartitions` (store.py) is the one class that has it; the helpers name this view, so the store
imports them and none of them imports the store back."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from elrwatch.state.image import MetadataImage
    from elrwatch.state.model import PartitionState, TopicState
    from elrwatch.state.partitions import Violations
    from elrwatch.state.partitions.columnar.lines import LineBlock
    from elrwatch.state.partitions.columnar.table import PartitionTable, TupleTable


class ColumnarView(Protocol):
    """The columnar store as its helpers see it (fields and methods of `ColumnarPartitions` and its base)."""

    # the partition store's (state/partitions/__init__.py)
    image: MetadataImage
    bucket: tuple[int, int] | None
    violations: Violations
    counters: Counter[str]
    log_info: dict[tuple[str, int], dict[int, dict[str, Any]]]
    operator_steps: dict[tuple[str, int], list[dict[str, Any]]]
    # the table, its replica tuples, its topics
    table: PartitionTable
    tuples: TupleTable
    topic_index: dict[str, int]
    topic_ids: list[str]
    topic_names: list[str]
    topic_min_isr: list[int]
    topic_unclean: list[bool]
    _dense: list[np.ndarray]
    _sparse: list[dict[int, int]]
    _topic_size: list[int]
    _distinct: np.ndarray
    _active: np.ndarray | None
    # what the segment gathers, and what the drain gives
    _pending: dict[int, int]
    _seg_rows: list[int]
    _seg_pieces: list[tuple[Any, ...]]
    _seg_new_topic: list[int]
    _seg_new_pid: list[int]
    _segment_start: int
    _transitions: list[tuple[np.ndarray, ...]]
    _positions: list[list[str]]
    removed_out: list[tuple[str, int, str]]
    # counts
    fast_records: int
    vector_admitted: int
    audited_rows: int

    def row_of(self, topic_id: str, partition_id: int) -> int | None: ...
    def new_row(self, t: int, pid: int) -> int: ...
    def registration(self, columns: dict[str, np.ndarray], i: int, row: int) -> PartitionState: ...
    def partition_at(self, row: int) -> PartitionState: ...
    def stage_lines(self, block: LineBlock, picked: np.ndarray, rows: np.ndarray, offsets: np.ndarray) -> None: ...
    def flush(self) -> None: ...
    def transition_columns(self) -> tuple[np.ndarray, ...] | None: ...
    def forget_changes(self) -> None: ...
    def effective_min_isr(self, topic: TopicState) -> int: ...
    def replication_factor(self, topic_id: str) -> int: ...
    def _replication_factor(self, t: int) -> int: ...
    def _segment_reset(self) -> None: ...
