"""Issue 22 (hardening), montecarlo items: non-finite input to the transforms, the SimRFs+
tolerance's dtype, and the coupling lists of montecarlo.couplings (issue 18)."""

import re
import sys

import numpy as np
import pytest

import montecarlo as mc
import theory.registry

couplings = sys.modules["montecarlo.couplings"]

try:
    import torch
except ImportError:  # pragma: no cover - the torch extra is optional
    torch = None


# ---------------------------------------------------------------------------
# item 4: fwht and simplex_apply refuse NaN / inf instead of returning NaN


@pytest.mark.parametrize("func", [mc.fwht, mc.simplex_apply])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_transforms_refuse_non_finite_input(func, bad):
    x = np.arange(8.0)
    x[3] = bad
    with pytest.raises(ValueError, match=r"x must be finite: found 1 NaN or inf"):
        func(x)
    with pytest.raises(ValueError, match=r"x must be finite: found 4 NaN or inf"):
        func(np.full(4, np.nan))
    if torch is not None:
        with pytest.raises(ValueError, match=r"x must be finite"):
            func(torch.full((2, 4), float("nan"), dtype=torch.float64))


def test_transforms_still_compute_finite_input():
    """The same calls on finite input give the closed forms (Sylvester H_4 / 2, Algorithm 1 = dense S)."""
    x = np.array([0.5, -1.0, 2.0, 3.0])
    h = np.array([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]]) / 2.0
    assert np.allclose(mc.fwht(x), h @ x, atol=1e-15)
    assert np.allclose(mc.simplex_apply(x), mc.simplex_matrix(4) @ x, atol=1e-15)


def test_finiteness_is_checked_once_per_public_call_and_never_inside_the_samplers(monkeypatch):
    """One isfinite pass per public call; the HD-products and Algorithm 1 inside the samplers
    (arrays they built themselves) are not re-checked: counted, not timed."""
    calls = []
    real = couplings._check_finite

    def counting(arr, xp, name):
        calls.append(name)
        return real(arr, xp, name)

    monkeypatch.setattr(couplings, "_check_finite", counting)
    mc.fwht(np.ones((3, 16)))
    assert calls == ["x"]
    calls.clear()
    mc.simplex_apply(np.ones((3, 16)))
    assert calls == ["x"]
    calls.clear()
    for coupling in ("fast_orthogonal", "fast_simplex"):
        proj = mc.sample_projection(coupling, 12, 40, rng=0)
        proj.project(np.ones((5, 12)))
        mc.sample_weights(coupling, 12, 40, rng=0)
    assert calls == []


# ---------------------------------------------------------------------------
# item 3: simplex_plus_tolerance names its argument


@pytest.mark.parametrize("dtype", [int, bool, complex, None, "abc", np.int32, np.complex128]
                         + ([torch.int64, torch.bool] if torch is not None else []))
def test_simplex_plus_tolerance_refuses_non_float_dtypes(dtype):
    with pytest.raises(TypeError, match=r"dtype must be a real floating dtype \(float16, float32 or float64"):
        mc.simplex_plus_tolerance(dtype)


def test_simplex_plus_tolerance_of_float_dtypes():
    assert mc.simplex_plus_tolerance(np.float64) == couplings.SIMPLEX_PLUS_TOL
    eps32 = float(np.finfo(np.float32).eps)
    for dt in ("float32", np.float32) + ((torch.float32,) if torch is not None else ()):
        assert mc.simplex_plus_tolerance(dt) == couplings.SIMPLEX_PLUS_DEFAULT_TOL_EPS * eps32


# ---------------------------------------------------------------------------
# item 8: the coupling lists cannot go stale


def test_documented_couplings_are_registered_and_the_parameter_list_is_the_registry():
    """The module docstring describes the samplers defined in montecarlo.couplings; every name it
    describes must be a registered coupling, and sample_weights' ``coupling`` parameter points at
    the registry instead of enumerating a set that went stale (it lacked 'pnc_orthogonal')."""
    registered = set(theory.registry.names())
    described = set(re.findall(r'``"([a-z_]+)"``', couplings.__doc__))
    assert {"iid", "orthogonal", "simplex", "simplex_plus", "fast_orthogonal", "fast_simplex"} <= described
    assert described <= registered
    param = couplings.sample_weights.__doc__.split("coupling :", 1)[1].split("\n    d :", 1)[0]
    assert "theory.registry.names()" in param
    assert not re.search(r"\{'iid'", param)  # no hand-written closed set
    # every registered coupling samples through sample_weights (pnc_orthogonal included)
    for name in registered:
        w = mc.sample_weights(name, 4, 4, rng=1)
        assert w.shape == (4, 4) and np.all(np.isfinite(w))


def test_removed_dead_helpers_stay_removed():
    """Issue 18: these private helpers had no caller anywhere in the tree."""
    import figures.style
    import theory._checks

    assert not hasattr(couplings, "_haar_rows")
    assert not hasattr(theory._checks, "round_result")
    assert not hasattr(figures.style, "theory_legend_handle")


def test_round_two_inputs_are_refused_by_name():
    """Found by an exploration run (each passed silently before): simplex_apply and fwht computed booleans as
    numbers, returned complex output for complex input, and met strings with numpy's own ufunc error; now an
    ArgumentTypeError naming x (integers still work: power).  Finite X whose squared norm overflows gave -inf
    log-features, NaN stabilised features, and PositiveRandomFeatures.log_transform returned -inf although
    documented finite: now a ValueError saying to scale X down; RFFs too since issue 38 (their phases w^T z are
    beyond resolution there, and at entries near 1e308 the projections overflowed to inf: NaN features)."""
    torch = pytest.importorskip("torch")
    from montecarlo._checks import ArgumentTypeError
    from montecarlo.kernel_approximation import PositiveRandomFeatures, RandomFourierFeatures

    for bad, what in ((np.array([True, False, True, False]), "booleans"), (np.array([1 + 1j, 2, 3, 4]), "complex"),
                      (np.array(["a", "b", "c", "d"]), "strings"), (torch.tensor([True, False, True, False]),
                                                                    "booleans")):
        for fn in (mc.simplex_apply, mc.fwht):
            with pytest.raises(ArgumentTypeError, match=f"x must hold real numbers.*{what}"):
                fn(bad)
    np.testing.assert_allclose(mc.fwht(np.array([1, 2])), np.array([3.0, -1.0]) / np.sqrt(2.0))
    np.testing.assert_allclose(mc.simplex_apply(np.array([1, 2, 3])), mc.simplex_apply(np.array([1.0, 2.0, 3.0])))

    W = mc.sample_weights("simplex", 8, 16, rng=0)
    huge = np.full((2, 8), 1e160)
    for call in (lambda: mc.log_features(huge, W), lambda: mc.prf_features(huge, W, stabilize="row"),
                 lambda: mc.random_features(huge, W, "hyperbolic")):
        with pytest.raises(ValueError, match="squared norm overflows float64"):
            call()
    prf = PositiveRandomFeatures(n_components=16, random_state=0).fit(huge)
    for call in (prf.log_transform, prf.transform):
        with pytest.raises(ValueError, match="squared norm .times 2 gamma. overflows float64"):
            call(huge)
    rff = RandomFourierFeatures(n_components=4, random_state=0).fit(huge)
    for call in (lambda: mc.random_features(huge, W, "rff"), lambda: rff.transform(huge)):
        with pytest.raises(ValueError, match="squared norm .*overflows float64"):
            call()
    assert np.isfinite(mc.log_features(np.full((2, 8), 1e150), W)).all()
    assert np.isfinite(mc.random_features(np.full((2, 8), 1e150), W, "rff")).all()


def test_round_two_api_findings():
    """Found by an exploration run of the Python APIs (each failed before): the SDERF estimators refused the
    torch.Generator their docs accept (as kernel_estimate takes it; a numpy backend still refuses it by name);
    norm_coupling's stratified quadrature allocated (d, nodes) quantile grids without the budget (numpy's
    MemoryError for 9 GiB at d = 3e6) and returned inf / NaN where the conformity and the MSEs overflow float64;
    optimise_directions met a start with zero rows with a NaN warning and an error about 'vectors'.  Power: the
    same calls at ordinary arguments return finite values."""
    torch = pytest.importorskip("torch")
    from montecarlo import norm_coupling as nc, optimum as op, sderf
    from montecarlo._checks import AllocationError

    x, y = np.array([0.1, 0.2, 0.3]), np.array([0.0, -0.1, 0.2])
    got = sderf.sderf_kernel_estimate("simplex", x, y, 3, 200, np.zeros(3), rng=torch.Generator().manual_seed(1),
                                      xp="torch")
    again = sderf.sderf_kernel_estimate("simplex", x, y, 3, 200, np.zeros(3), rng=torch.Generator().manual_seed(1),
                                        xp="torch")
    assert got.mean == again.mean and abs(got.z(mc.exact_kernel(x, y))) < 4.5
    assert np.isfinite(sderf.sderf_empirical_mse("simplex", x, y, 3, 50, np.zeros(3), xp="torch",
                                                 rng=torch.Generator().manual_seed(2)).mean)
    with pytest.raises(ValueError, match="for the numpy backend"):
        sderf.sderf_kernel_estimate("simplex", x, y, 3, 50, np.zeros(3), rng=torch.Generator())

    with pytest.raises(AllocationError, match="stratified quadrature"):
        nc.conformity(3_000_000, 1.0, "stratified")
    with pytest.raises(ValueError, match="overflows float64"):
        nc.conformity(4, 60.0, "iid")
    with pytest.raises(ValueError, match="overflows float64"):
        nc.mse_ratio_to_simplex(4, 200.0, "antithetic")
    assert np.isfinite(nc.conformity(6, 1.0, "stratified")) and 0 < nc.mse_ratio_to_simplex(6, 1.0, "stratified")

    with pytest.raises(ValueError, match=r"starts\[0\] has zero rows"):
        op.optimise_directions(np.ones(4), 1.0, starts=[np.zeros((4, 4))], n_random=0)
    with pytest.raises(ValueError, match=r"starts\[0\] must have m = 4 rows"):
        op.optimise_directions(np.ones(4), 1.0, starts=[np.ones((3, 4))], n_random=0)
    start = np.eye(4)
    assert np.isfinite(op.optimise_directions(np.ones(4), 1.0, starts=[start], n_random=0).value)
