"""``elrwatch agent``: beside one broker, publish its replicas' log info for the partitions that need an unclean
election — what KIP-966's GetReplicaLogInfo would have answered the controller — and what its log dirs say of its
next start (clean or not).

* It follows the node's own ``__cluster_metadata-0`` copy (`MetadataLogTail`, the metadata-log bridge's reader) into
  an in-memory core `ClusterState`, rebuilt from the node's log at each start: the broker's id (``node.id`` of
  ``meta.properties``), its current broker epoch (its registration), and which partitions it holds a replica of
  have no leader or an empty ISR.
* For each of those it reads the replica's log end offset and last written leader epoch from the local files
  (`replica_log`: batch headers only, a torn tail counted as Kafka's recovery counts it) and publishes a
  ``REPLICA_LOG_INFO_RECORD`` with its current broker epoch, keyed ``topic:<topicId>`` like the partition's other
  records. The envelope has no ``"offset"``: the record is not in the metadata log, and the core orders nothing by
  it (info whose broker epoch no longer matches the registration is ignored, whatever came first).
* When: at start, when a partition of its own becomes leaderless (or its ISR empty), when such a partition's info
  changes (log end offset, epochs, or the broker's epoch after a re-registration), at most ``max_rate`` records a
  second (the rest waits for the next step, oldest first).
* It reads its broker's ``.kafka_cleanshutdown`` in every log dir (Kafka writes it at a clean shutdown with the
  broker's epoch and deletes it at start-up, `read_clean_shutdown`) and publishes a ``CLEAN_SHUTDOWN_RECORD`` whenever
  what it finds changes (the epoch the files agree on or none, dirs checked, dirs with the file) or the broker's
  registration epoch changes, so that the core can say whether the broker's next start will be clean. The broker's
  own metadata log stops with the broker, so the agent cannot tell a stopped broker from a running one: it reads
  the files at every step, and the core applies the report only to a broker the cluster sees stopped.
* Exactly what was published survives a restart in the state file (the bridge's `StateFile` and pending protocol):
  a restart publishes only what changed since.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from elrwatch.bridge import replica_log
from elrwatch.bridge.logtail import MetadataLogTail
from elrwatch.bridge.runner import (
    KafkaPublisher,
    Metrics,
    Publisher,
    SidecarSettings,
    StateFile,
    _Delivery,
    run_until_signalled,
)
from elrwatch.state import records
from elrwatch.state.cluster import REFERENCE_STORE, ClusterState
from elrwatch.state.record_types import CLEAN_SHUTDOWN_RECORD
from elrwatch.state.record_types import REPLICA_LOG_INFO_RECORD as RECORD_TYPE

log = logging.getLogger("elrwatch.agent")

METADATA_DIR = "__cluster_metadata-0"
#: Kafka's clean-shutdown marker in each log dir (``CleanShutdownFileHandler``): ``{"version":0,"brokerEpoch":N}``.
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


class AgentError(ValueError):
    """A setting or a directory the agent cannot work with (one line)."""


def read_node_id(directory: str | os.PathLike) -> int:
    """``node.id`` of a log directory's ``meta.properties``."""
    path = Path(directory) / "meta.properties"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AgentError(f"{path} is missing: not a formatted Kafka log directory") from None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in ("node.id", "broker.id"):
            try:
                return int(value.strip())
            except ValueError:
                break
    raise AgentError(f"{path} has no node.id")


def metadata_log_dir(path: str | os.PathLike) -> Path:
    """The ``__cluster_metadata-0`` directory: ``path`` itself, or the one inside it (a node's metadata.log.dir)."""
    p = Path(path)
    if p.name != METADATA_DIR and (p / METADATA_DIR).is_dir():
        p = p / METADATA_DIR
    if p.name != METADATA_DIR or not p.is_dir():
        raise AgentError(f"--metadata-log-dir {path}: no {METADATA_DIR} directory there")
    return p


def read_clean_shutdown(log_dirs: list[Path]) -> tuple[int | None, int]:
    """(the broker epoch every log dir's ``.kafka_cleanshutdown`` agrees on, or None; how many dirs have a readable
    file). As Kafka's ``LogManager.readBrokerEpochFromCleanShutdownFiles``: a dir without the file, a file without an
    integer ``brokerEpoch`` (unreadable), or epochs that differ give no epoch."""
    epochs: set[int] = set()
    with_file = 0
    for directory in log_dirs:
        try:
            content = orjson.loads((directory / CLEAN_SHUTDOWN_FILE).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        epoch = content.get("brokerEpoch") if isinstance(content, dict) else None
        if type(epoch) is not int:
            continue
        with_file += 1
        epochs.add(epoch)
    agreed = epochs.pop() if with_file == len(log_dirs) and len(epochs) == 1 else None
    return agreed, with_file


@dataclass(frozen=True, slots=True)
class Published:
    """What was last published for one partition (the state file's memory)."""

    broker_epoch: int
    log_end_offset: int
    last_written_leader_epoch: int
    current_leader_epoch: int


class ReplicaLogAgent(_Delivery):
    """One broker's agent; `step` reads the metadata log, the local replicas, and publishes what is due."""

    def __init__(
        self,
        log_dirs: list[str | os.PathLike],
        metadata_dir: str | os.PathLike,
        publisher: Publisher,
        state: StateFile,
        metrics: Metrics,
        max_rate: float = 20.0,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        metadata_lines: Callable[[], list[bytes]] | None = None,
    ) -> None:
        """``metadata_lines``: where the metadata events come from (default: the node's metadata log, read by
        `MetadataLogTail` until caught up at each step)."""
        if not log_dirs:
            raise AgentError("--log-dirs names no directory")
        self.log_dirs = [Path(d) for d in log_dirs]
        for d in self.log_dirs:
            if not d.is_dir():
                raise AgentError(f"--log-dirs {d} is not a directory")
        self.metadata_dir = metadata_log_dir(metadata_dir)
        ids = {read_node_id(d) for d in {*self.log_dirs, self.metadata_dir.parent}}
        if len(ids) != 1:
            raise AgentError(f"the directories belong to different nodes (node.id {sorted(ids)})")
        self.node_id = ids.pop()
        self.publisher, self.state, self.metrics = publisher, state, metrics
        doc = state.load() or {}
        if doc and doc.get("source") != "agent":
            raise AgentError(f"state file {state.path} belongs to a --source {doc.get('source')} bridge")
        if doc and doc.get("nodeId") != self.node_id:
            raise AgentError(f"state file {state.path} belongs to node {doc.get('nodeId')}, not {self.node_id}")
        self.published: dict[tuple[str, int], Published] = {
            (str(t), int(p)): Published(*map(int, rest)) for t, p, *rest in doc.get("published", [])
        }
        self.pending: list[bytes] = [line.encode() for line in doc.get("pending", [])]
        #: The last CLEAN_SHUTDOWN_RECORD's data published (None: none yet).
        self.clean_shutdown: dict[str, Any] | None = doc.get("cleanShutdown")
        self.cluster = ClusterState(store=REFERENCE_STORE)  # a sidecar: the store that needs no numpy
        self.tail = MetadataLogTail(self.metadata_dir, on_error=metrics.error)  # in memory: rebuilt at each start
        self.max_rate = max_rate
        self.clock, self.wall_ms = clock, wall_ms
        self.tokens = max_rate  # token bucket: at most max_rate records a second, bursts of one second
        self.last_refill = clock()
        self.metadata_lines = metadata_lines or self._tail_lines
        self._cache: dict[Path, tuple[Any, replica_log.ReplicaLogInfo]] = {}
        self._errors: dict[Path, str] = {}  # the problem last reported per file
        self._seq = 0
        self.steps = 0

    # -- state file ----------------------------------------------------------------------------------------------

    def _save(self, pending: list[bytes]) -> None:
        self.state.save(
            {
                "source": "agent",
                "nodeId": self.node_id,
                "published": [
                    [t, p, v.broker_epoch, v.log_end_offset, v.last_written_leader_epoch, v.current_leader_epoch]
                    for (t, p), v in sorted(self.published.items())
                ],
                "pending": [line.decode() for line in pending],
                "cleanShutdown": self.clean_shutdown,
            }
        )

    # -- metadata ------------------------------------------------------------------------------------------------

    def _tail_lines(self) -> list[bytes]:
        """Every record the node's metadata log holds past what was read (polled until a poll finds nothing)."""
        lines: list[bytes] = []
        while True:
            found = self.tail.poll()
            if not found:
                return lines
            for rec in found:
                extra: dict[str, Any] = {"snapshotEnd": rec.offset + 1} if rec.from_snapshot else {}
                lines.append(orjson.dumps(rec.decoded.envelope(**extra) | {"offset": rec.offset}))

    def _follow_metadata(self) -> None:
        for line in self.metadata_lines():
            self._seq += 1
            parsed = records.parse_line(line, "metadata-log", self._seq)
            if isinstance(parsed, records.Record):
                self.cluster.apply(parsed)

    @property
    def broker_epoch(self) -> int | None:
        """This node's current broker epoch (None until its registration is read)."""
        broker = self.cluster.brokers.get(self.node_id)
        return broker.epoch if broker is not None and broker.registered else None

    def needing_info(self) -> dict[tuple[str, int], tuple[str, Any]]:
        """(topic id, partition) → (topic name, partition state) of this node's replicas without a leader or ISR."""
        out = {}
        topics = self.cluster.topics
        for p in self.cluster.partitions_with(self.node_id):  # its partitions only
            topic = topics.get(p.topic_id)
            if topic is not None and self.node_id in p.replicas and (p.leader < 0 or not p.isr):
                out[(p.topic_id, p.partition_id)] = (topic.name, p)
        return out

    # -- local files ---------------------------------------------------------------------------------------------

    def _replica_dir(self, name: str, partition: int) -> tuple[Path, Path] | None:
        for d in self.log_dirs:
            candidate = d / f"{name}-{partition}"
            if candidate.is_dir():
                return d, candidate
        return None

    @staticmethod
    def _signature(directory: Path) -> Any:
        """What changes when the replica's log or epoch file changes (so that an idle replica is not re-read)."""
        sig = []
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            if entry.name.endswith(".log") or entry.name in ("leader-epoch-checkpoint", "partition.metadata"):
                st = entry.stat()
                sig.append((entry.name, st.st_size, st.st_mtime_ns))
        return tuple(sig)

    def read_replica(self, topic_id: str, name: str, partition: int) -> replica_log.ReplicaLogInfo | None:
        """The local replica's log info (cached while its files are unchanged), or None when it has no directory
        here or belongs to another topic of the same name."""
        found = self._replica_dir(name, partition)
        if found is None:
            return None
        log_dir, directory = found
        try:
            sig = self._signature(directory)
            cached = self._cache.get(directory)
            if cached is not None and cached[0] == sig:
                info = cached[1]
            else:
                info = replica_log.read_replica_log(directory, self._recovery_point(log_dir, name, partition))
                self._cache[directory] = (sig, info)
        except (OSError, replica_log.ReplicaLogError) as exc:
            self._error_once(directory, f"{directory}: {exc}")
            return None
        self._errors.pop(directory, None)
        if info.topic_id is not None and info.topic_id != topic_id:
            return None  # a directory of an older topic with the same name
        return info

    def _recovery_point(self, log_dir: Path, name: str, partition: int) -> int | None:
        """The partition's recovery point, or None (only the last segment is checked) when the log dir's
        checkpoint cannot be read."""
        path = log_dir / "recovery-point-offset-checkpoint"
        try:
            return replica_log.read_offset_checkpoint(path).get((name, partition))
        except (OSError, replica_log.ReplicaLogError) as exc:
            self._error_once(path, f"{exc}; checking only the last segment of each replica")
            return None

    def _error_once(self, where: Path, message: str) -> None:
        """Count and log a problem with a file once, not at every step while it lasts."""
        if self._errors.get(where) != message:
            self._errors[where] = message
            self.metrics.error("replica_log_unreadable", message)

    # -- step ----------------------------------------------------------------------------------------------------

    def due(self) -> list[dict[str, Any]]:
        """The REPLICA_LOG_INFO_RECORD events to publish now, before the rate limit (partitions that regained a
        leader are forgotten, so that becoming leaderless again publishes again)."""
        epoch = self.broker_epoch
        needing = self.needing_info()
        for key in [k for k in self.published if k not in needing]:
            del self.published[key]
        if epoch is None:
            return []
        events = []
        for (topic_id, pid), (name, p) in sorted(needing.items(), key=lambda kv: kv[0]):
            info = self.read_replica(topic_id, name, pid)
            if info is None:
                continue
            now = Published(epoch, info.log_end_offset, info.last_written_leader_epoch, p.leader_epoch)
            if self.published.get((topic_id, pid)) == now:
                continue
            events.append(
                {
                    "type": RECORD_TYPE,
                    "version": 0,
                    "timestamp": self.wall_ms(),
                    "data": {
                        "topicId": topic_id,
                        "partitionId": pid,
                        "brokerId": self.node_id,
                        "brokerEpoch": epoch,
                        "logEndOffset": info.log_end_offset,
                        "lastWrittenLeaderEpoch": info.last_written_leader_epoch,
                        "currentLeaderEpoch": p.leader_epoch,
                    },
                }
            )
        return events

    def clean_shutdown_due(self) -> dict[str, Any] | None:
        """The CLEAN_SHUTDOWN_RECORD to publish now: when the files or the registration epoch changed since the last
        one (None: nothing changed, or the broker's registration is not read yet)."""
        epoch = self.broker_epoch
        if epoch is None:
            return None
        agreed, with_file = read_clean_shutdown(self.log_dirs)
        data = {
            "brokerId": self.node_id,
            "registrationEpoch": epoch,
            "cleanShutdownEpoch": agreed,
            "logDirs": len(self.log_dirs),
            "logDirsWithFile": with_file,
        }
        if data == self.clean_shutdown:
            return None
        return {"type": CLEAN_SHUTDOWN_RECORD, "version": 0, "timestamp": self.wall_ms(), "data": data}

    def _poll(self) -> ClusterState | None:
        """The cluster state after what the metadata log appended since the last step."""
        try:
            self._follow_metadata()
        except OSError as exc:
            self.metrics.error("log_unreadable", f"{self.tail.log_dir}: {exc}")
            return None
        return self.cluster

    def _publish_changes(self, cluster: ClusterState) -> int:
        """Read the replicas that need it, publish what is due within the rate."""
        now = self.clock()
        self.tokens = min(self.max_rate, self.tokens + (now - self.last_refill) * self.max_rate)
        self.last_refill = now
        shutdown = self.clean_shutdown_due()
        events = [*([shutdown] if shutdown is not None else []), *self.due()]
        events = events[: int(self.tokens)]
        if not events:
            return 0
        self.tokens -= len(events)
        for e in events:
            d = e["data"]
            if e["type"] == CLEAN_SHUTDOWN_RECORD:
                self.clean_shutdown = d
                continue
            self.published[(d["topicId"], d["partitionId"])] = Published(
                d["brokerEpoch"], d["logEndOffset"], d["lastWrittenLeaderEpoch"], d["currentLeaderEpoch"]
            )
        return self._deliver([orjson.dumps(e) for e in events])


def run_agent(
    settings: SidecarSettings, *, log_dirs: list[str], metadata_log_dir: str, max_rate: float = 20.0
) -> Metrics:
    """What ``elrwatch agent`` runs: step the agent every interval of the settings until SIGTERM/SIGINT or their
    duration."""
    metrics = Metrics()
    publisher = KafkaPublisher(settings.options, settings.topic)
    state = StateFile(settings.state_file)
    try:
        agent = ReplicaLogAgent(log_dirs, metadata_log_dir, publisher, state, metrics, max_rate)
    except BaseException:
        publisher.close()
        raise
    if settings.metrics_port is not None:
        metrics.serve(settings.metrics_port, settings.metrics_host)
    log.warning(
        "elrwatch agent: node %d, log dirs %s → topic %s (state file: %s)",
        agent.node_id,
        ",".join(map(str, agent.log_dirs)),
        settings.topic,
        settings.state_file or "none",
    )
    run_until_signalled(agent, settings.interval_s, settings.duration_s, publisher.close)
    return metrics


__all__ = [
    "AgentError",
    "Published",
    "ReplicaLogAgent",
    "metadata_log_dir",
    "read_clean_shutdown",
    "read_node_id",
    "run_agent",
]
