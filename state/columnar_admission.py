"""The admission of a block of partition-record lines into a columnar segment as vectors (`ColumnarState._classify`
for many records at once, from their columns: `columnar_lines.LineBlock`).

The checks `_classify` makes one record at a time, in log order (source position, snapshot cover, the
recent-offsets ring, topic, ownership, row, per-partition offset), are made here for the block's lines at once,
each against the state the lines before it leave. A line whose outcome those vectors cannot settle for certain is
*irregular*: no metadata offset, a metadata offset applied before (in the ring or earlier in the block), an
unknown topic, another bucket's partition, a change of an unknown partition, an offset not above its partition's
last. The lines before the first irregular one are admitted as vectors; that one is built as a Record and goes
through `_classify` (which decides it exactly, error or duplicate included), then the rest of the block again.
A certain line has no ``source`` or ``snapshotEnd`` key (`partition_lines`), so neither is looked at.

What a regular line can be, and what admitting it does, is exactly what `_classify` does for it:

* DUPLICATE: its sequence is not above its source's position (the source's last, or a line before it in the
  block); nothing else happens.
* COVERED: below the snapshot end offset; its source position moves.
* APPLIED: its source position moves, its partition's row is created by a PartitionRecord when new (in log
  order), the line joins the segment (a piece of the block), its offset becomes its partition's pending offset
  and takes its ring slot (the raw line: `columnar_lines.RawLine`, parsed only on a hit).

Stretches of irregular lines (a re-sent log, a stream of errors) go through `_classify` one by one without the
vectors' fixed cost (`admit_block`'s back-off).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from elrwatch.state.cluster import RECENT_OFFSETS, Outcome
from elrwatch.state.partition_lines import RawLine
from elrwatch.state.routing import bucket_of

#: The engine (`columnar.ColumnarState`) and a block (`columnar_lines.LineBlock`); not imported, as both modules
#: import this one or the engine (the import graph has no cycles: tests/test_import_graph.py).
ColumnarState = Any
LineBlock = Any

#: int64 None of the vectors here (``columnar.NONE``).
_NONE: Final = np.iinfo(np.int64).min
#: The window after an irregular line (twice the regular stretch before it, at least this).
MIN_WINDOW: Final = 1024
MAX_WINDOW: Final = 1 << 18
#: After an irregular line that ended a short regular stretch, the next lines go one by one (doubling up to
#: `MAX_SINGLES` while it goes on) before the vectors are tried again.
SHORT_PREFIX: Final = 8
MAX_SINGLES: Final = 4096


def admit_block(engine: ColumnarState, block: LineBlock, outcomes: list[Outcome], errors: list[Any], note: Any) -> None:
    """Admit ``block``'s lines into the engine's segment in log order: a regular line's outcome goes to
    ``outcomes`` (and None to ``errors``), an irregular one's, classified by ``engine._classify``, through
    ``note(record, outcome)``."""
    n = len(block)
    i = 0
    window = MAX_WINDOW
    singles = backoff = 0
    while i < n:
        if singles:
            stop = min(n, i + singles)
            for j in range(i, stop):
                record = block.record(j)
                note(record, engine._classify(record))
            i = stop
            singles = 0
            continue
        hi = min(n, i + window)
        regular = _admit_regular_prefix(engine, block, i, hi)
        outcomes.extend(regular)
        errors.extend([None] * len(regular))
        i += len(regular)
        if i == hi:
            continue
        record = block.record(i)
        note(record, engine._classify(record))
        i += 1
        if len(regular) < SHORT_PREFIX:
            backoff = singles = min(MAX_SINGLES, max(16, 2 * backoff))
        else:
            backoff = 0
        window = min(MAX_WINDOW, max(MIN_WINDOW, 2 * len(regular)))


def _admit_regular_prefix(engine: ColumnarState, block: LineBlock, lo: int, hi: int) -> list[Outcome]:
    """Admit the lines from ``lo`` up to the first irregular one below ``hi`` (see the module); their outcomes."""
    core = engine.core
    m = hi - lo
    seqs = block.seqs[lo:hi]
    offsets = block.offsets[lo:hi]
    pids = block.pids[lo:hi]
    codes = block.topic_codes[lo:hi]
    is_pr = block.is_pr[lo:hi]
    # 1. source position: a sequence not above its source's last (its position, or a line of it before it here)
    sources = block.source_codes[lo:hi]
    source_dup = np.empty(m, dtype=bool)
    for code, name in enumerate(block.source_names):
        mine = np.flatnonzero(sources == code)
        if not len(mine):
            continue
        last = core.source_seq.get(name)
        sub = seqs[mine]
        before = np.empty(len(sub), dtype=np.int64)
        before[0] = _NONE if last is None else last
        if len(sub) > 1:
            before[1:] = np.maximum(np.maximum.accumulate(sub[:-1]), before[0])
        source_dup[mine] = sub <= before
    live = ~source_dup
    # 2. no metadata offset: irregular
    irregular = live & (offsets == _NONE)
    # 3. covered by the snapshot
    covered_at = core.snapshot_end_offset
    covered = live & ~irregular & (offsets < covered_at) if covered_at is not None else np.zeros(m, dtype=bool)
    admitted = live & ~irregular & ~covered  # reach the ring and the partition checks
    # 4. the ring: an offset applied before, in the ring or earlier here
    if not core.recent_offsets:
        core.recent_offsets = [-1] * RECENT_OFFSETS
        core.recent_records = [None] * RECENT_OFFSETS
    at = np.flatnonzero(admitted)
    if len(at):
        ring = np.array(core.recent_offsets, dtype=np.int64)
        ring_hit = ring[offsets[at] % RECENT_OFFSETS] == offsets[at]
        irregular[at[ring_hit]] = True
        order = np.argsort(offsets[at], kind="stable")
        sorted_offsets = offsets[at][order]
        again = sorted_offsets[1:] == sorted_offsets[:-1]
        irregular[at[order[1:][again]]] = True
    # 5. topic, ownership, row, per-partition offset
    topics = block.topics
    unknown = [c for c, tid in enumerate(topics) if tid not in core.topics]
    at = np.flatnonzero(admitted & ~irregular)
    if unknown and len(at):
        irregular[at[np.isin(codes[at], unknown)]] = True
    bucket = engine.bucket
    if not engine._owned and bucket is not None and bucket[1] > 1:
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
        t = engine.topic_index.get(topics[c])
        if t is None:
            continue
        mine = at[codes[at] == c]
        dense = engine._dense[t]
        p = pids[mine]
        inside = p < len(dense)
        rows[mine[inside]] = dense[p[inside]]
        sparse = engine._sparse[t]
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
        latest = engine.table.cols["last_offset"][rows[old]].copy()
        pending = engine._pending
        if pending:
            pending_rows = np.fromiter(pending.keys(), np.int64, len(pending))
            pending_offsets = np.fromiter(pending.values(), np.int64, len(pending))
            order = np.argsort(pending_rows)
            pending_rows, pending_offsets = pending_rows[order], pending_offsets[order]
            where = np.minimum(np.searchsorted(pending_rows, rows[old]), len(pending_rows) - 1)
            found = pending_rows[where] == rows[old]
            latest[found] = pending_offsets[where[found]]
        irregular[old[(latest != _NONE) & (offsets[old] <= latest)]] = True
    if len(at) > 1:  # and above each earlier line of its partition here
        order = np.argsort(keys[at], kind="stable")
        sorted_keys = keys[at][order]
        sorted_offsets = offsets[at][order]
        not_above = (sorted_keys[1:] == sorted_keys[:-1]) & (sorted_offsets[1:] <= sorted_offsets[:-1])
        irregular[at[order[1:][not_above]]] = True
    k = int(np.argmax(irregular)) if irregular.any() else m
    if k == 0:
        return []
    _admit(engine, block, lo, k, seqs, source_dup, admitted, offsets, rows, codes, pids, is_pr)
    return [
        Outcome.DUPLICATE if d else Outcome.COVERED if c else Outcome.APPLIED
        for d, c in zip(source_dup[:k].tolist(), covered[:k].tolist(), strict=True)
    ]


def _admit(
    engine: ColumnarState,
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
    """What `_classify` does for the block's lines ``lo`` .. ``lo + k``, all regular (arrays: from ``lo``)."""
    core = engine.core
    engine.vector_admitted += k
    live = np.flatnonzero(~source_dup[:k])
    if len(live):  # sequences rise per source: its last live line's is its position
        codes_live = block.source_codes[lo:][live]
        for code in np.unique(codes_live).tolist():
            core.source_seq[block.source_names[code]] = int(seqs[live[codes_live == code][-1]])
    applied = np.flatnonzero(admitted[:k])
    if not len(applied):
        return
    topics = block.topics
    need = applied[rows[applied] < 0]
    if len(need):  # new partitions, in log order: the first line of each (a PartitionRecord) creates its row
        created: dict[tuple[int, int], int] = {}
        topic_index = engine.topic_index
        for j in need.tolist():
            key = (int(codes[j]), int(pids[j]))
            row = created.get(key)
            if row is None:
                t = topic_index.get(topics[key[0]])
                if t is None:
                    t = engine._topic(topics[key[0]])
                row = created[key] = engine._new_row(t, key[1])
            rows[j] = row
    applied_rows = rows[applied]
    applied_offsets = offsets[applied]
    engine._seg_rows.extend(applied_rows.tolist())
    engine._seg_pieces.append(("lines", block, applied + lo))
    engine._seg_records = []
    engine._seg_pieces.append(("records", engine._seg_records))
    offset_list = applied_offsets.tolist()
    engine._pending.update(zip(applied_rows.tolist(), offset_list, strict=True))
    engine.dirty_topics.update(topics[c] for c in np.unique(codes[applied[is_pr[applied]]]).tolist())
    # the ring: each slot keeps the last line applied at it
    slots = applied_offsets % RECENT_OFFSETS
    taken, last_from_end = np.unique(slots[::-1], return_index=True)
    ring_offsets, ring_records = core.recent_offsets, core.recent_records
    lines, names, codes_of, seq_list = block.lines, block.source_names, block.source_codes, seqs.tolist()
    where = (applied + lo).tolist()
    for slot, n in zip(taken.tolist(), (len(slots) - 1 - last_from_end).tolist(), strict=True):
        ring_offsets[slot] = offset_list[n]
        ring_records[slot] = RawLine((lines[where[n]], names[codes_of[where[n]]], seq_list[applied[n]]))
