# syntax=docker/dockerfile:1.7
# elrwatch image, used by every deployment of helm/elrwatch:
#   * the streaming job as a Deployment: `elrwatch stream ...` (pyspark starts Spark in local mode in the container);
#   * the streaming job as a spark-operator SparkApplication: the driver and executor pods call the entrypoint with
#     `driver ...` / `executor` like Spark's own images (handled by /opt/elrwatch/entrypoint.sh below);
#   * the API: `elrwatch api ...`.
# Build from the repository root:  docker build -t elrwatch:0.1.0 .
#
# NOT BUILT HERE: this project's machines and CI have no Docker engine (and no registry access besides package
# indexes), so this file is only linted (hadolint, shellcheck on the entrypoint) and the chart that runs it is
# validated offline (make test-helm). Build and smoke-test it where Docker is available:
#   docker run --rm elrwatch:0.1.0 elrwatch --help && docker run --rm elrwatch:0.1.0 java -version
#
# Java 17 comes from Debian's openjdk-17-jre-headless (the python:3.11-slim image is Debian bookworm); Spark itself
# is the pyspark wheel (its jars, bin/spark-submit and the Kubernetes backend), so SPARK_HOME is pyspark's folder.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------------------------------- build
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY elrwatch/ elrwatch/
COPY state/ state/
COPY streaming/ streaming/
COPY store/ store/
COPY api/ api/
COPY bridge/ bridge/
COPY kafkaio/ kafkaio/
# Developer tooling (the demo's cluster harness, event generator): packaged, never on the product's runtime path.
COPY devtools/ devtools/
RUN python -m venv /opt/elrwatch/venv \
 && /opt/elrwatch/venv/bin/pip install . \
 && /opt/elrwatch/venv/bin/elrwatch --help >/dev/null

# ---------------------------------------------------------------------------------------------------- connector
# Spark's Kafka connector for --source kafka-native (tools/spark/pom.xml: spark-sql-kafka-0-10 in pyspark's version,
# its token provider, kafka-clients, commons-pool2), fetched from Maven Central as `make spark-jars` does.
FROM maven:3.9-eclipse-temurin-17 AS connector
WORKDIR /src
COPY tools/spark/pom.xml pom.xml
RUN mvn -q -B dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=/connector

# ---------------------------------------------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="elrwatch" \
      org.opencontainers.image.description="Real-time ISR / ELR safety monitor for Apache Kafka (KRaft) partitions" \
      org.opencontainers.image.licenses="Apache-2.0"

# Java for Spark, tini as PID 1 (signals to the JVM / uvicorn), procps for Spark's scripts (ps).
# Versions are not pinned: Debian bookworm only ships security updates of these packages.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java

COPY --from=build /opt/elrwatch/venv /opt/elrwatch/venv
# In pyspark's own jars: on the classpath of the driver and of every executor without spark.jars (connector.py).
COPY --from=connector /connector/ /opt/elrwatch/venv/lib/python3.11/site-packages/pyspark/jars/

ENV JAVA_HOME=/opt/java \
    SPARK_HOME=/opt/elrwatch/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/elrwatch/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/elrwatch/venv/bin/python \
    PATH=/opt/elrwatch/venv/bin:/opt/java/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    SPARK_LOCAL_DIRS=/spark-local

# The SparkApplication's mainApplicationFile (local:///opt/elrwatch/elrwatch-main.py): elrwatch's CLI, with the
# SparkApplication's `arguments` (stream --source ...).
COPY <<'EOF' /opt/elrwatch/elrwatch-main.py
"""spark-submit entry point: runs the elrwatch CLI with spark-submit's application arguments."""
from elrwatch.cli import main

main()
EOF

# Entry point: `driver` / `executor` as in Spark's Kubernetes images (spark-operator), anything else is exec'd.
COPY --chmod=0755 <<'EOF' /opt/elrwatch/entrypoint.sh
#!/bin/bash
set -euo pipefail
SPARK_CLASSPATH="${SPARK_CLASSPATH:-}:${SPARK_HOME}/jars/*"
case "${1:-}" in
  driver)
    shift
    exec "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    java_opts=()
    while IFS='=' read -r name value; do
      [[ "${name}" == SPARK_JAVA_OPT_* ]] && java_opts+=("${value}")
    done < <(env | sort -t_ -k4 -n)
    exec "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
      -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
      -cp "${SPARK_CLASSPATH}:${SPARK_DIST_CLASSPATH:-}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}" "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
EOF

# Non-root user (uid/gid 10001, matching the chart's securityContext); writable paths are volumes in Kubernetes
# (/tmp, /spark-local, the data volume /var/lib/elrwatch), so the root filesystem can be read-only.
RUN groupadd --system --gid 10001 elrwatch \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin elrwatch \
 && mkdir -p /var/lib/elrwatch /spark-local \
 && chown 10001:10001 /var/lib/elrwatch /spark-local

USER 10001:10001
WORKDIR /var/lib/elrwatch
EXPOSE 8080 9108
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/elrwatch/entrypoint.sh"]
CMD ["elrwatch", "--help"]
