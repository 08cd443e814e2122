"""A real Apache Kafka cluster on loopback, for tests, benchmarks and the demo (never the product's runtime).

One dedicated controller and N brokers (default 3), each its own JVM started from the jars that ``make kafka-jars``
fetched from Maven Central (``tools/kafka/pom.xml`` → ``.tools/kafka/libs/``). Older releases run from their own
jars (``version="3.9.1"`` or ``"3.7.2"``: ``tools/kafka-<version>/pom.xml`` → ``.tools/kafka-<version>/libs/``), in
KRaft mode or, for 3.9.1, in ZooKeeper mode (``mode="zookeeper"``: one ZooKeeper node, run from the same jars, in
the controller's place; the brokers elect their controller among themselves; there is no metadata log):

* KRaft storage is formatted with Kafka's own ``StorageTool format`` (4.x: with
  ``eligible.leader.replicas.version=1``; 3.x has no ELR);
* session, heartbeat and replica-lag timeouts are short, so that a fence or an ISR shrink takes a second or two;
* every node's JVM is small (``-Xmx384m``, SerialGC, C1 only); ``heap=`` and ``jvm_opts=`` change that for benches;
* the harness can create topics with configs, kill -9 / SIGSTOP / stop cleanly / restart a broker, change
  ``min.insync.replicas`` at topic and cluster level, run unclean and preferred elections and reassignments, and
  dump the controller's ``__cluster_metadata`` with Kafka's ``DumpLogSegments --cluster-metadata-decoder``;
* every process it started is ended by ``stop()``, by the context manager and at interpreter exit; a failed start
  (port taken, jar missing, JVM exited) raises :class:`ClusterError` with the node's last log lines within seconds.

Usage::

    with KafkaCluster(brokers=3) as cluster:
        cluster.create_topic("orders", partitions=3, replication_factor=3, configs={"min.insync.replicas": "2"})
        cluster.kill_broker(2)                    # kill -9
        cluster.wait_for(lambda: 2 in cluster.fenced_brokers(), "broker 2 fenced")
        dump = cluster.dump_metadata_log()        # DumpLogSegments text, as `elrwatch replay` reads it
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Where ``make kafka-jars`` puts Kafka's jars; ``ELRWATCH_KAFKA_LIBS`` overrides it.
DEFAULT_LIBS = REPO_ROOT / ".tools" / "kafka" / "libs"
#: The Kafka version pinned in tools/kafka/pom.xml (checked against the jars found).
KAFKA_VERSION = "4.4.0"
#: Every version the harness runs (tools/kafka*/pom.xml) and its modes.
VERSIONS: dict[str, tuple[str, ...]] = {KAFKA_VERSION: ("kraft",), "3.9.1": ("kraft", "zookeeper"), "3.7.2": ("kraft",)}
MODES = ("kraft", "zookeeper")
#: The API key of DescribeTopicPartitions (advertised from Kafka 3.8 on, by KRaft brokers only).
DESCRIBE_TOPIC_PARTITIONS = 75
#: The maximum heap of every Kafka node by default (``KafkaCluster(heap=...)`` changes it): enough for tests and a
#: few tens of thousands of partitions; bench/bridge.py ran 100k partitions on 6 brokers of 1g each.
DEFAULT_HEAP = "384m"
#: Small heaps and a quick JIT keep four JVMs near 1.5 GB and start each in a few seconds.
DEFAULT_JVM_OPTS = (
    "-Xms64m",
    f"-Xmx{DEFAULT_HEAP}",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xss512k",
    "-Djava.awt.headless=true",
)
TOOL_JVM_OPTS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")
_JVM_SIZE = re.compile(r"[1-9][0-9]*[kKmMgG]?")
#: The name of the extra client listener that ``listener_security`` adds on the first broker.
SECURE_LISTENER = "SECURE"

_LOG4J2_XML = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="out" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d{HH:mm:ss,SSS}] %-5p %m (%c{1})%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Logger name="kafka.controller" level="INFO"/>
    <Logger name="org.apache.kafka.controller" level="INFO"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.clients" level="WARN"/>
    <Logger name="kafka.log" level="WARN"/>
    <Logger name="org.apache.kafka.storage" level="WARN"/>
    <Logger name="kafka.server.metadata" level="WARN"/>
    <Root level="INFO"><AppenderRef ref="out"/></Root>
  </Loggers>
</Configuration>
"""


#: Kafka 3.x logs through log4j 1 (reload4j).
_LOG4J_PROPERTIES = """log4j.rootLogger=INFO, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d{HH:mm:ss,SSS}] %-5p %m (%c{1})%n
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.kafka.log=WARN
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.kafka.zookeeper=WARN
"""


class ClusterError(RuntimeError):
    """A node failed to start or a cluster operation failed; the message holds the node's last log lines."""


class AdminCallError(ClusterError):
    """An admin request found no broker to answer it within its timeout (brokers coming and going): ``wait_for``
    polls on through it, unlike other cluster errors (a node that died)."""


class _MetadataLag(Exception):
    """A broker answered UNKNOWN_TOPIC_OR_PARTITION for a topic this cluster created: its metadata cache has not
    caught up with the controller yet (the admin client may ask another broker than the previous request did)."""


#: SASL mechanisms the harness's SCRAM listener can enable (credentials added at format time).
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def sasl_ssl_listener(
    keystore_pem: str | os.PathLike,
    users: Mapping[str, str],
    *,
    mechanism: str = "SCRAM-SHA-512",
    port: int | None = None,
    client_truststore_pem: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """The ``listener_security`` of a SASL_SSL listener with SCRAM users, for :class:`KafkaCluster`.

    ``keystore_pem``: the broker's unencrypted PKCS#8 private key followed by its certificate chain in one PEM file
    (``devtools/tls.py`` writes one); Kafka reads it as ``ssl.keystore.type=PEM``. ``users``: name → password,
    added to the metadata at format time (``StorageTool format --add-scram``; names and passwords of letters,
    digits, ``-`` and ``_`` only, as that option's syntax has no escaping). ``client_truststore_pem``: require
    client certificates signed by that CA (mutual TLS on top of SASL). The props are prefixed with the listener's
    name, so the PLAINTEXT listeners (inter-broker, the harness's admin client) are unchanged.
    """
    mechanism = mechanism.upper()
    if mechanism not in SCRAM_MECHANISMS:
        raise ClusterError(f"mechanism {mechanism} is not one of {', '.join(SCRAM_MECHANISMS)}")
    if not users:
        raise ClusterError("a SCRAM listener needs at least one user")
    for name, password in users.items():
        if not (_plain_token(name) and _plain_token(password)):
            raise ClusterError(f"SCRAM user {name!r}: use letters, digits, '-' and '_' only (--add-scram syntax)")
    if not Path(keystore_pem).is_file():
        raise ClusterError(f"keystore {keystore_pem} does not exist")
    prefix = f"listener.name.{SECURE_LISTENER.lower()}."
    props = {
        f"{prefix}ssl.keystore.type": "PEM",
        f"{prefix}ssl.keystore.location": str(keystore_pem),
        f"{prefix}sasl.enabled.mechanisms": mechanism,
        f"{prefix}{mechanism.lower()}.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
    }
    if client_truststore_pem is not None:
        props[f"{prefix}ssl.truststore.type"] = "PEM"
        props[f"{prefix}ssl.truststore.location"] = str(client_truststore_pem)
        props[f"{prefix}ssl.client.auth"] = "required"
    listener: dict[str, Any] = {
        "protocol": "SASL_SSL",
        "props": props,
        "scram_credentials": [f"{mechanism}=[name={n},password={p}]" for n, p in users.items()],
    }
    if port is not None:
        listener["port"] = port
    return listener


def _plain_token(value: str) -> bool:
    return bool(value) and all(c.isascii() and (c.isalnum() or c in "-_") for c in value)


#: Where `free_port` notes the ports it hands out: one empty file per port, shared by every process of the machine.
PORT_RESERVATIONS = Path(tempfile.gettempdir()) / "elrwatch-ports"
#: How long a port `free_port` handed out is not handed out again: the time from a harness picking its ports to its
#: servers binding them (a Kafka node's JVM start under load), with margin.
PORT_RESERVATION_S = 300.0
_PORT_ATTEMPTS = 200


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now that no `free_port` call on this machine handed out in the last
    `PORT_RESERVATION_S` seconds, in this process or another (pytest-xdist's workers, a second test run): a harness
    picks its ports before its servers bind them, and until then the kernel may hand the same port to the next
    caller."""
    for _ in range(_PORT_ATTEMPTS):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if _reserve_port(port):
            return port
    raise ClusterError(
        f"no free port in {_PORT_ATTEMPTS} tries: the kernel handed out only ports reserved in {PORT_RESERVATIONS}"
    )


def _reserve_port(port: int) -> bool:
    """Note ``port`` as handed out, unless a `free_port` call did within `PORT_RESERVATION_S`. Across processes: the
    note is created with O_EXCL, and an expired one is first renamed away, which only one process can do."""
    path = PORT_RESERVATIONS / str(port)
    try:
        PORT_RESERVATIONS.mkdir(exist_ok=True)
        for _ in range(2):
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                return True
            except FileExistsError:
                pass
            try:
                if time.time() - path.stat().st_mtime < PORT_RESERVATION_S:
                    return False
                expired = path.with_name(f"{port}.expired-{uuid.uuid4().hex}")
                os.rename(path, expired)
                os.remove(expired)
            except FileNotFoundError:  # another process renamed it first: try to create it again
                continue
        return False
    except OSError:  # no writable temporary directory: the kernel's choice alone
        return True


def port_is_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:port (a socket in TIME_WAIT does not count, as for Kafka's own bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _listening(port: int) -> bool:
    """True when something accepts connections on 127.0.0.1:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def kafka_libs(libs: str | os.PathLike | None = None, version: str = KAFKA_VERSION) -> Path:
    """The folder of Kafka's jars; a clear error naming ``make kafka-jars`` when it is missing or incomplete.

    Without ``libs`` (or, for the default version, ``ELRWATCH_KAFKA_LIBS``): the checkout's ``.tools/kafka/libs``
    (``.tools/kafka-<version>/libs`` for an older version), or, when this module runs from an installed copy (a
    non-editable install), the one under the current directory."""
    if version not in VERSIONS:
        raise ClusterError(f"Kafka {version} is not one the harness runs ({', '.join(VERSIONS)})")
    folder = ("kafka",) if version == KAFKA_VERSION else (f"kafka-{version}",)
    pom = "tools/kafka/pom.xml" if version == KAFKA_VERSION else f"tools/kafka-{version}/pom.xml"
    chosen = libs or (os.environ.get("ELRWATCH_KAFKA_LIBS") if version == KAFKA_VERSION else None)
    path = Path(chosen) if chosen else REPO_ROOT / ".tools" / folder[0] / "libs"
    if not chosen and not path.is_dir() and (Path.cwd() / ".tools" / folder[0] / "libs").is_dir():
        path = Path.cwd() / ".tools" / folder[0] / "libs"
    for jar in (f"kafka_2.13-{version}.jar", f"kafka-tools-{version}.jar"):
        if not (path / jar).is_file():
            raise ClusterError(
                f"Kafka jar {path / jar} is missing: run `make kafka-jars` "
                f"(fetches Kafka {version} from Maven Central with {pom})"
            )
    return path


def java_executable() -> str:
    """``$JAVA_HOME/bin/java`` or the ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if not found:
        raise ClusterError(
            "no `java` on PATH and no JAVA_HOME: Kafka needs Java 17 (apt-get install openjdk-17-jre-headless)"
        )
    return found


def tail(path: str | os.PathLike, lines: int = 30) -> str:
    """The last lines of a log file (empty string when it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Node:
    """One Kafka process: the controller (id 0 by default) or a broker."""

    node_id: int
    role: str  # "controller" | "broker" | "zookeeper"
    port: int
    data_dir: Path
    props_path: Path
    log_path: Path
    proc: subprocess.Popen | None = None
    stopped: bool = False  # SIGSTOPped
    extra_props: dict[str, str] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def metadata_dir(self) -> Path:
        return self.data_dir / "__cluster_metadata-0"


class KafkaCluster:
    """A cluster of one controller (in ZooKeeper mode: one ZooKeeper node) and ``brokers`` brokers on loopback; see
    the module docstring."""

    _live: ClassVar[weakref.WeakSet[KafkaCluster]] = weakref.WeakSet()

    def __init__(
        self,
        brokers: int = 3,
        *,
        base_dir: str | os.PathLike | None = None,
        libs: str | os.PathLike | None = None,
        min_insync_replicas: int = 1,
        unclean_leader_election: bool = False,
        elr: bool = True,
        release_version: str | None = None,
        broker_props: dict[str, str] | None = None,
        start_timeout: float = 60.0,
        listener_security: dict[str, Any] | None = None,
        controller_id: int = 0,
        heap: str = DEFAULT_HEAP,
        jvm_opts: Sequence[str] = (),
        version: str = KAFKA_VERSION,
        mode: str = "kraft",
    ) -> None:
        """``heap``: the ``-Xmx`` of every node, controller and brokers (a JVM size: ``"384m"``, ``"2g"``).
        ``jvm_opts``: extra JVM options for every node, after the defaults (`DEFAULT_JVM_OPTS`); not a second
        garbage collector, which the JVM refuses next to the default ``-XX:+UseSerialGC``. ``version``: one of
        `VERSIONS`; ``mode``: ``"kraft"`` or (3.9.1) ``"zookeeper"``."""
        if mode not in MODES:
            raise ClusterError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        if version in VERSIONS and mode not in VERSIONS[version]:
            raise ClusterError(f"Kafka {version} runs here in {' or '.join(VERSIONS[version])} mode, not {mode}")
        self.version = version
        self.mode = mode
        #: Kafka 4.x: ELR and DescribeCluster v2; 3.x: neither.
        self.legacy = version != KAFKA_VERSION and int(version.split(".")[0]) < 4
        if self.legacy and elr:
            elr = False  # Kafka 3.x has no ELR
        if not _JVM_SIZE.fullmatch(heap):
            raise ClusterError(f"heap {heap!r} is not a JVM size such as 384m or 2g")
        if isinstance(jvm_opts, str):
            raise ClusterError("jvm_opts is a sequence of options, not one string")
        self.node_jvm_opts: tuple[str, ...] = (
            *(o for o in DEFAULT_JVM_OPTS if not o.startswith("-Xmx")),
            f"-Xmx{heap}",
            *jvm_opts,
        )
        self.libs = kafka_libs(libs, version)
        self.java = java_executable()
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="elrwatch-kafka-"))
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = _random_cluster_id()
        self.min_insync_replicas = min_insync_replicas
        self.unclean_leader_election = unclean_leader_election
        self.elr = elr
        self.release_version = release_version
        self.start_timeout = start_timeout
        self.broker_props = dict(broker_props or {})
        #: Optional extra listener for clients on the first broker: {"protocol": "SASL_SSL", "props": {...},
        #: "port": int, "scram_credentials": ["SCRAM-SHA-512=[name=..,password=..]", ...]}; see sasl_ssl_listener().
        self.listener_security = listener_security
        self.log4j_path = self.base_dir / "log4j2.xml"
        self.log4j_path.write_text(_LOG4J2_XML)
        self.log4j1_path = self.base_dir / "log4j.properties"
        self.log4j1_path.write_text(_LOG4J_PROPERTIES)
        #: The KRaft controller, or in ZooKeeper mode the ZooKeeper node (same lifecycle, no metadata log).
        self.controller = self._make_node(controller_id, "zookeeper" if mode == "zookeeper" else "controller")
        self.brokers: dict[int, Node] = {}
        for i in range(brokers):
            bid = controller_id + 1 + i
            self.brokers[bid] = self._make_node(bid, "broker")
        if listener_security is not None:
            listener_security.setdefault("port", free_port())
        self._admin = None
        #: Topics created through `create_topic`: a broker that does not know one lags the controller.
        self._created_topics: set[str] = set()
        KafkaCluster._live.add(self)

    # ------------------------------------------------------------------ layout

    def _make_node(self, node_id: int, role: str) -> Node:
        node_dir = self.base_dir / f"{role}-{node_id}"
        node_dir.mkdir(parents=True, exist_ok=True)
        return Node(
            node_id=node_id,
            role=role,
            port=free_port(),
            data_dir=node_dir / "data",
            props_path=node_dir / "server.properties",
            log_path=node_dir / "server.log",
        )

    @property
    def bootstrap(self) -> str:
        """Bootstrap servers of the brokers' PLAINTEXT listeners."""
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers.values())

    @property
    def answering_bootstrap(self) -> str:
        """Bootstrap servers of the brokers that run and are not SIGSTOPped: a client started after brokers went
        down bootstraps from these (kafka-python picks bootstrap brokers at random and can time out on dead ones)."""
        live = [b for b in self.brokers.values() if b.running and not b.stopped]
        if not live:
            raise ClusterError("no broker is running")
        return ",".join(f"127.0.0.1:{b.port}" for b in live)

    @property
    def secure_bootstrap(self) -> str:
        """Bootstrap servers of the extra (e.g. SASL_SSL) listener, on the first broker."""
        if self.listener_security is None:
            raise ClusterError("the cluster was started without a secure listener")
        return f"127.0.0.1:{self.listener_security['port']}"

    @property
    def controller_quorum(self) -> str:
        return f"{self.controller.node_id}@127.0.0.1:{self.controller.port}"

    def _props(self, node: Node) -> dict[str, str]:
        return self._zookeeper_props(node) if self.mode == "zookeeper" else self._kraft_props(node)

    def _kraft_props(self, node: Node) -> dict[str, str]:
        common = {
            "node.id": str(node.node_id),
            "controller.quorum.voters": self.controller_quorum,
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(node.data_dir),
            "metadata.log.dir": str(node.data_dir),
            "min.insync.replicas": str(self.min_insync_replicas),
            "unclean.leader.election.enable": str(self.unclean_leader_election).lower(),
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.segment.bytes": str(16 * 1024 * 1024),
            "num.io.threads": "2",
            "num.network.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "background.threads": "2",
            "log.cleaner.enable": "false",
            # Fast failure detection so that scenarios take seconds.
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "300",
            "replica.lag.time.max.ms": "2500",
            "controller.quorum.election.timeout.ms": "1000",
            "controller.quorum.fetch.timeout.ms": "2000",
            # No automatic preferred election: scenarios decide when leaders move.
            "auto.leader.rebalance.enable": "false",
            "controlled.shutdown.enable": "true",
            # No NoOpRecord every 500 ms: the log grows only when something happens (wait_metadata_quiet relies on it).
            "metadata.max.idle.interval.ms": "0",
            # Keep the whole metadata history in the log: no snapshot deletes segments during a test.
            "metadata.log.max.snapshot.interval.ms": "3600000",
            "metadata.log.max.record.bytes.between.snapshots": str(1 << 40),
        }
        if node.role == "controller":
            props = {
                **common,
                "process.roles": "controller",
                "listeners": f"CONTROLLER://127.0.0.1:{node.port}",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
            }
        else:
            listeners = [f"PLAINTEXT://127.0.0.1:{node.port}"]
            protocol_map = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
            props = {
                **common,
                "process.roles": "broker",
                "inter.broker.listener.name": "PLAINTEXT",
                "replica.fetch.wait.max.ms": "200",
                "replica.socket.timeout.ms": "5000",
                "replica.fetch.backoff.ms": "200",
            }
            first_broker = next(iter(self.brokers.values()), None)
            if self.listener_security is not None and (first_broker is None or first_broker is node):
                sec = self.listener_security
                listeners.append(f"{SECURE_LISTENER}://127.0.0.1:{sec['port']}")
                protocol_map.append(f"{SECURE_LISTENER}:{sec['protocol']}")
                props.update(sec.get("props", {}))
            props["listeners"] = ",".join(listeners)
            props["advertised.listeners"] = ",".join(listeners)
            props["listener.security.protocol.map"] = ",".join(protocol_map)
            props.update(self.broker_props)
        props.update(node.extra_props)
        return props

    #: Props of a KRaft node that a ZooKeeper-mode broker does not take.
    _KRAFT_ONLY = (
        "node.id",
        "controller.quorum.voters",
        "controller.listener.names",
        "metadata.log.dir",
        "broker.session.timeout.ms",
        "broker.heartbeat.interval.ms",
        "controller.quorum.election.timeout.ms",
        "controller.quorum.fetch.timeout.ms",
        "metadata.max.idle.interval.ms",
        "metadata.log.max.snapshot.interval.ms",
        "metadata.log.max.record.bytes.between.snapshots",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
    )

    def _zookeeper_props(self, node: Node) -> dict[str, str]:
        """A ZooKeeper node's zoo.cfg (standalone, tick 500 ms: sessions of 1-10 s) or a ZooKeeper-mode broker's
        props: the KRaft broker's without the KRaft keys, a broker id and a 4 s ZooKeeper session (a killed broker's
        registration znode goes within it)."""
        if node.role == "zookeeper":
            return {
                "tickTime": "500",
                "initLimit": "10",
                "syncLimit": "5",
                "dataDir": str(node.data_dir),
                "clientPort": str(node.port),
                "clientPortAddress": "127.0.0.1",
                "maxClientCnxns": "0",
                "admin.enableServer": "false",
                "autopurge.purgeInterval": "0",
            }
        props = self._kraft_props(node)
        for key in self._KRAFT_ONLY:
            props.pop(key, None)
        props.pop("process.roles", None)
        props["listener.security.protocol.map"] = ",".join(
            p for p in props["listener.security.protocol.map"].split(",") if not p.startswith("CONTROLLER:")
        )
        props.update(
            {
                "broker.id": str(node.node_id),
                "zookeeper.connect": f"127.0.0.1:{self.controller.port}",
                "zookeeper.session.timeout.ms": "4000",
                "zookeeper.connection.timeout.ms": "10000",
            }
        )
        props.update(node.extra_props)
        return props

    def _write_props(self, node: Node) -> None:
        node.props_path.write_text("".join(f"{k}={v}\n" for k, v in sorted(self._props(node).items())))

    def _classpath(self) -> str:
        return str(self.libs / "*")

    def _java_cmd(self, main: str, *args: str, jvm_opts: Iterable[str] = TOOL_JVM_OPTS) -> list[str]:
        logging = (
            f"-Dlog4j.configuration=file:{self.log4j1_path}"
            if self.legacy
            else f"-Dlog4j2.configurationFile={self.log4j_path}"
        )
        return [self.java, *jvm_opts, logging, "-cp", self._classpath(), main, *args]

    def _tool_class(self, name: str) -> str:
        """The main class of a Kafka tool in this version (DumpLogSegments moved to kafka-tools in 4.3)."""
        if name == "DumpLogSegments" and self.legacy:
            return "kafka.tools.DumpLogSegments"
        return f"org.apache.kafka.tools.{name}"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> KafkaCluster:
        """Format every node (in parallel) and start them; returns when every broker is registered and unfenced."""
        try:
            self._format_all()
            self._spawn(self.controller)
            self._wait_port(self.controller)
            for broker in self.brokers.values():
                self._spawn(broker)
            self.wait_for(
                lambda: self._all_brokers_unfenced(), "every broker registered and unfenced", timeout=self.start_timeout
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _format_all(self) -> None:
        """Format every node's storage in parallel; every port is checked first, and a failure (or Ctrl-C) kills the
        formatting processes still running, so that nothing is left behind."""
        nodes = [self.controller, *self.brokers.values()]
        for node in nodes:
            self._check_ports_free(node)
        if self.mode == "zookeeper":  # nothing to format: ZooKeeper holds the metadata
            for node in nodes:
                node.data_dir.mkdir(parents=True, exist_ok=True)
                self._write_props(node)
            return
        procs: list[tuple[Node, Path, subprocess.Popen]] = []
        try:
            for node in nodes:
                self._write_props(node)
                args = ["format", "-t", self.cluster_id, "-c", str(node.props_path), "--ignore-formatted"]
                if self.release_version:
                    args += ["--release-version", self.release_version]
                if not self.legacy:
                    args += ["--feature", f"eligible.leader.replicas.version={1 if self.elr else 0}"]
                if self.listener_security is not None and node.role == "controller":
                    for cred in self.listener_security.get("scram_credentials", []):
                        args += ["--add-scram", cred]
                log = node.data_dir.parent / "format.log"
                with open(log, "wb") as out:
                    procs.append(
                        (
                            node,
                            log,
                            subprocess.Popen(
                                self._java_cmd("kafka.tools.StorageTool", *args), stdout=out, stderr=subprocess.STDOUT
                            ),
                        )
                    )
            for node, log, proc in procs:
                try:
                    rc = proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    raise ClusterError(f"formatting {node.role} {node.node_id} timed out:\n{tail(log)}") from None
                if rc != 0:
                    raise ClusterError(f"formatting {node.role} {node.node_id} failed (exit {rc}):\n{tail(log)}")
        finally:
            for _node, _log, proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)

    def _node_ports(self, node: Node) -> list[int]:
        """The ports ``node`` listens on (a broker's first one also serves the extra secure listener)."""
        ports = [node.port]
        if self.listener_security is not None and node.role == "broker" and node is next(iter(self.brokers.values())):
            ports.append(int(self.listener_security["port"]))
        return ports

    def _check_ports_free(self, node: Node) -> None:
        for port in self._node_ports(node):
            if not port_is_free(port):
                raise ClusterError(f"port {port} of {node.role} {node.node_id} is taken")

    def _spawn(self, node: Node) -> None:
        if node.running:
            return
        self._check_ports_free(node)
        self._write_props(node)
        log = open(node.log_path, "ab")  # noqa: SIM115 - closed when the process is reaped
        try:
            main = "org.apache.zookeeper.server.quorum.QuorumPeerMain" if node.role == "zookeeper" else "kafka.Kafka"
            cmd = self._java_cmd(main, str(node.props_path), jvm_opts=self.node_jvm_opts)
            node.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        node.stopped = False

    def _wait_port(self, node: Node, timeout: float = 30.0) -> None:
        def listening() -> bool:
            self._check_alive(node)
            return _listening(node.port)

        self.wait_for(listening, f"{node.role} {node.node_id} listening on {node.port}", timeout=timeout)

    def _check_alive(self, node: Node) -> None:
        if node.proc is not None and node.proc.poll() is not None:
            raise ClusterError(
                f"{node.role} {node.node_id} exited with {node.proc.returncode}; its last log lines "
                f"({node.log_path}):\n{tail(node.log_path)}"
            )

    def _check_all_alive(self) -> None:
        self._check_alive(self.controller)
        for broker in self.brokers.values():
            if not broker.stopped:
                self._check_alive(broker)

    def _all_brokers_unfenced(self) -> bool:
        self._check_all_alive()
        # A cheap connect first: an admin call to a broker that is not listening yet blocks for its bootstrap
        # timeout, and a JVM that exits meanwhile would be noticed only after it.
        if not all(_listening(n.port) for n in self.brokers.values() if n.running):
            return False
        try:
            brokers = self.describe_cluster()
        except Exception:
            return False
        live = {b for b, n in self.brokers.items() if n.running}
        return live <= {b for b, fenced in brokers.items() if not fenced}

    def stop(self) -> None:
        """Stop every process this cluster started (SIGKILL after a bound) and remove the data it created."""
        self._close_admin()
        for node in [*self.brokers.values(), self.controller]:
            self._terminate(node, graceful=False)
        if self._own_dir and not os.environ.get("ELRWATCH_KEEP_KAFKA"):
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _terminate(self, node: Node, *, graceful: bool, timeout: float = 30.0) -> None:
        proc = node.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if node.stopped:
                    os.killpg(proc.pid, signal.SIGCONT)
                os.killpg(proc.pid, signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                proc.wait(timeout=timeout if graceful else 10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        node.proc = None
        node.stopped = False

    # ------------------------------------------------------------------ faults

    def broker(self, broker_id: int) -> Node:
        try:
            return self.brokers[broker_id]
        except KeyError:
            raise ClusterError(f"no broker {broker_id} (brokers: {sorted(self.brokers)})") from None

    def kill_broker(self, broker_id: int) -> None:
        """kill -9: an unclean shutdown (the broker's log is recovered on restart)."""
        self._terminate(self.broker(broker_id), graceful=False)

    def stop_broker(self, broker_id: int, timeout: float = 60.0) -> None:
        """SIGTERM: a controlled shutdown (the controller moves leadership away first)."""
        self._terminate(self.broker(broker_id), graceful=True, timeout=timeout)

    def pause_broker(self, broker_id: int) -> None:
        """SIGSTOP: the broker stops heartbeating and is fenced once its session expires."""
        node = self.broker(broker_id)
        if node.proc is None:
            raise ClusterError(f"broker {broker_id} is not running")
        os.killpg(node.proc.pid, signal.SIGSTOP)
        node.stopped = True

    def resume_broker(self, broker_id: int) -> None:
        """SIGCONT after :meth:`pause_broker`."""
        node = self.broker(broker_id)
        if node.proc is not None and node.stopped:
            os.killpg(node.proc.pid, signal.SIGCONT)
        node.stopped = False

    def start_broker(self, broker_id: int, *, wait_unfenced: bool = True, timeout: float = 60.0) -> None:
        """Start a stopped or killed broker again; by default wait until the controller unfences it."""
        node = self.broker(broker_id)
        self._spawn(node)
        if wait_unfenced:
            self.wait_for(
                lambda: self._check_alive(node) or self.describe_cluster().get(broker_id) is False,
                f"broker {broker_id} unfenced",
                timeout=timeout,
            )

    def restart_broker(self, broker_id: int, *, clean: bool = True, wait_unfenced: bool = True) -> None:
        """Stop (SIGTERM when ``clean``, else kill -9) and start a broker again."""
        if clean:
            self.stop_broker(broker_id)
        else:
            self.kill_broker(broker_id)
        self.start_broker(broker_id, wait_unfenced=wait_unfenced)

    # ------------------------------------------------------------------ admin

    def admin(self):
        """A kafka-python KafkaAdminClient on the brokers that are running (re-created when they change)."""
        from kafka import KafkaAdminClient

        live = tuple(f"127.0.0.1:{n.port}" for n in self.brokers.values() if n.running and not n.stopped)
        if not live:
            raise ClusterError("no broker is running")
        if self._admin is not None and self._admin[0] == live:
            return self._admin[1]
        self._close_admin()
        # A bounded bootstrap (kafka-python's default waits 30 s for a broker that is down); older kafka-python
        # versions have no such setting.
        bounded = {"bootstrap_timeout_ms": 5000} if "bootstrap_timeout_ms" in KafkaAdminClient.DEFAULT_CONFIG else {}
        client = KafkaAdminClient(
            bootstrap_servers=list(live), request_timeout_ms=5000, reconnect_backoff_max_ms=500, **bounded
        )
        self._admin = (live, client)
        return client

    def _close_admin(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin[1].close()
            self._admin = None

    def _admin_call(self, fn: Callable[[Any], Any], what: str, timeout: float = 20.0) -> Any:
        """Run an admin call, retrying on connection errors (a broker just died) and on a broker whose metadata lags
        (`_MetadataLag`) within ``timeout``."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                return fn(self.admin())
            except ClusterError:
                raise
            except _MetadataLag as exc:  # the answering broker catches up within moments: ask again
                last = exc
                time.sleep(0.2)
                continue
            except Exception as exc:  # kafka-python raises many kinds while brokers come and go
                if _is_final_answer(exc):  # the cluster's answer (e.g. an invalid assignment): no retry
                    raise ClusterError(f"{what} failed: {exc!r}") from exc
                last = exc
                self._close_admin()
                time.sleep(0.2)
        raise AdminCallError(f"{what} failed for {timeout:.0f} s: {last!r}")

    def describe_cluster(self) -> dict[int, bool]:
        """Broker id → fenced, from DescribeCluster v2 (fenced brokers included). Kafka 3.x answers v1, with the
        live (unfenced, in ZooKeeper mode registered) brokers only."""
        result = self._admin_call(lambda a: a.describe_cluster(), "DescribeCluster", timeout=5)
        return {int(b["broker_id"]): bool(b.get("is_fenced", False)) for b in result["brokers"]}

    def fenced_brokers(self) -> set[int]:
        return {b for b, fenced in self.describe_cluster().items() if fenced}

    def down_brokers(self) -> set[int]:
        """This cluster's brokers that DescribeCluster does not show live (fenced, or absent on Kafka 3.x)."""
        live = {b for b, fenced in self.describe_cluster().items() if not fenced}
        return set(self.brokers) - live

    def describe_topic_partitions(
        self, topics: list[str] | None = None, page_size: int = 2000
    ) -> dict[tuple[str, int], dict]:
        """(topic, partition) → DescribeTopicPartitions' answer, every page followed. Empty ELRs come back as []."""
        if topics is None:
            topics = self.list_topics()
        if not self.has_api(DESCRIBE_TOPIC_PARTITIONS):  # ZooKeeper mode, 3.7: Metadata, without ELRs
            return self._describe_with_metadata(topics)
        out: dict[tuple[str, int], dict] = {}
        cursor = None
        while True:
            page = self._admin_call(
                lambda a, c=cursor: self._known(a.describe_topic_partitions(topics, page_size, c)),
                "DescribeTopicPartitions",
            )
            for topic in page["topics"]:
                if topic.get("error_code", 0):
                    raise ClusterError(
                        f"DescribeTopicPartitions: topic {topic.get('name')} error {topic['error_code']}"
                    )
                for p in topic["partitions"]:
                    out[(topic["name"], p["partition_index"])] = _partition_description(topic, p)
            cursor = page.get("next_cursor")
            if not cursor:
                return out

    def _known(self, answer: Any) -> Any:
        """``answer`` (a DescribeTopicPartitions page or a Metadata topic list), unless it says that a topic this
        cluster created is unknown: then `_MetadataLag`, which `_admin_call` retries."""
        from kafka.errors import UnknownTopicOrPartitionError

        topics = answer["topics"] if isinstance(answer, dict) else answer
        lagging = sorted(
            t.get("name")
            for t in topics
            if t.get("error_code") == UnknownTopicOrPartitionError.errno and t.get("name") in self._created_topics
        )
        if lagging:
            raise _MetadataLag(f"a broker does not know the created topic(s) {', '.join(lagging)} yet")
        return answer

    def has_api(self, api_key: int) -> bool:
        """Whether the brokers advertise this API (ApiVersions)."""
        # kafka-python's api_versions() maps keys onto its ApiKey enum and fails on one it does not know (Kafka 4.4
        # advertises such keys): the raw table it holds instead.
        versions = self._admin_call(lambda a: a._manager.broker_version_data.api_versions, "ApiVersions")
        return any(int(k) == api_key for k in versions)

    def _describe_with_metadata(self, topics: list[str]) -> dict[tuple[str, int], dict]:
        """`describe_topic_partitions`' answer from a Metadata request (a leaderless partition's error is
        LEADER_NOT_AVAILABLE, with its replicas and ISR)."""
        out: dict[tuple[str, int], dict] = {}
        for topic in self._admin_call(lambda a: self._known(a.describe_topics(topics)), "Metadata"):
            if topic.get("error_code", 0):
                raise ClusterError(f"Metadata: topic {topic.get('name')} error {topic['error_code']}")
            for p in topic["partitions"]:
                out[(topic["name"], p["partition_index"])] = _partition_description(topic, p, elr=False)
        return out

    def list_topics(self) -> list[str]:
        return sorted(t for t in self._admin_call(lambda a: a.list_topics(), "ListTopics") if not t.startswith("__"))

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        configs: dict[str, str] | None = None,
        replica_assignment: dict[int, list[int]] | None = None,
        wait: bool = True,
    ) -> None:
        """Create a topic (optionally with an explicit assignment); by default wait for every partition's leader.

        ``replication_factor`` defaults to 3, or to the number of brokers when the cluster has fewer."""
        from kafka.admin import NewTopic

        if replication_factor is None:
            replication_factor = min(3, len(self.brokers))
        if replica_assignment:
            topic = NewTopic(name, -1, -1, replica_assignments=replica_assignment, topic_configs=configs or {})
        else:
            topic = NewTopic(name, partitions, replication_factor, topic_configs=configs or {})
        self._admin_call(lambda a: a.create_topics([topic]), f"CreateTopics {name}")
        self._created_topics.add(name)
        if wait:
            expected = len(replica_assignment) if replica_assignment else partitions
            self.wait_for(lambda: self._topic_ready(name, expected), f"topic {name} has leaders")

    def _topic_ready(self, name: str, partitions: int) -> bool:
        try:
            state = self.describe_topic_partitions([name])
        except ClusterError:
            return False
        return len(state) == partitions and all(p["leader"] >= 0 for p in state.values())

    def set_topic_config(self, topic: str, key: str, value: str | None) -> None:
        """Set (or with ``None`` delete) a topic config, e.g. ``min.insync.replicas``."""
        self._alter_config("TOPIC", topic, key, value)

    def set_cluster_config(self, key: str, value: str | None) -> None:
        """Set (or delete) a cluster-wide dynamic broker default (the BROKER resource with an empty name)."""
        self._alter_config("BROKER", "", key, value)

    def _alter_config(self, resource_type: str, name: str, key: str, value: str | None) -> None:
        from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

        op = (AlterConfigOp.DELETE, None) if value is None else (AlterConfigOp.SET, value)
        resource = ConfigResource(ConfigResourceType[resource_type], name, configs={key: op})

        def alter(admin: Any) -> Any:
            if resource_type == "BROKER" and name == "":
                # kafka-python sends BROKER resources to the broker of that id and refuses the cluster default's
                # empty name: build the same IncrementalAlterConfigs request and send it to any broker.
                async def send() -> Any:
                    request = admin._alter_configs_request([resource], False, True)
                    return admin._alter_configs_process_responses((await admin._manager.send(request)).responses)

                return admin._manager.run(send)
            return admin.alter_configs([resource], raise_on_unknown=False, incremental=True)

        result = self._admin_call(alter, f"IncrementalAlterConfigs {resource_type} {name!r} {key}")
        _raise_config_errors(result, f"{resource_type} {name!r} {key}={value}")

    def unregister_broker(self, broker_id: int, timeout: float = 60.0) -> None:
        """UnregisterBroker (``kafka-cluster.sh unregister``, Kafka's ClusterTool: kafka-python has no such call):
        the controller drops the broker's registration. Meant for a broker that is down."""
        live = [f"127.0.0.1:{n.port}" for n in self.brokers.values() if n.running and not n.stopped]
        if not live:
            raise ClusterError("no broker is running")
        proc = subprocess.run(
            self._java_cmd(
                "org.apache.kafka.tools.ClusterTool",
                "unregister",
                "--bootstrap-server",
                ",".join(live),
                "--id",
                str(broker_id),
            ),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise ClusterError(
                f"unregistering broker {broker_id} failed (exit {proc.returncode}):\n"
                f"{(proc.stderr or proc.stdout)[-2000:]}"
            )

    def elect_leaders(self, topic: str, partitions: list[int], *, unclean: bool) -> Any:
        """An unclean (``unclean=True``) or preferred leader election through the admin API."""
        return self._admin_call(
            lambda a: a.elect_leaders(1 if unclean else 0, {topic: partitions}),
            f"ElectLeaders {'unclean' if unclean else 'preferred'} {topic} {partitions}",
        )

    def reassign(self, topic: str, partition: int, replicas: list[int], wait: bool = True) -> None:
        """Reassign one partition to ``replicas``; by default wait until the new assignment is in place."""
        from kafka import TopicPartition

        tp = TopicPartition(topic, partition)
        result = self._admin_call(
            lambda a: a.alter_partition_reassignments({tp: replicas}),
            f"AlterPartitionReassignments {topic}-{partition}",
        )
        err = result.get(tp)
        if err is not None:
            raise ClusterError(f"reassignment of {topic}-{partition} to {replicas} failed: {err.__name__}")
        if wait:
            self.wait_for(
                lambda: self.describe_topic_partitions([topic])[(topic, partition)]["replicas"] == replicas,
                f"{topic}-{partition} reassigned to {replicas}",
            )

    # ------------------------------------------------------------------ metadata log

    def metadata_log_files(self, node: Node | None = None) -> list[Path]:
        """The ``*.log`` segments of a node's ``__cluster_metadata-0`` (the controller's by default), in order."""
        node = node or self.controller
        if self.mode == "zookeeper":
            return []  # ZooKeeper holds the metadata: there is no metadata log
        return sorted(Path(p) for p in glob.glob(str(node.metadata_dir / "*.log")))

    def metadata_snapshot_files(self, node: Node | None = None) -> list[Path]:
        node = node or self.controller
        return sorted(Path(p) for p in glob.glob(str(node.metadata_dir / "*.checkpoint")))

    def under_min_isr_partitions(self, topics: Iterable[str] | None = None) -> set[tuple[str, int]]:
        """What Kafka's own ``kafka-topics.sh --describe --under-min-isr-partitions`` lists (TopicCommand of this
        version; it counts a partition whose ISR is below the min ISR DescribeConfigs resolves, or that has no
        leader), optionally of ``topics`` only."""
        args = ["--bootstrap-server", self.answering_bootstrap, "--describe", "--under-min-isr-partitions"]
        proc = subprocess.run(
            self._java_cmd(self._tool_class("TopicCommand"), *args), capture_output=True, text=True, timeout=120
        )
        if proc.returncode != 0:
            raise ClusterError(f"TopicCommand failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        wanted = set(topics) if topics is not None else None
        found = set()
        for match in re.finditer(r"Topic: (\S+)\s+Partition: (\d+)", proc.stdout):
            if wanted is None or match.group(1) in wanted:
                found.add((match.group(1), int(match.group(2))))
        return found

    def dump_log_segments(self, files: Iterable[str | os.PathLike], *, skip_record_metadata: bool = False) -> str:
        """Kafka's own ``DumpLogSegments --cluster-metadata-decoder`` output for these files."""
        args = ["--cluster-metadata-decoder", "--files", ",".join(str(f) for f in files)]
        if skip_record_metadata:
            args.append("--skip-record-metadata")
        proc = subprocess.run(
            self._java_cmd(self._tool_class("DumpLogSegments"), *args), capture_output=True, text=True, timeout=180
        )
        if proc.returncode != 0:
            raise ClusterError(f"DumpLogSegments failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return proc.stdout

    def dump_metadata_log(self, *, skip_record_metadata: bool = False, node: Node | None = None) -> str:
        """The controller's whole metadata log (every segment) as DumpLogSegments prints it."""
        files = self.metadata_log_files(node)
        if self.mode == "zookeeper":
            raise ClusterError("a ZooKeeper-mode cluster has no metadata log")
        if not files:
            raise ClusterError(f"no metadata log segment in {(node or self.controller).metadata_dir}")
        return self.dump_log_segments(files, skip_record_metadata=skip_record_metadata)

    def metadata_end_offset(self) -> int:
        """The offset after the controller's last metadata record (from a dump); used to wait for quiet."""
        last = -1
        for line in self.dump_metadata_log().splitlines():
            if line.startswith("| offset: "):
                last = int(line.split()[2])
        return last + 1

    def wait_metadata_quiet(self, quiet_for: float = 1.5, timeout: float = 30.0) -> None:
        """Wait until the controller's metadata log stops growing (size unchanged for ``quiet_for`` s)."""

        def size() -> int:
            return sum(f.stat().st_size for f in self.metadata_log_files())

        deadline = time.monotonic() + timeout
        last, since = size(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.25)
            now = size()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_for:
                return
        raise ClusterError(f"the metadata log kept growing for {timeout:.0f} s")

    def metadata_log_size(self) -> int:
        """Bytes in the controller's metadata log segments (grows with every record batch)."""
        return sum(f.stat().st_size for f in self.metadata_log_files())

    def settle(
        self, topics: list[str] | None = None, quiet_for: float = 1.0, timeout: float = 45.0
    ) -> tuple[dict[tuple[str, int], dict], dict[int, bool]]:
        """Wait until the cluster is quiet and the brokers agree, then return (DescribeTopicPartitions,
        DescribeCluster): the controller's metadata log has not grown for ``quiet_for`` s, and two answers to each
        request taken around that quiet period (possibly from different brokers, whose metadata caches lag the
        controller a little) are equal, with the log unchanged in between."""
        deadline = time.monotonic() + timeout
        while True:
            size = self.metadata_log_size()
            first = (self.describe_topic_partitions(topics), self.describe_cluster())
            self.wait_metadata_quiet(quiet_for=quiet_for, timeout=max(1.0, deadline - time.monotonic()))
            second = (self.describe_topic_partitions(topics), self.describe_cluster())
            if first == second and self.metadata_log_size() == size:
                return second
            if time.monotonic() >= deadline:
                raise ClusterError(f"the cluster did not settle within {timeout:.0f} s")

    # ------------------------------------------------------------------ helpers

    def wait_for(self, condition: Callable[[], Any], what: str, timeout: float = 30.0, interval: float = 0.2) -> Any:
        """Poll ``condition`` until it is truthy; raise :class:`ClusterError` naming ``what`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        last_exc: Exception | None = None
        while True:
            try:
                value = condition()
                if value:
                    return value
            except AdminCallError as exc:  # no broker answered this time: poll on
                last_exc = exc
            except ClusterError:
                raise
            except Exception as exc:
                last_exc = exc
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"timed out after {timeout:.0f} s waiting for {what}"
                    + (f" (last error: {last_exc!r})" if last_exc else "")
                )
            time.sleep(interval)

    def running_pids(self) -> list[int]:
        return [n.proc.pid for n in [self.controller, *self.brokers.values()] if n.running]


def _partition_description(topic: dict, p: dict, elr: bool = True) -> dict:
    """One partition of `KafkaCluster.describe_topic_partitions`' answer, from a DescribeTopicPartitions or (``elr``
    False: it has no ELR fields) a Metadata response's topic and partition."""
    return {
        "topic_id": str(topic["topic_id"]),
        "leader": p["leader_id"],
        "leader_epoch": p["leader_epoch"],
        "replicas": list(p["replica_nodes"]),
        "isr": list(p["isr_nodes"]),
        "elr": list(p.get("eligible_leader_replicas") or []) if elr else [],
        "last_known_elr": list(p.get("last_known_elr") or []) if elr else [],
        "offline_replicas": list(p.get("offline_replicas") or []),
    }


def _is_final_answer(exc: Exception) -> bool:
    """A non-retriable error a broker answered with (kafka-python's BrokerResponseError with retriable False)."""
    try:
        from kafka.errors import BrokerResponseError
    except ImportError:  # pragma: no cover - kafka-python is a dependency
        return False
    return isinstance(exc, BrokerResponseError) and not getattr(exc, "retriable", True)


def _raise_config_errors(result: Any, what: str) -> None:
    """kafka-python returns errors per resource; raise on any that is not NoError."""

    def walk(value: Any) -> Iterator[Any]:
        if isinstance(value, dict):
            for v in value.values():
                yield from walk(v)
        elif isinstance(value, list | tuple):
            for v in value:
                yield from walk(v)
        else:
            yield value

    for item in walk(result):
        if isinstance(item, type) and issubclass(item, Exception) and item.__name__ != "NoError":
            raise ClusterError(f"altering config {what} failed: {item.__name__}")
        if isinstance(item, Exception):
            raise ClusterError(f"altering config {what} failed: {item!r}")
        if isinstance(item, str) and item != "OK":  # kafka-python 3 answers "OK" or the error's text
            raise ClusterError(f"altering config {what} failed: {item}")


def _random_cluster_id() -> str:
    """A random cluster id in Kafka's form (a base64url Uuid without padding). Like Kafka's Uuid.randomUuid, never
    one that starts with '-': StorageTool would read ``-t -xyz`` as an option (1 start in 64 failed)."""
    import base64

    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@atexit.register
def _stop_all() -> None:
    for cluster in list(KafkaCluster._live):
        with contextlib.suppress(Exception):
            cluster.stop()
