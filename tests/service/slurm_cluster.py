"""A one-node Slurm cluster on this machine for the Slurm test: its own munged (a fresh key and
socket), slurmctld and slurmd, all in the foreground under a temporary folder, on free ports,
with a generated slurm.conf. No systemd and nothing outside the folder is used; stop() ends
every job and daemon it started."""

import os
import pwd
import shutil
import socket
import subprocess
import time

from service_harness import Failure, check

TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scancel", "scontrol", "srun")
# Two fake GPUs: gres/gpu needs device files, and the CPU service does not open them. Slurm logs
# that they are not devices and counts them all the same, so the job script's GPU request
# (--gpus-per-node) is scheduled as on a GPU node.
GPUS = 2
# More CPUs than a small CI machine has (slurmd is told to trust the configuration): a
# coordinator and two workers need three tasks.
CPUS = 4


def missing_tools():
    """The Slurm and MUNGE programs not on PATH (or in /usr/sbin)."""
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin" + os.pathsep + "/sbin"
    return [t for t in TOOLS if shutil.which(t, path=path) is None]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """munged + slurmctld + slurmd for one node named after this host; `env` is what clients
    (sbatch, scontrol, the job itself) need to reach it."""

    def __init__(self, root):
        self.root = root
        self.host = socket.gethostname().split(".")[0]
        self.procs = []
        self.jobs = []
        for d in ("", "munge", "run", "state", "spool", "log"):
            os.makedirs(os.path.join(root, d), exist_ok=True)
        # munged wants its socket's folders open to all and its key private.
        for d in ("", "run", "log"):
            os.chmod(os.path.join(root, d), 0o755)
        os.chmod(os.path.join(root, "munge"), 0o700)
        self.socket = os.path.join(root, "run", "munge.socket")
        self.conf = os.path.join(root, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        for var in [v for v in self.env if v.startswith("SLURM_") and v != "SLURM_CONF"]:
            del self.env[var]  # the test itself may run inside a Slurm job
        self.env["PATH"] = self.env.get("PATH", "") + ":/usr/sbin:/sbin"

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def start(self):
        self._start_munge()
        self._write_conf()
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf])
        self._spawn("slurmd", ["slurmd", "-D", "-f", self.conf, "-N", self.host])
        self._wait_idle(30)

    def _spawn(self, name, cmd):
        out = open(self.path("log", name + ".out"), "w")
        proc = subprocess.Popen(cmd, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
        self.procs.append((name, proc))
        return proc

    def _start_munge(self):
        key = self.path("munge", "munge.key")
        r = subprocess.run(["mungekey", "--create", "--keyfile", key], env=self.env,
                           capture_output=True, text=True)
        check(r.returncode == 0, f"mungekey failed: {r.stderr}")
        self._spawn("munged", ["munged", "--foreground", "--socket", self.socket,
                               "--key-file", key, "--pid-file", self.path("run", "munged.pid"),
                               "--log-file", self.path("log", "munged.log"),
                               "--seed-file", self.path("munge", "seed")])
        deadline = time.time() + 10
        while not os.path.exists(self.socket):
            check(time.time() < deadline, "munged did not start:\n" + self.logs())
            time.sleep(0.1)

    def _write_conf(self):
        p = self.path
        gpu_files = [p("run", f"gpu{i}") for i in range(GPUS)]
        for f in gpu_files:
            open(f, "w").close()
        with open(p("gres.conf"), "w") as f:
            f.write("AutoDetect=off\n")
            f.write(f"NodeName={self.host} Name=gpu File={p('run', 'gpu')}[0-{GPUS - 1}]\n")
        lines = [
            "ClusterName=millipede-test",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            f"SlurmUser={pwd.getpwuid(os.getuid()).pw_name}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.socket}",
            f"StateSaveLocation={p('state')}",
            f"SlurmdSpoolDir={p('spool')}",
            f"SlurmctldPidFile={p('run', 'slurmctld.pid')}",
            f"SlurmdPidFile={p('run', 'slurmd.pid')}",
            f"SlurmctldLogFile={p('log', 'slurmctld.log')}",
            f"SlurmdLogFile={p('log', 'slurmd.log')}",
            "MailProg=/bin/true",
            # No cgroups: the machine may be a container without a delegated hierarchy.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "KillWait=30",
            "GresTypes=gpu",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={CPUS} RealMemory=1000 "
            f"Gres=gpu:{GPUS} State=UNKNOWN",
            f"PartitionName=test Nodes={self.host} Default=YES MaxTime=INFINITE State=UP",
        ]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _wait_idle(self, timeout):
        deadline = time.time() + timeout
        state = ""
        while time.time() < deadline:
            for name, proc in self.procs:
                check(proc.poll() is None, f"{name} exited with {proc.returncode}:\n" + self.logs())
            r = self.run(["sinfo", "-h", "-N", "-o", "%t"], check_rc=False)
            state = r.stdout.strip()
            if state == "idle":
                return
            time.sleep(0.3)
        raise Failure(f"the node never became idle (state {state!r}):\n" + self.logs())

    def run(self, cmd, check_rc=True, env=None, timeout=30):
        r = subprocess.run(cmd, env=env or self.env, capture_output=True, text=True,
                           timeout=timeout)
        if check_rc:
            check(r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr}")
        return r

    def sbatch(self, script, args, env):
        """Submits `script`; returns the job id."""
        r = self.run(["sbatch", "--parsable", *args, script], env=dict(self.env, **env))
        job = r.stdout.strip().split(";")[0]
        self.jobs.append(job)
        return job

    def job_fields(self, job):
        """`scontrol show job` as {field: value}."""
        r = self.run(["scontrol", "show", "job", "-o", job])
        fields = {}
        for token in r.stdout.split():
            key, _, value = token.partition("=")
            fields.setdefault(key, value)
        return fields

    def wait_job_end(self, job, timeout):
        """Waits until the job has left the node; returns its final fields."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            fields = self.job_fields(job)
            if fields["JobState"] not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
                return fields
            time.sleep(0.3)
        raise Failure(f"job {job} did not end within {timeout} s: {self.job_fields(job)}")

    def logs(self, lines=25):
        out = []
        for name in ("munged.out", "munged.log", "slurmctld.out", "slurmctld.log", "slurmd.out",
                     "slurmd.log"):
            f = self.path("log", name)
            if os.path.exists(f):
                with open(f, errors="replace") as fh:
                    tail = fh.readlines()[-lines:]
                out.append(f"--- {name}\n" + "".join(tail))
        return "\n".join(out)

    def stop(self):
        """Kills this cluster's jobs (and waits for them to leave), then its daemons."""
        live = [j for j in self.jobs if self._job_alive(j)]
        for job in live:
            self.run(["scancel", "--signal=KILL", "--full", job], check_rc=False)
        deadline = time.time() + 40
        while live and time.time() < deadline:
            live = [j for j in live if self._job_alive(j)]
            time.sleep(0.3)
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in reversed(self.procs):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _job_alive(self, job):
        try:
            state = self.job_fields(job).get("JobState", "")
        except (Failure, subprocess.TimeoutExpired):
            return False
        return state in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")
