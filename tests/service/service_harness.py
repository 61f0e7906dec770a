"""Starts the service under mpirun (1 coordinator + N workers on loopback) and drives it with the
`millipede` client. Shared by the service test scenarios."""

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request

# Extra worker flags for every scenario, e.g. "--backend cuda" to run them on a GPU machine.
EXTRA_WORKER_ARGS = os.environ.get("MILLIPEDE_TEST_WORKER_ARGS", "").split()

MPI_ENV = {
    # OpenMPI refuses root and more ranks than cores unless told; CI machines are small.
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
}


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


class Result:
    def __init__(self, proc_result):
        self.rc = proc_result.returncode
        self.out = proc_result.stdout
        self.err = proc_result.stderr

    def json(self):
        return json.loads(self.out)

    def __repr__(self):
        return f"rc={self.rc} stdout={self.out[-400:]!r} stderr={self.err[-800:]!r}"


class Service:
    """One mpirun launch: coordinator (world rank 0) and `workers` worker ranks."""

    def __init__(self, bin_dir, model, workers=2, coordinator_args=(), worker_args=(),
                 http=False):
        self.bin_dir = bin_dir
        self.model = model
        env = dict(os.environ, **MPI_ENV)
        # Scenarios about something else must not see a 503 because a loaded test machine held
        # a heartbeat back past the default 1.5 s; the health scenarios set their own timeouts.
        if not any(a in coordinator_args for a in ("--worker-suspect-s", "--worker-timeout-s")):
            coordinator_args = [*coordinator_args, "--worker-suspect-s", "5"]
        # --enable-recovery: a dead worker does not make mpirun kill the coordinator at once, so
        # the coordinator can tell its clients before it exits.
        cmd = ["mpirun", "--enable-recovery", "-np", "1",
               os.path.join(bin_dir, "millipede-coordinator"), "--model", model,
               "--rpc", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
               "--http", "127.0.0.1:0" if http else "off",
               *coordinator_args, ":", "-np", str(workers),
               os.path.join(bin_dir, "millipede-worker"), "--model", model,
               *EXTRA_WORKER_ARGS, *worker_args]
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        deadline = time.time() + 60
        while not self.ready.wait(0.1):
            if self.proc.poll() is not None or time.time() > deadline:
                self.kill()
                self.reader.join(5)
                raise Failure("the service did not become ready:\n" + self.log())
        check(self.proc.poll() is None, "the service exited at start:\n" + self.log())

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            m = re.search(r"coordinator: rpc ([^\s,]+):(\d+)", line)
            if m:
                self.server = f"{m.group(1)}:{m.group(2)}"
                self.metrics_url = re.search(r"metrics ([^\s,]+)", line).group(1)
                h = re.search(r", http ([^\s,]+)", line)
                self.http = h.group(1) if h else None
                self.ready.set()
            m = re.search(r"ready: .* pid (\d+)", line)
            if m:
                self.coordinator_pid = int(m.group(1))
            m = re.search(r"millipede-worker rank (\d+) pid (\d+)", line)
            if m:
                self.worker_pids = getattr(self, "worker_pids", {})
                self.worker_pids[int(m.group(1))] = int(m.group(2))

    def log(self, n=60):
        return "".join(self.lines[-n:])

    def client(self, *args, stdin=None, timeout=60):
        cmd = [os.path.join(self.bin_dir, "millipede"), args[0], "--server", self.server,
               *args[1:]]
        return Result(subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout,
                                     text=not isinstance(stdin, bytes)))

    def client_bg(self, *args):
        cmd = [os.path.join(self.bin_dir, "millipede"), args[0], "--server", self.server,
               *args[1:]]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def submit(self, *args, **kw):
        return self.client("submit", *args, **kw)

    def workers(self):
        r = self.client("workers")
        check(r.rc == 0, f"workers failed: {r}")
        return r.json()

    def kv_bytes(self):
        return [w["kv_bytes_gpu"] + w["kv_bytes_host"] for w in self.workers()]

    def wait_kv(self, predicate, what, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            kv = self.kv_bytes()
            if predicate(kv):
                return kv
            time.sleep(0.05)
        raise Failure(f"worker KV never {what}: {self.kv_bytes()}")

    def metrics(self):
        """The /metrics page as {(name, labels): value}."""
        body = urllib.request.urlopen(self.metrics_url, timeout=10).read().decode()
        out = {}
        for line in body.splitlines():
            m = re.match(r"([a-z_:]+)(\{[^}]*\})? (\S+)$", line)
            if m:
                out[(m.group(1), m.group(2) or "")] = float(m.group(3))
        return out

    def metric(self, name, label_fragment=""):
        """The sum of `name`'s series whose labels contain `label_fragment`."""
        return sum(v for (n, labels), v in self.metrics().items()
                   if n == name and label_fragment in labels)

    def status(self, job):
        r = self.client("status", str(job))
        check(r.rc == 0, f"status failed: {r}")
        return r.json()

    def terminate(self):
        os.kill(self.coordinator_pid, signal.SIGTERM)

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failure(f"the service did not exit within {timeout} s:\n" + self.log())

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        """Clean shutdown: SIGTERM to the coordinator, which drains and stops the workers."""
        if self.proc.poll() is None:
            self.terminate()
            rc = self.wait(30)
            check(rc == 0, f"the service exited with {rc} after SIGTERM:\n" + self.log())


def offline(bin_dir, model, args, ranks=1):
    """The offline engine's answer (millipede-run --json) for the same prompt and settings."""
    cmd = [os.path.join(bin_dir, "millipede-run"), "--model", model, "--json", *args]
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks), *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, **MPI_ENV))
    check(r.returncode == 0, f"millipede-run failed: {r.stderr}")
    return json.loads(r.stdout)


def make_model(bin_dir, out, layers=8, context=2048):
    """A tiny random model with a trained tokenizer (cached in `out`)."""
    if not os.path.exists(os.path.join(out, "config.json")):
        r = subprocess.run([os.path.join(bin_dir, "millipede-mkmodel"), "--preset", "tiny",
                            "--out", out, "--seed", "3", "--num-layers", str(layers),
                            "--max-position-embeddings", str(context)],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"mkmodel failed: {r.stderr}")
    return out


def read_until(stream, pattern, timeout):
    """Reads `stream` char by char until `pattern` (a regex) matches what was read."""
    got = ""
    deadline = time.time() + timeout
    result = {}

    def pump():
        nonlocal got
        while True:
            c = stream.read(1)
            if not c:
                return
            got += c
            m = re.search(pattern, got)
            if m:
                result["m"] = m
                return

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    t.join(max(0, deadline - time.time()))
    if "m" not in result:
        raise Failure(f"did not see {pattern!r} within {timeout} s; got {got[-400:]!r}")
    return result["m"]
