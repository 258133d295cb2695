#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for trying the cluster path of `interp` for real.
#
#   scripts/slurm_localhost.sh          install (apt) if needed, start munged + slurmctld + slurmd,
#                                       wait for the node, run scripts/slurm_sweep_demo.py
#   scripts/slurm_localhost.sh start    the same without the demo
#   scripts/slurm_localhost.sh status   sinfo + squeue
#   scripts/slurm_localhost.sh stop     stop the three daemons this script started
#
# Idempotent: daemons already up are left alone. Runs as root, needs no systemd and no cgroups
# (proctrack/linuxproc, task/none, no accounting daemon). The config goes to
# /etc/slurm/slurm.conf, where sbatch/squeue/sinfo (and so submitit) find it without SLURM_CONF;
# a slurm.conf not written by this script is never overwritten.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
CONF=/etc/slurm/slurm.conf
MARK="# written by interp scripts/slurm_localhost.sh"
STATE=/var/spool/slurm-localhost
LOGS=/var/log/slurm-localhost
RUN=/run/slurm-localhost
MUNGE_PID=/run/munge/munged.pid

log() { echo "[slurm_localhost] $*"; }
alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
    local missing=()
    command -v munged >/dev/null || missing+=(munge)
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        || missing+=(slurm-wlm)
    ((${#missing[@]} == 0)) && return
    log "installing ${missing[*]}"
    if ! apt-cache policy "${missing[@]}" | grep -q 'Candidate: [0-9]'; then
        apt-get update -q
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
}

start_munge() {
    if alive "$MUNGE_PID" && munge -n </dev/null | unmunge >/dev/null 2>&1; then
        log "munged already running"; return
    fi
    mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating /etc/munge/munge.key"
        if command -v mungekey >/dev/null; then mungekey --create --keyfile=/etc/munge/munge.key --force
        else dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none; fi
    fi
    chmod 0700 /etc/munge /var/lib/munge /var/log/munge
    chmod 0755 /run/munge
    chmod 0400 /etc/munge/munge.key
    # --force: munged refuses to run as root (or with "insecure" dirs) without it.
    munged --force --pid-file="$MUNGE_PID" --log-file=/var/log/munge/munged.log
    for _ in $(seq 50); do munge -n </dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n </dev/null | unmunge >/dev/null || { log "munged did not start"; exit 1; }
    log "munged started"
}

write_conf() {
    if [[ -f "$CONF" ]] && ! grep -qF "$MARK" "$CONF"; then
        log "$CONF exists and was not written by this script: using it as is"; return
    fi
    local cpus mem
    cpus=$(nproc)
    # slurmd refuses a node that claims more memory than it sees: leave some for the daemons.
    mem=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) * 9 / 10 ))
    mkdir -p "$(dirname "$CONF")" "$STATE/ctld" "$STATE/d" "$LOGS" "$RUN"
    local new
    new=$(cat <<CONF
$MARK
ClusterName=localhost
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
# no cgroups, no systemd: track processes through /proc, bind nothing
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ReturnToService=2
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=300
KillWait=10
Waittime=0
MaxArraySize=10001
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
)
    if [[ -f "$CONF" ]] && [[ "$(cat "$CONF")" == "$new" ]]; then return; fi
    echo "$new" >"$CONF"
    log "wrote $CONF (CPUs=$cpus RealMemory=${mem}M)"
    # running daemons read the config at start only
    if alive "$RUN/slurmctld.pid"; then scontrol reconfigure || true; fi
}

start_slurm() {
    if alive "$RUN/slurmctld.pid"; then log "slurmctld already running"
    else slurmctld && log "slurmctld started"; fi
    for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.2; done
    # -N: the node is called localhost whatever this machine's hostname is
    if alive "$RUN/slurmd.pid"; then log "slurmd already running"
    else slurmd -N localhost && log "slurmd started"; fi
    local state=""
    for _ in $(seq 60); do
        state=$(sinfo --noheader --nodes=localhost --format=%T 2>/dev/null | head -1)
        case "$state" in
            idle|mixed|allocated) break ;;
            down*|drain*|fail*) scontrol update NodeName=localhost State=RESUME 2>/dev/null || true ;;
        esac
        sleep 1
    done
    case "$state" in
        idle|mixed|allocated) log "node localhost is $state" ;;
        *) log "node localhost did not become idle (state: '${state:-none}'); see $LOGS"; exit 1 ;;
    esac
}

stop_all() {
    local pidfile
    for pidfile in "$RUN/slurmd.pid" "$RUN/slurmctld.pid" "$MUNGE_PID"; do
        if alive "$pidfile"; then
            local pid; pid=$(cat "$pidfile")
            kill "$pid"
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            log "stopped $(basename "$pidfile" .pid) ($pid)"
        fi
    done
}

case "${1:-demo}" in
    start|demo)
        [[ $EUID -eq 0 ]] || { log "run as root"; exit 1; }
        install_packages
        start_munge
        write_conf
        start_slurm
        sinfo
        if [[ "${1:-demo}" == demo ]]; then
            log "running a job array through submitit"
            "$PYTHON" "$ROOT/scripts/slurm_sweep_demo.py"
            log "running a tiny interp sweep (4 runs) on the cluster: interp sweep --executor slurm"
            out="$(mktemp -d /tmp/interp-slurm-sweep-XXXXXX)"
            cat > "$out/grid.json" <<'GRID'
{"presets": ["mpsp-1l1h"], "task": {"vocab": 12, "n": 4, "n_train": 128, "n_val": 32, "n_adv": 32},
 "train": {"epochs": 30, "eval_every": 10, "checkpoint_log_points": 4}, "axes": {"r": [0.5, 0.9]}, "seeds": 2}
GRID
            "$ROOT/.venv/bin/interp" sweep --grid "$out/grid.json" --out "$out/sweep" --executor slurm \
                --partition debug --threads 1 --no-progress
            log "sweep report: $out/sweep/report.html"
        fi
        ;;
    status) sinfo; squeue ;;
    stop) stop_all ;;
    *) echo "usage: $0 [demo|start|status|stop]" >&2; exit 2 ;;
esac
