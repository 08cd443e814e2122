"""`elrwatch bridge` without a JVM: the decoder against a real Kafka 4.4.0 log and its DumpLogSegments output
(tests/data/real-kafka/bridge/, written by make_fixture.py), the metadata-log tail (snapshot, appends, a batch
being written, divergence), the admin poller over a fake cluster, faults, restarts, metrics and the CLI."""

from __future__ import annotations

import gzip
import shutil
import struct
import urllib.request
from pathlib import Path
from typing import Any

import crc32c
import orjson
import pytest

from elrwatch.bridge import metadata_log
from elrwatch.bridge.admin import Broker, View, diff
from elrwatch.bridge.logtail import MetadataLogTail
from elrwatch.bridge.runner import AdminBridge, LogBridge, MemoryPublisher, Metrics, StateFile
from elrwatch.state import records
from elrwatch.state.cluster import ClusterState
from elrwatch.state.gauges import all_gauges
from elrwatch.state.outcome import Outcome
from elrwatch.state.report import cluster_doc

FIXTURES = Path(__file__).parent / "data" / "real-kafka" / "bridge"


# --- helpers ---------------------------------------------------------------------------------------------------------


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint(n: int) -> bytes:
    return uvarint((n << 1) ^ (n >> 63))


def make_batch(
    base_offset: int, values: list[bytes], codec: int = 0, ts: int = 1_700_000_000_000, control: bool = False
) -> bytes:
    """A magic-2 record batch as Kafka writes it (CRC32C over attributes..end)."""
    recs = b""
    for i, value in enumerate(values):
        body = b"\x00" + varint(i) + varint(i) + varint(-1) + varint(len(value)) + value + varint(0)
        recs += varint(len(body)) + body
    if codec == 1:
        recs = gzip.compress(recs)
    attributes = codec | (0x20 if control else 0)
    after_crc = struct.pack(">hiqqqhii", attributes, len(values) - 1, ts, ts, -1, -1, -1, len(values)) + recs
    return struct.pack(">qiibI", base_offset, 9 + len(after_crc), 1, 2, crc32c.crc32c(after_crc)) + after_crc


def real_values() -> list[tuple[int, bytes]]:
    """(offset, value) of every metadata record of the fixture's controller log."""
    result = metadata_log.scan((FIXTURES / "controller.log").read_bytes())
    return [(d.offset, d.value) for d in result.records if d.value is not None]


def dump_payloads(text: str) -> dict[int, str]:
    """offset → payload JSON of DumpLogSegments' record lines (control records have no payload)."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        if line.startswith("| offset: ") and " payload: " in line:
            out[int(line.split()[2])] = line.split(" payload: ", 1)[1]
    return out


def replay(lines: list[bytes]) -> tuple[ClusterState, list[records.RecordError], dict[str, int]]:
    state = ClusterState()
    quarantined: list[records.RecordError] = []
    outcomes: dict[str, int] = {}
    for seq, line in enumerate(lines):
        parsed = records.parse_line(line, "events", seq)
        if isinstance(parsed, records.RecordError):
            quarantined.append(parsed)
            continue
        if not isinstance(parsed, records.Record):
            continue
        outcome = state.apply(parsed)
        outcomes[outcome.value] = outcomes.get(outcome.value, 0) + 1
        if outcome is Outcome.QUARANTINED:
            quarantined.append(state.last_error)  # type: ignore[arg-type]
    return state, quarantined, outcomes


# --- the decoder on a real log -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "dump"), [("controller.log", "controller.dump"), ("broker1.checkpoint", "broker1-checkpoint.dump")]
)
def test_decoder_equals_kafkas_dump(data: str, dump: str) -> None:
    theirs = dump_payloads((FIXTURES / dump).read_text())
    result = metadata_log.scan((FIXTURES / data).read_bytes())
    assert not result.errors and not result.truncated and result.control_batches >= 1
    mine = {d.offset: metadata_log.dumps_payload(d) for d in result.records}
    assert sorted(mine) == sorted(theirs)
    assert len(theirs) >= 15
    for offset, payload in theirs.items():
        assert mine[offset] == payload, offset  # byte for byte


def test_fixture_holds_the_scenario() -> None:
    """The fixture is the interesting one: ELR, an unclean election (RECOVERING), min ISR changes, fencing."""
    text = (FIXTURES / "controller.dump").read_text()
    assert '"eligibleLeaderReplicas":[' in text and '"leaderRecoveryState":1' in text
    assert '"name":"min.insync.replicas","value":"3"' in text and '"fenced":1' in text
    assert "CLEAR_ELR_RECORD" in text


def test_decoded_envelopes_replay_like_the_dump() -> None:
    """The core's state from the decoder's envelopes equals its state from Kafka's dump lines."""
    decoded = metadata_log.scan((FIXTURES / "controller.log").read_bytes()).records
    mine, q1, _ = replay([orjson.dumps(d.envelope()) for d in decoded])
    theirs, q2, _ = replay([line.encode() for line in (FIXTURES / "controller.dump").read_text().splitlines()])
    assert not q1 and not q2

    def key(s):
        return [
            (
                t.name,
                p.partition_id,
                p.leader,
                p.leader_epoch,
                p.partition_epoch,
                p.isr,
                p.elr,
                p.last_known_elr,
                p.leader_recovery_state,
            )
            for t, p in s.iter_partitions()
        ]

    assert key(mine) == key(theirs) and len(key(mine)) >= 4
    assert {b: (s.epoch, s.fenced) for b, s in mine.brokers.items()} == {
        b: (s.epoch, s.fenced) for b, s in theirs.brokers.items()
    }


def test_varints_and_uuids() -> None:
    for n in (0, 1, 127, 128, 300, 2**31, 2**62):
        assert metadata_log.read_uvarint(uvarint(n), 0) == (n, len(uvarint(n)))
    for n in (0, -1, 1, -300, 2**40, -(2**40)):
        assert metadata_log.read_varint(varint(n), 0)[0] == n
    assert metadata_log.uuid_text(bytes(15) + b"\x01") == "AAAAAAAAAAAAAAAAAAAAAQ"
    with pytest.raises(metadata_log.DecodeError):
        metadata_log.read_uvarint(b"\x80\x80", 0)


def test_gzip_batch_and_missing_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    values = [v for _, v in real_values()[:5]]
    plain = metadata_log.scan(make_batch(0, values))
    zipped = metadata_log.scan(make_batch(0, values, codec=1))
    assert [metadata_log.dumps_payload(d) for d in zipped.records] == [
        metadata_log.dumps_payload(d) for d in plain.records
    ]
    from kafka import codec

    monkeypatch.setattr(codec, "has_snappy", lambda: False)  # the same whether python-snappy is installed or not
    # A snappy batch without the library: a counted error, the next batch still decoded.
    buf = make_batch(0, values, codec=2) + make_batch(5, values)
    result = metadata_log.scan(buf)
    assert [r for r, _ in result.errors] == ["unsupported_compression"]
    assert [d.offset for d in result.records] == [5, 6, 7, 8, 9]


def test_crc_mismatch_skips_one_batch() -> None:
    values = [v for _, v in real_values()[:3]]
    first = bytearray(make_batch(0, values))
    first[-1] ^= 0xFF
    result = metadata_log.scan(bytes(first) + make_batch(3, values))
    assert [r for r, _ in result.errors] == ["crc_mismatch"]
    assert [d.offset for d in result.records] == [3, 4, 5]


def test_unknown_record_type_and_control_batch() -> None:
    good = real_values()[3][1]
    unknown = uvarint(1) + uvarint(99) + uvarint(0) + b"\x00"
    buf = make_batch(0, [b"\x00\x00"], control=True) + make_batch(1, [good, unknown, good])
    result = metadata_log.scan(buf)
    assert result.control_batches == 1
    assert [(d.offset, d.reason) for d in result.records] == [(1, None), (2, "unknown_record_type"), (3, None)]
    assert [r for r, _ in result.errors] == ["unknown_record_type"]


# --- the metadata-log tail ---------------------------------------------------------------------------------------------


def write_segment(log_dir: Path, base: int, data: bytes) -> Path:
    path = log_dir / f"{base:020d}.log"
    path.write_bytes(data)
    return path


def test_tail_waits_for_a_batch_being_written(tmp_path: Path) -> None:
    values = [v for _, v in real_values()[:6]]
    first, second = make_batch(0, values[:3]), make_batch(3, values[3:])
    segment = write_segment(tmp_path, 0, first + second[:25])
    metrics, pub = Metrics(), MemoryPublisher()
    bridge = LogBridge(tmp_path, pub, StateFile(None), metrics)
    assert bridge.step() == 3
    assert bridge.step() == 0  # still cut: nothing, and no error
    segment.write_bytes(first + second[:-1])
    assert bridge.step() == 0
    segment.write_bytes(first + second)
    assert bridge.step() == 3
    assert [orjson.loads(line)["offset"] for line in pub.lines] == [0, 1, 2, 3, 4, 5]
    assert sum(metrics.counts.values()) == 0


def test_tail_follows_rolled_segments_and_counts_unknown_types(tmp_path: Path) -> None:
    values = [v for _, v in real_values()[:6]]
    unknown = uvarint(1) + uvarint(99) + uvarint(0) + b"\x00"
    write_segment(tmp_path, 0, make_batch(0, values[:3]))
    metrics, pub = Metrics(), MemoryPublisher()
    bridge = LogBridge(tmp_path, pub, StateFile(None), metrics)
    assert bridge.step() == 3
    write_segment(tmp_path, 3, make_batch(3, [values[3], unknown, values[4]]))
    assert bridge.step() == 2
    assert [orjson.loads(line)["offset"] for line in pub.lines] == [0, 1, 2, 3, 5]
    assert metrics.counts == {"unknown_record_type": 1}
    assert metrics.registry.get_sample_value("elrwatch_bridge_errors_total", {"reason": "unknown_record_type"}) == 1


def test_divergence_is_noticed_published_and_a_core_conflict(tmp_path: Path) -> None:
    values = [v for _, v in real_values()]
    segment = write_segment(tmp_path, 0, make_batch(0, values[:10]) + make_batch(10, values[10:12]))
    metrics, pub = Metrics(), MemoryPublisher()
    bridge = LogBridge(tmp_path, pub, StateFile(None), metrics)
    assert bridge.step() == 12
    # The leader changed: offsets 10-11 were truncated and others were written there, then one more record.
    segment.write_bytes(make_batch(0, values[:10]) + make_batch(10, [values[13], values[12], values[14]]))
    assert bridge.step() == 3
    last = [orjson.loads(line) for line in pub.lines[-3:]]
    assert [(e["offset"], e.get("diverged")) for e in last] == [(10, True), (11, True), (12, None)]
    assert metrics.counts == {"diverged_log": 2}
    _, quarantined, _ = replay(pub.lines)
    assert {q.reason for q in quarantined} == {"conflict"}
    assert bridge.step() == 0  # noticed once


def test_snapshot_then_segments(tmp_path: Path) -> None:
    """A node whose log starts past 0: the newest snapshot first (offset end-1, snapshotEnd), then the log."""
    log_bytes = (FIXTURES / "controller.log").read_bytes()
    end = int(
        pytest.importorskip("re")
        .search(r"Snapshot end offset: (\d+)", (FIXTURES / "broker1-checkpoint.dump").read_text())
        .group(1)
    )
    pos = 0
    while struct.unpack_from(">q", log_bytes, pos)[0] < end:  # the first batch at or past the snapshot's end
        pos += 12 + struct.unpack_from(">i", log_bytes, pos + 8)[0]
    base = struct.unpack_from(">q", log_bytes, pos)[0]
    shutil.copy(FIXTURES / "broker1.checkpoint", tmp_path / f"{end:020d}-0000000001.checkpoint")
    write_segment(tmp_path, base, log_bytes[pos:])
    metrics, pub = Metrics(), MemoryPublisher()
    assert LogBridge(tmp_path, pub, StateFile(None), metrics).step() > 0
    events = [orjson.loads(line) for line in pub.lines]
    from_snapshot = [e for e in events if "snapshotEnd" in e]
    assert from_snapshot and all(e["offset"] == end - 1 and e["snapshotEnd"] == end for e in from_snapshot)
    assert next(e["offset"] for e in events if "snapshotEnd" not in e) == base >= end
    state, quarantined, _ = replay(pub.lines)
    assert not quarantined and not metrics.counts
    whole, _, _ = replay([orjson.dumps(d.envelope()) for d in metadata_log.scan(log_bytes).records])

    def key(s):
        return [
            (t.name, p.partition_id, p.leader, p.leader_epoch, p.isr, p.elr, p.last_known_elr)
            for t, p in s.iter_partitions()
        ]

    assert key(state) == key(whole)
    assert {b: s.fenced for b, s in state.brokers.items()} == {b: s.fenced for b, s in whole.brokers.items()}


def test_log_bridge_restart_publishes_pending_with_the_same_offsets(tmp_path: Path) -> None:
    values = [v for _, v in real_values()[:8]]
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    segment = write_segment(log_dir, 0, make_batch(0, values[:4]))
    state_file = StateFile(tmp_path / "state.json")
    metrics, pub = Metrics(), MemoryPublisher()
    assert LogBridge(log_dir, pub, state_file, metrics).step() == 4
    segment.write_bytes(make_batch(0, values[:4]) + make_batch(4, values[4:]))
    pub.fail = 1  # the broker is down: kept pending in the state file
    crashed = LogBridge(log_dir, pub, state_file, metrics)
    assert crashed.step() == 0 and metrics.counts == {"publish_failed": 1}
    restarted = LogBridge(log_dir, pub, state_file, metrics)  # a new process
    assert restarted.step() == 4
    assert restarted.step() == 0
    assert [orjson.loads(line)["offset"] for line in pub.lines] == list(range(8))
    assert MetadataLogTail(log_dir).poll()  # a tail without state reads everything again (the core dedupes)


# --- the admin poller ------------------------------------------------------------------------------------------------


TOPIC_A = "FbrrdcfiR-KC2CPSTHaJrg"
TOPIC_B = "nJ-GQl6-TAS1YX06s1WjLg"


class FakeReader:
    """A cluster as the admin API shows it; ``fail`` names a call that raises next time."""

    def __init__(self) -> None:
        self.feature_levels = {"metadata.version": 27, "eligible.leader.replicas.version": 1}
        self.broker_fenced = {1: False, 2: False, 3: False}
        self.cluster_config = {"min.insync.replicas": "1"}
        self.topic_config: dict[str, dict[str, str]] = {"a": {"min.insync.replicas": "2"}}
        self.topics: dict[str, tuple[str, list[dict[str, Any]]]] = {
            "a": (TOPIC_A, [self.partition(i, leader=1 + i % 3) for i in range(3)]),
            "b": (TOPIC_B, [self.partition(0, leader=2)]),
        }
        #: Each broker's server.properties (None: not set there); `static_described` counts DescribeConfigs calls.
        self.static: dict[int, dict[str, str | None]] = {
            b: {"min.insync.replicas": "2", "unclean.leader.election.enable": None} for b in (1, 2, 3)
        }
        self.static_described: list[int] = []
        self.fail: str | None = None
        self.page_errors: dict[str, int] = {}
        self.config_errors: dict[str, int] = {}
        self.drop_partition: tuple[str, int] | None = None

    @staticmethod
    def partition(
        i: int,
        leader: int,
        epoch: int = 0,
        isr: list[int] | None = None,
        elr: list[int] | None = None,
        lkelr: list[int] | None = None,
    ) -> dict[str, Any]:
        return {
            "error_code": 0,
            "partition_index": i,
            "leader_id": leader,
            "leader_epoch": epoch,
            "replica_nodes": [1, 2, 3],
            "isr_nodes": isr or [1, 2, 3],
            "eligible_leader_replicas": elr,
            "last_known_elr": lkelr,
            "offline_replicas": [],
        }

    def _maybe_fail(self, call: str) -> None:
        if self.fail == call:
            self.fail = None
            raise ConnectionError(f"{call}: broker unreachable")

    def features(self) -> dict[str, int]:
        self._maybe_fail("features")
        return dict(self.feature_levels)

    def brokers(self) -> dict[int, Broker]:
        self._maybe_fail("brokers")
        return {b: Broker(f) for b, f in self.broker_fenced.items()}

    def partitions_page(self, cursor: tuple[str, int] | None, limit: int) -> dict[str, Any]:
        if cursor is not None:
            self._maybe_fail("second page")
        flat = [
            (name, p)
            for name in sorted(self.topics)
            for p in self.topics[name][1]
            if (name, p["partition_index"]) != self.drop_partition
        ]
        start = 0 if cursor is None else next(i for i, (n, p) in enumerate(flat) if (n, p["partition_index"]) == cursor)
        page, rest = flat[start : start + limit], flat[start + limit :]
        topics: list[dict[str, Any]] = []
        for name, p in page:
            if not topics or topics[-1]["name"] != name:
                topics.append(
                    {
                        "name": name,
                        "topic_id": self.topics[name][0],
                        "error_code": self.page_errors.get(name, 0),
                        "partitions": [],
                    }
                )
            topics[-1]["partitions"].append(dict(p))
        return {"topics": topics, "next_cursor": (rest[0][0], rest[0][1]["partition_index"]) if rest else None}

    def static_configs(self, broker_id: int) -> dict[str, str | None]:
        self._maybe_fail(f"static {broker_id}")
        self.static_described.append(broker_id)
        return dict(self.static[broker_id])

    def configs(self, topics: list[str]) -> dict[tuple[int, str], tuple[int, dict[str, str]]]:
        self._maybe_fail("configs")
        out = {(4, ""): (0, dict(self.cluster_config))}
        for t in topics:
            out[(2, t)] = (self.config_errors.get(t, 0), dict(self.topic_config.get(t, {})))
        return out


def admin_bridge(
    reader: FakeReader, state: StateFile | None = None, pub: MemoryPublisher | None = None
) -> tuple[AdminBridge, MemoryPublisher, Metrics]:
    pub = pub or MemoryPublisher()
    metrics = Metrics()
    clock = iter(range(1_000_000, 10_000_000, 1000))
    return (
        AdminBridge(reader, pub, state or StateFile(None), metrics, page_size=2, clock_ms=lambda: next(clock)),
        pub,
        metrics,
    )


def core_view(state: ClusterState) -> dict[Any, Any]:
    out: dict[Any, Any] = {
        (t.name, p.partition_id): (p.leader, p.leader_epoch, list(p.isr), list(p.elr), list(p.last_known_elr))
        for t, p in state.iter_partitions()
    }
    out["brokers"] = {b: s.fenced for b, s in state.brokers.items() if s.registered}
    out["configs"] = (dict(state.cluster_configs), {k: v for k, v in state.topic_configs.items() if v})
    out["features"] = dict(state.features)
    out["static"] = {node: dict(c) for node, c in state.static_configs.items() if c}
    return out


def reader_view(reader: FakeReader) -> dict[Any, Any]:
    out: dict[Any, Any] = {
        (name, p["partition_index"]): (
            p["leader_id"],
            p["leader_epoch"],
            p["isr_nodes"],
            p["eligible_leader_replicas"] or [],
            p["last_known_elr"] or [],
        )
        for name, (_, parts) in reader.topics.items()
        for p in parts
    }
    out["brokers"] = dict(reader.broker_fenced)
    out["configs"] = (dict(reader.cluster_config), {k: v for k, v in reader.topic_config.items() if v})
    out["features"] = dict(reader.feature_levels)
    static = {b: {k: v for k, v in c.items() if v is not None} for b, c in reader.static.items()}
    out["static"] = {b: c for b, c in static.items() if c}
    return out


def test_admin_poll_publishes_changes_the_core_accepts() -> None:
    reader = FakeReader()
    bridge, pub, metrics = admin_bridge(reader)
    assert bridge.step() > 0
    assert bridge.step() == 0  # nothing changed: nothing published
    # A broker fails: ISR shrinks, ELR forms, the leader moves (epoch + 1), then jumps two elections at once.
    reader.broker_fenced[3] = True
    reader.topics["a"][1][2] = reader.partition(2, leader=1, epoch=1, isr=[1, 2])
    reader.topics["a"][1][0] = reader.partition(0, leader=2, epoch=3, isr=[2], elr=[1], lkelr=[3])
    reader.topic_config["a"] = {"min.insync.replicas": "3", "unclean.leader.election.enable": "true"}
    reader.cluster_config = {"min.insync.replicas": "2"}
    assert bridge.step() > 0
    events = [orjson.loads(line) for line in pub.lines]
    assert all(e["source"] == "admin-poll" for e in events)
    offsets = [e["offset"] for e in events]
    assert offsets == sorted(set(offsets))
    types = [e["type"] for e in events[-6:]]
    assert types[-1] == "BROKER_REGISTRATION_CHANGE_RECORD"  # the fence after the ISR changes, as Kafka writes it
    assert "PARTITION_RECORD" in types and "PARTITION_CHANGE_RECORD" in types  # a jump of 3 epochs: replaced
    state, quarantined, _ = replay(pub.lines)
    assert not quarantined  # derived broker epochs pass the core's broker-epoch checks
    assert core_view(state) == reader_view(reader)
    doc = cluster_doc(state)
    assert doc["derivedFrom"] == "admin-poll" and "brokerEpoch" in doc["unknown"]
    assert not metrics.counts
    # The broker comes back and the partitions recover.
    reader.broker_fenced[3] = False
    reader.topics["a"][1][0] = reader.partition(0, leader=2, epoch=3)
    reader.topics["a"][1][2] = reader.partition(2, leader=3, epoch=2)
    assert bridge.step() > 0
    state, quarantined, _ = replay(pub.lines)
    assert not quarantined and core_view(state) == reader_view(reader)


def test_admin_faults_publish_nothing_wrong_and_keep_going() -> None:
    reader = FakeReader()
    bridge, pub, metrics = admin_bridge(reader)
    bridge.step()
    published = len(pub.lines)
    for call, reason in (
        ("features", "broker_unreachable"),
        ("configs", "broker_unreachable"),
        ("second page", "partial_page"),
    ):
        reader.fail = call
        reader.broker_fenced[2] = not reader.broker_fenced[2]  # a change that must wait for a whole poll
        assert bridge.step() == 0, call
        assert len(pub.lines) == published
        assert metrics.counts[reason] >= 1
        assert bridge.step() == 1  # the next poll publishes the change
        published = len(pub.lines)
    # A partition missing from a page (a gap): that topic keeps its last state, the others go on.
    reader.drop_partition = ("a", 1)
    reader.topics["b"][1][0] = reader.partition(0, leader=3, epoch=1)
    reader.topics["a"][1][0] = reader.partition(0, leader=1, epoch=5)
    assert bridge.step() == 1
    assert orjson.loads(pub.lines[-1])["data"]["topicId"] == TOPIC_B
    assert metrics.counts["partial_page"] == 2
    reader.drop_partition = None
    assert bridge.step() == 1  # now topic a's change
    state, quarantined, _ = replay(pub.lines)
    assert not quarantined and core_view(state) == reader_view(reader)
    assert metrics.registry.get_sample_value("elrwatch_bridge_errors_total", {"reason": "partial_page"}) == 2


def test_topic_deleted_between_and_during_polls() -> None:
    reader = FakeReader()
    bridge, pub, metrics = admin_bridge(reader)
    bridge.step()
    # Deleted while being described (DescribeTopicPartitions says UNKNOWN_TOPIC_OR_PARTITION): nothing published.
    reader.page_errors["b"] = 3
    assert bridge.step() == 0 and metrics.counts["topic_deleted"] == 1
    # Its configs vanish between DescribeTopicPartitions and DescribeConfigs: its configs are kept.
    reader.page_errors.clear()
    reader.config_errors["a"] = 3
    assert bridge.step() == 0 and metrics.counts["topic_deleted"] == 2
    reader.config_errors.clear()
    # Deleted between two polls: REMOVE_TOPIC_RECORD, logged and counted.
    del reader.topics["b"]
    assert bridge.step() == 1
    assert orjson.loads(pub.lines[-1])["type"] == "REMOVE_TOPIC_RECORD"
    assert metrics.counts["topic_deleted"] == 3
    # Re-created with the same name (a new id): removed and created again.
    reader.topics["b"] = ("AAAAAAAAAAAAAAAAAAAABQ", [reader.partition(0, leader=1)])
    assert bridge.step() == 2
    state, quarantined, _ = replay(pub.lines)
    assert not quarantined and core_view(state) == reader_view(reader)


def test_admin_restart_neither_duplicates_nor_loses(tmp_path: Path) -> None:
    reader = FakeReader()
    state_file = StateFile(tmp_path / "admin.json")
    pub = MemoryPublisher()
    first, _, _ = admin_bridge(reader, state_file, pub)
    first.step()
    published = len(pub.lines)
    second, _, _ = admin_bridge(reader, state_file, pub)  # restarted, nothing changed
    assert second.step() == 0 and len(pub.lines) == published
    # A change, but the event topic is down: the records stay pending in the state file; the process dies.
    reader.topics["a"][1][1] = reader.partition(1, leader=2, epoch=1, isr=[2, 3])
    pub.fail = 1
    assert second.step() == 0
    third, _, _metrics = admin_bridge(reader, state_file, pub)
    assert third.step() == 1  # the pending record, with its offset
    assert third.step() == 0
    # A crash after the broker took the records but before the state file said so: published twice, same offset.
    reader.topics["a"][1][1] = reader.partition(1, leader=3, epoch=2, isr=[3])
    saved = StateFile(tmp_path / "admin.json").load()
    assert third.step() == 1
    (tmp_path / "admin.json").write_bytes(
        orjson.dumps(
            {
                **third.state.load(),
                "pending": [  # type: ignore[dict-item]
                    pub.lines[-1].decode()
                ],
            }
        )
    )
    assert saved is not None
    fourth, _, _ = admin_bridge(reader, state_file, pub)
    assert fourth.step() == 1
    assert pub.lines[-1] == pub.lines[-2]
    state, quarantined, outcomes = replay(pub.lines)
    assert not quarantined and outcomes.get("duplicate") == 1  # applied once
    assert core_view(state) == reader_view(reader)
    assert state.partition(TOPIC_A, 1).partition_epoch == 2  # two changes, each counted once


def test_diff_order_and_epochs() -> None:
    old = View(brokers={1: Broker(False, epoch=7)})
    new = View(brokers={1: Broker(True), 2: Broker(False)})
    events = diff(old, new, 100, 5)
    assert [(e["type"], e["offset"]) for e in events] == [
        ("REGISTER_BROKER_RECORD", 100),
        ("BROKER_REGISTRATION_CHANGE_RECORD", 101),
    ]
    assert events[0]["data"]["brokerEpoch"] == 100 and events[1]["data"]["brokerEpoch"] == 7
    assert new.brokers[2].epoch == 100 and new.brokers[1].epoch == 7
    assert View.from_json(orjson.loads(orjson.dumps(new.to_json()))) == new


# --- metrics and CLI ---------------------------------------------------------------------------------------------------


def test_metrics_are_served() -> None:
    from elrwatch.devtools.kafka_cluster import free_port

    metrics = Metrics()
    metrics.error("broker_unreachable", "test")
    port = free_port()
    server = metrics.serve(port, "127.0.0.1")
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        if isinstance(server, tuple):
            server[0].shutdown()
    assert 'elrwatch_bridge_errors_total{reason="broker_unreachable"} 1.0' in text
    assert 'elrwatch_bridge_errors_total{reason="partial_page"} 0.0' in text


def test_cli_refuses_bad_options(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from elrwatch.cli import app

    runner = CliRunner()
    base = ["bridge", "--bootstrap-servers", "127.0.0.1:1", "--topic", "ev"]
    result = runner.invoke(app, [*base, "--source", "zk"])
    assert result.exit_code == 2 and "--source must be admin or metadata-log" in result.output
    result = runner.invoke(app, [*base, "--source", "metadata-log", "--log-dir", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "not a directory" in result.output
    result = runner.invoke(app, ["bridge", "--source", "admin"])
    assert result.exit_code == 2 and "--bootstrap-servers and --topic are required" in result.output
    # A ZooKeeper-mode broker's log directory (Kafka 3.x writes meta.properties with broker.id, no node.id).
    zk = tmp_path / "zk-broker"
    zk.mkdir()
    (zk / "meta.properties").write_text("#\nversion=0\nbroker.id=1\ncluster.id=abc\n")
    for log_dir in (zk, zk / "__cluster_metadata-0"):
        result = runner.invoke(app, [*base, "--source", "metadata-log", "--log-dir", str(log_dir)])
        assert (
            result.exit_code == 2 and "ZooKeeper-mode cluster has no metadata log, use --source admin" in result.output
        ), result.output
        assert len(result.output.strip().splitlines()) == 1, result.output


def test_polled_data_says_what_it_cannot_know_in_report_store_and_api(tmp_path: Path) -> None:
    """`elrwatch replay` of admin-poll events, the status store and /v1/summary all carry derivedFrom/unknown."""
    from fastapi.testclient import TestClient

    from elrwatch.api.app import create_app
    from elrwatch.api.settings import Settings
    from elrwatch.state.replay import replay_lines
    from elrwatch.store import StatusStore

    bridge, pub, _ = admin_bridge(FakeReader())
    bridge.step()
    document = replay_lines([line.decode() for line in pub.lines], "events").document(advice=False)
    assert document["cluster"]["derivedFrom"] == "admin-poll"
    assert "transitionsBetweenPolls" in document["cluster"]["unknown"]
    store = StatusStore(f"sqlite:///{tmp_path}/api.db")
    try:
        store.load_document(document, batch_id=1)
        with TestClient(create_app(Settings(store=str(store.url)), store=store)) as client:
            summary = client.get("/v1/summary").json()
        assert summary["derivedFrom"] == "admin-poll" and "partitionEpoch" in summary["unknownFacts"]
        # the epochs and incarnation ids the admin API does not show are null, not the bridge's own numbers
        assert document["brokers"] and all(
            (b["epoch"], b["incarnationId"]) == (None, None) for b in document["brokers"]
        ), document["brokers"]
        with TestClient(create_app(Settings(store=str(store.url)), store=store)) as client:
            brokers = client.get("/v1/brokers").json()
        assert brokers and all((b["epoch"], b["incarnationId"]) == (None, None) for b in brokers), brokers
    finally:
        store.dispose()
    state, _, _ = replay(pub.lines)
    assert state.brokers and not any(b.epoch_known for b in state.brokers.values())
    exact = replay_lines(
        [
            orjson.dumps(d.envelope()).decode()
            for d in metadata_log.scan((FIXTURES / "controller.log").read_bytes()).records
        ],
        "log",
    )
    doc = exact.document(advice=False)
    assert doc["cluster"]["derivedFrom"] is None and doc["cluster"]["unknown"] == []
    assert doc["brokers"] and all(isinstance(b["epoch"], int) and b["incarnationId"] for b in doc["brokers"])
    assert all(b.epoch_known for b in exact.cluster.brokers.values())


def test_tail_resumes_from_a_snapshot_when_its_segments_were_deleted(tmp_path: Path) -> None:
    """The bridge was down while Kafka snapshotted and deleted the segments it was reading: it publishes the
    newest snapshot (snapshotEnd) and goes on from the log; the core ends where a full replay ends."""
    log_bytes = (FIXTURES / "controller.log").read_bytes()
    end = 66  # broker1.checkpoint's end offset
    pos = 0
    while struct.unpack_from(">q", log_bytes, pos)[0] < end:
        pos += 12 + struct.unpack_from(">i", log_bytes, pos + 8)[0]
    base = struct.unpack_from(">q", log_bytes, pos)[0]
    log_dir, state_file = tmp_path / "log", StateFile(tmp_path / "state.json")
    log_dir.mkdir()
    cut = 0
    while struct.unpack_from(">q", log_bytes, cut)[0] < 20:
        cut += 12 + struct.unpack_from(">i", log_bytes, cut + 8)[0]
    write_segment(log_dir, 0, log_bytes[:cut])  # the bridge read the first batches (offsets < 20)...
    metrics, pub = Metrics(), MemoryPublisher()
    assert LogBridge(log_dir, pub, state_file, metrics).step() > 0
    (log_dir / f"{0:020d}.log").unlink()  # ... then was down: snapshot at 66, older segments deleted
    shutil.copy(FIXTURES / "broker1.checkpoint", log_dir / f"{end:020d}-0000000001.checkpoint")
    write_segment(log_dir, base, log_bytes[pos:])
    restarted = LogBridge(log_dir, pub, state_file, metrics)
    assert restarted.step() > 0
    assert restarted.step() == 0
    events = [orjson.loads(line) for line in pub.lines]
    assert any(e.get("snapshotEnd") == end for e in events)
    state, quarantined, _ = replay(pub.lines)
    whole, _, _ = replay([orjson.dumps(d.envelope()) for d in metadata_log.scan(log_bytes).records])

    def key(s):
        return [(t.name, p.partition_id, p.leader, p.isr, p.elr, p.last_known_elr) for t, p in s.iter_partitions()]

    assert not quarantined and key(state) == key(whole) and not metrics.counts


def test_kafka_reader_keeps_only_configs_set_on_the_resource() -> None:
    """DescribeConfigs answers every key with its source: only TOPIC_CONFIG (1) on a topic and
    DYNAMIC_DEFAULT_BROKER_CONFIG (3) on the cluster default count (not a node's file, 4, nor Kafka's default, 5)."""
    import asyncio
    from types import SimpleNamespace as NS

    from elrwatch.bridge.admin import KafkaClusterReader

    def entry(name: str, value: str, source: int) -> NS:
        return NS(name=name, value=value, config_source=source)

    answers = {
        (4, ""): [entry("min.insync.replicas", "2", 3), entry("unclean.leader.election.enable", "false", 5)],
        (2, "a"): [entry("min.insync.replicas", "3", 1), entry("unclean.leader.election.enable", "true", 3)],
        (2, "b"): [entry("min.insync.replicas", "2", 4)],
    }
    sent: list[Any] = []

    class Manager:
        async def send(self, request: Any) -> Any:
            sent.append(request)
            return NS(
                results=[
                    NS(resource_type=rt, resource_name=name, error_code=0, configs=answers[(rt, name)])
                    for rt, name, _keys in request.resources
                ]
            )

        def run(self, fn: Any) -> Any:
            return asyncio.run(fn())

    reader = KafkaClusterReader({"bootstrap_servers": ["x:1"]}, config_batch=2)
    reader._admin = NS(_manager=Manager())
    got = reader.configs(["a", "b"])
    assert got == {
        (4, ""): (0, {"min.insync.replicas": "2"}),
        (2, "a"): (0, {"min.insync.replicas": "3"}),
        (2, "b"): (0, {}),
    }
    assert len(sent) == 2  # batched


def test_static_configs_are_described_once_per_start_and_resolve_min_isr() -> None:
    """A broker's server.properties (DescribeConfigs of that broker, synonyms' source 4) is described when the
    broker is first seen and when it comes back, published as STATIC_BROKER_CONFIG_RECORD, and resolves the min ISR
    of topics without a config of their own (no --default-min-isr)."""
    reader = FakeReader()
    reader.cluster_config = {}
    bridge, pub, metrics = admin_bridge(reader)
    bridge.step()
    assert sorted(reader.static_described) == [1, 2, 3]
    state, quarantined, _ = replay(pub.lines)
    assert not quarantined and core_view(state) == reader_view(reader)
    topic_b = next(t for t in state.topics.values() if t.name == "b")
    assert state.effective_min_isr(topic_b) == 2 and cluster_doc(state)["defaultMinIsrSource"].startswith("static")
    bridge.step()
    assert sorted(reader.static_described) == [1, 2, 3]  # not again while the brokers stay up
    reader.broker_fenced[2] = True
    bridge.step()
    reader.broker_fenced[2] = False
    reader.static[2] = {"min.insync.replicas": "3", "unclean.leader.election.enable": "true"}  # restarted with
    reader.fail = "static 2"  # a failed describe keeps what was known and says so
    bridge.step()
    assert metrics.counts.get("broker_unreachable") == 1
    reader.broker_fenced[2] = True
    bridge.step()
    reader.broker_fenced[2] = False
    bridge.step()
    assert reader.static_described.count(2) == 2
    state, quarantined, _ = replay(pub.lines)
    assert not quarantined and core_view(state) == reader_view(reader)
    published = [orjson.loads(line) for line in pub.lines if b"STATIC_BROKER_CONFIG_RECORD" in line]
    assert [e["data"] for e in published[-2:]] == [
        {"nodeId": 2, "name": "min.insync.replicas", "value": "3"},
        {"nodeId": 2, "name": "unclean.leader.election.enable", "value": "true"},
    ]


def test_log_bridge_publishes_the_nodes_static_configs(tmp_path: Path) -> None:
    """--server-properties: the node's static configs go out before the log's records, again only when the file
    changes them, not after a restart; an unreadable file is one counted error and the log keeps flowing."""
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    write_segment(log_dir, 0, make_batch(0, [v for _, v in real_values()[:3]]))
    props = tmp_path / "server.properties"
    props.write_text("process.roles=broker,controller\nnode.id=1\n# min.insync.replicas=3\nmin.insync.replicas : 2\n")
    state_file = StateFile(tmp_path / "state.json")
    metrics, pub = Metrics(), MemoryPublisher()
    bridge = LogBridge(log_dir, pub, state_file, metrics, props)
    assert bridge.step() == 5
    first = [orjson.loads(line) for line in pub.lines]
    assert [e["data"] for e in first[:2]] == [
        {"nodeId": 1, "name": "min.insync.replicas", "value": "2"},
        {"nodeId": 1, "name": "unclean.leader.election.enable", "value": None},
    ]
    assert "offset" not in first[0] and first[2]["offset"] == 0  # not a metadata-log record: no offset
    assert bridge.step() == 0
    props.write_text("node.id=1\nmin.insync.replicas=3\n")
    assert bridge.step() == 1 and orjson.loads(pub.lines[-1])["data"]["value"] == "3"
    assert LogBridge(log_dir, pub, state_file, metrics, props).step() == 0  # a restart: nothing new
    props.unlink()
    assert bridge.step() == 0 and bridge.step() == 0
    assert metrics.counts == {"properties_unreadable": 1}
    state, quarantined, _ = replay(pub.lines)
    assert not quarantined and state.static_configs == {1: {"min.insync.replicas": "3"}}


def test_server_properties_parse_like_java() -> None:
    from elrwatch.bridge.static_config import PropertiesError, parse_server_properties

    found = parse_server_properties("broker.id=4\nmin.insync.replicas \\\n   2\nunclean.leader.election.enable:true\n")
    assert (found.node_id, found.values) == (4, {"min.insync.replicas": "2", "unclean.leader.election.enable": "true"})
    with pytest.raises(PropertiesError, match=r"neither node\.id nor broker\.id"):
        parse_server_properties("min.insync.replicas=2\n", "a.properties")


def test_static_layer_reads_the_static_synonym() -> None:
    """With a dynamic value on top, the STATIC_BROKER_CONFIG synonym still gives the file's value; only Kafka's
    default (5): None."""
    from types import SimpleNamespace as NS

    from elrwatch.bridge.admin import static_layer

    def syn(value: str, source: int) -> NS:
        return NS(name="x", value=value, source=source)

    configs = [
        NS(name="min.insync.replicas", value="3", config_source=3, synonyms=[syn("3", 3), syn("2", 4), syn("1", 5)]),
        NS(name="unclean.leader.election.enable", value="false", config_source=5, synonyms=[syn("false", 5)]),
        NS(name="log.retention.ms", value="1", config_source=4, synonyms=[syn("1", 4)]),
    ]
    assert static_layer(configs) == {"min.insync.replicas": "2", "unclean.leader.election.enable": None}


class KeyingPublisher(MemoryPublisher):
    """A memory publisher that keys lines as KafkaPublisher does (`produce.EventKeys`), learnt topics included."""

    def __init__(self) -> None:
        from elrwatch.kafkaio.produce import EventKeys

        super().__init__()
        self.keys = EventKeys()

    def learn_topic(self, name: str, topic_id: str) -> None:
        self.keys.learn(name, topic_id)


def test_admin_restart_keeps_keying_known_topics_configs_with_their_partitions(tmp_path: Path) -> None:
    """A restarted bridge tells its publisher the topics it published: their min ISR changes keep the key of
    their partition changes (`produce.EventKeys`), so the two stay in order on a multi-partition event topic."""
    reader = FakeReader()
    state_file = StateFile(tmp_path / "admin.json")
    admin_bridge(reader, state_file)[0].step()
    pub = KeyingPublisher()
    admin_bridge(reader, state_file, pub)
    config = orjson.dumps(
        {
            "type": "CONFIG_RECORD",
            "version": 0,
            "data": {"resourceType": 2, "resourceName": "a", "name": "min.insync.replicas", "value": "3"},
        }
    )
    assert pub.keys(config) == f"topic:{TOPIC_A}".encode()


def test_log_bridge_restart_keeps_keying_known_topics_configs_with_their_partitions(tmp_path: Path) -> None:
    """The metadata-log bridge keeps the topics it published in its state file: restarted past their TOPIC_RECORDs,
    it still tells its publisher, so their min ISR changes keep the key of their partition changes."""
    values = real_values()
    topics = {}
    for _, value in values:
        type_name, _version, data = metadata_log.decode_value(value)
        if type_name == "TOPIC_RECORD":
            topics[data["name"]] = data["topicId"]
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    write_segment(log_dir, 0, make_batch(0, [v for _, v in values]))
    state_file = StateFile(tmp_path / "log.json")
    first = LogBridge(log_dir, MemoryPublisher(), state_file, Metrics())
    assert first.step() > 0
    published = {
        e["data"]["name"]: e["data"]["topicId"]
        for e in map(orjson.loads, first.publisher.lines)
        if e["type"] == "TOPIC_RECORD"
    }
    assert topics and published == topics
    pub = KeyingPublisher()
    restarted = LogBridge(log_dir, pub, state_file, Metrics())  # a new process, past every TOPIC_RECORD
    assert restarted.step() == 0
    for name, topic_id in published.items():
        config = orjson.dumps(
            {
                "type": "CONFIG_RECORD",
                "version": 0,
                "data": {"resourceType": 2, "resourceName": name, "name": "min.insync.replicas", "value": "3"},
            }
        )
        assert pub.keys(config) == f"topic:{topic_id}".encode()


class OldClusterReader(FakeReader):
    """A Kafka 3.x cluster: DescribeCluster shows live brokers only, no ELR; ``kraft`` False is ZooKeeper mode (no
    finalized metadata.version)."""

    def __init__(self, kraft: bool) -> None:
        super().__init__()
        self.feature_levels = {"metadata.version": 21} if kraft else {}

    def shows_fenced_brokers(self) -> bool:
        return False

    def brokers(self) -> dict[int, Broker]:
        return {b: Broker(False) for b, fenced in self.broker_fenced.items() if not fenced}


@pytest.mark.parametrize("kraft", [True, False])
def test_old_cluster_a_broker_that_leaves_is_fenced_in_kraft_and_unregistered_in_zookeeper(kraft: bool) -> None:
    reader = OldClusterReader(kraft)
    bridge, pub, metrics = admin_bridge(reader)
    assert bridge.step() > 0
    reader.broker_fenced[3] = True  # gone from DescribeCluster
    reader.topics["a"][1][0] = reader.partition(0, leader=1, epoch=1, isr=[1, 2])
    assert bridge.step() > 0
    events = [orjson.loads(line) for line in pub.lines]
    assert {e["source"] for e in events} == {"admin-poll:fencedBrokers"}
    state, quarantined, _ = replay(pub.lines)
    assert not quarantined and not metrics.counts
    registered = {b: s.fenced for b, s in state.brokers.items() if s.registered}
    assert registered == ({1: False, 2: False, 3: True} if kraft else {1: False, 2: False})
    assert list(state.partition(state.topic_by_name("a").topic_id, 0).isr) == [1, 2]
    # the down broker still counts: fenced (KRaft), or unregistered but named by the partitions' replicas
    brokers = {k: v for k, v in all_gauges(state).items() if k.startswith("elrwatch_brokers{")}
    assert brokers['elrwatch_brokers{state="active"}'] == 2
    assert brokers['elrwatch_brokers{state="fenced"}'] == (1 if kraft else 0)
    assert brokers['elrwatch_brokers{state="unregistered"}'] == (0 if kraft else 1)
    doc = cluster_doc(state)
    assert doc["derivedFrom"] == "admin-poll"
    assert doc["unknown"][-1] == "fencedBrokers" and "partitionEpoch" in doc["unknown"]
    reader.broker_fenced[3] = False  # back: unfenced (KRaft) or registered again (ZooKeeper)
    assert bridge.step() > 0
    state, quarantined, _ = replay(pub.lines)
    assert not quarantined
    assert {b: s.fenced for b, s in state.brokers.items() if s.registered} == {1: False, 2: False, 3: False}


def test_metadata_answer_as_a_page_keeps_leaderless_partitions() -> None:
    from elrwatch.bridge.admin import metadata_page

    topics = [
        {
            "name": "t",
            "topic_id": TOPIC_A,
            "error_code": 0,
            "is_internal": False,
            "partitions": [
                {
                    "error_code": 5,
                    "partition_index": 0,
                    "leader_id": -1,
                    "leader_epoch": 3,
                    "replica_nodes": [2, 3],
                    "isr_nodes": [2],
                    "offline_replicas": [2, 3],
                },
                {
                    "error_code": 0,
                    "partition_index": 1,
                    "leader_id": 1,
                    "leader_epoch": 0,
                    "replica_nodes": [1],
                    "isr_nodes": [1],
                    "offline_replicas": [],
                },
            ],
        }
    ]
    page = metadata_page(topics)
    assert page["next_cursor"] is None
    assert [p["error_code"] for p in page["topics"][0]["partitions"]] == [0, 0]
    topics[0]["partitions"][1]["error_code"] = 29  # any other error stays one
    assert [p["error_code"] for p in metadata_page(topics)["topics"][0]["partitions"]] == [0, 29]
