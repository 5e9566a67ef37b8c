"""The job store: one directory per job, readable by any process.

The kernel that submits a job, the launcher that runs it and the Jupyter server that shows it
are different processes (and, on a cluster, different machines sharing a PVC). They talk only
through files in the job directory::

    <root>/<job-id>/
        job.json         JobRecord: spec, backend, the exact launch request (written once)
        status.json      JobStatus (written by whoever owns the job's progress)
        train.py         the packaged script
        logs/            per-replica / per-rank output
        tensorboard/     DISTTRAIN_TENSORBOARD_DIR
        deleted          marker: hidden from listings, files kept

Every JSON write goes to a temporary file that is renamed over the target, so a reader never
sees a torn record, even if the writer dies half-way.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import shutil
import socket
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, overload

from ..model.errors import ForeignJobDirError, InvalidSpecError, UnknownJobError
from ..model.flags import GROUP_ACCESS
from ..model.specs import JobSpec, JobStatus, now_iso, validate_entrypoint, validate_job_id, validate_name
from ..runtime import contract
from ..runtime.atomic import write_json
from .roots import known_roots, remember_root
from .safefiles import is_real_dir, is_real_file, open_regular

log = logging.getLogger(__name__)

ROOT_ENV = "DISTTRAIN_JOB_ROOT"
_STORE_DIR = ".disttrain"
_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
# What the store itself keeps in a job dir: no side file may take one of these names.
_STORE_FILES = frozenset(
    {
        "job.json",
        "status.json",
        "launcher.json",
        "launcher.log",
        "deleted",
        contract.LOGS_DIR,
        contract.RANKS_DIR,
        contract.TENSORBOARD_DIR,
        contract.CHECKPOINTS_DIR,
        "run.sh",
        "slurm",  # the Slurm backend's batch script, node records and rendezvous
    }
)


@dataclass
class JobRecord:
    """What was submitted. Written once at submit; backends may add to ``backend_state``."""

    id: str
    spec: JobSpec
    created: str = field(default_factory=now_iso)
    request: dict[str, Any] = field(default_factory=dict)
    backend_state: dict[str, Any] = field(default_factory=dict)
    host: str = field(default_factory=socket.gethostname)
    user: str = field(default_factory=lambda: os.environ.get("USER", ""))

    @property
    def backend(self) -> str:
        return self.spec.backend

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "spec": self.spec.to_dict(),
            "created": self.created,
            "request": self.request,
            "backend_state": self.backend_state,
            "host": self.host,
            "user": self.user,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobRecord:
        return cls(
            id=data["id"],
            spec=JobSpec.from_dict(data["spec"]),
            created=data.get("created", ""),
            request=data.get("request", {}),
            backend_state=data.get("backend_state", {}),
            host=data.get("host", ""),
            user=data.get("user", ""),
        )


def write_record(path: Path, data: Any) -> None:
    """A record of the store (``job.json``, ``status.json``, ``launcher.json``):
    replaced atomically, on disk before the rename, readable by its owner only (a spec's env may
    hold secrets)."""
    write_json(path, data, durable=True, mode=0o600)


def read_json(path: Path) -> Any:
    with open_regular(path, "r", encoding="utf-8") as f:  # never a link out of the job dir
        return json.load(f)


def read_status_file(path: Path) -> JobStatus | None:
    """The status in ``path``; None when there is none yet (or only a link, never followed)."""
    try:
        return JobStatus.from_dict(read_json(path))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
        raise


_warned: set[str] = set()


def warn_once(path: str, message: str) -> None:
    """Log a problem with a directory of the root once per process (listings poll often)."""
    if path not in _warned:
        _warned.add(path)
        log.warning("skipping %s: %s", path, message)


def checked_record(data: Any, job_id: str, path: str) -> JobRecord:
    """The record in ``<root>/<job_id>/job.json``, if it is that job's: a directory that was
    renamed, copied or moved holds another id, and taking it would make two jobs one."""
    record = JobRecord.from_dict(data)
    if record.id != job_id:
        why = f"its job.json is job {record.id!r} (renamed, copied or moved?)"
        warn_once(path, why)
        raise ForeignJobDirError(job_id, why)
    return record


def dir_mode(group_access: bool) -> int:
    """The mode of the job root and of each job dir: the owner's alone unless the job asks to
    share it with the directory's group (``--group-access``: read and enter, never write)."""
    return 0o750 if group_access else 0o700


def default_root(start: Path | None = None) -> Path:
    """Where jobs live when nobody said otherwise.

    ``$DISTTRAIN_JOB_ROOT`` wins (the server extension exports it, so kernels it starts agree
    with it). Otherwise the nearest ``.disttrain/jobs`` in the working dir or above, else a new
    one in the working dir: inside the notebook's tree, so on a shared PVC cluster pods see it.
    """
    env = os.environ.get(ROOT_ENV)
    if env:
        return Path(env).expanduser().resolve()
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / _STORE_DIR / "jobs").is_dir():
            return d / _STORE_DIR / "jobs"
    return here / _STORE_DIR / "jobs"


class JobStore:
    """Job directories under one root. Cheap to create; holds no state but the root path.

    ``also`` gives more roots to search (``open_store`` passes the user's indexed roots):
    their jobs are listed and found by id too; new jobs always go under ``root``. An id found
    in several roots is the first one's (``root``, then ``also``'s order).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        also: Callable[[], Sequence[Path]] | None = None,
    ) -> None:
        self.root = Path(root).expanduser().resolve() if root else default_root()
        self._root_str = str(self.root)
        self._also = also

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.root)!r})"

    # Equal stores read the same jobs: lets callers cache a backend per store.
    def _key(self) -> tuple[Any, ...]:
        return (type(self), self.root, self._also)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobStore) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def roots(self) -> list[Path]:
        """Every root searched: ``root`` first."""
        if self._also is None:
            return [self.root]
        return [self.root, *(r for r in self._also() if r != self.root)]

    # -- ids and paths -------------------------------------------------------------------
    def new_job_id(self, name: str) -> str:
        validate_name(name)
        while True:
            job_id = f"{name}-{''.join(secrets.choice(_ID_ALPHABET) for _ in range(5))}"
            if not os.path.lexists(self.root / job_id):
                return job_id

    def job_dir(self, job_id: str) -> Path:
        """The job's directory; the id is validated, so no path can escape the roots."""
        validate_job_id(job_id)
        return Path(self._locate(job_id))

    def _locate(self, job_id: str) -> str:
        """The directory of an already validated id: under ``root`` unless only another root
        has that job (a new job's id is free under ``root``)."""
        d = os.path.join(self._root_str, job_id)
        if self._also is None or os.path.exists(d):
            return d
        for other in self.roots()[1:]:
            found = os.path.join(other, job_id)
            if os.path.isfile(os.path.join(found, "job.json")):
                return found
        return d

    def existing_dir(self, job_id: str) -> Path:
        """The job's directory, if it exists and is really in the root (not a link)."""
        d = self.job_dir(job_id)
        if not is_real_file(d / "job.json"):
            raise UnknownJobError(job_id, self.roots())
        if not is_real_dir(d):
            warn_once(str(d), "a symbolic link, not a job directory")
            raise ForeignJobDirError(job_id, "it is a symbolic link")
        return d

    def logs_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id) / contract.LOGS_DIR

    def tensorboard_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id) / contract.TENSORBOARD_DIR

    # -- records -------------------------------------------------------------------------
    def make_root(self, group_access: bool = False) -> None:
        """Make the job root if it is missing: only its owner may enter it (see ``create``)."""
        if not self.root.is_dir():
            self.root.mkdir(parents=True, exist_ok=True)
            self.root.chmod(dir_mode(group_access))

    def create(self, record: JobRecord, script: str, files: dict[str, bytes] | None = None) -> Path:
        """Make the job's directory with its script, side files and record.

        The directory is 0700 (0750 when the spec asks for ``--group-access``, an option its
        backend checked): what is made in it (logs, runs,
        event files, whatever mode their writers give them) is then out of other users' reach.

        All or nothing: if anything fails (a full disk...), what was made is removed again, so
        no half-made job dir is left behind.
        """
        validate_entrypoint(record.spec.entrypoint)
        for name in files or {}:
            if "/" in name or "\\" in name or name.startswith(".") or name in _STORE_FILES:
                raise InvalidSpecError(f"side file {name!r} must be a plain file name")
        d = self.job_dir(record.id)
        group_access = record.spec.options.get(GROUP_ACCESS) is True
        self.make_root(group_access)
        d.mkdir(exist_ok=False)
        try:
            d.chmod(dir_mode(group_access))  # exactly, whatever the umask
            (d / contract.LOGS_DIR).mkdir()
            (d / contract.TENSORBOARD_DIR).mkdir()
            # There before any rank starts, so a plain torch.save(f"{DISTTRAIN_CHECKPOINT_DIR}/...")
            # works as a save into any existing dir does.
            (d / contract.CHECKPOINTS_DIR).mkdir()
            (d / record.spec.entrypoint).write_text(script, encoding="utf-8")
            for name, data in (files or {}).items():
                (d / name).write_bytes(data)
            self.write_record(record)
        except BaseException:
            self.remove_partial(record.id)
            raise
        remember_root(self.root)
        return d

    def remove_partial(self, job_id: str) -> None:
        """Remove the directory of a submit that failed half-way (best effort)."""
        d = self.job_dir(job_id)
        if is_real_dir(d):
            shutil.rmtree(d, ignore_errors=True)

    def write_record(self, record: JobRecord) -> None:
        write_record(self.job_dir(record.id) / "job.json", record.to_dict())

    def read_record(self, job_id: str) -> JobRecord:
        path = self.existing_dir(job_id) / "job.json"
        return checked_record(read_json(path), job_id, str(path.parent))

    def write_status(self, status: JobStatus) -> None:
        status.updated = now_iso()
        write_record(self.job_dir(status.job_id) / "status.json", status.to_dict())

    def read_status(self, job_id: str) -> JobStatus | None:
        return read_status_file(self.existing_dir(job_id) / "status.json")

    def read_script(self, job_id: str) -> str:
        record = self.read_record(job_id)
        try:
            with open_regular(self.job_dir(job_id) / record.spec.entrypoint, "r", encoding="utf-8") as f:
                return f.read()
        except OSError as exc:
            if exc.errno == errno.ELOOP or isinstance(exc, IsADirectoryError):
                raise ForeignJobDirError(job_id, "its script is a symbolic link or not a file") from None
            raise

    # -- listing and removal -------------------------------------------------------------
    def ids(self, include_deleted: bool = False) -> list[str]:
        """Ids of the jobs under the root (deleted ones only when asked), in name order."""
        return sorted(job_id for job_id, _, _ in self._scan(include_deleted))

    def fingerprints(self) -> dict[str, tuple[int, ...]]:
        """Each listed (not deleted) job's id and a value that changes whenever its record or
        status is rewritten: every write is an atomic rename, so the files' inode, mtime and
        size change. Lets a reader that polls skip jobs that did not change (``stat`` only)."""
        out: dict[str, tuple[int, ...]] = {}
        for job_id, job_dir, record in self._scan(include_deleted=False):
            try:
                st = os.stat(os.path.join(job_dir, "status.json"))
                status: tuple[int, ...] = (st.st_ino, st.st_mtime_ns, st.st_size)
            except FileNotFoundError:
                status = ()
            out[job_id] = (record.st_ino, record.st_mtime_ns, record.st_size, *status)
        return out

    def _scan(self, include_deleted: bool) -> Iterator[tuple[str, str, os.stat_result]]:
        """Job ids under the roots, with their directory and the ``stat`` of their ``job.json``.

        Links, names that are not job ids and dirs without a record are skipped (with one
        warning each), so one odd directory never takes down a listing.
        """
        seen: set[str] = set()
        for root in self.roots():
            try:
                entries = list(os.scandir(root))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for e in entries:
                if e.name in seen or e.name.startswith(".") or not e.is_dir():
                    continue
                if e.is_symlink():
                    warn_once(e.path, "a symbolic link, not a job directory")
                    continue
                try:
                    validate_job_id(e.name)
                except InvalidSpecError:
                    warn_once(e.path, "its name is not a job id")
                    continue
                try:
                    st = os.stat(os.path.join(e.path, "job.json"))
                except (FileNotFoundError, NotADirectoryError):
                    continue
                seen.add(e.name)  # a job, deleted or not: it shadows the same id in later roots
                if include_deleted or not os.path.exists(os.path.join(e.path, "deleted")):
                    yield e.name, e.path, st

    def records(self, include_deleted: bool = False) -> list[JobRecord]:
        """Every job's record, newest first. A record being written right now is skipped."""
        out = []
        for job_id in self.ids(include_deleted):
            try:
                out.append(self.read_record(job_id))
            except (OSError, ValueError, KeyError, UnknownJobError):
                continue
        return sorted(out, key=lambda r: r.created, reverse=True)

    def is_deleted(self, job_id: str) -> bool:
        return (self.job_dir(job_id) / "deleted").exists()

    def mark_deleted(self, job_id: str) -> None:
        """Hide the job from listings; its script, logs and TensorBoard data stay on disk."""
        path = self.existing_dir(job_id) / "deleted"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(now_iso() + "\n")

    def purge(self, job_id: str) -> None:
        """Remove the job's directory and everything in it (links in it are removed, never followed)."""
        shutil.rmtree(self.existing_dir(job_id))


_S = TypeVar("_S", bound=JobStore)


@overload
def open_store(root: str | os.PathLike[str] | None = None, *, default: Path | None = None) -> JobStore: ...
@overload
def open_store(
    root: str | os.PathLike[str] | None = None, *, default: Path | None = None, store_class: type[_S]
) -> _S: ...
def open_store(
    root: str | os.PathLike[str] | None = None,
    *,
    default: Path | None = None,
    store_class: type[JobStore] = JobStore,
) -> JobStore:
    """The store a reader uses. ``root`` (a ``--root`` flag, a configured root) or else
    ``$DISTTRAIN_JOB_ROOT`` narrows it to that one root. Otherwise it is ``default`` (the
    nearest ``.disttrain/jobs``), where new jobs go, searched together with every indexed root."""
    if root:
        return store_class(root)
    if os.environ.get(ROOT_ENV):
        return store_class(os.environ[ROOT_ENV])
    return store_class(default or default_root(), also=known_roots)
