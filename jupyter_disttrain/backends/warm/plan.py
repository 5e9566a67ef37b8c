"""Warm start: which local jobs fork their ranks from a zygote, and where the zygote lives (a
launcher asks it for a job's agent in ``warmagent.py``).

A zygote (``zygote.py``) is keyed by a fingerprint of what its imports depend on: the interpreter,
its site-packages (a ``pip install`` changes them), where torch is, this package's own files, and
the environment variables read at import time. It lives in this user's runtime dir (0700), found by
that fingerprint. A job runs warm when its processes are torchrun agents' ranks under the kernel's
own interpreter (with ``--max-restarts``, on one node: the forked agent restarts its group as
torchrun does, not the rendezvous rounds of several nodes); ``plan`` says which path a job takes,
and why, for the dry run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...runtime.contract import JOB_ID_ENV
from .zygote_protocol import held

if TYPE_CHECKING:
    import psutil

WARM_ENV = "DISTTRAIN_WARM"  # "0": every job runs cold (the server's DistTrainApp.warm_start)
IDLE_ENV = "DISTTRAIN_WARM_IDLE"  # seconds a zygote with no job waits before it exits
DEFAULT_IDLE = 1800.0
ZYGOTE_MODULE = "jupyter_disttrain.backends.warm.zygote"
# Read when an interpreter or torch starts, so a fork cannot change them: a job whose environment
# differs from the zygote's in one of these runs cold.
IMPORT_TIME_PREFIXES = ("PYTHON", "TORCH", "PYTORCH", "LD_", "KMP_", "GOMP_", "LC_", "CUBLAS", "CUDNN")
IMPORT_TIME_NAMES = frozenset({"LANG", "LANGUAGE"})
# Per process and set by the launch itself, not by what the zygote imported; and read only when
# used, never as torch or the zygote's libraries import (tests/test_warm.py records every
# variable their imports read): DeepSpeed's launcher sets where torch builds its extensions.
_NOT_IMPORT_TIME = frozenset(
    {"PYTHONPATH", "PYTHONUNBUFFERED", "TORCHELASTIC_SIGNALS_TO_HANDLE", "TORCH_EXTENSIONS_DIR"}
)
# The thread pools the zygote imports with (one thread each); a rank gets torchrun's counts back.
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# Libraries worth holding in a zygote when a job imports them: heavy, and fork-safe at import.
HEAVY = frozenset(
    {
        "torchvision",
        "torchaudio",
        "torchtext",
        "torchmetrics",
        "lightning",
        "pytorch_lightning",
        "deepspeed",
        "accelerate",
        "transformers",
        "datasets",
        "timm",
        "numpy",
        "pandas",
        "scipy",
        "sklearn",
        "einops",
        "tensorboard",
    }
)
SPAWN_TIMEOUT = 120.0  # seconds a launcher waits for a zygote still importing
# Seconds a launcher waits for a ready zygote's answer (it forks at once: it never imports while
# it serves): one that does not answer in time is stuck (stopped, swapped out) and is replaced.
ANSWER_TIMEOUT = 10.0
# A forked process shows its own environment where /proc/PID/environ reads it, in the block the
# zygote was started with: room for the variables a rank adds to the kernel's.
ROOM_ENV = "DISTTRAIN_ZYGOTE_ROOM"
FINGERPRINT_CHARS = 20
MAX_SOCKET_PATH = 107  # bytes of an AF_UNIX path (sun_path holds 108 with its NUL)
ROOM_BYTES = 32768
# Why a job of several nodes with --max-restarts runs cold: torchrun restarts such a group in a new
# rendezvous round of every node's agent, which the forked agents do not hold (forked.parse_agent).
MULTI_NODE_RESTARTS = "--max-restarts on several nodes (each restart is a rendezvous round of all agents)"


class WarmUnavailable(Exception):
    """This job cannot run warm now; the message says why (the job then runs cold)."""


@dataclass(frozen=True)
class WarmPlan:
    """Where a job's agents are forked: the zygote's socket and fingerprint, what it should hold
    before it forks (the heavy libraries the script imports), and the environment it is for
    (``env_key``). Whoever starts the zygote (the submitter, the launcher) starts this one, so
    that a zygote's key never depends on which process got there first."""

    socket: str
    fingerprint: str
    preload: tuple[str, ...] = ()
    env_key: str = ""  # "": worked out by whoever starts it (a plan recorded before it was)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "preload": list(self.preload)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WarmPlan:
        preload = tuple(data.get("preload", ()))
        return cls(str(data["socket"]), str(data["fingerprint"]), preload, str(data.get("env_key", "")))


# -- where ---------------------------------------------------------------------------------------------
def zygote_dir() -> Path:
    """This user's runtime dir for zygotes: ``$XDG_RUNTIME_DIR/jupyter_disttrain``, else
    ``/tmp/jupyter_disttrain-UID``; made 0700, and refused when it is not ours alone (a directory
    another user made first, or a link)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    path = Path(base, "jupyter_disttrain") if base else Path(f"/tmp/jupyter_disttrain-{os.getuid()}")
    return private_dir(path)


def private_dir(path: Path) -> Path:
    """``path`` made 0700 if it is not there (its parent must be), and refused (WarmUnavailable)
    when it is not this user's alone or too long a path for a zygote's socket in it."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise WarmUnavailable(f"{path} is not a directory of this user's alone (mode 0700)")
    if len(str(_paths(path, "0" * FINGERPRINT_CHARS)[0]).encode()) > MAX_SOCKET_PATH:
        raise WarmUnavailable(f"{path} is too long a path for a Unix socket in it")
    return path


def import_time_env(env: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in env.items()
        if (k in IMPORT_TIME_NAMES or k.startswith(IMPORT_TIME_PREFIXES)) and k not in _NOT_IMPORT_TIME
    }


def _inductor_cache_dir() -> str | None:
    """torch's default for ``TORCHINDUCTOR_CACHE_DIR``, if torch has worked it out here."""
    utils = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
    return os.path.abspath(utils.default_cache_dir()) if utils is not None else None


# Set by libraries in their own process's environment as they import or run (in the kernel too,
# once it imports them), to what every fresh process of theirs sets: no part of what a zygote
# depends on while they hold that value.
SET_BY_LIBRARIES = {
    "KMP_DUPLICATE_LIB_OK": lambda: "True",  # threadpoolctl, scikit-learn
    "TORCHINDUCTOR_CACHE_DIR": _inductor_cache_dir,  # torch._inductor, once torch._dynamo runs
}


def env_key(env: Mapping[str, str]) -> str:
    """The environment a zygote is for, whatever its packages' files: the interpreter and the
    variables read at import. A zygote of a newer fingerprint of the same key replaces the others."""
    own = {
        k: v
        for k, v in import_time_env(env).items()
        if k not in SET_BY_LIBRARIES or v != SET_BY_LIBRARIES[k]()
    }
    # A venv's python links to its base one; two copies of this package are two environments.
    where = [os.path.realpath(sys.executable), sys.prefix, str(Path(__file__).resolve().parents[2])]
    data = {"python": where, "version": sys.version, "env": sorted(own.items())}
    return _hash(data)


def fingerprint(env: Mapping[str, str]) -> str:
    """What a zygote's imports depend on, hashed: a change of any of it needs another zygote."""
    here = Path(__file__).resolve().parents[2]  # the package: its forked code is the zygote's
    watched = [*_installed(), str(here)]
    for sub in ("runtime", "backends/warm"):
        watched += [str(p) for p in sorted((here / sub).glob("*.py"))]
    return _hash({"environment": env_key(env), "stamps": _stamps(watched)})


def venv_fingerprint() -> str:
    """The interpreter and its installed packages (site-packages, torch), hashed, whatever this
    package's own copy: a cluster node's is compared with the kernel's (a node whose venv differs
    runs cold), where the kernel may run a checkout of the package and the node its installed copy."""
    python = os.path.realpath(sys.executable)
    return _hash({"python": python, "version": sys.version, "stamps": _stamps(_installed())})


def _installed() -> list[str]:
    """Where the interpreter's packages are: site-packages (its own and the user's), torch."""
    import site
    from importlib.util import find_spec

    torch = find_spec("torch")
    found = [*site.getsitepackages(), site.getusersitepackages()]
    return [*found, os.path.dirname(torch.origin)] if torch is not None and torch.origin else found


def _stamps(paths: Iterable[str]) -> dict[str, int]:
    stamps = {}
    for path in paths:
        with contextlib.suppress(OSError):
            stamps[path] = os.stat(path).st_mtime_ns
    return stamps


def _hash(data: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:FINGERPRINT_CHARS]


def _paths(directory: Path, fp: str) -> tuple[Path, Path, Path]:
    return (directory / f"zygote-{fp}.sock", directory / f"zygote-{fp}.lock", directory / f"zygote-{fp}.json")


def alive(directory: Path, fp: str) -> bool:
    """Whether a zygote of ``fp`` lives (it holds its lock from start to end)."""
    return held(_paths(directory, fp)[1])


def zygote_state(directory: Path, fp: str) -> dict[str, Any]:
    """A zygote's state file (pid, state, env_key, the modules it holds); {} when unreadable."""
    _, _, state = _paths(directory, fp)
    try:
        data = json.loads(state.read_bytes()[: 1 << 20])
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def held_modules(directory: Path, fp: str) -> dict[str, str]:
    """The top-level modules a live zygote has imported, and where it found them (its state file)."""
    held = zygote_state(directory, fp).get("modules", {})
    return {str(k): str(v) for k, v in held.items()} if isinstance(held, dict) else {}


def zygote_pid(directory: Path, fp: str) -> int | None:
    """The pid of the live zygote of ``fp``, checked to be that zygote (never a reused pid)."""
    try:
        pid = int(zygote_state(directory, fp).get("pid", 0))
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
    except (OSError, ValueError, TypeError):
        return None
    if alive(directory, fp) and ZYGOTE_MODULE.encode() in cmdline and fp.encode() in cmdline:
        return pid
    return None


def _signal(directory: Path, fp: str, sig: int) -> int | None:
    pid = zygote_pid(directory, fp)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    return pid


def _fingerprints(directory: Path) -> list[str]:
    return [p.stem.removeprefix("zygote-") for p in sorted(directory.glob("zygote-*.json"))]


def stop(directory: Path) -> list[int]:
    """Stop every zygote living in ``directory`` (SIGTERM: the jobs it forked run on); their pids."""
    return [pid for fp in _fingerprints(directory) if (pid := _signal(directory, fp, signal.SIGTERM))]


def stop_stale(directory: Path, key: str, fp: str) -> list[int]:
    """Stop the zygotes of environment ``key`` other than ``fp`` (a ready zygote calls it)."""
    fps = _fingerprints(directory)
    stale = [f for f in fps if f != fp and zygote_state(directory, f).get("env_key") == key]
    return [pid for f in stale if (pid := _signal(directory, f, signal.SIGTERM))]


def stuck(directory: Path, fp: str) -> bool:
    """Whether the zygote of ``fp`` is stopped (SIGSTOP, a debugger): it cannot answer."""
    pid = zygote_pid(directory, fp)
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return pid is not None and f.read().rpartition(b")")[2].split()[0] in (b"T", b"t")
    except (OSError, IndexError):
        return False


def serves_others(proc: psutil.Process, job_id: str) -> bool:
    """Whether ``proc``, a descendant of job ``job_id``'s launcher, works for others: a zygote
    the launcher started (it serves the kernel and the next jobs; its successors too), or what
    such a zygote forked for another job."""
    import psutil  # not on a warm launch's path to its agent

    try:
        job = proc.environ().get(JOB_ID_ENV)
        return job != job_id if job is not None else ZYGOTE_MODULE in proc.cmdline()
    except psutil.Error:
        return False


def replace(plan: WarmPlan, env: Mapping[str, str], owners: Sequence[int]) -> None:
    """End the plan's zygote, which does not answer (SIGKILL: it may be stopped; its jobs run on),
    and start a fresh one for the next job, serving ``owners``."""
    directory, fp = Path(plan.socket).parent, plan.fingerprint
    pid = _signal(directory, fp, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while pid is not None and alive(directory, fp) and time.monotonic() < deadline:
        time.sleep(0.02)  # its lock goes with its last descriptor
    start_for(plan, env, owners)


# -- start -----------------------------------------------------------------------------------------------
def enabled(env: Mapping[str, str] = os.environ) -> bool:
    return env.get(WARM_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def zygote_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment a zygote starts with: the kernel's, one thread per pool, on PYTHONPATH only
    this package and stand-ins for the site hooks, which run in each rank instead
    (``fresh.shadow_site_hooks``; its imports resolve as a rank's do, from the interpreter's own
    path; a job's PYTHONPATH is checked against what it holds instead), and room in its
    environment block for a rank's own (``forked.become``)."""
    from ..rankenv import ensure_runtime_path, runtime_path, user_cache_dir
    from .fresh import shadow_site_hooks

    package = runtime_path(user_cache_dir())
    ensure_runtime_path(package)
    out = {k: v for k, v in env.items() if not k.startswith(("JPY_", "DISTTRAIN_")) and k != "PYTHONPATH"}
    out.update({k: "1" for k in THREAD_ENV})
    out["PYTHONPATH"] = os.pathsep.join([shadow_site_hooks(str(zygote_dir())), package])
    out[ROOM_ENV] = " " * ROOM_BYTES
    return out


def start(
    env: Mapping[str, str],
    *,
    preload: Iterable[str] = (),
    owners: Sequence[int] = (),
    fp: str | None = None,
    key: str = "",
    directory: Path | None = None,
) -> str | None:
    """Start a zygote for ``env`` in the background unless one lives; its fingerprint, or None
    when warm start is off or cannot be used here. It serves while one of ``owners`` (this process
    by default: the kernel, the server, or a job's launcher) or another process it served lives.
    ``fp``, ``key``: the fingerprint and environment key a plan was made for (else worked out from
    ``env``), so that a launcher and the kernel that planned its job start the same zygote,
    whichever gets there first. ``directory``: where it lives, if not in this user's runtime dir
    (a plan's socket names it: a Slurm warm step's zygote has a dir of its own)."""
    if not enabled(env):
        return None
    try:
        directory = directory or zygote_dir()
    except (WarmUnavailable, OSError):
        return None
    fp = fp or fingerprint(env)
    owners = list(owners) or [os.getpid()]
    sock, _, _ = _paths(directory, fp)
    lock = None if alive(directory, fp) else _take_lock(directory, fp)
    if lock is None:  # one lives (or another starter's is starting now)
        tell(str(sock), {"op": "ping", "owner": owners})  # it serves us too
        return fp
    try:
        _spawn(env, directory, fp, key, owners, preload, lock)
    finally:
        os.close(lock)  # the zygote holds it from here on
    return fp


def _take_lock(directory: Path, fp: str) -> int | None:
    """The fingerprint's lock, taken for a zygote about to start (it inherits it and holds it for
    life); None while a zygote holds it. Checking and starting are one step: two starters at once
    (the kernel's start-ahead and a job's launcher, two jobs) never start two zygotes."""
    fd = os.open(_paths(directory, fp)[1], os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    for _ in range(10):  # a shared lock held for a moment is someone's ``alive`` look
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            time.sleep(0.01)
    os.close(fd)
    return None


def _spawn(
    env: Mapping[str, str],
    directory: Path,
    fp: str,
    key: str,
    owners: list[int],
    preload: Iterable[str],
    lock: int,
) -> None:
    idle = env.get(IDLE_ENV) or str(DEFAULT_IDLE)
    argv = [sys.executable, "-u", "-m", ZYGOTE_MODULE, str(directory), fp, "--idle", idle]
    argv += ["--env-key", key or env_key(env), "--lock-fd", str(lock)]
    for owner in owners:
        argv += ["--owner", str(owner)]
    if preload:
        argv += ["--preload", ",".join(sorted(set(preload) & HEAVY))]
    log = open(directory / f"zygote-{fp}.log", "ab")  # noqa: SIM115
    with log:
        subprocess.Popen(
            argv,
            env=zygote_env(env),
            cwd=str(directory),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives whoever started it: jobs fork from it
            pass_fds=(lock,),
        )


def start_for(plan: WarmPlan, env: Mapping[str, str], owners: Sequence[int]) -> None:
    """Start the plan's zygote (its fingerprint and key, in the dir its socket is in) unless one
    lives, serving ``owners``."""
    where = Path(plan.socket).parent
    start(env, preload=plan.preload, fp=plan.fingerprint, key=plan.env_key, owners=owners, directory=where)


def ensure_zygote(plan: WarmPlan, env: Mapping[str, str], owners: Sequence[int] = ()) -> None:
    """Start the plan's zygote unless it lives; either way it serves as long as one of ``owners``
    (this process by default) lives."""
    owners = list(owners) or [os.getpid()]
    if not alive(Path(plan.socket).parent, plan.fingerprint):
        start_for(plan, env, owners)
    else:
        tell(plan.socket, {"op": "ping", "owner": owners})


def tell(path: str, message: Mapping[str, Any]) -> None:
    """Send a zygote one request and wait for nothing (never for a stuck zygote)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(1.0)
        conn.connect(path)
        conn.sendall(json.dumps(message).encode() + b"\n")


def script_imports(source: bytes | None) -> set[str]:
    """The top-level modules a script imports (absolute imports, anywhere in it)."""
    import ast

    if not source:
        return set()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.partition(".")[0])
    return found


def heavy_loaded(modules: Iterable[str] = ()) -> set[str]:
    """The heavy libraries among ``modules`` and this process's imports (a zygote should hold them)."""
    return {name for name in HEAVY if name in sys.modules} | (set(modules) & HEAVY)


class Preloader:
    """Tells a kernel's zygote about heavy libraries the kernel imports as its cells run, so that it
    holds them before a job needs them (an IPython ``post_run_cell`` callback: a few set lookups
    per cell, and one short message when there is news; it never waits for the zygote)."""

    def __init__(self, env: Mapping[str, str], sent: Iterable[str] = ()) -> None:
        self.env = dict(env)
        self.sent = set(sent)

    def __call__(self, *args: object) -> None:
        new = heavy_loaded() - self.sent
        if not new:
            return
        self.sent |= new
        with contextlib.suppress(WarmUnavailable, OSError):
            directory = zygote_dir()
            fp = fingerprint(self.env)
            if not alive(directory, fp):
                start(self.env, preload=self.sent)
                return
            sock, _, _ = _paths(directory, fp)
            tell(str(sock), {"op": "preload", "modules": sorted(new), "owner": os.getpid()})


# -- which path ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobShape:
    """What of a job decides whether its ranks may fork from a zygote, wherever it lives."""

    max_restarts: int
    torchrun_only: bool  # every role's processes are a torchrun agent's ranks
    foreign_python: bool  # --python: another interpreter than the zygote's
    cold: bool  # --cold
    nodes: int = 1


def plan(
    *, env: Mapping[str, str], job_env: Mapping[str, str], shape: JobShape, imports: Iterable[str]
) -> tuple[WarmPlan | None, str]:
    """Whether a local job forks its ranks from a warm zygote, and the line that says why.

    ``env`` is what the job's processes inherit (the kernel's), ``job_env`` what its launch adds;
    ``imports`` the top-level modules its script imports."""
    why_cold = cold_because(env, job_env, shape)
    if why_cold:
        return None, f"cold: {why_cold}"
    try:
        directory = zygote_dir()
    except (WarmUnavailable, OSError) as exc:
        return None, f"cold: no private runtime dir for a zygote ({exc})"
    fp, key = fingerprint(env), env_key(env)
    pythonpath = job_env.get("PYTHONPATH", "")
    why_cold = shadowed(pythonpath, held_modules(directory, fp)) or unseen_packages(pythonpath)
    if why_cold:
        return None, f"cold: {why_cold}"
    sock, _, _ = _paths(directory, fp)
    preload = tuple(sorted({m.partition(".")[0] for m in imports} & HEAVY))
    line = f"warm: {_readiness(directory, fp)} (--cold to run torchrun afresh)"
    return WarmPlan(str(sock), fp, preload, key), line


def _readiness(directory: Path, fp: str) -> str:
    """How soon the zygote can fork: a job waits for one that is still importing torch."""
    if not alive(directory, fp):
        return "forked from a zygote started now (the job waits while it imports torch)"
    if zygote_state(directory, fp).get("state") != "ready":
        return "forked from a zygote (the job waits while it imports torch)"
    return "forked from a zygote"


def cold_because(env: Mapping[str, str], job_env: Mapping[str, str], shape: JobShape) -> str | None:
    """Why a job of this shape runs cold wherever its zygote lives (here, or a Slurm warm
    step's), if it does: the words the dry run's ``cold:`` line ends with."""
    if shape.cold:
        return "--cold"
    if not enabled(env):
        return f"warm start is off (${WARM_ENV}={env.get(WARM_ENV)})"
    if not hasattr(os, "pidfd_open") or not sys.platform.startswith("linux"):
        return "warm start needs Linux's pidfd (kernel 5.3, Python 3.9)"
    if shape.foreign_python:
        return "--python runs another interpreter"
    if shape.max_restarts and shape.nodes > 1:
        return MULTI_NODE_RESTARTS
    if not shape.torchrun_only:
        return "this launcher starts its own processes"
    changed = sorted(k for k, v in import_time_env(job_env).items() if env.get(k) != v)
    if changed:
        return f"{changed[0]} is read when Python or torch starts"
    return None


def shadowed(pythonpath: str, held: Mapping[str, str]) -> str | None:
    """Why the job's PYTHONPATH would import another copy of a module the zygote holds, if so
    (checked when the job is planned, and by the zygote, which knows, before it forks)."""
    for entry in filter(None, pythonpath.split(os.pathsep)):
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        for name in names:
            module = name.partition(".")[0]
            # This package runs the rank wrapper, the zygote's copy as the launcher's: not the job's.
            ours = module == __name__.partition(".")[0]
            if ours or module not in held or not (name == module or name.endswith((".py", ".so", ".pyd"))):
                continue
            found = os.path.join(entry, name)
            if os.path.realpath(found) != held[module]:
                return f"{found} would replace the {module} the zygote imported"
    return None


def unseen_packages(pythonpath: str) -> str | None:
    """Why the job's PYTHONPATH holds installed packages (``pip install --target``: their
    ``*.dist-info``) that the libraries the zygote imported could not see, if so: a library may
    look for an optional one as it imports (Lightning picks Rich's progress bar when it finds
    ``rich``), and in a warm rank it has looked already."""
    import site

    own = {os.path.realpath(p) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    for entry in filter(None, pythonpath.split(os.pathsep)):
        if os.path.realpath(entry) in own:
            continue
        with contextlib.suppress(OSError):
            found = sorted(n for n in os.listdir(entry) if n.endswith((".dist-info", ".egg-info")))
            if found:
                names = ", ".join(n.rpartition(".")[0] for n in found[:3]) + (", ..." if found[3:] else "")
                return f"{entry} holds packages ({names}) the zygote's imports could not look for"
    return None
