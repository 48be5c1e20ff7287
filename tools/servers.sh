#!/usr/bin/env bash
# Throwaway servers for the team-scale tests, all under one folder, stopped by
# the PIDs recorded there (never by name).
#
#   tools/servers.sh start DIR pg     PostgreSQL 15 on a unix socket in DIR/pg;
#                                     writes DIR/pg.env (PGHOST, PGPORT, TEAM_URL, ...)
#   tools/servers.sh start DIR ssh    sshd on 127.0.0.1 (a free port), key-only login with a
#                                     throwaway key; writes DIR/ssh.env (SSH_OPTS, SSH_HOST)
#   tools/servers.sh start DIR slurm  single-node Slurm with munge (free loopback ports, state
#                                     and logs under DIR/slurm); writes DIR/slurm.env (SLURM_CONF)
#   tools/servers.sh stop-one DIR pg  stops that server only (DIR/pg.pid); a later
#                                     start DIR pg starts it again on the same data
#   tools/servers.sh stop DIR         stops every server started under DIR
#
# Exit status of start: 0 started; 77 the software is not installed and cannot
# be (the caller skips, loudly); 1 it is installed but did not start (a failure).
set -u
cmd=${1:-}
dir=${2:-}
what=${3:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop-one|stop DIR [pg|ssh|slurm]" >&2; exit 2; }

say() { echo "servers.sh: $*" >&2; }

# stop_pid FILE [SIGNAL]: kills the PID recorded in FILE (SIGNAL, default TERM,
# then KILL after 5 s). PostgreSQL gets INT: a fast shutdown, not waiting for clients.
stop_pid() {
  local f=$1 sig=${2:-TERM} pid
  [ -f "$f" ] || return 0
  pid=$(head -1 "$f")
  rm -f "$f"
  case $pid in '' | *[!0-9]*) return 0 ;; esac
  kill "-$sig" "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
  return 0
}

pg_bin() {
  local b
  for b in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
    [ -x "$b/initdb" ] && { echo "$b"; return 0; }
  done
  return 1
}

# pg_up BIN [RUNUSER...]: starts the cluster in $dir/pg/data, records its PID.
pg_up() {
  local bin=$1 pg=$dir/pg
  shift
  "$@" "$bin/pg_ctl" -D "$pg/data" -l "$pg/server.log" -w -t 30 start \
    -o "-c listen_addresses='' -k $pg -p 5433 -c fsync=off -c max_connections=60" >/dev/null 2>&1 ||
    { say "postgres did not start:"; tail -5 "$pg/server.log" >&2; return 1; }
  head -1 "$pg/data/postmaster.pid" >"$dir/pg.pid"
}

start_pg() {
  local bin
  if ! bin=$(pg_bin); then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 >/dev/null 2>&1
    fi
    bin=$(pg_bin) || { say "PostgreSQL 15 is not installed and could not be installed"; return 77; }
  fi
  local as=()
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || { say "running as root without a postgres user"; return 77; }
    as=(runuser -u postgres --)
  fi
  local pg=$dir/pg
  [ -d "$pg/data" ] && { pg_up "$bin" "${as[@]}"; return; }
  mkdir -p "$pg" && chmod 755 "$dir" "$pg"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$pg"
  "${as[@]}" test -x "$pg" ||
    { say "the postgres user cannot reach $pg: make the folders above it traversable (chmod 755)"; return 1; }
  "${as[@]}" "$bin/initdb" -D "$pg/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync \
    >"$pg/initdb.log" 2>&1 || { say "initdb failed:"; cat "$pg/initdb.log" >&2; return 1; }
  # The team role logs in with a password (scram); the superuser by trust.
  cat >"$pg/data/pg_hba.conf" <<EOF
local all postgres trust
local all all scram-sha-256
EOF
  pg_up "$bin" "${as[@]}" || return 1
  local psql=("$bin/psql" -h "$pg" -p 5433 -U postgres -v ON_ERROR_STOP=1 -qAt)
  "${as[@]}" "${psql[@]}" -d postgres -c "CREATE ROLE team LOGIN PASSWORD 'team-pw-Xy7'" &&
    "${as[@]}" "${psql[@]}" -d postgres -c "CREATE DATABASE ci OWNER team" ||
    { say "creating the team role and database failed"; return 1; }
  cat >"$dir/pg.env" <<EOF
PG_BIN=$bin
PG_SOCK=$pg
PG_PORT=5433
PG_PASSWORD=team-pw-Xy7
# the team ledger, with the password in the URI and without it
TEAM_URL_PW='postgresql://team:team-pw-Xy7@/ci?host=$pg&port=5433'
TEAM_URL='postgresql://team@/ci?host=$pg&port=5433'
EOF
  return 0
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_ssh() {
  local sshd=/usr/sbin/sshd
  if [ ! -x "$sshd" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openssh-server >/dev/null 2>&1
    fi
    [ -x "$sshd" ] || { say "openssh-server is not installed and could not be installed"; return 77; }
  fi
  command -v ssh >/dev/null || { say "the OpenSSH client is not installed"; return 77; }
  local s=$dir/ssh user port
  user=$(id -un)
  mkdir -p "$s" && chmod 755 "$dir" "$s"
  # the privilege separation folder is compiled into sshd (INFRA.md)
  [ -d /run/sshd ] || install -d -m 0755 /run/sshd 2>/dev/null
  ssh-keygen -q -t ed25519 -N '' -f "$s/host_ed25519" &&
    ssh-keygen -q -t ed25519 -N '' -f "$s/client_ed25519" &&
    install -m 0600 "$s/client_ed25519.pub" "$s/authorized_keys" || { say "ssh-keygen failed"; return 1; }
  for _ in 1 2 3; do
    port=$(free_port)
    cat >"$s/sshd_config" <<EOF
ListenAddress 127.0.0.1
Port $port
HostKey $s/host_ed25519
PidFile $s/sshd.pid
AuthorizedKeysFile $s/authorized_keys
PermitRootLogin prohibit-password
AllowUsers $user@127.0.0.1
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
EOF
    "$sshd" -t -f "$s/sshd_config" || { say "sshd rejects its config"; return 1; }
    "$sshd" -D -e -f "$s/sshd_config" 2>>"$s/sshd.log" &
    echo $! >"$dir/ssh.pid"
    for _ in $(seq 50); do
      ssh-keyscan -p "$port" 127.0.0.1 >/dev/null 2>&1 && break
      kill -0 "$(cat "$dir/ssh.pid")" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$(cat "$dir/ssh.pid")" 2>/dev/null; then
      cat >"$dir/ssh.env" <<EOF
SSH_PORT=$port
SSH_HOST=$user@127.0.0.1
SSH_KEY=$s/client_ed25519
SSH_OPTS=(-o Port=$port -o IdentityFile=$s/client_ed25519 -o IdentitiesOnly=yes -o UserKnownHostsFile=$s/known_hosts -o StrictHostKeyChecking=accept-new)
EOF
      return 0
    fi
    rm -f "$dir/ssh.pid" # the port was taken meanwhile: another one
  done
  say "sshd did not start:"
  tail -5 "$s/sshd.log" >&2
  return 1
}

# Single-node Slurm on loopback (INFRA.md section 1): munged on a socket in
# DIR/slurm/munge (folder 0755, key 0600), slurmctld and slurmd in the
# foreground with their PIDs recorded, sinfo polled with a timeout until the
# node is idle. Free loopback ports, so two test runs do not collide.
start_slurm() {
  local need=(munged mungekey munge unmunge slurmctld slurmd sbatch squeue scontrol scancel sinfo)
  local missing=() p
  for p in "${need[@]}"; do command -v "$p" >/dev/null || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      slurmctld slurmd slurm-client munge >/dev/null 2>&1
    missing=()
    for p in "${need[@]}"; do command -v "$p" >/dev/null || missing+=("$p"); done
  fi
  [ ${#missing[@]} -eq 0 ] || { say "Slurm/munge are not installed and could not be (missing: ${missing[*]})"; return 77; }
  local s=$dir/slurm user hw port1 port2
  user=$(id -un)
  mkdir -p "$s/munge" "$s/state" "$s/spool" "$s/log" && chmod 755 "$dir" "$s" "$s/munge" || return 1
  rm -f "$s/munge/munge.key"
  mungekey -c -k "$s/munge/munge.key" >/dev/null 2>&1 || { say "mungekey failed"; return 1; }
  chmod 0600 "$s/munge/munge.key"
  local sock=$s/munge/munge.socket.2
  "$(command -v munged)" -F --socket="$sock" --key-file="$s/munge/munge.key" \
    --log-file="$s/munge/munged.log" --pid-file="$s/munge/munged.pid" \
    --seed-file="$s/munge/munged.seed" >/dev/null 2>&1 &
  echo $! >"$dir/munge.pid"
  local up=no
  for _ in $(seq 50); do
    munge -n -S "$sock" 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1 && { up=yes; break; }
    kill -0 "$(cat "$dir/munge.pid")" 2>/dev/null || break
    sleep 0.1
  done
  [ $up = yes ] || { say "munged did not start:"; tail -5 "$s/munge/munged.log" >&2; return 1; }
  hw=$(slurmd -C 2>/dev/null | head -1 | sed 's/^NodeName=[^ ]* //')
  [ -n "$hw" ] || { say "slurmd -C printed nothing"; return 1; }
  port1=$(free_port)
  port2=$(free_port)
  [ "$port1" != "$port2" ] || port2=$(free_port)
  cat >"$s/slurm.conf" <<EOF
ClusterName=ci
SlurmctldHost=localhost
SlurmctldPort=$port1
SlurmdPort=$port2
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool
ProctrackType=proctrack/linuxproc
SlurmUser=$user
SlurmdUser=$user
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd.pid
SlurmctldLogFile=$s/log/slurmctld.log
SlurmdLogFile=$s/log/slurmd.log
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$s/jobcomp.txt
MpiDefault=none
MailProg=/bin/true
MinJobAge=3600
KillWait=5
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$s/slurm.conf
  "$(command -v slurmctld)" -D -i -f "$SLURM_CONF" >>"$s/log/slurmctld.out" 2>&1 &
  echo $! >"$dir/slurmctld.pid"
  "$(command -v slurmd)" -D -N localhost -f "$SLURM_CONF" >>"$s/log/slurmd.out" 2>&1 &
  echo $! >"$dir/slurmd.pid"
  local state=""
  for _ in $(seq 100); do
    state=$(timeout 5 sinfo -h -N -o %T 2>/dev/null | head -1)
    [ "$state" = idle ] && break
    kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null && kill -0 "$(cat "$dir/slurmd.pid")" 2>/dev/null || break
    sleep 0.2
  done
  if [ "$state" != idle ]; then
    say "Slurm did not come up (node state '${state:-none}'):"
    tail -5 "$s/log/slurmctld.log" "$s/log/slurmd.log" >&2 2>/dev/null
    return 1
  fi
  printf 'SLURM_CONF=%s\nexport SLURM_CONF\n' "$s/slurm.conf" >"$dir/slurm.env"
  return 0
}

# stop_slurm: cancels what still runs on our cluster, then stops slurmd,
# slurmctld and munged by their recorded PIDs (in that order).
stop_slurm() {
  if [ -f "$dir/slurmctld.pid" ] && [ -f "$dir/slurm/slurm.conf" ] &&
    kill -0 "$(head -1 "$dir/slurmctld.pid")" 2>/dev/null; then
    SLURM_CONF=$dir/slurm/slurm.conf timeout 5 scancel --quiet -u "$(id -un)" >/dev/null 2>&1
  fi
  stop_pid "$dir/slurmd.pid"
  stop_pid "$dir/slurmctld.pid"
  stop_pid "$dir/munge.pid"
}

case $cmd in
start)
  case $what in
  pg) start_pg ;;
  ssh) start_ssh ;;
  slurm) start_slurm ;;
  *) say "unknown server '$what'"; exit 2 ;;
  esac
  ;;
stop-one)
  [ "$what" = slurm ] && { stop_slurm; exit 0; }
  sig=TERM
  [ "$what" = pg ] && sig=INT
  stop_pid "$dir/$what.pid" "$sig"
  ;;
stop)
  stop_slurm
  for f in "$dir"/*.pid; do
    [ -e "$f" ] || continue
    sig=TERM
    [ "$(basename "$f")" = pg.pid ] && sig=INT
    stop_pid "$f" "$sig"
  done
  ;;
*)
  say "unknown command '$cmd'"; exit 2 ;;
esac
