"""A real Slurm cluster of two nodes on this machine, in a directory of its own.

Debian's ``slurm-wlm`` runs here without systemd: a ``munged`` on its own socket and key, one
``slurmctld`` and one ``slurmd`` per node (Debian builds Slurm so that several ``slurmd`` may share
a host, each with its own port and ``-N`` name). Every daemon's port is a free one, away from
Slurm's defaults (6817/6818), so a cluster of the machine itself is never touched; clients find
this one through ``SLURM_CONF``. Two partitions share the nodes: ``debug`` (the default) and
``urgent``, whose jobs preempt ``debug``'s by requeueing them, so preemption is real here too.

Used by the ``slurm`` tests (``tests/slurm/conftest.py``), ``bench/bench_slurm.py`` and the
fixture recorder (``tests/slurm/fixtures/record.py``). Needs root (``slurmd`` starts the tasks).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "srun", "salloc")
PACKAGES = "slurmctld slurmd slurm-client munge"
NODES = ("dt1", "dt2")
CPUS = 2  # per node: what each slurmd claims (the two share this machine's cores)
MEMORY_MB = 2048
_START_TIMEOUT = 30.0


def missing() -> str | None:
    """Why no cluster can start here (a missing program, not root), or None."""
    absent = [d for d in DAEMONS if shutil.which(d) is None]
    if absent:
        return f"{', '.join(absent)} not on PATH: apt-get install {PACKAGES}"
    if os.geteuid() != 0:
        return "slurmd needs root to start tasks"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SlurmCluster:
    """``start()`` brings the daemons up and waits until every node is idle; ``stop()`` ends them
    by the pids they wrote. ``env`` is what a client (or a kernel, a server) needs to reach it."""

    def __init__(
        self, root: Path | None = None, *, min_job_age: int = 300, batch_sched_delay: int | None = 0
    ) -> None:
        self._own_dir = root is None  # made here: removed by stop()
        self.dir = Path(root or tempfile.mkdtemp(prefix="disttrain-slurm-"))
        self.min_job_age = min_job_age
        # Slurm delays scheduling a batch job up to 3 s by default (batch_sched_delay); the tests
        # start theirs at once. None keeps Slurm's default (the benchmark's realistic queue).
        self.batch_sched_delay = batch_sched_delay
        self.conf = self.dir / "slurm.conf"
        self.host = socket.gethostname().split(".")[0]
        self.ports = {"ctld": _free_port(), **{n: _free_port() for n in NODES}}
        self.env = {"SLURM_CONF": str(self.conf)}

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> SlurmCluster:
        for sub in ("state", "log", "munge", *(f"spool/{n}" for n in NODES)):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        # munged refuses a socket whose directories others cannot traverse.
        self.dir.chmod(0o711)
        (self.dir / "munge").chmod(0o711)
        self._start_munge()
        self.conf.write_text(self.config())
        self.start_controller()
        for node in NODES:
            self._run_daemon(["slurmd", "-f", str(self.conf), "-N", node])
        self.wait_idle()
        return self

    def stop(self) -> None:
        """Cancel every job and wait for its processes, then stop each daemon by its pid file
        (never by name: other clusters may run on this machine); last, any job process that a
        stopped slurmd left behind (a ``slurmstepd`` works in this cluster's log directory)."""
        if self._answers():
            self.run("scancel", f"--user={os.geteuid()}", check=False)
            self._wait(self._no_jobs_active, "jobs did not end", timeout=20, fail=False)
        _stop(*[self._pid(f"slurmd-{n}.pid") for n in NODES], self._pid("slurmctld.pid"))
        _stop(self._pid("munge/munged.pid"))  # last: the others authenticate through it until they end
        _stop(*[p.pid for p in self._stragglers()], timeout=5)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _no_jobs_active(self) -> bool:
        out = self.run("squeue", "--noheader", "--format=%T", check=False)
        return out.returncode == 0 and not out.stdout.strip()

    def _stragglers(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter(["pid"]):
            with contextlib.suppress(psutil.Error):
                if proc.cwd().startswith(str(self.dir) + os.sep):
                    found += [proc, *proc.children(recursive=True)]
        return found

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start_controller(self) -> None:
        self._run_daemon(["slurmctld", "-f", str(self.conf)])
        self._wait(self._answers, "slurmctld did not answer")

    def wait_responding(self, timeout: float = 60) -> None:
        """Wait until every node answers the controller again (after its restart)."""

        def responding() -> bool:
            out = self.run("sinfo", "--noheader", "--Node", "--format=%t", check=False)
            states = out.stdout.split()
            return out.returncode == 0 and bool(states) and not any(s.endswith("*") for s in states)

        self._wait(responding, "the nodes did not answer the controller again", timeout)

    def stop_controller(self) -> None:
        """Stop slurmctld (its state is saved: started again, it recovers every job)."""
        _stop(self._pid("slurmctld.pid"))

    def wait_idle(self, timeout: float = _START_TIMEOUT) -> None:
        def idle() -> bool:
            out = self.run("sinfo", "--noheader", "--Node", "--format=%N %t", check=False).stdout
            states = dict(line.split() for line in out.splitlines() if line.strip())
            return all(states.get(n, "").rstrip("*") == "idle" for n in NODES)

        self._wait(idle, "the nodes did not become idle")

    def set_node_down(self, node: str, reason: str) -> None:
        self.run("scontrol", "update", f"nodename={node}", "state=down", f"reason={reason}")

    def resume_node(self, node: str, timeout: float = _START_TIMEOUT) -> None:
        """Bring a node set DOWN back into service (asked again while Slurm still has it down:
        ReturnToService may also have returned it by itself)."""

        def usable() -> bool:
            shown = self.run("scontrol", "show", "node", node, check=False).stdout
            state = next((w[len("State=") :] for w in shown.split() if w.startswith("State=")), "DOWN")
            if any(bad in state for bad in ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING")):
                self.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
                return False
            return True

        self._wait(usable, f"node {node} could not be resumed", timeout)

    def wait_idle_node(self, node: str, timeout: float = _START_TIMEOUT) -> None:
        self._wait(lambda: self._node_state(node) == "idle", f"node {node} did not become idle", timeout)

    def _node_state(self, node: str) -> str:
        out = self.run("sinfo", "--noheader", "--Node", f"--nodes={node}", "--format=%t", check=False)
        return out.stdout.split("\n")[0].strip().rstrip("*")

    # -- clients ------------------------------------------------------------------------------
    def client_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env=self.client_env(), capture_output=True, text=True, timeout=timeout, check=check
        )

    # -- configuration --------------------------------------------------------------------------
    def config(self) -> str:
        d = self.dir
        nodes = "\n".join(
            f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={self.ports[n]} "
            f"CPUs={CPUS} RealMemory={MEMORY_MB} State=UNKNOWN"
            for n in NODES
        )
        names = ",".join(NODES)
        delay = self.batch_sched_delay
        sched = "" if delay is None else f"SchedulerParameters=batch_sched_delay={delay}\n"
        return f"""\
ClusterName=disttrain
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={self.ports["ctld"]}
SlurmdPort={self.ports[NODES[0]]}
AuthType=auth/munge
AuthInfo=socket={d}/munge/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=256
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
MinJobAge={self.min_job_age}
KillWait=5
InactiveLimit=0
{sched}PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
{nodes}
PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes={names} MaxTime=INFINITE State=UP PriorityTier=2
"""

    # -- internals ----------------------------------------------------------------------------
    def _start_munge(self) -> None:
        munge = self.dir / "munge"
        key = munge / "munge.key"
        if not key.exists():
            key.write_bytes(secrets.token_bytes(1024))
            key.chmod(0o400)
        self._run_daemon(
            [
                "munged",
                f"--socket={munge}/munge.sock",
                f"--key-file={key}",
                f"--pid-file={munge}/munged.pid",
                f"--log-file={munge}/munged.log",
                f"--seed-file={munge}/munged.seed",
            ]
        )

    def _run_daemon(self, argv: list[str]) -> None:
        """Start a daemon that forks itself away; fail with its own words if it cannot."""
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")

    def _answers(self) -> bool:
        return self.run("scontrol", "ping", check=False).returncode == 0

    def _pid(self, name: str) -> int | None:
        try:
            return int((self.dir / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _wait(
        self, ready: Callable[[], bool], what: str, timeout: float = _START_TIMEOUT, fail: bool = True
    ) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                if not fail:
                    return
                logs = "\n".join(
                    f"--- {p.name}:\n{p.read_text(errors='replace')[-1500:]}"
                    for p in sorted((self.dir / "log").glob("*.log"))
                )
                raise RuntimeError(f"{what} within {timeout:.0f} s\n{logs}")
            time.sleep(0.2)


def _stop(*pids: int | None, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL what is left after ``timeout``. A daemon is not our child: once it
    exits it may stay a zombie (nobody reaps it in a container), which counts as gone."""
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error, TypeError):
            procs.append(psutil.Process(pid))  # type: ignore[arg-type]
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def main(argv: list[str]) -> int:
    """``python -m tests.slurm.cluster start`` prints the new cluster's directory (its
    ``slurm.conf`` is what clients need in ``SLURM_CONF``); ``... stop DIR`` stops it."""
    if argv[:1] == ["start"] and len(argv) == 1:
        if why := missing():
            print(f"no Slurm cluster: {why}", file=sys.stderr)
            return 1
        print(SlurmCluster().start().dir)
        return 0
    if argv[:1] == ["stop"] and len(argv) == 2:
        SlurmCluster(Path(argv[1])).stop()
        return 0
    print("usage: python -m tests.slurm.cluster start | stop DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
