"""``--launcher deepspeed``: DeepSpeed scripts under torchrun (DeepSpeed reads torchrun's env).

No ``deepspeed`` launcher, no MPI, no sshd: the ranks are torchrun's, locally and in pods. What
DeepSpeed needs besides:

- its config, as the script asks for it: ``--deepspeed_config FILE`` among the script's
  arguments, or ``--ds-config FILE`` (then ``--deepspeed --deepspeed_config`` are added). The
  file is read next to the notebook, checked to be JSON, shipped in the job dir as
  ``ds_config.json`` and the script is pointed at that copy (a pod has no notebook dir). A
  config given as a dict in an earlier cell travels in the script like any other value.
- ``MPLBACKEND=Agg``: tutorials call ``plt.show()``, which has no display in a job.
- ``TORCH_EXTENSIONS_DIR`` in a per-user cache, so ops DeepSpeed compiles on first use (on a
  CPU machine its shared-memory collectives, minutes of C++) are compiled once, not per job.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..model.errors import InvalidSpecError
from ..model.flags import option
from ..model.specs import JobSpec
from .base import LaunchContext, Launcher, Role

CONFIG_FILE = "ds_config.json"
CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed-config")
MAX_CONFIG_BYTES = 1 << 20
EXTENSIONS_DIR = "torch_extensions"
INSTALL = 'pip install "deepspeed" (with your torch pinned, e.g. pip install "torch==2.13.0" "deepspeed")'
COMPILING = "compiling DeepSpeed ops"
# torch's JIT build holds ``<TORCH_EXTENSIONS_DIR>/<op>/lock`` while it compiles an op.
_LOCK = "lock"


@dataclass(frozen=True)
class DeepSpeedOptions:
    ds_config: str | None = option(
        metavar="FILE",
        help="deepspeed launcher: DeepSpeed config JSON next to the notebook, shipped with the job "
        "and passed to the script as --deepspeed --deepspeed_config",
    )


def config_arg(args: Sequence[str]) -> tuple[int, str, str] | None:
    """Where ``--deepspeed_config FILE`` is in the script's arguments: (index of the argument that
    holds the file name, what comes before the name in it, the name)."""
    for i, arg in enumerate(args):
        if arg in CONFIG_FLAGS and i + 1 < len(args):
            return i + 1, "", args[i + 1]
        flag, sep, value = arg.partition("=")
        if sep and flag in CONFIG_FLAGS:
            return i, flag + sep, value
    return None


def extensions_dir(cache_dir: str) -> str:
    return posixpath.join(cache_dir, EXTENSIONS_DIR)


class DeepSpeedLauncher(Launcher):
    name = "deepspeed"
    options = DeepSpeedOptions

    def validate(self, spec: JobSpec, *, local: bool) -> None:
        super().validate(spec, local=local)
        if local:
            from importlib.util import find_spec

            try:
                installed = find_spec("deepspeed") is not None
            except (ImportError, ValueError):  # blocked, or half imported
                installed = False
            if not installed:
                raise InvalidSpecError(f"the cell uses DeepSpeed, which is not installed here: {INSTALL}")
        self.side_files(spec, local=local)  # a missing or malformed config is refused before anything runs

    def roles(self, spec: JobSpec, ctx: LaunchContext) -> list[Role]:
        args = list(spec.args)
        shipped = posixpath.join(ctx.job_dir, CONFIG_FILE)
        found = config_arg(args)
        if found is not None:
            i, before, _ = found
            args[i] = before + shipped
        elif spec.launcher_options.get("ds_config"):
            args += ([] if "--deepspeed" in args else ["--deepspeed"]) + ["--deepspeed_config", shipped]
        env = {"MPLBACKEND": "Agg"}
        if ctx.cache_dir and "TORCH_EXTENSIONS_DIR" not in spec.env:
            env["TORCH_EXTENSIONS_DIR"] = extensions_dir(ctx.cache_dir)
        return [Role("worker", spec.world_size, args, env)]

    def side_files(self, spec: JobSpec, *, local: bool) -> dict[str, bytes]:
        found = config_arg(spec.args)
        given = spec.launcher_options.get("ds_config")
        if found is None and not given:
            return {}
        name = found[2] if found is not None else str(given)
        path = Path(spec.working_dir or os.getcwd(), name).expanduser()
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise InvalidSpecError(
                f"DeepSpeed config {name!r}: {exc.strerror or exc} (looked in {path.parent})"
            ) from None
        if len(data) > MAX_CONFIG_BYTES:
            raise InvalidSpecError(f"DeepSpeed config {name!r} is over {MAX_CONFIG_BYTES} bytes")
        try:
            config = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidSpecError(f"DeepSpeed config {name!r} is not valid JSON: {exc}") from None
        if not isinstance(config, dict):
            raise InvalidSpecError(
                f"DeepSpeed config {name!r} must be a JSON object, not {type(config).__name__}"
            )
        return {CONFIG_FILE: data}

    def busy(self, cache_dir: str, since: float) -> str | None:
        """ "compiling DeepSpeed ops (NAME)" while an op of the cache is being built since ``since``
        (seconds since the epoch: the job's start), else None. DeepSpeed prints nothing while it
        compiles (torch logs the build at INFO, which nobody configured): the build's lock says it."""
        building = sorted(lock.parent.name for lock in _locks_since(cache_dir, since))
        return f"{COMPILING} ({', '.join(building)})" if building else None

    def abandon(self, cache_dir: str, since: float) -> list[str]:
        """A build the job's ranks were killed in leaves its lock, and torch then waits for it
        forever in every later job: remove the locks taken since the job started (a build that
        another job started meanwhile loses its lock too; the worst is then a build done twice)."""
        removed = []
        for lock in _locks_since(cache_dir, since):
            try:
                lock.unlink()
                removed.append(lock.parent.name)
            except OSError:
                continue
        return removed


def _locks_since(cache_dir: str, since: float) -> list[Path]:
    """Build locks of the cache's ops taken at ``since`` or later."""
    found = []
    for lock in Path(extensions_dir(cache_dir)).glob(f"*/{_LOCK}"):
        try:
            if lock.stat().st_mtime >= since - 1:  # a second of slack: file times are coarse
                found.append(lock)
        except OSError:
            continue  # the build just ended
    return found
