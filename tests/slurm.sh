#!/usr/bin/env bash
# A real Slurm 22.05 cluster on this one host: munged, slurmctld and 4 slurmd (node1..node4), private to DIR.
# SENTINEL_SLURM_NODES=N starts N slurmd instead (node1..nodeN; `sentinel-bench chaos` uses 12).
#
#   tests/slurm.sh start DIR          # fresh cluster; prints nothing, writes DIR/slurm.env
#   tests/slurm.sh stop DIR           # stops exactly the processes it started (PID files in DIR), removes DIR
#   tests/slurm.sh stop-ctld DIR      # stop slurmctld alone (SIGTERM: it saves its state) ...
#   tests/slurm.sh start-ctld DIR     # ... and start it again from that state (the outage tests use these)
#   tests/slurm.sh running DIR        # exit 0 when the recorded slurmctld is up
#
# Nothing system-wide is used or touched: its own munge key and socket, its own slurm.conf (clients find it
# through SLURM_CONF, exported in DIR/slurm.env), free TCP ports, state and logs under DIR. Every daemon runs in
# the foreground under setsid, so the PID we record is the daemon itself. tests/services.sh calls this for its
# `slurm` service. Debian packages: munge slurmctld slurmd slurm-client (installed on demand as root).
set -euo pipefail

NODE_COUNT="${SENTINEL_SLURM_NODES:-4}"
[[ "$NODE_COUNT" =~ ^[1-9][0-9]?$ ]] || { printf 'slurm: SENTINEL_SLURM_NODES must be 1..99\n' >&2; exit 1; }
NODES=()
for ((n = 1; n <= NODE_COUNT; n++)); do NODES+=("node$n"); done
READY_TIMEOUT_S="${SENTINEL_SERVICES_READY_TIMEOUT:-30}"

log() { printf 'slurm: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

pid_alive() {
    local pid="$1" st
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
    st="$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)"
    [[ -n "$st" && "$st" != Z ]]
}

# PID recorded in FILE, alive, with NEEDLE in its command line (guards against PID reuse).
recorded_pid() {
    local file="$1" needle="$2" pid
    [[ -f "$file" ]] || return 1
    pid="$(head -n1 "$file" | tr -d '[:space:]')"
    pid_alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$needle" || return 1
    printf '%s\n' "$pid"
}

stop_recorded() {
    local file="$1" needle="$2" name="$3" pid i
    if pid="$(recorded_pid "$file" "$needle")"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 200; i++)); do pid_alive "$pid" || break; sleep 0.05; done
        if pid_alive "$pid"; then
            log "$name (pid $pid) ignored SIGTERM for 10 s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f -- "$file"
}

install_packages() {
    local missing=() tool pkg
    for entry in "munged munge" "slurmctld slurmctld" "slurmd slurmd" "sbatch slurm-client"; do
        read -r tool pkg <<<"$entry"
        command -v "$tool" >/dev/null 2>&1 || [[ -x "/usr/sbin/$tool" ]] || missing+=("$pkg")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    [[ "$(id -u)" -eq 0 ]] || die "need root to install ${missing[*]}"
    log "installing ${missing[*]}"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >&2
}

write_conf() {
    local dir="$1" ctld_port="$2" node_ports="$3"
    local gpus=()
    for i in 0 1 2 3 4 5 6 7; do
        mknod "$dir/dev/gpu$i" c 1 3  # /dev/null's numbers: a real device node, as GRES File= needs
        gpus+=("$dir/dev/gpu$i")
    done
    cat >"$dir/slurm.conf" <<EOF
# Written by tests/slurm.sh: a ${#NODES[@]}-node test cluster on one host.
ClusterName=sentinel-test
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/ctld-state
SlurmctldPidFile=$dir/slurmctld.daemon.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdSpoolDir=$dir/spool/%n
SlurmdPidFile=$dir/slurmd-%n.daemon.pid
SlurmdLogFile=$dir/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
SlurmdTimeout=10
KillWait=2
MinJobAge=300
MessageTimeout=5
GresTypes=gpu
$(for ((i = 1; i <= ${#NODES[@]}; i++)); do
    printf 'NodeName=node%s NodeHostname=localhost NodeAddr=127.0.0.1 Port=%s CPUs=4 RealMemory=1000 Gres=gpu:8 State=UNKNOWN\n' \
        "$i" "$(cut -d' ' -f"$i" <<<"$node_ports")"
done)
PartitionName=batch Nodes=node[1-${#NODES[@]}] Default=YES MaxTime=INFINITE State=UP
EOF
    local IFS=,
    printf 'NodeName=node[1-%s] Name=gpu File=%s\n' "${#NODES[@]}" "${gpus[*]}" >"$dir/gres.conf"
}

start_munge() {
    local dir="$1"
    mkdir -p "$dir/munge"
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chown -R munge:munge "$dir/munge"
    chmod 0700 "$dir/munge"
    chmod 0400 "$dir/munge/munge.key"
    setsid runuser -u munge -- /usr/sbin/munged --foreground --force --socket="$dir/munge/munge.socket" \
        --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
        --seed-file="$dir/munge/munged.seed" </dev/null >>"$dir/munged.out" 2>&1 9>&- &
    local i
    for ((i = 0; i < READY_TIMEOUT_S * 20; i++)); do
        [[ -S "$dir/munge/munge.socket" && -s "$dir/munge/munged.pid" ]] && break
        sleep 0.05
    done
    # runuser forks: record munged itself, from its own PID file.
    cp "$dir/munge/munged.pid" "$dir/munged.pid" 2>/dev/null || die "munged did not start: $(tail -n 5 "$dir/munged.out")"
    recorded_pid "$dir/munged.pid" munged >/dev/null || die "munged is not running: $(tail -n 5 "$dir/munged.out")"
}

start_ctld() {
    local dir="$1"
    (export SLURM_CONF="$dir/slurm.conf"; exec setsid /usr/sbin/slurmctld -D -f "$dir/slurm.conf") \
        </dev/null >>"$dir/slurmctld.out" 2>&1 9>&- &
    printf '%s\n' "$!" >"$dir/slurmctld.pid"
    local i
    for ((i = 0; i < READY_TIMEOUT_S * 20; i++)); do
        SLURM_CONF="$dir/slurm.conf" scontrol ping 2>/dev/null | grep -q UP && return 0
        recorded_pid "$dir/slurmctld.pid" slurmctld >/dev/null || break
        sleep 0.05
    done
    tail -n 20 "$dir/slurmctld.log" "$dir/slurmctld.out" >&2 || true
    die "slurmctld did not answer"
}

start_nodes() {
    local dir="$1" node
    for node in "${NODES[@]}"; do
        mkdir -p "$dir/spool/$node"
        (export SLURM_CONF="$dir/slurm.conf"; exec setsid /usr/sbin/slurmd -D -N "$node" -f "$dir/slurm.conf") \
            </dev/null >>"$dir/slurmd-$node.out" 2>&1 9>&- &
        printf '%s\n' "$!" >"$dir/slurmd-$node.pid"
    done
    local i idle
    for ((i = 0; i < READY_TIMEOUT_S * 10; i++)); do
        idle="$(SLURM_CONF="$dir/slurm.conf" sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle$' || true)"
        [[ "$idle" -eq ${#NODES[@]} ]] && return 0
        sleep 0.1
    done
    SLURM_CONF="$dir/slurm.conf" sinfo -N >&2 || true
    die "nodes not idle after ${READY_TIMEOUT_S}s"
}

cmd_start() {
    local dir="$1"
    install_packages
    [[ -d "$dir" ]] && cmd_stop "$dir"  # leftovers of an interrupted run: ours only (PID files in DIR)
    mkdir -p "$dir"/{dev,spool,ctld-state}
    dir="$(cd "$dir" && pwd -P)"
    chmod 0755 "$dir"
    # Distinct free ports: slurmctld's and one per slurmd.
    local ports
    ports="$(python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]) + 1)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
' "${#NODES[@]}")"
    write_conf "$dir" "${ports%% *}" "${ports#* }"
    start_munge "$dir"
    start_ctld "$dir"
    start_nodes "$dir"
    printf 'export SLURM_CONF=%s\nexport SENTINEL_TEST_SLURM=%s\n' "$dir/slurm.conf" "$dir" >"$dir/slurm.env"
    log "started munged, slurmctld (127.0.0.1:${ports%% *}) and slurmd ${NODES[*]} (ports ${ports#* }) in $dir"
}

cmd_stop() {
    local dir="$1" node
    [[ -d "$dir" ]] || return 0
    if recorded_pid "$dir/slurmctld.pid" slurmctld >/dev/null; then
        # Cancel what the tests left behind so no job step outlives the cluster.
        SLURM_CONF="$dir/slurm.conf" timeout 10 scancel --full --quiet --partition=batch 2>/dev/null || true
    fi
    local pidfile
    for pidfile in "$dir"/slurmd-*.pid; do  # every slurmd started here, however many
        [[ -e "$pidfile" && "$pidfile" != *.daemon.pid ]] || continue
        node="${pidfile##*/slurmd-}"; node="${node%.pid}"
        stop_recorded "$pidfile" slurmd "slurmd $node"
    done
    stop_recorded "$dir/slurmctld.pid" slurmctld slurmctld
    stop_recorded "$dir/munged.pid" munged munged
    rm -rf -- "$dir"
    log "stopped what it had started in $dir"
}

main() {
    [[ $# -eq 2 ]] || die "usage: $0 {start|stop|stop-ctld|start-ctld|running} DIR"
    case "$1" in
        start) cmd_start "$2" ;;
        stop) cmd_stop "$2" ;;
        stop-ctld) stop_recorded "$2/slurmctld.pid" slurmctld slurmctld ;;
        start-ctld) start_ctld "$(cd "$2" && pwd -P)" ;;
        running) recorded_pid "$2/slurmctld.pid" slurmctld >/dev/null ;;
        *) die "unknown command $1" ;;
    esac
}

main "$@"
