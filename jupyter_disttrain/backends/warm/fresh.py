"""What a fresh interpreter has that a process forked from the warm zygote must be given back.

The zygote measures it once (``Interpreter``, from ``zygote.py``), before and while it imports;
each warm rank restores it (``restore``, from ``forked.rank_main``) before the rank wrapper runs
the script, in the order a fresh interpreter gets it: its ``sys.path``, then its site hooks
(``.pth`` import lines, ``sitecustomize``, ``usercustomize``: the zygote ran only theirs of
its own, see ``shadow_site_hooks``), then what reads the rank's environment as the hooks left it
(torch's and the BLAS libraries' thread pools, ``tempfile``'s directory), then fresh random states
and warning registries.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Modules ``site`` imports by name at start: the zygote's shadows (no-ops) are dropped in a rank,
# whose own import finds the user's.
SITE_HOOKS = ("sitecustomize", "usercustomize")
SHADOW_DIR = "site-shadow"  # in the zygote's runtime dir: first on its PYTHONPATH only
# Which variables set a BLAS or OpenMP pool's size in a fresh process, first found wins, per
# threadpoolctl's ``internal_api`` (OpenBLAS reads its own two, then OpenMP's; MKL and BLIS alike).
POOL_ENV = {
    "openblas": ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"),
    "mkl": ("MKL_NUM_THREADS", "OMP_NUM_THREADS"),
    "blis": ("BLIS_NUM_THREADS", "OMP_NUM_THREADS"),
    "flexiblas": ("FLEXIBLAS_NUM_THREADS", "OMP_NUM_THREADS"),
    "openmp": ("OMP_NUM_THREADS",),
}


@dataclass(frozen=True)
class Interpreter:
    """What a fresh interpreter of the zygote's kind starts with, which a fork must restore: the
    ``sys.path`` it has without PYTHONPATH, torch's default thread counts and each BLAS/OpenMP
    library's default pool size (the zygote itself runs with one thread: see ``zygote.py``), and
    the ``LC_CTYPE`` Python sets at start in a C locale (PEP 538), which the zygote's environment
    shows when it did."""

    base_path: tuple[str, ...]
    threads: int
    interop_threads: int
    coerced_locale: str | None = None
    pools: Mapping[str, int] = field(default_factory=dict)  # a library's path -> its default size
    # What the zygote's imports set in their own environment (threadpoolctl's
    # KMP_DUPLICATE_LIB_OK): a rank's imports would have set it too.
    import_env: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Leftover:
    """What importing one preloaded module added to the process-wide configuration: warnings
    filters and logging handlers (by identity, with the logger that holds each)."""

    filters: list[Any] = field(default_factory=list)
    handlers: list[tuple[Any, Any]] = field(default_factory=list)


# Per module the zygote preloaded for some notebook's job (beyond the modules every rank gets):
# what its import configured. Inherited by every fork; a rank of a job that does not import the
# module drops it (``drop_leftovers``), as its cold twin never had it.
LEFTOVERS: dict[str, Leftover] = {}
# Set in a forked agent: the heavy modules its own job imports (their leftovers are its own too).
KEEP: frozenset[str] = frozenset()


def _handlers() -> set[tuple[Any, Any]]:
    import logging

    loggers = [logging.root, *logging.root.manager.loggerDict.values()]
    return {(lg, h) for lg in loggers for h in getattr(lg, "handlers", ())}


def traced_imports(modules: Iterable[str], load: Callable[[list[str]], None]) -> None:
    """``load`` each of ``modules`` in turn, noting in ``LEFTOVERS`` what each one's import
    configured."""
    import warnings

    for name in modules:
        before, handlers = list(warnings.filters), _handlers()  # held: their ids stay theirs
        known = {id(f) for f in before}
        load([name])
        added = [f for f in warnings.filters if id(f) not in known]
        LEFTOVERS[name] = Leftover(added, list(_handlers() - handlers))


def drop_leftovers(keep: Iterable[str]) -> None:
    """Undo what preloads other than ``keep`` configured: a cold rank that does not import them
    has neither their warnings filters nor their loggers' handlers."""
    import warnings

    kept = set(keep)
    dropped = [left for name, left in LEFTOVERS.items() if name not in kept]
    gone = {id(f) for left in dropped for f in left.filters}
    if gone:
        warnings.filters[:] = [f for f in warnings.filters if id(f) not in gone]  # type: ignore[index]
    for left in dropped:
        for logger, handler in left.handlers:
            logger.removeHandler(handler)


def shadow_site_hooks(directory: str) -> str:
    """A directory holding empty ``sitecustomize``/``usercustomize`` modules, which the zygote
    imports in place of the user's (first on its PYTHONPATH): a hook runs in each rank, with the
    rank's environment, as in a fresh process, and never in the zygote, where a hook that starts
    a thread (a tracing agent) would make every fork unsafe."""
    path = os.path.join(directory, SHADOW_DIR)
    os.makedirs(path, mode=0o700, exist_ok=True)
    for name in SITE_HOOKS:
        module = os.path.join(path, f"{name}.py")
        if not os.path.exists(module):
            with open(module, "w", encoding="utf-8") as f:
                f.write('"""The warm zygote\'s stand-in: the real hook runs in each rank."""\n')
    return path


def restore(interpreter: Interpreter, env: Mapping[str, str], worker_argv: list[str]) -> None:
    """Undo what a forked rank inherited of the zygote's interpreter state; ``worker_argv`` is the
    command line a cold rank runs (its ``sys.orig_argv``)."""
    sys.orig_argv[:] = worker_argv
    drop_leftovers(KEEP)
    fresh_warnings()
    site_hooks(interpreter, env)
    sys.path.insert(0, "")  # where ``-m`` puts the working dir, after ``site`` ran; the wrapper sets it
    for name, value in interpreter.import_env.items():
        os.environ.setdefault(name, value)
    import tempfile

    tempfile.tempdir = None  # worked out again from this rank's TMPDIR when first asked
    set_pools(interpreter, os.environ)
    set_torch_threads(interpreter, os.environ)
    reseed()


def set_path(interpreter: Interpreter, env: Mapping[str, str]) -> None:
    pythonpath = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    # PYTHONPATH, then the rest, where (as ``site`` does) an entry already listed is not listed
    # again; the script's directory goes first once the site hooks ran (``restore``).
    seen = {os.path.abspath(p) for p in pythonpath}
    base = [p for p in interpreter.base_path if os.path.abspath(p) not in seen]
    sys.path[:] = [*pythonpath, *base]
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()


def site_hooks(interpreter: Interpreter, env: Mapping[str, str]) -> None:
    """A fresh interpreter's ``sys.path`` for ``env``, and what ``site`` runs as it starts: each
    site dir's ``.pth`` files (their path lines are listed already; their ``import`` lines run
    now, in this process), then ``sitecustomize`` and ``usercustomize`` as found on that path."""
    import site

    set_path(interpreter, env)
    for name in SITE_HOOKS:
        sys.modules.pop(name, None)  # the zygote's stand-ins
    site.main()


def fresh_warnings() -> None:
    """Warnings the zygote showed (once per location, or once at all) show again here, as in a
    fresh process; the filters of the modules every rank gets stay (a cold rank's imports add
    them too), those of other jobs' preloads went (``drop_leftovers``)."""
    import warnings

    warnings.onceregistry.clear()  # type: ignore[attr-defined]
    warnings._filters_mutated()  # type: ignore[attr-defined]  # every __warningregistry__ is stale


def pool_size(api: str, env: Mapping[str, str], default: int) -> int:
    """The pool size a fresh process of ``env`` gives a library of ``api``."""
    for name in POOL_ENV.get(api, ("OMP_NUM_THREADS",)):
        value = env.get(name, "").split(",")[0].strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return default


def set_pools(interpreter: Interpreter, env: Mapping[str, str]) -> None:
    """Each BLAS and OpenMP library's pool as a fresh process of ``env`` sizes it: the zygote
    loaded them with one thread, and they read their variables only when loaded. threadpoolctl
    finds the libraries this process has loaded and calls each one's own setter."""
    from threadpoolctl import ThreadpoolController

    fallback = len(os.sched_getaffinity(0))
    for lib in ThreadpoolController().lib_controllers:
        default = interpreter.pools.get(os.path.realpath(lib.filepath), fallback)
        wanted = pool_size(lib.internal_api, env, default)
        if lib.num_threads != wanted:
            lib.set_num_threads(wanted)


def set_torch_threads(interpreter: Interpreter, env: Mapping[str, str]) -> None:
    import torch

    threads = env.get("OMP_NUM_THREADS", "")
    torch.set_num_threads(int(threads) if threads.isdigit() and int(threads) > 0 else interpreter.threads)
    torch.set_num_interop_threads(interpreter.interop_threads)


def reseed() -> None:
    """Each fresh interpreter seeds its own random states from fresh entropy: torch's CPU
    generator (CUDA's are made, with torch's fixed default seed, when a rank first uses CUDA, as
    in any fresh process: the zygote never initialises CUDA) and numpy's global one. Python's
    ``random`` reseeds itself in a forked child."""
    import torch

    torch.default_generator.seed()
    if (np_random := sys.modules.get("numpy.random")) is not None:
        np_random.seed()


def measure_pools() -> dict[str, int]:
    """Each loaded BLAS/OpenMP library's pool size, by its path (in a fresh interpreter without
    thread variables: the defaults a rank falls back to)."""
    from threadpoolctl import threadpool_info

    return {os.path.realpath(info["filepath"]): int(info["num_threads"]) for info in threadpool_info()}
