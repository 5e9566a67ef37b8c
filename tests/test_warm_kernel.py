"""Warm start from a real kernel: ``%load_ext`` starts the zygote, the heavy libraries a cell
imports reach it, and ``%%distrun`` re-runs stay warm and never hang, whatever the kernel's own
threads are doing between them (the reason the kernel itself is never forked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_disttrain.backends.warm import plan as warm
from jupyter_disttrain.model.specs import JobPhase
from jupyter_disttrain.storage.store import JobStore
from tests.notebook_helpers import run_cells
from tests.test_warm import _wait

DDP_CELL = """%%distrun --gpus 2 --name soak
dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(16, 32)).sum().backward()
    opt.step()
dist.destroy_process_group()
"""
DDP_BODY = DDP_CELL.split("\n", 1)[1]
IMPORTS = (
    "import torch, torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP"
)
RUNS = 200


@pytest.fixture
def job_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "jobs"
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(root))  # the kernel inherits it
    return root


def _started(store: JobStore, job_id: str) -> str:
    status = store.read_status(job_id)
    assert status is not None
    return next(e.message for e in status.events if e.reason == "Started")


def _kernels_fingerprint(cwd: Path) -> str:
    # The kernel imports the installed copy of the package (CI installs it; this process imports
    # the checkout), and a zygote's fingerprint covers its package's files: ask a fresh
    # interpreter outside the checkout, as the kernel is.
    code = "import os; from jupyter_disttrain.backends.warm import plan; print(plan.fingerprint(os.environ))"
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def test_load_ext_starts_the_zygote_and_a_cells_heavy_imports_reach_it(
    tmp_path: Path, job_root: Path, zygote_dir: Path
) -> None:
    # A kernel environment of its own: no zygote lives for it until %load_ext starts one.
    env_marker = "PYTHONWARMTEST"
    os.environ[env_marker] = str(time.time())
    try:
        fp = _kernels_fingerprint(tmp_path)
        assert not warm.alive(zygote_dir, fp)
        state = zygote_dir / f"zygote-{fp}.json"
        wait_ready = (
            "import json, time, pathlib\n"
            f"state = pathlib.Path({str(state)!r})\n"
            "deadline = time.time() + 120\n"
            "while time.time() < deadline and not (state.exists() and "
            "'einops' in json.loads(state.read_text()).get('modules', {})):\n"
            "    time.sleep(0.1)\n"
            f"pathlib.Path({str(tmp_path / 'held.json')!r}).write_text(state.read_text())\n"
        )
        cells = [
            "%load_ext jupyter_disttrain",
            IMPORTS,
            "import einops  # a heavy library the zygote does not hold until a cell imports it",
            wait_ready,
            DDP_CELL,
        ]
        run_cells(cells, tmp_path, timeout=300)
        held = json.loads((tmp_path / "held.json").read_text())["modules"]
        assert "einops" in held and "torch" in held
        (record,) = JobStore(job_root).records()
        assert JobStore(job_root).read_status(record.id).phase is JobPhase.SUCCEEDED  # type: ignore[union-attr]
        assert "(warm:" in _started(JobStore(job_root), record.id)
        assert record.request["warm"]["fingerprint"] == fp
        assert "einops" not in record.request["warm"]["preload"]  # the cell did not import it
        _wait(lambda: not warm.alive(zygote_dir, fp))  # it ends with the kernel that started it
    finally:
        del os.environ[env_marker]


def test_two_hundred_warm_reruns_with_threaded_matmuls_in_the_kernel_between_them(
    tmp_path: Path, job_root: Path
) -> None:
    # The kernel multiplies 512x512 matrices on every core before each run (the pattern that
    # deadlocks a fork of the kernel); every run must end, warm, within the cell's timeout.
    loop = (
        "torch.set_num_threads(os.cpu_count())\n"
        "a = torch.randn(512, 512)\n"
        f"for i in range({RUNS}):\n"
        "    (a @ a).sum()\n"
        f"    get_ipython().run_cell_magic('distrun', '--gpus 2 --name soak', {DDP_BODY!r})\n"
    )
    cells = [
        "%load_ext jupyter_disttrain",
        "import os\n" + IMPORTS,
        loop,
    ]
    started = time.monotonic()
    run_cells(cells, tmp_path, timeout=20 * 60)
    store = JobStore(job_root)
    records = store.records()
    assert len(records) == RUNS
    phases = [store.read_status(r.id).phase for r in records]  # type: ignore[union-attr]
    assert phases == [JobPhase.SUCCEEDED] * RUNS
    cold = [r.id for r in records if "(warm:" not in _started(store, r.id)]
    assert cold == []
    print(f"{RUNS} warm runs in {time.monotonic() - started:.0f} s")
