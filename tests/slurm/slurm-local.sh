#!/usr/bin/env bash
# A real SLURM cluster on this machine for dlbench's tests (Debian/Ubuntu, as root, no systemd): one node on
# localhost, or several "hosts", each slurmd in its own network and hostname namespace on a private bridge.
# Started and stopped by tests/test_slurm.py and tests/test_multinode.py; usable by hand to try
# `snakemake --profile slurm`.
#
#   slurm-local.sh start              install (if missing) + configure + start daemons; idempotent
#   slurm-local.sh stop               stop every daemon this script starts (by pidfile), remove the namespaces
#   slurm-local.sh status             show what is running
#   slurm-local.sh lose-node NAME     several nodes: SIGKILL every process on node NAME (its slurmd and the
#                                     job steps it started) - a node that dies mid-run
#   slurm-local.sh restore-node NAME  start node NAME's slurmd again (it returns to service when it registers)
#   slurm-local.sh cores NAME LIST    several nodes: node NAME's processes (its slurmd, so every job it starts from
#                                     then on) may use only the cores of LIST (taskset's list, e.g. 0 or 0-1)
#   slurm-local.sh slow-node NAME PERCENT   several nodes: node NAME's processes share PERCENT of one core's time
#                                     (a CPU quota of their own cgroup), so every job it starts runs slower for real
#   slurm-local.sh unslow-node NAME   the quota lifted
#
# Environment:
#   SLURM_ACCOUNTING=dbd   (default) slurmdbd + MariaDB -> real `sacct`
#   SLURM_ACCOUNTING=none  no database; `sacct` fails ("Slurm accounting storage is
#                          disabled"), so snakemake needs --slurm-status-command squeue
#   SLURM_PARTITION=debug  name of the single (default) partition
#   SLURM_NODES=1          (default) one node, `localhost`, in the machine's own network
#   SLURM_NODES=N (N>=2)   N nodes dlb-n1..dlb-nN: each slurmd runs in network namespace dlb-nI (hostname dlb-nI,
#                          address 10.78.0.(10+I) on interface eth0) joined to the bridge dlbbr0 (10.78.0.1, where
#                          slurmctld and slurmdbd answer). Every node reports this machine's cores and memory
#                          (memory divided among them), so N nodes oversubscribe its cores. Nothing is routed
#                          out of the bridge: the nodes reach the controller and each other only.
set -euo pipefail

MODE="${SLURM_ACCOUNTING:-dbd}"
PARTITION="${SLURM_PARTITION:-debug}"
CLUSTER="localcluster"
NODE="localhost"
NODES="${SLURM_NODES:-1}"
DBPASS="slurmdbpass"
LOGDIR=/var/log/slurm
BRIDGE=dlbbr0
SUBNET=10.78.0
CONTROLLER_ADDR=$SUBNET.1
SLURMD_TIMEOUT="${SLURM_SLURMD_TIMEOUT:-30}"

[[ "$NODES" =~ ^[1-9][0-9]?$ ]] || { echo "slurm-local.sh: SLURM_NODES must be 1..99, got '$NODES'" >&2; exit 2; }
node_names() { if ((NODES == 1)); then echo "$NODE"; else seq -f "dlb-n%g" 1 "$NODES"; fi; }
node_addr() { echo "$SUBNET.$((10 + ${1#dlb-n}))"; }   # dlb-nI -> 10.78.0.(10+I)
# The cores a namespaced node's slurmd (and so its jobs) may use. The nodes share this machine's cores: the first
# gets them all (one-node runs land there: lowest Weight), node I>1 its own slice, so that the ranks of a 2x1 run
# sit on different cores as a 1x2 run's do (each node's rank 0 takes the first core it may use).
node_cores() {
    local i=${1#dlb-n} ncpu per
    ncpu=$(nproc --all)
    ((i == 1)) && { echo "0-$((ncpu - 1))"; return; }
    per=$((ncpu / NODES > 0 ? ncpu / NODES : 1))
    echo "$(((i - 1) * per % ncpu))-$((((i - 1) * per % ncpu) + per - 1))"
}

log() { echo "[slurm-local] $*" >&2; }

# ---------------------------------------------------------------- helpers
proc_running() { # pid -> true if it exists and is not a zombie
    local st
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n "$st" && "$st" != Z && "$st" != X ]]
}

pid_alive() { # pidfile comm
    local f="$1" comm="$2" pid
    [[ -s "$f" ]] || return 1
    pid=$(cat "$f" 2>/dev/null) || return 1
    [[ -n "$pid" ]] && proc_running "$pid" || return 1
    # exactly: a stale slurmd pidfile whose pid now belongs to slurmdbd must not match ("slurmd"* would)
    [[ "$(cat /proc/$pid/comm 2>/dev/null)" == "$comm" ]]
}

wait_for() { # seconds description command...
    local secs="$1" what="$2"; shift 2
    local i
    for ((i = 0; i < secs * 5; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    log "timeout waiting for $what"; return 1
}

stop_pidfile() { # pidfile comm
    local f="$1" comm="$2" pid i
    if pid_alive "$f" "$comm"; then
        pid=$(cat "$f")
        log "stopping $comm (pid $pid)"
        kill "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do proc_running "$pid" || break; sleep 0.1; done
        if proc_running "$pid"; then log "$comm did not stop, sending KILL"; kill -9 "$pid" 2>/dev/null || true; fi
    fi
    rm -f "$f"
}

# ---------------------------------------------------------------- install
install_pkgs() {
    local pkgs=(munge slurmctld slurmd slurm-client)
    [[ "$MODE" == dbd ]] && pkgs+=(slurmdbd mariadb-server)
    local missing=() p
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        log "installing: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

# ---------------------------------------------------------------- configure
write_if_changed() { # dest mode owner  (content on stdin); returns 0 if changed
    local dest="$1" mode="$2" owner="$3" tmp
    tmp=$(mktemp)
    cat >"$tmp"
    if [[ -f "$dest" ]] && cmp -s "$tmp" "$dest"; then rm -f "$tmp"; return 1; fi
    install -m "$mode" -o "${owner%:*}" -g "${owner#*:}" "$tmp" "$dest"
    rm -f "$tmp"
    return 0
}

configure() {
    CONF_CHANGED=0 DBD_CONF_CHANGED=0  # slurm.conf (restart slurmctld, slurmd) / slurmdbd.conf (restart slurmdbd)
    mkdir -p /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd "$LOGDIR"
    chown slurm:slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd "$LOGDIR"
    local spool
    for spool in $(node_names); do mkdir -p "/var/lib/slurm/slurmd/$spool"; done

    # munge key (Debian's postinst normally creates it)
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating munge key"
        mungekey --create --keyfile=/etc/munge/munge.key --force
        chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
    fi

    # node hardware exactly as slurmd detects it; memory with a margin so the
    # node is never drained for "Low RealMemory"
    local hw cpus boards sockets cores threads mem
    hw=$(slurmd -C | head -1)
    cpus=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$hw")
    boards=$(sed -n 's/.* Boards=\([0-9]*\).*/\1/p' <<<"$hw")
    sockets=$(sed -n 's/.* SocketsPerBoard=\([0-9]*\).*/\1/p' <<<"$hw")
    cores=$(sed -n 's/.* CoresPerSocket=\([0-9]*\).*/\1/p' <<<"$hw")
    threads=$(sed -n 's/.* ThreadsPerCore=\([0-9]*\).*/\1/p' <<<"$hw")
    mem=$(sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
    mem=$((mem * 9 / 10 / NODES))

    local controller=localhost dbhost=localhost nodes_conf="" name
    if ((NODES == 1)); then
        nodes_conf="NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus Boards=$boards SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads RealMemory=$mem State=UNKNOWN"
    else
        # the nodes reach the controller and accounting at the bridge's address, not at their own loopback
        controller="localhost($CONTROLLER_ADDR)" dbhost=$CONTROLLER_ADDR
        for name in $(node_names); do
            nodes_conf+="NodeName=$name NodeAddr=$(node_addr "$name") NodeHostname=$name Weight=${name#dlb-n} CPUs=$cpus Boards=$boards SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads RealMemory=$mem State=UNKNOWN"$'\n'
        done
    fi

    local acct
    if [[ "$MODE" == dbd ]]; then
        acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$dbhost
AccountingStoragePort=6819
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/linux"
    else
        acct="AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGDIR/jobcomp.log
JobAcctGatherType=jobacct_gather/none"
    fi

    if write_if_changed /etc/slurm/slurm.conf 0644 root:root <<EOF
# generated by slurm-local.sh (mode: $MODE, nodes: $NODES)
ClusterName=$CLUSTER
SlurmctldHost=$controller
SlurmUser=slurm
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmdSpoolDir=/var/lib/slurm/slurmd/%n
# a node that stops answering is DOWN (NODE_FAIL for its jobs) after this many seconds (default 300)
SlurmdTimeout=$SLURMD_TIMEOUT
StateSaveLocation=/var/lib/slurm/slurmctld
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
$acct
SlurmctldDebug=info
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdDebug=info
SlurmdLogFile=$LOGDIR/slurmd-%n.log
$nodes_conf
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    then CONF_CHANGED=1; log "wrote /etc/slurm/slurm.conf"; fi

    if [[ "$MODE" == dbd ]]; then
        if write_if_changed /etc/slurm/slurmdbd.conf 0600 slurm:slurm <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=slurm
DebugLevel=info
LogFile=$LOGDIR/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DBPASS
StorageLoc=slurm_acct_db
EOF
        then DBD_CONF_CHANGED=1; log "wrote /etc/slurm/slurmdbd.conf"; fi
    fi
}

# ---------------------------------------------------------------- start
start_munge() {
    if ! pid_alive /run/munge/munged.pid munged; then
        log "starting munged"
        install -d -m 0755 -o munge -g munge /run/munge
        runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1
    fi
    wait_for 10 munged bash -c 'munge -n | unmunge'
}

start_mariadb() {
    if ! mysqladmin ping >/dev/null 2>&1; then
        log "starting mariadb"
        install -d -m 0755 -o mysql -g mysql /run/mysqld
        setsid /usr/bin/mysqld_safe </dev/null >/dev/null 2>&1 &
        wait_for 60 mariadb mysqladmin ping
    fi
    mysql -u root <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DBPASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
EOF
}

start_slurmdbd() {
    if ((DBD_CONF_CHANGED)); then stop_pidfile /run/slurmdbd.pid slurmdbd; fi
    if ! pid_alive /run/slurmdbd.pid slurmdbd; then
        log "starting slurmdbd"
        /usr/sbin/slurmdbd </dev/null >/dev/null 2>&1
    fi
    wait_for 30 slurmdbd sacctmgr -n show cluster
}

# ---------------------------------------------------------------- the nodes' network (SLURM_NODES >= 2)
network_up() { # bridge + one namespace per node, each with its own address, hostname file and hosts file
    local name addr hosts
    ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
    # (no `ip ... | grep -q` under pipefail: grep's early exit makes the pipeline fail)
    [[ "$(ip -4 -o addr show dev "$BRIDGE")" == *" $CONTROLLER_ADDR/"* ]] || ip addr add "$CONTROLLER_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    hosts="127.0.0.1 localhost"$'\n'"$CONTROLLER_ADDR dlb-controller"
    for name in $(node_names); do hosts+=$'\n'"$(node_addr "$name") $name"; done
    for name in $(node_names); do
        addr=$(node_addr "$name")
        # bind-mounted over /etc/hosts for the node's slurmd (start_slurmd): each node resolves every node's name
        mkdir -p "/etc/netns/$name"
        printf '%s\n' "$hosts" >"/etc/netns/$name/hosts"
        echo "$name" >"/etc/netns/$name/hostname"
        if [[ ! -e "/run/netns/$name" ]]; then
            ip netns add "$name"
            ip link add "v$name" type veth peer name eth0 netns "$name"
            ip link set "v$name" master "$BRIDGE" up
            ip netns exec "$name" ip addr add "$addr/24" dev eth0
            ip netns exec "$name" ip link set eth0 up
            ip netns exec "$name" ip link set lo up
            log "node $name: namespace $name, $addr on $BRIDGE"
        fi
    done
}

network_down() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '/^dlb-n[0-9]+/ {print $1}'); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns"
        rm -rf "/etc/netns/$ns"
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
}

start_slurmd() { # node name
    local name="$1"
    pid_alive "/run/slurmd-$name.pid" slurmd && return 0
    log "starting slurmd for node $name"
    if [[ ! -e "/run/netns/$name" ]]; then
        /usr/sbin/slurmd -N "$name" </dev/null >/dev/null 2>&1
    else
        # its own network, hostname and /etc/hosts: the jobs it starts see only their node's address and name.
        # nsenter, not `ip netns exec`, which would remount /sys and hide the cgroup file system slurmd needs.
        nsenter --net="/run/netns/$name" unshare --uts --mount --propagation private taskset -c "$(node_cores "$name")" sh -c \
            "mount --bind /etc/netns/$name/hosts /etc/hosts && hostname $name && exec /usr/sbin/slurmd -N $name" \
            </dev/null >/dev/null 2>&1
    fi
}

node_usable() { # node name: idle/mixed/allocated, not down/drained/not responding
    sinfo -h -n "$1" -o %T | grep -Eq '^(idle|mixed|allocated)$'
}

stop_all_slurmd() {
    local f
    for f in /run/slurmd*.pid; do [[ -e "$f" ]] && stop_pidfile "$f" slurmd; done
    return 0
}

start_slurm() {
    local name clear=()
    if ((CONF_CHANGED)); then
        stop_all_slurmd
        stop_pidfile /run/slurmctld.pid slurmctld
        clear=(-c)  # a changed node set: start without the old jobs and node states
    fi
    if ! pid_alive /run/slurmctld.pid slurmctld; then
        log "starting slurmctld"
        /usr/sbin/slurmctld "${clear[@]}" </dev/null >/dev/null 2>&1
    fi
    wait_for 30 slurmctld scontrol ping
    for name in $(node_names); do start_slurmd "$name"; done
    for name in $(node_names); do wait_for 30 "node $name" node_usable "$name"; done
    if [[ "$MODE" == dbd ]]; then
        wait_for 30 "cluster registration" bash -c "sacctmgr -n -P show cluster format=cluster | grep -qx $CLUSTER"
    fi
}

cmd_start() {
    install_pkgs
    configure
    # the bridge first: with several nodes, slurmdbd and slurmctld are reached at its address
    if ((NODES == 1)); then network_down; else network_up; fi
    start_munge
    if [[ "$MODE" == dbd ]]; then start_mariadb; start_slurmdbd; fi
    start_slurm
    log "ready: $(sinfo -h -o '%P %a %D %T %N' | tr '\n' ' ')"
}

cmd_stop() {
    command -v slurmd >/dev/null 2>&1 || { log "slurm not installed; nothing to stop"; return 0; }
    stop_all_slurmd
    stop_pidfile /run/slurmctld.pid slurmctld
    stop_pidfile /run/slurmdbd.pid slurmdbd
    if [[ -s /run/mysqld/mysqld.pid ]] && command -v mysqladmin >/dev/null 2>&1 && mysqladmin ping >/dev/null 2>&1; then
        log "stopping mariadb"
        mysqladmin shutdown || true
        wait_for 30 "mariadb exit" bash -c '! pgrep -x mysqld_safe && ! pgrep -x mariadbd'
    fi
    stop_pidfile /run/munge/munged.pid munged
    network_down
    log "stopped"
}

cmd_status() {
    local f
    for f in /run/munge/munged.pid:munged /run/slurmdbd.pid:slurmdbd /run/slurmctld.pid:slurmctld /run/slurmd*.pid:slurmd; do
        for pidfile in ${f%%:*}; do
            if pid_alive "$pidfile" "${f##*:}"; then echo "${f##*:} ($pidfile): running (pid $(cat "$pidfile"))"
            else echo "${f##*:} ($pidfile): stopped"; fi
        done
    done
    if command -v mysqladmin >/dev/null 2>&1 && mysqladmin ping >/dev/null 2>&1; then echo "mariadb: running"; else echo "mariadb: stopped"; fi
    ip netns list 2>/dev/null | grep '^dlb-n' || true
    command -v sinfo >/dev/null 2>&1 && sinfo 2>&1 || true
}

node_arg() { # the NAME of lose-node/restore-node: one of this cluster's namespaced nodes
    [[ -n "${1:-}" && -e "/run/netns/$1" ]] || { echo "slurm-local.sh: no namespaced node '${1:-}' (nodes: $(ip netns list | awk '/^dlb-n/ {print $1}' | tr '\n' ' '))" >&2; exit 2; }
}

cmd_lose_node() { # every process of the node, slurmd and job steps alike, killed at once
    node_arg "$1"
    local pids
    pids=$(ip netns pids "$1")
    log "losing node $1: SIGKILL to $(wc -w <<<"$pids") process(es)"
    [[ -n "$pids" ]] && kill -9 $pids 2>/dev/null || true
    rm -f "/run/slurmd-$1.pid"  # its pid may be reused by another daemon
}

cmd_restore_node() {
    node_arg "$1"
    NODES=$(ip netns list | grep -c '^dlb-n')  # the running cluster's size (node_cores), whatever SLURM_NODES says
    start_slurmd "$1"
    wait_for 60 "node $1" node_usable "$1"
    log "node $1 is back: $(sinfo -h -n "$1" -o %T)"
}

cmd_cores() { # every process of the node, and what each starts from now on, on the given cores
    node_arg "$1"
    local pid
    for pid in $(ip netns pids "$1"); do taskset -a -p -c "${2:?slurm-local.sh cores NAME LIST}" "$pid" >/dev/null; done
    log "node $1 runs on cores $2"
}

slow_cgroup() { # node name -> its cgroup directory (v2: cpu.max; v1: the cpu controller's cfs quota)
    if [[ -e /sys/fs/cgroup/cgroup.controllers ]]; then echo "/sys/fs/cgroup/dlb-slow-$1"; else echo "/sys/fs/cgroup/cpu/dlb-slow-$1"; fi
}

cmd_slow_node() {
    node_arg "$1"
    local percent=${2:?slurm-local.sh slow-node NAME PERCENT} cg pid
    [[ "$percent" =~ ^[1-9][0-9]*$ ]] || { echo "slurm-local.sh: PERCENT must be a whole number, got '$percent'" >&2; exit 2; }
    cg=$(slow_cgroup "$1")
    mkdir -p "$cg"
    # A 10 ms period: a run's measured window of a few tens of milliseconds spans several, so it is slowed
    # throughout (a 100 ms period lets a window that short run inside one period's allowance at full speed).
    if [[ -e /sys/fs/cgroup/cgroup.controllers ]]; then
        echo "$((percent * 100)) 10000" > "$cg/cpu.max"
    else
        echo 10000 > "$cg/cpu.cfs_period_us"
        echo "$((percent * 100))" > "$cg/cpu.cfs_quota_us"
    fi
    for pid in $(ip netns pids "$1"); do echo "$pid" > "$cg/cgroup.procs" 2>/dev/null || true; done
    log "node $1 slowed: its processes share ${percent}% of one core"
}

cmd_unslow_node() {
    node_arg "$1"
    local cg pid root
    cg=$(slow_cgroup "$1")
    [[ -d "$cg" ]] || return 0
    root=$(dirname "$cg")
    for pid in $(cat "$cg/cgroup.procs"); do echo "$pid" > "$root/cgroup.procs" 2>/dev/null || true; done
    rmdir "$cg" 2>/dev/null || true
    log "node $1: quota lifted"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    lose-node) cmd_lose_node "${2:-}" ;;
    restore-node) cmd_restore_node "${2:-}" ;;
    cores) cmd_cores "${2:-}" "${3:-}" ;;
    slow-node) cmd_slow_node "${2:-}" "${3:-}" ;;
    unslow-node) cmd_unslow_node "${2:-}" ;;
    *) echo "usage: $0 start|stop|status|lose-node NAME|restore-node NAME|cores NAME LIST|slow-node NAME PERCENT|unslow-node NAME" >&2; exit 2 ;;
esac
