"""Pure translation of a ``JobSpec`` into what Slurm runs: the sbatch command line, the batch
script, and per node the ``srun`` line of its agent (golden-tested: ``tests/slurm/test_script.py``).

A job is the shared launcher (``backends/agents/``) whose agents are ``srun`` job steps, one per node:

- through ``sbatch`` (``BATCH``), the batch script ``exec``s the launcher on the first node;
- inside an allocation (``STEP``: ``salloc``, batchspawner), the launcher runs beside the kernel.

Each step runs the node agent (``node.py``), which runs torchrun's agent for its node under the
rank wrapper and samples its ranks' resources; the agents meet through torchrun's c10d
rendezvous, hosted by node 0's agent on a port it picks and writes into the job dir.

Every value goes into argv, never into a shell string; the batch script's one command line is
made of quoted words. The batch script repeats the submission's options as ``#SBATCH`` lines (so
``sbatch batch.sh`` alone submits the same job), each written as sbatch reads such a line; no
value is ever echoed in a shell comment of its own. A value with a control character never
gets here (``checks.check_paths``, ``options.check_sbatch_option``): a newline would end the
line. No process is started here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from ...launchers.base import Role
from ...model.errors import InvalidSpecError
from ...model.specs import JobSpec
from ...runtime import contract
from ..agents import torchrun
from .options import CONTROL, SlurmOptions
from .request import BATCH, KEPT, SlurmRequest

LAUNCH_MODULE = "jupyter_disttrain.backends.slurm.launch"
NODE_MODULE = "jupyter_disttrain.backends.slurm.node"
SLURM_DIR = "slurm"  # the job dir's Slurm files: the batch script, node records, the rendezvous
BATCH_SCRIPT = "batch.sh"
# Slurm versions from which srun has these options.
OVERLAP_SINCE = (20, 11)  # --overlap: a step shares the CPUs another step holds (batchspawner's)
WHOLE_SINCE = (21, 8)  # --whole: a step gets all of the allocation on its node


# How a cold Slurm job's processes start (the request's ``start``: the dry run shows it, the
# launcher's Started event repeats it, with why it is not warm: ``warmstart.plan``).
START = "cold: one srun step per node starts torchrun there"


@dataclass(frozen=True)
class Place:
    """Where and how a job runs on this cluster, as the backend found it (not in the spec)."""

    mode: str  # request.BATCH or request.STEP
    version: tuple[int, int, int]  # of the Slurm client commands
    gpu: bool  # one GPU per process; else CPU processes (gloo)
    gres: bool = False  # ask for GPUs with --gres=gpu:N (no select/cons_tres), not --gpus-per-node
    allocation: str | None = None  # STEP: the allocation's job id


def sbatch_argv(
    spec: JobSpec, job_id: str, job_dir: str, opts: SlurmOptions, place: Place, working_dir: str
) -> list[str]:
    """``sbatch --parsable ... batch.sh``: every option on the command line (argv, no quoting)."""
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={job_id}",
        f"--nodes={spec.nodes}",
        "--ntasks-per-node=1",  # one torchrun agent per node, which starts the node's ranks
    ]
    argv += _resources(spec, opts, place)
    argv += [
        f"--output={job_dir}/launcher.log",
        "--open-mode=append",  # a requeued run appends to the same job's output
        f"--chdir={working_dir}",
        "--export=ALL",
        "--requeue" if opts.requeue else "--no-requeue",
    ]
    for key in ("partition", "account", "qos", "time", "constraint", "reservation", "mem"):
        value = getattr(opts, key)
        if value is not None:
            argv.append(f"--{key}={value}")
    if opts.exclusive:
        argv.append("--exclusive")
    return [*argv, *opts.sbatch_options, f"{job_dir}/{SLURM_DIR}/{BATCH_SCRIPT}"]


def _resources(spec: JobSpec, opts: SlurmOptions, place: Place) -> list[str]:
    """Per node: one GPU per process, or one CPU per CPU process."""
    n = spec.nproc_per_node
    if not place.gpu:
        return [f"--cpus-per-task={n}"]
    argv = [f"--gres=gpu:{n}" if place.gres else f"--gpus-per-node={n}"]
    if opts.cpus_per_gpu is not None:
        argv.append(f"--cpus-per-gpu={opts.cpus_per_gpu}")
    return argv


def batch_script(python: str, job_dir: str, sbatch: list[str]) -> str:
    """``slurm/batch.sh``: the options of ``sbatch`` (its argv, ``sbatch_argv``) as ``#SBATCH``
    lines, then the launcher, run as the batch step on the job's first node."""
    options = [word for word in sbatch[1:-1] if word != "--parsable"]  # not the program, nor the script
    if any(CONTROL.search(word) for word in [python, job_dir, *options]):  # checks.py refused it already
        raise InvalidSpecError("a word of the batch script has a control character: it cannot be one line")
    return "\n".join(
        [
            "#!/bin/bash",
            *(f"#SBATCH {_sbatch_word(word)}" for word in options),
            "# jupyter_disttrain: this job's launcher, run by Slurm on the job's first node. The #SBATCH",
            "# lines are the options it was submitted with: `sbatch batch.sh` alone submits it again.",
            "# It starts one srun step per node and keeps the job dir's status.json true.",
            shlex.join(["exec", python, "-m", LAUNCH_MODULE, job_dir]),
            "",
        ]
    )


_SBATCH_SPECIAL = re.compile(r"""[\s'"\\#]""")


def _sbatch_word(word: str) -> str:
    """One word as sbatch reads a ``#SBATCH`` line: words end at white space, quotes group, a
    backslash takes the next character as it is, an unquoted ``#`` starts a comment."""
    if not _SBATCH_SPECIAL.search(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def srun_argv(spec: JobSpec, job_id: str, place: Place, node: int) -> list[str]:
    """The job step of node ``node``: one task on the ``node``-th node of the job (or allocation)."""
    argv = ["srun"]
    if place.allocation is not None and place.mode != BATCH:
        argv.append(f"--jobid={place.allocation}")
    argv += [f"--job-name={job_id}", "--nodes=1", "--ntasks=1", f"--relative={node}"]
    if place.version[:2] >= OVERLAP_SINCE:
        argv.append("--overlap")
    if place.version[:2] >= WHOLE_SINCE:
        argv.append("--whole")
    return argv


def node_argv(python: str, job_dir: str, node: int, nodes: int, interval: float) -> list[str]:
    """The node agent (``node.py``), which runs torchrun's agent on its node."""
    return [python, "-u", "-m", NODE_MODULE, job_dir, str(node), str(nodes), f"{interval:g}", "--"]


def torchrun_argv(spec: JobSpec, job_id: str, job_dir: str, python: str, role: Role, node: int) -> list[str]:
    """torchrun's agent of node ``node``. Its rendezvous endpoint, node 0's host and a port free
    there, comes in ``PET_RDZV_ENDPOINT`` from the node agent (torchrun reads each flag's
    ``PET_`` variable): no one knows either before the job runs."""
    program = [role.entry, *role.args] if role.entry else [f"{job_dir}/{spec.entrypoint}", *role.args]
    log_dir = f"{job_dir}/{contract.ELASTIC_DIR}"
    return torchrun.torchrun_argv(python, spec, job_id, node, program, rdzv_backend="c10d", log_dir=log_dir)


def node_env(base: dict[str, str], spec: JobSpec, job_dir: str, node: int, gpu: bool) -> dict[str, str]:
    """What node ``node``'s processes add to the environment srun passes on: the rank
    environment (``base``), where the rank wrapper writes, which node; no GPU for CPU processes."""
    env = {**base, contract.LOG_DIR_ENV: f"{job_dir}/{contract.LOGS_DIR}", contract.NODE_ENV: str(node)}
    if not gpu and "CUDA_VISIBLE_DEVICES" not in spec.env:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def format_request(request: SlurmRequest) -> str:
    """The request as a person reads it: how the job reaches Slurm and starts, then each node's step."""
    lines = [f"# {request.why}", f"# start: {request.start}"]
    if request.mode == BATCH:
        lines += ["# submitted with:", shlex.join(request.sbatch), f"# ---- {SLURM_DIR}/{BATCH_SCRIPT} ----"]
        lines.append(request.batch_script.rstrip("\n"))
        lines.append("# ---- run by the launcher, one job step per node ----")
    elif request.mode == KEPT:
        lines += [
            "# the launcher, a step of the kept batch job on its first node:",
            shlex.join(request.relay),
        ]
        lines.append("# ---- run by the launcher, one job step per node ----")
    else:
        lines.append("# ---- run by the launcher beside this kernel, one job step per node ----")
    if request.warm:
        lines.append("# ---- warm: each node's warm step, started once (re-runs fork from it), else: ----")
        lines += [f"# node {node}: {shlex.join(argv)}" for node, argv in enumerate(request.warm_steps)]
        lines.append("# ---- and cold, when the warm step cannot take the job: ----")
    for agent in request.agents:
        words = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(agent.env.items()))
        lines += [f"# node {agent.node}", f"env {words} \\\n  {shlex.join(agent.argv)}"]
    return "\n".join(lines)
