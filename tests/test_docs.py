"""The documents: the Sphinx API reference builds with warnings as errors, covers the public API, and the
examples of the guide pages run (issue 14 item 4).

* ``python -m sphinx -n -W --keep-going -j 1 -b html docs TMP`` in a subprocess of its own process group,
  killed as a group on timeout; output and doctrees go to pytest's temporary directory, never into the
  tree.  Skipped only when Sphinx is not installed (CI installs it with the ``docs`` extra).  ``-n``
  (nitpicky, also set in docs/conf.py): every cross-reference to the toolkit's names resolves (issue 39
  item 8); other libraries' names are not checked (no inventories offline).
* Power of that check: the same configuration on a two-file project whose docstring holds an undefined
  RST substitution (``|z|``, the commonest defect the reference build found), or a reference to a name of
  the toolkit that does not exist, must fail, and the clean twin of that project (which also names a
  numpy object) must pass; the resolution of a re-exported name (``theory.conformity``) by the name it is
  documented under is checked on docs/conf.py's functions.
* Coverage: every public module has an ``automodule`` directive in ``docs/api``, and every name in the
  ``__all__`` of the documented packages has an entry (an HTML anchor) in the built reference.
* The ``>>>`` examples of ``docs/guide/*.rst`` run as doctests (they are the pages' promises); the pages of
  design notes and derivations (moved from the module docstrings, :data:`NOTES`) need not have examples.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from _procs import run_group

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
API = DOCS / "api"

#: Packages whose public modules the reference must document (all of their non-private submodules).
PACKAGES = ("theory", "montecarlo", "figures")
#: Single modules documented from packages that are otherwise not API (the claim registry).
EXTRA_MODULES = ("paper_checks.registry",)
#: Modules whose ``__all__`` names must each have an entry in the built reference.
ALL_NAMESPACES = ("theory", "theory.registry", "theory.feature_kinds", "theory.validation", "theory.errors",
                  "montecarlo", "montecarlo.experiments", "montecarlo.kernel_approximation", "montecarlo.performer",
                  "montecarlo.nn", "figures")

BUILD_TIMEOUT = 900  # seconds, a hang guard; the build takes about 1 min on 2 busy cores (30 s of it the gallery's --quick run)


def _sphinx_or_skip():
    pytest.importorskip("sphinx", reason="Sphinx is not installed (pip install 'simplex-rf[docs]')")


def _run_sphinx(srcdir, outdir, timeout=BUILD_TIMEOUT):
    """``python -m sphinx -n -W --keep-going -j 1 -b html`` in its own process group; killed as a group on timeout."""
    cmd = [sys.executable, "-m", "sphinx", "-n", "-W", "--keep-going", "-j", "1", "-b", "html", "-q",
           "-d", str(outdir / "doctrees"), str(srcdir), str(outdir / "html")]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg")
    try:
        return run_group(cmd, timeout, cwd=outdir, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the Sphinx build did not finish within {timeout} s (killed)")


# ---------------------------------------------------------------------------
# which modules and names the reference must hold


def public_modules():
    """Every importable non-private module of :data:`PACKAGES` (recursively), plus :data:`EXTRA_MODULES`."""
    out = set(EXTRA_MODULES)
    for pkg_name in PACKAGES:
        pkg = importlib.import_module(pkg_name)
        out.add(pkg_name)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=pkg_name + "."):
            if any(part.startswith("_") for part in info.name.split(".")):
                continue
            out.add(info.name)
    return out


def automodules(rst_dir=API):
    """Module names of the ``.. automodule::`` directives under ``rst_dir``."""
    names = set()
    for path in sorted(Path(rst_dir).glob("*.rst")):
        names.update(re.findall(r"^\.\. automodule:: *(\S+)", path.read_text(), flags=re.M))
    return names


def undocumented_modules(modules, documented):
    return sorted(set(modules) - set(documented))


def expected_anchors(namespace):
    """For each name in ``namespace.__all__``: the HTML anchors any one of which documents it."""
    mod = importlib.import_module(namespace)
    out = {}
    for name in mod.__all__:
        obj = getattr(mod, name)
        if isinstance(obj, types.ModuleType):
            out[name] = {obj.__name__, f"module-{obj.__name__}"}
            continue
        ids = {f"{namespace}.{name}"}
        if inspect.isclass(obj) or inspect.isroutine(obj):
            ids.add(f"{obj.__module__}.{obj.__qualname__}")
        else:  # data: documented in whichever public submodule defines it under this name
            for other, m in list(sys.modules.items()):
                if other.startswith(namespace.split(".")[0] + ".") and getattr(m, name, None) is obj:
                    ids.add(f"{other}.{name}")
        out[name] = ids
    return out


def html_anchors(html_dir):
    ids = set()
    for path in Path(html_dir).rglob("*.html"):
        ids.update(re.findall(r'\bid="([^"]+)"', path.read_text(encoding="utf-8")))
    return ids


def missing_entries(namespace, anchors):
    return sorted(name for name, ids in expected_anchors(namespace).items() if not ids & anchors)


# ---------------------------------------------------------------------------
# tests


def test_every_public_module_has_an_automodule_directive():
    documented = automodules()
    missing = undocumented_modules(public_modules(), documented)
    assert not missing, f"add these modules to docs/api/*.rst: {missing}"
    stale = sorted(m for m in documented if importlib.util.find_spec(m) is None)
    assert not stale, f"docs/api/*.rst names modules that do not exist: {stale}"
    # power: a module the directives do not name is reported
    assert undocumented_modules(public_modules() | {"theory.new_module"}, documented) == ["theory.new_module"]


def test_api_reference_builds_with_warnings_as_errors_and_covers_the_public_api(tmp_path):
    _sphinx_or_skip()
    rc, out = _run_sphinx(DOCS, tmp_path)
    assert rc == 0, f"sphinx -W failed (exit {rc}):\n{out[-6000:]}"
    anchors = html_anchors(tmp_path / "html")
    missing = {ns: missing_entries(ns, anchors) for ns in ALL_NAMESPACES}
    missing = {ns: names for ns, names in missing.items() if names}
    assert not missing, f"public names without an entry in the API reference: {missing}"
    # power: a name that is not documented is reported
    assert missing_entries("theory", anchors - {"theory.conformities.conformity"}) == ["conformity"]
    for page in ("index", "gallery", "guide/ml", "guide/theory", "api/theory", "api/montecarlo", "api/experiments",
                 "api/figures", "api/paper_checks") + tuple(f"guide/{name[:-4]}" for name in NOTES):
        assert (tmp_path / "html" / f"{page}.html").is_file(), page
    _check_gallery(tmp_path / "html")


def _check_gallery(html):
    """The figure gallery (issue 42): every figure of ``python -m figures`` drawn at the build (``--quick``) into
    the output tree, shown with its one-line command and its caption; nothing written into the source tree."""
    import json

    from figures import FIGURES

    page = (html / "gallery.html").read_text()
    text = re.sub(r"<[^>]+>", "", page)
    index = {e["name"]: e for e in json.loads((html / "_gallery" / "index.json").read_text())["figures"]}
    assert index and all(e["settings"]["quick"] for e in index.values())
    for f in FIGURES:
        assert f"python -m figures --only {f.name}" in text, f.name
        if index[f.name]["status"] == "written":
            assert f'<img src="_gallery/{f.name}.png"' in page and (html / "_gallery" / f"{f.name}.png").is_file()
            caption = json.loads((html / "_gallery" / f"{f.name}.json").read_text())["caption"]
            assert caption[:60] in text.replace("&#8217;", "'").replace("&quot;", '"'), f.name
    assert "python -m figures.reproduce performer" in text
    assert not (DOCS / "_gallery").exists()


BROKEN_DOCSTRING = '''"""A module.

The largest |z| of the table.
"""
'''


UNRESOLVED_DOCSTRING = '"""A module that names :func:`theory.no_such_function`."""\n'
CLEAN_DOCSTRING = '"""A module with valid RST; it names :class:`numpy.ndarray` (not checked: another library)."""\n'


@pytest.mark.parametrize("docstring, ok, message", [(BROKEN_DOCSTRING, False, "Undefined substitution"),
                                                    (UNRESOLVED_DOCSTRING, False, "reference target not found"),
                                                    (CLEAN_DOCSTRING, True, None)])
def test_the_build_check_fails_on_a_docstring_warning(tmp_path, docstring, ok, message):
    """The harness has power: an undefined substitution in a docstring, or a reference to a name of the toolkit
    that does not exist, fails ``-n -W`` with docs/conf.py's settings."""
    _sphinx_or_skip()
    src = tmp_path / "src"
    src.mkdir()
    (src / "docmod_probe.py").write_text(docstring)
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(src)!r})\n"
        f"exec(open({str(DOCS / 'conf.py')!r}).read())\n")
    (src / "index.rst").write_text("Probe\n=====\n\n.. automodule:: docmod_probe\n")
    rc, out = _run_sphinx(src, tmp_path, timeout=120)
    if ok:
        assert rc == 0, out
    else:
        assert rc != 0 and message in out, out


def test_references_resolve_through_reexports():
    """docs/conf.py resolves a reference by any name that reaches the object: a package's re-export
    (``theory.conformity``), a bare name imported by the module the reference is written in, a method through
    its class's public name; names outside the toolkit are not looked up."""
    namespace = {"__file__": str(DOCS / "conf.py")}
    exec(compile((DOCS / "conf.py").read_text(), str(DOCS / "conf.py"), "exec"), namespace)
    lookup, names_of = namespace["_lookup"], namespace["_names_of"]

    def names(path):
        found = lookup(path)
        return found and names_of(*found)

    assert "theory.conformities.conformity" in names("theory.conformity")
    assert "montecarlo.couplings.sample_weights" in names("montecarlo.sample_weights")
    assert "montecarlo.nn.AttentionError.at" in names("montecarlo.nn._attention_error.AttentionError.at")
    # power: a name that does not exist, or one outside the toolkit, is not resolved
    assert names("theory.no_such_function") is None and names("numpy.ndarray") is None


GUIDES = sorted(p.name for p in (DOCS / "guide").glob("*.rst"))
GUIDE_NEEDS = {"ml.rst": ("sklearn", "torch", "performer_pytorch"), "theory.rst": ("flint",), "sampling.rst": ("sklearn",)}
#: Pages of design notes, derivations and operating manuals moved from the module docstrings (issue 39 item 8):
#: their examples, if any, run, but they need not have any.
NOTES = ("theory_design.rst", "derivations.rst", "attention.rst", "experiments.rst")


def test_notes_pages_exist_and_are_in_the_toctree():
    index = (DOCS / "index.rst").read_text()
    for page in NOTES:
        assert (DOCS / "guide" / page).is_file(), page
        assert re.search(rf"^   guide/{page[:-4]}$", index, flags=re.M), f"docs/index.rst does not list guide/{page}"


@pytest.mark.parametrize("page", GUIDES)
def test_guide_examples_run(page):
    for module in GUIDE_NEEDS.get(page, ()):
        pytest.importorskip(module, reason=f"docs/guide/{page} needs {module}")
    result = doctest.testfile(str(DOCS / "guide" / page), module_relative=False, report=True,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    if page not in NOTES:
        assert result.attempted > 5, f"docs/guide/{page} has too few examples ({result.attempted})"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of docs/guide/{page} failed " \
                               "(doctest report on stdout)"
