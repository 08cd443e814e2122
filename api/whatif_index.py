"""The what-if's partitions in the API's memory, as columns: answers in time proportional to the distinct
registrations it touches, not to the store.

Each partition is a row: its topic, partition id, stored effective min ISR and the id of its registration
(`elrwatch.state.whatif.registration_key`: replicas, ISR, ELR, last known ELR, leader, recovery state,
reassignment), interned: a cluster of a million partitions has a few thousand distinct registrations. A what-if
then

1. marks the registrations with a replica on a broker going down (one test per registration) and takes the rows
   that have one (a vector mask);
2. groups those rows by (registration, topic context) (``np.unique``) and takes each group through the controller
   model once (`Outage.outcome`, the same code as the object path);
3. spreads each group's flags back over its rows (counts) and lists the first ``limit`` rows per outcome, in
   (topic, partition) order.

The index follows the store: before a query it reads only the rows written since it last looked (the
``written_batch`` column), or everything again when partitions were removed or the store reloaded
(``StatusStore.scan_registrations``). Brokers, topic settings, ELR and the metadata version are read at query time
from the same snapshot.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np

from elrwatch.api.heavy import NO_DEADLINE, Deadline
from elrwatch.state.model import PartitionState
from elrwatch.state.report import StoreView
from elrwatch.state.whatif import AFTER, BEFORE, CATEGORIES, CHANGED, MOVED, Outage, entry
from elrwatch.store import StatusStore

_GROW = 1.5
log = logging.getLogger("elrwatch.api")


def _registration_state(key: tuple[Any, ...]) -> PartitionState:
    """A PartitionState holding a registration key's fields (ids left empty: the answer gives them per row)."""
    replicas, isr, elr, last_known_elr, leader, recovery, adding, removing = key
    p = PartitionState("", -1, replicas, isr, elr, last_known_elr, leader)
    p.leader_recovery_state = recovery
    p.adding_replicas = adding
    p.removing_replicas = removing
    return p


class WhatIfIndex:
    """The store's partitions as columns (see the module docstring); `run` answers a what-if from them."""

    def __init__(self, store: StatusStore) -> None:
        self.store = store
        self._lock = threading.Lock()  # one refresh at a time; queries read a consistent set of columns
        self.position: tuple[str | None, int | None] | None = None
        self.store_view: StoreView | None = None
        self.ready = threading.Event()  # set once the first refresh read the store
        self._starting = threading.Lock()
        self._builder: threading.Thread | None = None
        self._reset()

    def build_in_background(self) -> threading.Thread:
        """The first (whole) read in a daemon thread: until it is done, the API answers a what-if from the store
        directly (`elrwatch.api.whatif.run_whatif`)."""

        with self._starting:
            if self._builder is not None and (self._builder.is_alive() or self.ready.is_set()):
                return self._builder

            def build() -> None:
                try:
                    self.refresh()
                except Exception:  # the store not there yet (the job has not written it): the next query tries again
                    log.warning("the what-if index could not read the store yet", exc_info=True)

            self._builder = threading.Thread(target=build, name="elrwatch-whatif-index", daemon=True)
            self._builder.start()
            return self._builder

    def _reset(self) -> None:
        self.size = 0
        self.topic = np.zeros(0, np.int32)
        self.partition_id = np.zeros(0, np.int32)
        self.min_isr = np.zeros(0, np.int32)
        self.registration = np.zeros(0, np.int32)
        self.topic_names: list[str] = []
        self.topic_index: dict[str, int] = {}
        self.rows_of_topic: list[dict[int, int]] = []
        self.registrations: list[tuple[Any, ...]] = []
        self.registration_index: dict[tuple[Any, ...], int] = {}
        self.replica_sets: list[frozenset[int]] = []
        self._order: np.ndarray | None = None  # rows in (topic name, partition id) order

    # ------------------------------------------------------------------ following the store

    def refresh(self) -> int:
        """Read what the store wrote since the last refresh (everything the first time, or after removals);
        returns how many rows were read."""
        with self._lock:
            read = 0

            def consume(rows: list[tuple[str, str, int, int | None, tuple[Any, ...]]]) -> None:
                nonlocal read
                read += len(rows)
                self._apply(rows)

            self.position, _whole, self.store_view = self.store.scan_registrations(consume, self.position, self._reset)
            self.ready.set()
            return read

    def _apply(self, rows: list[tuple[str, str, int, int | None, tuple[Any, ...]]]) -> None:
        """Set or add these rows."""
        need = self.size + len(rows)
        if need > len(self.topic):
            capacity = max(need, int(len(self.topic) * _GROW) + 1024)
            for name in ("topic", "partition_id", "min_isr", "registration"):
                column = getattr(self, name)
                grown = np.zeros(capacity, column.dtype)
                grown[: self.size] = column[: self.size]
                setattr(self, name, grown)
        for topic_name, _topic_id, partition_id, min_isr, key in rows:
            t = self.topic_index.get(topic_name)
            if t is None:
                t = self.topic_index[topic_name] = len(self.topic_names)
                self.topic_names.append(topic_name)
                self.rows_of_topic.append({})
            r = self.registration_index.get(key)
            if r is None:
                r = self.registration_index[key] = len(self.registrations)
                self.registrations.append(key)
                self.replica_sets.append(frozenset(key[0]))
            rows_here = self.rows_of_topic[t]
            row = rows_here.get(partition_id)
            if row is None:
                row = rows_here[partition_id] = self.size
                self.size += 1
                self.topic[row] = t
                self.partition_id[row] = partition_id
                self._order = None
            self.min_isr[row] = 1 if min_isr is None else min_isr  # unknown (no replicas): Kafka's least
            self.registration[row] = r

    def _rank(self) -> np.ndarray:
        """Each row's place in (topic name, partition id) order (the order of the answer's lists)."""
        if self._order is None or len(self._order) != self.size:
            n = self.size
            names = np.array(self.topic_names, dtype=object)
            topic_rank = np.empty(len(names), np.int64)
            topic_rank[np.argsort(names, kind="stable")] = np.arange(len(names))
            order = np.lexsort((self.partition_id[:n], topic_rank[self.topic[:n]]))
            rank = np.empty(n, np.int64)
            rank[order] = np.arange(n)
            self._order = rank
        return self._order

    # ------------------------------------------------------------------ answering

    def run(
        self, down: list[int], *, unclean: bool, limit: int | None, deadline: Deadline = NO_DEADLINE
    ) -> dict[str, Any]:
        """The what-if of ``down`` (in order) over the store as it is now (`refresh` first)."""
        self.refresh()
        deadline.check()
        with self._lock:
            view = self.store_view
            assert view is not None
            outage = Outage(view.brokers, down, unclean)
            gone = set(outage.down)
            n = self.size
            hit = np.fromiter(
                (not gone.isdisjoint(replicas) for replicas in self.replica_sets), bool, len(self.replica_sets)
            )
            rows = np.flatnonzero(hit[self.registration[:n]])
            unclean_of_topic = np.fromiter(
                (view.unclean_of(name) for name in self.topic_names), np.int64, len(self.topic_names)
            )
            context = self.min_isr[rows].astype(np.int64) * 2 + unclean_of_topic[self.topic[rows]]
            width = int(context.max()) + 1 if len(rows) else 1
            groups, inverse = np.unique(self.registration[rows].astype(np.int64) * width + context, return_inverse=True)
            flags = np.zeros((len(groups), MOVED + 1), bool)
            states: list[tuple[PartitionState, PartitionState]] = []
            for i, code in enumerate(groups.tolist()):
                if not i & 0xFF:
                    deadline.check()
                registration, ctx_code = divmod(code, width)
                min_isr, topic_unclean = divmod(ctx_code, 2)
                before, after, group_flags = outage.take_down(
                    _registration_state(self.registrations[registration]), view.context(min_isr, bool(topic_unclean))
                )
                flags[i] = group_flags
                states.append((before, after))
            row_flags = flags[inverse]
            before_counts = row_flags[:, BEFORE].sum(axis=0).tolist()
            after_counts = row_flags[:, AFTER].sum(axis=0).tolist()
            lists: dict[str, list[dict[str, Any]]] = {}
            rank = self._rank() if len(rows) else np.zeros(0, np.int64)
            for j, name in enumerate(CATEGORIES):
                chosen = np.flatnonzero(row_flags[:, AFTER.start + j])
                if limit is not None and len(chosen) > limit:
                    keep = np.argpartition(rank[rows[chosen]], limit - 1)[:limit] if limit else chosen[:0]
                    chosen = chosen[keep]
                chosen = chosen[np.argsort(rank[rows[chosen]], kind="stable")]
                lists[name] = [
                    entry(
                        self.topic_names[self.topic[rows[i]]],
                        int(self.partition_id[rows[i]]),
                        states[inverse[i]][1],
                        states[inverse[i]][0],
                    )
                    for i in chosen.tolist()
                ]
            result = outage.result(
                len(rows),
                int(row_flags[:, CHANGED].sum()),
                int(row_flags[:, MOVED].sum()),
                dict(zip(CATEGORIES, before_counts, strict=True)),
                dict(zip(CATEGORIES, after_counts, strict=True)),
                lists,
            )
            result["distinctRegistrations"] = len(groups)
            return result
