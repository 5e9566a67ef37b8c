"""The launch contract's values: the environment every backend gives a job's training processes.

Names are in ``runtime/contract.py``; this builds the values once, for the local backend's
torchrun agents and for the Kubernetes pods alike:

- ``DISTTRAIN_JOB_ID``, ``DISTTRAIN_JOB_DIR``, ``DISTTRAIN_TENSORBOARD_DIR`` (``<job dir>/tensorboard``,
  the directory the TensorBoard tab shows);
- ``PYTHONPATH``: the user's own entries (``--env PYTHONPATH``, the kernel's ``sys.path``
  additions), then the working directory (the notebook's, so ``mymod.py`` beside it imports),
  then what the process would have inherited;
- ``PYTHONUNBUFFERED=1`` so output reaches the logs as it is printed;
- what training libraries need to see the job's layout (``launcher_env``);
- what the job's launcher adds for a role (``role_env``: DeepSpeed's ``MPLBACKEND``...);
- what comes back to the kernel: ``--out``'s names, ``--pdb``, the debugger's wait;
- ``OMP_NUM_THREADS=1`` with several processes per node, torchrun's own default, said here
  instead of in a banner at the top of every log;
- the user's ``--env`` over all of these (reserved names are refused before this).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from collections.abc import Mapping

from ..model.specs import DEBUG_TIMEOUT, JobSpec
from ..runtime import contract

# This package, which another interpreter (--python) and a zygote reach through ``runtime_path``.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE = os.path.basename(_PACKAGE_DIR)


def launcher_env(spec: JobSpec, *, cpu: bool) -> dict[str, str]:
    """What training libraries need to see the job's layout; the user's --env wins.

    Under torchrun's env with no GPU, ``Accelerator()`` reports one process and no distribution
    unless ``ACCELERATE_USE_CPU`` is set. Lightning's ``Trainer`` ignores torchrun's sizes: on CPU
    ``devices="auto"`` is one device (a single-device strategy, each rank alone), and several
    nodes need ``num_nodes``; its ``PL_TRAINER_*`` variables are defaults that explicit
    arguments override.
    """
    env = {"PL_TRAINER_DEVICES": str(spec.nproc_per_node), "PL_TRAINER_NUM_NODES": str(spec.nodes)}
    if cpu:
        env["ACCELERATE_USE_CPU"] = "1"
    return env


CACHE_DIR_ENV = "DISTTRAIN_CACHE_DIR"


def user_cache_dir() -> str:
    """This user's cache that outlives jobs (compiled ops): ``$DISTTRAIN_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/jupyter_disttrain`` (``~/.cache/jupyter_disttrain``)."""
    chosen = os.environ.get(CACHE_DIR_ENV)
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jupyter_disttrain")


def rank_env(
    spec: JobSpec,
    job_id: str,
    job_dir: str,
    *,
    cpu: bool,
    working_dir: str | None,
    inherited: Mapping[str, str],
    role_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables a training process of ``spec`` gets on top of torchrun's (RANK, WORLD_SIZE...).

    ``inherited`` is the environment the process would otherwise have (the kernel's for a local
    job; empty for a pod, whose image's own variables the container runtime adds).
    """
    env = {
        contract.JOB_ID_ENV: job_id,
        contract.JOB_DIR_ENV: job_dir,
        contract.TENSORBOARD_DIR_ENV: posixpath.join(job_dir, contract.TENSORBOARD_DIR),
        contract.CHECKPOINT_DIR_ENV: posixpath.join(job_dir, contract.CHECKPOINTS_DIR),
        "PYTHONUNBUFFERED": "1",
        **launcher_env(spec, cpu=cpu),
        **(role_env or {}),
    }
    if spec.resumed_from is not None:  # --resume: the checkpoint, resolved at submit
        env[contract.RESUME_FROM_ENV] = spec.resumed_from.path
    if spec.keep_checkpoints > 0:
        env[contract.KEEP_CHECKPOINTS_ENV] = str(spec.keep_checkpoints)
    if spec.hparams:
        env[contract.HPARAMS_ENV] = json.dumps(spec.hparams, separators=(",", ":"))
    if spec.out or spec.out_all:  # --out: what the rank wrapper writes (runtime/outvalues.py)
        asked = {"rank0": spec.out, "all": spec.out_all, "limit": spec.out_limit}
        env[contract.OUT_ENV] = json.dumps(asked, separators=(",", ":"))
    if spec.pdb:
        env[contract.PDB_ENV] = "1"
    if spec.debug_timeout != DEBUG_TIMEOUT:  # the rank's own default is the same
        env[contract.DEBUG_TIMEOUT_ENV] = str(spec.debug_timeout)
    if spec.nproc_per_node > 1 and "OMP_NUM_THREADS" not in inherited:
        env["OMP_NUM_THREADS"] = "1"
    env.update(spec.env)
    # Where MLflow and Lightning record when the user did not say: in the job, seen by its TensorBoard
    # and runs table. Lightning's Trainer takes PL_TRAINER_<ARG> as the default of <arg>: its default
    # logger (logger=True) writes to <default_root_dir>/lightning_logs/version_N there.
    for name, value in (
        (contract.MLFLOW_URI_ENV, "sqlite:///" + posixpath.join(job_dir, contract.MLFLOW_DB)),
        (contract.LIGHTNING_ROOT_ENV, env[contract.TENSORBOARD_DIR_ENV]),
    ):
        if name not in env and name not in inherited:
            env[name] = value
    paths = [spec.env.get("PYTHONPATH"), working_dir, inherited.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def runtime_path(cache_dir: str) -> str:
    """The ``PYTHONPATH`` entry through which another interpreter imports this package: pure (the
    dry run shows it); ``ensure_runtime_path`` makes it. Keyed by where the package is, so two
    installs never share one."""
    key = hashlib.sha256(_PACKAGE_DIR.encode()).hexdigest()[:12]
    return os.path.join(cache_dir, "pythonpath", key)


def ensure_runtime_path(path: str) -> None:
    """Make ``path`` hold a symlink to this package (replaced atomically if it points elsewhere)."""
    os.makedirs(path, exist_ok=True)
    link = os.path.join(path, _PACKAGE)
    if os.path.islink(link) and os.readlink(link) == _PACKAGE_DIR:
        return
    tmp = f"{link}.{os.getpid()}.tmp"
    os.symlink(_PACKAGE_DIR, tmp)
    os.replace(tmp, link)
