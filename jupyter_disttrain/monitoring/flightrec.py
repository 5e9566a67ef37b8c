"""Which collective the ranks disagree on, from their Flight Recorder dumps.

Each rank's dump (``runtime/debugsock.py``) lists its last collectives with a sequence number per
process group, the operation, its tensors' sizes and types, and how far the group got
(``pg_status``). torch's own analyzer (``torch.distributed.flight_recorder``, the ``fr_trace``
tool) matches them across ranks and names the first collective that not every rank joined, or
that ranks called differently. It is used as it is, with one gap filled: torch 2.13 records a gloo
group in ``pg_config`` under an empty name while its entries name the group (``"0"``), and the
analyzer, looking the entries' name up, fails with ``KeyError``; ``filled`` names it from the
entries. Where the analyzer cannot run (no torch here, a dump it rejects) the same two questions
are answered here (``own_findings``), and what it does not say, which rank waits in what, always
is (``positions``).
"""

from __future__ import annotations

import ast
import contextlib
import copy
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

DEFAULT_DESC = "default_pg"
_torch_lock = threading.Lock()  # the analyzer's logger is one for the process


@dataclass
class Op:
    """One rank's call at a sequence number: the operation and its tensors."""

    name: str  # all_reduce (the backend's prefix dropped)
    sizes: list[Any]
    dtypes: list[Any]
    completed: bool

    def shape(self) -> str:
        """``[4]`` or ``[2, 2]`` (several tensors: ``[4], [8]``), with the type when not float."""
        shapes = ", ".join(str(list(s)) for s in self.sizes) or "no tensor"
        kinds = {str(d) for d in self.dtypes} - {"Float"}
        return f"{shapes} ({', '.join(sorted(kinds)).lower()})" if kinds else shapes


@dataclass
class Finding:
    """One collective the ranks disagree on. ``kind``: ``missing`` (``missing`` ranks of the group
    have not called it; the others wait in it) or ``mismatch`` (ranks called it differently:
    ``ops`` by rank; ``what``: ``type``, ``size`` or ``dtype``)."""

    kind: str
    group: str  # "default group", or "group <desc>"
    seq: int
    op: str
    missing: list[int] = field(default_factory=list)
    ops: dict[int, Op] = field(default_factory=dict)
    what: str = ""
    source: str = "torch"  # which analysis found it: "torch" (torch's analyzer) or "disttrain"


@dataclass
class Analysis:
    """The findings (earliest first), where each rank is among its collectives, and notes (why
    torch's analyzer was not used, ranks with no record)."""

    findings: list[Finding]
    positions: dict[int, Position]
    notes: list[str]
    analyzer: str  # "torch", "disttrain" (ours, torch's could not run) or "none" (no record at all)


@dataclass
class Position:
    """Where one rank is among its collectives: the last one it called and whether that one has
    completed (``waiting`` when not)."""

    group: str
    seq: int
    op: Op

    @property
    def waiting(self) -> bool:
        return not self.op.completed


def group_label(desc: str, name: str) -> str:
    return "default group" if desc == DEFAULT_DESC else f"group {desc or name}"


def _op_name(entry: dict[str, Any]) -> str:
    return str(entry.get("profiling_name", "?")).rpartition(":")[2] or "?"


def _group_of(entry: dict[str, Any]) -> tuple[str, str]:
    pg = entry.get("process_group")
    if isinstance(pg, (list, tuple)) and len(pg) == 2:
        return str(pg[0]), str(pg[1])
    return str(entry.get("pg_id", "?")), ""


def _entries(dump: dict[str, Any]) -> list[dict[str, Any]]:
    entries = dump.get("entries")
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _completed(dump: dict[str, Any], entry: dict[str, Any]) -> bool:
    """Whether the group got past ``entry``: its ``pg_status`` (gloo leaves every entry
    ``scheduled``), else the entry's own state."""
    status = (dump.get("pg_status") or {}).get(str(entry.get("pg_id")))
    seq = int(entry.get("collective_seq_id") or 0)
    if isinstance(status, dict) and "last_completed_collective" in status:
        with contextlib.suppress(TypeError, ValueError):
            return int(status["last_completed_collective"]) >= seq
    return entry.get("state") == "completed" or bool(entry.get("retired"))


def op_of(dump: dict[str, Any], entry: dict[str, Any]) -> Op:
    return Op(
        _op_name(entry),
        list(entry.get("input_sizes") or []),
        list(entry.get("input_dtypes") or []),
        _completed(dump, entry),
    )


def filled(dump: dict[str, Any], world: list[int]) -> dict[str, Any]:
    """``dump`` with every group its entries name in ``pg_config``. torch 2.13 records a gloo
    group as ``{"": {"name": "", "desc": "", "ranks": "[0, 1]"}}``: one such group gets the
    recorded ranks; with several, the default group gets every rank of ``world`` and another the
    ranks whose entries name it (an approximation: who called it)."""
    config = dict(dump.get("pg_config") or {})
    blank = config.pop("", None)
    if blank is None:
        return dump
    named = {_group_of(e) for e in _entries(dump)}
    for name, desc in named:
        ranks = blank.get("ranks", "[]") if len(named) == 1 else str(world)
        config.setdefault(name, {**blank, "name": name, "desc": desc, "ranks": ranks})
    return {**dump, "pg_config": config}


def _members(dumps: dict[int, dict[str, Any]], name: str) -> list[int]:
    for dump in dumps.values():
        ranks = (dump.get("pg_config") or {}).get(name, {}).get("ranks")
        with contextlib.suppress(ValueError, SyntaxError, TypeError):
            return sorted(int(r) for r in ast.literal_eval(str(ranks)))
    return sorted(r for r, d in dumps.items() if any(_group_of(e)[0] == name for e in _entries(d)))


# -- torch's analyzer ------------------------------------------------------------------------------
def torch_findings(dumps: dict[int, dict[str, Any]], world: list[int]) -> list[Finding]:
    """The collectives torch's analyzer finds wrong (missing ranks, mismatches); raises what it
    raises (ImportError without torch, AssertionError or KeyError on a dump it rejects)."""
    with _torch_lock:
        quiet = logging.getLogger("Flight Recorder")  # it prints its analysis at INFO to stderr
        quiet.disabled = True
        from torch.distributed.flight_recorder.components.builder import build_db
        from torch.distributed.flight_recorder.components.config_manager import JobConfig

        full = {r: filled(d, world) for r, d in dumps.items()}
        details = {
            f"rank{r}": {
                "host_name": f"rank{r}",
                "rank": r,
                "entries": copy.deepcopy(_entries(d)),  # the analyzer pops what it matched
                "version": str(d.get("version", "")),
                "pg_config": d.get("pg_config") or {},
            }
            for r, d in full.items()
        }
        versions = {str(d.get("version", "")) for d in full.values()}
        incomplete = ["--allow-incomplete-ranks"] if set(world) - set(dumps) else []
        db = build_db(details, JobConfig().parse_args(incomplete), min(versions))
    found = []
    for c in db.collectives:
        name, _, desc = str(c.pg_desc).partition(":")
        group = group_label(desc, name)
        op = str(c.collective_name).rpartition(":")[2]
        if c.missing_ranks:
            found.append(Finding("missing", group, c.collective_seq_id, op, sorted(c.missing_ranks)))
        elif c.mismatch_collectives:
            ops = _ops_at(full, name, c.collective_seq_id)
            kinds = [str(getattr(m.type_of_mismatch, "state", "")) for m in c.mismatch_collectives.values()]
            found.append(Finding("mismatch", group, c.collective_seq_id, op, [], ops, _what(kinds)))
    return found


def _what(states: list[str]) -> str:
    text = " ".join(states)
    return "type" if "TYPE" in text else "dtype" if "DTYPE" in text else "size"


def _ops_at(dumps: dict[int, dict[str, Any]], name: str, seq: int) -> dict[int, Op]:
    out = {}
    for rank, dump in sorted(dumps.items()):
        for entry in _entries(dump):
            if (
                _group_of(entry)[0] == name
                and entry.get("collective_seq_id") == seq
                and not entry.get("is_p2p")
            ):
                out[rank] = op_of(dump, entry)
    return out


# -- the same questions, answered here -------------------------------------------------------------
def own_findings(dumps: dict[int, dict[str, Any]], world: list[int]) -> list[Finding]:
    """Per group: the first sequence number the ranks called differently, else the last one
    that some member has not called while another waits in it."""
    full = {r: filled(d, world) for r, d in dumps.items()}
    groups = {_group_of(e) for d in full.values() for e in _entries(d) if not e.get("is_p2p")}
    found = []
    for name, desc in sorted(groups):
        label = group_label(desc, name)
        seqs = sorted({seq for d in full.values() for e in _entries(d) if (seq := _seq_in(e, name))})
        finding = _first_mismatch(full, name, label, seqs) or (
            _missing_at(full, name, label, seqs[-1]) if seqs else None
        )
        if finding is not None:
            found.append(finding)
    return found


def _seq_in(entry: dict[str, Any], group: str) -> int:
    """The entry's sequence number in ``group`` (0 when it is of another, or point-to-point)."""
    if _group_of(entry)[0] != group or entry.get("is_p2p"):
        return 0
    return int(entry.get("collective_seq_id") or 0)


def _first_mismatch(
    full: dict[int, dict[str, Any]], name: str, label: str, seqs: list[int]
) -> Finding | None:
    for seq in seqs:
        ops = _ops_at(full, name, seq)
        calls = {(o.name, str(o.sizes), str(o.dtypes)) for o in ops.values()}
        if len(calls) > 1:
            if len({o.name for o in ops.values()}) > 1:
                what = "type"
            else:
                what = "size" if len({str(o.sizes) for o in ops.values()}) > 1 else "dtype"
            return Finding("mismatch", label, seq, ops[min(ops)].name, [], ops, what, "disttrain")
    return None


def _missing_at(full: dict[int, dict[str, Any]], name: str, label: str, last: int) -> Finding | None:
    ops = _ops_at(full, name, last)
    missing = [r for r in _members(full, name) if r in full and r not in ops]
    if not missing or all(o.completed for o in ops.values()):
        return None
    return Finding("missing", label, last, next(iter(ops.values())).name, missing, ops, "", "disttrain")


def positions(dumps: dict[int, dict[str, Any]], world: list[int]) -> dict[int, Position]:
    """Each rank's last collective (of any group) and whether it has completed."""
    out = {}
    for rank, dump in dumps.items():
        entries = [e for e in _entries(filled(dump, world)) if not e.get("is_p2p")]
        if entries:
            last = entries[-1]
            name, desc = _group_of(last)
            out[rank] = Position(
                group_label(desc, name), int(last.get("collective_seq_id") or 0), op_of(dump, last)
            )
    return out


def analyse(dumps: dict[int, dict[str, Any]], world: list[int]) -> Analysis:
    """The findings of torch's analyzer (ours where it cannot run), and each rank's position."""
    notes: list[str] = []
    if not any(_entries(d) for d in dumps.values()):
        return Analysis([], {}, notes, "none")
    try:
        findings, analyzer = torch_findings(dumps, world), "torch"
    except Exception as exc:  # no torch here, or a dump it rejects: ours answers the same questions
        notes.append(f"torch's Flight Recorder analyzer could not run ({type(exc).__name__}: {exc})"[:300])
        findings, analyzer = own_findings(dumps, world), "disttrain"
    if analyzer == "torch":  # what it found is named by the ranks' own calls (sizes, types)
        full = {r: filled(d, world) for r, d in dumps.items()}
        for f in findings:
            name = next(
                (
                    n
                    for n, desc in (_group_of(e) for d in full.values() for e in _entries(d))
                    if group_label(desc, n) == f.group
                ),
                "",
            )
            f.ops = f.ops or _ops_at(full, name, f.seq)
    return Analysis(findings, positions(dumps, world), notes, analyzer)
