"""Artifacts: files copied into ``runs/<run>/artifacts/<artifact>/`` with a ``manifest.json``.

Files are copied when added (a checkpoint overwritten later keeps the bytes it had), never
linked: the run directory stays whole when the original moves or the job's volume is gone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..runtime.contract import MANIFEST_FILE as MANIFEST
from .checks import artifact_path, check_name
from .files import copy_file, write_json


class Artifact:
    """A named set of files of a run. On a rank that does not record, every call does nothing."""

    def __init__(self, name: str, directory: Path, *, run: str, active: bool) -> None:
        self.name = check_name("artifact", name)
        self.dir = directory
        self.active = active
        self._run = run
        self._files: dict[str, dict[str, Any]] = {}
        self._marks: set[str] = set()
        if active:
            directory.mkdir(parents=True, exist_ok=True)
            self._write_manifest()

    def __repr__(self) -> str:
        return f"Artifact({self.name!r}, files={len(self._files)})"

    def add_file(self, path: str | os.PathLike[str], name: str | None = None) -> None:
        """Copy the file at ``path`` into the artifact, as ``name`` (default: its file name;
        ``sub/dir/name`` keeps a layout)."""
        if not self.active:  # the file may exist on the recording rank only (a rank-0 checkpoint)
            return
        source = Path(path)
        if not source.is_file():
            what = "a directory (use add_dir)" if source.is_dir() else "no such file"
            raise FileNotFoundError(f"artifact {self.name!r}: add_file({str(path)!r}): {what}")
        self._copy(source, artifact_path(source.name if name is None else name))
        self._write_manifest()

    def add_dir(self, path: str | os.PathLike[str]) -> None:
        """Copy every file under the directory ``path``, as ``<dir name>/<relative path>``.
        Symbolic links to directories are not followed (no cycles, nothing from elsewhere)."""
        if not self.active:
            return
        root = Path(path)
        if not root.is_dir():
            raise NotADirectoryError(f"artifact {self.name!r}: add_dir({str(path)!r}): not a directory")
        for folder, _, files in os.walk(root):
            for file in sorted(files):
                source = Path(folder, file)
                if source.is_file():  # a dangling link or a socket is skipped
                    self._copy(source, artifact_path((Path(root.name) / source.relative_to(root)).as_posix()))
        self._write_manifest()

    def _copy(self, source: Path, name: str) -> None:
        if name == MANIFEST:
            raise ValueError(f"artifact {self.name!r}: {MANIFEST!r} is the manifest: give another name")
        size, sha256 = copy_file(source, self.dir / name)
        self._files[name] = {"path": name, "size": size, "sha256": sha256}

    def _mark(self, how: str) -> None:
        if self.active:
            self._marks.add(how)
            self._write_manifest()

    def _write_manifest(self) -> None:
        write_json(
            self.dir / MANIFEST,
            {
                "name": self.name,
                "run": self._run,
                "files": [self._files[k] for k in sorted(self._files)],
                "output": "output" in self._marks,
                "input": "input" in self._marks,
            },
        )
