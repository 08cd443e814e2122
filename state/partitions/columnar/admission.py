"""The admission of a block of partition-record lines into the columnar segment as vectors: what `ClusterState.apply`
and `ColumnarPartitions.stage` do one record at a time, for many lines at once (`lines.LineBlock`).

The checks `ClusterState.apply` makes one record at a time, in log order (source position, snapshot cover, the
recent-offsets ring: `Positions.admit_lines`; topic, ownership; row, per-partition offset: here), are made for the
block's lines at once, each against the state the lines before it leave. A line whose outcome those vectors cannot
settle for certain is *irregular*: no metadata offset, a metadata offset applied before (in the ring or earlier in
the block), an unknown topic, another bucket's partition, a change of an unknown partition, an offset not above its
partition's last. The lines before the first irregular one are admitted as vectors; that one is built as a Record
and goes through `ClusterState.apply` (which decides it exactly, error or duplicate included), then the rest of the
block again. A certain line has no ``source`` or ``snapshotEnd`` key (`parse`), so neither is looked at.

What a regular line can be, and what admitting it does, is exactly what `apply` does for it:

* DUPLICATE: its sequence is not above its source's position (the source's last, or a line before it in the
  block); nothing else happens.
* COVERED: below the snapshot end offset; its source position moves.
* APPLIED: its source position moves, its partition's row is created by a PartitionRecord when new (in log
  order), the line joins the segment (a piece of the block), its offset becomes its partition's pending offset
  and takes its ring slot (the raw line: `parse.RawLine`, parsed only on a hit).

Stretches of irregular lines (a re-sent log, a stream of errors) go through `apply` one by one without the
vectors' fixed cost (`admit_block`'s back-off).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np

from elrwatch.state.outcome import Outcome
from elrwatch.state.partitions.columnar.table import NONE
from elrwatch.state.routing import bucket_of

if TYPE_CHECKING:
    from elrwatch.state.partitions import RecordApplier
    from elrwatch.state.partitions.columnar.lines import LineBlock
    from elrwatch.state.partitions.columnar.view import ColumnarView

#: The window after an irregular line (twice the regular stretch before it, at least this).
MIN_WINDOW: Final = 1024
MAX_WINDOW: Final = 1 << 18
#: After an irregular line that ended a short regular stretch, the next lines go one by one (doubling up to
#: `MAX_SINGLES` while it goes on) before the vectors are tried again.
SHORT_PREFIX: Final = 8
MAX_SINGLES: Final = 4096


def admit_block(
    store: ColumnarView,
    cluster: RecordApplier,
    block: LineBlock,
    outcomes: list[Outcome],
    errors: list[Any],
    note: Any,
    owned: bool = False,
) -> None:
    """Admit ``block``'s lines into the store's segment in log order: a regular line's outcome goes to ``outcomes``
    (and None to ``errors``), an irregular one's, applied by ``cluster.apply``, through ``note(record, outcome)``.
    ``owned``: the caller routed the lines (every one is of this bucket)."""
    n = len(block)
    i = 0
    window = MAX_WINDOW
    singles = backoff = 0
    while i < n:
        if singles:
            stop = min(n, i + singles)
            for j in range(i, stop):
                record = block.record(j)
                note(record, cluster.apply(record, None, owned))
            i = stop
            singles = 0
            continue
        hi = min(n, i + window)
        regular = _admit_regular_prefix(store, block, i, hi, owned)
        outcomes.extend(regular)
        errors.extend([None] * len(regular))
        i += len(regular)
        if i == hi:
            continue
        record = block.record(i)
        note(record, cluster.apply(record, None, owned))
        i += 1
        if len(regular) < SHORT_PREFIX:
            backoff = singles = min(MAX_SINGLES, max(16, 2 * backoff))
        else:
            backoff = 0
        window = min(MAX_WINDOW, max(MIN_WINDOW, 2 * len(regular)))


def _admit_regular_prefix(store: ColumnarView, block: LineBlock, lo: int, hi: int, owned: bool) -> list[Outcome]:
    """Admit the lines from ``lo`` up to the first irregular one below ``hi`` (see the module); their outcomes."""
    image = store.image
    m = hi - lo
    seqs = block.seqs[lo:hi]
    offsets = block.offsets[lo:hi]
    pids = block.pids[lo:hi]
    codes = block.topic_codes[lo:hi]
    is_pr = block.is_pr[lo:hi]
    # 1-4: source position, no metadata offset, the snapshot cover, the ring
    source_dup, irregular, covered = image.positions.admit_lines(
        seqs, block.source_codes[lo:hi], block.source_names, offsets
    )
    admitted = ~source_dup & ~irregular & ~covered  # reach the partition checks
    # 5. topic, ownership, row, per-partition offset
    topics = block.topics
    known = image.topics.by_id
    unknown = [c for c, tid in enumerate(topics) if tid not in known]
    at = np.flatnonzero(admitted & ~irregular)
    if unknown and len(at):
        irregular[at[np.isin(codes[at], unknown)]] = True
    bucket = store.bucket
    if not owned and bucket is not None and bucket[1] > 1:
        at = np.flatnonzero(admitted & ~irregular)
        owners = np.fromiter(
            (bucket_of(topics[c], p, bucket[1]) for c, p in zip(codes[at].tolist(), pids[at].tolist(), strict=True)),
            np.int64,
            len(at),
        )
        irregular[at[owners != bucket[0]]] = True
    at = np.flatnonzero(admitted & ~irregular)
    rows = np.full(m, -1, dtype=np.int64)
    for c in np.unique(codes[at]).tolist():
        t = store.topic_index.get(topics[c])
        if t is None:
            continue
        mine = at[codes[at] == c]
        dense = store._dense[t]
        p = pids[mine]
        inside = p < len(dense)
        rows[mine[inside]] = dense[p[inside]]
        sparse = store._sparse[t]
        for j in mine[~inside].tolist():  # large partition ids: the sparse map
            rows[j] = sparse.get(int(pids[j]), -1)
    keys = codes * (1 << 32) + pids  # a partition's key in the block (topics coded, pids < 2^31)
    new = at[rows[at] < 0]
    if len(new):  # a partition without a row: its first admitted line must be a PartitionRecord (it creates it)
        _, first = np.unique(keys[new], return_index=True)
        firsts = new[first]
        irregular[firsts[~is_pr[firsts]]] = True
    old = at[rows[at] >= 0]
    if len(old):  # offsets above the partition's last: its pending (this segment) or table offset
        latest = store.table.cols["last_offset"][rows[old]].copy()
        pending = store._pending
        if pending:
            pending_rows = np.fromiter(pending.keys(), np.int64, len(pending))
            pending_offsets = np.fromiter(pending.values(), np.int64, len(pending))
            order = np.argsort(pending_rows)
            pending_rows, pending_offsets = pending_rows[order], pending_offsets[order]
            where = np.minimum(np.searchsorted(pending_rows, rows[old]), len(pending_rows) - 1)
            found = pending_rows[where] == rows[old]
            latest[found] = pending_offsets[where[found]]
        irregular[old[(latest != NONE) & (offsets[old] <= latest)]] = True
    if len(at) > 1:  # and above each earlier line of its partition here
        order = np.argsort(keys[at], kind="stable")
        sorted_keys = keys[at][order]
        sorted_offsets = offsets[at][order]
        not_above = (sorted_keys[1:] == sorted_keys[:-1]) & (sorted_offsets[1:] <= sorted_offsets[:-1])
        irregular[at[order[1:][not_above]]] = True
    k = int(np.argmax(irregular)) if irregular.any() else m
    if k == 0:
        return []
    _admit(store, block, lo, k, seqs, source_dup, admitted, offsets, rows, codes, pids, is_pr)
    return [
        Outcome.DUPLICATE if d else Outcome.COVERED if c else Outcome.APPLIED
        for d, c in zip(source_dup[:k].tolist(), covered[:k].tolist(), strict=True)
    ]


def _admit(
    store: ColumnarView,
    block: LineBlock,
    lo: int,
    k: int,
    seqs: np.ndarray,
    source_dup: np.ndarray,
    admitted: np.ndarray,
    offsets: np.ndarray,
    rows: np.ndarray,
    codes: np.ndarray,
    pids: np.ndarray,
    is_pr: np.ndarray,
) -> None:
    """What `ClusterState.apply` does for the block's lines ``lo`` .. ``lo + k``, all regular (arrays: from ``lo``)."""
    store.vector_admitted += k
    applied = np.flatnonzero(admitted[:k])
    topics = block.topics
    need = applied[rows[applied] < 0]
    if len(need):  # new partitions, in log order: the first line of each (a PartitionRecord) creates its row
        created: dict[tuple[int, int], int] = {}
        for j in need.tolist():
            key = (int(codes[j]), int(pids[j]))
            row = created.get(key)
            if row is None:
                row = created[key] = store.new_row(store.topic(topics[key[0]]), key[1])
            rows[j] = row
    applied_offsets = offsets[applied]
    store.image.positions.commit_lines(
        seqs[:k],
        block.source_codes[lo : lo + k],
        block.source_names,
        np.flatnonzero(~source_dup[:k]),
        applied + lo,
        applied_offsets,
        block.raws,
    )
    if not len(applied):
        return
    store.stage_lines(block, applied + lo, rows[applied], applied_offsets)
    store.image.topics.changed.update(topics[c] for c in np.unique(codes[applied[is_pr[applied]]]).tolist())
