"""Spark's Kafka connector for ``--source kafka-native``: which jars it needs, where the job finds them, and a
one-line error naming the jar that is missing.

The connector (``spark-sql-kafka-0-10``) is not part of pyspark's wheel. Its version must equal pyspark's. It needs
three more jars that pyspark lacks: its token provider, ``kafka-clients`` and ``commons-pool2``
(tools/spark/pom.xml lists them; ``make spark-jars`` fetches them into ``.tools/spark/jars``). Where the job looks,
in order:

1. ``--spark-jars`` / ``ELRWATCH_SPARK_JARS``: a folder or a comma-separated list of jar files;
2. pyspark's own ``jars`` folder (an image that installed the connector there, like the Dockerfile's);
3. ``--spark-jars-packages``: Maven coordinates Spark resolves itself at start (needs a reachable repository);
4. ``.tools/spark/jars`` under the working directory (a checkout after ``make spark-jars``).

No Spark session here: the check runs before the JVM starts, so a missing jar is one line, not a Java stack.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

CONNECTOR = "spark-sql-kafka-0-10_2.13"
# Every jar the connector needs beyond pyspark's, by artifact; the first two in pyspark's own version.
REQUIRED_ARTIFACTS = (CONNECTOR, "spark-token-provider-kafka-0-10_2.13", "kafka-clients", "commons-pool2")
SPARK_VERSIONED = frozenset({CONNECTOR, "spark-token-provider-kafka-0-10_2.13"})
CHECKOUT_JARS = os.path.join(".tools", "spark", "jars")
_JAR = re.compile(r"^(?P<artifact>.+)-(?P<version>\d[^-]*(?:-[A-Za-z][A-Za-z0-9.]*)?)\.jar$")


class ConnectorError(RuntimeError):
    """The connector's jars cannot be found or do not fit pyspark: one line naming the jar and how to get it."""


@dataclass(frozen=True)
class ConnectorJars:
    """How the job gets the connector: ``jars`` for spark.jars, ``packages`` for spark.jars.packages, or neither
    (already on pyspark's classpath); ``origin`` says where it was found (logged at start)."""

    jars: tuple[str, ...] = ()
    packages: str | None = None
    origin: str = ""


def spark_version() -> str:
    """The installed pyspark's version (the connector's must equal it)."""
    import pyspark

    return pyspark.__version__


def pyspark_jars_dir() -> str:
    """pyspark's own jars folder (its JVM's classpath in local mode and for spark-class)."""
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "jars")


def parse_jar(path: str) -> tuple[str, str] | None:
    """(artifact, version) of a Maven-named jar file, None for another name."""
    match = _JAR.match(os.path.basename(path))
    return (match["artifact"], match["version"]) if match else None


def _jar_files(spec: str) -> list[str]:
    """The jar files a ``--spark-jars`` value names: a folder's ``*.jar`` or comma-separated files."""
    spec = spec.strip()
    if os.path.isdir(spec):
        return sorted(os.path.join(spec, n) for n in os.listdir(spec) if n.endswith(".jar"))
    files = [p.strip() for p in spec.split(",") if p.strip()]
    for path in files:
        if not os.path.isfile(path):
            raise ConnectorError(f"--spark-jars: {path} is not a file or a folder")
    return files


def missing_artifacts(files: Iterable[str], version: str) -> list[str]:
    """The jar names (``artifact-version.jar``, or ``kafka-clients-*.jar`` where any version does) the connector
    needs and ``files`` lack; a connector or token provider of another Spark version counts as missing."""
    found: dict[str, set[str]] = {}
    for path in files:
        parsed = parse_jar(path)
        if parsed:
            found.setdefault(parsed[0], set()).add(parsed[1])
    missing = []
    for artifact in REQUIRED_ARTIFACTS:
        if artifact in SPARK_VERSIONED:
            if version not in found.get(artifact, set()):
                missing.append(f"{artifact}-{version}.jar")
        elif artifact not in found:
            missing.append(f"{artifact}-*.jar")
    return missing


def _missing_message(where: str, missing: list[str], files: Iterable[str], version: str) -> str:
    other = sorted(
        f"{a}-{v}.jar" for a, v in (parse_jar(p) or ("", "") for p in files) if a in SPARK_VERSIONED and v != version
    )
    wrong = f" ({', '.join(other)} is for another Spark version than pyspark's {version})" if other else ""
    return (
        f"--source kafka-native: {', '.join(missing)} not in {where}{wrong}; `make spark-jars` fetches Spark's "
        f"Kafka connector and its dependencies from Maven Central into {CHECKOUT_JARS} (tools/spark/pom.xml), "
        f"or pass --spark-jars-packages org.apache.spark:{CONNECTOR}:{version}; --source kafka needs nothing extra"
    )


def resolve(spark_jars: str | None, packages: str | None, cwd: str | None = None) -> ConnectorJars:
    """Where the kafka-native source's connector comes from (see the module's docstring), or a ConnectorError."""
    version = spark_version()
    if spark_jars:
        files = _jar_files(spark_jars)
        missing = missing_artifacts(files, version)
        if missing:
            raise ConnectorError(_missing_message(f"--spark-jars {spark_jars}", missing, files, version))
        return ConnectorJars(jars=tuple(os.path.abspath(f) for f in files), origin=f"--spark-jars {spark_jars}")
    bundled = _jar_files(pyspark_jars_dir()) if os.path.isdir(pyspark_jars_dir()) else []
    if not missing_artifacts(bundled, version):
        return ConnectorJars(origin=f"pyspark's jars ({pyspark_jars_dir()})")
    if packages:
        return ConnectorJars(packages=packages, origin=f"--spark-jars-packages {packages}")
    checkout = os.path.join(cwd or os.getcwd(), CHECKOUT_JARS)
    files = _jar_files(checkout) if os.path.isdir(checkout) else []
    missing = missing_artifacts(files, version)
    if missing:
        where = checkout if os.path.isdir(checkout) else f"pyspark's jars, --spark-jars or {checkout}"
        raise ConnectorError(_missing_message(where, missing, files, version))
    return ConnectorJars(jars=tuple(files), origin=checkout)
