#!/usr/bin/env bash
# local_cluster.sh - a real one-node SLURM cluster on this machine, to try grids locally and for CI.
#
#   bash slurm/local_cluster.sh start     # install (apt, once), configure, start; prints the env.sh to source
#   source "$ISTAR_SLURM_DIR/env.sh"      # exports SLURM_CONF for sbatch/squeue/sacct and submitit
#   bash slurm/local_cluster.sh status
#   bash slurm/local_cluster.sh stop      # cancels its jobs, stops the daemons it started (by pid file)
#
# Runs as root. Debian's SLURM (slurmctld, slurmd), MUNGE, and slurmdbd with a private MariaDB so that
# `sacct` works (submitit reads job states with it). One node "localhost" with every CPU of the machine,
# partitions "debug" (default) and "urgent" (a job there preempts, i.e. requeues, jobs of "debug").
# Every start is fresh: a cluster already running from the same state folder is stopped first.
#
# Environment:
#   ISTAR_SLURM_DIR            state folder (default /tmp/istar-plugin-slurm); env.sh is written there
#   ISTAR_SLURM_PORT           slurmctld port; slurmd +1, slurmdbd +2, MariaDB +3 (default 6917)
#   ISTAR_SLURM_ACCOUNTING     1: slurmdbd + MariaDB (default); 0: none (then submitit cannot see job states)
#   ISTAR_SLURM_REQUEUE_DELAY  seconds before a requeued job may start again (MUNGE cred_expire, default 10)
#   ISTAR_SLURM_WAIT           seconds to wait for each daemon (default 60)
set -euo pipefail

ACTION="${1:-start}"
STATE="${ISTAR_SLURM_DIR:-/tmp/istar-plugin-slurm}"
STATE="${STATE%/}"
case "$STATE" in /?*/?*) ;; *) echo "ISTAR_SLURM_DIR must be an absolute path two levels deep, got '$STATE'" >&2; exit 2 ;; esac
PORT="${ISTAR_SLURM_PORT:-6917}"
ACCOUNTING="${ISTAR_SLURM_ACCOUNTING:-1}"
REQUEUE_DELAY="${ISTAR_SLURM_REQUEUE_DELAY:-10}"
WAIT_S="${ISTAR_SLURM_WAIT:-60}"

export SLURM_CONF="$STATE/etc/slurm.conf"
MUNGE_SOCKET="$STATE/munge/socket"
DB_SOCKET="$STATE/mariadb/mysqld.sock"
# name:pidfile:binary, in start order (stopped in reverse)
DAEMONS=("munged:$STATE/munge/munged.pid:/usr/sbin/munged")
[ "$ACCOUNTING" = 1 ] && DAEMONS+=("mariadbd:$STATE/mariadb/mariadbd.pid:/usr/sbin/mariadbd"
                                   "slurmdbd:$STATE/run/slurmdbd.pid:/usr/sbin/slurmdbd")
DAEMONS+=("slurmctld:$STATE/run/slurmctld.pid:/usr/sbin/slurmctld" "slurmd:$STATE/run/slurmd.pid:/usr/sbin/slurmd")

say() { echo "[local_cluster] $*" >&2; }

# pid in pid file $1 when that process is alive and is binary $2 (a reused pid is not ours)
our_pid() {
  local pid exe
  [ -s "$1" ] || return 1
  pid=$(tr -cd '0-9' <"$1")
  [ -n "$pid" ] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [ "${exe% (deleted)}" = "$(readlink -f "$2")" ] && echo "$pid"
}

alive() {  # not gone and not a zombie
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

stop_daemon() {  # name pidfile binary
  local pid
  pid=$(our_pid "$2" "$3") || { rm -f "$2"; return 0; }
  say "stopping $1 (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
  if alive "$pid"; then say "$1 still alive 10 s after SIGTERM: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$2"
}

# job steps of this cluster left running after slurmd stopped: slurmstepd processes with a file open in STATE
leftover_steps() {
  local proc exe link stepd
  stepd=$(readlink -f /usr/sbin/slurmstepd)
  for proc in /proc/[0-9]*; do
    exe=$(readlink "$proc/exe" 2>/dev/null) || continue
    [ "${exe% (deleted)}" = "$stepd" ] || continue
    for link in "$proc"/cwd "$proc"/fd/*; do
      case "$(readlink "$link" 2>/dev/null)" in "$STATE"/*) echo "${proc#/proc/}"; break ;; esac
    done
  done
}

with_children() {  # $1 and every process below it
  local child
  echo "$1"
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do with_children "$child"; done
}

stop_cluster() {
  local jobs pid i name pidfile binary
  if our_pid "$STATE/run/slurmctld.pid" /usr/sbin/slurmctld >/dev/null; then
    jobs=$(squeue -h -o %A 2>/dev/null | tr '\n' ' ' || true)
    if [ -n "${jobs// /}" ]; then
      say "cancelling jobs $jobs"
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      for _ in $(seq 100); do [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.1; done
    fi
  fi
  for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
    IFS=: read -r name pidfile binary <<<"${DAEMONS[$i]}"
    stop_daemon "$name" "$pidfile" "$binary"
  done
  for pid in $(leftover_steps); do
    say "killing a leftover job step of this cluster (pid $pid) and its children"
    # shellcheck disable=SC2046
    kill -KILL $(with_children "$pid") 2>/dev/null || true
  done
  say "stopped"
}

status() {
  local name pidfile binary pid rc=0
  for spec in "${DAEMONS[@]}"; do
    IFS=: read -r name pidfile binary <<<"$spec"
    if pid=$(our_pid "$pidfile" "$binary"); then echo "$name: running (pid $pid)"; else echo "$name: stopped"; rc=1; fi
  done
  [ $rc = 0 ] && sinfo
  return $rc
}

STARTING=0
fail() {
  local log
  say "ERROR: $*"
  for log in "$STATE"/log/*.log "$STATE/munge/munged.log" "$STATE/mariadb/error.log"; do
    [ -s "$log" ] && { echo "--- last lines of $log" >&2; tail -n 15 "$log" >&2; }
  done
  [ "$STARTING" = 1 ] && stop_cluster
  exit 1
}

wait_for() {  # description, command...
  local what="$1" deadline=$((SECONDS + WAIT_S))
  shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || fail "gave up after ${WAIT_S}s waiting for: $what"
    sleep 0.2
  done
  say "$what"
}

install_packages() {
  local wanted=(slurmctld slurmd slurm-client munge) missing=() package blocked=0
  [ "$ACCOUNTING" = 1 ] && wanted+=(slurmdbd mariadb-server)
  for package in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} = 0 ] && return 0
  say "installing ${missing[*]} (apt, about a minute)"
  if [ ! -e /usr/sbin/policy-rc.d ]; then  # keep the packages from starting system-wide daemons
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && blocked=1
  fi
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -y -o DPkg::Lock::Timeout=300)
  if ! "${apt[@]}" install --no-install-recommends "${missing[@]}" >"$STATE/apt.log" 2>&1; then
    { "${apt[@]}" update && "${apt[@]}" install --no-install-recommends "${missing[@]}"; } >>"$STATE/apt.log" 2>&1 \
      || { [ $blocked = 1 ] && rm -f /usr/sbin/policy-rc.d; tail -n 20 "$STATE/apt.log" >&2; fail "apt-get install failed"; }
  fi
  [ $blocked = 1 ] && rm -f /usr/sbin/policy-rc.d
  return 0
}

write_configs() {
  local cpus memory_mb per_cpu_mb
  cpus=$(nproc)
  memory_mb=$(($(awk '/^MemTotal:/{print $2}' /proc/meminfo) * 8 / 10 / 1024))
  per_cpu_mb=$((memory_mb / cpus < 1024 ? memory_mb / cpus : 1024))  # jobs without --mem get this per CPU
  cat >"$SLURM_CONF" <<EOF
# written by istar_plugin's slurm/local_cluster.sh
ClusterName=istarlocal
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=$REQUEUE_DELAY
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$per_cpu_mb
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=2
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
KillWait=5
MinJobAge=300
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=localhost MaxTime=INFINITE State=UP PriorityTier=10
EOF
  if [ "$ACCOUNTING" = 1 ]; then
    # AccountingStoragePass names the MUNGE socket for talking to slurmdbd (else the system one is tried)
    cat >>"$SLURM_CONF" <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$((PORT + 2))
AccountingStoragePass=$MUNGE_SOCKET
EOF
    cat >"$STATE/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$((PORT + 2))
SlurmUser=root
PidFile=$STATE/run/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$((PORT + 3))
StorageUser=slurm
StoragePass=slurm
StorageLoc=istar_slurm_acct
EOF
    chmod 600 "$STATE/etc/slurmdbd.conf"  # slurmdbd refuses a readable config holding a password
  else
    echo "AccountingStorageType=accounting_storage/none" >>"$SLURM_CONF"
  fi
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
munge_works() { munge -n --socket="$MUNGE_SOCKET" | unmunge --socket="$MUNGE_SOCKET"; }
sql() { mariadb --no-defaults --socket="$DB_SOCKET" -uroot -e "$1"; }
node_idle() { [ "$(sinfo -h -n localhost -o %T)" = idle ]; }
registered() { sacctmgr -n -P show cluster format=cluster | grep -qx istarlocal; }

start_cluster() {
  [ "$(id -u)" = 0 ] || { echo "local_cluster.sh start must run as root" >&2; exit 1; }
  mkdir -p "$STATE"
  install_packages
  stop_cluster
  local port
  for port in "$PORT" $((PORT + 1)) $((PORT + 2)) $((PORT + 3)); do
    port_in_use "$port" && fail "port $port is taken (another cluster? set ISTAR_SLURM_PORT)"
  done
  STARTING=1
  rm -rf "${STATE:?}"/{etc,ctld,spool,log,run,munge,mariadb} "$STATE/env.sh"
  mkdir -p "$STATE"/{etc,ctld,spool,log,run}
  install -d -m 0755 -o munge -g munge "$STATE/munge"
  write_configs

  head -c 1024 /dev/urandom >"$STATE/munge/key"
  chown munge:munge "$STATE/munge/key" && chmod 0400 "$STATE/munge/key"
  runuser -u munge -- /usr/sbin/munged --socket="$MUNGE_SOCKET" --key-file="$STATE/munge/key" \
    --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munge/munged.log" --seed-file="$STATE/munge/seed" \
    || fail "munged did not start"
  wait_for "munged is up" munge_works

  if [ "$ACCOUNTING" = 1 ]; then
    mkdir -p "$STATE/mariadb"
    mariadb-install-db --no-defaults --user=root --datadir="$STATE/mariadb/data" --skip-test-db \
      --auth-root-authentication-method=socket >"$STATE/log/mariadb-install.log" 2>&1 || fail "mariadb-install-db failed"
    setsid /usr/sbin/mariadbd --no-defaults --user=root --datadir="$STATE/mariadb/data" --socket="$DB_SOCKET" \
      --pid-file="$STATE/mariadb/mariadbd.pid" --bind-address=127.0.0.1 --port=$((PORT + 3)) \
      --log-error="$STATE/mariadb/error.log" --skip-log-bin --innodb-buffer-pool-size=64M \
      </dev/null >/dev/null 2>&1 &
    wait_for "mariadbd is up" sql "SELECT 1"
    sql "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; GRANT ALL ON istar_slurm_acct.* TO 'slurm'@'127.0.0.1';" \
      || fail "could not create the database user for slurmdbd"
    /usr/sbin/slurmdbd || fail "slurmdbd did not start"   # reads slurmdbd.conf beside SLURM_CONF
    wait_for "slurmdbd is up" sacctmgr -n show cluster
  fi

  /usr/sbin/slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
  wait_for "slurmctld is up" bash -c "scontrol ping | grep -q 'is UP'"
  /usr/sbin/slurmd -f "$SLURM_CONF" -N localhost || fail "slurmd did not start"
  wait_for "node localhost is idle" node_idle
  [ "$ACCOUNTING" = 1 ] && wait_for "cluster registered for accounting" registered
  STARTING=0
  printf 'export SLURM_CONF=%q\n' "$SLURM_CONF" >"$STATE/env.sh"
  say "ready; now: source $STATE/env.sh"
}

case "$ACTION" in
  start) start_cluster ;;
  stop) stop_cluster ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status (got '$ACTION')" >&2; exit 2 ;;
esac
