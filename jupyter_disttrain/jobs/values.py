"""``--out`` in the job layer: the values a job's ranks left, checked, listed and loaded.

Before launch, ``check`` refuses a name the script never assigns or surely cannot send back
(``packaging/outnames.py``) and, with the dry run, ``describe`` says what will come back. After
the run, ``kept`` lists what the ranks wrote (``out/rank-N.json``, ``runtime/outvalues.py``):
names, kinds, types, sizes, and what was refused and why (``%distrun status``, the details
view). ``load`` reads them into the kernel, only from a job that succeeded:

- every file is opened beneath the job dir without following a link, no larger than the job's
  ``--out-limit``, and read with ``torch.load(weights_only=True)``: tensors and plain data,
  never code (docs/security.md);
- modules and optimizers are rebuilt with the notebook's own classes, as the checkpoints'
  load cell rebuilds a model (``packaging/loadcell.py``: the same call, ``Net(128)``, found in
  the script), then given their state; a class the script itself defined (not the kernel) is
  defined from the script first, with the script's imports, in a namespace of its own.

A second ``load`` of the same job reads the same files, and gives equal objects.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.errors import DistTrainError
from ..model.specs import JobPhase, JobSpec, JobStatus
from ..packaging.loadcell import definitions, rebuild_call
from ..payloads.jobs import KeptValue
from ..runtime import contract
from ..runtime.outvalues import human
from ..storage.safefiles import fd_beneath

if TYPE_CHECKING:
    from ..storage.store import JobRecord, JobStore

MANIFEST_BYTES = 256 * 1024  # out/rank-N.json: a few names each
_ORDER = {"value": 0, "module": 1, "optimizer": 2}  # an optimizer is built on its module


def check(spec: JobSpec, script: str) -> None:
    """Refuse (one line) an ``--out`` name the script never assigns, or cannot send back."""
    if spec.out or spec.out_all:
        from ..packaging.outnames import check_out

        check_out(script, spec.out, spec.out_all)


def describe(spec: JobSpec) -> list[str]:
    """The dry run's lines on what comes back into the kernel."""
    out = []
    if spec.out:
        out.append(f"back into the kernel from rank 0: {', '.join(spec.out)}")
    if spec.out_all:
        out.append(f"back into the kernel from every rank, each a list by rank: {', '.join(spec.out_all)}")
    if out:
        out.append(f"at most {human(spec.out_limit)} of them per rank (--out-limit), once the job succeeds")
    return out


@dataclass(frozen=True)
class _Entry:
    """One value (or refusal) of one rank's manifest."""

    name: str
    rank: int
    kind: str
    type: str
    module: str
    bytes: int
    refused: str | None

    def payload(self) -> KeptValue:
        return KeptValue(self.name, self.rank, self.kind, self.type, self.bytes, self.refused)


def kept(store: JobStore, record: JobRecord) -> list[KeptValue]:
    """What the job's ranks wrote for ``--out``/``--out-all`` (none before they have)."""
    try:
        job_dir = store.job_dir(record.id)
    except DistTrainError:
        return []
    return [entry.payload() for entry in _entries(job_dir, record.spec)]


def _ranks(spec: JobSpec) -> list[int]:
    return list(range(spec.world_size)) if spec.out_all else [0] if spec.out else []


def _entries(job_dir: Path, spec: JobSpec) -> Iterator[_Entry]:
    for rank in _ranks(spec):
        manifest = _manifest(job_dir, rank)
        if manifest is None:
            continue
        wanted = set(spec.out_all) | (set(spec.out) if rank == 0 else set())
        for value in manifest.get("values", []):
            if isinstance(value, dict) and value.get("name") in wanted:
                yield _Entry(
                    str(value["name"]),
                    rank,
                    str(value.get("kind", "value")),
                    str(value.get("type", "")),
                    str(value.get("module", "")),
                    int(value.get("bytes") or 0),
                    None,
                )
        for refusal in manifest.get("refused", []):
            if isinstance(refusal, dict) and refusal.get("name") in wanted:
                yield _Entry(str(refusal["name"]), rank, "", "", "", 0, str(refusal.get("why", ""))[:500])


def _manifest(job_dir: Path, rank: int) -> dict[str, Any] | None:
    try:
        with _open(job_dir, [contract.OUT_DIR, contract.out_manifest(rank)]) as f:
            data = f.read(MANIFEST_BYTES + 1)
    except (OSError, ValueError):
        return None
    try:
        loaded = json.loads(data) if len(data) <= MANIFEST_BYTES else None
    except ValueError:
        return None
    return loaded if isinstance(loaded, dict) else None


def _open(job_dir: Path, parts: list[str]) -> Any:
    return os.fdopen(fd_beneath(job_dir, parts, os.O_RDONLY), "rb")


class Values(dict[str, Any]):
    """The values that came back, by name; ``notes``: one line for each that did not, and why."""

    def __init__(self) -> None:
        super().__init__()
        self.notes: list[str] = []


def load(
    store: JobStore, record: JobRecord, status: JobStatus, namespace: Mapping[str, Any] | None = None
) -> Values:
    """The values of a job that succeeded, rebuilt (``namespace``: where the notebook's classes
    are, the kernel's user namespace). Nothing of a job that did not succeed."""
    spec = record.spec
    if not (spec.out or spec.out_all):
        raise DistTrainError(f"job {record.id} kept no values: run it with --out NAMES (or --out-all NAMES)")
    if status.phase is not JobPhase.SUCCEEDED:
        raise DistTrainError(
            f"job {record.id} is {status.phase.value}: values come back only from a job that succeeded"
        )
    job_dir = store.existing_dir(record.id)
    entries = list(_entries(job_dir, spec))
    values = Values()
    rebuild = _Rebuild(_script(store, record.id), namespace or {})
    loaded: dict[tuple[str, int], Any] = {}
    for entry in sorted(entries, key=lambda e: (_ORDER.get(e.kind, 0), e.rank)):
        if entry.refused is not None:
            continue
        try:
            state = _read(job_dir, entry, spec.out_limit, local=record.backend == "local")
            loaded[entry.name, entry.rank] = rebuild.make(entry, state)
        except Exception as exc:  # one value's trouble, told by its name; the others still come
            loaded[entry.name, entry.rank] = _Missing(_reason(exc))
    for name in spec.out:
        _take(values, name, [0], loaded, entries, by_rank=False)
    for name in spec.out_all:
        _take(values, name, _ranks(spec), loaded, entries, by_rank=True)
    return values


class _Missing:
    def __init__(self, why: str) -> None:
        self.why = why


def _take(
    values: Values,
    name: str,
    ranks: list[int],
    loaded: dict[tuple[str, int], Any],
    entries: list[_Entry],
    *,
    by_rank: bool,
) -> None:
    """``values[name]``: the value (``by_rank``: a list by rank), or a note saying why not."""
    got = []
    for rank in ranks:
        value = loaded.get((name, rank))
        refused = next((e.refused for e in entries if e.name == name and e.rank == rank and e.refused), None)
        who = f"{name} (rank {rank})" if by_rank else name
        why = refused or (value.why if isinstance(value, _Missing) else None)
        if why is None and (name, rank) not in loaded:
            why = (
                f"rank {rank} wrote no values (it did not run to the end of the cell under the rank wrapper)"
            )
        if why is not None:
            values.notes.append(f"{who} did not come back: {why}")
            return
        got.append(value)
    values[name] = got if by_rank else got[0]


def _reason(exc: BaseException) -> str:
    if isinstance(exc, DistTrainError):
        return str(exc)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")[:300]


def _script(store: JobStore, job_id: str) -> str:
    try:
        return store.read_script(job_id)
    except (OSError, DistTrainError):
        return ""


def _read(job_dir: Path, entry: _Entry, limit: int, *, local: bool) -> dict[str, Any]:
    """The value's file as saved, read with ``weights_only=True`` (mapped, not copied, when the
    job dir is on this machine); refused when larger than the job's ``--out-limit``."""
    import torch

    fd = fd_beneath(
        job_dir, [contract.OUT_DIR, contract.rank_name(entry.rank), f"{entry.name}.pt"], os.O_RDONLY
    )
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise DistTrainError(f"its file is {human(size)}, over the job's --out-limit of {human(limit)}")
        if local:  # the file this descriptor is, never a path that could be swapped meanwhile
            state = torch.load(f"/proc/self/fd/{fd}", map_location="cpu", weights_only=True, mmap=True)
        else:
            with os.fdopen(os.dup(fd), "rb") as f:
                state = torch.load(f, map_location="cpu", weights_only=True)
    finally:
        os.close(fd)
    if not isinstance(state, dict) or "value" not in state:
        raise DistTrainError("its file is not one the rank wrapper wrote")
    return state


class _Rebuild:
    """Values as they were in the rank: arrays back to numpy, modules and optimizers rebuilt."""

    def __init__(self, script: str, namespace: Mapping[str, Any]) -> None:
        self.script = script
        self.user = namespace
        self._ns: dict[str, Any] | None = None
        self._made: dict[str, Any] = {}

    def make(self, entry: _Entry, state: dict[str, Any]) -> Any:
        value = _arrays(state["value"], state.get("arrays") or [])
        if entry.kind in ("module", "optimizer"):
            value = self._rebuilt(entry, value)
        if entry.rank == 0:
            self._made[entry.name] = value  # an optimizer's call names its module: model.parameters()
        return value

    def ns(self) -> dict[str, Any]:
        """Where calls run: the notebook's names, the script's imports, the values made so far."""
        if self._ns is None:
            self._ns = dict(self.user)
            self._exec(definitions(self.script, set()))
        self._ns.update(self._made)
        return self._ns

    def _exec(self, code: str) -> None:
        """Run the script's imports and definitions in ``ns``, one statement at a time."""
        assert self._ns is not None
        try:
            body = ast.parse(code).body
        except SyntaxError:
            return
        for node in body:
            with contextlib.suppress(Exception):  # an import the kernel lacks: a call may not need it
                exec(compile(ast.Module([node], []), "<the job's script>", "exec"), self._ns)

    def _rebuilt(self, entry: _Entry, state: Any) -> Any:
        cls: Any = self._class(entry)
        call = rebuild_call(self.script, cls.__name__) or f"{cls.__name__}()"
        code = compile(call, f"<{entry.name} rebuilt>", "eval")
        if entry.kind == "module" and (obj := _on_meta(code, self.ns(), cls, state)) is not None:
            return obj
        try:  # the script's own call, as the load cell runs it
            obj = eval(code, self.ns())
        except Exception as exc:
            raise DistTrainError(f"{call} fails in the kernel ({_reason(exc)})") from None
        if not isinstance(obj, cls):
            raise DistTrainError(f"{call} made a {type(obj).__name__}, not a {cls.__name__}")
        try:
            obj.load_state_dict(state)
        except Exception as exc:
            raise DistTrainError(f"{call} does not take rank {entry.rank}'s state ({_reason(exc)})") from None
        return obj

    def _class(self, entry: _Entry) -> type:
        """The value's class: the notebook's (or, defined by the cell itself, the script's), or
        the library's."""
        if entry.module == "__main__":
            found = _attr(self.user, entry.type)
            if not isinstance(found, type):
                self._define(entry.type.split(".")[0])
                found = _attr(self.ns(), entry.type)
        else:
            try:
                found = _attr(vars(importlib.import_module(entry.module)), entry.type)
            except ImportError as exc:
                raise DistTrainError(
                    f"its class {entry.module}.{entry.type} cannot be imported here ({exc})"
                ) from None
        if not isinstance(found, type):
            raise DistTrainError(f"its class {entry.type} is neither in the notebook nor in the job's script")
        return found

    def _define(self, name: str) -> None:
        """Define the script's class ``name`` (and the functions and classes it may use) in ``ns``."""
        missing = {name} | {n for n in _defined(self.script) if n not in self.user}
        self.ns()
        self._exec("\n".join(_only_definitions(definitions(self.script, missing))))


def _on_meta(code: Any, ns: dict[str, Any], cls: Any, state: Any) -> Any:
    """The module built without memory (torch's ``meta`` device) and given the loaded tensors
    themselves (``assign``): no initialisation, no copy. None when its class does not allow it
    (its constructor computes with tensors, or a tensor is not in its state): built for real then."""
    import torch

    try:
        with torch.device("meta"):
            obj = eval(code, ns)
        if not isinstance(obj, cls):
            return None
        obj.load_state_dict(state, assign=True)
    except Exception:
        return None
    if any(t.is_meta for t in (*obj.parameters(), *obj.buffers())):
        return None
    return obj


def _only_definitions(code: str) -> list[str]:
    """The definitions of ``code`` (its imports ran when the namespace was made)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [ast.unparse(n) for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))]


def _defined(script: str) -> set[str]:
    try:
        tree = ast.parse(script)
    except SyntaxError:
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}


def _attr(namespace: Mapping[str, Any], qualname: str) -> Any:
    obj: Any = namespace.get(qualname.split(".")[0])
    for part in qualname.split(".")[1:]:
        obj = getattr(obj, part, None)
    return obj


def _arrays(value: Any, places: list[Any]) -> Any:
    """Put back the numpy arrays (and scalars) the rank sent as tensors, at ``places``."""
    for place in places:
        if isinstance(place, (list, tuple)) and len(place) == 2 and isinstance(place[0], (list, tuple)):
            value = _replace(value, list(place[0]), bool(place[1]))
    return value


def _replace(value: Any, path: list[Any], scalar: bool) -> Any:
    if not path:
        array = value.numpy()
        return array[()] if scalar else array
    key, rest = path[0], path[1:]
    if isinstance(value, dict):
        value[key] = _replace(value[key], rest, scalar)
        return value
    if isinstance(value, list):
        value[key] = _replace(value[key], rest, scalar)
        return value
    if isinstance(value, tuple):
        items = list(value)
        items[key] = _replace(items[key], rest, scalar)
        return tuple(items)
    if isinstance(value, set):  # a set's members are hashable, so never arrays
        return value
    return value
