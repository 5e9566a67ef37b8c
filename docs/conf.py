"""Sphinx configuration of the documentation site (``docs/*.md`` in MyST Markdown).

Built by the test command's ``docs`` stage with warnings as errors::

    sphinx-build -W --keep-going -n -b html docs build/docs

The flag reference (``flags.md``) is generated at build time from the typed options the
``%%distrun`` and ``jupyter disttrain run`` parsers are generated from (``_ext/flagref.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "jupyter_disttrain"
author = "the jupyter_disttrain authors"
copyright = "the jupyter_disttrain authors"

extensions = ["myst_parser", "flagref"]
# Links to a heading of another page (`slurm.md#options`) resolve, and a broken one is a warning.
myst_heading_anchors = 4
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]

html_theme = "pydata_sphinx_theme"
html_title = "jupyter_disttrain"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_show_sourcelink = False
# Pages with no pages under them need no section navigation.
html_sidebars: dict[str, list[str]] = {
    page: []
    for page in ("index", "getting-started", "architecture", "performance", "development", "gpu-check")
}
# A code block without a language (a job's output, a directory tree) is shown as it is.
highlight_language = "none"
# Flags and options are written as typed (`--gpus`, not an en dash), in prose as in code.
smartquotes = False
