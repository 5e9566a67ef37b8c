"""The kernel's own changes (sys.path, os.environ, working dir) reach the job's spec and the dry run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain.api import make_spec
from jupyter_disttrain.backends.local.torchrun import agent_commands
from jupyter_disttrain.notebook import kernelenv


@pytest.fixture
def fresh_start(tmp_path: Path, monkeypatch) -> Path:
    """The extension 'loads' now, in ``tmp_path``, with a sys.path we may change."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(kernelenv, "_startup_env", dict(os.environ))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "path_importer_cache", dict(sys.path_importer_cache))
    sys.path_importer_cache.pop("mylib_dir", None)  # another test's tmp dir
    (tmp_path / "mylib_dir").mkdir()
    return tmp_path


def _ours(carried: kernelenv.KernelEnv) -> tuple[dict[str, str], list[str]]:
    """What the test changed, not pytest (PYTEST_CURRENT_TEST, its rootdir on sys.path)."""
    env = {k: v for k, v in carried.env.items() if not k.startswith("PYTEST_")}
    return env, [p for p in carried.path if "mylib_dir" in p]


def test_changes_since_load_are_carried_and_reserved_names_are_not(fresh_start: Path, monkeypatch) -> None:
    monkeypatch.setenv("FOO", "bar")
    for key in ("JPY_SESSION_NAME", "RANK", "DISTTRAIN_JOB_ID", "CUDA_VISIBLE_DEVICES", "MASTER_PORT"):
        monkeypatch.setenv(key, "kernel-only")
    sys.path.insert(0, "mylib_dir")
    sys.path.append("missing_dir")  # not there: nothing to carry
    carried = kernelenv.kernel_env()
    assert _ours(carried) == ({"FOO": "bar"}, [str(fresh_start / "mylib_dir")])
    assert carried.cwd == str(fresh_start)


def test_the_users_env_wins_and_pythonpath_gets_both(fresh_start: Path, monkeypatch) -> None:
    monkeypatch.setenv("FOO", "kernel")
    monkeypatch.setenv("BAR", "kernel")
    sys.path.insert(0, str(fresh_start / "mylib_dir"))
    spec = make_spec(gpus=2, env={"FOO": "flag", "PYTHONPATH": "/given"})
    kernelenv.kernel_env().apply(spec)
    assert spec.env["FOO"] == "flag" and spec.env["BAR"] == "kernel"
    assert spec.env["PYTHONPATH"].startswith(os.pathsep.join(["/given", str(fresh_start / "mylib_dir")]))
    # torchrun's agents keep it first (as the kernel's sys.path.insert(0, ...) did), then the
    # working dir, then the inherited PYTHONPATH.
    (agent,) = agent_commands(
        spec, "j", "/jobs/j", python=sys.executable, rdzv_port=None, gpu_ids=None, working_dir="/wd"
    )
    parts = agent.env["PYTHONPATH"].split(os.pathsep)
    assert parts[:2] == ["/given", str(fresh_start / "mylib_dir")]
    inherited = os.environ.get("PYTHONPATH")
    assert "/wd" in parts and (not inherited or parts.index("/wd") < parts.index(inherited))


def test_a_relative_entry_is_resolved_where_the_kernel_resolved_it(fresh_start: Path, monkeypatch) -> None:
    (fresh_start / "mylib_dir" / "mylib_probe.py").write_text("X = 1\n")
    sys.path.insert(0, "mylib_dir")
    monkeypatch.delitem(sys.modules, "mylib_probe", raising=False)
    import mylib_probe  # noqa: F401  # the import system fixes where "mylib_dir" is

    (fresh_start / "elsewhere").mkdir()
    monkeypatch.chdir(fresh_start / "elsewhere")
    assert _ours(kernelenv.kernel_env())[1] == [str(fresh_start / "mylib_dir")]


def test_the_dry_run_lists_what_comes_from_the_kernel(fresh_start: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("DISTTRAIN_JOB_ROOT", str(fresh_start / "jobs"))
    ip = InteractiveShell.instance()
    try:
        ip.run_cell("%load_ext jupyter_disttrain")
        monkeypatch.setenv("FOO", "bar")
        sys.path.insert(0, "mylib_dir")
        result = ip.run_cell("%%distrun --gpus 2 --dry-run\nprint(1)\n")
        assert result.success
    finally:
        InteractiveShell.clear_instance()
    out = capsys.readouterr().out
    assert f"# from the kernel: working dir: {fresh_start}" in out
    assert f"# from the kernel: sys.path addition (on PYTHONPATH): {fresh_start / 'mylib_dir'}" in out
    assert "# from the kernel: env: FOO=bar" in out
    assert "FOO=bar" in out.split("launch request")[1]  # the request itself has it
