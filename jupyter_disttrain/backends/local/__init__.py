"""The local backend: torchrun agents (or a launcher's processes) on this machine.

``backend`` is the ``Backend``; ``launch`` is the job's launcher process (``python -m
jupyter_disttrain.backends.local.launch JOB_DIR``), which starts the agents and then runs the
``supervisor``. The launcher imports this package on its critical path, so it imports nothing;
``LocalBackend`` loads on first use.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the launcher imports this package on its critical path
if TYPE_CHECKING:
    from typing import Any

    from .backend import LocalBackend

__all__ = ["LocalBackend"]


def __getattr__(name: str) -> Any:
    # The launcher and the options (the magic's flags) import this package without the backend.
    if name == "LocalBackend":
        from .backend import LocalBackend

        return LocalBackend
    raise AttributeError(name)
