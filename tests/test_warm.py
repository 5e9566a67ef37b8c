"""Warm start: ranks forked from a zygote that has torch imported, exactly as cold ranks start.

Real zygotes, real forks, real gloo process groups (2 CPU ranks); the session's zygotes live in
the runtime dir of ``conftest.zygote_dir``.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import site
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import psutil
import pytest

from jupyter_disttrain import api
from jupyter_disttrain.backends.warm import fresh
from jupyter_disttrain.backends.warm import plan as warm
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

# What a rank sees of its own start: compared between warm and cold ranks (issue 33).
PROBE = r"""
import json, logging, os, random, signal, sys, warnings
with open("/proc/self/environ", "rb") as f:  # what ps and /proc show of the process
    shown = dict(e.decode().split("=", 1) for e in f.read().split(b"\0") if b"=" in e)
import numpy, torch, torch.distributed as dist
from threadpoolctl import threadpool_info

seen = {
    "hook": os.environ.get("SITE_HOOK_RAN"),
    "seed": [torch.initial_seed(), torch.rand(1).item()],
    "random": [random.random(), numpy.random.random()],
    # Each kind of pool's sizes: a second OpenBLAS that a preload for another job loaded stays
    # loaded in a warm rank (a shared library cannot be unloaded), sized from the env as the rest.
    "pools": sorted({(i["internal_api"], i["num_threads"]) for i in threadpool_info()}),
    "threads": [torch.get_num_threads(), torch.get_num_interop_threads()],
    "torch": [str(torch.get_default_dtype()), torch.are_deterministic_algorithms_enabled(),
              torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision()],
    "path": sys.path,
    "cwd": os.getcwd(),
    "argv": [sys.argv, sys.orig_argv],
    "main": [__name__, __file__, sys.modules["__main__"].__dict__ is globals()],
    "session_leader": os.getsid(0) == os.getpid(),
    "signals": {str(s): str(signal.getsignal(s)) for s in signal.valid_signals()
                if s not in (signal.SIGKILL, signal.SIGSTOP)},
    "flags": [sys.stdout.write_through, list(sys.flags)],
    "cuda": [torch.cuda.is_initialized(), torch.cuda._is_in_bad_fork()],
}
seen["shown"] = shown

def train():  # a real DDP loop: its losses, unseeded and then seeded
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = model(torch.randn(4, 8)).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses

dist.init_process_group("gloo")
seen["unseeded"] = train()
torch.manual_seed(0)
seen["seeded"] = train()
# After a first optimizer step, which imports torch._dynamo in a cold rank too (the zygote has).
seen["filters"] = [(a, str(getattr(m, "pattern", m)), c.__name__, str(getattr(mod, "pattern", mod)), n)
                   for a, m, c, mod, n in warnings.filters]
loggers = logging.root.manager.loggerDict.items()
seen["handlers"] = sorted(n for n, lg in loggers if getattr(lg, "handlers", None))
seen["root"] = [logging.root.level, len(logging.root.handlers)]
seen["env"] = dict(os.environ)
with open(os.path.join(os.environ["PROBE_DIR"], f"{dist.get_rank()}.json"), "w") as f:
    json.dump(seen, f)
dist.destroy_process_group()
"""
SITE_HOOK = "import os\nos.environ['SITE_HOOK_RAN'] = os.environ.get('RANK', 'no rank')\n"
# Differ between any two jobs, warm or cold: where the store served them, and the switch itself.
PER_JOB = ("MASTER_PORT", "TORCHELASTIC_ERROR_FILE", warm.WARM_ENV)
# Differ between any two processes, warm or cold (unless seeded).
PER_PROCESS = ("seed", "random", "unseeded")


def _probe(
    store: JobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, run: int
) -> list[dict]:
    monkeypatch.setenv(warm.WARM_ENV, "1" if how == "warm" else "0")
    out = tmp_path / f"{how}{run}"
    out.mkdir()
    hooks = tmp_path / "hooks"  # a sitecustomize on the job's PYTHONPATH, as shims and agents use
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(SITE_HOOK)
    env = {"PROBE_DIR": str(out), "PYTHONPATH": str(hooks)}
    if run:  # BLAS and torch pools sized by the rank's own variable
        env["OMP_NUM_THREADS"] = "2"
    job = api.submit(PROBE, store=store, gpus=2, name=f"probe-{how}", env=env)
    status = job.wait(timeout=180)
    assert status.phase is JobPhase.SUCCEEDED, status
    started = next(e.message for e in status.events if e.reason == "Started")
    assert f"({how}:" in started, started
    seen = [json.loads((out / f"{rank}.json").read_text()) for rank in (0, 1)]
    for rank in seen:  # the same rank seen from another job: its id and dir in its place
        text = json.dumps(rank).replace(job.id, "JOB").replace(str(out), "OUT")
        rank.clear()
        rank.update(json.loads(text))
        for key in PER_JOB:
            rank["env"].pop(key), rank["shown"].pop(key)
    return seen


def test_a_warm_rank_is_the_same_program_as_a_cold_one(
    store: JobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zygote_dir: Path
) -> None:
    runs = {how: [_probe(store, tmp_path, monkeypatch, how, r) for r in (0, 1)] for how in ("cold", "warm")}
    for how, (first, second) in runs.items():
        ranks = [*first, *second]
        for key in PER_PROCESS:  # from fresh entropy in every rank of every run, warm as cold
            values = [json.dumps(rank[key]) for rank in ranks]
            assert len(set(values)) == len(values), (how, key, values)
        for rank in (0, 1):  # a seeded loop repeats itself, warm as cold
            assert first[rank]["seeded"] == second[rank]["seeded"] == runs["cold"][0][rank]["seeded"]
            assert first[rank]["hook"] == str(rank)  # the site hook ran in the rank itself
    for run in (0, 1):
        for rank in (0, 1):
            hot, cold = runs["warm"][run][rank], runs["cold"][run][rank]
            for key in PER_PROCESS:
                hot.pop(key), cold.pop(key)
            differ = {k: (hot.get(k), cold.get(k)) for k in {*hot, *cold} if hot.get(k) != cold.get(k)}
            assert not differ, (run, rank, differ)
    hot = runs["warm"]
    assert hot[0][0]["env"]["RANK"] == "0" and hot[0][1]["env"]["RANK"] == "1"
    assert hot[0][0]["shown"]["RANK"] == "0" and hot[0][0]["cuda"] == [False, False]
    assert hot[0][0]["threads"][0] == 1  # torchrun's OMP_NUM_THREADS=1 for 2 processes per node
    assert hot[1][0]["threads"][0] == 2 and ["openblas", 2] in hot[1][0]["pools"]


NOISY = "import logging, warnings\nwarnings.filterwarnings('ignore', 'noisy preload')\n" + (
    "logging.getLogger('noisy').addHandler(logging.NullHandler())\n"
)


def test_what_a_preload_for_another_job_configured_is_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The zygote's preloads for other notebooks' jobs (deepspeed's filters, alembic's handler)
    are not in a rank whose job does not import them; a job that does keeps them."""
    (tmp_path / "noisy_preload.py").write_text(NOISY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(fresh, "LEFTOVERS", {})
    logger = logging.getLogger("noisy")

    def filtered() -> bool:
        return any(getattr(f[1], "pattern", None) == "noisy preload" for f in warnings.filters)

    with warnings.catch_warnings():
        fresh.traced_imports(["noisy_preload"], lambda names: [importlib.import_module(n) for n in names])
        assert filtered() and logger.handlers
        fresh.drop_leftovers(["noisy_preload"])  # its own job's import: kept
        assert filtered() and logger.handlers
        fresh.drop_leftovers(["deepspeed"])
        assert not filtered() and not logger.handlers
    sys.modules.pop("noisy_preload")


def test_the_dry_run_says_which_path_and_why(
    store: JobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zygote_dir: Path
) -> None:
    def start(**kw: object) -> str:
        info = api.dryrun("import torch\n", store=store, **kw)  # type: ignore[arg-type]
        line = info.request.to_json()["start"]
        assert f"# start: {line}" in info.text
        return str(line)

    assert start(gpus=2).startswith("warm: forked from a zygote")
    with monkeypatch.context() as other:  # an environment no zygote serves yet (Run All, new kernel)
        other.setenv("PYTHONDRYRUNTEST", "1")
        waits = "warm: forked from a zygote started now (the job waits while it imports torch)"
        assert start(gpus=2).startswith(waits)
        assert not warm.alive(zygote_dir, warm.fingerprint(os.environ))  # a dry run starts nothing
    assert start(gpus=2, options={"cold": True}) == "cold: --cold"
    # The forked agent restarts a group as torchrun does; several nodes' rendezvous rounds it does not.
    assert start(gpus=2, max_restarts=1).startswith("warm: forked from a zygote")
    assert start(gpus=1, nodes=2, max_restarts=1) == f"cold: {warm.MULTI_NODE_RESTARTS}"
    assert start(gpus=1, nodes=2).startswith("warm: forked from a zygote")  # each node's agent
    assert start(gpus=2, env={"TORCH_LOGS": "dynamo"}).startswith("cold: TORCH_LOGS is read when")
    # DeepSpeed's launcher sets TORCH_EXTENSIONS_DIR, which torch reads only when it builds.
    assert start(gpus=2, accelerator="cpu", launcher="deepspeed").startswith("warm: forked from a zygote")
    # Packages installed with `pip install --target`: Lightning, imported ahead in the zygote,
    # would not have found their rich there.
    target = tmp_path / "target"
    (target / "rich-13.9.4.dist-info").mkdir(parents=True)
    why = start(gpus=2, env={"PYTHONPATH": str(target)})
    assert why == f"cold: {target} holds packages (rich-13.9.4) the zygote's imports could not look for"
    # A numpy beside the notebook: the zygote's own would be used. Planned cold once the zygote
    # says what it holds; before that, the zygote itself refuses such a job, which then runs cold.
    shadow = tmp_path / "notebook"
    (shadow / "numpy").mkdir(parents=True)
    (shadow / "numpy" / "__init__.py").write_text('raise ImportError("the notebook numpy")\n')
    uses = "import numpy\nprint(numpy.__file__)\n"
    job = api.submit(uses, store=store, gpus=2, name="shadowed", working_dir=str(shadow))
    assert job.wait(timeout=180).phase is JobPhase.FAILED  # it imported the notebook's numpy
    assert any("the notebook numpy" in ln.text for ln in job.logs())
    replace = f"{shadow / 'numpy'} would replace the numpy the zygote imported"
    assert any(replace in e.message and "(cold: " in e.message for e in job.status().events)
    assert start(gpus=2, working_dir=str(shadow)) == f"cold: {replace}"


def _zygote_pid(directory: Path) -> int:
    """The pid of the zygote for this process's environment."""
    fp = warm.fingerprint(os.environ)
    assert warm.alive(directory, fp)
    return int(json.loads((directory / f"zygote-{fp}.json").read_text())["pid"])


def _ran_warm(job: api.Job) -> bool:
    return any("(warm:" in e.message for e in job.status().events if e.reason == "Started")


def test_a_cancelled_job_leaves_the_zygote_usable(store: JobStore, zygote_dir: Path) -> None:
    hang = 'import time, torch.distributed as dist\ndist.init_process_group("gloo")\ntime.sleep(600)\n'
    job = api.submit(hang, store=store, gpus=2, name="hang", options={"grace_period": 2})
    deadline = time.monotonic() + 120
    while job.status().replicas_ready < 2:
        assert time.monotonic() < deadline, job.status()
        time.sleep(0.1)
    zygote = _zygote_pid(zygote_dir)
    assert job.cancel().phase is JobPhase.CANCELLED
    assert not any(p.environ().get("DISTTRAIN_JOB_ID") == job.id for p in _children(zygote))
    again = api.submit("print('again')\n", store=store, gpus=2, name="again")
    assert again.wait(timeout=120).phase is JobPhase.SUCCEEDED
    assert _ran_warm(again) and _zygote_pid(zygote_dir) == zygote


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@pytest.mark.usefixtures("start_path")
def test_a_rank_that_segfaults_is_named(store: JobStore) -> None:
    script = """
import ctypes, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    ctypes.string_at(0)
dist.barrier()
"""
    status = api.submit(script, store=store, gpus=2, name="segv").wait(timeout=120)
    assert status.phase is JobPhase.FAILED
    rank1 = next(r for r in status.replicas if r.name == "rank-1")
    assert (rank1.reason, rank1.exit_code, rank1.message) == ("SIGSEGV", -signal.SIGSEGV, "killed by SIGSEGV")


THREADS_ON_USR1 = """
import signal, threading, time
start = lambda *a: threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
signal.signal(signal.SIGUSR1, start)
"""


def test_a_zygote_that_is_no_longer_fork_safe_is_replaced_and_the_job_runs_cold(
    store: JobStore, zygote_dir: Path, tmp_path: Path
) -> None:
    # A zygote of this environment that holds a module which starts a thread on SIGUSR1.
    fp = warm.fingerprint(os.environ)
    warm.stop(zygote_dir)
    _wait(lambda: not warm.alive(zygote_dir, fp))
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "threads_on_usr1.py").write_text(THREADS_ON_USR1)
    env = warm.zygote_env(os.environ)
    env["PYTHONPATH"] += os.pathsep + str(tmp_path / "mods")
    argv = [
        sys.executable,
        "-u",
        "-m",
        warm.ZYGOTE_MODULE,
        str(zygote_dir),
        fp,
        "--preload",
        "threads_on_usr1",
    ]
    subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL)
    _wait(lambda: _state(zygote_dir, fp).get("state") == "ready")
    first = _zygote_pid(zygote_dir)
    ok = api.submit("print('fine')\n", store=store, gpus=2, name="before")
    assert ok.wait(timeout=120).phase is JobPhase.SUCCEEDED and _ran_warm(ok)
    os.kill(first, signal.SIGUSR1)  # the zygote now runs a second thread: a fork could deadlock
    job = api.submit("print('cold')\n", store=store, gpus=2, name="unsafe")
    status = job.wait(timeout=180)
    assert status.phase is JobPhase.SUCCEEDED
    started = next(e.message for e in status.events if e.reason == "Started")
    assert "cold: the warm zygote could not start it (the zygote is no longer fork-safe: 2 threads" in started
    _wait(lambda: not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE)
    after = api.submit("print('warm again')\n", store=store, gpus=2, name="after")
    assert after.wait(timeout=180).phase is JobPhase.SUCCEEDED and _ran_warm(after)
    assert _zygote_pid(zygote_dir) != first


def test_a_package_installed_in_the_environment_gets_a_new_zygote(store: JobStore, zygote_dir: Path) -> None:
    first = api.submit("print(1)\n", store=store, gpus=2, name="first")
    assert first.wait(timeout=180).phase is JobPhase.SUCCEEDED and _ran_warm(first)
    fp = warm.fingerprint(os.environ)
    package = Path(site.getsitepackages()[0], "disttrain_test_newpkg")
    package.mkdir()  # what `pip install newpkg` makes in the environment
    try:
        assert warm.fingerprint(os.environ) != fp
        second = api.submit("print(2)\n", store=store, gpus=2, name="second")
        assert second.wait(timeout=180).phase is JobPhase.SUCCEEDED and _ran_warm(second)
        assert warm.alive(zygote_dir, warm.fingerprint(os.environ))
    finally:
        package.rmdir()


def test_only_its_user_reaches_the_zygote_and_only_for_its_own_jobs(
    store: JobStore, zygote_dir: Path, tmp_path: Path
) -> None:
    job = api.submit("print(1)\n", store=store, gpus=2, name="mine")
    assert job.wait(timeout=180).phase is JobPhase.SUCCEEDED and _ran_warm(job)
    pid = _zygote_pid(zygote_dir)
    assert zygote_dir.stat().st_mode & 0o777 == 0o700
    sock = zygote_dir / f"zygote-{warm.fingerprint(os.environ)}.sock"
    assert sock.stat().st_mode & 0o777 == 0o600
    # No TCP port: its only way in is that socket.
    assert all(c.family == socket.AF_UNIX for c in psutil.Process(pid).net_connections(kind="all"))
    # Another user cannot even reach the socket (CI runs as root: a child becomes nobody).
    if os.getuid() == 0:
        child = os.fork()
        if child == 0:
            code = 1
            try:
                os.setuid(65534)
                socket.socket(socket.AF_UNIX).connect(str(sock))
                code = 0
            except PermissionError:
                code = 13
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 13
    record = json.loads((job.dir / "job.json").read_text())
    agent = record["request"]["agents"][0]
    fp = json.loads((job.dir / "job.json").read_text())["request"]["warm"]["fingerprint"]

    def ask(job_dir: Path, argv: list[str]) -> dict:
        request = {
            "op": "spawn",
            "fingerprint": fp,
            "job_dir": str(job_dir),
            "argv": argv,
            "env": {},
            "cwd": str(job_dir),
            "log": os.devnull,
            "preload": [],
        }
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(sock))
            conn.sendall(json.dumps(request).encode() + b"\n")
            return json.loads(conn.makefile().readline())

    outside = tmp_path / "evil.py"
    outside.write_text("print('not a job')\n")
    argv = [*agent["argv"][:-1], str(outside)]  # the same torchrun line on a script elsewhere
    answer = ask(job.dir, argv)
    assert answer["ok"] is False and "is not in the job dir" in answer["error"]
    os.chmod(job.dir, 0o777)
    try:
        answer = ask(job.dir, agent["argv"])
        assert answer["ok"] is False and "is not this user's own job file" in answer["error"]
    finally:
        os.chmod(job.dir, 0o755)
    assert _zygote_pid(zygote_dir) == pid  # refusals leave it serving


def test_a_zygote_ends_with_its_parent_and_when_idle(tmp_path: Path) -> None:
    runtime = Path(os.environ["XDG_RUNTIME_DIR"], "jupyter_disttrain")
    parent = subprocess.Popen(["sleep", "600"])
    env = {**os.environ, "TORCH_EXTRA_FOR_THIS_TEST": "1"}  # a fingerprint of its own
    fp = warm.start(env, owners=[parent.pid])
    assert fp is not None
    _wait(lambda: _state(runtime, fp).get("state") == "ready")
    pid = int(_state(runtime, fp)["pid"])
    parent.kill()
    parent.wait()
    _wait(lambda: not warm.alive(runtime, fp))
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    fp = warm.start({**env, warm.IDLE_ENV: "1"})
    assert fp is not None
    _wait(lambda: _state(runtime, fp).get("state") == "ready")
    _wait(lambda: not warm.alive(runtime, fp))  # idle for a second


def _state(directory: Path, fp: str) -> dict:
    try:
        return dict(json.loads((directory / f"zygote-{fp}.json").read_text()))
    except (OSError, ValueError):
        return {}


def _wait(ready, timeout: float = 120.0, why=lambda: "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"timed out {why()}"
        time.sleep(0.05)


# Attempt 0: rank 0 saves a checkpoint, then rank 1 fails; attempt 1 records what each rank got.
RESTARTED = r"""
import json, os, sys, time
import torch
from jupyter_disttrain import em
attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
if attempt == "0":
    if rank == "0":
        torch.save({"step": 3}, os.path.join(em.checkpoint_dir(), "step-3.pt"))
        open(os.path.join(os.environ["PROBE_DIR"], "saved"), "w").close()
    else:
        while not os.path.exists(os.path.join(os.environ["PROBE_DIR"], "saved")):
            time.sleep(0.05)
        sys.exit(3)
    time.sleep(600)  # stopped by the agent: its group failed
with open("/proc/self/environ", "rb") as f:
    shown = dict(e.decode().split("=", 1) for e in f.read().split(b"\0") if b"=" in e)
with open(os.path.join(os.environ["PROBE_DIR"], f"{rank}.json"), "w") as f:
    json.dump({"env": dict(os.environ), "shown": shown, "resume": em.resume_from()}, f)
"""


# Besides PER_JOB: what the zygote's imports ahead set at their defaults (docs/warm-start.md, "What
# is not the same"), which a cold rank sets too once it imports torch._dynamo (this one does not).
SAME_BUT_NOT_YET = (*PER_JOB, *warm.SET_BY_LIBRARIES)


def test_a_warm_group_restarts_as_torchruns_does_and_resumes_from_its_checkpoint(
    store: JobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zygote_dir: Path
) -> None:
    """--max-restarts 1 on one node runs warm: the failed attempt's ranks are stopped, fresh ones
    forked, with the environment of a cold (torchrun) restart's ranks, resuming from the checkpoint."""
    seen: dict[str, list[dict]] = {}
    for how in ("cold", "warm"):
        monkeypatch.setenv(warm.WARM_ENV, "1" if how == "warm" else "0")
        out = tmp_path / how
        out.mkdir()
        kw = {
            "store": store,
            "gpus": 2,
            "accelerator": "cpu",
            "max_restarts": 1,
            "env": {"PROBE_DIR": str(out)},
        }
        assert api.dryrun(RESTARTED, **kw).request.to_json()["start"].startswith(f"{how}:")  # type: ignore[arg-type]
        job = api.submit(RESTARTED, name=f"restart-{how}", **kw)  # type: ignore[arg-type]
        status = job.wait(timeout=180)
        assert status.phase is JobPhase.SUCCEEDED, (status, [ln.text for ln in job.logs()][-20:])
        assert f"({how}:" in next(e.message for e in status.events if e.reason == "Started")
        assert [r.restarts for r in status.replicas if r.name.startswith("rank-")] == [1, 1]
        ranks = [json.loads((out / f"{rank}.json").read_text()) for rank in (0, 1)]
        for rank in ranks:
            assert rank["resume"] == str(job.dir / "checkpoints" / "step-3.pt")
            assert rank["env"]["TORCHELASTIC_ERROR_FILE"].endswith(
                f"attempt_1/{rank['env']['LOCAL_RANK']}/error.json"
            )
            for view in ("env", "shown"):
                text = json.dumps(rank[view]).replace(job.id, "JOB").replace(str(out), "OUT")
                rank[view] = {k: v for k, v in json.loads(text).items() if k not in SAME_BUT_NOT_YET}
        seen[how] = ranks
    for hot, cold in zip(seen["warm"], seen["cold"], strict=True):
        assert (
            hot["env"]["TORCHELASTIC_RESTART_COUNT"] == "1" and hot["env"]["TORCHELASTIC_MAX_RESTARTS"] == "1"
        )
        for view in ("env", "shown"):
            differ = {k: (hot[view].get(k), cold[view].get(k)) for k in {*hot[view], *cold[view]}}
            assert not {k: v for k, v in differ.items() if v[0] != v[1]}, view


def test_a_warm_group_that_fails_every_attempt_fails_as_torchruns_does(store: JobStore) -> None:
    script = "import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n"
    job = api.submit(script, store=store, gpus=2, name="fails", max_restarts=1)
    status = job.wait(timeout=120)
    assert status.phase is JobPhase.FAILED and _ran_warm(job)
    rank1 = next(r for r in status.replicas if r.name == "rank-1")
    assert (rank1.exit_code, rank1.restarts) == (3, 1)
    said = [ln.text for ln in job.logs("agent-0")]
    assert sum("Worker group FAILED. 1/1 attempts left; will restart" in t for t in said) == 1, said
    assert sum(t.startswith("failed (exitcode: 3) local_rank: 1") for t in said) == 2, said
    assert any("ChildFailedError" in t for t in said), said
