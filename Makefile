# One entry point for every check; CI runs `make test`, then `make test-slow` (see .ci/run).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install llama tools browser label-studio postgres chroma shim-pythons otel-openai-v2 js-traces js-traces-for-tests kafka-up kafka-down collector collector-for-tests demo demo-collector test-setup test test-slow unit lint docs bench clean

install: $(STAMP)

# uv installs (the same resolution as pip, from its own cache under ~/.cache/uv: 44 s into a
# fresh venv where pip took 84 s), compiling bytecode as pip does (a dependency that warns when
# its source is compiled, pysbd, would otherwise warn at import, and warnings are errors in tests);
# the venv is Python's own, with pip in it for the tests.
UV_VERSION := 0.13.9

$(STAMP): pyproject.toml instrumentation/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check "uv==$(UV_VERSION)"
	$(BIN)/uv pip install -q --python $(BIN)/python --upgrade pip
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e ./instrumentation -e '.[dev,dialects,providers,agents]'
	@touch $(STAMP)

# llama.cpp's OpenAI-compatible server (llama-cpp-python) and `gguf`, for the tests that drive
# the HTTP judge through a real server. pip compiles llama.cpp from source once (8-11 min on 2
# cores); the wheel is kept in LLAMA_WHEELS, so later installs (a clean clone, CI on the same
# machine) take seconds.
LLAMA_VERSION := 0.3.36
LLAMA_WHEELS ?= $(HOME)/.cache/citemon/wheels
LLAMA_CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF
LLAMA_STAMP := $(VENV)/.llama-$(LLAMA_VERSION)

llama: $(LLAMA_STAMP)

$(LLAMA_STAMP): $(STAMP)
	@mkdir -p $(LLAMA_WHEELS)
	@ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || { \
	  echo "building llama-cpp-python $(LLAMA_VERSION) (compiles llama.cpp: minutes, once)"; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
	    $(BIN)/pip wheel -q --no-deps -w $(LLAMA_WHEELS) "llama-cpp-python==$(LLAMA_VERSION)"; }
	$(BIN)/pip install -q --find-links $(LLAMA_WHEELS) "llama-cpp-python[server]==$(LLAMA_VERSION)" "gguf>=0.10"
	@touch $@

# Debian packages the tests need: promtool and the Prometheus server.
tools:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; }
	@# Debian starts the packaged service; we run our own on other ports, so stop theirs.
	@-systemctl stop prometheus prometheus-node-exporter >/dev/null 2>&1 || true

# Debian's Chromium, for the review page's real-browser test: Playwright drives /usr/bin/chromium
# (`playwright install` downloads a browser build of its own, which cannot happen here).
browser:
	@command -v chromium >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# A real Label Studio server for the export/import round trip test, in a venv of its own (about
# 1 GB; its pins clash with ours), cached under ~/.cache/citemon like the llama.cpp wheel. uv
# installs it (13 s from an empty cache where pip took 52 s, the same 156 packages at the same
# versions; 2026-12-05), bytecode compiled as pip does.
LABEL_STUDIO_VERSION := 1.23.2
LABEL_STUDIO_VENV ?= $(HOME)/.cache/citemon/label-studio-$(LABEL_STUDIO_VERSION)

label-studio: $(LABEL_STUDIO_VENV)/.installed

$(LABEL_STUDIO_VENV)/.installed: | $(STAMP)
	rm -rf $(LABEL_STUDIO_VENV)
	$(PYTHON) -m venv $(LABEL_STUDIO_VENV)
	$(BIN)/uv pip install -q --compile-bytecode --python $(LABEL_STUDIO_VENV)/bin/python "label-studio==$(LABEL_STUDIO_VERSION)"
	@touch $@

# Debian's PostgreSQL server binaries, for the passage store's tests (each test session starts
# its own server on a loopback port, in a directory of its own; Debian's default cluster, if its
# package started one, is not used).
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }

# Chroma's server (`chroma run`) for the passage store's tests, in a venv of its own (its pins
# are not ours: citemon talks to it with the light chromadb-client), cached under ~/.cache/citemon;
# installed by uv as Label Studio is (7 s from an empty cache).
CHROMA_VERSION := 1.5.9
CHROMA_VENV ?= $(HOME)/.cache/citemon/chroma-$(CHROMA_VERSION)

chroma: $(CHROMA_VENV)/.installed

$(CHROMA_VENV)/.installed: | $(STAMP)
	rm -rf $(CHROMA_VENV)
	$(PYTHON) -m venv $(CHROMA_VENV)
	$(BIN)/uv pip install -q --compile-bytecode --python $(CHROMA_VENV)/bin/python "chromadb==$(CHROMA_VERSION)"
	@touch $@

# The shim on the other Pythons it supports (3.10, its floor, with the oldest OpenTelemetry API
# it allows; 3.12 and 3.13), a venv each with only the API and SDK, cached under ~/.cache/citemon;
# interpreters from pyenv (tests/integration/test_shim_pythons.py).
shim-pythons:
	@scripts/shim_pythons.sh $(HOME)/.cache/citemon/shim-pythons

# opentelemetry-instrumentation-openai-v2 2.4b0, whose trace tests/integration/test_native_citations.py
# makes, in a venv of its own (it needs opentelemetry-util-genai 1.1b0, ours 1.3b0): the pins of
# tests/otel-openai-v2/requirements.txt, installed by uv into ~/.cache/citemon, once per lock.
otel-openai-v2: $(STAMP)
	@PYTHON=$(PYTHON) UV=$(BIN)/uv scripts/otel_openai_v2.sh

# The JavaScript agents whose traces the agent dialect tests make (tests/js: the Vercel AI SDK,
# LangGraph.js under OpenInference): `npm ci` of tests/js/package-lock.json into ~/.cache/citemon,
# once per lock, linked as tests/js/node_modules (scripts/js_agents.sh).
js-traces:
	@scripts/js_agents.sh

# For `make test`: packages that cannot be installed (no Node.js) fail the run under CI=true;
# elsewhere the tests that need them skip and say why.
js-traces-for-tests:
	@scripts/js_agents.sh || { [[ "$${CI:-}" != true ]] && \
	  echo "make: the JavaScript agents could not be installed; their tests will skip (they fail under CI=true)" >&2; }

kafka-up:
	@deploy/kafka.sh up

kafka-down:
	@deploy/kafka.sh down

# The OpenTelemetry Collector (deploy/otelcol-builder.yaml) built with Go from the module proxy;
# cached under ~/.cache/citemon keyed on the manifest, so a second run is instant.
collector:
	@deploy/collector.sh build

# For `make test`: a Collector that cannot be built fails the run under CI=true; elsewhere the
# tests that need it skip (need_server) and say why.
collector-for-tests:
	@deploy/collector.sh build || { [[ "$${CI:-}" != true ]] && \
	  echo "make: the Collector could not be built; its tests will skip (they fail under CI=true)" >&2; }

demo: install kafka-up
	$(BIN)/citemon demo

# The same demo with the spans going service → OTLP/HTTP → the project's Collector → Kafka.
demo-collector: install kafka-up collector
	$(BIN)/citemon demo --via-collector

# What `make test` sets up before the suite. Debian's packages first, one at a time (apt-get
# takes dpkg's lock); the rest side by side, so that the downloads (uv, Maven, npm) overlap the
# Collector's Go build on a machine that has none of it cached.
TEST_SETUP := install label-studio chroma shim-pythons otel-openai-v2 js-traces-for-tests kafka-up collector-for-tests

test-setup: tools browser postgres
	@$(MAKE) --no-print-directory -j4 --output-sync=target $(TEST_SETUP)

test: test-setup docs
	$(BIN)/ruff check monitor instrumentation tests bench scripts deploy
	$(BIN)/mypy
	PYTHON=$(BIN)/python .ci/pytest -q -m "not slow"

# The slow suite (`-m slow`): the kill -9 soak (3 kills), the broker kill -9 restart, the
# measured time to detect through Prometheus, and the HTTP judge against llama.cpp's server
# (its wheel compiles llama.cpp the first time, 8-21 min on 2 cores: kept out of a newcomer's
# first `make test`). CI runs it after `make test` (.ci/run).
test-slow: install llama tools kafka-up
	PYTHON=$(BIN)/python .ci/pytest -q -m slow

unit: install
	$(BIN)/python -m pytest -q tests/unit

lint: install
	$(BIN)/ruff check monitor instrumentation tests bench scripts deploy
	$(BIN)/ruff format --check monitor instrumentation tests bench scripts deploy
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/), built with warnings as errors: a broken link or
# anchor fails `make test`. The site lands in site/ (not committed).
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

bench: install tools postgres kafka-up
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) site .pytest_cache .ruff_cache .mypy_cache *.egg-info monitor/*.egg-info \
	  instrumentation/*.egg-info build instrumentation/build dist
