#!/usr/bin/env bash
# The Slurm recipe (scripts/slurm/) on a real single-node Slurm cluster that this test
# starts itself from Debian's slurm-wlm and munge: a munge key and munged (as the munge
# user), slurmctld and slurmd (as root) with a slurm.conf generated for this host, every
# address pinned to the loopback and every state, spool, log, pid and socket file in a
# scratch folder. scripts/slurm/submit sends an array job of 4 fuzz shards and the merge
# job (afterany) and waits for the merge with sbatch --wait; the merged summary must
# equal the same campaign run unsharded here (same runs, same trace hashes, same totals).
# A failing campaign, submitted alongside, must come back as the merge's exit 1. Any job
# left is cancelled and the daemons are stopped, whatever happens (trap, also on INT and
# TERM). Exit 77 (skipped) only where the packages are absent.
# usage: slurm.sh PATH/TO/cowstate SOURCE_DIR
cowstate=$(realpath "$1")
source_dir=$(realpath "$2")
for tool in slurmctld slurmd sbatch scontrol scancel sinfo munged mungekey setpriv; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed: the Slurm test needs Debian's slurm-wlm and munge"
    echo "      (scripts/install-deps installs them)"
    exit 77
  fi
done
source "$(dirname "$0")/lib.sh"
if [[ $(id -u) != 0 ]]; then
  echo "FAIL: the Slurm test starts munged, slurmctld and slurmd, and must run as root"
  exit 1
fi

# Scratch folder: munged (the munge user) refuses a key in a folder others can read or
# write, and a socket in a folder not everyone can enter: the key, log, pid and seed in
# munge/ (700), the socket in munge-socket/ (755), both the munge user's.
chmod 755 "$work"
mkdir -p "$work/munge" "$work/munge-socket" "$work/slurm/state" "$work/slurm/spool" \
  "$work/results"
chown munge:munge "$work/munge" "$work/munge-socket"
chmod 700 "$work/munge"
chmod 755 "$work/munge-socket"
pids=() # the waiting submits first, then the daemons
# Processes with a file open in the scratch folder: job steps (slurmstepd) that outlived
# slurmd, the daemons, the jobs.
left_in_work() {
  find /proc/[0-9]*/fd -maxdepth 1 -lname "$work/*" 2>/dev/null | cut -d/ -f3 | sort -u |
    grep -vx -e "$$" -e "$BASHPID"
}
stop() { # stop PID...: TERM, up to 5 s, then KILL
  local pid
  for pid in "$@"; do kill "$pid" 2>/dev/null; done
  for pid in "$@"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
}
cleanup() {
  if [[ -n ${SLURM_CONF:-} ]]; then
    scancel --quiet --user=root 2>/dev/null
    for _ in $(seq 100); do
      [[ -z $(squeue -h 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  stop "${pids[@]}"
  mapfile -t left < <(left_in_work)
  if ((${#left[@]} > 0)); then
    echo "slurm: stopping what the daemons left running: $(ps -o pid=,comm= -p "${left[*]}" | xargs)"
    stop "${left[@]}"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# A TCP port on the loopback that nothing listens on.
free_port() {
  local port
  for port in "$@"; do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
  return 1
}
# wait_for DESCRIPTION COMMAND...: polls COMMAND (at most 60 s), fails with the logs.
wait_for() {
  local what=$1
  shift
  for _ in $(seq 300); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  fail "$what did not happen within 60 s; the logs:"
  tail -n 20 "$work"/munge/munged.* "$work"/slurm/*.log "$work"/slurm/*.err 2>/dev/null |
    sed 's/^/    /'
  exit 1
}

# munge: a key of our own, and munged on a socket in the scratch folder.
setpriv --reuid munge --regid munge --init-groups mungekey --create \
  --keyfile "$work/munge/munge.key" >/dev/null || { fail "mungekey --create"; exit 1; }
socket="$work/munge-socket/munge.socket"
setpriv --reuid munge --regid munge --init-groups munged --foreground \
  --key-file "$work/munge/munge.key" --socket "$socket" --origin 127.0.0.1 \
  --pid-file "$work/munge/munged.pid" --log-file "$work/munge/munged.log" \
  --seed-file "$work/munge/munged.seed" 2>"$work/munge/munged.err" &
pids+=($!)
wait_for "munged answering on $socket" test -S "$socket"

# Slurm: one controller and one node, this host, on the loopback.
host=$(hostname -s)
ctld_port=$(free_port 16817 26817 36817) || { fail "no free port for slurmctld"; exit 1; }
slurmd_port=$(free_port 16818 26818 36818) || { fail "no free port for slurmd"; exit 1; }
node=$(slurmd -C | head -1 | sed -E 's/^NodeName=[^ ]+ //')
export SLURM_CONF="$work/slurm/slurm.conf"
cat >"$SLURM_CONF" <<CONF
ClusterName=cowstate-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
StateSaveLocation=$work/slurm/state
SlurmdSpoolDir=$work/slurm/spool
SlurmctldPidFile=$work/slurm/slurmctld.pid
SlurmdPidFile=$work/slurm/slurmd.pid
SlurmctldLogFile=$work/slurm/slurmctld.log
SlurmdLogFile=$work/slurm/slurmd.log
NodeName=$host NodeAddr=127.0.0.1 $node State=UNKNOWN
PartitionName=cowstate Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld -D -i -f "$SLURM_CONF" 2>"$work/slurm/slurmctld.err" &
pids+=($!)
wait_for "slurmctld answering scontrol ping" bash -c 'scontrol ping | grep -q UP'
slurmd -D -f "$SLURM_CONF" 2>"$work/slurm/slurmd.err" &
pids+=($!)
wait_for "node $host idle" bash -c "sinfo -h -n '$host' -o %T | grep -qx idle"
echo "slurm: ready after ${SECONDS} s: controller on 127.0.0.1:$ctld_port, node $host ($node) on 127.0.0.1:$slurmd_port"

# Two campaigns at once, each bounded by `timeout` (sbatch --wait polls ever less often,
# so the two waits overlap instead of adding up): a failing one, where every backend run
# fails in its setup (no checkpoint folder) and the merge must still run (afterany) and
# exit 1, counting the failure once by signature; and a passing one, to compare with the
# unsharded campaign.
(
  export COWSTATE_SIM_TMPDIR="$work/no/such/dir"
  exec timeout 180 "$source_dir/scripts/slurm/submit" --shards 4 --results "$work/results/fail" \
    --cowstate "$cowstate" --wait -- fuzz --workload backend --seed 3 --runs 8 --ops 20 \
    --keep-going --shrink-seconds 0
) >"$work/submit-fail.out" 2>&1 &
failing=$!
pids=("$failing" "${pids[@]}")
campaign=(fuzz --seed 11 --runs 40 --ops 150)
results="$work/results/pass"
# In the background, and waited for with `wait`, so that a signal reaches the trap at once.
timeout 180 "$source_dir/scripts/slurm/submit" --shards 4 --results "$results" \
  --cowstate "$cowstate" --wait -- "${campaign[@]}" >"$work/submit.out" 2>&1 &
pids=("$!" "${pids[@]}")
wait "${pids[0]}"
code=$?
cat "$work/submit.out"
echo "slurm: the passing campaign's merge ended after ${SECONDS} s"
check "the merge job exits 0 (got $code)" test "$code" -eq 0
array=$(sed -nE 's/^submit: array job ([0-9]+):.*/\1/p' "$work/submit.out")
scontrol show job "$array" 2>/dev/null |
  grep -oE '^JobId=[0-9]+ ArrayJobId=[0-9]+ ArrayTaskId=[0-9]+|JobState=[A-Z]+|ExitCode=[0-9:]+|RunTime=[0-9:-]+' |
  paste -d' ' - - - - | sed 's/^/slurm: /'
check "the array job ran its 4 tasks and every one completed" \
  test "$(scontrol show job "$array" | grep -c 'JobState=COMPLETED')" -eq 4

# The same campaign unsharded here: the same runs, trace hashes and totals.
"$cowstate" "${campaign[@]}" --json --out "$work/local-failures" >"$work/local.jsonl"
"$cowstate" merge --json "$work/local.jsonl" >"$work/local-merged.json"
merged="$results/merged.json"
check "the merged summary covers the campaign: 4 shards, 40 runs each once, all passed" \
  jq -e '.consistent and .complete and .runs == 40 and (.shards | length) == 4 and .failures == 0' "$merged"
fields='{runs, failures, steps, ops, snapshots, snapshots_checked, entries_checked, deep_checks, yields, trace_digest, campaign_id}'
if [[ $(jq -cS "$fields" "$merged") == $(jq -cS "$fields" "$work/local-merged.json") ]]; then
  pass
else
  fail "the merged totals differ from the unsharded campaign's:"
  diff <(jq -S "$fields" "$merged") <(jq -S "$fields" "$work/local-merged.json") | sed 's/^/    /'
fi
key() { jq -r 'select(.type == "run") | "\(.run) \(.seed) \(.outcome) \(.trace_hash)"' "$@" | sort -n; }
check "every run of the shards has the unsharded run's seed, outcome and trace hash" \
  test "$(key "$results"/shard-*.jsonl)" = "$(key "$work/local.jsonl")"
jq -r '.shards[] | "slurm: shard \(.index): \(.runs) runs in \(.seconds * 1000 | round) ms"' "$merged"
echo "slurm: unsharded here: $(jq -r '"\(.runs) runs, trace digest \(.trace_digest), \(.seconds * 1000 | round) ms"' "$work/local-merged.json")"

wait "$failing"
code=$?
sed 's/^/slurm (failing campaign): /' "$work/submit-fail.out"
echo "slurm: the failing campaign's merge ended after ${SECONDS} s"
check "a failing campaign's merge job exits 1 (got $code)" test "$code" -eq 1
check "its merged summary counts 8 failing runs of one signature" \
  jq -e '.complete and .failures == 8 and (.distinct_failures | length) == 1 and .distinct_failures[0].first_run == 0' \
  "$work/results/fail/merged.json"
finish
