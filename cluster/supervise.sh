#!/usr/bin/env bash
# Keeps the service running: starts its launch command, and when the service fails (exits with a
# non-zero status or is killed) starts it again after a back-off. SIGTERM or SIGINT to this
# script drains the service (SIGTERM to the coordinator) and ends the script with its status
# (0 when it comes while the service is down, waiting for a restart).
#
#   cluster/supervise.sh [options] -- cluster/launch-gpu-node.sh --model /models/m --gpus 8
#   cluster/supervise.sh [options] -- mpirun --enable-recovery -np 1 millipede-coordinator ... : ...
#
# The launch command must end with the service's status: the coordinator and the workers exit
# non-zero after any failure, and under `mpirun --enable-recovery` they make mpirun do so too
# (docs/operations.md, "Exit codes"). A service that exits 0 stopped on request (a drain) and is
# not restarted. cluster/systemd/millipede.service runs this script under systemd.
set -uo pipefail

usage() {
  cat <<'EOF'
usage: supervise.sh [options] -- COMMAND [ARGS...]
  --log FILE          also append the service's output and this script's decisions to FILE
  --backoff-s S       wait before the first restart (default 2); doubled after each failure
                      that follows a short run, up to --max-backoff-s
  --max-backoff-s S   longest wait between restarts (default 60)
  --stable-s S        a run that lasted this long resets the back-off (default 300)
  --max-restarts N    give up (exit with the last status) after N restarts within
                      --window-s (default 10; 0 = never give up)
  --window-s S        the window of --max-restarts (default 900)
  --max-start-failures N  give up after N runs in a row that ended before the service was ready
                      (a bad flag, model or port does not mend itself; default 3)
  --stop-timeout-s S  on SIGTERM: how long the drain may take before the launch command's
                      processes get SIGTERM, and SIGKILL 10 s later (default 120)
EOF
}

log_file="" backoff=2 max_backoff=60 stable=300 max_restarts=10 window=900 stop_timeout=120
max_start_failures=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --log) log_file="$2"; shift 2 ;;
    --backoff-s) backoff="$2"; shift 2 ;;
    --max-backoff-s) max_backoff="$2"; shift 2 ;;
    --stable-s) stable="$2"; shift 2 ;;
    --max-restarts) max_restarts="$2"; shift 2 ;;
    --window-s) window="$2"; shift 2 ;;
    --max-start-failures) max_start_failures="$2"; shift 2 ;;
    --stop-timeout-s) stop_timeout="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage; exit 0 ;;
    *) echo "supervise.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
if [[ $# -eq 0 ]]; then
  echo "supervise.sh: no launch command (give it after --)" >&2
  exit 2
fi
for n in "$backoff" "$max_backoff" "$stable" "$max_restarts" "$window" "$stop_timeout" \
         "$max_start_failures"; do
  if ! [[ "$n" =~ ^[0-9]+$ ]]; then
    echo "supervise.sh: durations and counts are whole numbers, not \"$n\"" >&2
    exit 2
  fi
done

say() {
  local line
  line="supervise: $(date -u +%Y-%m-%dT%H:%M:%SZ) $*"
  echo "$line"
  [[ -n "$log_file" ]] && echo "$line" >>"$log_file"
  return 0
}

state_dir="$(mktemp -d)"
trap 'rm -rf "$state_dir"' EXIT
pid_file="$state_dir/coordinator.pid"
stopping=0
child=0

# Copies the service's output through, and notes the coordinator's pid from its ready line.
relay() {
  local line
  # It lives until the service's output ends: a signal to this script's group must not close
  # the pipe under a draining service.
  trap '' TERM INT
  while IFS= read -r line; do
    printf '%s\n' "$line"
    [[ -n "$log_file" ]] && printf '%s\n' "$line" >>"$log_file"
    if [[ "$line" =~ millipede-coordinator:\ ready:.*\ pid\ ([0-9]+) ]]; then
      echo "${BASH_REMATCH[1]}" >"$pid_file"
    fi
  done
}

# Whether pid $1 is a process of the launch command's session (a pid from the ready line may be
# on another host, or gone and reused).
in_session() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }"  # the fields after "pid (comm) "
  local fields
  read -r -a fields <<<"$stat"
  [[ "${fields[3]:-}" == "$child" ]]  # field 6: the session id
}

on_stop() {
  [[ $stopping -eq 1 ]] && return
  stopping=1
  local coordinator=""
  [[ -s "$pid_file" ]] && coordinator="$(cat "$pid_file")"
  if [[ -n "$coordinator" && $child -ne 0 ]] && in_session "$coordinator"; then
    say "stopping: draining the service (SIGTERM to the coordinator, pid $coordinator)"
    kill -TERM "$coordinator" 2>/dev/null
  elif [[ $child -ne 0 ]] && kill -0 -- "-$child" 2>/dev/null; then
    say "stopping: no coordinator of this launch on this host (not ready yet, or elsewhere);" \
        "SIGTERM to the launch command"
    kill -TERM -- "-$child" 2>/dev/null
  fi
}
trap on_stop TERM INT

# Waits for the launch command, enforcing --stop-timeout-s once a stop began; sets `status`.
wait_child() {
  local waited=0
  status=0
  while kill -0 "$child" 2>/dev/null; do
    if [[ $stopping -eq 0 ]]; then
      # Returns when the command ends (its status) or when a trapped signal arrives.
      wait "$child" 2>/dev/null
      status=$?
      continue
    fi
    if [[ $waited -eq $stop_timeout ]]; then
      say "the drain took over ${stop_timeout} s: SIGTERM to the launch command"
      kill -TERM -- "-$child" 2>/dev/null
    elif [[ $waited -eq $((stop_timeout + 10)) ]]; then
      say "SIGKILL to the launch command"
      kill -KILL -- "-$child" 2>/dev/null
    fi
    sleep 1
    waited=$((waited + 1))
  done
  # Reaps it if the loop above did not (a stop was under way); keeps the status otherwise.
  if wait "$child" 2>/dev/null; then status=0; else
    local rc=$?
    [[ $rc -ne 127 ]] && status=$rc
  fi
  return 0
}

# Ends whatever the launch command left behind in its session (a rank that outlived mpirun would
# hold its GPU and ports): SIGTERM, then SIGKILL after 10 s.
reap_session() {
  kill -0 -- "-$child" 2>/dev/null || return 0
  say "processes of the launch command outlived it: SIGTERM to them"
  kill -TERM -- "-$child" 2>/dev/null
  for _ in $(seq 1 100); do
    kill -0 -- "-$child" 2>/dev/null || return 0
    sleep 0.1
  done
  say "SIGKILL to what is left of the launch command"
  kill -KILL -- "-$child" 2>/dev/null
  return 0
}

restarts=()  # start times of the restarts within the window
delay=$backoff
start_failures=0  # runs in a row that ended before the ready line
while true; do
  rm -f "$pid_file"
  started=$(date +%s)
  # A session of its own: a Ctrl-C on this terminal reaches this script, which drains, and not
  # mpirun, which would end every rank at once.
  setsid "$@" > >(relay) 2>&1 &
  child=$!
  say "started the service (launch command pid $child): $*"
  status=0
  wait_child
  reap_session
  ran=$(( $(date +%s) - started ))
  if [[ $stopping -eq 1 ]]; then
    say "the service stopped with status $status after ${ran} s"
    exit "$status"
  fi
  if [[ $status -eq 0 ]]; then
    say "the service stopped on request (status 0) after ${ran} s: not restarting"
    exit 0
  fi
  if [[ -s "$pid_file" ]]; then start_failures=0; else start_failures=$((start_failures + 1)); fi
  if [[ $max_start_failures -gt 0 && $start_failures -ge $max_start_failures ]]; then
    say "the service failed with status $status before it was ready, $start_failures times in a row: giving up"
    exit "$status"
  fi
  now=$(date +%s)
  kept=()
  for t in "${restarts[@]}"; do (( now - t < window )) && kept+=("$t"); done
  restarts=("${kept[@]}")
  if [[ $max_restarts -gt 0 && ${#restarts[@]} -ge $max_restarts ]]; then
    say "the service failed with status $status; ${#restarts[@]} restarts within ${window} s: giving up"
    exit "$status"
  fi
  (( ran >= stable )) && delay=$backoff
  say "the service failed with status $status after ${ran} s: restarting in ${delay} s"
  slept=0
  while [[ $slept -lt $delay && $stopping -eq 0 ]]; do sleep 1; slept=$((slept + 1)); done
  if [[ $stopping -eq 1 ]]; then
    say "stopped while waiting to restart"
    exit 0
  fi
  restarts+=("$(date +%s)")
  delay=$(( delay * 2 > max_backoff ? max_backoff : delay * 2 ))
done
