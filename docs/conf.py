"""Sphinx configuration of the simplex-rf API reference and guides.

Build (warnings are errors, as in CI through tests/test_docs.py)::

    python -m sphinx -W --keep-going -j 1 -b html docs docs/_build/html

Everything is local: no intersphinx, no network.  Docstrings are numpydoc
(parsed by the ``numpydoc`` extension); the build refuses broken markup
(undefined substitutions, malformed tables, bad indentation), and numpydoc's
style validation is off.  Unresolved cross-references are not errors (no
``-n``): docstrings name numpy, torch and scikit-learn objects that are not
documented here.
"""

import inspect
import os
import sys

# the packages are imported from the working tree, installed or not
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
# the figure gallery's extension (docs/_ext; a configuration exec'd from elsewhere, as tests/test_docs.py's probe
# project does, builds without it)
_EXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext")
GALLERY = os.path.isfile(os.path.join(_EXT, "figure_gallery.py"))
if GALLERY:
    sys.path.insert(0, _EXT)
os.environ.setdefault("MPLBACKEND", "Agg")  # figures imports matplotlib.pyplot

project = "simplex-rf"
author = "the simplex-rf developers"
copyright = "the simplex-rf developers (MIT license)"
release = version = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
] + (["figure_gallery"] if GALLERY else [])  # docs/_ext: python -m figures --quick at build time

exclude_patterns = ["_build", "_ext"]
templates_path = []
html_static_path = []
html_theme = "alabaster"
html_title = "simplex-rf"

# autodoc: members in source order; a module's __all__ decides what is public
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the numpydoc Parameters sections carry the types
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_preserve_defaults = False  # True fails on some signatures (Sphinx 9: 'pop from empty list')

# numpydoc: no per-class member tables (autodoc lists the members), no style
# validation in the build (numpydoc_validation_checks empty)
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()
numpydoc_xref_param_type = False


def _drop_type_docstrings(app, what, name, obj, options, lines):
    """A constant without a doc comment would show its type's docstring (``tuple``: "Built-in immutable
    sequence..."): drop it, the directive's own content describes the constant."""
    if what in ("data", "attribute") and not isinstance(obj, type):
        own = inspect.getdoc(type(obj))
        if own and lines and lines[0].strip() == own.splitlines()[0].strip():
            del lines[:]


#: The toolkit's packages; members inherited from anything else are not documented here.
OWN_PACKAGES = ("theory", "montecarlo", "figures", "paper_checks")


def _skip_foreign_inherited(app, what, name, obj, skip, options):
    """With ``:inherited-members:`` (the scikit-learn estimators inherit ``fit`` and ``transform`` from a
    private base), document the toolkit's methods only, not scikit-learn's own (``set_output``...)."""
    module = getattr(obj, "__module__", None)
    if what == "class" and isinstance(module, str) and module.split(".")[0] not in OWN_PACKAGES:
        return True
    return None


def setup(app):
    app.connect("autodoc-process-docstring", _drop_type_docstrings, priority=100)
    app.connect("autodoc-skip-member", _skip_foreign_inherited)
