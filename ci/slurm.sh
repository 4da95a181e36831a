#!/usr/bin/env bash
# A one-node Slurm cluster on this host, for pacer/tests/slurm.rs (and for
# trying `pacer bench --slurm` by hand).
#
#   bash ci/slurm.sh start DIR   install slurm-wlm and munge if missing, write
#                                DIR/slurm.conf for this host, start munged,
#                                slurmctld and slurmd (their state, sockets,
#                                logs and pid files all in DIR); exit 0 once
#                                the node is idle. Where that cannot be done:
#                                a "SKIPPED: ..." line and exit 3.
#   bash ci/slurm.sh stop DIR    stop the daemons DIR's pid files name.
#
# Then `export SLURM_CONF=DIR/slurm.conf` for sbatch, squeue and scontrol.
# Nothing outside DIR is written (no /etc/slurm, no system munged): the
# daemons use their own munge socket and key, and ports derived from DIR,
# so two clusters of two test runs do not meet.
set -uo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
    echo "usage: bash ci/slurm.sh start|stop DIR" >&2
    exit 2
fi

skip() {
    echo "SKIPPED: $*"
    exit 3
}

stop() {
    local f pid
    for f in slurmd slurmctld munged; do
        [ -f "$dir/$f.pid" ] || continue
        pid=$(cat "$dir/$f.pid" 2>/dev/null)
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null
            for _ in $(seq 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
        fi
        rm -f "$dir/$f.pid"
    done
}

if [ "$cmd" = stop ]; then
    stop
    exit 0
fi
[ "$cmd" = start ] || {
    echo "ci/slurm.sh: unknown command $cmd (start or stop)" >&2
    exit 2
}

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
    ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    [ "$(id -u)" = 0 ] || skip "slurm-wlm and munge are not installed and this is not root"
    echo "ci/slurm.sh: installing slurm-wlm and munge"
    export DEBIAN_FRONTEND=noninteractive
    if ! { timeout 600 apt-get install -y -qq slurm-wlm munge >/dev/null 2>&1 ||
        { timeout 300 apt-get update -qq && timeout 600 apt-get install -y -qq slurm-wlm munge >/dev/null; }; }; then
        skip "slurm-wlm and munge could not be installed with apt-get"
    fi
fi
[ "$(id -u)" = 0 ] || skip "the one-node cluster runs its daemons as root (SlurmUser=root)"

mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
dir=$(cd "$dir" && pwd)
host=$(hostname -s)
cpus=$(nproc)
mem_mib=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512))
# Ports from the directory's name, away from the defaults (6817/6818).
base=$((20000 + $(printf '%s' "$dir" | cksum | cut -d' ' -f1) % 20000 * 2))

# munged with a key and a socket of its own.
key="$dir/munge/munge.key"
[ -f "$key" ] || head -c 1024 /dev/urandom >"$key"
chmod 0700 "$dir/munge"
chmod 0600 "$key"
sock="$dir/munge/munge.socket"
munged --force --key-file="$key" --socket="$sock" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" ||
    skip "munged did not start (see $dir/munge/munged.log)"

cat >"$dir/slurm.conf" <<EOF
# Written by ci/slurm.sh: a one-node cluster for Pacer's tests.
ClusterName=pacer-test
SlurmctldHost=$host
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
KillWait=10
NodeName=$host CPUs=$cpus RealMemory=$mem_mib State=UNKNOWN
PartitionName=pacer Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"

# -D keeps them in the foreground of their own background job, so their
# process ids are the ones in the pid files this script stops.
slurmctld -D -i -f "$SLURM_CONF" >"$dir/slurmctld.out" 2>&1 &
echo $! >"$dir/slurmctld.pid"
slurmd -D -f "$SLURM_CONF" >"$dir/slurmd.out" 2>&1 &
echo $! >"$dir/slurmd.pid"

for _ in $(seq 100); do
    state=$(sinfo -h -n "$host" -o '%T' 2>/dev/null | head -1)
    case "$state" in
    idle*)
        echo "ci/slurm.sh: one-node cluster up ($host, $cpus CPUs, ports $base-$((base + 1)), SLURM_CONF=$SLURM_CONF)"
        exit 0
        ;;
    esac
    if ! kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null ||
        ! kill -0 "$(cat "$dir/slurmd.pid")" 2>/dev/null; then
        break
    fi
    sleep 0.2
done
tail -n 5 "$dir/slurmctld.log" "$dir/slurmd.log" "$dir/slurmctld.out" "$dir/slurmd.out" 2>/dev/null
stop
skip "the Slurm daemons did not bring node $host up (logs in $dir)"
