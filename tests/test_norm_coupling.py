"""montecarlo.norm_coupling: coupled chi_d norms inside a simplex block (beyond the paper).
Monte Carlo comparisons at |z| <= 4.5 (6.8e-6 each; 8 of them: 5.4e-5 family-wise);
KS tests at level 1e-6 per test."""

import numpy as np
import pytest
from mpmath import mp
from scipy import stats

import montecarlo as mc
import theory
from montecarlo import norm_coupling as nc
from paper_checks._compare import Z_CRIT


@pytest.mark.parametrize("kind", nc.KINDS)
def test_norms_are_marginally_chi(kind):
    w = nc.coupled_norms(5, 40_000, kind, rng=1)
    for i in (0, 1, 4):
        assert stats.kstest(w[:, i], stats.chi(5).cdf).pvalue > 1e-6
    if kind == "equal":
        assert np.allclose(w[:, 0], w[:, 3])
    if kind == "antithetic":
        u0, u1 = stats.chi.cdf(w[:, 0], 5), stats.chi.cdf(w[:, 1], 5)
        assert np.allclose(u0 + u1, 1)


@pytest.mark.parametrize("kind", nc.KINDS)
def test_rows_are_marginally_gaussian(kind):
    W = nc.sample_norm_coupled_weights(6, 6, kind, rng=2, n_draws=20_000)
    res = mc.diagnostics.ks_marginals("simplex", 6, 20_000, weights=W)
    assert min(r[3] for r in res) > 1e-6
    # power: the same test rejects rows whose norms are all sqrt(d)
    fixed = W / np.linalg.norm(W, axis=-1, keepdims=True) * np.sqrt(6)
    assert min(r[3] for r in mc.diagnostics.ks_marginals("simplex", 6, 20_000, weights=fixed)) < 1e-6


@pytest.mark.parametrize("kind", ["antithetic", "stratified", "equal", "iid"])
@pytest.mark.parametrize("d,v", [(6, 1.0), (16, 0.5)])
def test_conformity_quadrature_against_monte_carlo(kind, d, v):
    W = nc.sample_norm_coupled_weights(d, d, kind, rng=3, n_draws=100_000)
    vec = np.zeros(d)
    vec[0] = v
    b = np.exp(W @ vec)  # (n, d)
    s = b.sum(axis=1)
    per = (s * s - np.sum(b * b, axis=1)) / (d * (d - 1))
    z = (per.mean() - nc.conformity(d, v, kind)) / (per.std(ddof=1) / np.sqrt(per.size))
    assert abs(z) <= Z_CRIT, (kind, z)
    if kind == "equal" and d == 6:
        assert abs((per.mean() - nc.conformity(d, v, "iid")) / (per.std(ddof=1) / np.sqrt(per.size))) > Z_CRIT


def test_iid_closed_form_against_double_quadrature():
    with mp.workdps(20):
        for d, v in ((3, 0.8), (5, 1.5)):
            assert abs(nc._independent_quadrature(d, v) - float(theory.conformity("simplex", d, v))) < 1e-8


def test_small_v_expansion_equal_norms():
    """rho = 1 + v^2 (2d - 2 E[w_i w_j]/(d-1)) / (2d) + O(v^4); E[w_i w_j] = d for equal norms."""
    d, v = 6, 1e-3
    rho = nc.conformity(d, v, "equal")
    assert abs((rho - 1) / v ** 2 - (2 * d - 2 * d / (d - 1)) / (2 * d)) < 1e-4


def test_equal_norms_beat_simplex_at_small_v_and_d4_mse():
    """The headline of the study, by Monte Carlo MSE (independent of the quadrature):
    at d = 4, v = 0.25 equal norms give about 0.28 x the SimRF MSE."""
    d, v = 4, 0.25
    x = np.zeros(d)
    y = np.zeros(d)
    x[0], y[0] = v / 2, v / 2
    k = np.exp(-np.sum((x - y) ** 2) / 2)
    out = {}
    for kind in ("equal", "iid"):
        W = nc.sample_norm_coupled_weights(d, d, kind, rng=4, n_draws=400_000)
        khat = np.exp(W @ (x + y) - x @ x - y @ y).mean(axis=1)
        err = (khat - k) ** 2
        out[kind] = (err.mean(), err.std(ddof=1) / np.sqrt(err.size))
    ratio = out["equal"][0] / out["iid"][0]
    se = ratio * np.hypot(out["equal"][1] / out["equal"][0], out["iid"][1] / out["iid"][0])
    assert abs(ratio - nc.mse_ratio_to_simplex(d, v, "equal")) < Z_CRIT * se
    assert ratio < 0.5


def test_bad_input():
    with pytest.raises(ValueError, match="kind must be one of"):
        nc.coupled_norms(4, 10, "sobol")
    with pytest.raises(ValueError, match="d must be an integer >= 2"):
        nc.sample_norm_coupled_weights(1, 1, "iid")
    with pytest.raises(ValueError, match="v must be a finite real >= 0"):
        nc.conformity(4, -1.0, "equal")
