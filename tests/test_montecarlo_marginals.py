"""Marginal distribution of the rows: KS tests against N(0, 1), with power against wrong samplers.

Statistical design
------------------
Each KS test uses one row index from each of n independent blocks, so its
samples are i.i.d. and scipy's p-value is valid.  Within one test function
the comparisons are Bonferroni-corrected so that the probability of *any*
false alarm in the function (all its parametrised cases together) is at most
``FAMILY_ALPHA`` = 1e-4.  Power is shown by running the same comparison on
deliberately wrong samplers and requiring it to reject at the same threshold.
All seeds are fixed, so the outcome is deterministic; the probabilities
describe how unlucky the chosen seeds would have to be.
"""

import numpy as np
import pytest
from scipy import stats

import montecarlo as mc
from montecarlo._backend import Random, namespace
from montecarlo.diagnostics import ks_marginals, standard_directions

FAMILY_ALPHA = 1e-4

EXACT_CASES = [(c, d) for c in mc.EXACT_COUPLINGS for d in (3, 16)] + [("orthogonal", 64), ("simplex", 64)]


def _rows(d):
    return list(range(d)) if d <= 3 else [0, 1, d - 1]


def _n_tests(d):
    return len(_rows(d)) * len(standard_directions(d))


N_EXACT_TESTS = sum(_n_tests(d) for _, d in EXACT_CASES)


@pytest.mark.filterwarnings("ignore:SimRFs\\+ update")
@pytest.mark.parametrize("coupling,d", EXACT_CASES)
def test_exact_couplings_are_marginally_gaussian(coupling, d):
    """Every exact coupling: w_i . u ~ N(0, 1) for axes, the diagonal and a random u (all rows tested).

    False-alarm probability: <= 1e-4 over all cases of this function (Bonferroni).
    simplex_plus at d = 3 includes blocks stopped at the pass cap (near-degenerate norms); they are
    still exact samples (Haar-rotated), which this test also confirms.
    """
    n = 4000 if d < 64 else 1500
    res = ks_marginals(coupling, d, n, rows=_rows(d), rng=1000 + d)
    alpha = FAMILY_ALPHA / N_EXACT_TESTS
    worst = min(res, key=lambda r: r[3])
    assert worst[3] > alpha, f"{coupling} d={d}: row {worst[0]} on {worst[1]}: KS={worst[2]:.4f}, p={worst[3]:.2e}"


def _unsigned_qr_blocks(coupling, d, n, seed):
    """The common bug: Q from LAPACK QR used without the sign correction (W = D S Q^T, Performer style)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, d, d)))
    rows = np.swapaxes(q, -1, -2)
    if coupling == "simplex":
        rows = mc.simplex_apply(rows, axis=-2)
    norms = np.sqrt(rng.chisquare(d, (n, d)))
    return norms[:, :, None] * rows


def _fixed_norm_blocks(coupling, d, n, seed):
    """Correct directions but all norms sqrt(d) instead of chi_d."""
    w = mc.sample_weights(coupling, d, d, rng=seed, n_draws=n)
    return np.sqrt(d) * w / np.linalg.norm(w, axis=-1, keepdims=True)


@pytest.mark.parametrize("coupling", ["orthogonal", "simplex"])
@pytest.mark.parametrize("wrong,d", [("unsigned_qr", 3), ("unsigned_qr", 16), ("fixed_norms", 3)])
def test_wrong_samplers_fail_the_same_test(coupling, wrong, d):
    """Power: the identical KS battery at the identical threshold rejects both wrong samplers.

    Expected statistics: unsigned QR puts row 0's first coordinate always < 0 (KS ~ 0.5 on e_1
    for orthogonal); fixed norms at d = 3 make w . u uniform on [-sqrt 3, sqrt 3] (KS ~ 0.057).
    """
    n = 20000 if wrong == "fixed_norms" else 4000
    make = _unsigned_qr_blocks if wrong == "unsigned_qr" else _fixed_norm_blocks
    w = make(coupling, d, n, seed=7)
    res = ks_marginals(coupling, d, n, rows=_rows(d), weights=w)
    alpha = FAMILY_ALPHA / N_EXACT_TESTS
    assert min(r[3] for r in res) < alpha
    # and the correct sampler at the same n and seed passes
    good = ks_marginals(coupling, d, n, rows=_rows(d), rng=7)
    assert min(r[3] for r in good) > FAMILY_ALPHA / (len(good) * 6)


def test_unsigned_qr_bias_is_the_lapack_sign_convention():
    """LAPACK's Householder QR fixes Q[0, 0] < 0 (the bias the sign correction removes)."""
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((500, 5, 5)))
    assert np.all(q[:, 0, 0] < 0)
    h = mc.haar_orthogonal(500, 5, rng=0)
    frac = np.mean(h[:, 0, 0] < 0)
    assert 0.3 < frac < 0.7  # binomial(500, 1/2): |frac - 0.5| > 0.2 has probability < 1e-18


@pytest.mark.parametrize("df", [1, 2, 3, 16, 64])
def test_marsaglia_tsang_chi_sampler(df):
    """The device chi sampler (used by torch/cupy), run on numpy, is chi_df; power: chi_{df+1} is rejected.

    Two KS tests per df, 5 dfs: per-test alpha 1e-5 (family 1e-4).
    """
    rnd = Random(5 + df, namespace("numpy"), "cpu", np.float64)
    x = rnd.chi(df, (20000,), method="marsaglia_tsang")
    assert stats.kstest(x, stats.chi(df).cdf).pvalue > 1e-5
    assert stats.kstest(x, stats.chi(df + 1).cdf).pvalue < 1e-5


def test_householder_route_marginals():
    """The Householder-product Haar route gives Gaussian rows too (d = 5, all rows, 4 directions)."""
    res = ks_marginals("orthogonal", 5, 4000, rows=range(5), rng=3, haar_route="householder")
    assert min(r[3] for r in res) > FAMILY_ALPHA / len(res)
    res = ks_marginals("simplex", 5, 4000, rows=range(5), rng=4, haar_route="householder")
    assert min(r[3] for r in res) > FAMILY_ALPHA / len(res)


def test_fast_variants_are_only_approximately_gaussian():
    """App. B.2 HD-products: fast_orthogonal at d = 16 is detectably non-Gaussian (KS ~ 0.07 measured);
    fast_simplex at d = 64 is within 0.02 of N(0, 1) in KS distance.

    First check: the statistic would exceed 0.03 for an exact sampler at n = 20000 with probability
    ~ 2e-8 per test. Second: an exact sampler at n = 20000 exceeds 0.02 with probability ~ 2e-7 per
    test (12 tests).
    """
    res = ks_marginals("fast_orthogonal", 16, 20000, rows=[0, 1, 15], rng=5)
    assert max(r[2] for r in res) > 0.03
    res = ks_marginals("fast_simplex", 64, 20000, rows=[0, 1, 63], rng=6)
    assert max(r[2] for r in res) < 0.02
