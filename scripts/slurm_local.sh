#!/usr/bin/env bash
# A real single-node Slurm on this machine, for tests: munged, slurmctld and
# slurmd started directly (no systemd), every file in one temporary folder.
#   scripts/slurm_local.sh install        Debian's slurmctld slurmd slurm-client munge
#   eval "$(scripts/slurm_local.sh up)"   start; prints "export SLURM_CONF=... SLURM_LOCAL_DIR=..."
#   scripts/slurm_local.sh down [DIR]     cancel every job, stop the daemons and every process
#                                         left by a job, remove DIR (SLURM_LOCAL_KEEP=1 keeps it)
# Needs root (SlurmUser=root). One cluster at a time: `up` refuses when the ports are taken.
# Settings that matter (measured; docs/sweeps.md): cred_expire=5 (a requeued
# task may start 5 s after it ended, not 120), proctrack/linuxproc (no cgroup
# set-up needed; a SIGKILLed batch shell leaves its children running, which
# attn_scale's lock makes harmless), RequeueExit=85, SlurmdTimeout=60 (a busy
# 2-core machine must not mark its node down), no accounting (no sacct).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { echo "slurm_local: $*" >&2; }
die() { say "$*"; exit 1; }

install() {
    . "$top/scripts/setup.sh"
    # without systemd, a package's postinst would start a system munged: a
    # policy-rc.d that says "no" keeps it from doing so during the install
    local policy=/usr/sbin/policy-rc.d added=""
    if [ ! -e $policy ] && [ "$(id -u)" -eq 0 ]; then printf '#!/bin/sh\nexit 101\n' >$policy; chmod 755 $policy; added=1; fi
    tg_need "${TG_SLURM_PACKAGES[@]}" || { [ -z "$added" ] || rm -f $policy; exit 1; }
    [ -z "$added" ] || rm -f $policy
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

up() {
    [ "$(id -u)" -eq 0 ] || die "up needs root (SlurmUser=root)"
    local b
    for b in munged mungekey slurmctld slurmd sinfo sbatch; do command -v $b >/dev/null || die "$b is missing: scripts/slurm_local.sh install"; done
    # short: the munge socket and slurmd's step sockets must fit in 108 bytes
    local d; d=$(mktemp -d /tmp/tgslurm.XXXXXX)
    chmod 755 "$d"   # munged wants every folder above its socket traversable
    mkdir -p "$d/munge" "$d/run" "$d/state" "$d/spool" "$d/log"
    chmod 700 "$d/munge"
    mungekey -c -k "$d/munge/key" 2>/dev/null
    munged -S "$d/run/munge.sock" --key-file="$d/munge/key" --log-file="$d/log/munged.log" \
        --pid-file="$d/run/munged.pid" --seed-file="$d/munge/seed" || { rm -rf "$d"; die "munged did not start"; }
    local port=6817
    while ! port_free $port || ! port_free $((port + 1)); do
        port=$((port + 2)); [ $port -lt 6900 ] || { down "$d"; die "no free port pair in 6817..6899"; }
    done
    local node; node=$(hostname -s)
    cat >"$d/slurm.conf" <<EOF
ClusterName=tapegrad
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/run/munge.sock,cred_expire=5
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=5
ReturnToService=2
JobRequeue=1
RequeueExit=85
SlurmctldTimeout=30
SlurmdTimeout=60
MessageTimeout=30
KillWait=30
InactiveLimit=0
MinJobAge=3600
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$d/log/jobcomp.txt
NodeName=$node NodeAddr=127.0.0.1 $(slurmd -C | head -1 | sed "s/^NodeName=[^ ]* //") State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF="$d/slurm.conf"
    slurmctld -f "$SLURM_CONF" && slurmd -f "$SLURM_CONF" || { down "$d"; die "slurmctld or slurmd did not start (logs: $d/log)"; }
    local i state=""
    for i in $(seq 600); do   # 60 s
        state=$(sinfo -h -o %t 2>/dev/null || true)
        [ "$state" = idle ] && break
        sleep 0.1
    done
    if [ "$state" != idle ]; then
        tail -5 "$d/log/slurmctld.log" "$d/log/slurmd.log" >&2 || true
        SLURM_LOCAL_KEEP=1 down "$d"
        die "the node is '$state', not idle, after 60 s (logs kept in $d/log)"
    fi
    say "up in $d (ports $port, $((port + 1)))"
    echo "export SLURM_CONF=$d/slurm.conf SLURM_LOCAL_DIR=$d"
}

pid_of() { [ -s "$1" ] && cat "$1" || true; }
wait_gone() {   # wait_gone SECONDS PID...
    local t=$(( $1 * 10 )) p; shift
    for p in "$@"; do while kill -0 "$p" 2>/dev/null && [ $t -gt 0 ]; do sleep 0.1; t=$((t - 1)); done; done
}
# processes started by this cluster's jobs (a job id, and this cluster's slurm.conf, in their environment)
job_processes() {
    local e
    for e in $(grep -lzxF "SLURM_CONF=$1/slurm.conf" /proc/[0-9]*/environ 2>/dev/null); do
        grep -qz '^SLURM_JOB_ID=' "$e" 2>/dev/null && { e=${e#/proc/}; echo "${e%/environ}"; }
    done
    true
}

down() {
    local d=${1:-${SLURM_LOCAL_DIR:-}}
    [ -n "$d" ] && [ -f "$d/slurm.conf" ] || die "down: no cluster folder (give DIR or set SLURM_LOCAL_DIR)"
    export SLURM_CONF="$d/slurm.conf"
    local ctld slurmd munged i
    ctld=$(pid_of "$d/run/slurmctld.pid"); slurmd=$(pid_of "$d/run/slurmd.pid"); munged=$(pid_of "$d/run/munged.pid")
    if [ -n "$ctld" ] && kill -0 "$ctld" 2>/dev/null; then
        scancel --full --quiet --user=root 2>/dev/null || true
        for i in $(seq 600); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
        scontrol shutdown >/dev/null 2>&1 || true   # ends slurmctld and slurmd; running jobs are not killed by it
    fi
    wait_gone 20 $ctld $slurmd
    for i in $ctld $slurmd; do kill -0 "$i" 2>/dev/null && kill -KILL "$i"; done
    # what a job left behind: batch shells killed under proctrack/linuxproc leave their children
    local left; left=$(job_processes "$d")
    if [ -n "$left" ]; then say "stopping processes left by jobs: $(echo $left)"; kill -KILL $left 2>/dev/null || true; fi
    [ -z "$munged" ] || { kill -TERM "$munged" 2>/dev/null || true; wait_gone 10 "$munged"; }
    if [ "${SLURM_LOCAL_KEEP:-}" = 1 ]; then say "down; kept $d"; else rm -rf "$d"; say "down"; fi
}

case "${1:-}" in
    install) install ;;
    up) up ;;
    down) down "${2:-}" ;;
    *) echo "usage: scripts/slurm_local.sh install | up | down [DIR]" >&2; exit 2 ;;
esac
