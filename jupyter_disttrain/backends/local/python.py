"""The interpreter of a local job (``--python PATH``) and how the rank wrapper reaches it.

A job may run under another interpreter than the kernel's, e.g. a virtual environment with MXNet
1.9.1, which needs a numpy older than the kernel's. That interpreter runs our rank wrapper
(``python -m jupyter_disttrain.runtime.worker``), which imports only the standard library and
this package's ``runtime`` (the package's ``__init__`` imports nothing either). So the job gets,
last on its ``PYTHONPATH``, a directory that holds nothing but this package (a symlink to it in
the user's cache: ``rankenv.runtime_path``, which a warm zygote's path holds too): putting the
directory the package is installed in there instead would hand that interpreter the kernel's
whole site-packages (its numpy among them).
"""

from __future__ import annotations

import os
import sys

from ...model.errors import InvalidSpecError


def job_python(chosen: str | None) -> str:
    """The interpreter that runs the job's processes: ``--python``, else the kernel's."""
    return os.path.expanduser(chosen) if chosen else sys.executable


def validate_python(path: object) -> None:
    if not isinstance(path, str) or not path:
        raise InvalidSpecError(f"python must be the path of a Python interpreter, not {path!r}")
    path = os.path.expanduser(path)  # ``~/venv/bin/python`` as a shell would take it
    if not os.path.isabs(path):
        raise InvalidSpecError(f"--python {path}: give the interpreter's absolute path")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise InvalidSpecError(
            f"--python {path}: no such executable; give a Python interpreter, e.g. /path/to/venv/bin/python"
        )


def foreign(python: str) -> bool:
    """Whether ``python`` is another interpreter than the kernel's (which has this package). Not
    compared through symlinks: a venv's ``bin/python`` links to its base interpreter, yet it is
    another environment."""
    return os.path.abspath(python) != sys.executable


def foreign_pythonpath(pythonpath: str, runtime: str) -> str:
    """The ``PYTHONPATH`` of a job under another interpreter: without this interpreter's own
    installation (its stdlib and site-packages, which a PYTHONPATH inherited from a server or a
    test harness may list: that interpreter would import the kernel's numpy), then ``runtime``."""
    own = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}

    def ours(entry: str) -> bool:
        real = os.path.realpath(entry)
        return any(real == root or real.startswith(root + os.sep) for root in own)

    kept = [p for p in pythonpath.split(os.pathsep) if p and not ours(p)]
    return os.pathsep.join(dict.fromkeys([*kept, runtime]))
