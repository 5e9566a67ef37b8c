"""Separate virtual environments (and unpacked sources) for tests of frameworks that cannot
share the test venv.

MXNet 1.9.1 needs ``numpy<1.24``, which the test venv's torch and friends do not accept, so its
jobs run under their own interpreter. A venv is built once per requirements set and kept in the
user's cache (``$XDG_CACHE_HOME/jupyter_disttrain/venvs/<name>-<hash>``): CI's second run, and
every run after it, finds it ready. It is built in a scratch directory and renamed into place when
its imports work, under a lock, so an interrupted or concurrent build never leaves a half venv.
Where it cannot be built (no network to the package index, no wheel for this Python), the tests
that need it are skipped with the reason.

Horovod does not build against torch 2.x (README), but its runner is pure Python: its source
release, unpacked the same way into the cache, is put on a subprocess's ``sys.path``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path

MXNET_REQUIREMENTS = ("mxnet==1.9.1", "numpy<1.24")
# What the venv must import, checked before it is kept.
MXNET_CHECK = "import mxnet, numpy; print(mxnet.__version__, numpy.__version__)"
_PIP_TIMEOUT = 900.0
_READY = "disttrain-venv-ready"


class VenvUnavailable(Exception):
    """The venv could not be built here; the message says why (for the skip reason)."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jupyter_disttrain" / "venvs"


def venv_dir(name: str, requirements: Sequence[str]) -> Path:
    """Keyed by the requirements and this Python's version: a change of either is a new venv."""
    key = "\n".join([f"{sys.version_info[0]}.{sys.version_info[1]}", *sorted(requirements)])
    return cache_root() / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def venv_python(path: Path) -> Path:
    return path / "bin" / "python"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(argv: list[str], what: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_PIP_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VenvUnavailable(f"{what}: {exc}") from exc
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise VenvUnavailable(f"{what} failed ({done.returncode}): {tail}")
    return done.stdout


def ensure_venv(name: str, requirements: Sequence[str], check: str) -> Path:
    """The interpreter of a venv with ``requirements`` that runs ``check``, built if missing."""
    target = venv_dir(name, requirements)
    with _locked(target):
        if (target / _READY).is_file():
            return venv_python(target)
        scratch = target.with_name(target.name + ".building")
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            _run([sys.executable, "-m", "venv", str(scratch)], "python -m venv")
            pip = [str(venv_python(scratch)), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
            _run([*pip, *requirements], f"pip install {' '.join(requirements)}")
            _run([str(venv_python(scratch)), "-c", check], "the venv's imports")
            (scratch / _READY).write_text("\n".join(requirements) + "\n")
            shutil.rmtree(target, ignore_errors=True)
            # A venv's interpreter finds its prefix from where it is: it works after the rename
            # (only the console scripts' shebangs name the old path, and nothing here uses them).
            scratch.rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return venv_python(target)


def ensure_source(name: str, version: str, check: str) -> Path:
    """The unpacked source release ``<name>-<version>`` from the package index (never built or
    installed), kept in the cache once ``check`` runs with it first on ``PYTHONPATH``."""
    target = cache_root().parent / "sources" / f"{name}-{version}"
    with _locked(target):
        if (target / _READY).is_file():
            return target
        scratch = target.with_name(target.name + ".fetching")
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            download = ["pip", "download", "--disable-pip-version-check", "-q", "--no-deps"]
            _run(
                [
                    sys.executable,
                    "-m",
                    *download,
                    "--no-binary",
                    ":all:",
                    "-d",
                    str(scratch),
                    f"{name}=={version}",
                ],
                f"pip download {name}=={version}",
            )
            (archive,) = scratch.glob(f"{name}-{version}.tar.gz")
            with tarfile.open(archive) as tar:
                tar.extractall(scratch, filter="data")
            unpacked = scratch / f"{name}-{version}"
            env = {**os.environ, "PYTHONPATH": str(unpacked)}
            try:
                subprocess.run(
                    [sys.executable, "-c", check], env=env, cwd=scratch, check=True, capture_output=True
                )
            except subprocess.CalledProcessError as exc:
                raise VenvUnavailable(f"{name} {version}'s source: {exc.stderr.decode()[-300:]}") from exc
            (unpacked / _READY).write_text(f"{name}=={version}\n")
            shutil.rmtree(target, ignore_errors=True)
            unpacked.rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return target
