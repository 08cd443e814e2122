"""A replica's own log, read from its partition directory without Kafka: log end offset and last written leader epoch.

What KIP-966's GetReplicaLogInfo would answer for one replica, computed from the files a broker keeps in each
``log.dirs`` entry (``<topic>-<partition>/``), reading record-batch **headers** only (record payloads are never
decoded; a batch's bytes are read only to check its CRC, as Kafka's log recovery does):

* **log end offset** — what Kafka's log loading (``LogLoader.recoverLog`` → ``LogSegment.recover``) would arrive at
  after an unclean shutdown: the segments from the one holding the recovery point (``recovery-point-offset-
  checkpoint`` of the log dir; the last segment when it is unknown) are checked batch by batch; the first batch
  that is cut by the end of the file, shorter than a batch header, of another magic than 2, with a bad CRC-32C or
  with offsets outside its segment ends the log there (Kafka truncates the segment at that batch and deletes every
  later segment). The log end offset is then the next offset after the last valid batch of the last segment left,
  or that segment's base offset when it holds no batch (``LogSegment.readNextOffset``);
* **last written leader epoch** — Kafka's leader epoch cache after that recovery (``UnifiedLog.latestEpoch``): the
  ``leader-epoch-checkpoint`` entries whose start offset is below the log end offset (``truncateFromEnd``), plus the
  ``partitionLeaderEpoch`` of the recovered batches (``LogSegment.recover`` assigns them). Both are reported: the
  last batch's epoch is the truth for the last batch, the checkpoint covers a log whose segments hold no batch.

Pure functions over files: no Kafka client, no state.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

import crc32c

#: The first 61 bytes of a v2 record batch: baseOffset q, batchLength i, partitionLeaderEpoch i, magic b, crc I,
#: attributes h, lastOffsetDelta i, baseTimestamp q, maxTimestamp q, producerId q, producerEpoch h,
#: baseSequence i, recordCount i.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = BATCH_HEADER.size  # 61 = RECORD_BATCH_OVERHEAD
LOG_OVERHEAD = 12  # baseOffset + batchLength: not counted by batchLength
HEADER_UP_TO_MAGIC = 17  # FileLogInputStream: fewer bytes left than this is the end of the file
CRC_START = 21  # the CRC covers attributes .. the end of the batch
_CHUNK = 1 << 20
NO_EPOCH = -1

_SEGMENT = re.compile(r"^(\d{20})\.log$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")  # `-delete`, `-future` and `-stray` directories do not match


class ReplicaLogError(ValueError):
    """A partition directory that cannot be read as one (missing, not a partition, unreadable checkpoint)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The header fields of one record batch the reader uses, and where the batch is."""

    base_offset: int
    last_offset: int
    leader_epoch: int
    position: int
    size: int
    crc: int


@dataclass(frozen=True, slots=True)
class SegmentScan:
    """One segment read from ``start``: where its valid batches end, its last valid batch, and why it stops."""

    base_offset: int
    size: int  # bytes in the file
    valid_bytes: int  # bytes up to the end of the last valid batch
    last_batch: BatchHeader | None
    batches: int  # valid batches read (from ``start``)
    max_epoch: int  # highest partitionLeaderEpoch of those batches (NO_EPOCH when none)
    stop: str | None  # why the valid part ends before the end of the file (None: it does not)

    @property
    def truncated_bytes(self) -> int:
        """Bytes Kafka's recovery would cut from this segment."""
        return self.size - self.valid_bytes

    @property
    def next_offset(self) -> int:
        """``LogSegment.readNextOffset``: after the last valid batch, or the base offset of an empty segment."""
        return self.last_batch.last_offset + 1 if self.last_batch is not None else self.base_offset


@dataclass(frozen=True, slots=True)
class ReplicaLogInfo:
    """What one replica's files say about its log (see the module docstring)."""

    topic: str
    partition: int
    topic_id: str | None  # from partition.metadata (base64url, as the metadata records print it)
    log_end_offset: int
    last_written_leader_epoch: int  # NO_EPOCH when the log has no epoch at all
    last_batch_epoch: int | None  # partitionLeaderEpoch of the last valid batch (None: no batch left)
    checkpoint_epoch: int | None  # latest leader-epoch-checkpoint entry below the log end offset
    last_segment: int  # base offset of the segment holding the end
    truncated_bytes: int  # bytes recovery would cut (torn or corrupt tail), 0 for a clean log
    stop: str | None  # why the log ends before the end of its files (None: it does not)

    def to_json(self) -> dict[str, Any]:
        """camelCase fields."""
        return {re.sub(r"_(\w)", lambda m: m.group(1).upper(), k): v for k, v in asdict(self).items()}


def segments(partition_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """(base offset, path) of a partition directory's ``*.log`` segments, in order."""
    found = []
    for entry in os.scandir(partition_dir):
        match = _SEGMENT.match(entry.name)
        if match and entry.is_file():
            found.append((int(match.group(1)), Path(entry.path)))
    return sorted(found)


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``orders-3`` → ("orders", 3); None for what is not a live partition directory."""
    match = _PARTITION_DIR.match(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


def partition_dirs(log_dir: str | os.PathLike) -> list[tuple[str, int, Path]]:
    """(topic, partition, path) of every partition directory in one ``log.dirs`` entry (``__cluster_metadata-0``
    excluded: it is the metadata log, not a partition of a topic)."""
    out = []
    for entry in os.scandir(log_dir):
        if not entry.is_dir() or entry.name == "__cluster_metadata-0":
            continue
        parsed = parse_partition_dir(entry.name)
        if parsed is not None:
            out.append((parsed[0], parsed[1], Path(entry.path)))
    return sorted(out)


def _read_header(fh: BinaryIO, position: int, size: int) -> tuple[BatchHeader | None, str | None]:
    """The batch at ``position`` (header only), or why there is no valid batch there."""
    remaining = size - position
    if remaining < HEADER_UP_TO_MAGIC:
        return None, None if remaining == 0 else "partial_batch"
    fh.seek(position)
    head = fh.read(HEADER_SIZE)
    base_offset, length = struct.unpack_from(">qi", head, 0)
    batch_size = LOG_OVERHEAD + length
    if batch_size < HEADER_SIZE:
        return None, "batch_too_small"
    if position + batch_size > size or len(head) < HEADER_SIZE:
        return None, "partial_batch"
    (_, _, epoch, magic, crc, _attrs, last_delta, *_rest) = BATCH_HEADER.unpack(head)
    if magic != 2:
        return None, f"magic_{magic}"
    return BatchHeader(base_offset, base_offset + last_delta, epoch, position, batch_size, crc), None


def _crc_ok(fh: BinaryIO, batch: BatchHeader) -> bool:
    """CRC-32C of attributes .. end of the batch, read in bounded chunks (the bytes are not interpreted)."""
    fh.seek(batch.position + CRC_START)
    left = batch.size - CRC_START
    value = 0
    while left > 0:
        chunk = fh.read(min(left, _CHUNK))
        if not chunk:
            return False
        value = crc32c.crc32c(chunk, value)
        left -= len(chunk)
    return value == batch.crc


def scan_segment(path: str | os.PathLike, base_offset: int, *, validate: bool = True, start: int = 0) -> SegmentScan:
    """Walk a segment's batch headers from byte ``start`` (a batch boundary): with ``validate``, as
    ``LogSegment.recover`` checks them (the first invalid batch ends the segment); without, headers only (a segment
    below the recovery point, which Kafka does not check either)."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        position, last, batches, max_epoch, stop = start, None, 0, NO_EPOCH, None
        while True:
            batch, stop = _read_header(fh, position, size)
            if batch is None:
                break
            if validate:
                delta = batch.last_offset - base_offset
                if batch.base_offset < base_offset or not 0 <= delta <= 0x7FFFFFFF:
                    stop = "offset_out_of_range"
                    break
                if not _crc_ok(fh, batch):
                    stop = "crc_mismatch"
                    break
            last, batches = batch, batches + 1
            max_epoch = max(max_epoch, batch.leader_epoch)
            position += batch.size
    return SegmentScan(base_offset, size, position, last, batches, max_epoch, stop)


def read_leader_epoch_checkpoint(path: str | os.PathLike) -> list[tuple[int, int]]:
    """(epoch, start offset) entries of a ``leader-epoch-checkpoint`` file (version 0; [] when it is absent)."""
    try:
        lines = Path(path).read_text(encoding="ascii").split("\n")
    except FileNotFoundError:
        return []
    try:
        if lines[0].strip() != "0":
            raise ReplicaLogError(f"{path}: leader-epoch-checkpoint version {lines[0].strip()!r}, only 0 is known")
        count = int(lines[1])
        entries = []
        for line in lines[2 : 2 + count]:
            epoch, start = line.split()
            entries.append((int(epoch), int(start)))
    except (IndexError, ValueError) as exc:
        raise ReplicaLogError(f"{path}: not a leader-epoch-checkpoint file ({exc})") from None
    if len(entries) != count:
        raise ReplicaLogError(f"{path}: {count} entries announced, {len(entries)} found")
    return entries


def read_offset_checkpoint(path: str | os.PathLike) -> dict[tuple[str, int], int]:
    """(topic, partition) → offset of a log dir's ``recovery-point-offset-checkpoint`` (or any offset checkpoint
    of that format: version 0, a count, ``topic partition offset`` lines); {} when it is absent."""
    try:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
    except FileNotFoundError:
        return {}
    out: dict[tuple[str, int], int] = {}
    if not any(line.strip() for line in lines):
        return out  # an empty file (seen while a broker starts): no recovery point known
    try:
        if lines[0].strip() != "0":
            raise ReplicaLogError(f"{path}: offset checkpoint version {lines[0].strip()!r}, only 0 is known")
        count = int(lines[1])
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.rsplit(" ", 2)
            out[(topic, int(partition))] = int(offset)
    except (IndexError, ValueError) as exc:
        raise ReplicaLogError(f"{path}: not an offset checkpoint file ({exc})") from None
    return out


def read_topic_id(partition_dir: str | os.PathLike) -> str | None:
    """The topic id of ``partition.metadata`` (``topic_id: …``), or None when the file is absent."""
    try:
        text = (Path(partition_dir) / "partition.metadata").read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            return value.strip()
    return None


def read_replica_log(partition_dir: str | os.PathLike, recovery_point: int | None = None) -> ReplicaLogInfo:
    """Log end offset and last written leader epoch of one partition directory, as Kafka's recovery would find
    them (see the module docstring). ``recovery_point``: the partition's entry of the log dir's
    ``recovery-point-offset-checkpoint`` (None: check only the last segment)."""
    directory = Path(partition_dir)
    parsed = parse_partition_dir(directory.name)
    if parsed is None or not directory.is_dir():
        raise ReplicaLogError(f"{directory} is not a partition directory (<topic>-<partition>)")
    segs = segments(directory)
    epochs = read_leader_epoch_checkpoint(directory / "leader-epoch-checkpoint")
    topic_id = read_topic_id(directory)
    if not segs:  # Kafka would create an empty segment at the log start offset; nothing was written here
        checkpoint_epoch = epochs[-1][0] if epochs else None
        return ReplicaLogInfo(
            parsed[0],
            parsed[1],
            topic_id,
            epochs[-1][1] if epochs else 0,
            NO_EPOCH if checkpoint_epoch is None else checkpoint_epoch,
            None,
            checkpoint_epoch,
            0,
            0,
            None,
        )
    if recovery_point is None:
        first = len(segs) - 1
    else:  # the segment holding the recovery point, and every later one (LogSegments.values(recoveryPoint, ∞))
        first = max([i for i, (base, _) in enumerate(segs) if base <= recovery_point] or [0])
    recovered_epoch = NO_EPOCH
    last_scan: SegmentScan | None = None
    for base, path in segs[first:]:
        last_scan = scan_segment(path, base)
        recovered_epoch = max(recovered_epoch, last_scan.max_epoch)
        if last_scan.stop is not None:
            break  # Kafka truncates here and deletes the later segments
    assert last_scan is not None
    log_end_offset = last_scan.next_offset
    last_batch = last_scan.last_batch
    # An empty last segment (just rolled, or truncated to nothing): the last batch is in an earlier one.
    index = [base for base, _ in segs].index(last_scan.base_offset)
    while last_batch is None and index > 0:
        index -= 1
        base, path = segs[index]
        last_batch = scan_segment(path, base, validate=False).last_batch
    below = [epoch for epoch, start in epochs if start < log_end_offset]
    checkpoint_epoch = below[-1] if below else None
    candidates = [e for e in (checkpoint_epoch, recovered_epoch) if e is not None and e >= 0]
    if last_batch is not None and last_batch.leader_epoch >= 0:
        candidates.append(last_batch.leader_epoch)
    return ReplicaLogInfo(
        topic=parsed[0],
        partition=parsed[1],
        topic_id=topic_id,
        log_end_offset=log_end_offset,
        last_written_leader_epoch=max(candidates) if candidates else NO_EPOCH,
        last_batch_epoch=None if last_batch is None else last_batch.leader_epoch,
        checkpoint_epoch=checkpoint_epoch,
        last_segment=last_scan.base_offset,
        truncated_bytes=last_scan.truncated_bytes,
        stop=last_scan.stop,
    )


def read_log_dir(log_dir: str | os.PathLike) -> dict[tuple[str, int], ReplicaLogInfo]:
    """Every partition of one ``log.dirs`` entry, with its recovery points."""
    recovery = read_offset_checkpoint(Path(log_dir) / "recovery-point-offset-checkpoint")
    return {
        (topic, partition): read_replica_log(path, recovery.get((topic, partition)))
        for topic, partition, path in partition_dirs(log_dir)
    }


__all__ = [
    "NO_EPOCH",
    "BatchHeader",
    "ReplicaLogError",
    "ReplicaLogInfo",
    "SegmentScan",
    "parse_partition_dir",
    "partition_dirs",
    "read_leader_epoch_checkpoint",
    "read_log_dir",
    "read_offset_checkpoint",
    "read_replica_log",
    "read_topic_id",
    "scan_segment",
    "segments",
]
