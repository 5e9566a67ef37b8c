"""The flag reference of ``%%distrun`` and ``jupyter disttrain run``, generated from the same
typed options their parsers are generated from (``intake.job_flag_classes``: ``flags.py``'s
words of every job, each registered backend's and launcher's options dataclass, and the ways
to run a job), so the reference lists every flag, with its default and help, and cannot drift.

``flag_groups()`` is the pure part (tested in ``tests/test_docs.py``); the ``disttrain-flags``
directive draws one section with one table per group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jupyter_disttrain import backends, launchers
from jupyter_disttrain.jobs.intake import job_flag_classes
from jupyter_disttrain.model.flags import Flag, JobWords, RunWords, flag_name, flags_of


@dataclass(frozen=True)
class FlagRow:
    """One flag as the reference shows it."""

    flag: str  # --grace-period SECONDS
    default: str  # what it is when not given ("" when nothing)
    help: str
    key: str  # its key in a REST submit ("" when it has none of its own)


@dataclass(frozen=True)
class FlagGroup:
    """The flags one class declares."""

    title: str
    intro: str
    rows: tuple[FlagRow, ...]


def _usage(name: str, flag: Flag) -> str:
    """The flag as argparse's usage line writes it: ``--gpus GPUS``, ``--accelerator {auto,gpu,cpu}``."""
    written = flag_name(name, flag)
    if flag.switch:
        return written
    if flag.metavar:
        value = flag.metavar
    elif flag.choices:
        value = "{" + ",".join(flag.choices) + "}"
    else:
        value = name.upper()
    return f"{written} {value}"


def _default(flag: Flag, default: Any) -> str:
    if flag.switch or default is None or default in ([], {}):
        return ""
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def _owner(cls: type) -> tuple[str, str, str]:
    """(title, intro, REST key prefix) of a flag class of ``job_flag_classes``."""
    where = f"`{cls.__qualname__}` in `{cls.__module__}`"
    if cls is JobWords:
        return "Every job", f"{cls.__doc__} Declared by {where}.", ""
    if cls is RunWords:
        return "How the front end runs it", f"{cls.__doc__} Declared by {where}.", ""
    for name in backends.backend_names():
        if backends.options_class(name) is cls:
            intro = f"The `{name}` backend's options, declared by {where}; over REST, `spec.options`."
            return f"Backend `{name}`", intro, "spec.options."
    for name in launchers.NAMES:
        if launchers.launcher_class(name).options is cls:
            intro = (
                f"The `{name}` launcher's options, declared by {where}; over REST, "
                "`spec.launcher_options`. Giving one chooses the launcher."
            )
            return f"Launcher `{name}`", intro, "spec.launcher_options."
    return cls.__qualname__, f"Declared by {where}.", ""


def flag_groups() -> list[FlagGroup]:
    """Every flag of ``%%distrun`` and ``jupyter disttrain run``, grouped by the class declaring it,
    in the order their help lists them."""
    groups = []
    for cls in job_flag_classes():
        title, intro, prefix = _owner(cls)
        rows = tuple(
            FlagRow(_usage(name, flag), _default(flag, default), flag.help, prefix + name if prefix else "")
            for name, flag, default in flags_of(cls)
        )
        groups.append(FlagGroup(title, intro, rows))
    return groups


def setup(app: Any) -> dict[str, Any]:
    from docutils import nodes
    from docutils.parsers.rst import Directive
    from sphinx.util.nodes import make_id

    def paragraph(text: str, literal: bool = False) -> Any:
        para = nodes.paragraph()
        para += nodes.literal(text=text) if literal and text else nodes.Text(text)
        return para

    def inline_code(text: str) -> Any:
        """A paragraph of ``text`` whose `backquoted` parts are code."""
        para = nodes.paragraph()
        for i, part in enumerate(text.split("`")):
            if part:
                para += nodes.literal(text=part) if i % 2 else nodes.Text(part)
        return para

    def table(group: FlagGroup) -> Any:
        keyed = any(row.key for row in group.rows)
        headers = ["Flag", "Default", "Meaning"] + (["REST key"] if keyed else [])
        widths = [28, 10, 50] + ([22] if keyed else [])
        tgroup = nodes.tgroup(cols=len(headers))
        for width in widths:
            tgroup += nodes.colspec(colwidth=width)
        head = nodes.row()
        for text in headers:
            head += nodes.entry("", paragraph(text))
        tgroup += nodes.thead("", head)
        body = nodes.tbody()
        for row in group.rows:
            cells = [paragraph(row.flag, True), paragraph(row.default, True), paragraph(row.help)]
            if keyed:
                cells.append(paragraph(row.key, True))
            body += nodes.row("", *(nodes.entry("", cell) for cell in cells))
        tgroup += body
        return nodes.table("", tgroup, classes=["disttrain-flags"])

    class FlagsDirective(Directive):
        """``disttrain-flags``: a section per flag group, with its table."""

        def run(self) -> list[Any]:
            document = self.state.document
            out = []
            for group in flag_groups():
                title = group.title.replace("`", "")
                section = nodes.section(ids=[make_id(app.env, document, "", "flags-" + title)])
                section["names"].append(nodes.fully_normalize_name(title))
                section += nodes.title("", "", *inline_code(group.title).children)
                section += inline_code(group.intro)
                section += table(group)
                document.note_implicit_target(section, section)
                out.append(section)
            return out

    app.add_directive("disttrain-flags", FlagsDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
