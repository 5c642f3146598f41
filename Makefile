# One entry point for every check; CI runs `make test` (see .ci/run).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install tools kafka-up kafka-down demo test unit lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

# Debian packages the tests need: promtool and the Prometheus server.
tools:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; }
	@# Debian starts the packaged service; we run our own on other ports, so stop theirs.
	@-systemctl stop prometheus prometheus-node-exporter >/dev/null 2>&1 || true

kafka-up:
	@deploy/kafka.sh up

kafka-down:
	@deploy/kafka.sh down

demo: install kafka-up
	$(BIN)/citemon demo

test: install tools kafka-up
	$(BIN)/ruff check monitor instrumentation tests bench scripts deploy
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m "not slow"

unit: install
	$(BIN)/python -m pytest -q tests/unit

lint: install
	$(BIN)/ruff check monitor instrumentation tests bench scripts deploy
	$(BIN)/ruff format --check monitor instrumentation tests bench scripts deploy
	$(BIN)/mypy

bench: install tools kafka-up
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache *.egg-info
