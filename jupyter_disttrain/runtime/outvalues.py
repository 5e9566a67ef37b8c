"""``--out`` / ``--out-all``: the rank writes the cell's named values once the script's body ended.

The rank wrapper calls ``write`` after the script ran to its end without an error, in every rank
when the job asks for values (``contract.OUT_ENV``): rank 0 writes the ``--out`` names, every rank
the ``--out-all`` names, and every rank takes part in gathering a sharded module (FSDP, DeepSpeed
ZeRO-3), which is a collective. Each value is one ``torch.save`` file,
``<job dir>/out/rank-N/<name>.pt``, written beside and renamed into place; then ``out/rank-N.json``
(``contract.OutManifest``) says what came out and what did not, and why. The manifest is the
commit: a reader (``jobs/values.py``) trusts nothing the manifest does not list.

What may come back: modules and optimizers as their state (``state_dict``, the wrappers taken
off, tensors on the CPU), which the kernel loads into the cell's own classes; tensors (on the
CPU), numpy arrays, numbers, strings, bytes, and lists, tuples, dicts and sets of them. Each
file holds only what ``torch.load(weights_only=True)`` reads back (arrays travel as tensors, their
places listed in the file), so the kernel never unpickles code. Anything else is refused by name
with the reason, and the job still succeeds.

Standard library here; torch and numpy are used only when the script loaded them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from . import contract
from .atomic import write_json

# A module whose ``module`` (or ``_orig_mod``) is the model: DDP, DataParallel, DeepSpeed's
# engine, FSDP1, torch.compile's wrapper. Their state dicts prefix every key; the model's does not.
_WRAPPERS = {
    "DistributedDataParallel": "module",
    "DataParallel": "module",
    "DeepSpeedEngine": "module",
    "PipelineEngine": "module",
    "FullyShardedDataParallel": "module",
    "OptimizedModule": "_orig_mod",
}
_PLAIN = (type(None), bool, int, float, complex, str, bytes, bytearray)
MAX_DEPTH = 64  # of nested containers


class Refused(Exception):
    """Why a value cannot come back, said in one line."""


def requested(env: dict[str, str] | os._Environ[str]) -> dict[str, Any] | None:
    """The job's request (``{"rank0": [...], "all": [...], "limit": bytes}``), or None."""
    text = env.get(contract.OUT_ENV)
    if not text:
        return None
    try:
        asked = json.loads(text)
    except ValueError:
        return None
    return asked if isinstance(asked, dict) else None


def write(namespace: dict[str, Any], rank: int, job_dir: str, asked: dict[str, Any]) -> None:
    """Write this rank's values of ``namespace`` (the script's globals) and its manifest. Never
    raises: a value that cannot come back is listed as refused; the job's end is not changed."""
    mine = [str(n) for n in asked.get("all", [])]
    if rank == 0:
        mine = [str(n) for n in asked.get("rank0", [])] + mine
    limit = int(asked.get("limit") or 0)
    folder = os.path.join(job_dir, contract.OUT_DIR, contract.rank_name(rank))
    manifest: contract.OutManifest = {"rank": rank, "values": [], "refused": [], "time": time.time()}
    used = 0
    # Every rank goes through every name in the same order: gathering a sharded module is a
    # collective, which a rank that keeps nothing of it still takes part in.
    for name in dict.fromkeys([*asked.get("rank0", []), *asked.get("all", [])]):
        keep = name in mine
        try:
            if name not in namespace:
                raise Refused("the cell did not assign it (or deleted it)")
            kind, state, typed = _state(namespace[name], keep)
            if not keep:
                continue
            size = _saved(state, folder, name, limit - used if limit else 0, limit)
            used += size
            manifest["values"].append(
                {
                    "name": name,
                    "kind": kind,
                    "type": typed[0],
                    "module": typed[1],
                    "bytes": size,
                    "file": f"{name}.pt",
                }
            )
        except Refused as why:
            if keep:
                manifest["refused"].append({"name": name, "why": str(why)})
        except Exception as exc:  # a value of the script's own: its error, named
            if keep:
                manifest["refused"].append({"name": name, "why": f"{type(exc).__name__}: {exc}"[:300]})
    if mine:
        try:
            write_json(
                os.path.join(job_dir, contract.OUT_DIR, contract.out_manifest(rank)), manifest, mode=0o600
            )
        except OSError as exc:
            print(f"disttrain: could not record the values of --out: {exc}", file=sys.stderr)


def _saved(state: dict[str, Any], folder: str, name: str, room: int, limit: int) -> int:
    """Save ``state`` as ``folder/name.pt`` (renamed into place); its size. Past ``room`` bytes
    (0: no cap) nothing is left behind and the value is refused with its size."""
    import torch

    estimate = _tensor_bytes(state["value"])
    if room and estimate > room:
        raise Refused(_over(estimate, room, limit))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, f"{name}.pt")
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
        size = os.path.getsize(tmp)
        if room and size > room:
            raise Refused(_over(size, room, limit))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return size


def _over(size: int, room: int, limit: int) -> str:
    left = "" if room == limit else f", {human(room)} of it left"
    return f"{human(size)} is over --out-limit ({human(limit)} per rank{left})"


def human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _state(value: Any, keep: bool) -> tuple[str, dict[str, Any], tuple[str, str]]:
    """(kind, what is saved, the type's names) of a value: ``module``, ``optimizer`` or ``value``.
    A rank that does not ``keep`` it only takes part in gathering a sharded module."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.nn.Module):
        arrays: list[list[Any]] = []
        model, state = _module_state(torch, value, keep, arrays)
        return "module", {"value": state, "arrays": arrays}, _type_names(_own_class(model))
    if not keep:
        return "value", {}, ("", "")
    if torch is not None and isinstance(value, torch.optim.Optimizer):
        state = _plain(value.state_dict(), [], [], 0)
        return "optimizer", {"value": state, "arrays": []}, _type_names(type(value))
    arrays = []
    plain = _plain(value, [], arrays, 0)
    return "value", {"value": plain, "arrays": arrays}, _type_names(type(value))


def _type_names(cls: type) -> tuple[str, str]:
    return cls.__qualname__, cls.__module__


def _module_state(torch: Any, model: Any, keep: bool, arrays: list[list[Any]]) -> tuple[Any, dict[str, Any]]:
    """The model inside its wrappers, and its whole state on the CPU (gathered when sharded)."""
    engine = None
    while (attr := _WRAPPERS.get(type(model).__name__)) and isinstance(
        getattr(model, attr, None), torch.nn.Module
    ):
        if hasattr(model, "zero_optimization_partition_weights"):  # DeepSpeed's engine
            engine = model
        model = getattr(model, attr)
    if engine is not None and _zero3(engine):
        state = engine._zero3_consolidated_16bit_state_dict()  # a collective; rank 0 gets it
        return model, {k: _cpu(torch, v) for k, v in (state or {}).items()}
    if _sharded(model):
        import torch.distributed as dist
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        if not dist.is_initialized():
            raise Refused(
                "a sharded (FSDP) module is gathered through its process group: end the cell before "
                "destroy_process_group()"
            )
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return model, dict(get_model_state_dict(model, options=options))
    if not keep:
        return model, {}
    return model, _plain(model.state_dict(), [], arrays, 0)


def _own_class(model: Any) -> type:
    """The model's own class: FSDP2's ``fully_shard`` swaps it for a subclass of its making
    (``FSDPNet``), which the kernel does not have."""
    fsdp = getattr(sys.modules.get("torch.distributed.fsdp"), "FSDPModule", None)
    cls = type(model)
    if fsdp is not None and issubclass(cls, fsdp):
        cls = next((c for c in cls.__mro__[1:] if not issubclass(c, fsdp)), cls)
    return cls


def _zero3(engine: Any) -> bool:
    try:
        return bool(engine.zero_optimization_partition_weights())
    except Exception:
        return False


def _sharded(model: Any) -> bool:
    """FSDP's module (FSDP2's ``fully_shard`` or FSDP1's wrapper, anywhere in the model)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    kinds = tuple(
        k for k in (getattr(fsdp, "FSDPModule", None), getattr(fsdp, "FullyShardedDataParallel", None)) if k
    )
    return bool(kinds) and any(isinstance(m, kinds) for m in model.modules())


def _cpu(torch: Any, value: Any) -> Any:
    """A tensor detached on the CPU, copied when it is a view of a larger storage (torch.save
    would write all of it); anything else as it is."""
    if not isinstance(value, torch.Tensor):
        return value
    value = value.detach().cpu()
    if value.untyped_storage().nbytes() > value.nbytes:
        value = value.clone()
    return value


def _plain(value: Any, path: list[Any], arrays: list[list[Any]], depth: int) -> Any:
    """``value`` as ``torch.load(weights_only=True)`` reads it back; numpy arrays as tensors
    (their paths noted in ``arrays``); refused, naming the place, when it holds anything else."""
    if depth > MAX_DEPTH:
        raise Refused(f"{_where(path)}nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if kind in _PLAIN:
        return value
    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    if torch is not None and kind in (
        torch.Tensor,
        torch.nn.Parameter,
        torch.Size,
        torch.dtype,
        torch.device,
    ):
        return _tensor(torch, value, path)
    if numpy is not None and isinstance(value, (numpy.ndarray, numpy.generic)) and kind.__module__ == "numpy":
        return _array(torch, numpy, value, path, arrays)
    if kind in (list, tuple, set):
        out = [_plain(v, [*path, i], arrays, depth + 1) for i, v in enumerate(value)]
        return out if kind is list else kind(out)
    if kind is dict or (kind.__qualname__ in ("OrderedDict", "Counter") and kind.__module__ == "collections"):
        return _mapping(value, path, arrays, depth)
    raise Refused(f"{_where(path)}{_what(value)} cannot come back ({CAN})")


CAN = (
    "nn.Modules, optimizers, tensors, numpy arrays, numbers, strings, and lists, tuples, dicts and sets "
    "of them can"
)


def _tensor(torch: Any, value: Any, path: list[Any]) -> Any:
    if not isinstance(value, torch.Tensor):  # a size, dtype or device
        return value
    if value.layout != torch.strided:
        raise Refused(f"{_where(path)}a sparse tensor cannot come back; pass .to_dense()")
    return _cpu(torch, value)


def _mapping(value: Any, path: list[Any], arrays: list[list[Any]], depth: int) -> Any:
    out = type(value)()
    for k, v in value.items():
        if type(k) not in _PLAIN:
            raise Refused(f"{_where(path)}a dict key of type {type(k).__name__} cannot come back")
        out[k] = _plain(v, [*path, k], arrays, depth + 1)
    return out


def _array(torch: Any, numpy: Any, value: Any, path: list[Any], arrays: list[list[Any]]) -> Any:
    """A numpy array (or scalar) as a tensor sharing its memory; its place noted for the reader."""
    if torch is None:
        raise Refused(
            f"{_where(path)}a numpy array comes back through torch, which the script did not import"
        )
    array = numpy.asarray(value)
    if not array.flags.c_contiguous:
        array = array.copy(order="C")
    try:
        tensor = torch.from_numpy(array)
    except TypeError:
        raise Refused(
            f"{_where(path)}a numpy array of dtype {array.dtype} cannot come back (numbers and booleans "
            "can); pass .tolist()"
        ) from None
    arrays.append([path, isinstance(value, numpy.generic)])
    return tensor


def _where(path: list[Any]) -> str:
    return "".join(f"[{p!r}]" for p in path) + ": " if path else ""


def _what(value: Any) -> str:
    """``a generator``, ``an open file``, ``a pandas.DataFrame``."""
    kind = type(value)
    if hasattr(value, "read") and hasattr(value, "close"):
        return "an open file"
    names = {
        "function": "a function",
        "generator": "a generator",
        "module": "a Python module",
        "type": "a class",
        "socket": "a socket",
        "lambda": "a function",
    }
    if kind.__name__ in names:
        return names[kind.__name__]
    name = (
        kind.__qualname__
        if kind.__module__ in ("builtins", "__main__")
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _tensor_bytes(value: Any, depth: int = 0) -> int:
    """The bytes of the tensors in ``value`` (what a save of it mostly is)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return int(value.nbytes)
    if depth < MAX_DEPTH and isinstance(value, dict):
        return sum(_tensor_bytes(v, depth + 1) for v in value.values())
    if depth < MAX_DEPTH and isinstance(value, (list, tuple, set)):
        return sum(_tensor_bytes(v, depth + 1) for v in value)
    return 0
