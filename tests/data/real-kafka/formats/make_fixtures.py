"""Regenerate the real-format fixtures of this directory from a real Kafka 4.4.0 cluster (devtools/kafka_cluster.py).

    python3 tests/data/real-kafka/formats/make_fixtures.py [OUT_DIR]

A cluster of one controller and two brokers runs with a controller that snapshots its metadata every few KB, rolls
its metadata segments every KB and keeps no retention, so that, as on a long-running cluster, a snapshot covers the
oldest records and the segments below it are deleted. Then Kafka's own DumpLogSegments prints:

* ``segments.dump``: the segments that are left (they start past offset 0);
* ``segments-skip-metadata.dump``: the same with ``--skip-record-metadata``;
* ``tail-segment.dump``: the segments but the first (records about topics and brokers created before them);
* ``snapshot.dump``, ``snapshot-skip-metadata.dump``: the newest ``*.checkpoint`` (a snapshot's records have
  no log offset: ``| offset:`` counts from 0 inside the snapshot);
* ``bootstrap.dump``: the controller's ``bootstrap.checkpoint`` (when the format wrote one);
* ``undecodable.dump``: a copy of the newest segment with one record's metadata type id overwritten (255), so
  that DumpLogSegments prints its ``Error at N, skipping. …`` line for it.

``offsets.json`` records the offsets the tests rely on (snapshot end offset, first segment's base offset).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from elrwatch.devtools.kafka_cluster import ClusterError, KafkaCluster

#: The controller's settings that make it snapshot and delete old segments within seconds.
SNAPSHOTTING_CONTROLLER = {
    "metadata.log.max.record.bytes.between.snapshots": "1500",
    "internal.metadata.log.segment.bytes": "1024",
    "metadata.max.retention.ms": "1",
    "metadata.max.retention.bytes": "1",
    "internal.metadata.delete.delay.millis": "0",
}


def _first_segment_offset(cluster: KafkaCluster) -> int:
    files = cluster.metadata_log_files()
    return int(files[0].name.split(".")[0]) if files else 0


def _covered_segment(cluster: KafkaCluster) -> bool:
    """A snapshot exists, the oldest segments are deleted, and the first one left starts below the snapshot's end."""
    snapshots = cluster.metadata_snapshot_files()
    first = _first_segment_offset(cluster)
    return bool(snapshots) and 0 < first < int(snapshots[-1].name.split("-")[0])


def _corrupt_one_record(segment: Path, out: Path) -> int | None:
    """Copy ``segment`` to ``out`` with the first data record's metadata type id (its value's second byte, a
    one-byte unsigned varint after the frame version 0) set to 255; returns the record's offset, if one was found."""
    data = bytearray(segment.read_bytes())
    position = 0
    while position + 61 <= len(data):
        base_offset = int.from_bytes(data[position : position + 8], "big")
        length = int.from_bytes(data[position + 8 : position + 12], "big")
        attributes = int.from_bytes(data[position + 21 : position + 23], "big")
        is_control = bool(attributes & 0x20)
        compressed = attributes & 0x07
        if not is_control and not compressed:
            # first record: length varint, attributes int8, timestampDelta varint, offsetDelta varint, keyLength
            # varint (-1 = 0x01), valueLength varint, value
            cursor = position + 61
            cursor += _varint_size(data, cursor) + 1
            cursor += _varint_size(data, cursor)
            cursor += _varint_size(data, cursor)
            cursor += _varint_size(data, cursor)  # key length (-1)
            cursor += _varint_size(data, cursor)  # value length
            data[cursor + 1] = 0xFF
            if data[cursor + 2] & 0x80 == 0:
                out.write_bytes(bytes(data))
                return base_offset
        position += 12 + length
    return None


def _varint_size(data: bytearray, cursor: int) -> int:
    size = 1
    while data[cursor + size - 1] & 0x80:
        size += 1
    return size


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    cluster = KafkaCluster(brokers=2, min_insync_replicas=2)
    cluster.controller.extra_props.update(SNAPSHOTTING_CONTROLLER)
    with cluster:  # starts it
        cluster.create_topic("alpha", partitions=3, replication_factor=2)
        cluster.set_topic_config("alpha", "min.insync.replicas", "1")
        cluster.create_topic("beta", partitions=2, replication_factor=2)
        cluster.set_topic_config("beta", "retention.ms", "3600000")
        # wait until a snapshot covers alpha and beta, the segments below it are gone, and the first segment left
        # starts below the snapshot's end offset (its first records are covered); write more records until then
        for attempt in range(30):
            try:
                cluster.wait_for(lambda: _covered_segment(cluster), "a snapshot covering a segment's start", timeout=5)
                break
            except ClusterError:
                cluster.set_topic_config("beta", "retention.ms", str(3_600_000 + attempt))
        else:
            raise ClusterError("no snapshot ended inside a segment: run again")
        snapshot_offset = int(cluster.metadata_snapshot_files()[-1].name.split("-")[0])
        # after the snapshot: records about partitions and brokers the segments never saw created
        cluster.kill_broker(2)
        cluster.wait_for(lambda: 2 in cluster.fenced_brokers(), "broker 2 fenced")
        cluster.create_topic("gamma", partitions=1, replication_factor=1)
        cluster.wait_metadata_quiet()
        metadata_dir = cluster.controller.metadata_dir
        work = out_dir / "work"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        # copy first: the controller may snapshot and delete while the tool reads
        segments = [shutil.copy2(f, work / f.name) for f in cluster.metadata_log_files()]
        snapshots = [shutil.copy2(f, work / f.name) for f in cluster.metadata_snapshot_files()]
        (out_dir / "segments.dump").write_text(cluster.dump_log_segments(segments))
        (out_dir / "segments-skip-metadata.dump").write_text(
            cluster.dump_log_segments(segments, skip_record_metadata=True)
        )
        (out_dir / "tail-segment.dump").write_text(cluster.dump_log_segments(segments[1:] or segments[-1:]))
        (out_dir / "snapshot.dump").write_text(cluster.dump_log_segments(snapshots[-1:]))
        (out_dir / "snapshot-skip-metadata.dump").write_text(
            cluster.dump_log_segments(snapshots[-1:], skip_record_metadata=True)
        )
        bootstrap = metadata_dir.parent / "bootstrap.checkpoint"
        if bootstrap.exists():
            copy = shutil.copy2(bootstrap, work / "bootstrap.checkpoint")
            (out_dir / "bootstrap.dump").write_text(cluster.dump_log_segments([copy]))
        bad_segment = work / "bad" / Path(segments[-1]).name  # DumpLogSegments reads the base offset off the name
        bad_segment.parent.mkdir()
        corrupt_offset = _corrupt_one_record(Path(segments[-1]), bad_segment)
        if corrupt_offset is not None:
            (out_dir / "undecodable.dump").write_text(cluster.dump_log_segments([bad_segment]))
            (out_dir / "undecodable-skip-metadata.dump").write_text(
                cluster.dump_log_segments([bad_segment], skip_record_metadata=True)
            )
        offsets = {
            "kafka": "4.4.0",
            "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "snapshotFiles": [Path(s).name for s in snapshots],
            "segmentFiles": [Path(s).name for s in segments],
            "snapshotEndOffsetWhenPhaseTwoStarted": snapshot_offset,
            "corruptedRecordOffset": corrupt_offset,
        }
        (out_dir / "offsets.json").write_text(json.dumps(offsets, indent=2) + "\n")
        shutil.rmtree(work)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
