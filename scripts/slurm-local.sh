#!/usr/bin/env bash
# A real Slurm cluster on this host, for tests (tests/cluster/): Debian's slurm-wlm 22.05 and munge, as root.
#
#   scripts/slurm-local.sh up     # prints `export SLURM_CONF=...`: every Slurm command needs it
#   scripts/slurm-local.sh down   # cancels the cluster's jobs, stops the daemons `up` started (pid files only)
#   scripts/slurm-local.sh status
#
# Everything lives in $SLURM_LOCAL_DIR (default /tmp/autotune-slurm-local): config, munge key and socket, state,
# spool, logs, pid files. Daemons: one munged (its own socket and key, not the system's), one slurmctld, two slurmd
# (nodes n0 and n1 on this host: Slurm's multiple-slurmd mode, each node "8 GPUs" that Slurm only counts), and a
# slurmdbd for sacct when MariaDB answers at 127.0.0.1:3306 as root without a password (its database
# autotune_slurm_acct_*, dropped by `down`); without it (or with SLURM_LOCAL_ACCOUNTING=0) there is no sacct, and
# the jobs' ends are in log/jobcomp.txt (always written).
# No cgroups: proctrack/linuxproc (a step's processes are those descended from it), task/none.
# Ports are chosen free at `up`. Needs: apt-get install slurm-wlm munge slurmdbd (slurmdbd only for sacct).
set -euo pipefail

DIR=${SLURM_LOCAL_DIR:-/tmp/autotune-slurm-local}
NODES=(n0 n1)
CLUSTER=autotune

log() { echo "slurm-local: $*" >&2; }
die() { log "$*"; exit 1; }

pid_alive() { [[ -s "$1" ]] && kill -0 "$(<"$1")" 2>/dev/null; }

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

mysql_ok() { command -v mysql >/dev/null && mysql -h 127.0.0.1 -P 3306 -u root --connect-timeout=3 -e 'select 1' >/dev/null 2>&1; }

daemons() {  # the pid files of what `up` starts, in start order
    echo "$DIR/run/munged.pid"
    [[ -f "$DIR/dbname" ]] && echo "$DIR/run/slurmdbd.pid"
    echo "$DIR/run/slurmctld.pid"
    for node in "${NODES[@]}"; do echo "$DIR/run/slurmd-$node.pid"; done
}

responds() { SLURM_CONF=$DIR/slurm.conf timeout 10 scontrol ping 2>/dev/null | grep -q UP; }

is_up() {
    [[ -f "$DIR/slurm.conf" ]] || return 1
    local pidfile
    for pidfile in $(daemons); do pid_alive "$pidfile" || return 1; done
    responds && nodes_usable
}

wait_for() {  # wait_for SECONDS WHAT COMMAND...
    local seconds=$1 what=$2
    shift 2
    local deadline=$((SECONDS + seconds))
    while ((SECONDS < deadline)); do
        if "$@"; then return 0; fi
        sleep 0.2
    done
    die "$what did not happen within ${seconds}s; logs: $DIR/log"
}

node_states() { SLURM_CONF=$DIR/slurm.conf timeout 10 sinfo -h -N -o %T 2>/dev/null | sort -u; }
nodes_idle() { [[ "$(node_states)" == "idle" ]]; }
nodes_usable() { [[ -n "$(node_states)" && -z "$(node_states | grep -vE '^(idle|mixed|allocated)$')" ]]; }

write_config() {
    local ctld_port dbd_port node_ports=() node
    ctld_port=$(free_port)
    for node in "${NODES[@]}"; do node_ports+=("$(free_port)"); done
    local host
    host=$(hostname -s)
    # the host's topology as slurmd sees it (each node claims the host's CPUs; memory: a little, so it fits)
    local topology
    topology=$(slurmd -C | head -1 | grep -oE '(Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore|CPUs)=[0-9]+' | tr '\n' ' ')
    local accounting="AccountingStorageType=accounting_storage/none"
    if [[ ${SLURM_LOCAL_ACCOUNTING:-1} != 0 ]] && mysql_ok && command -v slurmdbd >/dev/null; then
        dbd_port=$(free_port)
        echo "autotune_slurm_acct_$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')" > "$DIR/dbname"
        accounting="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbd_port
AccountingStoragePass=$DIR/munge/munge.socket
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30"
        cat > "$DIR/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbd_port
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=root
StorageLoc=$(<"$DIR/dbname")
EOF
        chmod 600 "$DIR/slurmdbd.conf"
    else
        log "no MariaDB at 127.0.0.1:3306 (or no slurmdbd): no accounting, no sacct; jobs' ends in $DIR/log/jobcomp.txt"
    fi
    {
        cat <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=10
GresTypes=gpu
$accounting
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
EOF
        local i
        for i in "${!NODES[@]}"; do
            echo "NodeName=${NODES[$i]} NodeHostname=$host NodeAddr=127.0.0.1 Port=${node_ports[$i]} ${topology}RealMemory=1024 Gres=gpu:8 State=UNKNOWN"
        done
        echo "PartitionName=debug Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP"
    } > "$DIR/slurm.conf"
    # 8 GPUs a node for --gres=gpu:8, which Slurm only counts and hands out: their "device files" link to /dev/null
    # (gres/gpu wants a character device for each; without File it counts none). autotune finds its GPUs with
    # nvidia-smi, faked by the tests.
    mkdir -p "$DIR/dev"
    for node in "${NODES[@]}"; do
        for gpu in {0..7}; do ln -s /dev/null "$DIR/dev/$node-gpu$gpu"; done
        echo "NodeName=$node Name=gpu File=$DIR/dev/$node-gpu[0-7]"
    done > "$DIR/gres.conf"
}

up() {
    if is_up; then
        log "already up ($DIR)"
        echo "export SLURM_CONF=$DIR/slurm.conf"
        return 0
    fi
    [[ $EUID -eq 0 ]] || die "run as root (SlurmUser=root)"
    local tool
    for tool in munged slurmctld slurmd sinfo scontrol sbatch; do
        command -v "$tool" >/dev/null || die "no $tool: apt-get install -y slurm-wlm munge"
    done
    [[ -d "$DIR" ]] && down_quietly
    rm -rf "$DIR"
    mkdir -p -m 700 "$DIR"
    mkdir -p -m 700 "$DIR/munge" "$DIR/run" "$DIR/log" "$DIR/state"
    for node in "${NODES[@]}"; do mkdir -p "$DIR/spool/$node"; done
    write_config
    export SLURM_CONF=$DIR/slurm.conf

    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$DIR/munge/munge.key"
    munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" \
        || die "munged did not start; see $DIR/log/munged.log"
    wait_for 10 "munge credentials" sh -c "munge -S '$DIR/munge/munge.socket' -n | unmunge -S '$DIR/munge/munge.socket' >/dev/null 2>&1"

    if [[ -f "$DIR/dbname" ]]; then
        slurmdbd || die "slurmdbd did not start; see $DIR/log/slurmdbd.log"
        wait_for 30 "slurmdbd answering" sh -c "timeout 10 sacctmgr -n list cluster >/dev/null 2>&1"
        sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr could not add cluster $CLUSTER"
    fi
    slurmctld -c || die "slurmctld did not start; see $DIR/log/slurmctld.log"
    wait_for 30 "slurmctld answering" responds
    for node in "${NODES[@]}"; do
        slurmd -N "$node" || die "slurmd $node did not start; see $DIR/log/slurmd-$node.log"
    done
    wait_for 60 "nodes ${NODES[*]} idle" nodes_idle
    log "up: $(sinfo -h -o '%D nodes %P %T %G') ($DIR)"
    echo "export SLURM_CONF=$DIR/slurm.conf"
}

stop_pidfile() {  # SIGTERM, then SIGKILL after 15 s, the process of one pid file
    local pidfile=$1 pid
    pid_alive "$pidfile" || { rm -f "$pidfile"; return 0; }
    pid=$(<"$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 75; i++)); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
        sleep 0.2
    done
    log "$(basename "$pidfile" .pid) ($pid) ignored SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$pidfile"
}

down_quietly() {
    export SLURM_CONF=$DIR/slurm.conf
    if [[ -f "$SLURM_CONF" ]] && pid_alive "$DIR/run/slurmctld.pid"; then
        # the jobs first: their slurmstepd processes would outlive slurmd
        local jobs
        jobs=$(timeout 10 squeue -h -o %A 2>/dev/null || true)
        if [[ -n "$jobs" ]]; then
            log "cancelling jobs: $(echo $jobs)"
            scancel $jobs 2>/dev/null || true
            for ((i = 0; i < 150; i++)); do
                [[ -z "$(timeout 10 squeue -h -o %A 2>/dev/null || true)" ]] && break
                sleep 0.2
            done
        fi
    fi
    local pidfiles
    mapfile -t pidfiles < <(daemons | tac)  # the reverse of their start
    for pidfile in "${pidfiles[@]}"; do stop_pidfile "$pidfile"; done
    if [[ -f "$DIR/dbname" ]] && mysql_ok; then
        mysql -h 127.0.0.1 -P 3306 -u root -e "drop database if exists \`$(<"$DIR/dbname")\`" || true
    fi
    rm -f "$DIR/dbname"
}

down() {
    [[ -d "$DIR" ]] || { log "not up ($DIR absent)"; return 0; }
    down_quietly
    log "down (its logs stay in $DIR/log)"
}

status() {
    if is_up; then
        SLURM_CONF=$DIR/slurm.conf sinfo
        echo "export SLURM_CONF=$DIR/slurm.conf"
    else
        log "not up ($DIR)"
        return 1
    fi
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status   (state in \$SLURM_LOCAL_DIR, default /tmp/autotune-slurm-local)" >&2; exit 2 ;;
esac
