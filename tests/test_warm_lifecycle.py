"""A stuck, busy or stale zygote never costs a submit (issue 33): real zygotes, real signals, a
real ``pip install`` and the variables torch really reads as it imports."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import psutil

from jupyter_disttrain import api
from jupyter_disttrain.backends.warm import plan as warm
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore
from tests.test_warm import _ran_warm, _wait


def _fp(job: api.Job) -> str:
    """The fingerprint the job was planned for (this process imports the checkout, the launcher
    the installed copy: what they work out may differ)."""
    return str(json.loads((job.dir / "job.json").read_text())["request"]["warm"]["fingerprint"])


def _zygote_pid(directory: Path, job: api.Job) -> int:
    pid = warm.zygote_pid(directory, _fp(job))
    assert pid is not None, _logs(directory)
    return pid


def _logs(directory: Path) -> dict[str, str]:
    """What the zygotes said, and their states, for a failure's message."""
    logs = {p.name: p.read_text()[-2000:] for p in directory.glob("*.log")}
    states = {f: warm.zygote_state(directory, f) for f in warm._fingerprints(directory)}
    return {**logs, **{f: {k: v for k, v in s.items() if k != "modules"} for f, s in states.items()}}


def _started(job: api.Job) -> str:
    return next(e.message for e in job.status().events if e.reason == "Started")


def _warm_job(store: JobStore, name: str) -> api.Job:
    job = api.submit("print('ran')\n", store=store, gpus=2, name=name)
    assert job.wait(timeout=180).phase is JobPhase.SUCCEEDED and _ran_warm(job), _started(job)
    return job


def _spawn_request(job: api.Job, log: Path) -> bytes:
    """The spawn request a launcher sent for ``job``, with its agent's log elsewhere."""
    record = json.loads((job.dir / "job.json").read_text())
    request = {
        "op": "spawn",
        "fingerprint": record["request"]["warm"]["fingerprint"],
        "job_dir": str(job.dir),
        "argv": record["request"]["agents"][0]["argv"],
        "env": dict(os.environ),
        "cwd": str(job.dir),
        "log": str(log),
        "preload": [],
    }
    return json.dumps(request).encode() + b"\n"


def test_a_stopped_zygote_is_replaced_and_a_request_whose_launcher_left_is_never_forked(
    store: JobStore, zygote_dir: Path, tmp_path: Path
) -> None:
    first = _warm_job(store, "first")
    pid = _zygote_pid(zygote_dir, first)
    sock = zygote_dir / f"zygote-{_fp(first)}.sock"
    os.kill(pid, signal.SIGSTOP)
    try:
        # A launcher that gave up: its request waits in the stopped zygote's backlog, then it leaves.
        left = tmp_path / "left.log"
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(sock))
            conn.sendall(_spawn_request(first, left))
        os.kill(pid, signal.SIGCONT)
        with socket.socket(socket.AF_UNIX) as conn:  # answered after the request before it
            conn.connect(str(sock))
            conn.sendall(b'{"op": "ping"}\n')
            assert json.loads(conn.makefile().readline())["pid"] == pid
        assert not left.exists()  # no agent was forked for it (it would log there at once)
        assert not psutil.Process(pid).children()
        os.kill(pid, signal.SIGSTOP)
        stuck = api.submit("print('cold')\n", store=store, gpus=2, name="stuck")
        assert stuck.wait(timeout=180).phase is JobPhase.SUCCEEDED
        why = "the zygote is stopped (SIGSTOP, a debugger): replaced"
        assert f"cold: the warm zygote could not start it ({why})" in _started(stuck)
    finally:
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGCONT)
    _wait(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    # A fresh zygote replaced it, started by the launcher that found it stopped; it outlives that
    # launcher's job and serves the next one.
    _wait(lambda: warm.zygote_pid(zygote_dir, _fp(first)) not in (None, pid))
    replacement = warm.zygote_pid(zygote_dir, _fp(first))
    _wait(lambda: warm.zygote_state(zygote_dir, _fp(first)).get("state") == "ready")
    assert _zygote_pid(zygote_dir, _warm_job(store, "next")) == replacement


HANGS = "import time\ntime.sleep(600)\n"


def test_a_hanging_preload_never_blocks_the_zygote(store: JobStore, zygote_dir: Path) -> None:
    before = _warm_job(store, "before")
    pid = _zygote_pid(zygote_dir, before)
    # The zygote's working dir is its runtime dir, first on its path: a module it can import.
    (zygote_dir / "hangs_on_import.py").write_text(HANGS)
    try:
        sock = zygote_dir / f"zygote-{_fp(before)}.sock"
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(sock))
            conn.sendall(b'{"op": "preload", "modules": ["hangs_on_import"]}\n')
            assert json.loads(conn.makefile().readline()) == {"ok": True}
        job = _warm_job(store, "meanwhile")  # forked by the same zygote while its successor hangs
        assert _zygote_pid(zygote_dir, job) == pid
        successors = [p for p in psutil.Process(pid).children() if "zygote" in " ".join(p.cmdline())]
        assert len(successors) == 1  # still importing, never serving
    finally:
        (zygote_dir / "hangs_on_import.py").unlink()
        plan = warm.WarmPlan.from_json(json.loads((before.dir / "job.json").read_text())["request"]["warm"])
        warm.replace(plan, os.environ, [os.getpid()])  # a zygote without it
    # A successor that never took over ends with its predecessor, its import still hanging.
    _wait(lambda: not successors[0].is_running() or successors[0].status() == psutil.STATUS_ZOMBIE)


PACKAGE = """
[project]
name = "disttrain-test-hook"
version = "{version}"
[tool.setuptools]
py-modules = []
packages = []
data-files = {{"lib/python{py}/site-packages" = ["disttrain_test_hook.pth"]}}
"""


def _pip(*args: str) -> None:
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, *args], check=True, capture_output=True)


def test_two_pip_installs_each_get_a_new_zygote_and_leave_one(
    store: JobStore, zygote_dir: Path, tmp_path: Path
) -> None:
    old = _zygote_pid(zygote_dir, _warm_job(store, "before"))
    key = warm.zygote_state(zygote_dir, warm.fingerprint(os.environ)).get("env_key")
    try:
        for version in ("1", "2"):
            src = tmp_path / f"pkg{version}"
            src.mkdir()
            py = f"{sys.version_info.major}.{sys.version_info.minor}"
            (src / "pyproject.toml").write_text(textwrap.dedent(PACKAGE.format(version=version, py=py)))
            (src / "disttrain_test_hook.pth").write_text("import os; os.environ['PTH_HOOK_RAN'] = 'yes'\n")
            _pip("install", "--no-deps", "--no-index", "--no-build-isolation", str(src))
            job = api.submit(
                "import os\nprint('hook', os.environ.get('PTH_HOOK_RAN'))\n", store=store, gpus=2
            )
            assert job.wait(timeout=240).phase is JobPhase.SUCCEEDED and _ran_warm(job), _started(job)
            assert [ln.text for ln in job.logs() if ln.text.startswith("hook")] == ["hook yes"] * 2
            new = _zygote_pid(zygote_dir, job)
            assert new != old
            _wait(
                lambda gone=old: not psutil.pid_exists(gone) or psutil.Process(gone).status() == "zombie",
                why=lambda: _logs(zygote_dir),
            )
            same_env = [
                f
                for f in warm._fingerprints(zygote_dir)
                if warm.zygote_state(zygote_dir, f).get("env_key") == key
            ]
            assert [f for f in same_env if warm.alive(zygote_dir, f)] == [_fp(job)]
            old = new
    finally:
        _pip("uninstall", "-y", "disttrain-test-hook")


def test_the_fingerprint_ignores_what_torch_sets_for_itself() -> None:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    env = {k: v for k, v in os.environ.items() if k not in warm.SET_BY_LIBRARIES}
    plain = warm.fingerprint(env)
    after = {
        **env,
        "TORCHINDUCTOR_CACHE_DIR": os.path.abspath(default_cache_dir()),
        "KMP_DUPLICATE_LIB_OK": "True",
    }
    assert warm.fingerprint(after) == plain
    assert warm.fingerprint({**env, "TORCHINDUCTOR_CACHE_DIR": "/elsewhere"}) != plain  # the user's own


RECORD = """
import json, os, sys
read = set()
cls = type(os.environ)
get, has = cls.__getitem__, cls.__contains__
WHOLE = ("__iter__", "copy")  # a library walking or copying the whole environment (tqdm's envwrap)
def getitem(self, key):
    if sys._getframe(1).f_code.co_name not in WHOLE:
        read.add(key)
    return get(self, key)
cls.__getitem__ = getitem
cls.__contains__ = lambda self, k: read.add(k) or has(self, k)
from jupyter_disttrain.backends.warm.zygote import BASE_MODULES, RANK_MODULES
for name in [*BASE_MODULES, *RANK_MODULES, *sys.argv[1:]]:
    __import__(name)
print(json.dumps(sorted(k for k in read if isinstance(k, str))))
"""


def test_what_runs_warm_despite_its_prefix_is_never_read_as_the_zygote_imports() -> None:
    modules = [m for m in ("deepspeed",) if __import__("importlib").util.find_spec(m)]
    out = subprocess.run([sys.executable, "-c", RECORD, *modules], check=True, capture_output=True, text=True)
    read = set(json.loads(out.stdout.splitlines()[-1]))
    exempt = {k for k in warm._NOT_IMPORT_TIME if k.startswith(warm.IMPORT_TIME_PREFIXES)}
    assert "TORCH_EXTENSIONS_DIR" in exempt and not read & exempt
    assert "TORCH_LOGS" in read  # the recording sees what torch does read


STARTER = """
import os, sys
from pathlib import Path
from jupyter_disttrain.backends.warm import plan
print("ready", flush=True)
sys.stdin.readline()
plan.start(os.environ, fp=sys.argv[2], key="race", directory=Path(sys.argv[1]))
"""


def _zygotes(directory: Path) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if warm.ZYGOTE_MODULE in cmdline and str(directory) in cmdline:
            found.append(proc.pid)
    return found


def test_starters_at_once_start_one_zygote_which_ends_with_them(tmp_path: Path) -> None:
    """Several processes that each find no zygote and start one at the same moment (the kernel's
    start-ahead and a job's launcher, two jobs) start one; it ends by itself once they have
    ended, though they did before it was ready."""
    directory = warm.private_dir(Path(tempfile.mkdtemp(prefix="dt-race-")))
    fp = "r" * warm.FINGERPRINT_CHARS
    try:
        argv = [sys.executable, "-c", STARTER, str(directory), fp]
        starters = [subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(4)]
        for starter in starters:  # each has imported what it starts with
            assert starter.stdout is not None and starter.stdout.readline() == b"ready\n"
        for starter in starters:
            assert starter.stdin is not None
            starter.stdin.write(b"go\n")
            starter.stdin.close()
        assert [starter.wait(timeout=60) for starter in starters] == [0] * 4
        assert len(_zygotes(directory)) == 1, _logs(directory)
        _wait(lambda: not _zygotes(directory))
        # Whether they ended before it watched them or while it imported, it says it ends with them.
        said = _logs(directory)[f"zygote-{fp}.log"]
        ended_with = ("no process it serves is alive: exiting", "the last process it served")
        assert any(line in said for line in ended_with) and "idle for" not in said, said
    finally:
        warm.stop(directory)
        shutil.rmtree(directory, ignore_errors=True)
