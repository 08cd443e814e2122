"""Replay: read event lines, apply them in order through the core, count everything (`elrwatch replay`).

The lines go through one `DumpReader` for the whole input (several files are read as one stream, in order), so
DumpLogSegments output works as Kafka prints it: a snapshot's dump first, then the dumps of the segments after it
(their records below the snapshot's end offset are covered and counted, not applied), with or without
``--skip-record-metadata``. An input whose log starts past offset 0 without a snapshot, or past the end of the
snapshot before it, is partial (`PartialInput`).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from elrwatch.state.cluster import RUNTIME_STORE, ClusterState
from elrwatch.state.gauges import PipelineCounts
from elrwatch.state.outcome import Outcome
from elrwatch.state.records import DumpReader, Ignored, Record, RecordError, Skipped, parse_envelope
from elrwatch.state.report import build_document, load_advice

GC_FREEZE_EVERY = 100_000
#: The quarantine reasons of a record about a partition, topic or broker the state never saw created.
UNRESOLVED_REASONS = frozenset({"unknown_topic", "unknown_partition", "unknown_broker"})
#: At most this many partitions (and as many topics, brokers) are named in the report's ``partial``.
PARTIAL_NAME_LIMIT = 1000


class PartialInput:
    """The input misses the metadata offsets ``missing_from`` .. ``log_start`` - 1: its log starts past offset 0
    without a snapshot, or past the end offset of the snapshot before it. What was created there is unknown.

    Records about partitions, topics and brokers created before ``log_start`` cannot be applied; they are counted
    and their entities named here (at most `PARTIAL_NAME_LIMIT` of each kind) instead of being quarantined one by
    one: on such an input they are expected, not bad records. The brokers named also include those that hold
    replicas of the partitions applied but were never seen registered (the state takes them for down).
    """

    def __init__(self, log_start: int, missing_from: int = 0) -> None:
        self.log_start = log_start
        self.missing_from = missing_from
        self.records = 0
        self.partitions: set[tuple[str, int]] = set()
        self.topics: set[str] = set()
        self.brokers: set[int] = set()
        self.truncated = False

    def note(self, record: Record) -> None:
        """Count a record that refers to something created before the input starts, and name that."""
        self.records += 1
        data = record.data
        if "partitionId" in data and "topicId" in data:
            self._add(self.partitions, (data["topicId"], data["partitionId"]))
        elif "topicId" in data:
            self._add(self.topics, data["topicId"])
        elif "topicName" in data:
            self._add(self.topics, data["topicName"])
        broker = data.get("brokerId", data.get("id")) if "partitionId" not in data else None
        if isinstance(broker, int):
            self._add(self.brokers, broker)

    def _add(self, names: set[Any], name: Any) -> None:
        if name in names:
            return
        if len(names) >= PARTIAL_NAME_LIMIT:
            self.truncated = True
            return
        names.add(name)

    def note_unregistered_replicas(self, cluster: ClusterState) -> None:
        """Name the brokers that hold replicas of the partitions applied but were never seen registered."""
        known = cluster.brokers
        for _topic, partition in cluster.iter_partitions():
            for broker in partition.replicas:
                if broker not in known and broker not in self.brokers:
                    self._add(self.brokers, broker)

    def message(self) -> str:
        """One line for an operator (stderr)."""
        if self.missing_from == 0:
            where = f"the input starts at metadata offset {self.log_start} without a snapshot"
        else:
            where = (
                f"the snapshot ends at metadata offset {self.missing_from} but the log after it starts at "
                f"{self.log_start} (offsets {self.missing_from}-{self.log_start - 1} are missing)"
            )
        return (
            f"{where}: the state is partial (what was created before offset {self.log_start} is unknown); "
            f"{self.records} record(s) about {len(self.partitions)} partition(s) and {len(self.topics)} topic(s) "
            f"never seen created or brokers never seen registered were not applied; {len(self.brokers)} broker(s) "
            "never seen registered are taken for down (the report's partial names them)"
        )

    def to_dict(self) -> dict[str, Any]:
        """The report's ``partial``."""
        return {
            "message": self.message(),
            "logStartOffset": self.log_start,
            "missingFromOffset": self.missing_from,
            "unresolvedRecords": self.records,
            "partitions": [{"topicId": t, "partitionId": p} for t, p in sorted(self.partitions)],
            "topics": sorted(self.topics),
            "brokers": sorted(self.brokers),
            "truncated": self.truncated,
        }


class ReplayInputError(Exception):
    """The input could not be read at all (missing file, a directory, permission denied)."""


class Replayer:
    """Applies parsed events to a `ClusterState` and keeps the pipeline counts and the quarantine."""

    def __init__(
        self,
        default_min_isr: int | None = None,
        cluster: ClusterState | None = None,
        track_changes: bool = True,
        store: str = RUNTIME_STORE,
    ) -> None:
        """``track_changes=False`` when only the final state is read (see `ClusterState`); ``store``: the partition
        store of a new state (`cluster.STORES`)."""
        self.cluster = (
            cluster
            if cluster is not None
            else ClusterState(default_min_isr=default_min_isr, track_changes=track_changes, store=store)
        )
        self.counts = PipelineCounts()
        self.quarantined: list[RecordError] = []
        self.reader = DumpReader()
        #: Log records below the end offset of the snapshot read before them (not applied).
        self.covered_by_snapshot = 0
        self.snapshot_records = 0
        self.partial: PartialInput | None = None

    def feed_line(self, line: str | bytes, source: str, seq: int, position: str | None = None) -> Outcome | None:
        """Parse and apply one input line; returns the outcome (None for ignored and skipped lines, and for the
        records of a partial input about what it never saw created)."""
        reader = self.reader
        if reader.plain and type(line) is bytes and line[:1] == b"{":  # the hot path: an envelope, nothing to place
            return self.feed_parsed(parse_envelope(line, source=source, seq=seq, position=position))
        parsed = reader.parse(line, source, seq, position)
        if self.partial is None and reader.gap is not None:
            self.partial = PartialInput(reader.gap[1], reader.gap[0])
        return self.feed_parsed(parsed, reader.snapshot_end)

    def feed_parsed(
        self, parsed: Record | RecordError | Ignored | Skipped, snapshot_end: int | None = None
    ) -> Outcome | None:
        """Apply one parse result (``snapshot_end``: it is a record of a snapshot with that end offset)."""
        counts = self.counts
        if isinstance(parsed, Record):
            counts.events_by_type[parsed.type] += 1
            if parsed.timestamp_ms is not None and (
                counts.last_event_ms is None or parsed.timestamp_ms > counts.last_event_ms
            ):
                counts.last_event_ms = parsed.timestamp_ms
            outcome = self.cluster.apply(parsed, snapshot_end)
            if outcome is Outcome.APPLIED:
                counts.applied += 1
                if snapshot_end is not None or parsed.snapshot_end is not None:
                    self.snapshot_records += 1
            elif outcome is Outcome.DUPLICATE:
                counts.duplicates += 1
            elif outcome is Outcome.COVERED:
                self.covered_by_snapshot += 1
            elif outcome is Outcome.QUARANTINED:
                error = self.cluster.last_error
                assert error is not None
                if self.partial is not None and error.reason in UNRESOLVED_REASONS:
                    self.partial.note(parsed)
                    return None
                error.raw = error.raw or _raw(parsed)
                self._quarantine(error)
            return outcome
        if isinstance(parsed, RecordError):
            counts.events_by_type[parsed.type or "invalid"] += 1
            self._quarantine(parsed)
            return Outcome.QUARANTINED
        if isinstance(parsed, Skipped):
            counts.events_by_type[parsed.type] += 1
            counts.skipped_by_type[parsed.type] += 1
            return None
        counts.ignored_lines += 1
        return None

    def _quarantine(self, error: RecordError) -> None:
        self.counts.quarantined_by_reason[error.reason] += 1
        self.quarantined.append(error)

    def feed_lines(self, lines: Iterable[str | bytes], source: str, first_seq: int = 1) -> None:
        """Apply lines in order; their positions are ``source:<line number>``.

        The state is long-lived and applying records makes no reference cycles (a test replays the simulator's
        scenarios to check it), so the cyclic GC would only rescan the growing state: it is paused while lines
        are fed, and every `GC_FREEZE_EVERY` lines `gc.freeze()` moves the new state out of later collections'
        way. Only when records were quarantined since the last freeze does one collection of the young
        generations come first, to free any cycle an error path made (a frozen cycle is never freed); a clean
        stream skips it (it rescanned every object made since the last freeze: ≈ 10 % of applying changes).
        """
        feed = self.feed_line
        was_enabled = gc.isenabled()
        gc.disable()
        quarantined_before = len(self.quarantined)
        try:
            for seq, line in enumerate(lines, start=first_seq):
                feed(line, source, seq)
                if seq % GC_FREEZE_EVERY == 0:
                    if len(self.quarantined) != quarantined_before:
                        gc.collect(1)
                        quarantined_before = len(self.quarantined)
                    gc.freeze()
        finally:
            if was_enabled:
                gc.enable()

    def document(self, advice: bool = True) -> dict[str, Any]:
        """The report document of the current state (DESIGN.md §5), with what the input itself was: ``snapshot``
        when it began with a snapshot, ``partial`` when it starts past offset 0 without one (both only then)."""
        document = build_document(self.cluster, self.counts, self.quarantined, load_advice() if advice else None)
        if self.reader.snapshots or self.cluster.snapshot_end_offset is not None:
            # a dump's snapshot header, else the end offset of the snapshot envelopes ("snapshotEnd") applied
            end: int | None = self.cluster.snapshot_end_offset
            epoch: int | None = None
            if self.reader.snapshots:
                end, epoch = self.reader.snapshots[-1]
            document["snapshot"] = {
                "endOffset": end,
                "epoch": epoch,
                "records": self.snapshot_records,
                "coveredLogRecords": self.covered_by_snapshot,
            }
        if self.partial is not None:
            self.partial.note_unregistered_replicas(self.cluster)
            document["partial"] = self.partial.to_dict()
        return document


def _raw(record: Record) -> str:
    import orjson

    return orjson.dumps(record.envelope()).decode()


def _open_lines(path: str) -> tuple[str, Iterator[bytes], BinaryIO | None]:
    if path == "-":
        return "stdin", iter(sys.stdin.buffer), None
    file_path = Path(path)
    if not file_path.exists():
        raise ReplayInputError(f"cannot read {path}: no such file")
    if file_path.is_dir():
        raise ReplayInputError(f"cannot read {path}: is a directory")
    try:
        handle = file_path.open("rb")
    except OSError as exc:
        raise ReplayInputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return path, iter(handle), handle


def replay_lines(
    lines: Iterable[str | bytes], source: str = "input", default_min_isr: int | None = None, store: str = RUNTIME_STORE
) -> Replayer:
    """Replay lines into a fresh state (of ``store``) and return the replayer (state, counts, quarantine)."""
    replayer = Replayer(default_min_isr=default_min_isr, track_changes=False, store=store)
    replayer.feed_lines(lines, source)
    return replayer


def replay_file(path: str | Sequence[str], default_min_isr: int | None = None, store: str = RUNTIME_STORE) -> Replayer:
    """Replay a file, or several in order as one input (e.g. a snapshot's dump, then its segments' dumps); '-'
    is stdin, into a fresh state of ``store``. Raises `ReplayInputError` when one cannot be read (before anything
    is replayed)."""
    paths = [path] if isinstance(path, str) else list(path) or ["-"]
    for each in paths:
        if each != "-":
            _check_readable(each)
    replayer = Replayer(default_min_isr=default_min_isr, track_changes=False, store=store)
    for each in paths:
        source, lines, handle = _open_lines(each)
        try:
            replayer.feed_lines(lines, source)
        except OSError as exc:
            raise ReplayInputError(f"error reading {each}: {exc}") from exc
        finally:
            if handle is not None:
                handle.close()
    return replayer


def _check_readable(path: str) -> None:
    file_path = Path(path)
    if not file_path.exists():
        raise ReplayInputError(f"cannot read {path}: no such file")
    if file_path.is_dir():
        raise ReplayInputError(f"cannot read {path}: is a directory")


def replay_to_document(
    path: str | Sequence[str], default_min_isr: int | None = None, advice: bool = True
) -> dict[str, Any]:
    """Replay a file (or several, in order) and build its report document."""
    return replay_file(path, default_min_isr).document(advice=advice)
