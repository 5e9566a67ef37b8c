"""``%%distrun`` in a real IPython kernel: a real 2-rank gloo job, and jobs outliving their kernel."""

from __future__ import annotations

import re
import time
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbformat.v4 import new_code_cell, new_notebook

from jupyter_disttrain import api
from jupyter_disttrain.commands import run_subcommand
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore

CELLS = [
    "%load_ext jupyter_disttrain",
    "import torch\nimport torch.distributed as dist",
    "hparams = {'scale': 3, 'unused': [1, 2]}",
    "def offset(rank):\n    return rank + 1\n",
    "def scaled(rank):\n    return offset(rank) * hparams['scale']  # transitive: offset, hparams\n",
    "class Reporter:\n"
    "    def line(self, rank, world, value):\n"
    "        return f'rank={rank} world={world} sum={value:.0f}'\n",
    "def offset(rank):\n    return rank + 10  # redefined: this one wins\n",
    "%ls\n!echo shell escapes do not break packaging",
    """%%distrun --gpus 2 --name kernel-test
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(scaled(rank))])
dist.all_reduce(t)
print(Reporter().line(rank, world, t.item()))
dist.destroy_process_group()
""",
]


@pytest.fixture
def job_root(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "jobs"
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(root))  # the kernel inherits it
    return root


def test_magic_runs_a_real_two_rank_job_in_a_real_kernel(tmp_path: Path, job_root: Path) -> None:
    nb = new_notebook(cells=[new_code_cell(c) for c in CELLS])
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    (record,) = JobStore(job_root).records()
    job = api.get_job(record.id, JobStore(job_root))
    assert job.status().phase is JobPhase.SUCCEEDED
    # (0+10)*3 + (1+10)*3 = 63: the redefined offset(), the hparams dict and the class all made it.
    lines = sorted(ln.text for ln in job.logs() if ln.rank is not None)
    assert lines == ["rank=0 world=2 sum=63", "rank=1 world=2 sum=63"]
    script = job.script
    assert "import torch.distributed as dist" in script
    assert "return rank + 10" in script and "return rank + 1\n" not in script
    # The cell output shows the ranks' lines as they came.
    shown = nbformat.writes(nb)
    assert "rank=0 world=2 sum=63" in shown and "Succeeded" in shown


def test_a_job_outlives_its_kernel_and_a_fresh_process_reads_it(tmp_path: Path, job_root: Path) -> None:
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(tmp_path))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        kc.execute(
            "%load_ext jupyter_disttrain\n",
        )
        kc.execute(
            "%%distrun --gpus 2 --name outlive\n"
            "import os, time\n"
            "for i in range(30):\n"
            "    print(f'tick {i} from {os.environ[\"RANK\"]}', flush=True)\n"
            "    time.sleep(0.1)\n"
        )
        store = JobStore(job_root)
        deadline = time.monotonic() + 120
        while not store.ids() or not list((store.root / store.ids()[0] / "logs").glob("rank-*.log")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)  # the kernel dies mid-job
    job = api.get_job(JobStore(job_root).ids()[0], JobStore(job_root))
    status = job.wait(timeout=120)
    assert status.phase is JobPhase.SUCCEEDED
    for rank in (0, 1):
        assert [ln.text for ln in job.logs(f"rank-{rank}")] == [f"tick {i} from {rank}" for i in range(30)]


def _stream_text(kc, msg_id: str, until: str, timeout: float = 120) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while until not in seen:
        assert time.monotonic() < deadline, seen
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
            seen += msg["content"]["text"]
    return seen


def test_interrupting_the_cell_stops_following_not_the_job(tmp_path: Path, job_root: Path) -> None:
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(tmp_path), env={**__import__("os").environ, "DISTTRAIN_VIEW": "text"})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        kc.execute_interactive("%load_ext jupyter_disttrain", timeout=60)
        msg_id = kc.execute(
            "%%distrun --gpus 2 --name interrupted\n"
            "import time\n"
            "print('working', flush=True)\n"
            "time.sleep(600)\n"
        )
        _stream_text(kc, msg_id, "working")
        km.interrupt_kernel()
        said = _stream_text(kc, msg_id, "keeps running")
        job_id = JobStore(job_root).ids()[0]
        assert f"%distrun cancel {job_id}" in said
        job = api.get_job(job_id, JobStore(job_root))
        assert job.status().phase is JobPhase.RUNNING
        assert job.cancel().phase is JobPhase.CANCELLED
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


ENV_CELLS = [
    "%load_ext jupyter_disttrain",
    'import os, sys\nsys.path.insert(0, "mylib_dir")\nos.environ["FOO"] = "bar"\nimport mylib',
    'os.makedirs("run", exist_ok=True)\nos.chdir("run")',
    "import torch\n\ndef save(model):\n    torch.save(model.state_dict(), 'ckpt.pt')\n",
    # Dry run on a CPU job: the earlier cell's save of a DDP model, GPU code; JupyterLab's lines.
    "%%distrun --gpus 2 --dry-run --accelerator cpu\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    "model = DDP(torch.nn.Linear(1, 1))\n"
    "save(model)\n"
    "torch.cuda.set_device(0)\n",
    "%%distrun --gpus 2\nx = 1\nprint(undefined_thing)\n",
    "%%distrun --gpus 2 --name envjob\n"
    "import os, mylib\n"
    "print(mylib.VALUE, os.environ['FOO'], os.getcwd(), os.environ['RANK'])\n",
]


def test_checks_and_the_kernels_environment_in_a_real_kernel(tmp_path: Path, job_root: Path) -> None:
    (tmp_path / "mylib_dir").mkdir()
    (tmp_path / "mylib_dir" / "mylib.py").write_text("VALUE = 'from-mylib'\n")
    nb = new_notebook(cells=[new_code_cell(c) for c in ENV_CELLS])
    NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()

    def shown(cell: int) -> str:
        return nbformat.writes(new_notebook(cells=[nb.cells[cell]]))

    dry = shown(4)
    assert "warning: In [4] line 4:" in dry and "--no-check ddp-state-dict" in dry
    assert "warning: In [4] line 4:" in dry and "--no-check unguarded-save" in dry
    assert "warning: line 5:" in dry and "--no-check cuda-without-gpu" in dry
    assert f"# from the kernel: sys.path addition (on PYTHONPATH): {tmp_path / 'mylib_dir'}" in dry
    assert "# from the kernel: env: FOO=bar" in dry
    refused = shown(5)
    assert "line 3 of the cell uses `undefined_thing`" in refused
    (record,) = JobStore(job_root).records()  # the refused cell launched nothing
    job = api.get_job(record.id, JobStore(job_root))
    assert job.status().phase is JobPhase.SUCCEEDED
    lines = sorted(ln.text for ln in job.logs() if ln.rank is not None)
    assert lines == [f"from-mylib bar {tmp_path / 'run'} {rank}" for rank in (0, 1)]


def test_a_failed_job_fails_the_cell_and_run_all_stops_there(tmp_path: Path, job_root: Path) -> None:
    """Rank 1 fails first; rank 0 then fails in the collective. The cell's error is rank 1's
    traceback as the notebook's own (``Cell In[2], line 6``, none of the product's frames), the
    widget's summary names rank-1, and the next cell never runs."""
    cells = [
        "%load_ext jupyter_disttrain",
        "%%distrun --gpus 2 --name fails\n"
        "import os, time\n"
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1:\n"
        "    raise ZeroDivisionError('rank one divided by zero')\n"
        "dist.all_reduce(torch.ones(1))\n",
        "print('the next cell ran')",
    ]
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    with pytest.raises(CellExecutionError) as err:
        client.execute()
    said = re.sub(r"\x1b\[[0-9;]*m", "", str(err.value))
    (error,) = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    shown_error = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in error.traceback]
    assert "Cell In[2], line 6" in shown_error
    assert "----> 6     raise ZeroDivisionError('rank one divided by zero')" in shown_error
    assert "ZeroDivisionError: rank one divided by zero" in shown_error
    assert not any("worker.py" in line or "runpy" in line or "train.py" in line for line in shown_error)
    assert shown_error[-1].startswith("JobFailedError: %%distrun: job fails-") and "rank-1" in said
    assert "[rank1]" not in shown_error[-1]  # torch's prefix: the headline names the rank once
    shown = nbformat.writes(nb.cells[1])
    assert "rank-1 failed first" in shown and "ZeroDivisionError: rank one divided by zero" in shown
    assert nb.cells[2].outputs == [] and nb.cells[2].execution_count is None
    # Issue 34, item 10: the text form (what nbclient, papermill, a saved notebook show) and
    # `jupyter disttrain status` tell the failure as the lab does: rank-0 was stopped by rank-1,
    # rank-1's error and cell; no frame of the product, no path of its cache.
    (view,) = [o.data["text/plain"] for o in nb.cells[1].outputs if o.output_type == "display_data"]
    assert view.splitlines()[1:] == [
        "  [rank-0: stopped by rank-1] [rank-1: Failed, exit 1, Error]",
        "  rank-1 failed first: ZeroDivisionError: rank one divided by zero (In [2], line 6)",
    ], view
    (record,) = JobStore(job_root).records()
    out: list[str] = []
    run_subcommand(["--root", str(job_root), "status", record.id], out.append)
    status = "\n".join(out).splitlines()
    assert "  rank-0       stopped by rank-1" in status and "  | Cell In[2], line 6" in status, status
    assert "  | ----> 6     raise ZeroDivisionError('rank one divided by zero')" in status, status
    for rank in (0, 1):  # the ranks' own logs, as the sidebar and run.sh show them
        log = (JobStore(job_root).logs_dir(record.id) / f"rank-{rank}.log").read_text()
        assert "jupyter_disttrain" not in log and "runpy" not in log, log
    for text in (view, *status):
        assert not re.search(r"jupyter_disttrain|runpy|\.cache|train\.py", text), text
