"""scripts/quickstart.sh's helpers (scripts/env.sh): JupyterLab among what it installs, and what
it skips on a run again: the whole install while the checkout's fingerprint is unchanged, the lab
extension's build while its sources are. Real bash on a copy of the scripts in a scratch tree; a
stand-in `jlpm` on PATH records whether the build ran. (The full install was measured by hand:
README, "Set up".)"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+, as scripts/env.sh needs too
ROOT = Path(__file__).resolve().parents[1]


def _tree(tmp_path: Path) -> Path:
    """A scratch checkout: the scripts, and small stand-ins for the sources they fingerprint."""
    tree = tmp_path / "checkout"
    shutil.copytree(ROOT / "scripts", tree / "scripts")
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    for name, text in {
        "jupyter_disttrain/__init__.py": "",
        "labextension/index.ts": "export {};\n",
        "package.json": "{}\n",
        "yarn.lock": "",
        "tsconfig.json": "{}\n",
    }.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    return tree


def _bash(tree: Path, command: str, path: str | None = None) -> str:
    env = {**os.environ, "VIRTUAL_ENV": str(tree / "venv")}  # env.sh makes no virtualenv then
    if path:
        env["PATH"] = f"{path}:{env['PATH']}"
    done = subprocess.run(
        ["bash", "-c", f"source scripts/env.sh && {command}"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quickstart_installs_jupyterlab_with_the_lab_extra(tmp_path: Path) -> None:
    extras = _bash(_tree(tmp_path), 'echo "$QUICKSTART_EXTRAS"').strip()
    assert extras == ".[tensorboard,lab]"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert any(r.startswith("jupyterlab") for r in project["project"]["optional-dependencies"]["lab"])
    requires = _bash(_tree(tmp_path / "again"), "build_requirements").split()
    assert requires == project["build-system"]["requires"]  # installed once, not per build


def test_the_install_fingerprint_changes_with_the_sources_only(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    first = _bash(tree, "install_fingerprint")
    assert _bash(tree, "install_fingerprint") == first
    (tree / "jupyter_disttrain" / "__pycache__").mkdir()
    (tree / "jupyter_disttrain" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (tree / "labextension" / "node_modules").mkdir()
    (tree / "labextension" / "node_modules" / "dep.js").write_text("1")
    assert _bash(tree, "install_fingerprint") == first  # bytecode and dependencies do not count
    (tree / "jupyter_disttrain" / "__init__.py").write_text("# changed\n")
    changed = _bash(tree, "install_fingerprint")
    assert changed != first
    (tree / "labextension" / "index.ts").write_text("export const x = 1;\n")
    assert _bash(tree, "install_fingerprint") not in (first, changed)


def test_the_lab_extension_is_built_only_when_its_sources_changed(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "jlpm-calls"
    jlpm = bin_dir / "jlpm"  # records its calls; `build:prod` makes the build's output
    jlpm.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> "{calls}"\n'
        'if [ "$1" = build:prod ]; then mkdir -p jupyter_disttrain/labextension/static && '
        "touch jupyter_disttrain/labextension/static/style.js; fi\n"
    )
    jlpm.chmod(0o755)
    said = _bash(tree, "build_labextension", path=str(bin_dir))
    assert "== building the JupyterLab extension" in said
    assert calls.read_text().split("\n")[:2] == ["install", "build:prod"]
    calls.unlink()
    said = _bash(tree, "build_labextension", path=str(bin_dir))
    assert "no build" in said and not calls.exists()  # a run again: nothing changed
    (tree / "labextension" / "index.ts").write_text("export const y = 2;\n")
    _bash(tree, "build_labextension", path=str(bin_dir))
    assert calls.read_text().split("\n")[:2] == ["install", "build:prod"]
