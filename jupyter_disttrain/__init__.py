"""jupyter_disttrain: distributed PyTorch training from a notebook cell.

``%load_ext jupyter_disttrain`` registers ``%%distrun``; ``submit()`` is the Python API the
magic is built on. Everything heavy (torch, kubernetes, tensorboard, the server) is imported
on first use only, so loading the extension stays fast.
"""

from __future__ import annotations

from ._version import __version__

# Not ``typing.TYPE_CHECKING``: every training process imports this package (its rank
# starter lives here), and importing ``typing`` would add to each launch.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .api import Job, get_job, list_jobs, submit

__all__ = ["Job", "__version__", "get_job", "list_jobs", "load_ipython_extension", "submit"]


def __getattr__(name: str) -> Any:
    if name in ("Job", "submit", "get_job", "list_jobs"):
        from . import api

        return getattr(api, name)
    raise AttributeError(name)


def load_ipython_extension(ipython: Any) -> None:
    from .notebook.kernelenv import remember_startup
    from .notebook.magics import DistTrainMagics, warm_up

    remember_startup()  # earlier cells' os.environ changes are what differs from this
    ipython.register_magics(DistTrainMagics)
    warm_up(ipython)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter_disttrain"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .server.app import DistTrainApp

    return [{"module": "jupyter_disttrain", "app": DistTrainApp}]
