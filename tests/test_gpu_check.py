"""The prepared GPU check (``scripts/gpu-check.sh``, docs/gpu-check.md) in its CPU mode, as the test
command runs it so that it cannot rot: every check runs its CPU path and passes, and its GPU items
are skipped and named. And the closure check of the wheels it carries to the GPU machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.gpu import wheelset
from tests.gpu.report import LOG_FILE, NO_GPU, REPORT_FILE
from tests.gpu.runner import checks_in_order

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(600)
def test_the_gpu_check_passes_in_cpu_mode_with_its_gpu_items_named_as_skipped(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", "scripts/gpu-check.sh", "--cpu", "--out", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=560,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / REPORT_FILE).read_text())
    log = (tmp_path / LOG_FILE).read_text()
    assert report["mode"] == "cpu" and report["aborted"] is None
    assert [c["name"] for c in report["checks"]] == [d.name for d in checks_in_order()]
    for result in report["checks"]:
        statuses = [item["status"] for item in result["items"]]
        assert result["error"] is None and "FAIL" not in statuses, result
        assert "PASS" in statuses, result  # its CPU path ran, and was looked at
        skipped = [item for item in result["items"] if item["status"] == "SKIP"]
        assert result["status"] == ("SKIP" if skipped else "PASS")
        assert all(item["detail"].startswith(NO_GPU) for item in skipped)
        assert f"-> {result['status']} {result['name']}" in log
    skipped_items = {
        item["what"] for c in report["checks"] for item in c["items"] if item["status"] == "SKIP"
    }
    for gpu_only in (
        "the rank's process group is NCCL",
        "warm run 3's rank initialised CUDA",
        "the rank's GPU utilisation is above 0",
        "%%distrun's throughput is at least 0.99 of raw torchrun's",
        "the checkpoint holds CUDA tensors",
        "no cuda-without-gpu warning with a GPU visible",
    ):
        assert gpu_only in skipped_items
    assert report["environment"]["cuda_available"] is False
    assert report["summary"] == {"PASS": 1, "FAIL": 0, "SKIP": len(report["checks"]) - 1}


def _wheel(folder: Path, name: str, version: str, *requires: str) -> None:
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as zf:
        lines = [f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
        zf.writestr(
            f"{name}-{version}.dist-info/METADATA", "\n".join(["Metadata-Version: 2.1", *lines]) + "\n"
        )


def test_the_wheel_check_finds_what_the_gpu_machine_would_miss(tmp_path: Path) -> None:
    pins = [Requirement("app==1.0"), Requirement("lib==2.0")]
    _wheel(
        tmp_path,
        "app",
        "1.0",
        "lib>=2",
        "psutil>=5",
        'tomli; python_version < "3.11"',
        'pytest; extra == "test"',
    )
    _wheel(tmp_path, "lib", "2.0")
    # What the image has (psutil), a marker false on 3.12, an extra: nothing to carry.
    assert wheelset.problems(tmp_path, "3.12", pins) == []
    assert wheelset.problems(tmp_path, "3.10", pins) == [
        'app needs tomli; python_version < "3.11" (no wheel)'
    ]
    _wheel(tmp_path, "lib", "1.0")
    assert set(wheelset.problems(tmp_path, "3.12", pins)) == {"lib: 2 versions (1.0, 2.0): keep one"}
    (tmp_path / "lib-2.0-py3-none-any.whl").unlink()
    assert set(wheelset.problems(tmp_path, "3.12", pins)) == {
        "lib: pinned (lib==2.0), the wheel is 1.0",
        "app needs lib>=2 (1.0)",
    }
    _wheel(tmp_path, "stray", "0.1")
    assert "stray: a wheel that the list does not pin" in wheelset.problems(tmp_path, "3.12", pins)


def test_the_pinned_wheels_hold_the_kernel_and_its_client() -> None:
    pinned = {r.name for r in wheelset.read_pins(ROOT / "tests" / "gpu" / "wheels.txt")}
    assert {"ipykernel", "ipython", "jupyter-client", "pyzmq", "tornado"} <= pinned
    assert not pinned & wheelset.ON_THE_MACHINE
