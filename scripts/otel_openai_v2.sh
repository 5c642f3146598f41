#!/usr/bin/env bash
# The venv in which tests/integration/test_native_citations.py makes the trace of
# opentelemetry-instrumentation-openai-v2 2.4b0 (a search model's answer, whose url_citation
# annotations it drops): that instrumentation needs opentelemetry-util-genai 1.1b0 and the main
# venv needs 1.3b0, so it cannot be installed beside the others. The exact versions are
# tests/otel-openai-v2/requirements.txt (resolved from requirements.in); the venv is made in
# $CITEMON_CACHE/otel-openai-v2/<the lock's sha256, 16 digits>, once per lock (a second run is
# instant; a few seconds the first time, from uv's cache), and the test finds it by the same key.
# Concurrent runs wait on a lock.
#
# Environment (optional): CITEMON_CACHE, the cache root (default: ~/.cache/citemon); PYTHON, the
# interpreter (default: python3.11, the monitor's); UV, the uv to install with (default: pip).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lock="$repo/tests/otel-openai-v2/requirements.txt"
cache="${CITEMON_CACHE:-$HOME/.cache/citemon}/otel-openai-v2"
python="${PYTHON:-python3.11}"

key="$(sha256sum "$lock" | cut -c1-16)"
dest="$cache/$key"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [[ -e $dest/.installed ]]; then
  exit 0
fi
# A venv cannot be moved once made (its scripts name their own path): made in place, and only
# marked installed at the end, so a run cut short is redone from scratch.
rm -rf "$dest"
"$python" -m venv "$dest"
echo "otel_openai_v2.sh: installing $lock into $dest (once per lock)" >&2
if [[ -n ${UV:-} ]]; then
  "$UV" pip install -q --python "$dest/bin/python" --no-deps -r "$lock"
else
  "$dest/bin/pip" install -q --disable-pip-version-check --no-deps -r "$lock"
fi
"$dest/bin/python" -c 'import opentelemetry.instrumentation.openai_v2, openai'
touch "$dest/.installed"
