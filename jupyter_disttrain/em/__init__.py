"""Experiment tracking inside a job: hparams, metrics and artifacts, from any rank, with no server.

The names are those of the training platforms' SDKs, so a script written for one changes only
its import::

    from jupyter_disttrain import em

    run = em.create_run("mnist", hparams={"lr": 0.1})
    run.log("train", {"loss": 0.25}, step=10, epoch=0)
    ckpt = em.create_artifact("checkpoint")
    ckpt.add_file("model.pt")
    run.mark_output(ckpt)
    run.finish()

Checkpoints: ``em.checkpoint_dir()`` (where the job's go), ``em.resume_from()`` (the one to start
from, or None), ``run.checkpoint(path, step=...)`` (one saved elsewhere) and
``em.on_preempt(callback)`` (a last one before a graceful stop).

Records go to ``runs/<run>/`` in the job directory (``./.disttrain/runs/`` outside a job), and
the scalars and hparams to the job's TensorBoard directory. Importing this module imports
neither torch nor tensorboard.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .artifact import Artifact
from .checks import METRIC_TYPES
from .exits import on_preempt
from .place import here, job_hparams
from .resume import checkpoint_dir, resume_from
from .run import Ranks, Run, say_once

__all__ = [
    "METRIC_TYPES",
    "Artifact",
    "Run",
    "checkpoint_dir",
    "create_artifact",
    "create_run",
    "login",
    "on_preempt",
    "resume_from",
]

_current: Run | None = None


def create_run(
    name: str,
    hparams: Mapping[str, Any] | None = None,
    description: str | None = None,
    ranks: Ranks = "0",
    total_steps: int | None = None,
) -> Run:
    """Start the run ``name`` and make it the current one (for ``create_artifact``).

    Every rank may call it: with ``ranks="0"`` rank 0 records and the others' calls do nothing;
    with ``ranks="all"`` every rank records its own metrics under ``runs/<name>/rank-N/``.
    The same name again continues the run (a torchrun restart appends to it).
    Without ``hparams``, the job's hyper-parameters captured at submit are the run's (the
    notebook's ``hparams`` dict the cell used, the ``--name value`` arguments after ``--``).
    A credential's value (a key like ``password``, ``api_key``, ``db_pass``, at any depth; a URL's
    password) is recorded as ``<masked>``.
    ``total_steps``, the last step the training will log, gives the run's progress and ETA
    (without it, an hparam ``total_steps`` or ``max_steps`` does).
    """
    global _current
    if hparams is None:
        hparams = job_hparams()
    _current = Run(name, hparams, description, ranks, here(), total_steps=total_steps)
    return _current


def create_artifact(name: str) -> Artifact:
    """A new artifact of the current run (the last one ``create_run`` made in this process)."""
    if _current is None:
        raise RuntimeError(f"create_artifact({name!r}): call em.create_run(...) first: artifacts are a run's")
    return _current.artifact(name)


def login(*args: Any, **kwargs: Any) -> None:
    """Does nothing: there is no server to log in to; runs live in the job directory."""
    say_once("em: login() does nothing here: runs are recorded in the job directory, no server needed")
