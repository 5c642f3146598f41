#!/usr/bin/env bash
# The other Pythons the shim supports, each in a venv with only the OpenTelemetry API and SDK,
# for tests/integration/test_shim_pythons.py: Python 3.10 (the shim's floor) with the oldest API
# the shim allows, 3.12 and 3.13 with the newest this repository pins. Interpreters come from
# pyenv's versions (PYENV_ROOT, default ~/.pyenv); one that is absent is said and left out (the
# test then skips it, or fails under CI=true for the floor). Cached: a venv already made is kept.
set -euo pipefail
dest=${1:?usage: shim_pythons.sh DIR}
root=${PYENV_ROOT:-$HOME/.pyenv}
# minor version, OpenTelemetry API/SDK version
for pair in "3.10 1.25.0" "3.12 1.45.2" "3.13 1.45.2"; do
  read -r minor otel <<<"$pair"
  venv="$dest/py$minor-otel$otel"
  if [[ -x $venv/bin/python && -e $venv/.installed ]]; then continue; fi
  python=$(ls -d "$root"/versions/"$minor".*/bin/python"$minor" 2>/dev/null | sort -V | tail -1 || true)
  if [[ -z $python ]]; then
    python=$(command -v "python$minor" 2>/dev/null || true)
    [[ -n $python ]] && ! "$python" -c '' 2>/dev/null && python=""
  fi
  if [[ -z $python ]]; then
    echo "shim_pythons.sh: no Python $minor here (looked in $root/versions and PATH): left out" >&2
    continue
  fi
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q "opentelemetry-api==$otel" "opentelemetry-sdk==$otel"
  touch "$venv/.installed"
  echo "shim_pythons.sh: $("$venv/bin/python" --version) with OpenTelemetry $otel in $venv"
done
