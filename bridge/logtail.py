"""``elrwatch bridge --source metadata-log``: follow a node's ``__cluster_metadata-0`` directory.

`MetadataLogTail.poll()` returns the records appended since the previous call, decoded by `metadata_log`:

* **start**: when the log no longer holds the next offset to publish (segments deleted after a snapshot) or on the
  very first start with a snapshot newer than offset 0, the newest ``<endOffset>-<epoch>.checkpoint`` is read and
  its records are published with offset ``endOffset - 1`` (a snapshot is the state *at* that offset; the core's
  per-entity offsets then order it before every later record); then the segments from the snapshot's end offset;
* **follow**: the current segment is read from where the previous poll stopped; a batch cut by the end of the file
  (the writer is mid-append) is left for the next poll, not an error; the next segment is entered once it exists;
* **divergence**: Kafka truncates records above the high watermark when the quorum leader changes. Before reading
  on, the tail checks that the last batch it read is still there with the same CRC; when it is not (or the file
  shrank or vanished) it re-reads the recent window and compares each record already published with what it
  published (CRC32C of the value). A record that came back with other content is returned with
  ``diverged=True``: the runner logs it, counts it and publishes it with ``"diverged": true``, which the core
  quarantines as a ``conflict`` (its state may hold the replaced record).

Errors (a batch with a bad CRC, an unknown record type, an unsupported codec) are reported through ``on_error``
with a bounded reason and skipped; the tail keeps going.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c

from elrwatch.bridge import metadata_log
from elrwatch.bridge.metadata_log import Decoded

log = logging.getLogger("elrwatch.bridge")

_SEGMENT = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
#: How many published offsets keep their value's CRC for divergence checks (only the uncommitted tail can diverge).
DIVERGENCE_WINDOW = 100_000


@dataclass
class TailState:
    """What survives a restart (the bridge's state file): the last offset published and where to read on."""

    last_offset: int = -1
    segment: int | None = None  # base offset of the segment being read
    position: int = 0  # next byte to read in it
    last_batch: tuple[int, int] | None = None  # (position, crc) of the last batch read in it
    hashes: dict[int, int] = field(default_factory=dict)  # offset → CRC32C of the published value (recent)

    def to_json(self) -> dict[str, Any]:
        return {
            "lastOffset": self.last_offset,
            "segment": self.segment,
            "position": self.position,
            "lastBatch": list(self.last_batch) if self.last_batch else None,
            "hashes": [[o, h] for o, h in sorted(self.hashes.items())[-10_000:]],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TailState:
        last_batch = doc.get("lastBatch")
        return cls(
            int(doc.get("lastOffset", -1)),
            doc.get("segment"),
            int(doc.get("position", 0)),
            tuple(last_batch) if last_batch else None,  # type: ignore[arg-type]
            {int(o): int(h) for o, h in doc.get("hashes", [])},
        )


@dataclass
class TailRecord:
    """A record to publish: decoded, its publish offset, and whether it replaces different content."""

    decoded: Decoded
    offset: int
    diverged: bool = False
    from_snapshot: bool = False


def segments(log_dir: Path) -> list[tuple[int, Path]]:
    """(base offset, path) of the ``*.log`` segments, in order."""
    found = []
    for entry in os.scandir(log_dir):
        match = _SEGMENT.match(entry.name)
        if match:
            found.append((int(match.group(1)), Path(entry.path)))
    return sorted(found)


def snapshots(log_dir: Path) -> list[tuple[int, int, Path]]:
    """(end offset, epoch, path) of the complete ``*.checkpoint`` snapshots, in order (``.part`` files skipped)."""
    found = []
    for entry in os.scandir(log_dir):
        match = _SNAPSHOT.match(entry.name)
        if match:
            found.append((int(match.group(1)), int(match.group(2)), Path(entry.path)))
    return sorted(found)


def value_hash(decoded: Decoded) -> int:
    return crc32c.crc32c(decoded.value or b"")


class MetadataLogTail:
    """Follows one ``__cluster_metadata-0`` directory; see the module docstring."""

    def __init__(
        self,
        log_dir: str | os.PathLike,
        state: TailState | None = None,
        on_error: Callable[[str, str], None] | None = None,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.state = state or TailState()
        self.on_error = on_error or (lambda reason, message: log.warning("%s: %s", reason, message))
        self._rescan = False

    # -- public ------------------------------------------------------------------------------------------------------

    def poll(self, max_bytes: int = 8 << 20) -> list[TailRecord]:
        """The records to publish now (possibly none): at most ``max_bytes`` of segments a call (~80k records, so
        that one publish and its pending copy in the state file stay bounded; a snapshot is read whole). Never
        raises on bad data; a missing directory raises FileNotFoundError (the runner counts it and retries)."""
        segs = segments(self.log_dir)
        out: list[TailRecord] = []
        st = self.state
        next_offset = st.last_offset + 1
        if st.segment is None or not any(base == st.segment for base, _ in segs):
            first_base = segs[0][0] if segs else None
            if st.segment is not None and first_base is not None and next_offset >= first_base:
                # Our segment vanished but the log still holds what comes next: truncated away (a diverged log)
                # or deleted behind us; compare the recent window again.
                self._rescan = True
            self._choose_segment(segs, next_offset, out)  # past the log's start: the newest snapshot first
        else:
            self._check_last_batch(segs)
        if self._rescan:
            self._rewind(segs)
        budget = max_bytes
        while st.segment is not None and budget > 0:
            path = self.log_dir / f"{st.segment:020d}.log"
            try:
                with open(path, "rb") as fh:
                    fh.seek(st.position)
                    chunk = fh.read(budget)
            except FileNotFoundError:
                self._rescan = True
                break
            result = metadata_log.scan(chunk)
            for reason, message in result.errors:
                self.on_error(reason, f"{path.name}: {message}")
            self._take(result.records, out)
            if result.end:
                last_pos, last_crc = self._last_batch_of(chunk, result.end)
                st.last_batch = (st.position + last_pos, last_crc)
            st.position += result.end
            budget -= result.end
            if result.end < len(chunk) or not chunk:
                if not chunk or result.truncated:
                    # End of this segment (or the writer is mid-batch): go on with a newer segment only when
                    # this one is complete, i.e. nothing is left after the last complete batch.
                    later = [base for base, _ in segs if base > st.segment]
                    if later and result.end == len(chunk):
                        st.segment, st.position, st.last_batch = later[0], 0, None
                        continue
                break
            if budget <= 0:
                break
            later = [base for base, _ in segs if base > st.segment]
            if not later:
                break
            st.segment, st.position, st.last_batch = later[0], 0, None  # Kafka rolled the log
        self._prune()
        return out

    # -- internals ---------------------------------------------------------------------------------------------------

    def _choose_segment(self, segs: list[tuple[int, Path]], next_offset: int, out: list[TailRecord]) -> None:
        """Pick the segment holding ``next_offset``; read the newest snapshot first when the log cannot serve it."""
        st = self.state
        snaps = [s for s in snapshots(self.log_dir) if s[0] > 0]
        first_base = segs[0][0] if segs else None
        gap = first_base is None or next_offset < first_base
        fresh = st.last_offset < 0 and snaps and snaps[-1][0] > (first_base or 0)
        if snaps and (fresh or (gap and snaps[-1][0] > next_offset)):
            end_offset, _, path = snaps[-1]
            self._read_snapshot(path, end_offset, out)
            next_offset = end_offset
        elif gap and first_base is not None and next_offset < first_base:
            self.on_error(
                "log_gap",
                f"offsets {next_offset}..{first_base - 1} are gone from {self.log_dir} and no snapshot covers them",
            )
        candidates = [base for base, _ in segs if base <= max(next_offset, first_base or 0)]
        st.segment = candidates[-1] if candidates else (segs[0][0] if segs else None)
        st.position, st.last_batch = 0, None

    def _read_snapshot(self, path: Path, end_offset: int, out: list[TailRecord]) -> None:
        result = metadata_log.scan(path.read_bytes())
        for reason, message in result.errors:
            self.on_error(reason, f"{path.name}: {message}")
        if result.truncated:
            self.on_error("decode_error", f"{path.name}: the snapshot ends inside a batch")
        offset = end_offset - 1
        for decoded in result.records:
            if decoded.type is not None:
                out.append(TailRecord(decoded, offset, from_snapshot=True))
        self.state.last_offset = max(self.state.last_offset, offset)

    def _check_last_batch(self, segs: list[tuple[int, Path]]) -> None:
        """Is the last batch we read still where it was, with the same CRC? If not, the log was truncated."""
        st = self.state
        path = self.log_dir / f"{st.segment:020d}.log"
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            self._rescan = True
            return
        if size < st.position:
            self._rescan = True
            return
        if st.last_batch is None:
            return
        pos, crc = st.last_batch
        try:
            with open(path, "rb") as fh:
                fh.seek(pos)
                head = fh.read(metadata_log.HEADER_SIZE)
        except FileNotFoundError:
            self._rescan = True
            return
        if len(head) < metadata_log.HEADER_SIZE or struct.unpack_from(">I", head, 17)[0] != crc:
            self._rescan = True

    def _rewind(self, segs: list[tuple[int, Path]]) -> None:
        """Re-read from the segment holding the oldest offset still in the divergence window."""
        st = self.state
        self._rescan = False
        low = min(st.hashes) if st.hashes else st.last_offset + 1
        candidates = [base for base, _ in segs if base <= low]
        st.segment = candidates[-1] if candidates else (segs[0][0] if segs else None)
        st.position, st.last_batch = 0, None
        log.warning(
            "the metadata log in %s changed under the bridge (truncated or rolled away); re-reading from "
            "segment %s to compare what was published",
            self.log_dir,
            st.segment,
        )

    def _take(self, records: list[Decoded], out: list[TailRecord]) -> None:
        st = self.state
        for decoded in records:
            if decoded.type is None:
                continue  # undecodable: already reported by scan
            if decoded.offset <= st.last_offset:
                known = st.hashes.get(decoded.offset)
                if known is None or known == value_hash(decoded):
                    continue  # published before with this content (or too old to compare)
                st.hashes[decoded.offset] = value_hash(decoded)
                out.append(TailRecord(decoded, decoded.offset, diverged=True))
                continue
            st.hashes[decoded.offset] = value_hash(decoded)
            st.last_offset = decoded.offset
            out.append(TailRecord(decoded, decoded.offset))

    @staticmethod
    def _last_batch_of(chunk: bytes, end: int) -> tuple[int, int]:
        """(position, crc) of the last complete batch before ``end`` in ``chunk``."""
        pos = last = 0
        while pos < end:
            last = pos
            (length,) = struct.unpack_from(">i", chunk, pos + 8)
            pos += metadata_log.LOG_OVERHEAD + length
        return last, struct.unpack_from(">I", chunk, last + 17)[0]

    def _prune(self) -> None:
        hashes = self.state.hashes
        if len(hashes) > DIVERGENCE_WINDOW:
            floor = self.state.last_offset - DIVERGENCE_WINDOW
            for offset in [o for o in hashes if o < floor]:
                del hashes[offset]
