"""Shared fixtures. pytest-jupyter's server fixtures (``jp_fetch``, ``jp_serverapp``) are
loaded here: pytest takes plugins only from the top-level conftest."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain.store import JobStore

pytest_plugins = ("pytest_jupyter.jupyter_server",)


@pytest.fixture
def store(tmp_path: Path) -> JobStore:
    return JobStore(tmp_path / "jobs")


@pytest.fixture
def write_script(tmp_path: Path):
    """Write a dedented script into tmp_path and return its text."""

    def make(source: str) -> str:
        return textwrap.dedent(source).lstrip()

    return make


PYTHON = sys.executable


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    """A real IPython shell (real ``In`` history and namespace), reset around each test."""
    ip = InteractiveShell.instance()
    ip.reset(new_session=True)
    yield ip
    ip.reset(new_session=True)
