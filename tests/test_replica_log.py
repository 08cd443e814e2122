"""bridge/replica_log.py on synthetic partition directories: log end offset and last written leader epoch as Kafka's
log recovery would find them (torn, corrupt and empty tails, several segments, recovery points, checkpoints)."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from elrwatch.bridge import replica_log as rl


def batch(base_offset: int, count: int, epoch: int, payload: bytes = b"x" * 40, magic: int = 2) -> bytes:
    """A v2 record batch of ``count`` records (the body is opaque bytes: the reader never interprets it)."""
    after_crc = struct.pack(">hiqqqhii", 0, count - 1, 1000, 1000, -1, -1, -1, count) + payload
    crc = crc32c.crc32c(after_crc)
    length = 4 + 1 + 4 + len(after_crc)  # partitionLeaderEpoch + magic + crc + the rest
    return struct.pack(">qiibI", base_offset, length, epoch, magic, crc) + after_crc


def write_segment(directory: Path, base: int, *batches: bytes) -> Path:
    path = directory / f"{base:020d}.log"
    path.write_bytes(b"".join(batches))
    return path


def write_epochs(directory: Path, *entries: tuple[int, int]) -> None:
    lines = ["0", str(len(entries)), *(f"{e} {s}" for e, s in entries)]
    (directory / "leader-epoch-checkpoint").write_text("\n".join(lines) + "\n")


@pytest.fixture
def pdir(tmp_path: Path) -> Path:
    d = tmp_path / "orders-2"
    d.mkdir()
    (d / "partition.metadata").write_text("version: 0\ntopic_id: FbrrdcfiR-KC2CPSTHaJrg\n")
    return d


def test_clean_log(pdir: Path) -> None:
    write_segment(pdir, 0, batch(0, 5, 0), batch(5, 3, 1), batch(8, 2, 1))
    write_epochs(pdir, (0, 0), (1, 5))
    info = rl.read_replica_log(pdir)
    assert (info.topic, info.partition, info.topic_id) == ("orders", 2, "FbrrdcfiR-KC2CPSTHaJrg")
    assert info.log_end_offset == 10
    assert info.last_written_leader_epoch == 1
    assert (info.last_batch_epoch, info.checkpoint_epoch) == (1, 1)
    assert (info.truncated_bytes, info.stop) == (0, None)
    assert info.to_json()["logEndOffset"] == 10


@pytest.mark.parametrize("cut", [1, 20, 60, 70, 90])
def test_torn_last_batch_ends_the_log_before_it(pdir: Path, cut: int) -> None:
    last = batch(8, 2, 3)
    write_segment(pdir, 0, batch(0, 5, 2), batch(5, 3, 2), last[:-cut] if cut < len(last) else b"")
    write_epochs(pdir, (2, 0), (3, 8))  # the checkpoint was flushed before the batch was torn
    info = rl.read_replica_log(pdir)
    assert info.log_end_offset == 8
    assert info.stop == "partial_batch"
    assert info.truncated_bytes == len(last) - cut
    # the epoch entry starting at the (now) log end offset is dropped, as Kafka's truncateFromEnd does
    assert (info.last_written_leader_epoch, info.checkpoint_epoch, info.last_batch_epoch) == (2, 2, 2)


def test_corrupt_batch_ends_the_log_and_later_segments_count_for_nothing(pdir: Path) -> None:
    bad = bytearray(batch(5, 3, 4))
    bad[-1] ^= 0xFF  # one flipped payload byte: CRC mismatch
    write_segment(pdir, 0, batch(0, 5, 3), bytes(bad), batch(8, 2, 4))
    write_segment(pdir, 10, batch(10, 4, 4))
    info = rl.read_replica_log(pdir, recovery_point=0)
    assert info.log_end_offset == 5
    assert info.stop == "crc_mismatch"
    assert info.last_segment == 0
    assert info.last_written_leader_epoch == 3
    # without a recovery point only the last segment is checked: the corruption below it is not seen
    assert rl.read_replica_log(pdir).log_end_offset == 14


def test_zero_filled_tail_and_small_batch(pdir: Path) -> None:
    write_segment(pdir, 0, batch(0, 5, 0), b"\0" * 100)
    info = rl.read_replica_log(pdir)
    assert (info.log_end_offset, info.stop, info.truncated_bytes) == (5, "batch_too_small", 100)


def test_other_magic_and_offsets_outside_the_segment(pdir: Path) -> None:
    write_segment(pdir, 0, batch(0, 5, 0), batch(5, 1, 0, magic=1))
    assert rl.read_replica_log(pdir).stop == "magic_1"
    write_segment(pdir, 0, batch(0, 5, 0), batch(-3, 1, 0))
    info = rl.read_replica_log(pdir)
    assert (info.log_end_offset, info.stop) == (5, "offset_out_of_range")


def test_empty_last_segment_takes_its_base_offset_and_the_epoch_of_the_previous_one(pdir: Path) -> None:
    write_segment(pdir, 0, batch(0, 5, 6), batch(5, 5, 7))
    write_segment(pdir, 10)
    info = rl.read_replica_log(pdir)
    assert info.log_end_offset == 10
    assert info.last_segment == 10
    assert (info.last_batch_epoch, info.last_written_leader_epoch, info.checkpoint_epoch) == (7, 7, None)


def test_checkpoint_epoch_newer_than_the_last_batch(pdir: Path) -> None:
    """Kafka assigns the leader epoch at the log end offset when a replica becomes leader: an entry that starts at
    the log end offset is no written epoch (truncateFromEnd drops it); one below it counts."""
    write_segment(pdir, 0, batch(0, 5, 1))
    write_epochs(pdir, (1, 0), (4, 5))
    info = rl.read_replica_log(pdir)
    assert (info.log_end_offset, info.last_written_leader_epoch, info.checkpoint_epoch) == (5, 1, 1)
    write_epochs(pdir, (1, 0), (4, 3))
    assert rl.read_replica_log(pdir).last_written_leader_epoch == 4


def test_no_segment(pdir: Path) -> None:
    info = rl.read_replica_log(pdir)
    assert (info.log_end_offset, info.last_written_leader_epoch, info.last_batch_epoch) == (0, rl.NO_EPOCH, None)


def test_large_batch_crc_in_chunks(pdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rl, "_CHUNK", 7)
    write_segment(pdir, 0, batch(0, 100, 2, payload=bytes(range(256)) * 10))
    info = rl.read_replica_log(pdir)
    assert (info.log_end_offset, info.stop) == (100, None)


def test_log_dir_and_checkpoints(tmp_path: Path) -> None:
    for name in ("a-0", "a-1", "b.c-10", "a-0.0f0e-delete", "a-1.aa-future", "__cluster_metadata-0"):
        (tmp_path / name).mkdir()
    write_segment(tmp_path / "a-0", 0, batch(0, 5, 0), batch(5, 5, 0))
    write_segment(tmp_path / "a-0", 10, batch(10, 5, 0))
    bad = bytearray(batch(5, 5, 0))
    bad[30] ^= 1
    write_segment(tmp_path / "a-1", 0, batch(0, 5, 0), bytes(bad))
    write_segment(tmp_path / "a-1", 10, batch(10, 5, 0))
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n2\na 0 10\na 1 5\n")
    found = rl.read_log_dir(tmp_path)
    assert sorted(found) == [("a", 0), ("a", 1), ("b.c", 10)]
    assert found[("a", 0)].log_end_offset == 15
    assert found[("a", 1)].log_end_offset == 5  # recovery from offset 5: the corrupt batch ends the log
    assert found[("b.c", 10)].log_end_offset == 0


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\n1 0\n", "0\nx\n"])
def test_bad_epoch_checkpoint_is_a_clear_error(pdir: Path, text: str) -> None:
    (pdir / "leader-epoch-checkpoint").write_text(text)
    with pytest.raises(rl.ReplicaLogError, match="leader-epoch-checkpoint"):
        rl.read_replica_log(pdir)


def test_not_a_partition_directory(tmp_path: Path) -> None:
    with pytest.raises(rl.ReplicaLogError, match="not a partition directory"):
        rl.read_replica_log(tmp_path / "nothing")


def test_empty_recovery_checkpoint_is_no_recovery_point(tmp_path: Path) -> None:
    (tmp_path / "recovery-point-offset-checkpoint").write_text("")
    assert rl.read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {}
    (tmp_path / "recovery-point-offset-checkpoint").write_text("7\n0\n")
    with pytest.raises(rl.ReplicaLogError, match="version '7'"):
        rl.read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint")
