"""Replay: read event lines, apply them in order through the core, count everything (`elrwatch replay`)."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from elrwatch.state.cluster import ClusterState, Outcome
from elrwatch.state.gauges import PipelineCounts
from elrwatch.state.records import Ignored, Record, RecordError, Skipped, parse_line
from elrwatch.state.report import build_document, load_advice

GC_FREEZE_EVERY = 100_000


class ReplayInputError(Exception):
    """The input could not be read at all (missing file, a directory, permission denied)."""


class Replayer:
    """Applies parsed events to a `ClusterState` and keeps the pipeline counts and the quarantine."""

    def __init__(
        self, default_min_isr: int = 1, cluster: ClusterState | None = None, track_changes: bool = True
    ) -> None:
        """``track_changes=False`` when only the final state is read (see `ClusterState`)."""
        self.cluster = (
            cluster
            if cluster is not None
            else ClusterState(default_min_isr=default_min_isr, track_changes=track_changes)
        )
        self.counts = PipelineCounts()
        self.quarantined: list[RecordError] = []

    def feed_line(self, line: str | bytes, source: str, seq: int, position: str | None = None) -> Outcome | None:
        """Parse and apply one input line; returns the outcome (None for ignored and skipped lines)."""
        parsed = parse_line(line, source, seq, position)
        return self.feed_parsed(parsed)

    def feed_parsed(self, parsed: Record | RecordError | Ignored | Skipped) -> Outcome | None:
        """Apply one parse result."""
        counts = self.counts
        if isinstance(parsed, Record):
            counts.events_by_type[parsed.type] += 1
            if parsed.timestamp_ms is not None and (
                counts.last_event_ms is None or parsed.timestamp_ms > counts.last_event_ms
            ):
                counts.last_event_ms = parsed.timestamp_ms
            outcome = self.cluster.apply(parsed)
            if outcome is Outcome.APPLIED:
                counts.applied += 1
            elif outcome is Outcome.DUPLICATE:
                counts.duplicates += 1
            elif outcome is Outcome.QUARANTINED:
                error = self.cluster.last_error
                assert error is not None
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
        """The report document of the current state (DESIGN.md §5)."""
        return build_document(self.cluster, self.counts, self.quarantined, load_advice() if advice else None)


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


def replay_lines(lines: Iterable[str | bytes], source: str = "input", default_min_isr: int = 1) -> Replayer:
    """Replay lines into a fresh state and return the replayer (state, counts, quarantine)."""
    replayer = Replayer(default_min_isr=default_min_isr, track_changes=False)
    replayer.feed_lines(lines, source)
    return replayer


def replay_file(path: str, default_min_isr: int = 1) -> Replayer:
    """Replay a file (or '-' for stdin). Raises `ReplayInputError` when it cannot be read."""
    source, lines, handle = _open_lines(path)
    try:
        return replay_lines(lines, source, default_min_isr)
    except OSError as exc:
        raise ReplayInputError(f"error reading {path}: {exc}") from exc
    finally:
        if handle is not None:
            handle.close()


def replay_to_document(path: str, default_min_isr: int = 1, advice: bool = True) -> dict[str, Any]:
    """Replay a file and build its report document."""
    return replay_file(path, default_min_isr).document(advice=advice)
