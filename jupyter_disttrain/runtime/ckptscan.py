"""Which checkpoints a directory holds, in the formats scripts write (README "Checkpoints").

A plain ``torch.save`` file (``.pt``, ``.pth``, ``.bin``, ``.tar``), a Lightning ``.ckpt`` (a
``torch.save`` zip too), a DeepSpeed tag directory (``<save dir>/<tag>/*_model_states.pt``
beside the ``latest`` file naming the newest tag) and a ``torch.distributed.checkpoint`` (DCP)
directory (``*.distcp`` shards and the ``.metadata`` written last). Each is listed once with its
step, whether it is complete (every file in, none still growing) and the disk it uses.

Standard library only, and cheap: the rank wrapper and the retention thread call it inside the
training processes, the server on every listing. Nothing is unpickled; steps come from names
(``step=1200``, ``epoch=3-step=1200``, ``global_step1200``, ``checkpoint-1200``, ``ckpt_1200``)
and DeepSpeed's ``latest``. The walk is bounded (entries and depth) and follows no symlink: a
link names a checkpoint listed under its own path, or lies outside the directory.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, replace

TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".tar")
LIGHTNING_SUFFIX = ".ckpt"
DCP_METADATA = ".metadata"
DCP_SUFFIX = ".distcp"
DEEPSPEED_LATEST = "latest"
DEEPSPEED_MODEL = "_model_states.pt"
DEEPSPEED_OPTIM = "_optim_states.pt"
# A file written to within this many seconds may still be growing: not complete yet.
SETTLE_SECONDS = 2.0
MAX_DEPTH = 8
# Files already read, by (root, path): (inode, size, mtime_ns) and what they were. A file that
# was whole, or no checkpoint, and has not changed is not opened again (a listing polled every
# few seconds reads only what is new). Cleared when it holds MAX_REMEMBERED.
MAX_REMEMBERED = 100_000
_FILES: dict[tuple[str, str], tuple[tuple[int, int, int], Found | None]] = {}
# The zip's end-of-central-directory record sits in the last 22 bytes plus a comment (< 64 KiB).
_EOCD = b"PK\x05\x06"
_EOCD_WINDOW = 22 + 65535
_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_MAGIC = b"\x80"  # torch.save's legacy format starts with a pickle protocol opcode

_STEP = re.compile(r"(?:global_step|step|iter|iteration|checkpoint|ckpt)[=_-]?(\d+)", re.I)
_EPOCH = re.compile(r"epoch[=_-]?(\d+)", re.I)
_BARE = re.compile(r"^[A-Za-z]*[_-]?(\d+)$")  # "model_000100", "100"


@dataclass(frozen=True)
class Found:
    path: str  # absolute
    kind: str  # "torch" | "lightning" | "deepspeed" | "dcp"
    step: int | None
    epoch: int | None
    step_source: str | None  # "name" | "metadata" | None
    mtime: float  # when its last file was written
    size: int  # bytes; a directory's files summed
    complete: bool
    world_size: int | None  # DeepSpeed ZeRO: the number of optimizer shards


@dataclass
class _Budget:
    left: int


def scan(root: str, *, limit: int = 10_000, settle: float = SETTLE_SECONDS) -> list[Found]:
    """The checkpoints under ``root``, oldest first (by step, then time; those without a step
    first). At most ``limit`` directory entries are looked at; a missing root is empty. A file
    written to in the last ``settle`` seconds may still be growing: not complete."""
    root = os.path.abspath(root)
    found: list[Found] = []
    budget = _Budget(limit)
    if os.path.isdir(root) and not os.path.islink(root):
        _walk(root, root, 0, budget, found, time.time() - settle)
    return sorted(found, key=_order)


def newest_complete(root: str) -> Found | None:
    """The newest complete checkpoint under ``root`` (None when there is none)."""
    complete = [found for found in scan(root) if found.complete]
    return complete[-1] if complete else None


def scan_path(path: str, *, limit: int = 10_000, settle: float = SETTLE_SECONDS) -> list[Found]:
    """What one path is or holds: the checkpoint a file or a checkpoint directory is (a DeepSpeed
    tag judged by its save dir's ``latest``), else the checkpoints under the directory (what a
    script declared with ``run.checkpoint(path)``). A link or a missing path is empty."""
    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    if os.path.islink(path):
        return []
    budget, settled = _Budget(limit), time.time() - settle
    if os.path.isfile(path):
        one = [_file(parent, e, settled) for e in _entries(parent, budget) if e.name == name]
        return [found for found in one if found is not None]
    if not os.path.isdir(path):
        return []
    entries = _entries(path, _Budget(limit))
    if any(e.name == DCP_METADATA or e.name.endswith(DCP_SUFFIX) for e in entries):
        return [_dcp(parent, path, entries, settled)]
    latest = os.path.join(parent, DEEPSPEED_LATEST)
    tag = _deepspeed_tag(parent, path, _latest_tag(parent), os.path.isfile(latest), budget, settled)
    return [tag] if tag is not None else scan(path, limit=limit, settle=settle)


def _order(found: Found) -> tuple[int, float, str]:
    return (-1 if found.step is None else found.step, found.mtime, found.path)


def _entries(folder: str, budget: _Budget) -> list[os.DirEntry[str]]:
    """The directory's entries, symlinks left out, within the budget."""
    out: list[os.DirEntry[str]] = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if budget.left <= 0:
                    break
                budget.left -= 1
                if not entry.is_symlink():
                    out.append(entry)
    except OSError:
        pass
    return out


def _walk(root: str, folder: str, depth: int, budget: _Budget, found: list[Found], settled: float) -> None:
    entries = _entries(folder, budget)
    names = {entry.name for entry in entries}
    if DCP_METADATA in names or any(name.endswith(DCP_SUFFIX) for name in names):
        found.append(_dcp(root, folder, entries, settled))
        return
    latest = _latest_tag(folder) if DEEPSPEED_LATEST in names else None
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            tag = _deepspeed_tag(root, entry.path, latest, DEEPSPEED_LATEST in names, budget, settled)
            if tag is not None:
                found.append(tag)
            elif depth < MAX_DEPTH:
                _walk(root, entry.path, depth + 1, budget, found, settled)
        elif entry.is_file(follow_symlinks=False):
            one = _file(root, entry, settled)
            if one is not None:
                found.append(one)


def _files(folder: str, budget: _Budget) -> list[os.DirEntry[str]]:
    """A checkpoint directory's regular files, one level of subdirectories included (DCP and
    DeepSpeed write flat directories)."""
    out: list[os.DirEntry[str]] = []
    for entry in _entries(folder, budget):
        if entry.is_file(follow_symlinks=False):
            out.append(entry)
        elif entry.is_dir(follow_symlinks=False):
            out.extend(e for e in _entries(entry.path, budget) if e.is_file(follow_symlinks=False))
    return out


def _stats(files: list[os.DirEntry[str]]) -> tuple[float, int]:
    mtime, size = 0.0, 0
    for entry in files:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        mtime, size = max(mtime, st.st_mtime), size + st.st_size
    return mtime, size


def _dcp(root: str, folder: str, entries: list[os.DirEntry[str]], settled: float) -> Found:
    files = [entry for entry in entries if entry.is_file(follow_symlinks=False)]
    mtime, size = _stats(files)
    has_metadata = any(entry.name == DCP_METADATA for entry in files)
    step, epoch = _named(root, folder)
    return Found(
        path=folder,
        kind="dcp",
        step=step,
        epoch=epoch,
        step_source=_source(step, "name"),
        mtime=mtime,
        size=size,
        complete=has_metadata and mtime <= settled,
        world_size=None,
    )


def _latest_tag(folder: str) -> str | None:
    """The tag DeepSpeed's ``latest`` file names (it writes it after every file of the tag)."""
    try:
        with open(os.path.join(folder, DEEPSPEED_LATEST), "rb") as fh:
            tag = fh.read(256).decode("utf-8", "replace").strip()
    except OSError:
        return None
    return tag or None


def _deepspeed_tag(
    root: str,
    folder: str,
    latest: str | None,
    has_latest: bool,
    budget: _Budget,
    settled: float,
) -> Found | None:
    """A DeepSpeed tag directory (its ``*_model_states.pt``), or None for any other directory."""
    try:
        with os.scandir(folder) as it:
            is_tag = any(
                entry.name.endswith(DEEPSPEED_MODEL) for _, entry in zip(range(64), it, strict=False)
            )
    except OSError:
        return None
    if not is_tag:
        return None
    files = _files(folder, budget)
    mtime, size = _stats(files)
    shards = sum(1 for entry in files if entry.name.endswith(DEEPSPEED_OPTIM))
    tag = os.path.basename(folder)
    step, epoch = _named(root, folder)
    # The tag is DeepSpeed's own record; a step from the directory holding the save dir
    # (Lightning's "epoch=0-step=9.ckpt/checkpoint") is the name's.
    source = _source(step, "metadata" if _named_step(tag) is not None else "name")
    written = has_latest and latest is not None and _not_after(tag, latest, folder)
    return Found(
        path=folder,
        kind="deepspeed",
        step=step,
        epoch=epoch,
        step_source=source,
        mtime=mtime,
        size=size,
        complete=written and mtime <= settled,
        world_size=shards or None,
    )


def _source(step: int | None, source: str) -> str | None:
    return None if step is None else source


def _not_after(tag: str, latest: str, folder: str) -> bool:
    """Whether the tag was saved no later than the one ``latest`` names: a newer tag is being
    written (DeepSpeed updates ``latest`` once a tag is whole)."""
    if tag == latest:
        return True
    mine, theirs = _named_step(tag), _named_step(latest)
    if mine is not None and theirs is not None:
        return mine <= theirs
    try:
        return os.stat(folder).st_mtime <= os.stat(os.path.join(folder, "..", latest)).st_mtime
    except OSError:
        return False


def _file(root: str, entry: os.DirEntry[str], settled: float) -> Found | None:
    name = entry.name
    if name.endswith(LIGHTNING_SUFFIX):
        kind = "lightning"
    elif name.endswith(TORCH_SUFFIXES):
        kind = "torch"
    else:
        return None
    try:
        st = entry.stat(follow_symlinks=False)
        key = (root, entry.path)
        ident = (st.st_ino, st.st_size, st.st_mtime_ns)
        known = _FILES.get(key)
        if known is not None and known[0] == ident and (known[1] is None or known[1].complete):
            return known[1]  # unchanged since it was whole (or not a checkpoint): not read again
        zipped, ends = _zip_state(entry.path, st.st_size)
    except OSError:
        return None
    found = (
        None if zipped is None else _file_found(root, entry.path, kind, st, bool(ends or not zipped), settled)
    )
    if len(_FILES) >= MAX_REMEMBERED:
        _FILES.clear()
    _FILES[key] = (ident, found)
    return found


def _file_found(root: str, path: str, kind: str, st: os.stat_result, whole: bool, settled: float) -> Found:
    step, epoch = _named(root, path)
    return Found(
        path=path,
        kind=kind,
        step=step,
        epoch=epoch,
        step_source=_source(step, "name"),
        mtime=st.st_mtime,
        size=st.st_size,
        complete=whole and st.st_mtime <= settled,
        world_size=None,
    )


def _zip_state(path: str, size: int) -> tuple[bool | None, bool]:
    """(zip, legacy pickle or neither: None; whether a zip's end record is in yet)."""
    with open(path, "rb") as fh:
        head = fh.read(4)
        if head.startswith(_ZIP_MAGIC):
            fh.seek(max(0, size - 22))  # where the record is when the zip has no comment (torch's)
            tail = fh.read(22)
            if tail[:4] == _EOCD and tail[20:22] == b"\0\0":
                return True, True
            fh.seek(max(0, size - _EOCD_WINDOW))
            return True, _has_end_record(fh.read(_EOCD_WINDOW))
    if head.startswith(_PICKLE_MAGIC):
        return False, False
    return None, False


def _has_end_record(window: bytes) -> bool:
    """Whether ``window`` (a zip's last bytes) ends with a whole end-of-central-directory record:
    its signature, 18 bytes and the comment its length field says."""
    at = window.rfind(_EOCD)
    while at >= 0:
        if at + 22 <= len(window) and at + 22 + int.from_bytes(window[at + 20 : at + 22], "little") == len(
            window
        ):
            return True
        at = window.rfind(_EOCD, 0, at)
    return False


def _named_step(name: str, *, bare: bool = True) -> int | None:
    """The step a name says: by a keyword, or (``bare``) a name that is little but a number."""
    stem = _stem(name)
    match = _STEP.search(stem)
    if match:
        return int(match.group(1))
    if not bare or _EPOCH.search(stem):
        return None
    number = _BARE.match(stem)
    return int(number.group(1)) if number else None


def _stem(name: str) -> str:
    for suffix in (*TORCH_SUFFIXES, LIGHTNING_SUFFIX):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _named(root: str, path: str) -> tuple[int | None, int | None]:
    """(step, epoch) from the entry's name, else from the directories between it and ``root``,
    nearest first (``step_100/model.pt``), by keyword only there (not ``run_3/model.pt``)."""
    top = root.rstrip(os.sep) + os.sep
    rel = path[len(top) :] if path.startswith(top) else ""  # paths made under root
    parts = rel.split(os.sep) if rel else []
    for index, part in enumerate(reversed(parts)):
        step = _named_step(part, bare=index == 0)
        epoch_match = _EPOCH.search(_stem(part))
        epoch = int(epoch_match.group(1)) if epoch_match else None
        if step is not None or epoch is not None:
            return step, epoch
    return None, None


def with_step(found: Found, step: int, source: str) -> Found:
    """``found`` with a step learnt elsewhere (a declaration, the run's logged steps)."""
    return replace(found, step=step, step_source=source)
