"""The documentation: every relative link of the README and of docs/ resolves (file and heading),
the generated flag reference lists every flag the magic and the CLI take, and the site's
configuration turns a broken link or a page outside every table of contents into a failed build
(scripts/test.sh's docs stage builds the real site with it)."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", *DOCS.glob("*.md")])
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FLAG = re.compile(r"--[a-z][a-z0-9-]*")


def _prose(text: str) -> str:
    """``text`` without its fenced blocks and code spans (links there are examples, not links)."""
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub and MyST (``myst_heading_anchors``) make it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^(```|~~~).*?^\1", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def _broken(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{page.name}: {target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{page.name}: {target} (no such heading)")
    return broken


def test_every_relative_link_of_the_readme_and_the_docs_resolves() -> None:
    assert len(PAGES) > 20  # the README and the docs pages were found
    assert [b for page in PAGES for b in _broken(page)] == []


def test_the_link_check_sees_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Its part\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n[ok](other.md#its-part) [self](#page) [gone](nothere.md) [typo](other.md#its-prat)\n"
        "`[code](nothere.md)` and ![img](other.md)\n"
    )
    assert _broken(page) == [
        "page.md: nothere.md (no such file)",
        "page.md: other.md#its-prat (no such heading)",
    ]


def _flag_reference() -> dict[str, str]:
    """Flag name -> help, as the generated reference shows them."""
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import flagref
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    return {row.flag.split()[0]: row.help for group in flagref.flag_groups() for row in group.rows}


def _parser_flags(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    return {
        option: action.help
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    found = [a.choices[name] for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return found[0]


def test_the_flag_reference_lists_every_flag_of_the_magic_and_the_cli() -> None:
    from jupyter_disttrain.commands import _parser
    from jupyter_disttrain.notebook.magics import DistTrainMagics

    reference = _flag_reference()
    magic = _parser_flags(DistTrainMagics.distrun.parser)
    assert {"--gpus", "--grace-period", "--partition", "--flavor", "--workers", "--dry-run"} <= set(reference)
    assert magic == reference
    assert _parser_flags(_subcommand(_parser(), "run")) == reference


def test_the_flags_the_distrun_page_explains_are_real_flags() -> None:
    """The hand-written table of docs/distrun.md (what the main flags do, in more words) and its
    lists of backend flags name no flag that is gone or misspelt."""
    text = (DOCS / "distrun.md").read_text(encoding="utf-8")
    first_cells = [row.split("|")[1] for row in text.splitlines() if row.startswith("| `-")]
    listed = re.search(r"^Kubernetes flags \(.*?\n\n", text, flags=re.S | re.M)
    assert listed is not None and len(first_cells) > 15
    named = set(FLAG.findall(" ".join(first_cells))) | set(FLAG.findall(listed.group(0)))
    assert named - set(_flag_reference()) == set()


def _build(site: Path) -> subprocess.CompletedProcess[str]:
    """The docs stage's build of ``site`` (scripts/test.sh)."""
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-E", "-q", "-b", "html"]
    return subprocess.run(
        [*command, str(site), str(site / "_build")], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_the_site_configuration_fails_on_a_broken_link_or_a_lost_page(tmp_path: Path) -> None:
    pytest.importorskip("sphinx")
    site = tmp_path / "docs"
    site.mkdir()
    shutil.copy(DOCS / "conf.py", site)
    shutil.copytree(DOCS / "_ext", site / "_ext")
    (site / "index.md").write_text("# Home\n\n```{toctree}\npage\n```\n")
    (site / "page.md").write_text("# Page\n\n## Options\n\n[home](index.md), [options](#options)\n")
    good = _build(site)
    assert good.returncode == 0, good.stderr

    (site / "page.md").write_text("# Page\n\n[gone](nothere.md), [typo](index.md#nope)\n")
    (site / "lost.md").write_text("# In no table of contents\n")
    bad = _build(site)
    assert bad.returncode != 0
    assert "nothere.md" in bad.stderr and "'nope'" in bad.stderr
    assert "isn't included in any toctree" in bad.stderr
