"""Generate ``labextension/rest/types.ts`` from the Python types of the REST API.

    python scripts/gen_types.py           # rewrite labextension/rest/types.ts
    python scripts/gen_types.py --check   # exit 1 when the checked-in file is stale

The shapes are the dataclasses of ``jupyter_disttrain/payloads/``, ``model/specs.py`` and
``model/progress.py``; each becomes an ``I<Name>`` interface with its docstring's first
sentence, ``JobPhase`` becomes the ``Phase`` union, and the constants the lab extension shares
with the server follow. A field annotated ``JsonOf(Shape)`` (JSON made earlier) gets the shape's
interface; a backend's launch request (``specs.LaunchRequest``, backend-native) is an object of
unknowns.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_disttrain.model import progress, specs  # noqa: E402 (the checkout's, not an installed copy)
from jupyter_disttrain.payloads import checkpoints, jobs, monitoring, pools, runs  # noqa: E402

OUT = ROOT / "labextension" / "rest" / "types.ts"
# In dependency order, as a reader meets them.
SHAPES: list[type] = [
    jobs.ServerInfo,
    progress.Progress,
    monitoring.GuardState,
    jobs.JobSummary,
    jobs.JobList,
    specs.Volume,
    specs.ResumedFrom,
    specs.JobSpec,
    specs.ReplicaStatus,
    specs.Condition,
    specs.Event,
    specs.JobStatus,
    jobs.RoleSummary,
    jobs.Failure,
    checkpoints.CheckpointUsage,
    jobs.KeptValue,
    monitoring.IncidentSummary,
    monitoring.ResourceHours,
    jobs.JobDetail,
    jobs.DebugAnswer,
    jobs.JobScript,
    jobs.SubmitAnswer,
    specs.DryRun,
    jobs.DryRunAnswer,
    jobs.CancelAnswer,
    specs.LogLine,
    jobs.LogPage,
    specs.LogRun,
    jobs.LogRunsPage,
    monitoring.GpuSample,
    monitoring.ResourceSample,
    monitoring.ReplicaResources,
    monitoring.Resources,
    monitoring.StackDump,
    monitoring.RankDiagnosis,
    monitoring.Incident,
    runs.RunSummary,
    runs.RunList,
    runs.RunPoint,
    runs.ArtifactFile,
    runs.RunProgress,
    runs.RunDetail,
    checkpoints.Checkpoint,
    checkpoints.CheckpointList,
    jobs.ResumeAnswer,
    checkpoints.CheckpointCode,
    runs.TensorBoardInfo,
    runs.TensorBoardList,
    pools.PoolNode,
    pools.Pool,
    pools.PoolList,
    pools.ReleaseAnswer,
]
QUERIES: list[type] = [jobs.LogQuery, runs.RunQuery]  # request parameters: every field optional
_PRIMITIVES = {str: "string", int: "number", float: "number", bool: "boolean", Any: "unknown"}


def ts_type(tp: Any) -> str:
    """The TypeScript spelling of a resolved Python annotation."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in _PRIMITIVES:
        return _PRIMITIVES[tp]
    if tp is type(None):
        return "null"
    if tp is specs.JobPhase:
        return "Phase"
    if tp is specs.LaunchRequest:
        return "Record<string, unknown>"
    if origin is typing.Annotated:
        shapes = [m.shape for m in tp.__metadata__ if isinstance(m, jobs.JsonOf)]
        return ts_type(shapes[0] if shapes else args[0])
    if dataclasses.is_dataclass(tp):
        return f"I{tp.__name__}"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(ts_type(a) for a in args)
    if origin is list:
        inner = ts_type(args[0])
        return f"({inner})[]" if " " in inner else f"{inner}[]"
    if origin is dict:
        return f"Record<{ts_type(args[0])}, {ts_type(args[1])}>"
    raise TypeError(f"no TypeScript type for {tp!r}: add it to scripts/gen_types.py")


def _doc(cls: type) -> list[str]:
    """The docstring's first sentence as a JSDoc comment, wrapped to prettier's width."""
    text = " ".join((cls.__doc__ or "").split()).replace("``", "`")
    first = text.split(". ")[0].rstrip(".")
    if not first:
        return []
    one = f"/** {first}. */"
    if len(one) <= 100:
        return [one]
    return ["/**", *(f" * {ln}" for ln in textwrap.wrap(first + ".", 96)), " */"]


def interface(cls: type, *, optional: bool = False) -> list[str]:
    hints = typing.get_type_hints(cls, include_extras=True)
    lines = [*_doc(cls), f"export interface I{cls.__name__} {{"]
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.metadata.get(specs.NOT_IN_JSON):
            continue
        tp = hints[field.name]
        if optional:  # a query leaves out what it does not set
            tp = typing.Union[tuple(a for a in typing.get_args(tp) if a is not type(None))] or tp  # noqa: UP007
            lines.append(f"  {field.name}?: {ts_type(tp)};")
        elif field.metadata.get(specs.ABSENT_WHEN_NONE):  # left out of the JSON when None
            tp = typing.Union[tuple(a for a in typing.get_args(tp) if a is not type(None))]  # noqa: UP007
            lines.append(f"  {field.name}?: {ts_type(tp)};")
        else:
            lines.append(f"  {field.name}: {ts_type(tp)};")
    return [*lines, "}"]


def render() -> str:
    phases = [p.value for p in specs.JobPhase]
    terminal = [f"'{p.value}'" for p in specs.JobPhase if p.is_terminal]
    out = [
        "/**",
        " * Shapes of the REST API (`docs/rest-api.md`); no imports, so tests load it bare.",
        " * GENERATED by scripts/gen_types.py from jupyter_disttrain/payloads/ and model/specs.py:"
        " do not edit.",
        " */",
        "",
        "export type Phase = " + " | ".join(f"'{p}'" for p in phases) + ";",
        "",
        f"export const TERMINAL_PHASES: ReadonlySet<string> = new Set([{', '.join(terminal)}]);",
        "",
        "/** TensorBoard id meaning every job's runs side by side (not a valid job id). */",
        f"export const ALL_JOBS = '{runs.ALL_JOBS}';",
        "",
        "/** The run of a job whose script made no run of `em`: its captured hparams (and MLflow's). */",
        f"export const JOB_RUN = '{runs.JOB_RUN}';",
    ]
    for cls in SHAPES:
        out += ["", *interface(cls)]
    for cls in QUERIES:
        out += ["", *interface(cls, optional=True)]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when labextension/rest/types.ts is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run python scripts/gen_types.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
