"""Monte Carlo estimators against the closed forms of ``theory``, with stated false-alarm probability and power.

Statistical design
------------------
Each comparison is a z-test, z = (estimate - closed form) / standard error
(or a two-sample z / KS test).  Within one test function (all its
parametrised cases together) comparisons are Bonferroni-corrected to a
family-wise false-alarm probability of ``FAMILY_ALPHA`` = 1e-4 under the
normal approximation: ``|z| < z_limit(k)`` with k the number of comparisons
(e.g. k = 30 gives 4.6).  The estimated quantities are averages of
log-normal-like variables; their z-scores are slightly left-skewed.  For the
heaviest-tailed case used (PRF MSE, iid, d = 3, v = 1, n = 2e5) 100 seeds
gave z with mean -0.16, standard deviation 1.00, range [-3.5, 1.9], so the
nominal rates are close.  Every test also shows power: the same comparison
against a wrong closed form or a wrong sampler must fail.  Seeds are fixed.
"""

import math

import array_api_compat.numpy as cnp
import numpy as np
import pytest
from mpmath import mp
from scipy import stats

import montecarlo as mc
import theory
from montecarlo._checks import AllocationError
from montecarlo.estimators import _Moments, _default_chunk
from paper_checks._compare import FAMILY_ALPHA, Z_CRIT, z_limit

def points(d, v, delta=0.3, seed=0):
    """x, y in R^d with |x + y| = v and |x - y| = 2 delta, in a random plane."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, 2)))
    e, f = q[:, 0], q[:, 1] if d > 1 else np.zeros(d)
    return v / 2 * e + delta * f, v / 2 * e - delta * f


def th(fn, *args, **kwargs):
    with mp.workdps(20):
        return float(fn(*args, **kwargs))


def prf_mse_theory(coupling, d, m, x, y, kernel="gaussian"):
    return th(theory.prf_mse, coupling, d, float(np.linalg.norm(x + y)), m=m, x_norm=float(np.linalg.norm(x)),
              y_norm=float(np.linalg.norm(y)), kernel=kernel)


# ---------------------------------------------------------------------------
# Unbiasedness (the real sampler: path="full")

#: (kind, target kernel) of every feature kind
KIND_KERNELS = [(kind, kernel) for kind in mc.KINDS for kernel in theory.feature_kind(kind).kernels]
UNBIASED_CASES = [(c, kind, k, d, m) for c in mc.EXACT_COUPLINGS for kind, k in KIND_KERNELS
                  for d, m in ((3, 7), (16, 16))]


@pytest.mark.filterwarnings("ignore:SimRFs\\+ update")
@pytest.mark.parametrize("coupling,kind,kernel,d,m", UNBIASED_CASES)
def test_kernel_estimates_are_unbiased(coupling, kind, kernel, d, m):
    """E[phi(x).phi(y)] = K(x, y) for every exact coupling and feature kind (m = 7 at d = 3: a truncated block).

    Family-wise false alarm 1e-4 over all cases (|z| < z_limit).
    """
    x, y = points(d, 0.9, seed=d)
    n = (8000 if coupling == "simplex_plus" else 20000) if d == 3 else 4000
    est = mc.kernel_estimate(coupling, x, y, m, n, kernel=kernel, kind=kind, rng=17, path="full")
    k = mc.exact_kernel(x, y, kernel)
    assert abs(est.z(k)) < z_limit(len(UNBIASED_CASES)), (est, k)


def _unsigned_qr_weights(d, n, seed):
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, d, d)))
    return np.sqrt(rng.chisquare(d, (n, d)))[:, :, None] * np.swapaxes(q, -1, -2)


def test_unsigned_qr_biases_prf_but_rff_hides_it():
    """Power: ORFs from QR without the sign correction (row 0's first coordinate always < 0) give a
    PRF estimate ~10% low for x, y along e_1, while the RFF estimate stays unbiased (cos is even).

    Three z-tests at family-wise 1e-4 (|z| < 4.26): the RFF one for the wrong sampler and the PRF one
    for the correct sampler must pass; the PRF one for the wrong sampler must fail.
    """
    d, n = 3, 20000
    x, y = np.array([0.6, 0.0, 0.0]), np.array([0.2, 0.0, 0.0])
    k = mc.exact_kernel(x, y)
    lim = z_limit(3)
    w = _unsigned_qr_weights(d, n, seed=3)  # (n, 3, 3)
    prf = np.exp(-x @ x - y @ y) * np.mean(np.exp(w @ (x + y)), axis=1)
    rff = np.mean(np.cos(w @ (x - y)), axis=1)
    z_prf = (prf.mean() - k) / (prf.std(ddof=1) / math.sqrt(n))
    z_rff = (rff.mean() - k) / (rff.std(ddof=1) / math.sqrt(n))
    assert z_prf < -lim
    assert abs(z_rff) < lim
    good = mc.kernel_estimate("orthogonal", x, y, 3, n, rng=4, path="full")
    assert abs(good.z(k)) < lim


# ---------------------------------------------------------------------------
# MSE and conformity against theory (fast isotropic path)

VS = (0.25, 0.6, 1.0)
MSE_CASES = [(c, d, v, d) for c in theory.PRF_COUPLINGS for d in (3, 16, 64) for v in VS] + [
    (c, 16, 0.6, 37) for c in theory.PRF_COUPLINGS]


@pytest.mark.parametrize("coupling,d,v,m", MSE_CASES)
def test_prf_mse_matches_theory(coupling, d, v, m):
    """Empirical PRF MSE (Gaussian kernel) vs theory.prf_mse (Thm 3.2) incl. m = 37 > d (ensembles).

    30 comparisons, family-wise false alarm 1e-4 (|z| < 4.62).  Power: the simplex estimate is
    also compared with the ORF closed form and must be rejected (the gap is 29 to 27000 se here).
    """
    x, y = points(d, v, seed=d + int(10 * v))
    est = mc.empirical_mse(coupling, x, y, m, 200_000, rng=1000 * d + int(100 * v) + m)
    expected = prf_mse_theory(coupling, d, m, x, y)
    assert abs(est.z(expected)) < z_limit(len(MSE_CASES)), (est, expected)
    if coupling == "simplex":
        assert abs(est.z(prf_mse_theory("orthogonal", d, m, x, y))) > z_limit(len(MSE_CASES))


@pytest.mark.parametrize("kernel", ["softmax"])
@pytest.mark.parametrize("coupling", theory.PRF_COUPLINGS)
def test_softmax_prf_mse_matches_theory(coupling, kernel):
    """Softmax-kernel PRF MSE vs theory.prf_mse(kernel='softmax'); 3 comparisons, false alarm 1e-4."""
    d = 8
    x, y = points(d, 0.7, delta=0.4, seed=1)
    est = mc.empirical_mse(coupling, x, y, d, 200_000, kernel=kernel, rng=5)
    assert abs(est.z(prf_mse_theory(coupling, d, d, x, y, kernel))) < z_limit(3)


CONF_CASES = [(c, d, v) for c in theory.PRF_COUPLINGS for d in (3, 16, 64) for v in (0.6, 1.0)]


@pytest.mark.parametrize("coupling,d,v", CONF_CASES)
def test_conformity_matches_theory_and_rejects_wrong_form(coupling, d, v):
    """Empirical RF-conformity vs theory.mean_conformity (Thm 4.3 for the paper's couplings, whose
    pairs are all alike; the pair average for couplings that mix pair kinds); power: vs the other
    couplings' forms.

    18 comparisons (family 1e-4, |z| < 4.5).  Power: every estimate must reject each other coupling's
    closed form whenever they differ by > 10 standard errors (simplex vs ORF at every (d, v) here).
    """
    est = mc.empirical_conformity(coupling, d, v, n_draws=200_000, rng=31 * d + int(10 * v))
    expected = th(theory.mean_conformity, coupling, d, v)
    lim = z_limit(len(CONF_CASES))
    assert abs(est.z(expected)) < lim, (est, expected)
    for other in theory.PRF_COUPLINGS:
        wrong = th(theory.mean_conformity, other, d, v)
        if other != coupling and abs(wrong - expected) > 10 * est.stderr:
            assert abs(est.z(wrong)) > lim
    if coupling == "simplex":  # the gap to ORFs is always resolved at this n
        assert abs(est.z(th(theory.conformity, "orthogonal", d, v))) > lim


def test_pair_moments_matrix():
    """E[b_i b_j] for m = 2d + 1 (d = 4): in-block pairs = rho_simplex, cross-block = e^{v^2},
    diagonal = e^{2 v^2}.  81 entries (family 1e-4 under dependence, Bonferroni); power: the
    in-block entries reject the cross-block value e^{v^2}.
    """
    d, m, v = 4, 9, 0.8
    est = mc.empirical_pair_moments("simplex", d, v, m=m, n_draws=100_000, rng=2)
    rho = th(theory.conformity, "simplex", d, v)
    block = np.arange(m) // d
    same = block[:, None] == block[None, :]
    expected = np.where(same, rho, math.exp(v * v))
    np.fill_diagonal(expected, math.exp(2 * v * v))
    z = (est.mean - expected) / est.stderr
    assert np.max(np.abs(z)) < z_limit(m * m)
    off_same = same & ~np.eye(m, dtype=bool)
    z_wrong = (est.mean - math.exp(v * v)) / est.stderr
    assert np.min(np.abs(z_wrong[off_same])) > z_limit(m * m)
    # the pair-averaged conformity is the ensemble formula of theory
    conf = mc.empirical_conformity("simplex", d, v, m=m, n_draws=100_000, rng=3)
    ens = th(theory.ensemble_conformity, rho, math.exp(v * v), d, m)
    assert abs(conf.z(ens)) < z_limit(2)


RFF_CASES = [(c, d, z) for c in theory.RFF_COUPLINGS for d in (3, 16) for z in (0.8, 1.5)]


@pytest.mark.parametrize("coupling,d,z", RFF_CASES)
def test_rff_conformity_and_mse_match_theory(coupling, d, z):
    """RFF conformity (theory.rff_conformity) and MSE (theory.rff_mse) for iid/ORF; 16 comparisons.

    Power: the ORF estimate rejects the iid closed form where they differ by > 10 se.
    """
    k = 2 * len(RFF_CASES)
    lim = z_limit(k)
    conf = mc.empirical_conformity(coupling, d, z, n_draws=200_000, kind="rff", rng=7 * d)
    expected = th(lambda c, dd, zz: theory.mean_conformity(c, dd, zz, kind="rff"), coupling, d, z)
    assert abs(conf.z(expected)) < lim
    if coupling == "orthogonal":
        wrong = th(theory.rff_conformity, "iid", d, z)
        if abs(wrong - expected) > 10 * conf.stderr:
            assert abs(conf.z(wrong)) > lim
    x, y = points(d, 0.5, delta=z / 2, seed=d)
    mse = mc.empirical_mse(coupling, x, y, d, 200_000, kind="rff", rng=11 * d)
    assert abs(mse.z(th(theory.rff_mse, coupling, d, z, m=d))) < lim


# ---------------------------------------------------------------------------
# Fast pointwise path vs full-matrix path

PATH_CASES = [(c, d) for c in mc.EXACT_COUPLINGS for d in (3, 16)] + [("simplex", 64)]


@pytest.mark.filterwarnings("ignore:SimRFs\\+ update")
@pytest.mark.parametrize("coupling,d", PATH_CASES)
def test_fast_path_agrees_with_full_path(coupling, d):
    """The O(d) isotropic path and the full Haar path give the same distribution of projections.

    Per case: two-sample KS on w_0.v and on (w_0 + w_1).v (the pair statistic carries the coupling),
    and a two-sample z-test of the MSE estimates.  9 cases x 3 = 27 comparisons, family 1e-4.
    """
    k = 3 * len(PATH_CASES)
    n = 6000 if d < 64 else 1500
    x, y = points(d, 0.8, seed=2)
    v = x + y
    fast = mc.pair_projections(coupling, v, d, n, rng=1, path="fast")
    full = mc.pair_projections(coupling, v, d, n, rng=2, path="full")
    assert stats.ks_2samp(fast[:, 0], full[:, 0]).pvalue > FAMILY_ALPHA / k
    assert stats.ks_2samp(fast[:, 0] + fast[:, 1], full[:, 0] + full[:, 1]).pvalue > FAMILY_ALPHA / k
    a = mc.empirical_mse(coupling, x, y, d, (4 if coupling == "simplex_plus" else 20) * n, rng=3, path="fast")
    b = mc.empirical_mse(coupling, x, y, d, n, rng=4, path="full")
    assert abs(a.mean - b.mean) / math.hypot(a.stderr, b.stderr) < z_limit(k)


def test_fast_path_power_wrong_geometry():
    """Power: the fast path of one coupling vs the full path of another is rejected (d = 3)."""
    d, n = 3, 6000
    v = np.array([0.8, 0.0, 0.0])
    fast_orth = mc.pair_projections("orthogonal", v, d, n, rng=1, path="fast")
    full_simp = mc.pair_projections("simplex", v, d, n, rng=2, path="full")
    assert stats.ks_2samp(fast_orth[:, 0] + fast_orth[:, 1],
                          full_simp[:, 0] + full_simp[:, 1]).pvalue < FAMILY_ALPHA / 27


def test_fast_couplings_pointwise_paths_agree():
    """For the HD couplings the 'fast' path (HD-product applied to v) and dense weights agree in distribution."""
    d = 12
    v = np.linspace(-0.3, 0.4, d)
    for c in mc.FAST_COUPLINGS:
        a = mc.pair_projections(c, v, 20, 5000, rng=1, path="fast")
        b = mc.pair_projections(c, v, 20, 5000, rng=2, path="full")
        assert stats.ks_2samp(a[:, 0] + a[:, 1], b[:, 0] + b[:, 1]).pvalue > FAMILY_ALPHA / 2


# ---------------------------------------------------------------------------
# Gram matrices


@pytest.mark.filterwarnings("ignore:SimRFs\\+ update")
def test_gram_estimate_unbiased_and_simplex_smaller_error():
    """Gram estimates are elementwise unbiased (4 couplings x 3 kernels x 16 entries, family 1e-4);
    power: the Gaussian-kernel estimate rejects the softmax Gram.  Sec. 5.2: the relative Frobenius
    error of SimRFs is below ORFs and IIDRFs (z > 4.26 each).
    """
    d, m = 5, 5
    X = np.random.default_rng(0).standard_normal((4, d)) * 0.25
    k = len(mc.EXACT_COUPLINGS) * len(KIND_KERNELS) * 16
    frob = {}
    for coupling in mc.EXACT_COUPLINGS:
        for kind, kernel in KIND_KERNELS:
            params = {"A": {"A": -0.1}, "a": {"a": np.full(d, -0.1)}}.get((theory.feature_kind(kind).parameters or ("",))[0], {})
            est, fr = mc.gram_estimate(coupling, X, m, 3000, kernel=kernel, kind=kind, rng=5, **params)
            exact = np.exp(X @ X.T) if kernel == "softmax" else np.exp(
                -0.5 * np.sum((X[:, None] - X[None]) ** 2, axis=-1))
            # (entries estimated without randomness, the diagonal of the kinds of z = x - y, have a standard error
            # of rounding: hence the 1e-12 relative)
            assert np.all(np.abs(est.mean - exact) < z_limit(k) * est.stderr + 1e-12 * exact), (coupling, kind)
            if (kind, kernel) == ("prf", "gaussian"):
                frob[coupling] = fr
                wrong = np.exp(X @ X.T)
                assert np.max(np.abs((est.mean - wrong) / est.stderr)) > z_limit(k)
    for worse in ("orthogonal", "iid"):
        a, b = frob["simplex"], frob[worse]
        assert (b.mean - a.mean) / math.hypot(a.stderr, b.stderr) > z_limit(2)


# ---------------------------------------------------------------------------
# Machinery: moments, chunks, memory, reproducibility, progress


def test_chan_merge_equals_numpy():
    """Chunked moments equal numpy's mean and std(ddof=1) on the same data (deterministic)."""
    data = np.random.default_rng(0).lognormal(size=(1001, 3))
    acc = _Moments()
    for lo, hi in ((0, 1), (1, 400), (400, 401), (401, 1001)):
        acc.add(cnp, data[lo:hi])
    est = acc.result(cnp, scalar=False)
    assert np.allclose(est.mean, data.mean(axis=0), rtol=1e-13)
    assert np.allclose(est.stderr, data.std(axis=0, ddof=1) / math.sqrt(1001), rtol=1e-12)


def test_reproducible_and_progress_callback():
    x, y = points(8, 0.5)
    calls = []
    a = mc.empirical_mse("simplex", x, y, 8, 50_000, rng=3, progress=lambda i, n: calls.append((i, n)))
    b = mc.empirical_mse("simplex", x, y, 8, 50_000, rng=3)
    assert a == b
    size = _default_chunk("simplex", 8, 8, "fast")
    assert calls[-1] == (50_000, 50_000) and len(calls) == -(-50_000 // size) > 1
    c = mc.empirical_mse("simplex", x, y, 8, 50_000, rng=4)
    assert c.mean != a.mean


def test_removed_shims_are_ordinary_errors():
    """The 0.1.0 shims are gone: ``chunk=`` (ignored since issue 12) is an unknown keyword and ``kernel='rff'``
    (now ``kind='rff'``) a ValueError that says so."""
    x, y = points(4, 0.5)
    calls = (lambda: mc.kernel_estimate("simplex", x, y, 4, 100, chunk=7),
             lambda: mc.empirical_mse("simplex", x, y, 4, 100, chunk=7),
             lambda: mc.empirical_conformity("simplex", 4, 0.5, n_draws=100, chunk=7),
             lambda: mc.gram_estimate("simplex", np.stack([x, y]), 4, 100, chunk=7))
    for call in calls:
        with pytest.raises(TypeError, match="chunk"):
            call()
    for func in (mc.kernel_estimate, mc.empirical_mse):
        with pytest.raises(ValueError, match="kind='rff'"):
            func("simplex", x, y, 4, 100, kernel="rff")


def test_many_trials_bounded_memory():
    """Peak traced memory does not grow with n_draws (chunking): 4e4 vs 4e5 trials at d = 64."""
    import tracemalloc

    x, y = points(64, 0.5)
    tracemalloc.start()
    try:
        mc.empirical_mse("simplex", x, y, 64, 40_000, rng=0)
        small = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        mc.empirical_mse("simplex", x, y, 64, 400_000, rng=0)
        big = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert big < 1.5 * small + 1e6
    assert big < 64e6


@pytest.mark.slow
def test_a_million_trials_chunked():
    """n_draws = 1e6 at d = 64 (fast path: about 2 000 chunks of 512 draws) runs in bounded memory and matches
    theory (|z| < 4.5).  (1e7 draws ran 50-100 s of the CI's 15 minutes for the same check.)"""
    x, y = points(64, 0.6)
    est = mc.empirical_mse("simplex", x, y, 64, 1_000_000, rng=123)
    assert est.n == 1_000_000
    assert abs(est.z(prf_mse_theory("simplex", 64, 64, x, y))) < z_limit(1)


# ---------------------------------------------------------------------------
# Bad input


def test_estimator_bad_input():
    x, y = points(4, 0.5)
    with pytest.raises(ValueError, match=r"y must have shape \(4\) \(4 columns\) to match d = 4"):
        mc.empirical_mse("simplex", x, np.ones(5), 4, 100)
    with pytest.raises(ValueError, match="x must be finite"):
        mc.kernel_estimate("simplex", np.array([np.nan, 0, 0, 0]), y, 4, 100)
    with pytest.raises(ValueError, match="m must be an integer >= 1"):
        mc.empirical_mse("simplex", x, y, 0, 100)
    with pytest.raises(ValueError, match="n_draws must be an integer >= 2"):
        mc.empirical_mse("simplex", x, y, 4, 1)
    with pytest.raises(ValueError, match="kernel must be one of 'gaussian', 'softmax'"):
        mc.empirical_mse("simplex", x, y, 4, 100, kernel="laplace")
    with pytest.raises(ValueError, match="coupling must be one of"):
        mc.empirical_mse("ortho", x, y, 4, 100)
    with pytest.raises(ValueError, match="d must be an integer >= 2 for the simplex coupling"):
        mc.empirical_mse("simplex", np.ones(1), np.ones(1), 4, 100)
    with pytest.raises(ValueError, match="path must be one of 'auto', 'fast', 'full'"):
        mc.empirical_mse("simplex", x, y, 4, 100, path="quick")
    with pytest.raises(ValueError, match="m must be an integer >= 2"):
        mc.empirical_conformity("simplex", 4, 0.5, m=1)
    with pytest.raises(ValueError, match="kind must be one of 'prf', 'rff'"):
        mc.empirical_conformity("simplex", 4, 0.5, kind="orf")
    with pytest.raises(ValueError, match="v must be a finite norm >= 0"):
        mc.empirical_conformity("simplex", 4, -0.5)
    with pytest.raises(ValueError, match=r"v must have shape \(4\)"):
        mc.empirical_conformity("simplex", 4, np.ones(3))
    with pytest.raises(ValueError, match="X must be finite"):
        mc.gram_estimate("simplex", np.array([[np.inf, 0.0]]), 2, 10)
    with pytest.raises(ValueError, match=r"Y must have shape \(N, 2\)"):
        mc.gram_estimate("simplex", np.ones((3, 2)), 2, 10, Y=np.ones((3, 3)))


def test_pointwise_estimators_do_not_overflow():
    """|x + y| = 300: w.v reaches ~1000 > log(max float); the log-sum-exp branch keeps every value finite
    (numpy raises on overflow here).  At this scale the Gaussian PRF estimate of K(x, x) = 1 is ~0 in
    every draw (the documented heavy tail), so the MSE estimate is 1 with zero spread."""
    x = np.zeros(8)
    x[0] = 150.0
    with np.errstate(over="raise", invalid="raise"):
        est = mc.kernel_estimate("orthogonal", x, x, 8, 200, rng=0)
        mse = mc.empirical_mse("simplex", x, x, 8, 200, rng=0)
    assert math.isfinite(est.mean) and math.isfinite(est.stderr) and est.mean < 1e-100
    assert mse.mean == pytest.approx(1.0) and mse.stderr < 1e-100


# ---------------------------------------------------------------------------
# Issue 22 findings in montecarlo kept as regression tests: Monte Carlo has a work limit and a time budget, and a
# non-finite estimate is an error naming the cause (no silent NaN).  No wall clock is asserted: the budget test uses
# a budget that has expired before the first chunk (certain expiry), and the work limit is checked before any draw.


def test_non_finite_conformity_names_v():
    """empirical_conformity('simplex', 8, v=1e3, ...) returned Estimate(nan, nan) (issue 22): e^{w.v} overflows."""
    with pytest.raises(ValueError, match=r"\|v\| = 1000.*v is too large"):
        mc.empirical_conformity("simplex", 8, 1e3, m=8, n_draws=200, rng=0)
    with pytest.raises(ValueError, match="v is too large"):
        mc.empirical_pair_moments("simplex", 8, 1e3, m=8, n_draws=200, rng=0)
    est = mc.empirical_conformity("simplex", 8, 1.0, m=8, n_draws=200, rng=0)  # power: a moderate v is finite
    assert math.isfinite(est.mean) and math.isfinite(est.stderr)


def test_non_finite_mse_names_the_points():
    """The softmax kernel e^{x.y} = e^1600 overflows float64: the MSE is an error naming the points' size."""
    x = np.full(4, 20.0)
    with pytest.raises(ValueError, match=r"\|x\| = 40.*too large"):
        mc.empirical_mse("iid", x, x, 4, 100, kernel="softmax", rng=0)
    assert math.isfinite(mc.empirical_mse("iid", x / 40, x / 40, 4, 100, kernel="softmax", rng=0).mean)


def test_exact_kernel_and_gram_estimate_are_loud_outside_float64():
    """exact_kernel raises (naming x and y and the log route) where the kernel overflows float64 or falls below
    its smallest normal number (before: OverflowError from math.exp for the softmax at x.y = 2700, a silent 0
    for the Gaussian at distance 69, so diagnostics.kernel_bias divided by zero); inside, it is the value
    (power: exp(-600) and exp(600) come back to relative accuracy).  gram_estimate refuses empty X or Y
    (before: a (0, 0) mean and a NaN Frobenius error) and points whose every exact kernel value underflows
    (before: 0 / 0 = NaN with a numpy RuntimeWarning)."""
    from montecarlo import diagnostics

    big = np.full(3, 30.0)
    with pytest.raises(ValueError, match="exp.2700.*log_kernel_matrix"):
        mc.exact_kernel(big, big, "softmax")
    with pytest.raises(ValueError, match="gaussian kernel of x and y is exp.-2400"):
        mc.exact_kernel(np.full(3, 20.0), np.full(3, -20.0))
    with pytest.raises(ValueError, match="exp.-2400"):
        diagnostics.kernel_bias("simplex", np.full(3, 20.0), np.full(3, -20.0), 3, 100)
    assert math.isclose(mc.exact_kernel(np.array([20.0, 0.0]), np.array([-10.0, 0.0]), "softmax"),
                        math.exp(-200.0), rel_tol=1e-14)
    assert math.isclose(mc.exact_kernel(np.array([10.0, 0.0]), np.array([-10.0, 0.0])), math.exp(-200.0),
                        rel_tol=1e-14)
    assert math.isclose(mc.exact_kernel(np.array([30.0, 0.0]), np.array([20.0, 0.0]), "softmax"), math.exp(600.0),
                        rel_tol=1e-14)
    for kw in ({"X": np.zeros((0, 3))}, {"X": np.zeros((2, 3)), "Y": np.zeros((0, 3))}):
        name = "Y" if "Y" in kw else "X"
        with pytest.raises(ValueError, match=f"{name} must hold at least one point"):
            mc.gram_estimate("simplex", m=3, n_draws=10, **kw)
    with pytest.raises(ValueError, match="underflows to 0 in float64"):
        mc.gram_estimate("simplex", np.full((2, 3), 30.0), 3, 10, Y=np.full((2, 3), -30.0))
    assert np.isfinite(mc.gram_estimate("simplex", np.full((2, 3), 0.3), 3, 10)[1].mean)


def test_gram_estimate_frobenius_error_and_its_budget(monkeypatch):
    """gram_estimate's relative Frobenius error |K^ - K|_F / |K|_F against an independent route (one draw at a
    time with sample_weights and random_features, 3000 draws each; z within 4.5, false alarm 7e-6; power: twice
    the reference is rejected), a single point is a Gram matrix (N = 1), and the per-draw budget
    N N' 2 + (N + N') (width m) 3 + m d 3 refuses one entry above it by name and passes at it."""
    from montecarlo._checks import AllocationError

    rng = np.random.default_rng(3)
    X = rng.normal(size=(4, 3)) * 0.4
    _, frob = mc.gram_estimate("simplex", X, 3, 3000, rng=1)
    exact = np.exp(mc.features.log_kernel_matrix(X))
    errs = []
    gen = np.random.default_rng(2)
    for _ in range(3000):
        f = mc.random_features(X, mc.sample_weights("simplex", 3, 3, rng=gen))
        errs.append(np.linalg.norm(f @ f.T - exact) / np.linalg.norm(exact))
    ref, se = np.mean(errs), np.std(errs, ddof=1) / math.sqrt(len(errs))
    z = (frob.mean - ref) / math.hypot(frob.stderr, se)
    assert abs(z) <= 4.5, (frob, ref, se)
    assert abs((frob.mean - 2 * ref) / math.hypot(frob.stderr, se)) > 4.5
    one, _ = mc.gram_estimate("simplex", X[:1], 3, 2, rng=1)  # one point, the fewest draws (2)
    assert one.mean.shape == (1, 1)
    with pytest.raises(ValueError, match="n_draws"):
        mc.gram_estimate("simplex", X, 3, 1, rng=1)
    wide = rng.normal(size=(5, 3)) * 0.4  # (N, N') = (4, 5): the Gram matrix's own budget comes first
    monkeypatch.setattr("montecarlo._checks.MAX_ELEMENTS", 4 * 5 - 1)
    with pytest.raises(AllocationError, match=r"the \(N, N'\) = \(4, 5\) Gram matrix"):
        mc.gram_estimate("simplex", X, 3, 10, Y=wide, rng=1)
    per = 4 * 4 * 2 + 8 * 3 * 3 + 3 * 3 * 3
    monkeypatch.setattr("montecarlo._checks.MAX_ELEMENTS", per - 1)
    with pytest.raises(AllocationError, match="one draw of the Gram estimate"):
        mc.gram_estimate("simplex", X, 3, 10, rng=1)
    monkeypatch.setattr("montecarlo._checks.MAX_ELEMENTS", per)
    assert mc.gram_estimate("simplex", X, 3, 10, rng=1)[0].mean.shape == (4, 4)


# ---------------------------------------------------------------------------
# Tests added against the surviving formula mutants of montecarlo (issue 22 item 5, docs/guide/mutation.rst).
#
# Each class is the addition to one target's mutation command (tests/mutation_targets.py): ``TestCouplings`` for
# montecarlo/couplings.py, ``TestEstimators`` for estimators.py, ``TestFeatures``, ``TestPnc``, ``TestNormCoupling``.
# Every test checks a documented property against an independent route (a closed form, the formula written out,
# a second sampler path, mpmath, the README's numbers); Monte Carlo comparisons are z-tests at
# paper_checks._compare.Z_CRIT = 4.5 (false alarm 6.8e-6 each, the family bound is stated per test) and show
# their power on a wrong alternative.  Seeds are fixed; no test reads the clock (the progress bar gets a fake one).


class TestEstimators:
    """montecarlo/estimators.py: boundaries of n_draws, the Gram estimator of every kind, the SimRFs+ fast path,
    the Gram budget, the progress bar's redraw rate, the iid fast path's row norms, the default n_draws."""

    def test_pair_projections_single_draw_and_two_draw_estimates(self):
        """n_draws >= 1 for projections, >= 2 for an estimate (documented): one draw of m projections has shape
        (1, m); two draws give an Estimate with a finite, positive standard error; one draw is refused."""
        p = mc.pair_projections("orthogonal", 0.7, 6, 1, rng=0, d=6)
        assert p.shape == (1, 6) and np.all(np.isfinite(p))
        x, y = np.full(4, 0.2), np.full(4, -0.1)
        est = mc.kernel_estimate("iid", x, y, 4, 2, rng=1)
        assert est.n == 2 and math.isfinite(est.mean) and est.stderr > 0
        with pytest.raises(ValueError, match="n_draws must be an integer >= 2"):
            mc.kernel_estimate("iid", x, y, 4, 1, rng=1)

    @pytest.mark.filterwarnings("ignore:SimRFs\\+ update")
    def test_simplex_plus_fast_path_agrees_with_full_path(self):
        """SimRFs+ projections on the fast path (|v| D S' u) and the full path (dense blocks) have one law, for
        m = 6 > d = 4 (a truncated block): two-sample KS of w_0.v and of (w_0 + w_1).v, two-sample z of the MSE and
        of the pair product E[(w_0.v)(w_1.v)] at |v| = 2; 4 comparisons at family 1e-4 (KS) and 1.4e-5 (z).
        Power: the orthogonal coupling's pair product (angle pi/2, about 0 instead of about -1.2) is rejected."""
        m, n = 6, 4000
        v = np.array([0.5, -0.3, 0.2, 0.4])  # d = 4
        fast = mc.pair_projections("simplex_plus", v, m, n, rng=1, path="fast")
        full = mc.pair_projections("simplex_plus", v, m, n, rng=2, path="full")
        assert fast.shape == (n, m)
        alpha = 1e-4 / 2
        assert stats.ks_2samp(fast[:, 0], full[:, 0]).pvalue > alpha
        assert stats.ks_2samp(fast[:, 0] + fast[:, 1], full[:, 0] + full[:, 1]).pvalue > alpha
        x, y = v / 2 + 0.1, v / 2 - 0.1
        a = mc.empirical_mse("simplex_plus", x, y, m, 4 * n, rng=3, path="fast")
        b = mc.empirical_mse("simplex_plus", x, y, m, n, rng=4, path="full")
        assert abs(a.mean - b.mean) / math.hypot(a.stderr, b.stderr) < Z_CRIT

        def pair_product(coupling, path, seed):
            p = mc.pair_projections(coupling, np.array([2.0, 0.0, 0.0, 0.0]), m, n, rng=seed, path=path)
            q = p[:, 0] * p[:, 1]
            return q.mean(), q.std(ddof=1) / math.sqrt(n)

        (f, sf), (g, sg), (o, so) = (pair_product("simplex_plus", "fast", 5), pair_product("simplex_plus", "full", 6),
                                     pair_product("orthogonal", "fast", 7))
        assert abs(f - g) / math.hypot(sf, sg) < Z_CRIT
        assert abs(o - g) / math.hypot(so, sg) > Z_CRIT

    @pytest.mark.filterwarnings("ignore:SimRFs\\+ update")
    @pytest.mark.parametrize("kind", theory.feature_kinds.names(kernel="gaussian"))  # (the exact Gram: Gaussian)
    def test_gram_estimate_of_every_kind(self, kind):
        """gram_estimate is elementwise unbiased for every kind (m = 7 > d = 3 and m = d = 3, OPRFs at FAVOR++'s
        data A), 2 x 9 z-tests per kind; power: the softmax Gram is rejected.  Its relative Frobenius error agrees
        with an independent estimate built from sample_weights and random_features (two-sample z); power: the
        independent estimate at 3m features is rejected.  Family: 20 comparisons per kind, 1.4e-4."""
        X = np.random.default_rng(0).standard_normal((3, 3)) * 0.3
        params = ({"A": mc.oprf.data_optimal_a(X)} if kind == "oprf" else
                  dict(zip("aQ", mc.sderf.sderf_parameters(X))) if kind == "sderf" else {})
        exact = np.exp(-0.5 * np.sum((X[:, None] - X[None]) ** 2, axis=-1))
        for m in (7, 3):
            est, frob = mc.gram_estimate("simplex", X, m, 3000, kind=kind, rng=5, **params)
            assert est.mean.shape == (3, 3)
            # (RFF diagonal entries are exactly 1 in every draw: a standard error of rounding, hence the 1e-12)
            assert np.all(np.abs(est.mean - exact) <= Z_CRIT * est.stderr + 1e-12), (kind, m)
        assert np.max(np.abs((est.mean - np.exp(X @ X.T)) / est.stderr)) > Z_CRIT

        def independent(m, n, seed):
            errs = []
            for w in mc.sample_weights("simplex", 3, m, rng=seed, n_draws=n):
                f = mc.random_features(X, w, kind=kind, **params)
                errs.append(np.linalg.norm(f @ f.T - exact) / np.linalg.norm(exact))
            return np.mean(errs), np.std(errs, ddof=1) / math.sqrt(n)

        mean, se = independent(3, 1500, 9)
        assert abs(frob.mean - mean) / math.hypot(frob.stderr, se) < Z_CRIT
        mean3, se3 = independent(9, 1500, 10)
        assert abs(frob.mean - mean3) / math.hypot(frob.stderr, se3) > Z_CRIT

    def test_gram_budget_names_the_gram_matrix(self, monkeypatch):
        """The (N, N') Gram matrix is the array the first budget check guards: with MAX_ELEMENTS one entry below
        N N' (N = 40, N' = 30, d = 3) the refusal names it; with N N' allowed, that check passes (the call then
        fails on the per-draw check, which names the draw)."""
        X = np.random.default_rng(0).standard_normal((40, 3)) * 0.1
        Y = X[:30]
        monkeypatch.setattr("montecarlo._checks.MAX_ELEMENTS", 40 * 30 - 1)
        with pytest.raises(AllocationError, match=r"\(N, N'\) = \(40, 30\) Gram matrix would need 1\.2e\+03"):
            mc.gram_estimate("iid", X, 2, 10, Y=Y, rng=0)
        monkeypatch.setattr("montecarlo._checks.MAX_ELEMENTS", 40 * 30)
        with pytest.raises(AllocationError, match="one draw of the Gram estimate"):
            mc.gram_estimate("iid", X, 2, 10, Y=Y, rng=0)

    def test_progress_bar_redraws_at_most_twice_a_second(self, monkeypatch, capsys):
        """The text bar on stderr redraws when at least 0.5 s passed since the last redraw, and always at the end
        (a fake clock: no wall time is read)."""
        import types

        from montecarlo import estimators

        clock = iter([0.0, 0.3, 0.6, 0.9, 1.2, 1.3])
        monkeypatch.setattr(estimators, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
        bar = estimators._Progress(True, 5, "demo")  # reads t0 = 0.0
        for done in (1, 2, 3, 4, 5):  # at 0.3 (skip), 0.6 (draw), 0.9 (skip), 1.2 (draw), 1.3 (the end: draw)
            bar.update(done)
        err = capsys.readouterr().err
        assert [s.split("]")[1].split()[0] for s in err.split("\r")[1:]] == ["2/5", "4/5", "5/5"]
        assert err.endswith("\n")

    @pytest.mark.parametrize("d", [2, 3])
    def test_iid_fast_path_row_norms_for_oprfs(self, d):
        """The iid fast path draws |v| g and |w|^2 = g^2 + chi^2_{d-1} (its docstring); OPRFs need |w|^2.  Their
        kernel estimate on that path is unbiased for e^{-|x-y|^2/2} at d = 2 and 3, A = -0.2 (z-test at Z_CRIT);
        power: at d = 2, |w|^2 = g^2 alone (no chi^2_1 part) would multiply the mean by E[e^{2A chi^2_1}]^{-1} =
        sqrt(1 - 4A) = 1.34; that value is rejected at both d."""
        rng = np.random.default_rng(d)
        x, y = rng.standard_normal(d) * 0.3, rng.standard_normal(d) * 0.3
        exact = math.exp(-0.5 * float(np.sum((x - y) ** 2)))
        a = -0.2
        est = mc.kernel_estimate("iid", x, y, 4, 20_000, kind="oprf", A=a, rng=1, path="fast")
        assert abs(est.mean - exact) < Z_CRIT * est.stderr, (est, exact)
        assert abs(est.mean - exact * math.sqrt(1 - 4 * a)) > Z_CRIT * est.stderr

    def test_pair_term_default_n_draws(self):
        """empirical_conformity and empirical_pair_moments draw n_draws = 10_000 by default (the signature):
        the estimate without n_draws has n = 10_000 and is the estimate with n_draws=10_000 for the same seed (the
        pair moments: a (3, 3) matrix)."""
        for f in (mc.empirical_conformity, mc.empirical_pair_moments):
            got = f("orthogonal", 3, 0.5, rng=0)
            same = f("orthogonal", 3, 0.5, n_draws=10_000, rng=0)
            assert got.n == 10_000
            assert np.array_equal(got.mean, same.mean) and np.array_equal(got.stderr, same.stderr)


def test_gram_estimate_refuses_an_exact_kernel_that_overflows():
    """gram_estimate formed exp(log K) of the exact softmax kernel without a check: at x.y > 709.8 it overflowed to inf
    with a RuntimeWarning and the relative Frobenius errors were NaN.  Now a ValueError; power: scaled down, a value."""
    X = np.stack([np.full(4, 20.0), np.full(4, 19.0)])
    with pytest.raises(ValueError, match="an exact softmax kernel value of X and Y overflows float64"):
        mc.gram_estimate("iid", X, 4, 4, kernel="softmax", rng=0)
    est, frob = mc.gram_estimate("iid", X / 10, 4, 4, kernel="softmax", rng=0)
    assert np.isfinite(est.mean).all() and math.isfinite(frob.mean)
