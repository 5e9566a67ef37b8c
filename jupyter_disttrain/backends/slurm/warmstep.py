"""A Slurm warm step: one long-lived ``srun --overlap`` step on a node of an allocation, holding a
warm zygote (``backends/warm/``) that forks a re-run's torchrun agent and ranks: no new step, no
torch import.

``python -u -m jupyter_disttrain.backends.slurm.warmstep FINGERPRINT ENV_KEY IDLE VENV`` (the
keeper starts it through ``srun``; users never do). ``VENV`` is the kernel's ``venv_fingerprint``:
a node whose interpreter or installed packages differ from the kernel's starts no zygote and
refuses every job, saying so (the job runs cold, its Started event says why). Its stdin and
stdout are its only channel, which ``srun`` carries between the node and the keeper beside the
kernel (``keeper.py``); no port is opened. One JSON object per line, each for one launcher's channel ``c``:

- in: ``{"c", "m": SPAWN}``: fork that job's agent on this node (``SPAWN`` is the zygote's own
  spawn request, plus ``interval``, the node's resource sampling); ``{"c", "signal": SIG}``:
  signal that agent; ``{"c", "close": true}``: its launcher has gone, the agent is stopped;
- out: ``{"c", "m": ANSWER}``: the zygote protocol's answers (``{"ok", "pid"}`` or the refusal,
  then ``{"exit": CODE}``); first ``{"c": 0, "m": {"hello": {"step", "node", "host", "gpus",
  "idle"}}}``: which step this is, where, the GPUs it holds, its idle time (the pool listing's).

For each job it does what a cold step's node agent (``node.py``) does around torchrun: the node
record, the ranks' environment as ``srun`` gives it (the step's own Slurm variables, less its
task layout), the ranks' resource samples. Its zygote lives in a private dir of this step's own
(a zygote of the same fingerprint on this machine, a kernel's, is never used) and ends with it.
It ends when it has run no job for ``IDLE`` seconds (a release from inside: the notebook may be
gone), when the keeper goes (stdin ends: its running agents are stopped), or with the allocation.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ...runtime import contract
from ...runtime.atomic import write_json
from ...storage import procs
from ..warm.plan import (
    IDLE_ENV,
    WarmPlan,
    WarmUnavailable,
    private_dir,
    start_for,
    venv_fingerprint,
    zygote_dir,
)
from ..warm.warmagent import WarmAgent, spawn
from ..warm.zygote_protocol import MAX_REQUEST
from .node import RDZV_ENV, RUN_ENV, node_file, rendezvous, sample, step_env

if TYPE_CHECKING:
    import psutil

WARMSTEP_MODULE = "jupyter_disttrain.backends.slurm.warmstep"
STOP_WAIT = 30.0  # seconds the agents get to stop once the keeper has gone (torchrun's close)


def say(line: str) -> None:
    print(
        f"disttrain warm step {os.environ.get('SLURM_JOB_ID')}.{os.environ.get('SLURM_STEP_ID')}: {line}",
        file=sys.stderr,
        flush=True,
    )


class WarmStep:
    def __init__(self, plan: WarmPlan, idle: float, out: BinaryIO, differs: str | None = None) -> None:
        self.plan = plan
        self.differs = differs  # why this node runs no job warm (its environment is not the kernel's)
        self.idle = idle
        self.out = out
        self.lock = threading.Lock()
        self.agents: dict[int, WarmAgent | None] = {}  # channel -> its agent (None: being forked)
        self.last_active = time.monotonic()

    def serve(self, stdin: int) -> int:
        # Which step this is, for the keeper to name it to a job it ends with (channel 0: none).
        name = f"{os.environ.get('SLURM_JOB_ID')}.{os.environ.get('SLURM_STEP_ID')}"
        where = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
        gpus = [g for g in (os.environ.get("SLURM_STEP_GPUS") or "").split(",") if g]
        self._send(
            0, {"hello": {"step": name, "node": where, "host": where, "gpus": gpus, "idle": self.idle}}
        )
        buffer = b""
        with selectors.DefaultSelector() as sel:
            sel.register(stdin, selectors.EVENT_READ)
            while True:
                if not sel.select(timeout=1.0):
                    if self._idle_past():
                        say(f"no job for {self.idle:.0f} s: ending (its zygote with it)")
                        return 0
                    continue
                chunk = os.read(stdin, 65536)
                if not chunk:
                    say("the keeper has gone: stopping its jobs' agents")
                    self._stop_all()
                    return 0
                buffer += chunk
                while b"\n" in buffer:
                    line, _, buffer = buffer.partition(b"\n")
                    self._frame(line)
                if len(buffer) > MAX_REQUEST:
                    say(f"a frame over {MAX_REQUEST} bytes: dropped")
                    buffer = b""

    def _idle_past(self) -> bool:
        with self.lock:
            return not self.agents and time.monotonic() - self.last_active > self.idle

    def _frame(self, line: bytes) -> None:
        try:
            frame = json.loads(line)
            channel = int(frame["c"])
        except (ValueError, KeyError, TypeError):
            say(f"not a frame: {line[:80]!r}")
            return
        with self.lock:
            agent = self.agents.get(channel)
            if isinstance(frame.get("m"), dict) and channel not in self.agents:
                self.agents[channel] = None
                threading.Thread(target=self._run, args=(channel, frame["m"]), daemon=True).start()
                return
        if agent is None:
            return  # not forked yet, or gone: its launcher learns how it ended
        if "signal" in frame:
            with contextlib.suppress(ValueError, TypeError):
                agent.send_signal(int(frame["signal"]))
        elif frame.get("close"):
            agent.terminate()

    def _run(self, channel: int, request: dict[str, Any]) -> None:
        """Fork one job's agent, watch it as a node agent does, say how it ended."""
        try:
            if self.differs:
                raise WarmUnavailable(self.differs)
            agent, record = self._fork(request)
        except Exception as exc:  # the launcher is answered whatever happened: it then runs cold
            self._send(channel, {"ok": False, "error": str(exc) or type(exc).__name__})
            self._done(channel)
            return
        with self.lock:
            self.agents[channel] = agent
        self._send(channel, {"ok": True, "pid": agent.pid})
        monitor = sample(str(request["job_dir"]), float(request.get("interval") or 0), agent.pid)
        code = agent.wait()
        if monitor is not None:
            monitor.stop()  # type: ignore[attr-defined]
        # What the agent left on this node (a rank of an agent killed outright) goes, as Slurm
        # ends what is left of a cold job's step.
        if job := request["env"].get(contract.JOB_ID_ENV):
            procs.stop_processes(
                [p for p in procs.job_processes(str(job)) if _of_node(p, request["node"])], 0
            )
        with contextlib.suppress(OSError):
            write_json(str(record.pop("path")), {**record, "exit_code": code})
        self._send(channel, {"exit": code})
        self._done(channel)

    def _fork(self, request: dict[str, Any]) -> tuple[WarmAgent, dict[str, Any]]:
        job_dir, node = str(request["job_dir"]), int(request["node"])
        env = step_env(request["env"], os.environ)
        if int(request.get("nodes") or 1) > 1:  # node 0's hosts the c10d rendezvous, as a cold step's
            env[RDZV_ENV] = rendezvous(job_dir, env.get(RUN_ENV, "run"), node)
        agent = spawn(
            self.plan,
            job_dir=job_dir,
            argv=list(request["argv"]),
            env=env,
            cwd=str(request["cwd"]),
            log=str(request["log"]),
        )
        # The node record of a cold step, naming no step of the job's own: nothing scancels the
        # warm step for a job (its agent is signalled through this channel).
        record = {
            "node": node,
            "host": os.uname().nodename,
            "slurm_node": os.environ.get("SLURMD_NODENAME"),
            "job": os.environ.get("SLURM_JOB_ID"),
            "step": None,
            "warm_step": os.environ.get("SLURM_STEP_ID"),
            "pid": agent.pid,
            "run": env.get(RUN_ENV, "run"),
        }
        path = node_file(job_dir, node)
        write_json(path, record)
        return agent, {**record, "path": path}

    def _send(self, channel: int, message: dict[str, Any]) -> None:
        with self.lock, contextlib.suppress(OSError, ValueError):
            self.out.write(json.dumps({"c": channel, "m": message}).encode() + b"\n")
            self.out.flush()

    def _done(self, channel: int) -> None:
        with self.lock:
            self.agents.pop(channel, None)
            self.last_active = time.monotonic()

    def _stop_all(self) -> None:
        with self.lock:
            running = [a for a in self.agents.values() if a is not None]
        for agent in running:
            agent.terminate()
        deadline = time.monotonic() + STOP_WAIT
        while not self._idle_past() and self.agents and time.monotonic() < deadline:
            time.sleep(0.1)
        for agent in running:
            agent.kill()


def _of_node(proc: psutil.Process, node: object) -> bool:
    """Whether ``proc`` is of the job's node ``node``: another node's agent may share this host
    (two nodes of one machine), and ends by itself."""
    import psutil

    try:
        return proc.environ().get(contract.NODE_ENV) == str(node)
    except psutil.Error:
        return False


def step_dir() -> Path:
    """This step's private dir for its zygote: under this user's runtime dir on the node (the
    kernel's ``XDG_RUNTIME_DIR`` is dropped where this node has none)."""
    if not os.path.isdir(os.environ.get("XDG_RUNTIME_DIR") or "/nonexistent"):
        os.environ.pop("XDG_RUNTIME_DIR", None)
    step = f"{os.environ.get('SLURM_JOB_ID', 'job')}.{os.environ.get('SLURM_STEP_ID', 'step')}"
    return private_dir(zygote_dir() / f"slurm-{step}")


def node_differs(kernel_venv: str) -> str | None:
    """Why this node cannot fork the kernel's jobs, if its interpreter or packages differ."""
    if venv_fingerprint() == kernel_venv:
        return None
    where = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    return (
        f"node {where}'s Python environment differs from the kernel's ({sys.executable}: another venv, "
        "or packages installed on one side since): its jobs run cold; give every node the kernel's venv"
    )


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(
            "usage: python -m jupyter_disttrain.backends.slurm.warmstep FINGERPRINT ENV_KEY IDLE VENV",
            file=sys.stderr,
        )
        return 2
    fingerprint, key, idle = argv[0], argv[1], float(argv[2])
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # only frames go to the keeper; anything else printed here goes to its log
    differs = node_differs(argv[3])
    if differs:
        say(differs)
        return WarmStep(WarmPlan("", fingerprint), idle, out, differs).serve(sys.stdin.fileno())
    try:
        directory = step_dir()
    except (WarmUnavailable, OSError) as exc:
        say(f"no private dir for a zygote: {exc}")
        return 1
    plan = WarmPlan(str(directory / f"zygote-{fingerprint}.sock"), fingerprint, (), key)
    # The zygote outlives no job of this step's: it ends with the step (its owner), not on its own.
    os.environ[IDLE_ENV] = str(idle + 3600)
    start_for(plan, os.environ, [os.getpid()])  # it imports while the first request arrives
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # scancel of the step: end as when idle
    return WarmStep(plan, idle, out).serve(sys.stdin.fileno())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
