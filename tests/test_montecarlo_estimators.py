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
from montecarlo.estimators import _Moments, _default_chunk

FAMILY_ALPHA = 1e-4


def z_limit(k, family_alpha=FAMILY_ALPHA):
    """Two-sided Bonferroni threshold for k comparisons at family-wise level family_alpha."""
    return float(stats.norm.isf(family_alpha / (2 * k)))


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
