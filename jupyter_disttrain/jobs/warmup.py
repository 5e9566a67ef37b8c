"""Warm start from the front ends: the local backend's zygote started ahead of the first job.

``%load_ext`` and the server call ``start``: the zygote for the process's environment starts in a
background thread (loading the extension waits for none of it; in a kernel inside a Slurm
allocation where Slurm is the default backend, node 0's warm step instead), and the callback it returns keeps
that zygote holding the heavy libraries the process imports later (IPython calls it after each
cell). Nothing of the backend is imported until then.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

log = logging.getLogger(__name__)


def start(
    env: MutableMapping[str, str], *, enabled: bool = True, parent: int | None = None
) -> Callable[..., None] | None:
    """Start the zygote for ``env`` in the background; the after-cell callback, or None when warm
    start is off (``enabled=False`` turns it off for the processes started with ``env`` from here
    on). ``parent``: the zygote ends with that process (a Jupyter server)."""
    if not enabled:
        from ..backends.warm.plan import WARM_ENV

        env[WARM_ENV] = "0"
        return None
    snapshot = dict(env)
    if parent is None and _slurm_default(snapshot):  # a kernel whose jobs run in its allocation
        threading.Thread(target=_start_slurm, args=(snapshot,), name="disttrain-warm", daemon=True).start()
        return None
    threading.Thread(target=_start, args=(snapshot, parent), name="disttrain-warm", daemon=True).start()
    return _AfterCell(snapshot)


def _start(env: dict[str, str], parent: int | None) -> None:
    from ..backends.warm import plan as warm

    warm.start(env, preload=warm.heavy_loaded(), owners=[parent] if parent else [])


def _slurm_default(env: Mapping[str, str]) -> bool:
    from ..backends import BACKEND_ENV
    from ..backends.slurm.allocation import ALLOCATION_ENV, default_here

    chosen = env.get(BACKEND_ENV)
    return bool(env.get(ALLOCATION_ENV)) and (chosen == "slurm" or (not chosen and default_here()))


def _start_slurm(env: dict[str, str]) -> None:
    """Node 0's warm step, started while the notebook's first cells run (a failure says why in
    the kernel's log: the first job then starts it)."""
    from ..backends.slurm.warmstart import start_ahead

    try:
        log.info("jupyter_disttrain: %s", start_ahead(env))
    except Exception as exc:
        log.warning("jupyter_disttrain: no warm step ahead: %s", exc)


class _AfterCell:
    """IPython's ``post_run_cell`` callback: the zygote learns the heavy libraries a cell imported."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.preloader: Any = None

    def __call__(self, *args: object) -> None:
        if self.preloader is None:
            from ..backends.warm import plan as warm

            if not warm.enabled(self.env):
                return
            self.preloader = warm.Preloader(self.env)
        self.preloader()
