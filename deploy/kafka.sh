#!/usr/bin/env bash
# A real, single-node Apache Kafka broker on loopback for citemon's tests and demo.
#
#   deploy/kafka.sh up       fetch the jars (once), format storage (once), start, wait until ready
#   deploy/kafka.sh down     stop the broker that `up` started (and nothing else)
#   deploy/kafka.sh status   print "running …" or "stopped"
#   deploy/kafka.sh info     print the broker's address (and, for a secured one, where its
#                            credentials are) as KEY=VALUE lines; starts nothing
#
# CITEMON_KAFKA_SECURITY=sasl picks a second, secured broker with its own ports and run dir
# (deploy/kafka/server-sasl.properties.in): SASL_PLAINTEXT on 9096 and SASL_SSL on 9098, both
# SCRAM-SHA-256/512, controller on 9097. On first `up` it writes into its run dir (mode 700) a
# random password for user `citemon` (file citemon.password), a self-signed CA and a broker
# certificate for 127.0.0.1/localhost (tls/ca.pem), and formats the storage with the SCRAM
# users. Both brokers can run at once: `up`/`down`/`status` act on the one the variable picks.
#
# Why jars from Maven Central and not a release tarball: the project's machines reach package
# registries only. deploy/kafka/pom.xml lists the broker and its log4j2 binding; mvn copies them
# to a cache outside the repo, and the broker runs as `java -cp 'libs/*' kafka.Kafka`.
#
# Environment (all optional):
#   CITEMON_CACHE          cache root                     (default: ~/.cache/citemon)
#   CITEMON_KAFKA_VERSION  org.apache.kafka:kafka_2.13    (default: 4.1.1)
#   CITEMON_KAFKA_PORT     PLAINTEXT listener port        (default: 9092)
#   CITEMON_KAFKA_CONTROLLER_PORT  KRaft controller port  (default: 9093)
#   CITEMON_KAFKA_HEAP     JVM max heap                   (default: 512m)
#   CITEMON_KAFKA_START_TIMEOUT_S  readiness deadline     (default: 60)
#   CITEMON_KAFKA_SECURITY plaintext | sasl               (default: plaintext)
#   CITEMON_KAFKA_SASL_PORT            sasl: SASL_PLAINTEXT port  (default: 9096)
#   CITEMON_KAFKA_SASL_CONTROLLER_PORT sasl: controller port      (default: 9097)
#   CITEMON_KAFKA_SSL_PORT             sasl: SASL_SSL port        (default: 9098)
#   CITEMON_KAFKA_STOP_TIMEOUT_S   TERM grace before KILL (default: 30)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
SPEC="$HERE/kafka"

KAFKA_VERSION="${CITEMON_KAFKA_VERSION:-4.1.1}"
SECURITY="${CITEMON_KAFKA_SECURITY:-plaintext}"
case "$SECURITY" in
    plaintext)
        PORT="${CITEMON_KAFKA_PORT:-9092}"
        CONTROLLER_PORT="${CITEMON_KAFKA_CONTROLLER_PORT:-9093}"
        SSL_PORT=""
        TEMPLATE=server.properties.in
        ;;
    sasl)
        # Own variables, so a CITEMON_KAFKA_PORT meant for the plaintext broker never makes
        # the two collide.
        PORT="${CITEMON_KAFKA_SASL_PORT:-9096}"
        CONTROLLER_PORT="${CITEMON_KAFKA_SASL_CONTROLLER_PORT:-9097}"
        SSL_PORT="${CITEMON_KAFKA_SSL_PORT:-9098}"
        TEMPLATE=server-sasl.properties.in
        ;;
    *)
        printf 'kafka.sh: error: CITEMON_KAFKA_SECURITY must be plaintext or sasl, not %s\n' \
            "$SECURITY" >&2
        exit 2
        ;;
esac
HEAP="${CITEMON_KAFKA_HEAP:-512m}"
START_TIMEOUT_S="${CITEMON_KAFKA_START_TIMEOUT_S:-60}"
STOP_TIMEOUT_S="${CITEMON_KAFKA_STOP_TIMEOUT_S:-30}"
DEPENDENCY_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

CACHE="${CITEMON_CACHE:-$HOME/.cache/citemon}"
HOME_DIR="$CACHE/kafka-$KAFKA_VERSION"
LIBS="$HOME_DIR/libs"
# One run dir per listener port, so a second broker on another port never shares data or pid.
RUN="$HOME_DIR/run-$PORT"
DATA="$RUN/data"
LOGS="$RUN/logs"
PIDFILE="$RUN/kafka.pid"
CONFIG="$RUN/server.properties"
BOOTSTRAP="127.0.0.1:$PORT"
# sasl only: the SCRAM user the tests and the demo log in as, and where its secrets live.
SASL_USER=citemon
PASSWORD_FILE="$RUN/citemon.password"
BROKER_PASSWORD_FILE="$RUN/broker.password"
KEYSTORE_PASSWORD_FILE="$RUN/keystore.password"
TLS="$RUN/tls"

log() { printf 'kafka.sh: %s\n' "$*"; }
die() { printf 'kafka.sh: error: %s\n' "$*" >&2; exit 1; }

require() {
    command -v "$1" >/dev/null 2>&1 || die "$1 not found on PATH: $2"
}

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# The pid from our pid file, if that process is alive and is our broker (pids get reused).
our_pid() {
    [[ -f "$PIDFILE" ]] || return 1
    local pid
    pid="$(<"$PIDFILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    local cmdline
    cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ "$cmdline" == *"kafka.Kafka $CONFIG"* ]] || return 1
    printf '%s\n' "$pid"
}

# Who holds a port, for error messages (best effort: ss may be missing).
port_owner() {
    if command -v ss >/dev/null 2>&1; then
        ss -ltnpH "sport = :$1" 2>/dev/null | head -n 3
    fi
}

cache_key() {
    # The cache is complete when it was filled from this exact pom and version.
    printf '%s %s\n' "$KAFKA_VERSION" "$(sha256sum "$SPEC/pom.xml" | cut -d' ' -f1)"
}

fetch() {
    if [[ -f "$LIBS/.complete" && "$(<"$LIBS/.complete")" == "$(cache_key)" ]]; then
        log "jars for Kafka $KAFKA_VERSION cached in $LIBS (fetch skipped)"
        return
    fi
    require mvn "install Maven (Debian: apt-get install maven) to fetch the Kafka jars"
    log "fetching Kafka $KAFKA_VERSION jars from Maven Central into $LIBS"
    local started tmp
    started=$SECONDS
    mkdir -p "$HOME_DIR"
    tmp="$(mktemp -d "$HOME_DIR/libs.tmp.XXXXXX")"
    if ! mvn -q -B -f "$SPEC/pom.xml" -Dkafka.version="$KAFKA_VERSION" \
        "$DEPENDENCY_PLUGIN:copy-dependencies" -DincludeScope=runtime \
        -DoutputDirectory="$tmp" >"$tmp.mvn.log" 2>&1; then
        tail -n 30 "$tmp.mvn.log" >&2
        rm -rf "$tmp" "$tmp.mvn.log"
        die "mvn could not fetch org.apache.kafka:kafka_2.13:$KAFKA_VERSION (output above)"
    fi
    rm -f "$tmp.mvn.log"
    ls "$tmp"/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null 2>&1 ||
        die "mvn finished but kafka_2.13-$KAFKA_VERSION.jar is missing from $tmp"
    cache_key >"$tmp/.complete"
    rm -rf "$LIBS"
    mv "$tmp" "$LIBS"
    log "fetched $(find "$LIBS" -name '*.jar' | wc -l) jars in $((SECONDS - started)) s"
}

# A random secret in file $1 (kept when present: the formatted storage holds its hash).
make_secret() {
    [[ -s "$1" ]] && return
    [[ -f "$DATA/meta.properties" ]] &&
        die "$1 is missing but $DATA is already formatted with its SCRAM users; remove $RUN to start afresh"
    # Hex: safe inside sed, the JAAS config and --add-scram without quoting.
    (umask 077 && openssl rand -hex 24 >"$1")
}

# A self-signed CA and a broker certificate for 127.0.0.1/localhost, as the PKCS12 keystore
# the SASL_SSL listener reads; clients verify the broker with tls/ca.pem. Made once.
make_tls() {
    [[ -s "$TLS/broker.p12" && -s "$TLS/ca.pem" ]] && return
    require openssl "install OpenSSL (Debian: apt-get install openssl) to make the test CA"
    log "making a test CA and broker certificate in $TLS"
    local tmp
    tmp="$(mktemp -d "$RUN/tls.tmp.XXXXXX")"
    {
        openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 \
            -keyout "$tmp/ca.key" -out "$tmp/ca.pem" -subj "/CN=citemon test CA" \
            -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign" &&
            openssl req -newkey rsa:2048 -nodes -sha256 -keyout "$tmp/broker.key" \
                -out "$tmp/broker.csr" -subj "/CN=localhost" &&
            printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" \
                "basicConstraints=critical,CA:FALSE" \
                "keyUsage=critical,digitalSignature,keyEncipherment" \
                "extendedKeyUsage=serverAuth" "subjectKeyIdentifier=hash" \
                "authorityKeyIdentifier=keyid,issuer" >"$tmp/broker.ext" &&
            openssl x509 -req -sha256 -days 3650 -in "$tmp/broker.csr" -CA "$tmp/ca.pem" \
                -CAkey "$tmp/ca.key" -CAcreateserial -extfile "$tmp/broker.ext" \
                -out "$tmp/broker.pem" &&
            openssl pkcs12 -export -name broker -in "$tmp/broker.pem" -inkey "$tmp/broker.key" \
                -certfile "$tmp/ca.pem" -out "$tmp/broker.p12" \
                -passout "file:$KEYSTORE_PASSWORD_FILE"
    } >"$tmp.log" 2>&1 || { cat "$tmp.log" >&2; rm -rf "$tmp" "$tmp.log"; die "openssl failed (see above)"; }
    rm -f "$tmp.log" "$tmp/broker.csr" "$tmp/broker.ext" "$tmp/ca.srl"
    rm -rf "$TLS"
    mv "$tmp" "$TLS"
}

render_config() {
    mkdir -p "$DATA" "$LOGS"
    if [[ "$SECURITY" == plaintext ]]; then
        sed -e "s|@PORT@|$PORT|g" -e "s|@CONTROLLER_PORT@|$CONTROLLER_PORT|g" \
            -e "s|@DATA_DIR@|$DATA|g" "$SPEC/$TEMPLATE" >"$CONFIG"
        return
    fi
    chmod 700 "$RUN"
    make_secret "$PASSWORD_FILE"
    make_secret "$BROKER_PASSWORD_FILE"
    make_secret "$KEYSTORE_PASSWORD_FILE"
    make_tls
    (umask 077 && sed -e "s|@PORT@|$PORT|g" -e "s|@SSL_PORT@|$SSL_PORT|g" \
        -e "s|@CONTROLLER_PORT@|$CONTROLLER_PORT|g" -e "s|@DATA_DIR@|$DATA|g" \
        -e "s|@TLS_DIR@|$TLS|g" -e "s|@BROKER_PASSWORD@|$(<"$BROKER_PASSWORD_FILE")|g" \
        -e "s|@KEYSTORE_PASSWORD@|$(<"$KEYSTORE_PASSWORD_FILE")|g" \
        "$SPEC/$TEMPLATE" >"$CONFIG")
}

# The --add-scram arguments that create the SCRAM users at format time (sasl only).
scram_args() {
    [[ "$SECURITY" == sasl ]] || return 0
    local mechanism
    for mechanism in SCRAM-SHA-256 SCRAM-SHA-512; do
        printf '%s\n' --add-scram "$mechanism=[name=$SASL_USER,password=$(<"$PASSWORD_FILE")]"
    done
    printf '%s\n' --add-scram "SCRAM-SHA-256=[name=broker,password=$(<"$BROKER_PASSWORD_FILE")]"
}

format_storage() {
    if [[ -f "$DATA/meta.properties" ]]; then
        return
    fi
    local cluster_id
    cluster_id="$(java -cp "$LIBS/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)"
    [[ -n "$cluster_id" ]] || die "kafka.tools.StorageTool random-uuid printed nothing"
    log "formatting $DATA (cluster id $cluster_id)"
    local extra=()
    mapfile -t extra < <(scram_args)
    java -cp "$LIBS/*" -Dlog4j2.configurationFile="$SPEC/log4j2.xml" -Dkafka.logs.dir="$LOGS" \
        kafka.tools.StorageTool format -t "$cluster_id" -c "$CONFIG" "${extra[@]}" \
        >"$LOGS/format.log" 2>&1 ||
        { cat "$LOGS/format.log" >&2; die "formatting the storage failed (see above)"; }
}

# Ready = the port answers and the broker serves metadata with itself in it.
# Wait until the broker in $PIDFILE serves metadata; fail if it exits or takes too long.
wait_ready() {
    local deadline=$((SECONDS + START_TIMEOUT_S))
    until [[ -s "$PIDFILE" ]] && broker_ready; do
        if [[ -s "$PIDFILE" ]] && ! kill -0 "$(<"$PIDFILE")" 2>/dev/null; then
            tail -n 20 "$LOGS/stdout.log" "$LOGS/server.log" 2>/dev/null >&2 || true
            rm -f "$PIDFILE"
            die "the broker exited during start-up (logs above; full log in $LOGS)"
        fi
        if ((SECONDS >= deadline)); then
            tail -n 20 "$LOGS/server.log" 2>/dev/null >&2 || true
            die "the broker did not serve metadata on $BOOTSTRAP within ${START_TIMEOUT_S}s (still running as pid $(<"$PIDFILE"); stop it with: $0 down)"
        fi
        sleep 0.5
    done
}

broker_ready() {
    port_open "$PORT" || return 1
    local py="$REPO/.venv/bin/python"
    if [[ -x "$py" ]] && "$py" -c 'import aiokafka' 2>/dev/null; then
        # The password travels in the environment, not on a command line `ps` shows.
        KAFKA_READY_SASL_USER="$([[ "$SECURITY" == sasl ]] && echo "$SASL_USER")" \
            KAFKA_READY_SASL_PASSWORD="$([[ "$SECURITY" == sasl ]] && cat "$PASSWORD_FILE")" \
            "$py" - "$BOOTSTRAP" <<'PY' >/dev/null 2>&1
import asyncio
import os
import sys

from aiokafka.admin import AIOKafkaAdminClient


async def main(bootstrap: str) -> int:
    sasl: dict[str, str] = {}
    if os.environ.get("KAFKA_READY_SASL_USER"):
        sasl = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": os.environ["KAFKA_READY_SASL_USER"],
            "sasl_plain_password": os.environ["KAFKA_READY_SASL_PASSWORD"],
        }
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000, **sasl)
    try:
        await admin.start()
        cluster = await admin.describe_cluster()
    finally:
        await admin.close()
    return 0 if cluster.get("brokers") else 1


sys.exit(asyncio.run(asyncio.wait_for(main(sys.argv[1]), timeout=5)))
PY
    fi
}

up() {
    require java "install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless)"
    # Kafka 4 brokers are built for Java 17; an older JVM dies with UnsupportedClassVersionError.
    local java_major
    java_major="$(java -XshowSettings:properties -version 2>&1 |
        sed -n 's/^ *java\.specification\.version = \([0-9]*\).*/\1/p')"
    [[ -z "$java_major" || "$java_major" -ge 17 ]] ||
        die "Kafka $KAFKA_VERSION needs Java 17 or newer; 'java' on PATH is Java $java_major"
    local pid
    if pid="$(our_pid)"; then
        # Perhaps still starting (another `up` a moment ago): ready means serving metadata.
        wait_ready
        log "already running (pid $pid) on $BOOTSTRAP; logs in $LOGS/server.log"
        return 0
    fi
    rm -f "$PIDFILE"
    for p in "$PORT" "$CONTROLLER_PORT" $SSL_PORT; do
        if port_open "$p"; then
            die "port 127.0.0.1:$p is taken by another process (not the broker this script started):
$(port_owner "$p")
stop it, or pick other ports (see the environment variables at the top of $0)"
        fi
    done

    fetch
    render_config
    format_storage

    local started=$SECONDS
    # setsid: the broker outlives the shell (and make) that started it and gets none of its
    # terminal's signals; bash -c writes its own pid and then becomes java (exec keeps the pid).
    # shellcheck disable=SC2016  # $$ and $@ are for the inner shell
    setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$PIDFILE" \
        java -Xms128m -Xmx"$HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
        -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$SPEC/log4j2.xml" -Dkafka.logs.dir="$LOGS" \
        -cp "$LIBS/*" kafka.Kafka "$CONFIG" \
        </dev/null >"$LOGS/stdout.log" 2>&1 &

    wait_ready
    log "Kafka $KAFKA_VERSION up on $BOOTSTRAP (pid $(<"$PIDFILE"), ready in $((SECONDS - started)) s)"
    [[ "$SECURITY" == plaintext ]] ||
        log "SASL_PLAINTEXT $BOOTSTRAP, SASL_SSL 127.0.0.1:$SSL_PORT (SCRAM user $SASL_USER, password in $PASSWORD_FILE, CA $TLS/ca.pem)"
    log "logs: $LOGS/server.log   data: $DATA"
}

down() {
    local pid
    if ! pid="$(our_pid)"; then
        rm -f "$PIDFILE"
        log "not running (nothing started by this script on $BOOTSTRAP)"
        return 0
    fi
    log "stopping pid $pid"
    kill -TERM "$pid"
    local deadline=$((SECONDS + STOP_TIMEOUT_S))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            log "still alive after ${STOP_TIMEOUT_S}s: KILL"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.5
    done
    rm -f "$PIDFILE"
    log "stopped"
}

status() {
    local pid
    if pid="$(our_pid)"; then
        echo "running (pid $pid) on $BOOTSTRAP, Kafka $KAFKA_VERSION, logs in $LOGS/server.log"
    else
        echo "stopped"
    fi
}

# KEY=VALUE lines for tests and scripts; paths only, never a secret's value.
info() {
    echo "security=$SECURITY"
    echo "bootstrap=$BOOTSTRAP"
    echo "run_dir=$RUN"
    if [[ "$SECURITY" == sasl ]]; then
        echo "ssl_bootstrap=127.0.0.1:$SSL_PORT"
        echo "username=$SASL_USER"
        echo "password_file=$PASSWORD_FILE"
        echo "ssl_cafile=$TLS/ca.pem"
    fi
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    info) info ;;
    *) echo "usage: $0 up|down|status|info" >&2; exit 2 ;;
esac
