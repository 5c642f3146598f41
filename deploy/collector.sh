#!/usr/bin/env bash
# The OpenTelemetry Collector citemon's tests and demo run, built from deploy/otelcol-builder.yaml
# by the OpenTelemetry Collector Builder with this machine's Go and the Go module proxy.
#
#   deploy/collector.sh build      build it (once per manifest: a second build is instant)
#   deploy/collector.sh path       print the built binary's path; exit 1 when it is not built
#   deploy/collector.sh validate [CONFIG...]
#                                  `otelcol validate` each config (default deploy/otel-collector.yaml)
#
# The builder's version is the manifest's core version (otlpreceiver's), so the two cannot
# drift. Builds are cached under $CITEMON_CACHE/collector keyed on the manifest's sha256, the
# builder version and `go version`: editing the manifest builds afresh, nothing else does. Go's
# own caches (GOPATH, GOMODCACHE, GOCACHE) live there too, so a rebuild after a small manifest
# change reuses every module and compiled package. Concurrent builds wait on a lock.
#
# Environment (all optional):
#   CITEMON_CACHE                cache root                          (default: ~/.cache/citemon)
#   CITEMON_GO                   the go command                      (default: go on PATH, else
#                                                                     /usr/local/go/bin/go)
#   CITEMON_COLLECTOR_MANIFEST   builder manifest                    (default: deploy/otelcol-builder.yaml)
#   GOPROXY, GOTOOLCHAIN         passed to go as usual               (GOTOOLCHAIN default: local)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MANIFEST="${CITEMON_COLLECTOR_MANIFEST:-$HERE/otelcol-builder.yaml}"
CACHE="${CITEMON_CACHE:-$HOME/.cache/citemon}"
ROOT="$CACHE/collector"
DIST_NAME=otelcol-citemon

log() { printf 'collector.sh: %s\n' "$*" >&2; }
die() { printf 'collector.sh: error: %s\n' "$*" >&2; exit 1; }

find_go() {
    if [[ -n "${CITEMON_GO:-}" ]]; then
        printf '%s\n' "$CITEMON_GO"
    elif command -v go >/dev/null 2>&1; then
        command -v go
    elif [[ -x /usr/local/go/bin/go ]]; then
        printf '%s\n' /usr/local/go/bin/go
    else
        return 1
    fi
}

[[ -f "$MANIFEST" ]] || die "no builder manifest at $MANIFEST"

# One release of the builder per manifest: the version of the core modules it lists.
builder_version() {
    local v
    v="$(sed -n 's|^ *- gomod: go.opentelemetry.io/collector/receiver/otlpreceiver \(v[0-9][0-9.]*\).*|\1|p' \
        "$MANIFEST")"
    [[ -n "$v" ]] || die "$MANIFEST lists no go.opentelemetry.io/collector/receiver/otlpreceiver vX.Y.Z"
    printf '%s\n' "$v"
}

go_env() {
    export GOPATH="$ROOT/gopath"
    export GOMODCACHE="$ROOT/gopath/pkg/mod"
    export GOCACHE="$ROOT/gocache"
    export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
    export GOFLAGS="${GOFLAGS:--buildvcs=false}"
    GO="$(find_go)" || die "Go not found: install it (https://go.dev/dl/) or set CITEMON_GO"
    GO_VERSION="$("$GO" env GOVERSION 2>/dev/null)" || die "$GO does not run (set CITEMON_GO to a Go toolchain)"
    # The builder runs `go` from PATH.
    PATH="$(dirname "$GO"):$PATH"
    export PATH
}

cache_key() {
    printf '%s %s %s\n' "$(sha256sum "$MANIFEST" | cut -d' ' -f1)" "$(builder_version)" \
        "$GO_VERSION" | sha256sum | cut -c1-16
}

dist_dir() { printf '%s\n' "$ROOT/otelcol-$(cache_key)"; }

binary() { printf '%s\n' "$(dist_dir)/$DIST_NAME/$DIST_NAME"; }

built() { [[ -f "$(dist_dir)/.complete" && -x "$(binary)" ]]; }

install_builder() {
    local version dir
    version="$(builder_version)"
    dir="$ROOT/builder-$version"
    BUILDER="$dir/builder"
    [[ -x "$BUILDER" ]] && return
    log "installing go.opentelemetry.io/collector/cmd/builder@$version"
    local started=$SECONDS
    GOBIN="$dir.tmp" "$GO" install "go.opentelemetry.io/collector/cmd/builder@$version" ||
        die "go install go.opentelemetry.io/collector/cmd/builder@$version failed (output above)"
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
    log "builder $version installed in $((SECONDS - started)) s"
}

build() {
    go_env
    mkdir -p "$ROOT"
    exec 9>"$ROOT/.lock"
    flock 9 # another build of the same cache finishes first; then this one is a cache hit
    if built; then
        log "cached: $(binary) (build skipped)"
        return
    fi
    install_builder
    local dir tmp started
    dir="$(dist_dir)"
    tmp="$dir.tmp"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    cp "$MANIFEST" "$tmp/manifest.yaml"
    log "building $DIST_NAME from $MANIFEST with $GO_VERSION (a cold build takes minutes)"
    started=$SECONDS
    if ! (cd "$tmp" && "$BUILDER" --config manifest.yaml >build.log 2>&1); then
        tail -n 40 "$tmp/build.log" >&2
        die "the Collector build failed (output above; full log in $tmp/build.log)"
    fi
    [[ -x "$tmp/$DIST_NAME/$DIST_NAME" ]] || die "the builder finished but wrote no $DIST_NAME binary"
    printf '%s\n' "$((SECONDS - started))" >"$tmp/.build_seconds"
    cache_key >"$tmp/.complete"
    rm -rf "$dir"
    mv "$tmp" "$dir"
    log "built $(binary) in $((SECONDS - started)) s"
}

path() {
    go_env
    built || die "the Collector is not built for $MANIFEST: run make collector"
    binary
}

validate() {
    local bin config
    bin="$(path)"
    (($# > 0)) || set -- "$HERE/otel-collector.yaml"
    for config in "$@"; do
        "$bin" validate --config "$config" || die "$config is not a valid Collector config"
        log "valid: $config"
    done
}

case "${1:-}" in
    build) build ;;
    path) path ;;
    validate) shift; validate "$@" ;;
    *) echo "usage: $0 build|path|validate [CONFIG...]" >&2; exit 2 ;;
esac
