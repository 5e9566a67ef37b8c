"""Turning live kernel values into Python source for the script (or side files), or refusing them.

Plain data (None, bool, numbers, str, bytes and containers of them) becomes a readable literal.
numpy arrays and CPU torch tensors become a literal when small and an entry of a side file when
large. torch and numpy are looked up in ``sys.modules`` and never imported here: a value can only be
a tensor if torch is already loaded in the kernel.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import io
import math
import pathlib
import socket
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TENSOR_FILE = "captured_values.pt"
ARRAY_FILE = "captured_arrays.npz"
# Above this many elements a tensor/array goes to a side file instead of the script text.
LITERAL_MAX_ELEMENTS = 64

_LOCK_TYPES = (
    type(threading.Lock()),
    type(threading.RLock()),
    threading.Condition,
    threading.Semaphore,
    threading.Event,
    threading.Barrier,
)


class Unsendable(Exception):
    """A value that cannot be reproduced in the job.

    Attributes:
        what: what the value is, e.g. "an open file".
        advice: what the user should write instead.
        path: where inside the captured value it sits (e.g. "['log']"), empty for the value itself.
        data: the value is data that is too large or on a device (not an object to rebuild by source).
    """

    def __init__(self, what: str, advice: str, path: str = "", *, data: bool = False) -> None:
        super().__init__(what)
        self.what = what
        self.advice = advice
        self.path = path
        self.data = data


def human_size(size: int) -> str:
    """``size`` bytes as a short human-readable string ("3.0 MiB")."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


@dataclass
class LibNames:
    """The names the script uses for the libraries its values need (chosen to avoid user names)."""

    torch: str = "torch"
    numpy: str = "np"
    pathlib: str = "pathlib"
    types: str = "types"
    argparse: str = "argparse"


def _no_class_names(cls: type) -> str | None:
    return None


@dataclass
class ValueWriter:
    """Renders values to source, collecting side-file entries and the libraries they need.

    Attributes:
        libs: names to use for torch, numpy and pathlib in the script.
        max_bytes: the largest captured value accepted, in bytes.
        tensors: side-file entries saved with ``torch.save`` (key -> tensor).
        arrays: side-file entries saved with ``numpy.savez`` (key -> array).
        needs: libraries the rendered source uses ("torch", "numpy", "pathlib", "types", "argparse").
        class_name: the name under which the script will have a class (for dataclass instances and enum
            members), or None when the class cannot be put in the script.
        last_classes: the class names the last rendered value uses.
    """

    libs: LibNames
    max_bytes: int
    tensors: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, Any] = field(default_factory=dict)
    needs: set[str] = field(default_factory=set)
    class_name: Callable[[type], str | None] = _no_class_names
    last_classes: set[str] = field(default_factory=set)

    def render(self, name: str, value: Any) -> str:
        """Python source that rebuilds ``value`` (the value of variable ``name``).

        Raises:
            Unsendable: the value (or something inside it) cannot be sent, or it is too large.
        """
        self.last_classes = set()
        state = _Render(self, name)
        source = state.expr(value, "")
        if state.size > self.max_bytes:
            raise Unsendable(
                f"{human_size(state.size)} of data",
                f"that is over the {human_size(self.max_bytes)} limit; save it to a file and load it"
                " inside the cell",
                data=True,
            )
        return source


class _Render:
    """One value's rendering: tracks its size, and containers being rendered (to refuse cycles)."""

    def __init__(self, writer: ValueWriter, name: str) -> None:
        self.writer = writer
        self.name = name
        self.size = 0
        self.open: set[int] = set()

    def expr(self, value: Any, path: str) -> str:
        self._check_size()
        scalar = self._scalar(value)
        if scalar is not None:
            return scalar
        kind = type(value)
        if isinstance(value, pathlib.PurePath):
            self.writer.needs.add("pathlib")
            return f"{self.writer.libs.pathlib}.{kind.__name__}({str(value)!r})"
        container = _container_kind(value)
        if container is not None:
            return self._container(value, container, path)
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, (torch.Tensor, torch.dtype, torch.device, torch.Size)):
            return self._torch(value, torch, path)
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(value, (numpy.ndarray, numpy.generic)):
            return self._numpy(value, numpy, path)
        if isinstance(value, enum.Enum):
            return f"{self._class(kind, path)}.{value.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = [f.name for f in dataclasses.fields(value) if f.init]
            return f"{self._class(kind, path)}({self._keywords(value, fields, path)})"
        if kind is types.SimpleNamespace or (kind.__module__, kind.__name__) == ("argparse", "Namespace"):
            module = kind.__module__
            self.writer.needs.add(module)
            alias = getattr(self.writer.libs, module)
            return f"{alias}.{kind.__name__}({self._keywords(value, list(vars(value)), path)})"
        raise Unsendable(*describe_unsendable(value), path=path)

    def _scalar(self, value: Any) -> str | None:
        """A number, a string, bytes, a range, a slice or ``...`` as source; None for anything else."""
        kind = type(value)
        if value is None or kind in (bool, int):
            self.size += 8
            return repr(value)
        if kind is float:
            self.size += 8
            return _float(value)
        if kind is complex:
            self.size += 16
            return f"complex({_float(value.real)}, {_float(value.imag)})"
        if kind in (str, bytes, bytearray):
            self.size += len(value)
            return repr(value)
        if kind in (range, slice) or value is Ellipsis:
            return repr(value)
        return None

    def _class(self, kind: type, path: str) -> str:
        name = self.writer.class_name(kind)
        if name is None:
            raise Unsendable(
                f"{_article(kind.__qualname__)} {kind.__qualname__} object whose class is not in any cell",
                "define the class with class in a cell, or create the object inside the cell",
                path=path,
            )
        self.writer.last_classes.add(name)
        return name

    def _keywords(self, value: Any, names: list[str], path: str) -> str:
        if not all(n.isidentifier() for n in names):
            raise Unsendable(
                "an object with attribute names that are not identifiers", "build it inside the cell"
            )
        return ", ".join(f"{n}={self.expr(getattr(value, n), f'{path}.{n}')}" for n in names)

    def _check_size(self) -> None:
        # Stop early inside huge containers instead of rendering megabytes of text first.
        if self.size > self.writer.max_bytes:
            raise Unsendable(
                f"over {human_size(self.writer.max_bytes)} of data",
                "save it to a file and load it inside the cell",
                data=True,
            )

    def _container(self, value: Any, kind: type, path: str) -> str:
        if id(value) in self.open:
            raise Unsendable("a container that holds itself", "build it inside the cell", path=path)
        self.open.add(id(value))
        try:
            if kind is dict:
                items = [
                    f"{self.expr(k, f'{path}[{k!r}]')}: {self.expr(v, f'{path}[{k!r}]')}"
                    for k, v in value.items()
                ]
                return "{" + ", ".join(items) + "}"
            parts = [self.expr(v, f"{path}[{i}]") for i, v in enumerate(value)]
            if kind in (set, frozenset):
                parts.sort()  # a stable, readable order; sets have none of their own
        finally:
            self.open.discard(id(value))
        self.size += 8 * len(parts)
        if kind is list:
            return "[" + ", ".join(parts) + "]"
        if kind is tuple:
            return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
        body = "{" + ", ".join(parts) + "}" if parts else ""
        if kind is set:
            return body or "set()"
        return f"frozenset({body})"

    def _torch(self, value: Any, torch: types.ModuleType, path: str) -> str:
        lib = self.writer.libs.torch
        self.writer.needs.add("torch")
        if isinstance(value, torch.dtype):
            return f"{lib}.{str(value).rsplit('.', 1)[-1]}"
        if isinstance(value, torch.device):
            return f"{lib}.device({str(value)!r})"
        if isinstance(value, torch.Size):
            return f"{lib}.Size({list(value)!r})"
        if value.device.type != "cpu":
            raise Unsendable(
                f"a tensor on {value.device}",
                "move it to the CPU in a cell first (x = x.cpu()) or create it inside the cell",
                path=path,
                data=True,
            )
        self.size += value.nelement() * value.element_size()
        dtype = str(value.dtype).rsplit(".", 1)[-1]
        small = value.nelement() <= LITERAL_MAX_ELEMENTS and not value.is_quantized
        if type(value) is torch.Tensor and value.layout == torch.strided and small:
            data = self.expr(value.tolist(), path)
            grad = ", requires_grad=True" if value.requires_grad else ""
            return f"{lib}.tensor({data}, dtype={lib}.{dtype}{grad})"
        key = self.name + path
        # A leaf keeps its type (nn.Parameter) and requires_grad; a non-leaf is saved as plain data.
        self.writer.tensors[key] = value if value.is_leaf else value.detach()
        return f"_CAPTURED_TENSORS[{key!r}]"

    def _numpy(self, value: Any, numpy: types.ModuleType, path: str) -> str:
        lib = self.writer.libs.numpy
        self.writer.needs.add("numpy")
        kind = value.dtype.kind
        if isinstance(value, numpy.generic):
            if kind not in "biufc":
                raise Unsendable(f"a numpy {value.dtype} scalar", "create it inside the cell", path=path)
            self.size += value.nbytes
            return f"{lib}.{type(value).__name__}({self.expr(value.item(), path)})"
        if kind == "O" or value.dtype.hasobject:
            raise Unsendable(
                "a numpy array of Python objects",
                "convert it to a numeric dtype or build it inside the cell",
                path=path,
            )
        self.size += value.nbytes
        if value.size <= LITERAL_MAX_ELEMENTS and kind in "biufcUS" and value.dtype.names is None:
            return f"{lib}.array({self.expr(value.tolist(), path)}, dtype={str(value.dtype)!r})"
        key = self.name + path
        self.writer.arrays[key] = value
        return f"_CAPTURED_ARRAYS[{key!r}]"


def _float(value: float) -> str:
    return repr(value) if math.isfinite(value) else f'float("{value}")'


def _container_kind(value: Any) -> type | None:
    """The literal form of a container value, or None when it is not a plain container."""
    kind = type(value)
    if kind in (list, tuple, dict, set, frozenset):
        return kind
    if kind is collections.OrderedDict:
        return dict
    # IPython's `!cmd` output (SList) is a list with helper methods only.
    if isinstance(value, list) and kind.__module__.startswith("IPython."):
        return list
    return None


def is_resource(value: Any) -> bool:
    """A live resource of this process (open file, socket, thread, lock, generator): never rebuilt
    by replaying the code that made it, since a copy in every process is not the same thing."""
    kinds = (io.IOBase, socket.socket, threading.Thread, *_LOCK_TYPES, types.ModuleType)
    generators = (types.GeneratorType, types.AsyncGeneratorType, types.CoroutineType)
    return isinstance(value, (*kinds, *generators)) or type(value).__module__ == "multiprocessing.synchronize"


def describe_unsendable(value: Any) -> tuple[str, str]:
    """(what the value is, what to do instead) for a value that cannot be sent to the job."""
    inside = "create it inside the cell instead"
    if isinstance(value, io.IOBase):
        return "an open file", "open it inside the cell instead"
    if isinstance(value, socket.socket):
        return "a socket", inside
    if isinstance(value, threading.Thread):
        return "a thread", "start it inside the cell instead"
    if isinstance(value, _LOCK_TYPES) or type(value).__module__ == "multiprocessing.synchronize":
        return "a lock", inside
    if isinstance(value, (types.GeneratorType, types.AsyncGeneratorType, types.CoroutineType)):
        return "a generator", "create it inside the cell (it cannot be copied mid-iteration)"
    if isinstance(value, types.ModuleType):
        return "a module with no importable name", "import it inside the cell"
    if isinstance(value, collections.defaultdict):
        return "a defaultdict", "convert it with dict(...) in a cell, or build it inside the cell"
    kind = type(value)
    return (
        f"{_article(kind.__qualname__)} {kind.__qualname__} object",
        "create it inside the cell (plain data, arrays, CPU tensors, dataclasses and namespaces are sent"
        " by value)",
    )


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"
