"""No import circle anywhere in the project (issue 39 item 4): every module found on disk, not a named list.

* Dynamically: each module of the project's packages (``montecarlo.nn``'s files included) is imported *first*
  in a fresh process (a fork of one interpreter that has loaded only third-party libraries), so a module-level
  circle fails whichever of its modules comes first.
* Statically: the graph of the project's imports (module level and inside functions alike: a circle hidden in
  a function-level import is still a circle) has no cycle in ``theory`` and ``montecarlo``; in the other
  packages the module-level graph has none and the function-level circles found when this test was written
  may not grow.
* Power: a synthetic package in ``tmp_path`` with a circular pair of modules fails both checks, and a pair
  whose circle hides in a function-level import fails the static one.

Also: no private name imported across packages (issue 39 item 5), and no test module imported by another (issue 39
item 7: what test modules share lives in a helper module, tests/README.md), each with its synthetic power check.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest

from _procs import run_group

ROOT = Path(__file__).resolve().parents[1]
#: The project's packages: every directory of the repository with an ``__init__.py`` (tests and docs have none).
PACKAGES = tuple(sorted(p.parent.name for p in ROOT.glob("*/__init__.py")))
#: Packages whose imports form a DAG even counting function-level imports.
STRICT = ("theory", "montecarlo")
#: Function-level import circles outside :data:`STRICT` when this test was written (issue 39): a ratchet.
KNOWN_CIRCLES = [
    {"figures._context", "figures._sweep", "figures.attention", "figures.distributions", "figures.downstream",
     "figures.geometry", "figures.gram", "figures.mse", "figures.optimality", "figures.registry", "figures.winners"},
    {"paper_checks.certify", "paper_checks.certify_winners"},
    {"paper_checks.replay", "paper_checks.replay_winners"},
]
TIMEOUT = 900  # seconds, a hang guard (about a minute on 2 busy cores)


def project_modules(root=ROOT, packages=PACKAGES):
    """{dotted name: path} of every module of ``packages`` under ``root`` (``__main__`` scripts left out: they
    run on import)."""
    out = {}
    for pkg in packages:
        for path in sorted((Path(root) / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__main__":
                continue
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imported_modules(name, path, modules, function_level=True):
    """The modules of ``modules`` that module ``name`` (file ``path``) imports: ``from a.b import c`` counts as
    ``a.b.c`` where that is a module, else ``a.b``; relative imports resolved; ``function_level`` False: only
    the statements at the module's top level."""
    tree = ast.parse(Path(path).read_text())
    nodes = ast.walk(tree) if function_level else tree.body
    package = name.split(".") if Path(path).name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    out.add(f"{base}.{alias.name}")
                elif base in modules:
                    out.add(base)
    out.discard(name)
    return out


def import_graph(modules, function_level=True):
    return {name: imported_modules(name, path, modules, function_level) for name, path in modules.items()}


def circles(graph):
    """The import circles of ``graph``: its strongly connected components of more than one module (Tarjan's
    algorithm, iterative), as sets."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


#: Third-party libraries the checker's interpreter loads before it forks (they only save the forks' time).
PRELOAD = ("numpy", "scipy.linalg", "scipy.optimize", "scipy.special", "scipy.stats", "mpmath", "sympy", "torch",
           "triton", "matplotlib.pyplot", "sklearn.base", "sklearn.utils.validation", "joblib", "pytest")
#: Run in a fresh interpreter (arguments: root, packages, libraries to preload, modules): import each module
#: first, in a fork of its own; print "@@ name exit-code" per module (3: a third-party module is missing, an
#: optional dependency).
_IMPORT_EACH = r"""
import importlib, os, sys, traceback
root, packages, preload, names = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), sys.argv[4:]
sys.path.insert(0, root)
for lib in filter(None, preload):
    try:
        importlib.import_module(lib)
    except Exception:
        pass
loaded = sorted(m for m in sys.modules if m.split(".")[0] in packages)
assert not loaded, loaded
for name in names:
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            code = 3 if (exc.name or "").split(".")[0] not in packages else 1
            traceback.print_exc()
        except BaseException:
            code = 1
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(f"@@ {name} {os.waitstatus_to_exitcode(status)}", flush=True)
"""


def failed_first_imports(names, root=ROOT, packages=PACKAGES, preload=True):
    """{module: output} of the modules of ``names`` whose import fails when it is the first module of
    ``packages`` imported (a fork of a fresh interpreter per module; ``preload``: the interpreter loads the
    third-party libraries first, which only saves time)."""
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    libs = ",".join(PRELOAD) if preload else ""
    _, out = run_group([sys.executable, "-c", _IMPORT_EACH, str(root), ",".join(packages), libs, *names], TIMEOUT,
                       cwd=root, env=env)
    codes, text, failed = {}, [], {}
    for line in out.splitlines():
        if line.startswith("@@ "):
            _, name, code = line.split()
            codes[name] = int(code)
            if int(code) not in (0, 3):
                failed[name] = "\n".join(text[-15:])
            text = []
        else:
            text.append(line)
    missing = [n for n in names if n not in codes]
    assert not missing, f"the import checker stopped before {missing[:3]}: {out[-2000:]}"
    return failed


def _write(root, files):
    for rel, text in files.items():
        path = Path(root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# ---------------------------------------------------------------------------
# the project


def test_every_module_of_the_project_imports_first():
    modules = project_modules()
    assert "montecarlo.nn._module" in modules and "theory" in modules and len(modules) > 100
    failed = failed_first_imports(sorted(modules))
    assert not failed, failed


def test_no_import_circle_in_theory_and_montecarlo():
    """Counting function-level imports: the deferred import of montecarlo.nn._fused (Triton is optional) is
    an edge of the DAG, never half of a circle (before issue 39 _fused imported montecarlo.nn back)."""
    graph = import_graph(project_modules(packages=STRICT))
    assert "montecarlo.nn._fused" in graph["montecarlo.nn._dispatch"]
    assert circles(graph) == []


def test_montecarlo_nn_files_never_import_the_package():
    """The package's files import one another, never ``montecarlo.nn`` itself (its ``__init__`` imports them)."""
    modules = project_modules(packages=("montecarlo",))
    files = [n for n in modules if n.startswith("montecarlo.nn.")]
    assert len(files) >= 9
    back = {n: "montecarlo.nn" for n in files if "montecarlo.nn" in imported_modules(n, modules[n], modules)}
    assert not back, back


def test_other_packages_have_no_module_level_circle_and_no_new_one():
    modules = project_modules(packages=tuple(p for p in PACKAGES if p not in STRICT))
    assert circles(import_graph(modules, function_level=False)) == []
    found = circles(import_graph(modules))
    new = [c for c in found if not any(c <= known for known in KNOWN_CIRCLES)]
    assert not new, f"new import circles (a function-level import closing a circle): {new}"


# ---------------------------------------------------------------------------
# power: the same checks on synthetic packages


CIRCULAR = {"cyc/__init__.py": "",
            "cyc/a.py": "from cyc.b import B\nA = 1\n",
            "cyc/b.py": "from cyc.a import A\nB = 2\n",
            "cyc/c.py": "X = 3\n"}
HIDDEN = {"hid/__init__.py": "",
          "hid/a.py": "def f():\n    from hid.b import g\n    return g()\n",
          "hid/b.py": "from hid.a import f\n\n\ndef g():\n    return 1\n"}


def test_the_checks_find_a_circular_pair(tmp_path):
    _write(tmp_path, CIRCULAR)
    modules = project_modules(tmp_path, ("cyc",))
    assert sorted(modules) == ["cyc", "cyc.a", "cyc.b", "cyc.c"]
    failed = failed_first_imports(sorted(modules), tmp_path, ("cyc",), preload=False)
    assert sorted(failed) == ["cyc.a", "cyc.b"] and "partially initialized" in failed["cyc.a"]
    assert circles(import_graph(modules, function_level=False)) == [{"cyc.a", "cyc.b"}]


def test_the_static_check_finds_a_circle_hidden_in_a_function(tmp_path):
    _write(tmp_path, HIDDEN)
    modules = project_modules(tmp_path, ("hid",))
    assert failed_first_imports(sorted(modules), tmp_path, ("hid",), preload=False) == {}  # imports fine...
    assert circles(import_graph(modules, function_level=False)) == []
    assert circles(import_graph(modules)) == [{"hid.a", "hid.b"}]  # ...but is a circle


def test_a_relative_import_resolves_to_its_module(tmp_path):
    _write(tmp_path, {"rel/__init__.py": "from . import a\n", "rel/a.py": "from .b import B\n",
                      "rel/b.py": "from ..rel import c\nB = 1\n", "rel/c.py": ""})
    modules = project_modules(tmp_path, ("rel",))
    assert import_graph(modules) == {"rel": {"rel.a"}, "rel.a": {"rel.b"}, "rel.b": {"rel.c"}, "rel.c": set()}


# ---------------------------------------------------------------------------
# no private name across packages (issue 39 item 5)


#: Private names a package's modules may take from another package, white-box uses each with its reason; a
#: ratchet: a new one fails, and so does an entry no longer used.
WHITE_BOX = {
    # they time, compile and count the launches of the private Triton kernels and switch the dispatch paths
    ("benchmarks.bench_attention", "montecarlo.nn"), ("benchmarks.kernel_registers", "montecarlo.nn"),
    # it times the classifier's inner loop and class grouping against their baselines
    ("benchmarks.bench_experiments", "montecarlo.experiments.classification"),
    # they measure the work-budget machinery itself (units used per call, traces, the default budget)
    ("benchmarks.bench_theory", "theory._context"), ("benchmarks.bench_work", "theory._context"),
    # the independent certificates reuse theory.certified's first moment and its flint precision guard
    ("paper_checks.certify", "theory.certified"),
}


def _is_test(name):
    return name.split(".")[0] == "tests" or name.split(".")[-1].startswith(("test_", "conftest"))


def private_imports(modules, packages):
    """(module, what, private name) for every private name a module of ``modules`` takes from another of
    ``packages``: ``from a._b import c``, ``import a._b``, ``from a.b import _c`` and ``alias._c`` of a module
    imported as ``alias``; test modules (their job is the internals) are left out."""
    out = set()
    for name, path in modules.items():
        if _is_test(name):
            continue
        top = name.split(".")[0]
        tree = ast.parse(Path(path).read_text())
        aliases = {}
        for node in ast.walk(tree):
            found = []
            if isinstance(node, ast.Import):
                for a in node.names:
                    found.append(a.name)
                    if a.asname:
                        aliases[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                for a in node.names:
                    found.append(f"{node.module}.{a.name}")
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            for full in found:
                parts = full.split(".")
                if parts[0] in packages and parts[0] != top and any(_private(p) for p in parts):
                    out.add((name, ".".join(parts[:-1]), full))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
                base = aliases.get(node.value.id)
                if base and base.split(".")[0] in packages and base.split(".")[0] != top:
                    out.add((name, base, f"{base}.{node.attr}"))
    return out


def _private(part):
    return part.startswith("_") and not part.startswith("__")


def unexplained(found, allowed=WHITE_BOX):
    """The private names of ``found`` that no (module, name prefix) pair of ``allowed`` explains, and the pairs
    of ``allowed`` that explain none."""
    def explains(pair, mod, full):
        return mod == pair[0] and (full == pair[1] or full.startswith(pair[1] + "."))

    bad = sorted(f"{mod}: {full}" for mod, _, full in found if not any(explains(p, mod, full) for p in allowed))
    stale = sorted(p for p in allowed if not any(explains(p, mod, full) for mod, _, full in found))
    return bad, stale


def test_no_private_name_is_imported_across_packages():
    bad, stale = unexplained(private_imports(project_modules(), PACKAGES))
    assert not bad, f"private names imported across packages (give them a public home): {bad}"
    assert not stale, f"WHITE_BOX entries no longer used: {stale}"


def test_the_private_import_check_finds_each_form(tmp_path):
    _write(tmp_path, {"lib/__init__.py": "", "lib/_impl.py": "X = 1\n", "lib/api.py": "_Y = 2\nZ = 3\n",
                      "app/__init__.py": "",
                      "app/a.py": "from lib._impl import X\n",
                      "app/b.py": "import lib._impl\n",
                      "app/c.py": "from lib.api import _Y\n",
                      "app/d.py": "import lib.api as api\nprint(api._Y)\n",
                      "app/e.py": "from lib import api\nfrom lib.api import Z\nprint(api.Z, Z)\n",
                      "app/test_f.py": "from lib._impl import X\n",
                      "lib/g.py": "from lib._impl import X\nfrom lib.api import _Y\n"})
    found = private_imports(project_modules(tmp_path, ("app", "lib")), ("app", "lib"))
    assert sorted(m for m, _, _ in found) == ["app.a", "app.b", "app.c", "app.d"]
    assert ("app.d", "lib.api", "lib.api._Y") in found
    assert unexplained(found, {("app.a", "lib._impl"), ("app.b", "lib"), ("app.c", "lib.api"), ("app.e", "lib")}) == (
        ["app.d: lib.api._Y"], [("app.e", "lib")])


# no test module imports another (issue 39 item 7): what several test modules share lives in a helper module
# (tests/_*.py, or paper_checks._compare for the statistical thresholds of both suites)


def imports_of_test_modules(paths):
    """``(file, line, module)`` for every import of a test module (``test_*``, ``tests.test_*``) by one of the
    files ``paths``, at module level or inside a function: ``import test_x``, ``from test_x import y``,
    ``from tests.test_x import y``, ``from tests import test_x``, ``from . import test_x``."""
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(Path(path).read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                names = [base] + [f"{base}.{a.name}".lstrip(".") for a in node.names]
            else:
                continue
            for name in names:
                if any(part.startswith("test_") for part in name.split(".")):
                    out.append((str(path), node.lineno, name))
                    break
    return out


def test_no_test_module_imports_another():
    paths = sorted({*ROOT.glob("tests/*.py"), *ROOT.glob("paper_checks/*.py")})
    assert len(paths) > 50
    found = imports_of_test_modules(paths)
    assert not found, f"test modules imported (move what they share into a helper module): {found}"


def test_the_test_module_check_finds_each_form(tmp_path):
    forms = {"a.py": "import test_x\n", "b.py": "from test_x import y\n", "c.py": "from tests.test_x import y\n",
             "d.py": "from tests import test_x\n", "e.py": "def f():\n    import test_x as t\n",
             "f.py": "from . import test_x\n",
             "ok.py": "import _procs\nfrom tests._procs import run_group\nfrom paper_checks import _compare\n"
                      "import contest_x\nfrom tests import conftest\n"}
    _write(tmp_path, forms)
    found = imports_of_test_modules(sorted(tmp_path / name for name in forms))
    assert sorted(Path(f).name for f, _, _ in found) == ["a.py", "b.py", "c.py", "d.py", "e.py", "f.py"]
