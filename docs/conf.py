"""Sphinx configuration of meshsim's documentation site (`make docs`)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

project = "meshsim"
author = "meshsim"
copyright = "2026, meshsim"

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
exclude_patterns = ["_build", "jupyter_execute", "README.md", "**.ipynb_checkpoints"]
source_suffix = {".md": "myst-nb", ".rst": "restructuredtext"}

myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3

# Every code cell runs at build time, from scratch; one that raises fails the build.
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_timeout = 300
nb_execution_show_tb = True
nb_execution_in_temp = True  # a cell never imports docs/collectives/ as the package `collectives`

autodoc_member_order = "bysource"
autodoc_typehints = "description"


def _own_docstring_only(app, what, name, obj, options, lines):
    """A constant without a doc comment of its own shows none, rather than its type's docstring."""
    if what == "data" and type(obj).__doc__ and lines[:1] == type(obj).__doc__.strip().splitlines()[:1]:
        lines.clear()


def setup(app):
    app.connect("autodoc-process-docstring", _own_docstring_only, priority=400)  # before napoleon reads it


html_theme = "sphinx_book_theme"
html_title = "meshsim"
# The sidebar lists the sections and opens the current one: drawing every page of every section on every
# page took a third of the build's own time (without the executed cells).
html_theme_options = {"show_toc_level": 2, "collapse_navbar": True}
# The source pages of `sphinx.ext.viewcode` (one per module) go without the navigation sidebar: drawing the
# whole table of contents on each of them was most of the build's time, and a code listing needs none.
html_sidebars = {"_modules/**": []}
