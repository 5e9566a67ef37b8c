"""``package_cell``: turn a ``%%distrun`` cell and the notebook's history into a standalone script.

Layout of the script: a docstring (origin, how to run it by hand), the imports, values and
definitions taken from earlier cells (with configuration statements and objects replayed from the
history in their execution order, see :mod:`.replay`), then the cell itself.

Start methods: DataLoader workers started with ``spawn``/``forkserver`` (the default on macOS, and
on Linux from Python 3.14) re-import the main module. So the cell's statements run under
``if __name__ == "__main__":`` and a worker does not start the training again, while imports,
definitions (a Dataset class, a collate function) and literal constants stay at module level, in
their original order, so that a worker can unpickle them by name. A definition that needs a value the
cell computes (``class B(make_base())``) has to stay under the guard; workers cannot see it.
"""

from __future__ import annotations

import ast
import io
import json
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model.errors import PackagingError
from ..tracking.hparams import HPARAM_NAMES, MASKED, from_namespace, masked_keys
from .checks import check_script, script_blocks
from .explain import explain
from .history import HistoryIndex
from .keyreads import is_read, key_reads
from .origins import CELL_LABEL, ORIGINS_FILE, Origins, script_origins
from .pitfalls import Pitfall, Target
from .resolve import MAIN_GUARD, Item, Resolver
from .scopes import NameUse, analyze, bound_names, has_lazy_annotations
from .sourcetext import first_line, shift, string_interior_lines
from .values import ARRAY_FILE, TENSOR_FILE, LibNames, ValueWriter

KERNEL_PATH = "kernel-path"  # the warning's code (packaging's own, not a check of the script's code)


@dataclass
class PackagedScript:
    """A cell packaged as a script.

    Attributes:
        source: the standalone script (readable, runnable with torchrun by hand).
        files: side files to store next to the script (plain names), e.g. large values.
        captured: names taken from earlier cells, in script order (for display).
        pitfalls: warnings on the script's code (already filtered by ``ignore``).
        explanation: for the dry run: how each name got into the script, and which statements of
            earlier cells did not, and why.
        hparams: the hyper-parameters among the names the script uses (``hparams.from_namespace``).
        notes: what the cell's output says once about the packaging (credential-like
            hyper-parameters masked in the job's records).
        origins: the cell and line each script line came from (``origins.py``), for tracebacks.
    """

    source: str
    files: dict[str, bytes] = field(default_factory=dict)
    captured: list[str] = field(default_factory=list)
    pitfalls: list[Pitfall] = field(default_factory=list)
    explanation: list[str] = field(default_factory=list)
    hparams: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    origins: Origins = field(default_factory=Origins)


def package_cell(
    cell: str,
    history: Sequence[str],
    user_ns: Mapping[str, Any],
    *,
    ignore: Collection[str] = (),
    header: str | None = None,
    max_value_bytes: int = 64 * 2**20,
    target: Target | None = None,
    cell_line: int = 1,
    cell_label: str = CELL_LABEL,
    kernel_dirs: Sequence[str] = (),
) -> PackagedScript:
    """Package ``cell`` with everything it uses from earlier cells into a standalone script.

    Args:
        cell: the body of the ``%%distrun`` cell (plain Python).
        history: earlier executed cells in execution order, as IPython keeps them in ``In[1:]``.
        user_ns: the kernel namespace (live objects), for values.
        ignore: pitfall codes not to report (``"*"``: none).
        header: extra text for the script's docstring (e.g. the notebook and job name).
        max_value_bytes: the largest value sent to the job.
        target: what the job runs on, for the checks that depend on it (GPUs, world size).
        cell_line: the line JupyterLab shows for the cell's first line (2 under a ``%%distrun`` line).
        cell_label: how tracebacks name the cell (``In [5]``, its execution count).
        kernel_dirs: the kernel's own directories (em's outside a job): a value holding a path
            under one is rebuilt in the job by its statements, else sent with a warning.

    Returns:
        The script, its side files, the captured names and the pitfall warnings.

    Raises:
        PackagingError: the cell is empty or invalid, uses something that cannot be sent, or surely
            reads a name defined nowhere.
    """
    cell = cell.replace("\r\n", "\n")
    tree = _parse_cell(cell, cell_line)
    use = analyze(cell, tree)
    writer = ValueWriter(_lib_names(use.bound | set(use.free), user_ns), max_value_bytes)
    resolver = Resolver(
        HistoryIndex.build(history),
        user_ns,
        use.bound,
        writer,
        cell_line=cell_line,
        kernel_dirs=tuple(kernel_dirs),
    )
    resolver.require_cell_names(use)
    items = _ordered(resolver.items)
    blocks = script_blocks(cell, cell_line, items, resolver.index)
    pitfalls = check_script(blocks, resolver.missing, ignore, target) + _kernel_paths(resolver, ignore)
    source = _Script(cell, tree, items, writer, header).render()
    captured = [name for item in items if not item.config for name in _names(item, resolver.items)]
    hparams = _hparams({*use.free, *resolver.items}, user_ns, source)
    notes = []
    if masked := masked_keys(hparams):
        notes.append(
            f"the job's records (job.json, runs, TensorBoard) keep {', '.join(masked)} as {MASKED}: "
            "names that look like credentials; the script itself still has their values"
        )
    explanation = explain(items, resolver)
    origins = script_origins(source, cell, cell_label, history, cell_line)
    files = {**_side_files(writer), ORIGINS_FILE: json.dumps(origins.to_json()).encode()}
    return PackagedScript(source, files, captured, pitfalls, explanation, hparams, notes, origins)


def _parse_cell(cell: str, cell_line: int) -> ast.Module:
    if not cell.strip():
        raise PackagingError("the cell is empty: write the training code under %%distrun")
    try:
        # compile() also reports what parsing alone accepts (`return` or `await` outside a function).
        compile(cell, "<%%distrun cell>", "exec", dont_inherit=True)
    except SyntaxError as error:
        line = error.lineno or 1
        text = cell.splitlines()[line - 1].strip() if line <= len(cell.splitlines()) else ""
        hint = ""
        if text.startswith(("%", "!")):
            hint = "; magics and ! commands do not run in the job: use plain Python (os, subprocess)"
        shown = f" in `{text[:60]}`" if text else ""
        raise PackagingError(f"line {line + cell_line - 1} of the cell: {error.msg}{shown}{hint}") from None
    except ValueError as error:  # e.g. a NUL byte
        raise PackagingError(
            f"the cell cannot be read as Python ({error}): remove the stray characters"
        ) from None
    tree = ast.parse(cell)
    if not tree.body:
        raise PackagingError("the cell is empty: write the training code under %%distrun")
    return tree


def _lib_names(taken: set[str], user_ns: Mapping[str, Any]) -> LibNames:
    """Names for torch/numpy/pathlib that do not clash with a name the user gives another meaning."""

    def pick(preferred: str, module: str) -> str:
        clash = preferred in taken or preferred in user_ns
        if clash and user_ns.get(preferred) is not sys.modules.get(module):
            return f"_{preferred}"
        return preferred

    return LibNames(
        pick("torch", "torch"),
        pick("np", "numpy"),
        pick("pathlib", "pathlib"),
        pick("types", "types"),
        pick("argparse", "argparse"),
    )


def _names(item: Item, items: Mapping[str, Item]) -> list[str]:
    """The captured names an item binds (one, or several for statements replayed together)."""
    if not item.replayed:
        return [item.name]
    return [item.name, *sorted(n for n, i in items.items() if i is item and n != item.name)]


def _ordered(items: Mapping[str, Item]) -> list[Item]:
    """Imports, then values, then code; within code, history order unless a definition-time
    dependency (a base class, a decorator) was redefined later and has to come first."""
    unique = {id(i): i for i in items.values()}  # statements replayed together bind several names
    plain = sorted(
        (i for i in unique.values() if i.section != "code"),
        key=lambda i: (i.section != "import", i.order, i.name),
    )
    code = {i.name: i for i in unique.values() if i.section == "code"}
    done: list[Item] = []
    placed: set[str] = set()

    def place(item: Item, visiting: set[str]) -> None:
        if item.name in placed or item.name in visiting:
            return  # a cycle cannot run in any order; history order is the best guess
        visiting.add(item.name)
        for dep in sorted(item.needs_now & items.keys(), key=lambda n: items[n].order):
            if items[dep].section == "code":
                place(items[dep], visiting)
        placed.add(item.name)
        done.append(item)

    for item in sorted(code.values(), key=lambda i: (i.order, i.name)):
        place(item, set())
    return plain + done


def _side_files(writer: ValueWriter) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    if writer.tensors:
        torch = sys.modules["torch"]
        buffer = io.BytesIO()
        torch.save(writer.tensors, buffer)
        files[TENSOR_FILE] = buffer.getvalue()
    if writer.arrays:
        numpy = sys.modules["numpy"]
        buffer = io.BytesIO()
        numpy.savez(buffer, **writer.arrays)
        files[ARRAY_FILE] = buffer.getvalue()
    return files


def _kernel_paths(resolver: Resolver, ignore: Collection[str]) -> list[Pitfall]:
    """A warning for each value sent as it is that holds a path of the kernel's own."""
    if KERNEL_PATH in ignore or "*" in ignore:
        return []
    found = []
    for name, where in resolver.kernel_paths.items():
        line = first_line(where.node) if where is not None and where.node is not None else 1
        found.append(
            Pitfall(
                KERNEL_PATH,
                line,
                f"`{name}` holds a path in this kernel's own .disttrain dir (em.checkpoint_dir() run here): "
                f"the job would write outside its own dir; build `{name}` inside the %%distrun cell",
                where.label if where is not None else "",
            )
        )
    return found


def _hparams(names: set[str], user_ns: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The hyper-parameters among ``names``: of each dict, the keys the script reads."""
    tree = ast.parse(source)
    reads = {name: key_reads(tree, name) for name in names if name in HPARAM_NAMES}
    return from_namespace(names, user_ns, lambda name, key: is_read(key, reads[name]))


class _Script:
    """Writes the script text."""

    def __init__(
        self, cell: str, tree: ast.Module, items: list[Item], writer: ValueWriter, header: str | None
    ) -> None:
        self.cell = cell
        self.tree = tree
        self.items = items
        self.writer = writer
        self.header = header

    def render(self) -> str:
        future = [s for s in self.tree.body if isinstance(s, ast.ImportFrom) and s.module == "__future__"]
        parts = [self._docstring()]
        if future:
            parts.append("\n".join(ast.get_source_segment(self.cell, s) or "" for s in future))
        for title, section in (
            ("Imports from earlier cells", "import"),
            ("Values from earlier cells", "value"),
            ("Definitions from earlier cells", "code"),
        ):
            block = self._section(section)
            if block:
                parts.append(f"# --- {title} ---\n" + "\n".join(block))
        body = [s for s in self.tree.body if s not in future]
        after = max((s.end_lineno or s.lineno for s in future), default=0)
        cell_lines = _cell_text(self.cell, self.tree, body, after)
        parts.append("# --- The %%distrun cell ---\n" + "\n".join(cell_lines))
        return "\n\n".join(p for p in parts if p) + "\n"

    def _docstring(self) -> str:
        lines = [
            "Training script packaged by jupyter_disttrain from a %%distrun notebook cell.",
            "",
            "It holds the cell and what the cell uses from earlier cells (imports, values, functions,",
            "classes, and objects rebuilt by the statements that made them, each marked with its",
            "cell and line). Run it by hand as the job ran it with run.sh (local jobs write it beside):",
            "",
            "    bash run.sh [SCRIPT ARGS...]",
            "",
            "run.sh runs torchrun with the job's flags (nodes, processes per node, rendezvous) from the",
            "notebook's directory, with that directory first on PYTHONPATH (so modules next to the",
            "notebook import) and the job's environment variables. A plain `torchrun train.py` has none",
            "of these: modules from the notebook's directory then fail with ModuleNotFoundError.",
            "Keep the side files named captured_* next to this script, if there are any.",
            "",
            'The cell\'s statements run under `if __name__ == "__main__":` so that DataLoader workers',
            "started with spawn/forkserver, which re-import this file, do not run them again; its",
            "imports and definitions stay at module level so that those workers can find them.",
        ]
        if self.header:
            lines += ["", *self.header.strip().splitlines()]
        text = "\n".join(lines).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
        return f'"""{text}\n"""'

    def _section(self, section: str) -> list[str]:
        chosen = [i for i in self.items if i.section == section]
        out: list[str] = []
        if section == "value":
            out += self._value_prelude()
        seen: set[str] = set()
        guarded = False
        for item in chosen:
            if section == "import":
                new = [line for line in item.lines if line not in seen]
                seen.update(new)
                out += [f"{line}  # {item.label}" if item.label else line for line in new]
            elif section == "value":
                out += [f"{item.lines[0]}  # {item.label}" if item.label else item.lines[0], *item.lines[1:]]
            elif item.replayed and item.lines[:1] == [MAIN_GUARD] and guarded:
                out += ["", *item.lines[1:]]  # one guard for consecutive rebuilt objects
            else:
                header = (
                    []
                    if item.replayed
                    else [f"# {item.label}" if item.label else "# (from the kernel namespace)"]
                )
                out += ["", *header, *item.lines]
            guarded = item.lines[:1] == [MAIN_GUARD]
        return out

    def _value_prelude(self) -> list[str]:
        libs, needs = self.writer.libs, set(self.writer.needs)
        if self.writer.tensors:
            needs.add("torch")
        if self.writer.arrays:
            needs.add("numpy")
        if self.writer.tensors or self.writer.arrays:
            needs.add("pathlib")
        lines = []
        for module in ("torch", "numpy", "pathlib", "types", "argparse"):
            alias = getattr(libs, module)
            if module in needs:
                lines.append(f"import {module}" if module == alias else f"import {module} as {alias}")
        here = f"{libs.pathlib}.Path(__file__)"
        if self.writer.tensors:
            lines.append(
                f"_CAPTURED_TENSORS = {libs.torch}.load({here}.with_name({TENSOR_FILE!r}), weights_only=True)"
            )
        if self.writer.arrays:
            lines.append(f"_CAPTURED_ARRAYS = dict({libs.numpy}.load({here}.with_name({ARRAY_FILE!r})))")
        return lines


def _cell_text(cell: str, tree: ast.Module, body: list[ast.stmt], after: int) -> list[str]:
    """The cell's lines, with statements that must not re-run in spawned workers under the guard."""
    lines = cell.splitlines()
    keep = string_interior_lines(tree)
    chunks = _chunks(body, after, len(lines))
    hoisted = _hoistable(cell, tree, chunks)
    out: list[str] = []
    guarded = False
    for (start, end, _), up in zip(chunks, hoisted, strict=True):
        text = lines[start - 1 : end]
        if up:
            out += text
            guarded = False
            continue
        if not guarded:
            out.append(MAIN_GUARD)
            guarded = True
        out += shift(text, start, keep, indent="    ")
    return out


def _chunks(body: list[ast.stmt], after: int, line_count: int) -> list[tuple[int, int, list[ast.stmt]]]:
    """Top-level statements grouped by the lines they occupy: (first line, last line, statements).

    Comments and blank lines go with the statement after them; trailing ones with the last statement.
    """
    chunks: list[tuple[int, int, list[ast.stmt]]] = []
    for stmt in body:
        start, end = first_line(stmt), stmt.end_lineno or stmt.lineno
        if chunks and start <= chunks[-1][1]:  # `a = 1; b = 2` share a line
            first, _, stmts = chunks[-1]
            chunks[-1] = (first, max(end, chunks[-1][1]), [*stmts, stmt])
        else:
            previous_end = chunks[-1][1] if chunks else after
            chunks.append((previous_end + 1, end, [stmt]))
    if chunks:
        first, _, stmts = chunks[-1]
        chunks[-1] = (first, line_count, stmts)
    return chunks


def _hoistable(cell: str, tree: ast.Module, chunks: list[tuple[int, int, list[ast.stmt]]]) -> list[bool]:
    """Which chunks can stay at module level: imports; defs/classes whose definition-time names are
    not computed by the guarded part of the cell; literal constants that those definitions read."""
    lines = cell.splitlines()
    prefix = "from __future__ import annotations\n" if has_lazy_annotations(tree) else ""
    uses: list[NameUse | None] = []
    for _, _, stmts in chunks:
        text = "\n".join(lines[first_line(stmts[0]) - 1 : stmts[-1].end_lineno])
        uses.append(analyze(prefix + text) if all(_candidate(s) for s in stmts) else None)
    binds = [use.bound if use else _bound(stmts) for use, (_, _, stmts) in zip(uses, chunks, strict=True)]
    constant = [all(isinstance(s, ast.Assign) for s in stmts) for _, _, stmts in chunks]
    return _settle(uses, binds, constant)


def _settle(uses: list[NameUse | None], binds: list[set[str]], constant: list[bool]) -> list[bool]:
    """Which chunks stay hoisted: a chunk of candidates leaves when its definition-time names are
    computed by the guarded part, a constant when no hoisted definition reads it."""
    hoisted = [use is not None for use in uses]
    changed = True
    while changed:  # un-hoisting one chunk can un-hoist others, so repeat until stable
        changed = False
        guarded_names = set().union(*(b for b, up in zip(binds, hoisted, strict=True) if not up))
        read_by_defs = set().union(
            *(u.free for u, up, c in zip(uses, hoisted, constant, strict=True) if u and up and not c)
        )
        for i, use in enumerate(uses):
            if not hoisted[i] or use is None:
                continue
            if use.immediate & guarded_names or (constant[i] and not binds[i] & read_by_defs):
                hoisted[i] = False
                changed = True
    return hoisted


def _candidate(stmt: ast.stmt) -> bool:
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
        try:
            ast.literal_eval(stmt.value)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            return False
        return True
    return False


def _bound(stmts: list[ast.stmt]) -> set[str]:
    return set().union(*(bound_names(s) for s in stmts))
