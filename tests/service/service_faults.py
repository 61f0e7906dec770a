"""Failures and coming back: health that turns within about two seconds of a lost worker, exit
statuses, the supervisor's restart under load, and a fault-injection suite (each rank killed in
turn during prefill, decode and drain; a worker stopped and resumed; a client that does not read
its stream). Every case ends with the service serving (or restarted), and no client is told a
job finished that did not finish."""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

from service_harness import EXTRA_WORKER_ARGS, MPI_ENV, Failure, Service, check

HERE = os.path.dirname(os.path.abspath(__file__))
SUPERVISE = os.path.join(HERE, "..", "..", "cluster", "supervise.sh")


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def ids_prompt(n, vocab=400):
    return [3 + (i * 7) % (vocab - 3) for i in range(n)]


def http_request(address, method, path, body=None, timeout=30):
    """(status, headers, parsed JSON or text) of one request; raises OSError if unreachable."""
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read().decode()
        try:
            data = json.loads(data)
        except ValueError:
            pass
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


class StreamClient(threading.Thread):
    """One streamed completion of `max_tokens` tokens (ignore_eos). Records what the client saw:
    the tokens, whether the service said it finished, the error it sent, or the connection's
    end. `started` is set once the first token arrived."""

    def __init__(self, address, prompt, max_tokens):
        super().__init__(daemon=True)
        self.address, self.prompt, self.max_tokens = address, prompt, max_tokens
        self.tokens = 0
        self.finish_reason = None
        self.done = False  # saw [DONE]
        self.usage_tokens = None
        self.http_status = None
        self.error = None  # the service's error object, or the transport's failure
        self.started = threading.Event()

    def run(self):
        host, port = self.address.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        body = {"model": "model", "prompt": self.prompt, "max_tokens": self.max_tokens,
                "ignore_eos": True, "stream": True, "logprobs": 0,
                "stream_options": {"include_usage": True}}
        try:
            conn.request("POST", "/v1/completions", body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            self.http_status = r.status
            if r.status != 200:
                self.error = json.loads(r.read().decode()).get("error")
                return
            for raw in r:
                self.read_event(raw.decode().strip())
        except (OSError, http.client.HTTPException, ValueError) as e:
            self.error = self.error or {"transport": repr(e)}
        finally:
            conn.close()

    def read_event(self, line):
        if not line.startswith("data: "):
            return
        data = line[len("data: "):]
        if data == "[DONE]":
            self.done = True
            return
        event = json.loads(data)
        if "error" in event:
            self.error = event["error"]
            return
        if event.get("usage"):
            self.usage_tokens = event["usage"]["completion_tokens"]
        for choice in event.get("choices", []):
            lp = choice.get("logprobs") or {}
            self.tokens += len(lp.get("tokens") or [])
            if self.tokens:
                self.started.set()
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def verdict(self):
        """'finished' (every token, and the service said so), 'failed' (an error, or the
        connection ended without a finish); a Failure if the client was told a job finished
        that did not."""
        if self.finish_reason is not None:
            check(self.finish_reason == "length" and self.tokens == self.max_tokens and
                  self.usage_tokens == self.max_tokens,
                  f"a client was told its job finished ({self.finish_reason}) after "
                  f"{self.tokens} of {self.max_tokens} tokens (usage {self.usage_tokens})")
            return "finished"
        check(not self.done or self.error is not None,
              f"a stream ended with [DONE] but neither a finish nor an error ({self.tokens} tokens)")
        return "failed"


def retryable(client):
    """The error a client got when its job was cut short: 503 (before the stream began), the
    service's `unavailable` error event, or the connection ending (the coordinator itself died)."""
    e = client.error
    if e is None:
        return True  # the stream just ended (the coordinator was killed): a client retries
    if "transport" in e:
        return True
    return client.http_status in (200, 503) and e.get("code") == "unavailable"


class Supervised:
    """The service under cluster/supervise.sh and mpirun --enable-recovery, on fixed ports so that
    clients find it again after a restart."""

    def __init__(self, bin_dir, model, workers=2, coordinator_args=(), worker_args=()):
        self.rpc, self.http_port, self.metrics = free_ports(3)
        self.http = f"127.0.0.1:{self.http_port}"
        cmd = ["bash", SUPERVISE, "--backoff-s", "1", "--max-backoff-s", "2",
               "--stop-timeout-s", "30", "--", "mpirun", "--enable-recovery", "-np", "1",
               os.path.join(bin_dir, "millipede-coordinator"), "--model", model,
               "--rpc", f"127.0.0.1:{self.rpc}", "--http", self.http,
               "--metrics", f"127.0.0.1:{self.metrics}", "--worker-timeout-s", "3",
               "--worker-suspect-s", "3",
               *coordinator_args, ":", "-np", str(workers),
               os.path.join(bin_dir, "millipede-worker"), "--model", model,
               "--coordinator-timeout-s", "3", *EXTRA_WORKER_ARGS, *worker_args]
        self.proc = subprocess.Popen(cmd, env=dict(os.environ, **MPI_ENV),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines = []
        self.readies = 0
        self.pids = {}  # world rank -> pid, of the latest start
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_ready(1, 90)

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line)
                m = re.search(r"millipede-worker rank (\d+) pid (\d+)", line)
                if m:
                    self.pids[int(m.group(1))] = int(m.group(2))
                m = re.search(r"millipede-coordinator: ready: .* pid (\d+)", line)
                if m:
                    self.pids[0] = int(m.group(1))
                    self.readies += 1
                self.cond.notify_all()

    def log(self, n=80):
        with self.cond:
            return "".join(self.lines[-n:])

    def wait_ready(self, count, timeout):
        deadline = time.time() + timeout
        with self.cond:
            while self.readies < count:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise Failure(f"the service was not ready (start {count}) within {timeout} s:"
                                  f"\n{self.log()}")
                self.cond.wait(0.2)

    def kill_rank(self, rank, sig=signal.SIGKILL):
        os.kill(self.pids[rank], sig)

    def serves(self, max_tokens=4):
        status, _, answer = http_request(self.http, "POST", "/v1/completions",
                                         {"model": "model", "prompt": ids_prompt(8),
                                          "max_tokens": max_tokens, "ignore_eos": True})
        check(status == 200 and answer["usage"]["completion_tokens"] == max_tokens,
              f"the service does not serve: {status} {answer}")

    def stop(self, expect=0, timeout=60):
        """SIGTERM to the supervisor (as systemd stops it): a drain, then its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failure(f"the supervisor did not stop within {timeout} s:\n{self.log()}")
        if expect is not None:
            check(rc == expect, f"the supervisor exited {rc}, not {expect}:\n{self.log()}")
        return rc

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def poll_until(predicate, timeout, step=0.05):
    """Seconds until predicate() held, or None after `timeout`."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if predicate():
            return time.time() - t0
        time.sleep(step)
    return None


def http_status(address, method, path, body=None):
    try:
        return http_request(address, method, path, body, timeout=5)[0]
    except OSError:
        return None


def scenario_health(bin_dir, model):
    """A worker killed with SIGKILL: /health and /ready turn 503 within about 2 s, new requests
    get 503 with Retry-After at once (no hang), the running job's client gets a retryable error
    at the worker timeout, and mpirun exits non-zero. A worker stopped (SIGSTOP) for 3 s makes
    the probes 503 while it is silent; once resumed, the service is healthy again and the job it
    held finishes in full."""
    svc = Service(bin_dir, model, http=True, coordinator_args=["--worker-timeout-s", "8"])
    try:
        client = StreamClient(svc.http, ids_prompt(16), 1500)
        client.start()
        check(client.started.wait(30), "the job produced no token")
        svc.workers()  # the pids are known
        t0 = time.time()
        os.kill(svc.worker_pids[2], signal.SIGSTOP)
        took = poll_until(lambda: http_status(svc.http, "GET", "/health") == 503, 5)
        check(took is not None and time.time() - t0 < 2.6,
              f"/health still 200 {time.time() - t0:.1f} s after the worker stopped")
        check(http_status(svc.http, "GET", "/ready") == 503, "/ready is not 503")
        status, headers, answer = http_request(svc.http, "POST", "/v1/completions",
                                               {"model": "model", "prompt": "hello",
                                                "max_tokens": 2})
        check(status == 503 and headers.get("retry-after", "").isdigit() and
              "silent" in answer["error"]["message"],
              f"a request while a worker is silent: {status} {headers} {answer}")
        time.sleep(max(0.0, 3 - (time.time() - t0)))
        os.kill(svc.worker_pids[2], signal.SIGCONT)
        back = poll_until(lambda: http_status(svc.http, "GET", "/health") == 200, 5)
        check(back is not None, f"/health did not recover after SIGCONT:\n{svc.log()}")
        client.join(120)
        check(client.verdict() == "finished",
              f"the job held by the stopped worker did not finish: {client.error}")
        check("answers again" in svc.log(200), "no log line for the worker's return")
        check(svc.metric("millipede_request_errors_total", 'reason="unavailable"') >= 1,
              "the refused request is not counted as unavailable")

        client = StreamClient(svc.http, ids_prompt(16), 1900)
        client.start()
        check(client.started.wait(30), "the second job produced no token")
        t0 = time.time()
        os.kill(svc.worker_pids[1], signal.SIGKILL)
        took = poll_until(lambda: http_status(svc.http, "GET", "/health") == 503, 5)
        check(took is not None and time.time() - t0 < 2.6,
              f"/health still 200 {time.time() - t0:.1f} s after a worker died")
        t1 = time.time()
        status, headers, _ = http_request(svc.http, "POST", "/v1/completions",
                                          {"model": "model", "prompt": "hello", "max_tokens": 2})
        check(status == 503 and "retry-after" in headers and time.time() - t1 < 2,
              f"a request after the worker died: {status} {headers}")
        client.join(60)
        check(client.verdict() == "failed" and retryable(client),
              f"the running job's client got no retryable error: {client.error}")
        rc = svc.wait(30)
        check(rc != 0, f"mpirun exited {rc} after a worker died:\n{svc.log()}")
        check("exit code 3" in svc.log(), f"the coordinator's exit code:\n{svc.log()}")
    finally:
        svc.kill()


def scenario_restart(bin_dir, model):
    """Under the supervisor, a worker killed with SIGKILL under load: the clients whose jobs ran
    get a retryable error (none is told its job finished early), the service is serving again
    within a bounded time, and SIGTERM to the supervisor then drains and ends it with status 0."""
    sup = Supervised(bin_dir, model)
    try:
        sup.serves()
        clients = [StreamClient(sup.http, ids_prompt(20 + i), 1800) for i in range(4)]
        for c in clients:
            c.start()
        for c in clients:
            check(c.started.wait(30), "a job produced no token")
        t0 = time.time()
        sup.kill_rank(1)
        for c in clients:
            c.join(60)
            check(not c.is_alive(), "a client still waits after the worker died")
            check(c.verdict() == "failed" and retryable(c),
                  f"a client's job was not failed retryably: {c.error}")
        sup.wait_ready(2, 60)
        took = time.time() - t0
        check(took < 45, f"serving again took {took:.1f} s")
        sup.serves()
        log = sup.log(200)
        check("the service failed with status" in log and "restarting in" in log,
              f"no restart in the supervisor's log:\n{log}")
        print(f"restart: serving again {took:.1f} s after the kill")
    finally:
        try:
            sup.stop(expect=0)
        finally:
            sup.kill()


def kill_during(sup, phase, rank):
    """Kills world rank `rank` while a job is in `phase` (prefill | decode) and checks what the
    client saw. Returns whether the job was still prefilling when the rank died."""
    prompt = ids_prompt(1900) if phase == "prefill" else ids_prompt(12)
    client = StreamClient(sup.http, prompt, 100 if phase == "prefill" else 1500)
    client.start()
    if phase == "prefill":
        time.sleep(0.3)
    else:
        check(client.started.wait(30), "the job produced no token")
    prefilling = not client.started.is_set()
    sup.kill_rank(rank)
    client.join(60)
    check(not client.is_alive(), f"the client still waits after rank {rank} died ({phase})")
    check(client.verdict() == "failed" or phase == "prefill",
          f"the job finished although rank {rank} died during its decode")
    check(client.verdict() == "finished" or retryable(client),
          f"rank {rank} killed during {phase}: not a retryable error: {client.error}")
    return prefilling


def slow_reader(sup):
    """A client that asks for a long stream and never reads it: the service serves others and
    frees the job once the client is given up or gone."""
    host, port = sup.http.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    body = json.dumps({"model": "model", "prompt": ids_prompt(12), "max_tokens": 1900,
                       "ignore_eos": True, "stream": True, "logprobs": 5})
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    try:
        time.sleep(1)
        t0 = time.time()
        sup.serves(max_tokens=8)
        check(time.time() - t0 < 20, "a slow reader held up another client")
    finally:
        s.close()
    # Once it is gone its job ends: the KV of every worker returns to 0.
    health = lambda: http_request(sup.http, "GET", "/health")[2]
    check(poll_until(lambda: health()["running"] == 0, 30) is not None,
          f"the slow reader's job still runs after it left: {health()}")


def scenario_faults(bin_dir, model):
    """Fault injection under the supervisor: each rank (the coordinator, the first and the last
    worker) killed during a prefill and during a decode, each followed by the restart; each rank
    killed during a drain, which ends the supervisor with the failure; a slow stream reader."""
    sup = Supervised(bin_dir, model,
                     coordinator_args=["--max-step-tokens", "32", "--max-running", "8"])
    starts = 1
    try:
        prefills = 0
        for phase in ("prefill", "decode"):
            for rank in (0, 1, 2):
                prefills += kill_during(sup, phase, rank)
                starts += 1
                sup.wait_ready(starts, 60)
                sup.serves()
        print(f"faults: {prefills} of 3 prefill kills hit the prefill")
        slow_reader(sup)
        sup.serves()
    finally:
        try:
            sup.stop(expect=0)
        finally:
            sup.kill()
    for rank in (0, 1, 2):
        sup = Supervised(bin_dir, model, coordinator_args=["--drain-timeout-s", "30"])
        try:
            client = StreamClient(sup.http, ids_prompt(12), 1900)
            client.start()
            check(client.started.wait(30), "the job produced no token")
            sup.proc.send_signal(signal.SIGTERM)
            check(poll_until(lambda: "stopping: draining" in sup.log(), 10) is not None,
                  f"the supervisor did not drain through the coordinator:\n{sup.log()}")
            time.sleep(0.3)
            sup.kill_rank(rank)
            rc = sup.stop(expect=None)
            check(rc != 0, f"a drain that lost rank {rank} ended with status 0:\n{sup.log()}")
            check("restarting in" not in sup.log(200), "the supervisor restarted while stopping")
            client.join(30)
            check(client.verdict() == "failed" and retryable(client),
                  f"rank {rank} killed in the drain: {client.error}")
        finally:
            sup.kill()
