"""Loading the extension is cheap, and backends come from names or entry points."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jupyter_disttrain.backends import ENTRY_POINT_GROUP, backend_class, backend_names
from jupyter_disttrain.notebook.magics import DistTrainMagics


def test_load_ext_imports_no_heavy_module() -> None:
    code = textwrap.dedent(
        """
        import sys
        from IPython.core.interactiveshell import InteractiveShell
        ip = InteractiveShell.instance()
        ip.run_line_magic("load_ext", "jupyter_disttrain")
        assert "distrun" in ip.magics_manager.magics["cell"]
        heavy = [m for m in ("torch", "kubernetes", "tensorboard", "tornado", "jupyter_server", "numpy")
                 if m in sys.modules]
        print(heavy)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_magic_help_lists_the_flags() -> None:
    doc = DistTrainMagics.distrun.__doc__ or ""
    for flag in ("--gpus", "--nodes", "--max-restarts", "--dry-run", "--detach", "--cancel-on-interrupt"):
        assert flag in doc


def test_third_party_backend_is_found_through_its_entry_point(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "thirdparty_backend.py").write_text(
        textwrap.dedent(
            """
            from jupyter_disttrain.backends.local.backend import LocalBackend

            class SiteBackend(LocalBackend):
                name = "site"
            """
        )
    )
    dist = tmp_path / "thirdparty_backend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-backend\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nsite = thirdparty_backend:SiteBackend\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "site" in backend_names()
    assert backend_class("site").__name__ == "SiteBackend"


def test_an_unknown_backend_lists_the_known_ones() -> None:
    from jupyter_disttrain.model.errors import UnknownBackendError

    with pytest.raises(UnknownBackendError, match="choose one of: kubernetes, local"):
        backend_class("nope")
