"""Sphinx configuration of the simplex-rf API reference and guides.

Build (warnings are errors, as in CI through tests/test_docs.py)::

    python -m sphinx -W --keep-going -j 1 -b html docs docs/_build/html

Everything is local: no intersphinx, no network.  Docstrings are numpydoc
(parsed by the ``numpydoc`` extension); the build refuses broken markup
(undefined substitutions, malformed tables, bad indentation), and numpydoc's
style validation is off.  Cross-references are checked (``-n``, nitpicky, on
in this file): a reference to one of the toolkit's names must resolve, by the
name under which the object is documented or by any public name that binds it
(``theory.conformity`` finds ``theory.conformities.conformity``, see
``_resolve_reexport``); references to other libraries' names (numpy,
torch, scikit-learn, mpmath, the standard library) are not checked, as their
inventories cannot be fetched offline (``nitpick_ignore_regex``).
"""

import importlib
import inspect
import os
import re
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

# Every cross-reference must resolve (``sphinx-build -n``), except those to other libraries' names: their
# documentation lives elsewhere, and intersphinx would need the network (their objects.inv) at build time.
nitpicky = True
FOREIGN = ("numpy", "scipy", "sklearn", "torch", "triton", "mpmath", "flint", "joblib", "threadpoolctl", "matplotlib",
           "performer_pytorch", "pandas", "sympy",
           # the standard library
           "os", "sys", "warnings", "argparse", "collections", "typing", "string", "pathlib", "json", "math",
           "fractions", "decimal", "concurrent", "multiprocessing", "subprocess", "signal", "threading", "time",
           "functools", "itertools", "contextlib", "dataclasses", "enum", "abc", "io", "tempfile", "re",
           "numbers", "random", "hashlib", "inspect", "types", "weakref", "logging", "shutil", "platform")
nitpick_ignore_regex = [(r"py:.*", rf"{re.escape(name)}(\..*)?") for name in FOREIGN]
# torch's own docstring of ``nn.Module.set_extra_state``, inherited by ``PRFAttention.set_extra_state``, names
# torch's ``load_state_dict`` relatively
nitpick_ignore = [("py:func", "load_state_dict")]


def _skip_foreign_inherited(app, what, name, obj, skip, options):
    """With ``:inherited-members:`` (the scikit-learn estimators inherit ``fit`` and ``transform`` from a
    private base), document the toolkit's methods only, not scikit-learn's own (``set_output``...)."""
    module = getattr(obj, "__module__", None)
    if what == "class" and isinstance(module, str) and module.split(".")[0] not in OWN_PACKAGES:
        return True
    return None


def _lookup(path):
    """The object named by the dotted ``path`` inside the toolkit's packages (modules imported as needed), and
    the last component of the path; None when it names nothing (or a ``__main__`` module, which is not imported)."""
    parts = path.split(".")
    if parts[0] not in OWN_PACKAGES or "__main__" in parts:
        return None
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part, _lookup)
            if obj is _lookup:
                return None
        return obj, parts[-1]
    return None


def _names_of(obj, name):
    """Every dotted name that reaches ``obj``: its defining module's, and every loaded module of the toolkit that
    binds it under ``name`` (a package re-exporting it); a method's, under each name of its class."""
    if inspect.ismodule(obj):
        return [obj.__name__]
    out = []
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str) and module.split(".")[0] in OWN_PACKAGES:
        out.append(f"{module}.{qualname}")
        if "." in qualname and module in sys.modules:  # a method or nested object: via each name of its owner
            owner_name, _, rest = qualname.rpartition(".")
            found = _lookup(f"{module}.{owner_name}")
            if found is not None:
                out += [f"{n}.{rest}" for n in _names_of(found[0], found[1]) if n != f"{module}.{owner_name}"]
            return out
    for other, mod in list(sys.modules.items()):
        if other.split(".")[0] in OWN_PACKAGES and getattr(mod, name, None) is obj:
            out.append(f"{other}.{name}")
    return out


def _resolve_reexport(app, env, node, contnode):
    """Resolve a Python cross-reference to one of the toolkit's objects by any name that reaches it: the API
    reference documents an object once, under its defining public module (``theory.conformities.conformity``),
    while docstrings name it by the package's public name (``theory.conformity``) or, inside a module that
    imports it, by its bare name.  Only the toolkit's objects are looked up; anything else stays unresolved."""
    if node.get("refdomain") != "py":
        return None
    from sphinx.util.nodes import make_refnode

    target = node["reftarget"]
    scopes = [s for s in (node.get("py:module"), node.get("py:class") and
                          f"{node.get('py:module')}.{node.get('py:class')}") if s]
    py = env.get_domain("py")
    for path in [f"{scope}.{target}" for scope in reversed(scopes)] + [target]:
        found = _lookup(path)
        if found is None:
            continue
        for name in _names_of(*found):
            if name in py.objects:
                entry = py.objects[name]
                return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, name)
            if name in py.modules:
                entry = py.modules[name]
                return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, name)
    return None


def setup(app):
    app.connect("autodoc-process-docstring", _drop_type_docstrings, priority=100)
    app.connect("autodoc-skip-member", _skip_foreign_inherited)
    app.connect("missing-reference", _resolve_reexport)
