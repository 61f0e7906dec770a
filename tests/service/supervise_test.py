"""cluster/supervise.sh on stand-in launch commands (no MPI): restart with back-off after a
failure, no restart after a stop on request, giving up on repeated start failures and past the
restart limit, a drain on SIGTERM through the coordinator's pid from its ready line, and the
stop timeout. The real service under the supervisor is in service_faults.py."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SUPERVISE = os.path.join(HERE, "..", "..", "cluster", "supervise.sh")

# A stand-in service: counts its runs in $RUNS; fails (status 3) after its ready line while the
# count is below $FAIL_RUNS; then serves until SIGTERM, and drains with status 0 (or, with
# $STUBBORN set, ignores SIGTERM, it and its coordinator).
FAKE = r"""
n=$(( $(cat "$RUNS" 2>/dev/null || echo 0) + 1 )); echo $n > "$RUNS"
if [ -n "$STUBBORN" ]; then trap '' TERM; fi
if [ "${NEVER_READY:-0}" = 1 ]; then echo "no ready line"; exit 1; fi
if [ "${EXIT_ZERO:-0}" = 1 ]; then echo "millipede-coordinator: ready: model m pid $$"; exit 0; fi
if [ $n -le "${FAIL_RUNS:-0}" ]; then
  echo "millipede-coordinator: ready: model m pid $$"; sleep 0.3; exit 3
fi
bash -c '
  if [ -n "$STUBBORN" ]; then trap "echo ignoring" TERM; else trap "echo drained; exit 0" TERM; fi
  echo "millipede-coordinator: ready: model m (context 1) pid $$"
  while true; do sleep 0.1; done' &
wait $!
wait $!
"""


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


def start(tmp, env, *args):
    env = dict(os.environ, RUNS=os.path.join(tmp, "runs"), **env)
    if os.path.exists(env["RUNS"]):
        os.remove(env["RUNS"])
    cmd = ["bash", SUPERVISE, "--backoff-s", "1", "--max-backoff-s", "2", *args,
           "--", "bash", "-c", FAKE]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def runs(tmp):
    with open(os.path.join(tmp, "runs")) as f:
        return int(f.read())


def finish(p, timeout=30):
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        raise Failure(f"the supervisor did not end within {timeout} s:\n{out}")
    return p.returncode, out


def wait_for(tmp, n, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if runs(tmp) >= n:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise Failure(f"run {n} did not start within {timeout} s")


def test_restart_then_drain(tmp):
    """Two failures, restarted after 1 s then 2 s; SIGTERM drains the third run: status 0."""
    p = start(tmp, {"FAIL_RUNS": "2"})
    wait_for(tmp, 3)
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    rc, out = finish(p)
    check(rc == 0 and runs(tmp) == 3, f"rc {rc}, runs {runs(tmp)}:\n{out}")
    check("restarting in 1 s" in out and "restarting in 2 s" in out, f"back-off:\n{out}")
    check("SIGTERM to the coordinator" in out and "drained" in out, f"no drain:\n{out}")


def test_stop_on_request_is_not_restarted(tmp):
    rc, out = finish(start(tmp, {"EXIT_ZERO": "1"}))
    check(rc == 0 and runs(tmp) == 1 and "not restarting" in out, f"rc {rc}:\n{out}")


def test_start_failures_give_up(tmp):
    rc, out = finish(start(tmp, {"NEVER_READY": "1"}, "--max-start-failures", "2"))
    check(rc == 1 and runs(tmp) == 2 and "before it was ready, 2 times in a row" in out,
          f"rc {rc}, runs {runs(tmp)}:\n{out}")


def test_restart_limit(tmp):
    rc, out = finish(start(tmp, {"FAIL_RUNS": "100"}, "--max-restarts", "2", "--window-s", "60"))
    check(rc == 3 and runs(tmp) == 3 and "2 restarts within 60 s: giving up" in out,
          f"rc {rc}, runs {runs(tmp)}:\n{out}")


def test_stop_while_waiting_to_restart(tmp):
    """A stop between a failure and the restart: nothing runs, the stop succeeds (status 0)."""
    p = start(tmp, {"FAIL_RUNS": "100"}, "--backoff-s", "3")
    wait_for(tmp, 1)
    # The failure comes 0.3 s after the start; the restart 3 s after it.
    time.sleep(1.5)
    p.send_signal(signal.SIGTERM)
    rc, out = finish(p)
    check(rc == 0 and runs(tmp) == 1 and "stopped while waiting to restart" in out,
          f"rc {rc}, runs {runs(tmp)}:\n{out}")


def test_stop_timeout(tmp):
    """A launch command that ignores SIGTERM: past --stop-timeout-s its whole session gets
    SIGTERM, then SIGKILL 10 s later."""
    p = start(tmp, {"STUBBORN": "1"}, "--stop-timeout-s", "1")
    wait_for(tmp, 1)
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    rc, out = finish(p, timeout=40)
    check(rc == 128 + signal.SIGKILL and "the drain took over 1 s" in out and
          "SIGKILL to the launch command" in out, f"rc {rc}:\n{out}")


def test_bad_arguments(tmp):
    for args in (["--backoff-s", "x", "--", "true"], ["--bogus"], []):
        r = subprocess.run(["bash", SUPERVISE, *args], capture_output=True, text=True, timeout=10)
        check(r.returncode == 2 and r.stderr, f"{args}: rc {r.returncode} {r.stderr}")


def test_systemd_unit(tmp):
    """The unit file parses (where systemd-analyze exists) and runs this supervisor."""
    unit = os.path.join(HERE, "..", "..", "cluster", "systemd", "millipede.service")
    with open(unit) as f:
        text = f.read()
    check("cluster/supervise.sh" in text and "KillMode=mixed" in text, "the unit's ExecStart")
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        print("  (no systemd-analyze: the unit's syntax was not checked)")
        return
    r = subprocess.run([analyze, "verify", unit], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "millipede.service" not in r.stderr,
          f"systemd-analyze verify: {r.returncode} {r.stderr}")


def main():
    tests = [test_restart_then_drain, test_stop_on_request_is_not_restarted,
             test_start_failures_give_up, test_restart_limit, test_stop_while_waiting_to_restart,
             test_stop_timeout,
             test_bad_arguments, test_systemd_unit]
    failed = 0
    for t in tests:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.time()
            try:
                t(tmp)
                print(f"PASS {t.__name__} ({time.time() - t0:.1f} s)")
            except Failure as e:
                failed += 1
                print(f"FAIL {t.__name__}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
