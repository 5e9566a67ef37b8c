"""What earlier cells changed in the kernel's own process, carried into the job.

A notebook that runs ``sys.path.insert(0, "mylib_dir")``, ``os.environ["FOO"] = "bar"`` or
``os.chdir(...)`` expects the job to see the same. The job gets:

- ``sys.path``: the entries a fresh interpreter of the same Python does not have, made absolute the
  way the kernel resolved them, on the job's ``PYTHONPATH``;
- ``os.environ``: the variables set or changed since the extension was loaded (the kernel sets a few
  of its own, such as ``MPLBACKEND``, before that), except the ones the product or torchrun set
  for each process and Jupyter's own (``JPY_*``);
- the working directory: the kernel's current one (``make_spec`` takes ``os.getcwd()``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache

from ..model.specs import _ENV_KEY, RESERVED_ENV, RESERVED_ENV_PREFIXES, JobSpec

# What --env may not set is never carried either; on top of that, values that are per process or
# per kernel (a kernel's would be wrong in the job), and PYTHONPATH, carried as sys.path entries.
_RESERVED = RESERVED_ENV | {"CUDA_VISIBLE_DEVICES", "PYTHONPATH", "PYTHONUNBUFFERED"}
_RESERVED_PREFIXES = (*RESERVED_ENV_PREFIXES, "JPY_")

_startup_env: dict[str, str] | None = None


def remember_startup() -> None:
    """Record the environment as it is now (when the extension loads), to diff against later."""
    global _startup_env
    if _startup_env is None:
        _startup_env = dict(os.environ)


@dataclass(frozen=True)
class KernelEnv:
    """The kernel's changes that the job gets.

    Attributes:
        env: variables set or changed in the kernel since the extension loaded.
        path: ``sys.path`` entries a fresh interpreter lacks, absolute, in ``sys.path`` order.
        cwd: the kernel's working directory.
    """

    env: dict[str, str] = field(default_factory=dict)
    path: list[str] = field(default_factory=list)
    cwd: str = ""

    def apply(self, spec: JobSpec) -> None:
        """Add the kernel's changes to ``spec``; what the user gave with ``--env`` wins."""
        env = {**self.env, **spec.env}
        if self.path:
            given = spec.env.get("PYTHONPATH")
            env["PYTHONPATH"] = os.pathsep.join([*([given] if given else []), *self.path])
        spec.env = env

    def describe(self) -> list[str]:
        """Lines for the dry run."""
        lines = [f"working dir: {self.cwd}"]
        lines += [f"sys.path addition (on PYTHONPATH): {p}" for p in self.path]
        lines += [f"env: {key}={value}" for key, value in sorted(self.env.items())]
        return lines


def kernel_env() -> KernelEnv:
    """The changes earlier cells made to this process (nothing for the environment if
    :func:`remember_startup` was never called)."""
    env: dict[str, str] = {}
    if _startup_env is not None:
        env = {
            key: value
            for key, value in os.environ.items()
            if _startup_env.get(key) != value and not _reserved(key)
        }
    cwd = os.getcwd()
    fresh = set(_fresh_sys_path(sys.executable, os.environ.get("PYTHONPATH", "")))
    path: list[str] = []
    for entry in sys.path:
        if not isinstance(entry, str) or not entry or os.path.normpath(entry) in fresh:
            continue
        absolute = _as_resolved(entry, cwd)
        if absolute not in fresh and absolute not in path and absolute != cwd and os.path.exists(absolute):
            path.append(absolute)
    return KernelEnv(env, path, cwd)


def _reserved(key: str) -> bool:
    # A name a job spec cannot hold (not letters, digits and '_') cannot be passed on either.
    return key in _RESERVED or key.startswith(_RESERVED_PREFIXES) or not _ENV_KEY.fullmatch(key)


def _as_resolved(entry: str, cwd: str) -> str:
    """The directory the kernel's import system uses for ``entry``: a relative entry is fixed when
    its finder is first made (cached in ``sys.path_importer_cache``), else relative to ``cwd``."""
    finder = sys.path_importer_cache.get(entry)
    found = getattr(finder, "path", None)
    if isinstance(found, str) and os.path.isabs(found):
        return found
    return os.path.normpath(os.path.join(cwd, entry))


@lru_cache(maxsize=4)
def _fresh_sys_path(python: str, pythonpath: str) -> tuple[str, ...]:
    """``sys.path`` of a fresh ``python`` (site-packages, .pth files, ``PYTHONPATH``); asked once."""
    try:
        out = subprocess.run(
            [python, "-c", "import json, sys; print(json.dumps(sys.path))"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            env={**os.environ, "PYTHONPATH": pythonpath},
        ).stdout
        paths = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return tuple(sys.path)  # cannot tell: carry nothing rather than guess
    return tuple(os.path.normpath(p) if p else p for p in paths if isinstance(p, str))
