"""Which checkpoints a directory holds, in the formats scripts write (README "Checkpoints").

A plain ``torch.save`` file (``.pt``, ``.pth``, ``.bin``, ``.tar``), a Lightning ``.ckpt`` (a
``torch.save`` zip too), a DeepSpeed tag directory (``<save dir>/<tag>/*_model_states.pt``
beside the ``latest`` file naming the newest tag) and a ``torch.distributed.checkpoint`` (DCP)
directory (``*.distcp`` shards and the ``.metadata`` written last), and a directory of files saved
together (``step_300/{model,optim}.pt``, an HF Trainer ``checkpoint-300/``): one checkpoint, not
one per file. Each is listed once with its step, whether it is complete (every file in, none
still growing) and the disk it uses.

Standard library only, and cheap: the rank wrapper and the retention thread call it inside the
training processes, the server on every listing. Nothing is unpickled; steps come from names
(``step=1200``, ``epoch=3-step=1200``, ``global_step1200``, ``checkpoint-1200``, ``ckpt_1200``)
and DeepSpeed's ``latest``. The walk is bounded (entries and depth, one ``Budget`` a whole
listing can share) and follows no symlink: a link names a checkpoint listed under its own path,
or lies outside the directory. Every file it reads is opened without following a link and
without blocking (a FIFO planted as ``latest`` or ``step_1.pt`` is not read: not a regular file),
and DeepSpeed's ``latest`` is read only beside a directory that looks like one of its tags.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Mapping

from . import checkpoints
from .checkpoints import SCAN_LIMIT, SETTLE_SECONDS, Budget, Declared, Found, order, with_step
from .regularfile import open_binary, read_head

TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".tar")
# Files that make a directory holding them one checkpoint (its other files are part of it).
BUNDLE_SUFFIXES = (*TORCH_SUFFIXES, ".safetensors")
LIGHTNING_SUFFIX = ".ckpt"
DCP_METADATA = ".metadata"
DCP_SUFFIX = ".distcp"
DEEPSPEED_LATEST = "latest"
DEEPSPEED_MODEL = "_model_states.pt"
DEEPSPEED_OPTIM = "_optim_states.pt"
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


def scan(
    root: str, *, limit: int = 10_000, settle: float = SETTLE_SECONDS, budget: Budget | None = None
) -> list[Found]:
    """The checkpoints under ``root``, oldest first (by step, then time; those without a step
    first). At most ``limit`` directory entries are looked at (or what ``budget`` has left); a
    missing root is empty. A file written to in the last ``settle`` seconds may still be growing:
    not complete."""
    root = os.path.abspath(root)
    found: list[Found] = []
    if os.path.isdir(root) and not os.path.islink(root):
        _walk(root, root, 0, budget or Budget(limit), found, time.time() - settle)
    return sorted(found, key=order)


def newest_complete(root: str) -> Found | None:
    """The newest complete checkpoint under ``root`` (None when there is none), as the model
    decides it (``checkpoints.newest_complete``)."""
    return checkpoints.newest_complete(scan(root))


def scan_path(
    path: str, *, limit: int = 10_000, settle: float = SETTLE_SECONDS, budget: Budget | None = None
) -> list[Found]:
    """What one path is or holds: the checkpoint a file or a checkpoint directory is (a DeepSpeed
    tag judged by its save dir's ``latest``), else the checkpoints under the directory (what a
    script declared with ``run.checkpoint(path)``). A link or a missing path is empty."""
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    budget, settled = budget or Budget(limit), time.time() - settle
    try:
        st = os.lstat(path)
    except OSError:
        return []
    if stat.S_ISREG(st.st_mode):
        one = _file(parent, path, st, settled)
        return [one] if one is not None else []
    if not stat.S_ISDIR(st.st_mode):
        return []
    entries = _entries(path, budget)
    if _is_dcp(entries):
        return [_dcp(parent, path, entries, settled)]
    if _is_tag(path):  # its save dir's ``latest`` says whether it is whole
        latest = _latest_tag(parent)
        return [_deepspeed_tag(parent, path, latest, latest is not None, budget, settled)]
    if _is_bundle(path, entries):
        return [_bundle(parent, path, entries, budget, settled)]
    return scan(path, settle=settle, budget=budget)


def scan_job(
    checkpoint_dir: str | None,
    declared: Mapping[str, Declared],
    *,
    settle: float = SETTLE_SECONDS,
    limit: int = SCAN_LIMIT,
) -> tuple[list[Found], Budget]:
    """A job's checkpoints, in ``order``: those of its checkpoint dir and at the paths its runs
    ``declared`` (a declared path that is one checkpoint gets the step declared with it), within
    one budget of ``limit`` directory entries (each declared path costs one too: the budget's
    ``hit`` says some were left). Each is kept once by its real path: declared paths that are the
    same directory by other names, or lie in a tree already scanned, are not scanned again."""
    budget = Budget(limit)
    found: dict[str, Found] = {}
    real_seen: set[str] = set()
    scanned: set[str] = set()  # real paths of the trees walked

    def add(top: str, items: list[Found]) -> None:
        real_top = os.path.realpath(top)  # below it the walk follows no link: the rest maps as is
        scanned.add(real_top)
        for item in items:
            inside = item.path.startswith(top)
            real = real_top + item.path[len(top) :] if inside else os.path.realpath(item.path)
            if real not in real_seen:
                real_seen.add(real)
                found[item.path] = item

    if checkpoint_dir:
        add(checkpoint_dir, scan(checkpoint_dir, settle=settle, budget=budget))
    for path in sorted(declared):
        if budget.left <= 0:
            budget.hit = True
            break
        budget.left -= 1
        if path in found or _within(os.path.realpath(path), scanned):
            continue
        add(path, scan_path(path, settle=settle, budget=budget))
    for path, said in declared.items():
        if path in found and said.step is not None:
            found[path] = with_step(found[path], said.step, "declared")
    return sorted(found.values(), key=order), budget


def _within(real: str, trees: set[str]) -> bool:
    """Whether the real path ``real`` is one of ``trees`` or lies in one."""
    while True:
        if real in trees:
            return True
        parent = os.path.dirname(real)
        if parent == real:
            return False
        real = parent


def _entries(folder: str, budget: Budget) -> list[os.DirEntry[str]]:
    """The directory's entries, symlinks left out, within the budget."""
    out: list[os.DirEntry[str]] = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if budget.left <= 0:
                    budget.hit = True
                    break
                budget.left -= 1
                if not entry.is_symlink():
                    out.append(entry)
    except OSError:
        pass
    return out


def _walk(root: str, folder: str, depth: int, budget: Budget, found: list[Found], settled: float) -> None:
    entries = _entries(folder, budget)
    if _is_dcp(entries):
        found.append(_dcp(root, folder, entries, settled))
        return
    if depth and _is_bundle(folder, entries):
        found.append(_bundle(root, folder, entries, budget, settled))
        return
    has_latest = any(entry.name == DEEPSPEED_LATEST for entry in entries)
    latest: list[str | None] = []  # read once, beside the first directory that looks like a tag
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            if _is_tag(entry.path):
                if not latest:
                    latest.append(_latest_tag(folder) if has_latest else None)
                found.append(_deepspeed_tag(root, entry.path, latest[0], has_latest, budget, settled))
            elif depth < MAX_DEPTH:
                _walk(root, entry.path, depth + 1, budget, found, settled)
        elif entry.is_file(follow_symlinks=False):
            try:
                one = _file(root, entry.path, entry.stat(follow_symlinks=False), settled)
            except OSError:
                continue
            if one is not None:
                found.append(one)


def _is_dcp(entries: list[os.DirEntry[str]]) -> bool:
    return any(e.name == DCP_METADATA or e.name.endswith(DCP_SUFFIX) for e in entries)


def _is_bundle(folder: str, entries: list[os.DirEntry[str]]) -> bool:
    """Whether ``folder`` is one checkpoint of several files (``step_300/{model,optim}.pt``, an
    HF Trainer ``checkpoint-300/``): it holds torch or safetensors files, and its name says a
    step, or its files name none of their own (or all the same one)."""
    files = [e for e in entries if e.is_file(follow_symlinks=False)]
    members = [e.name for e in files if e.name.endswith(BUNDLE_SUFFIXES)]
    if not members:
        return False
    if _named_step(os.path.basename(folder), bare=False) is not None:
        return True
    steps = {_named_step(name) for name in members}
    return len(steps) == 1 and (None in steps or len(members) > 1)


def _bundle(root: str, folder: str, entries: list[os.DirEntry[str]], budget: Budget, settled: float) -> Found:
    """A directory of files saved together: complete once every file has settled, each torch
    file is whole and each DCP directory in it has its ``.metadata``."""
    files, whole = _files(folder, budget, entries)
    mtime, size = _stats(files)
    for entry in files:
        if whole and entry.name.endswith((*TORCH_SUFFIXES, LIGHTNING_SUFFIX)):
            try:
                one = _file(root, entry.path, entry.stat(follow_symlinks=False), settled)
            except OSError:
                one = None
            whole = one is None or one.complete  # a .bin that is no torch file: its time says
    return _found(folder, "files", _named(root, folder, bare=False), (mtime, size), whole, settled)


def _found(
    path: str,
    kind: str,
    named: tuple[int | None, int | None],
    stats: tuple[float, int],
    whole: bool,
    settled: float,
) -> Found:
    """A checkpoint whose step its name says (``named``), of ``stats`` (newest write, bytes):
    complete when ``whole`` and settled."""
    (step, epoch), (mtime, size) = named, stats
    return Found(
        path=path,
        kind=kind,
        step=step,
        epoch=epoch,
        step_source=_source(step, "name"),
        mtime=mtime,
        size=size,
        complete=whole and mtime <= settled,
        world_size=None,
    )


def _files(
    folder: str, budget: Budget, entries: list[os.DirEntry[str]] | None = None
) -> tuple[list[os.DirEntry[str]], bool]:
    """A checkpoint directory's regular files, one level of subdirectories included (DCP and
    DeepSpeed write flat directories), and whether each DCP subdirectory has its ``.metadata``."""
    out: list[os.DirEntry[str]] = []
    whole = True
    for entry in _entries(folder, budget) if entries is None else entries:
        if entry.is_file(follow_symlinks=False):
            out.append(entry)
        elif entry.is_dir(follow_symlinks=False):
            inner = [e for e in _entries(entry.path, budget) if e.is_file(follow_symlinks=False)]
            names = {e.name for e in inner}
            whole = whole and (DCP_METADATA in names or not any(n.endswith(DCP_SUFFIX) for n in names))
            out.extend(inner)
    return out, whole


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
    has_metadata = any(entry.name == DCP_METADATA for entry in files)
    return _found(folder, "dcp", _named(root, folder), _stats(files), has_metadata, settled)


def _latest_tag(folder: str) -> str | None:
    """The tag DeepSpeed's ``latest`` file names (it writes it after every file of the tag)."""
    try:
        tag = read_head(os.path.join(folder, DEEPSPEED_LATEST), 256).decode("utf-8", "replace").strip()
    except OSError:
        return None
    return tag or None


def _is_tag(folder: str) -> bool:
    """Whether the directory looks like a DeepSpeed tag (a ``*_model_states.pt`` among its first
    entries)."""
    try:
        with os.scandir(folder) as it:
            return any(entry.name.endswith(DEEPSPEED_MODEL) for _, entry in zip(range(64), it, strict=False))
    except OSError:
        return False


def _deepspeed_tag(
    root: str,
    folder: str,
    latest: str | None,
    has_latest: bool,
    budget: Budget,
    settled: float,
) -> Found:
    """A DeepSpeed tag directory (one ``_is_tag`` says is one)."""
    files, _ = _files(folder, budget)
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


def _file(root: str, path: str, st: os.stat_result, settled: float) -> Found | None:
    name = os.path.basename(path)
    if name.endswith(LIGHTNING_SUFFIX):
        kind = "lightning"
    elif name.endswith(TORCH_SUFFIXES):
        kind = "torch"
    else:
        return None
    key = (root, path)
    ident = (st.st_ino, st.st_size, st.st_mtime_ns)
    known = _FILES.get(key)
    if known is not None and known[0] == ident and (known[1] is None or known[1].complete):
        return known[1]  # unchanged since it was whole (or not a checkpoint): not read again
    try:
        zipped, ends = _zip_state(path, st.st_size)
    except OSError:
        return None
    found = None if zipped is None else _file_found(root, path, kind, st, bool(ends or not zipped), settled)
    if len(_FILES) >= MAX_REMEMBERED:
        _FILES.clear()
    _FILES[key] = (ident, found)
    return found


def _file_found(root: str, path: str, kind: str, st: os.stat_result, whole: bool, settled: float) -> Found:
    return _found(path, kind, _named(root, path), (st.st_mtime, st.st_size), whole, settled)


def _zip_state(path: str, size: int) -> tuple[bool | None, bool]:
    """(zip, legacy pickle or neither: None; whether a zip's end record is in yet)."""
    with open_binary(path) as fh:  # a FIFO swapped in since the scan saw a file is not waited on
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


def _named(root: str, path: str, *, bare: bool = True) -> tuple[int | None, int | None]:
    """(step, epoch) from the entry's name, else from the directories between it and ``root``,
    nearest first (``step_100/model.pt``), by keyword only there (not ``run_3/model.pt``); a
    directory of files is named by keyword only (``bare`` False: not ``run_3/``)."""
    top = root.rstrip(os.sep) + os.sep
    rel = path[len(top) :] if path.startswith(top) else ""  # paths made under root
    parts = rel.split(os.sep) if rel else []
    for index, part in enumerate(reversed(parts)):
        step = _named_step(part, bare=bare and index == 0)
        epoch_match = _EPOCH.search(_stem(part))
        epoch = int(epoch_match.group(1)) if epoch_match else None
        if step is not None or epoch is not None:
            return step, epoch
    return None, None
