"""labextension/rest/types.ts is generated from the Python payload types and must be current."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gen_types.py"


def test_the_checked_in_types_ts_is_what_the_python_types_generate() -> None:
    run = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_a_stale_types_ts_fails_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("gen_types", SCRIPT)
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    stale = tmp_path / "types.ts"
    stale.write_text(gen.render().replace("  backend_error: string | null;\n", ""))
    monkeypatch.setattr(gen, "OUT", stale)
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0  # regenerated
    assert "backend_error: string | null;" in stale.read_text()
