"""The service as a Slurm batch job: starts a one-node Slurm cluster on this machine
(slurm_cluster.py), submits cluster/slurm/millipede.sbatch with the CPU backend (a coordinator
and two workers on the node's two fake GPUs), serves requests over HTTP and RPC and stops it the
documented ways:
  - srun --mpi=pmix, plain `scancel`: a request in flight finishes, new ones are refused while
    the service drains, every rank exits 0 (the job is CANCELLED with exit code 0:0);
  - srun, `scancel --signal=TERM` (the tasks) and `scancel --batch --signal=TERM` (the script,
    which passes it on): the service drains and the job is COMPLETED;
  - mpirun inside the allocation with the model staged to a node-local folder,
    `scancel --batch --signal=TERM`: likewise.

usage: slurm_test.py --bin DIR --work DIR --script FILE
Exits 77 (a skip for ctest) when the Slurm or MUNGE programs are not installed.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from service_harness import Failure, check, make_model
from slurm_cluster import GPUS, SlurmCluster, missing_tools

SKIP = 77
PROMPT = "The quick brown fox jumps over the lazy dog"


class ServiceJob:
    """One submission of the job script; reads the coordinator's addresses from its output."""

    def __init__(self, cluster, script, bin_dir, model, launcher, extra_env=None):
        self.cluster = cluster
        self.bin_dir = bin_dir
        self.output = cluster.path(f"service-{len(cluster.jobs)}-{launcher}.log")
        env = {"MILLIPEDE_MODEL": model, "MILLIPEDE_BIN": bin_dir, "MILLIPEDE_BACKEND": "cpu",
               "MILLIPEDE_LAUNCHER": launcher, "MILLIPEDE_RPC": "127.0.0.1:0",
               "MILLIPEDE_HTTP": "127.0.0.1:0", "MILLIPEDE_METRICS": "127.0.0.1:0",
               **(extra_env or {})}
        # The script's own #SBATCH lines ask for 8-GPU nodes; this node has GPUS.
        self.job = cluster.sbatch(script, [f"--gpus-per-node={GPUS}",
                                           f"--ntasks-per-node={GPUS + 1}",
                                           f"--output={self.output}"], env)

    def log(self):
        if not os.path.exists(self.output):
            return ""
        with open(self.output, errors="replace") as f:
            return f.read()

    def wait_ready(self, timeout=90):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(r"coordinator: rpc ([^\s,]+), http ([^\s,]+)", self.log())
            if m:
                self.rpc, self.http = m.group(1), m.group(2)
                return
            state = self.cluster.job_fields(self.job)["JobState"]
            check(state in ("PENDING", "CONFIGURING", "RUNNING"),
                  f"job {self.job} is {state} before the service was ready:\n{self.log()}")
            time.sleep(0.2)
        raise Failure(f"the service in job {self.job} was not ready within {timeout} s:\n"
                      + self.log() + "\n" + self.cluster.logs())

    def client(self, *args, timeout=60):
        cmd = [os.path.join(self.bin_dir, "millipede"), args[0], "--server", self.rpc, *args[1:]]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)

    def complete_http(self, max_tokens):
        body = json.dumps({"model": "model", "prompt": PROMPT, "max_tokens": max_tokens,
                           "temperature": 0, "ignore_eos": True}).encode()
        req = urllib.request.Request(f"http://{self.http}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as reply:
            return json.loads(reply.read())

    def wait_end(self, timeout=60):
        fields = self.cluster.wait_job_end(self.job, timeout)
        # The job's output file is complete once the batch step has ended.
        return fields, self.log()


def command_lines():
    """Every process's arguments, from /proc."""
    lines = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                lines.append([a.decode(errors="replace") for a in f.read().split(b"\0")])
        except OSError:
            pass
    return lines


def wait_decoding(svc, job_id, tokens, timeout=30):
    """Polls `millipede status` until the job has generated `tokens` tokens."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = svc.client("status", str(job_id))
        if r.returncode == 0 and json.loads(r.stdout).get("generated_tokens", 0) >= tokens:
            return
        time.sleep(0.05)
    raise Failure(f"job {job_id} did not reach {tokens} tokens:\n{svc.log()}")


def wait_not_accepting(svc, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if svc.client("health").returncode != 0:
            return
        time.sleep(0.05)
    raise Failure(f"the service still accepted jobs {timeout} s after scancel:\n{svc.log()}")


def scenario_srun_scancel(cluster, script, bin_dir, model):
    """srun --mpi=pmix; a plain scancel drains: the request in flight finishes whole."""
    svc = ServiceJob(cluster, script, bin_dir, model, "srun")
    svc.wait_ready()
    check(re.search(r"ready: .* on 2 cpu worker\(s\)", svc.log()), "not 2 workers:\n" + svc.log())
    answer = svc.complete_http(8)
    check(answer["usage"]["completion_tokens"] == 8 and answer["choices"][0]["text"],
          f"HTTP completion: {answer}")

    total = 1500
    long_job = subprocess.Popen(
        [os.path.join(bin_dir, "millipede"), "submit", "--server", svc.rpc, "--prompt", PROMPT,
         "--max-tokens", str(total), "--ignore-eos", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The HTTP request was job 1.
    wait_decoding(svc, 2, 10)
    cluster.run(["scancel", svc.job])
    wait_not_accepting(svc)
    refused = svc.client("submit", "--prompt", PROMPT, "--max-tokens", "4")
    check(refused.returncode != 0 and "FAILED_PRECONDITION" in refused.stderr,
          f"a job submitted while draining: rc {refused.returncode} {refused.stderr}")
    out, err = long_job.communicate(timeout=60)
    check(long_job.returncode == 0, f"the job in flight at scancel failed: {err}")
    got = json.loads(out)
    check(got["finish_reason"] == "length" and len(got["ids"]) == total,
          f"the job in flight at scancel: {got['finish_reason']}, {len(got['ids'])} tokens")

    fields, log = svc.wait_end()
    for line in ("millipede.sbatch: SIGTERM: draining the service",
                 "millipede-coordinator: drained, workers stopped",
                 "millipede.sbatch: the service exited with status 0"):
        check(line in log, f"no {line!r} in the job's output:\n{log}")
    check(fields["JobState"] == "CANCELLED" and fields["ExitCode"] == "0:0",
          f"job {svc.job}: {fields['JobState']} exit code {fields['ExitCode']}:\n{log}")
    print(f"srun job {svc.job}: served, drained on scancel, CANCELLED 0:0")


def scenario_signal(cluster, script, bin_dir, model, launcher, scancel_args, stage=False):
    """scancel SCANCEL_ARGS JOB (a SIGTERM that no SIGKILL follows) drains and the job is
    COMPLETED; with `stage`, the ranks read a node-local copy of the model."""
    extra = {"MILLIPEDE_STAGE_DIR": cluster.path("stage")} if stage else {}
    svc = ServiceJob(cluster, script, bin_dir, model, launcher, extra)
    svc.wait_ready()
    if stage:
        staged = os.path.join(cluster.path("stage"), os.path.basename(model))
        check(os.path.exists(os.path.join(staged, "config.json")), f"no staged model at {staged}")
        check(any(["--model", staged] == args[i:i + 2] for args in command_lines()
                  for i in range(len(args))), "no process runs the staged model")
    r = svc.client("submit", "--prompt", PROMPT, "--max-tokens", "16", "--ignore-eos", "--json")
    check(r.returncode == 0 and len(json.loads(r.stdout)["ids"]) == 16, f"RPC submit: {r.stderr}")

    cluster.run(["scancel", *scancel_args, svc.job])
    fields, log = svc.wait_end()
    lines = ["millipede-coordinator: drained, workers stopped",
             "millipede.sbatch: the service exited with status 0"]
    if "--batch" in scancel_args:  # the script itself got the signal and passed it on
        lines.append("millipede.sbatch: SIGTERM: draining the service")
    for line in lines:
        check(line in log, f"no {line!r} in the job's output:\n{log}")
    check(fields["JobState"] == "COMPLETED" and fields["ExitCode"] == "0:0",
          f"job {svc.job}: {fields['JobState']} exit code {fields['ExitCode']}:\n{log}")
    print(f"{launcher} job {svc.job}: served{' from the staged model' if stage else ''}, "
          f"drained on scancel {' '.join(scancel_args)}, COMPLETED 0:0")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--script", required=True)
    args = parser.parse_args()
    missing = missing_tools()
    if missing:
        print(f"slurm_test: skipped: {' '.join(missing)} not installed "
              "(Debian: slurmctld slurmd slurm-client munge)")
        return SKIP
    os.makedirs(args.work, exist_ok=True)
    model = make_model(args.bin, os.path.join(args.work, "model"))
    # Short paths: the MUNGE socket's must fit a socket address.
    root = tempfile.mkdtemp(prefix="millipede-slurm-")
    cluster = SlurmCluster(root)
    try:
        cluster.start()
        scenario_srun_scancel(cluster, args.script, args.bin, model)
        scenario_signal(cluster, args.script, args.bin, model, "srun", ["--signal=TERM"])
        scenario_signal(cluster, args.script, args.bin, model, "srun", ["--batch", "--signal=TERM"])
        scenario_signal(cluster, args.script, args.bin, model, "mpirun",
                        ["--batch", "--signal=TERM"], stage=True)
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAILED: {e}\n{cluster.logs()}")
        return 1
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    print("slurm_test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
