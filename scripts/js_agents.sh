#!/usr/bin/env bash
# The JavaScript agents' packages (tests/js: the Vercel AI SDK, LangGraph.js and OpenInference's
# LangChain.js instrumentation, exact versions in tests/js/package-lock.json), for the tests that
# make their traces (tests/integration/test_agents_js.py). `npm ci` installs the lock into
# $CITEMON_CACHE/js-agents/<the lock's sha256>, once per lock (a second run is instant; about
# 5–10 s the first time), and tests/js/node_modules links to it, so nothing is installed in the
# work tree and node_modules is never committed. Concurrent runs wait on a lock. The installs of
# the $KEEP locks used last are kept (about 120 MB each; other worktrees or branches may link to
# them); older ones are deleted.
#
# Environment (optional): CITEMON_CACHE, the cache root (default: ~/.cache/citemon).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
js="$repo/tests/js"
cache="${CITEMON_CACHE:-$HOME/.cache/citemon}/js-agents"
KEEP=3

die() { printf 'js_agents.sh: error: %s\n' "$*" >&2; exit 1; }

command -v node >/dev/null || die "node is not installed (Node.js 20 or later)"
command -v npm >/dev/null || die "npm is not installed"
major="$(node -p 'process.versions.node.split(".")[0]')"
((major >= 20)) || die "node $(node --version) is older than the agents' floor, Node.js 20"

key="$(sha256sum "$js/package-lock.json" | cut -c1-16)"
dest="$cache/$key"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [[ ! -e $dest/.installed ]]; then
  tmp="$(mktemp -d "$cache/.tmp.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  cp "$js/package.json" "$js/package-lock.json" "$tmp/"
  echo "js_agents.sh: npm ci into $dest (once per lock)" >&2
  (cd "$tmp" && npm ci --no-audit --no-fund --loglevel=error)
  touch "$tmp/.installed"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  trap - EXIT
fi
touch "$dest/.used"
# Keep the $KEEP installs used last (by their .used stamp; one without a stamp is older).
mapfile -t recent < <(cd "$cache" && ls -1t -- */.used 2>/dev/null | head -n "$KEEP")
for dir in "$cache"/*/; do
  name="$(basename "$dir")"
  [[ " ${recent[*]} " == *" $name/.used "* ]] && continue
  echo "js_agents.sh: deleting the install of an older lock: $cache/$name" >&2
  rm -rf -- "${cache:?}/$name"
done
ln -sfn "$dest/node_modules" "$js/node_modules"
