"""The feature-kind registry (issue 18): lookups that never fall through, every declared hook registered by
its layer, one map for every backend, one keyword everywhere, and the import architecture."""

import ast
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from mpmath import mp

import montecarlo as mc
import theory
from theory import feature_kinds as fk
from theory.feature_kinds import MissingKindHookError, UnknownKindError

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_lookups_name_the_kinds():
    assert theory.feature_kind("hyperbolic").width == 2
    with pytest.raises(UnknownKindError, match="'prf', 'rff', 'hyperbolic'"):
        fk.get("favor")
    with pytest.raises(TypeError, match="feature-kind name"):
        fk.get(None)
    with pytest.raises(MissingKindHookError, match="'prf', 'hyperbolic'"):
        fk.check_kind("rff", positive=True)
    with pytest.raises(MissingKindHookError, match="'rff'"):
        fk.hook("rff", "log_features")
    with pytest.raises(ValueError, match="kind='rff'"):
        fk.check_kernel("rff")
    with pytest.raises(ValueError, match="for kind='rff'"):
        fk.kernel_c("rff", "softmax")
    with pytest.raises(MissingKindHookError, match="does not declare"):
        fk.register("rff", "log_features", lambda *a: None)
    with pytest.raises(ValueError, match="already registered"):
        fk.register("prf", "statistic", lambda proj, xp, w_sq=None, d=None: proj)


def test_every_declared_hook_is_registered():
    """theory registers its layer's hooks, montecarlo (through its loader) its own: nothing declared is missing."""
    for rec in fk.RECORDS:
        for name in rec.closed_forms + rec.maps:
            assert callable(fk.hook(rec.name, name)), (rec.name, name)
        assert set(rec.kernels) <= set(fk.KERNELS) and rec.width >= 1
        assert rec.has("log_features") == rec.positive and rec.has("features") != rec.positive


@pytest.mark.parametrize("kind", [k for k in mc.KINDS if fk.get(k).positive and not fk.get(k).has("prepare")])
def test_one_map_for_numpy_and_torch(kind):
    """The record's log-feature map gives the same numbers on numpy and torch (autograd through it)."""
    torch = pytest.importorskip("torch")
    import array_api_compat

    rec = fk.get(kind)
    rng = np.random.default_rng(0)
    X, W = rng.standard_normal((5, 4)) * 0.3, mc.sample_weights("orthogonal", 4, 6, rng=1)
    xt = torch.tensor(X, requires_grad=True)
    wt = torch.tensor(W)
    proj = xt @ wt.T
    sq = (xt * xt).sum(-1, keepdim=True)
    w_sq = (wt * wt).sum(-1) if rec.needs_w_sq() else None
    params = {"A": -0.1} if "A" in rec.parameters else {}
    ref = mc.log_features(X, W, kind, **params)
    out = fk.hook(kind, "log_features")(proj, sq, 6, 1.0, array_api_compat.array_namespace(proj), w_sq=w_sq, d=4,
                                        **params)
    assert np.allclose(out.detach().numpy(), ref, rtol=1e-13, atol=1e-13)
    out.exp().sum().backward()
    assert xt.grad is not None and torch.isfinite(xt.grad).all()


@pytest.mark.parametrize("kind", fk.names(has="linear_log_features"))
def test_linear_form_is_the_log_feature_map(kind):
    """``linear_log_features`` (rows, constants) gives x @ rows.T + bias - c|x|^2 equal to the record's
    ``log_features`` on numpy and torch (a float A, and for oprf a 0-d torch A as the causal module's tracked
    one); one A per sequence (an array) has no shared rows: None.  Power: another A's rows differ."""
    torch = pytest.importorskip("torch")
    import array_api_compat

    rec = fk.get(kind)
    rng = np.random.default_rng(3)
    X, W = rng.standard_normal((7, 5)) * 0.4, rng.standard_normal((6, 5))
    params = {"A": -0.15} if "A" in rec.parameters else {}
    for x, w, c in ((X, W, 1.0), (torch.tensor(X), torch.tensor(W), 0.5)):
        xp = array_api_compat.array_namespace(x)
        w_sq = (w * w).sum(-1) if rec.needs_w_sq() else None
        sq = (x * x).sum(-1, keepdims=True) if xp is not torch else (x * x).sum(-1, keepdim=True)
        ref = fk.hook(kind, "log_features")(x @ w.T, sq, 6, c, xp, w_sq=w_sq, d=5, **params)
        rows, bias = fk.hook(kind, "linear_log_features")(w, 6, xp, w_sq=w_sq, d=5, **params)
        assert tuple(rows.shape) == (6 * rec.width, 5)
        got = x @ rows.T + bias - c * sq
        assert np.allclose(np.asarray(got), np.asarray(ref), rtol=1e-13, atol=1e-13)
    if params:
        wt = torch.tensor(W)
        w_sq = (wt * wt).sum(-1)
        lin = fk.hook(kind, "linear_log_features")
        xp = array_api_compat.array_namespace(wt)
        rows, bias = lin(wt, 6, xp, w_sq=w_sq, d=5, A=torch.tensor(-0.15, dtype=torch.float64))
        rows_f, bias_f = lin(wt, 6, xp, w_sq=w_sq, d=5, **params)
        assert torch.allclose(rows, rows_f, rtol=1e-15) and torch.allclose(bias, bias_f, rtol=1e-15)
        assert lin(wt, 6, xp, w_sq=w_sq, d=5, A=torch.full((3, 1, 1), -0.15, dtype=torch.float64)) is None
        other, _ = lin(wt, 6, xp, w_sq=w_sq, d=5, A=-0.05)
        assert not torch.allclose(other, rows_f, rtol=1e-3)


def test_kernel_mse_of_the_named_forms():
    """prf_mse / mse_ratio / rff_mse / rff_mse_ratio are kernel_mse / kernel_mse_ratio with their kind; the
    arguments each kind needs are checked (RFFs: no norms; positive kinds: both)."""
    with mp.workdps(30):
        assert theory.prf_mse("simplex", 8, 1, x_norm=0.5, y_norm=0.5, m=5) == theory.kernel_mse(
            "simplex", 8, 1, x_norm=0.5, y_norm=0.5, m=5)
        assert theory.rff_mse_ratio("simplex", "iid", 8, 2) == theory.kernel_mse_ratio("simplex", "iid", 8, 2,
                                                                                        kind="rff")
        with pytest.raises(ValueError, match="x_norm must be None for kind='rff'"):
            theory.kernel_mse("simplex", 8, 1, kind="rff", x_norm=0.5)
        with pytest.raises(ValueError, match="x_norm and y_norm are required"):
            theory.kernel_mse("simplex", 8, 1, kind="hyperbolic")
        with pytest.raises(ValueError, match="kind must be one of"):
            theory.kernel_mse("simplex", 8, 1, kind="trig")
        assert theory.kind_couplings("prf") == theory.registry.names(has="prf_conformity")


def test_mean_conformity_of_every_kind_against_its_definition():
    """mean_conformity = (P rho_c + (m(m-1) - P) (E b)^2) / (m(m-1)) with the closed-form pair term."""
    with mp.workdps(30):
        d, m, v = 4, 10, mp.mpf("0.7")
        p = theory.coupled_pairs(d, m)
        total = m * (m - 1)
        prf = (p * theory.conformity("simplex", d, v) + (total - p) * mp.exp(v * v)) / total
        assert abs(theory.mean_conformity("simplex", d, v, m=m) - prf) < mp.mpf(10) ** -27
        hyp = (p * theory.hyperbolic.hyperbolic_pair_term("simplex", d, v) + (total - p) * mp.exp(v * v)) / total
        assert abs(theory.mean_conformity("simplex", d, v, m=m, kind="hyperbolic") - hyp) < mp.mpf(10) ** -27


def _imports(path):
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the package
                pkg = path.parent.relative_to(ROOT).parts
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ((base,) if base else ()))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return out


def test_theory_never_imports_montecarlo():
    for path in (ROOT / "theory").glob("*.py"):
        bad = {m for m in _imports(path) if m.split(".")[0] in ("montecarlo", "figures", "paper_checks")}
        assert not bad, (path.name, bad)


def test_montecarlo_layers_have_no_circle():
    """couplings -> features -> estimators -> experiments: a lower layer never imports a higher one."""
    order = ["couplings", "features", "estimators", "experiments"]
    for i, low in enumerate(order[:-1]):
        path = ROOT / "montecarlo" / f"{low}.py"
        higher = {f"montecarlo.{h}" for h in order[i + 1:]}
        assert not {m for m in _imports(path) if any(m == h or m.startswith(h + ".") for h in higher)}, low


def test_import_montecarlo_loads_no_closed_form():
    """``import montecarlo`` loads only theory's shared layer (no closed form, no scipy.stats, no sympy; mpmath
    itself is loaded by theory.errors, whose failures are mpmath's NoConvergence)."""
    code = ("import sys, montecarlo; print(sorted(m for m in sys.modules if m.startswith('theory.')));"
            "print('scipy.stats' in sys.modules, 'sympy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600,
                         check=True).stdout.splitlines()
    assert eval(out[0]) == ["theory.errors", "theory.feature_kinds", "theory.registry", "theory.validation"]
    assert out[1] == "False False"


def test_one_copy_of_the_prf_formula():
    """The log-feature formulas w.x - c|x|^2 - log(m)/2 live in the feature-kind modules only (the prf record's
    hook in montecarlo.features, and one module per further kind): the experiments, the torch module, the
    scikit-learn transformers, the figures and the benchmarks hold no copy (6 copies before issue 18)."""
    kind_modules = {"montecarlo/features.py", "montecarlo/hyperbolic.py", "montecarlo/oprf.py", "montecarlo/sderf.py"}
    hits = []
    for pkg in ("montecarlo", "figures"):  # (benchmarks/bench_kinds.py writes the formula out as its baseline)
        for path in (ROOT / pkg).rglob("*.py"):
            text = path.read_text()
            for needle in ("0.5 * math.log(m)", "0.5 * np.log(m)", "0.5 * math.log(2 * m)", "np.log(m) / 2",
                           "math.log(m) / 2"):
                if needle in text:
                    hits.append(str(path.relative_to(ROOT)))
    assert set(hits) <= kind_modules and "montecarlo/features.py" in hits, hits


# ---------------------------------------------------------------------------
# Tests added against the surviving formula mutants of the feature-kind code (issue 22 item 5,
# docs/guide/mutation.rst).
#
# Each class is the addition to one target's mutation command (tests/mutation_targets.py): ``TestRegistry``
# (theory/feature_kinds.py), ``TestHyperbolicMap`` (montecarlo/hyperbolic.py), ``TestOprfMap``
# (montecarlo/oprf.py), ``TestHyperbolicTheory`` (theory/hyperbolic.py), ``TestOprfTheory`` (theory/oprf.py),
# ``TestKernelMse`` (the kind hooks of theory/mse.py).  Each test compares two independent computations (a formula
# written out here, brute force over pairs, numerical differentiation, another route to the same limit, a
# certified ball) and shows its power on a wrong alternative where one exists.


class TestRegistry:
    """theory/feature_kinds.py: each record's width and kernels are what its map produces and estimates."""

    @pytest.mark.parametrize("kind", fk.names())
    def test_record_width_is_the_map_width(self, kind):
        """width * m features per batch row, for every kind (the map's output shape, not the record, decides)."""
        rec = fk.get(kind)
        X = np.random.default_rng(0).standard_normal((3, 4)) * 0.3
        W = mc.sample_weights("orthogonal", 4, 5, rng=1)
        params = {"A": {"A": -0.1}, "a": {"a": np.full(4, -0.1)}}.get((rec.parameters or ("",))[0], {})
        assert mc.random_features(X, W, kind=kind, kernel=rec.kernels[0], **params).shape == (3, rec.width * 5)


@pytest.mark.parametrize("kind", fk.names())
def test_load_imports_every_hook_of_the_kind_at_once(kind, monkeypatch):
    """``load(kind)`` registers every hook the record declares (both layers: montecarlo is imported here), so that
    no later ``hook`` call imports anything (PRFAttention and the attention scan's worker threads call it first;
    before, each imported only the hooks it named, and the scan imported montecarlo.oprf by hand).  Power: the
    spy sees the imports when the registry is emptied."""
    rec = fk.load(kind)
    assert rec is fk.get(kind)
    imports = []
    monkeypatch.setattr(fk, "_import_layer", lambda r, layer: imports.append(layer))
    for name in fk.HOOKS:
        if rec.has(name):
            assert callable(fk.hook(kind, name))
    assert imports == []
    declared = [name for name in fk.HOOKS if rec.has(name)]
    monkeypatch.setattr(fk, "_HOOKS", {})
    with pytest.raises(fk.MissingKindHookError):
        fk.hook(kind, declared[0])
    assert imports == [fk.HOOKS[declared[0]]]
    with pytest.raises(fk.UnknownKindError):
        fk.load("no_such_kind")
