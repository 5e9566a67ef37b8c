"""A kept pod of a Kubernetes warm pool, from the inside (docs/warm-start.md "Kubernetes pools").

Runs in the pod with the image's own ``jupyter_disttrain`` (the zygote is ``backends/warm/``'s):

- ``serve KEEP REPLICA``: what the pod wrapper becomes (``os.execv``, so it stays the pod's
  entry) once its job's ranks ended and its exit is recorded, when the job asked to keep its pods.
  It starts the zygote in a private dir of the pod's own (torch imported, no CUDA initialised),
  listens on a Unix socket there (0600: never a port another pod could reach), and for each
  forked job runs the job's own pod wrapper with the job's variables: the wrapper forks its
  agent from the zygote instead of starting torchrun, and writes the job's logs, samples and
  exit record where a cold pod of the job would. It ends after ``KEEP`` seconds with no job
  (the pod's own clock: the notebook may be gone), so the pod, and its Job, complete.
The notebook reaches it only through ``pods/exec`` of the relay (``podscript.POOL_RELAY``): one
request to the pod's socket, its answer as one JSON line on stdout.

Requests: ``{"op": "spawn", "job", "args", "env", "from_pod"}`` (``args``: the job's wrapper
arguments; ``env``: its container's variables, ``from_pod``: those the pod sets itself, kept),
``{"op": "signal", "job", "signal"}``, ``{"op": "status"}``, ``{"op": "withdraw", "job"}`` (a job of
several nodes that another pod of the pool refused: its wrapper here is stopped and its log and
exit record removed, so that the job runs cold as if it had never forked here).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...runtime import contract
from ..warm.plan import IDLE_ENV, WarmPlan, fingerprint, private_dir, start_for, zygote_dir
from ..warm.warmagent import WarmAgent, spawn
from ..warm.zygote_protocol import answer, listen, read_request
from .podscript import POD_WRAPPER
from .podscript import POOL_ENV_NAMES_ENV as ENV_NAMES_ENV
from .podscript import POOL_MODULE as MODULE
from .podscript import POOL_PLAN_ENV as PLAN_ENV

ASK_TIMEOUT = 30.0
WITHDRAW_WAIT = 10.0  # seconds a withdrawn job's wrapper has to stop its agent before it is killed


def pool_dir() -> Path:
    """This pod's private dir: its zygote and its socket (``podscript.POOL_RELAY`` finds it so)."""
    host = os.environ.get("HOSTNAME") or socket.gethostname()
    return private_dir(zygote_dir() / f"k8s-{host}"[:60])


def say(line: str) -> None:
    print(f"jupyter-disttrain: pool pod: {line}", flush=True)


class PoolPod:
    def __init__(self, keep: float, replica: str, plan: WarmPlan, env: dict[str, str]) -> None:
        self.keep = keep
        self.replica = replica  # the pod's replica name (its hostname minus the first job's id)
        self.plan = plan
        self.base = env  # the pod's environment, less the first job's own variables
        self.lock = threading.Lock()
        self.jobs: dict[str, subprocess.Popen[bytes]] = {}
        # The last job's wrapper's files (its log, its exit record): a withdrawn job's go.
        self.files: tuple[str, list[Path]] = ("", [])
        self.last_active = time.monotonic()

    def serve(self, path: Path) -> int:
        server = listen(path)
        server.settimeout(1.0)
        say(f"kept for {self.keep:.0f} s when idle; re-runs of this shape fork here")
        while not self._idle_past():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()
        say(f"no job for {self.keep:.0f} s: ending (the pod completes)")
        server.close()
        return 0

    def _idle_past(self) -> bool:
        with self.lock:
            return not self.jobs and time.monotonic() - self.last_active > self.keep

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(ASK_TIMEOUT)
            try:
                said = self._handle(read_request(conn))
            except Exception as exc:  # whatever went wrong, the asker hears it (and runs cold)
                said = {"ok": False, "error": str(exc) or type(exc).__name__}
            answer(conn, said)

    def _handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "status":
            with self.lock:
                idle = None if self.jobs else time.monotonic() - self.last_active
                return {"ok": True, "jobs": sorted(self.jobs), "idle_for": idle, "keep": self.keep}
        if op == "signal":
            with self.lock:
                proc = self.jobs.get(str(request["job"]))
            if proc is None:
                return {"ok": False, "error": f"job {request['job']} does not run in this pod"}
            proc.send_signal(int(request["signal"]))
            return {"ok": True}
        if op == "spawn":
            return self._spawn(str(request["job"]), list(request["args"]), request)
        if op == "withdraw":
            return self._withdraw(str(request["job"]))
        return {"ok": False, "error": f"unknown op {op!r}"}

    def _spawn(self, job: str, args: list[str], request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if self.jobs:
                return {"ok": False, "error": f"busy: job {', '.join(self.jobs)} runs in this pod"}
            env = self._env(dict(request["env"]), list(request.get("from_pod", ())))
            args[2] = "=" + args[2] + self.replica  # the replica is the pod's, named for this job
            proc = subprocess.Popen([sys.executable, "-u", "-c", POD_WRAPPER, *args], env=env)
            self.jobs[job] = proc
            log_dir, exit_dir, name = args[0], args[1], args[2][1:]
            self.files = (
                job,
                [Path(d, name + e) for d, e in ((log_dir, ".log"), (exit_dir, ".json")) if d != "-"],
            )
        threading.Thread(target=self._wait, args=(job, proc), daemon=True).start()
        say(f"job {job} forked here (wrapper pid {proc.pid})")
        return {"ok": True, "pid": proc.pid, "pod": os.environ.get("HOSTNAME"), "replica": args[2][1:]}

    def _withdraw(self, job: str) -> dict[str, Any]:
        with self.lock:
            proc, files = self.jobs.get(job), self.files[1] if self.files[0] == job else []
        if proc is not None:
            proc.send_signal(signal.SIGTERM)  # passed on to its agent, as a cancel is
            try:
                proc.wait(WITHDRAW_WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for path in files:
            path.unlink(missing_ok=True)
        say(f"job {job} withdrawn: another pod of the pool refused it")
        return {"ok": True}

    def _env(self, job_env: dict[str, str], from_pod: list[str]) -> dict[str, str]:
        env = dict(self.base)
        env.update({k: os.environ[k] for k in from_pod if k in os.environ})
        env.update(job_env)
        # As the pod's entry script does: the job's own path first, then the image's.
        image_path = self.base.get("PYTHONPATH", "")
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (job_env.get(contract.PYTHONPATH_ENV, ""), image_path) if p
        )
        env[PLAN_ENV] = json.dumps(self.plan.to_json())
        return env

    def _wait(self, job: str, proc: subprocess.Popen[bytes]) -> None:
        code = proc.wait()
        say(f"job {job} ended (exit code {code})")
        with self.lock:
            self.jobs.pop(job, None)
            self.last_active = time.monotonic()


def fork_agent(plan_json: str, torchrun: list[str], env: dict[str, str], log: str) -> WarmAgent:
    """A forked job's wrapper: its torchrun agent from the pod's zygote (``torchrun`` is the
    command the wrapper would run; the image's rank wrapper runs the ranks)."""
    from ..agents.torchrun import WORKER_MODULE

    plan = WarmPlan.from_json(json.loads(plan_json))
    flags, program = _split(torchrun)
    argv = [sys.executable, "-m", "torch.distributed.run", *flags, "-m", WORKER_MODULE, *program]
    job_dir = env[contract.JOB_DIR_ENV]
    return spawn(plan, job_dir=job_dir, argv=argv, env=env, cwd=os.getcwd(), log=log)


def _split(torchrun: list[str]) -> tuple[list[str], list[str]]:
    """``torchrun FLAGS -m RUNTIME_WORKER PROGRAM`` → its flags and the program."""
    at = torchrun.index("-m")
    return torchrun[1:at], torchrun[at + 2 :]


def serve(keep: float, replica: str) -> int:
    own = set((os.environ.get(ENV_NAMES_ENV) or "").split(","))
    base = {k: v for k, v in os.environ.items() if k not in own}
    base["PYTHONPATH"] = _image_path(os.environ)
    directory = pool_dir()
    fp = fingerprint(os.environ)
    plan = WarmPlan(str(directory / f"zygote-{fp}.sock"), fp, (), "")
    os.environ[IDLE_ENV] = str(keep + 3600)  # the zygote ends with this pod (its owner), not before
    start_for(plan, os.environ, [os.getpid()])  # it imports torch while the pod waits
    # Stopped from outside (deleted, evicted): its jobs' wrappers go too, and the pod ends failed,
    # so that a Job replaces an evicted one (whose wrapper then holds the pool again) rather than
    # completing; only the idle end completes it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        return PoolPod(keep, replica, plan, base).serve(directory / "pool.sock")
    finally:  # a pod's /tmp goes with it; on a machine whose pods share one (a toy cluster), not
        shutil.rmtree(directory, ignore_errors=True)


def _image_path(env: Mapping[str, str]) -> str:
    """The image's own PYTHONPATH: the pod's, less the first job's (its entry script put it first)."""
    mine, path = env.get(contract.PYTHONPATH_ENV, ""), env.get("PYTHONPATH", "")
    if mine and (path == mine or path.startswith(mine + os.pathsep)):
        return path[len(mine) + 1 :]
    return path


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "serve":
        return serve(float(argv[1]), argv[2])
    print(f"usage: python -m {MODULE} serve KEEP REPLICA", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
