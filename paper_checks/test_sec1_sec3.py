"""Sec. 1 (estimators and kernels) and Sec. 3 (simplex block, Thm 3.2, Cor 3.3, SimRFs+).

Monte Carlo comparisons use |z| <= 4.5 (two-sided false alarm 6.8e-6 each,
see paper_checks/_compare.py); each check lists its number of comparisons.
"""

import numpy as np
import pytest
import sympy as sp
from mpmath import mp

import montecarlo as mc
import theory
from paper_checks._compare import Z_CRIT, assert_agree, assert_mc_agree, mc_agrees
from paper_checks._compare import SampleEstimate as _Est
from paper_checks._compare import pair_with_norms as _pair


def _khat(W, x, y, kind):
    """Per-draw kernel estimates from weights W (n, m, d)."""
    if kind == "prf":
        return np.exp(W @ (x + y) - x @ x - y @ y).mean(axis=1)
    return np.cos(W @ (x - y)).mean(axis=1)


# ---------------------------------------------------------------------------
# Sec. 1


@pytest.mark.claim("sec1.rff-unbiased")
@pytest.mark.parametrize("coupling", ["iid", "orthogonal", "simplex", "simplex_plus"])
def test_rff_unbiased(coupling, record):
    """1 comparison per coupling (false alarm 6.8e-6) plus a power check."""
    d = 8
    x, y = _pair(d, 0.6, 0.8, 1.0, seed=1)
    est = mc.kernel_estimate(coupling, x, y, d, 40_000, kind="rff", rng=11)
    k = np.exp(-np.sum((x - y) ** 2) / 2)
    assert_mc_agree(est, k, record, f"RFF {coupling}")
    if coupling == "iid":
        W = mc.sample_weights("iid", d, d, rng=12, n_draws=40_000) * 1.1  # wrong scale: N(0, 1.21 I)
        assert not mc_agrees(_Est(_khat(W, x, y, "rff")), k)


@pytest.mark.claim("sec1.prf-unbiased")
@pytest.mark.parametrize("coupling", ["iid", "orthogonal", "simplex", "simplex_plus"])
def test_prf_unbiased(coupling, record):
    d = 8
    x, y = _pair(d, 0.5, 0.4, 0.7, seed=2)
    k = np.exp(-np.sum((x - y) ** 2) / 2)
    est = mc.kernel_estimate(coupling, x, y, d, 40_000, kernel="gaussian", rng=21)
    assert_mc_agree(est, k, record, f"PRF {coupling}")
    if coupling == "orthogonal":
        W = mc.sample_weights("orthogonal", d, d, rng=22, n_draws=40_000)
        W = W / np.linalg.norm(W, axis=-1, keepdims=True) * np.sqrt(d)  # norms fixed at sqrt(d)
        assert not mc_agrees(_Est(_khat(W, x, y, "prf")), k)


@pytest.mark.claim("sec1.prf-unbiased")
@pytest.mark.parametrize("d,v", [(3, "0.5"), (16, "1.3")])
def test_expected_b_is_exp_half_v2(d, v, record):
    """App. A.1: E[b_i] = E[exp(w.v)] = exp(v^2/2), by quadrature over the chi_d
    norm of the direction average 0F1(; d/2; r^2 v^2 / 4)."""
    with mp.workdps(25):
        vv = mp.mpf(v)
        q = mp.quad(lambda r: theory.pdf_chi(r, d) * mp.hyp0f1(mp.mpf(d) / 2, (r * vv / 2) ** 2),
                    [0, mp.sqrt(d), mp.sqrt(d) + 10, mp.inf])
        assert_agree(q, mp.exp(vv * vv / 2), 18, record)


@pytest.mark.claim("sec1.conversion")
def test_gaussian_softmax_conversion(record):
    xs, ys = sp.symbols("x y", real=True)
    # 1-D symbolic identity (the d-dimensional one is the same with dot products)
    assert sp.simplify(sp.exp(-(xs - ys) ** 2 / 2) - sp.exp(xs * ys) * sp.exp(-xs ** 2 / 2 - ys ** 2 / 2)) == 0
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(5) * 0.4, rng.standard_normal(5) * 0.4
    with mp.workdps(30):
        lhs = theory.gaussian_kernel(mp.sqrt(mp.fsum((mp.mpf(a) - b) ** 2 for a, b in zip(x, y))))
        rhs = theory.softmax_kernel(mp.fsum(mp.mpf(a) * b for a, b in zip(x, y))) * \
            theory.softmax_to_gaussian_factor(np.linalg.norm(x), np.linalg.norm(y))
        assert_agree(lhs, rhs, 14, record)  # inputs are doubles
    # the two PRF maps differ exactly by the factor, draw by draw
    W = mc.sample_weights("simplex", 5, 5, rng=4)
    g = mc.prf_features(x[None], W, "gaussian") @ mc.prf_features(y[None], W, "gaussian").T
    s = mc.prf_features(x[None], W, "softmax") @ mc.prf_features(y[None], W, "softmax").T
    assert np.allclose(g, s * np.exp(-(x @ x + y @ y) / 2), rtol=1e-12)


# ---------------------------------------------------------------------------
# Sec. 3: simplex vectors and block


@pytest.mark.claim("eq.simplex_vectors")
def test_simplex_vectors_symbolic_and_numeric(record):
    from theory import symbolic as S
    cases = S.simplex_gram_cases()
    assert sp.simplify(cases["same_i<d"] - 1) == 0
    assert sp.simplify(cases["distinct_i,j<d"] + 1 / (S.d - 1)) == 0
    assert sp.simplify(cases["i<d_with_d"] + 1 / (S.d - 1)) == 0
    assert sp.simplify(cases["row_sum_norm2"]) == 0
    with mp.workdps(30):
        for d in (2, 3, 10, 64):
            s = theory.simplex_vectors(d)
            g = s * s.T
            worst = max(abs(g[i, j] - (1 if i == j else mp.mpf(-1) / (d - 1))) for i in range(d) for j in range(d))
            record(worst, "abs")
            assert worst < mp.mpf(10) ** -28


@pytest.mark.claim("eq.simplex_block")
def test_simplex_block_structure_and_marginals(record):
    """Directions of a sampled block have Gram S S^T; rows pass KS against N(0,1)
    on 4 directions x 3 rows (12 tests at level 1e-6 each: family-wise 1.2e-5);
    the same test rejects norms fixed at sqrt(d) (power)."""
    d = 6
    W = mc.sample_weights("simplex", d, d, rng=5, n_draws=20_000)
    U = W / np.linalg.norm(W, axis=-1, keepdims=True)
    gram = np.einsum("nik,njk->nij", U, U)
    target = np.full((d, d), -1 / (d - 1)) + np.eye(d) * (1 + 1 / (d - 1))
    err = np.abs(gram - target).max()
    record(err, "abs")
    assert err < 1e-12
    res = mc.diagnostics.ks_marginals("simplex", d, 20_000, rng=6)
    pmin = min(r[3] for r in res)
    record(pmin, "min p", worst="low")
    assert pmin > 1e-6
    wrong = U * np.sqrt(d)
    res_wrong = mc.diagnostics.ks_marginals("simplex", d, 20_000, weights=wrong)
    assert min(r[3] for r in res_wrong) < 1e-6


# ---------------------------------------------------------------------------
# Thm 3.2 and Cor 3.3


@pytest.mark.claim("thm3.2")
@pytest.mark.parametrize("coupling", ["iid", "orthogonal", "simplex"])
@pytest.mark.parametrize("m", [16, 40])
def test_thm_3_2_against_monte_carlo(coupling, m, record):
    """Empirical MSE vs the closed form (with independent blocks for m = 40 > d = 16);
    6 comparisons, family-wise false alarm 4e-5."""
    d, xn, yn, v = 16, 0.5, 0.4, 0.8
    x, y = _pair(d, xn, yn, v, seed=7)
    est = mc.empirical_mse(coupling, x, y, m, 200_000, rng=70 + m)
    with mp.workdps(20):
        expected = theory.prf_mse(coupling, d, v, m=m, x_norm=xn, y_norm=yn)
    assert_mc_agree(est, expected, record, f"MSE {coupling} m={m}")
    if coupling == "simplex":
        with mp.workdps(20):
            orf = theory.prf_mse("orthogonal", d, v, m=m, x_norm=xn, y_norm=yn)
        assert not mc_agrees(est, orf)  # power: the simplex estimate rejects the ORF closed form


@pytest.mark.claim("thm3.2")
def test_thm_3_2_against_pairwise_brute_force(record):
    """E[K_hat^2] - K^2 from all ordered pairs (block membership by index)."""
    d, m, xn, yn, v = 5, 12, mp.mpf("0.6"), mp.mpf("0.5"), mp.mpf("0.9")
    with mp.workdps(50):
        rho = theory.conformity("simplex", d, v)
        s = m * mp.exp(2 * v * v) + mp.fsum((rho if i // d == j // d else mp.exp(v * v))
                                            for i in range(m) for j in range(m) if i != j)
        ref = mp.exp(-2 * xn ** 2 - 2 * yn ** 2) * s / m ** 2 - mp.exp(-(2 * xn ** 2 + 2 * yn ** 2 - v * v))
    with mp.workdps(30):
        assert_agree(theory.prf_mse("simplex", d, v, m=m, x_norm=xn, y_norm=yn), ref, 25, record)


@pytest.mark.claim("eq.def_rf_conformity")
@pytest.mark.parametrize("coupling", ["iid", "orthogonal", "simplex"])
def test_conformity_definition_monte_carlo(coupling, record):
    """Empirical E[b_i b_j] (eq. def_rf_conformity) vs the closed forms: 3 comparisons; power: each
    estimate rejects the other two couplings' closed forms."""
    d, v = 8, 0.9
    est = mc.empirical_conformity(coupling, d, v, m=d, n_draws=200_000, rng=31)
    with mp.workdps(20):
        assert_mc_agree(est, theory.conformity(coupling, d, v), record, coupling)
        for other in {"iid", "orthogonal", "simplex"} - {coupling}:
            assert not mc_agrees(est, theory.conformity(other, d, v)), other


@pytest.mark.claim("eq.def_rf_conformity")
@pytest.mark.parametrize("d,w,v", [(3, "1.7", "0.8"), (64, "11", "0.4")])
def test_hankel_series_is_bessel(d, w, v, record):
    """App. A.1: the 0F1 series equals Gamma(d/2) (wv/2)^{1-d/2} I_{d/2-1}(wv)
    (eq. prf_hankel with J(i x) = i^nu I(x))."""
    with mp.workdps(30):
        nu = mp.mpf(d) / 2 - 1
        z = mp.mpf(w) * mp.mpf(v)
        # 150 terms: the k-th term is below (z^2/4)^k / k!, negligible beyond k ~ 40 for z <= 5
        series = mp.gamma(mp.mpf(d) / 2) * mp.fsum(
            z ** (2 * k) / (mp.mpf(4) ** k * mp.factorial(k) * mp.gamma(k + mp.mpf(d) / 2)) for k in range(150))
        bessel = mp.gamma(nu + 1) * (z / 2) ** (-nu) * mp.besseli(nu, z)
        assert_agree(series, bessel, 26, record)


@pytest.mark.claim("cor3.3")
def test_cor_3_3_simrf_below_orf_on_grid(record):
    """MSE_ORF - MSE_SimRF = e^{-2x^2-2y^2} (P/m^2) (rho_ORF - rho_SimRF) (Thm 3.2),
    so the conformity gap decides; checked on the grid, and the MSE ratios
    directly where they are resolvable at 25 digits (v <= 4)."""
    worst = None
    with mp.workdps(25):
        for d in (2, 3, 5, 16, 64, 257, 1024, 4096):
            for v in ("0.01", "0.3", "1", "2", "4", "8"):
                s, o = theory.conformity("simplex", d, v), theory.conformity("orthogonal", d, v)
                gap = (o - s) / (o - 1)
                worst = gap if worst is None else min(worst, gap)
                assert s < o
                if float(v) <= 4:
                    assert theory.mse_ratio("simplex", "iid", d, v) < theory.mse_ratio("orthogonal", "iid", d, v)
    record(worst, "min (rho_O - rho_S)/(rho_O - 1)", worst="low")


@pytest.mark.claim("cor3.3")
def test_cor_3_3_monte_carlo(record):
    """Paired comparison on one draw each: the SimRF empirical MSE is below the
    ORF one by more than 4.5 combined standard errors."""
    d = 8
    x, y = _pair(d, 0.3, 0.3, 0.5, seed=8)
    s = mc.empirical_mse("simplex", x, y, d, 200_000, rng=81)
    o = mc.empirical_mse("orthogonal", x, y, d, 200_000, rng=82)
    z = (o.mean - s.mean) / np.hypot(o.stderr, s.stderr)
    record(z, "separation sigma", worst="low")
    assert z > Z_CRIT


# ---------------------------------------------------------------------------
# Sec. 3.2: SimRFs+


@pytest.mark.claim("eq.simp+_obj")
def test_simp_plus_objective_two_routes(record):
    rng = np.random.default_rng(9)
    vecs = rng.standard_normal((6, 6))
    with mp.workdps(30):
        series = theory.exact_objective(vecs, "0.9")  # printed series per pair
        nu = mp.mpf(6) / 2 - 1
        bessel = mp.fsum(
            mp.gamma(nu + 1) * (mp.mpf("0.9") * mp.sqrt(mp.fsum((mp.mpf(a) + b) ** 2 for a, b in zip(vecs[i], vecs[j])))
                                / 2) ** (-nu)
            * mp.besseli(nu, mp.mpf("0.9") * mp.sqrt(mp.fsum((mp.mpf(a) + b) ** 2 for a, b in zip(vecs[i], vecs[j]))))
            for i in range(6) for j in range(6) if i != j) / 30
        assert_agree(series, bessel, 26, record)
    from montecarlo import optimum
    assert abs(optimum.objective(vecs, 0.9) - float(series)) < 1e-12 * float(series)


@pytest.mark.claim("eq.truncated_obj")
def test_truncated_objective_is_the_k1_term(record):
    """(rho_exact(v) - 1) / v^2 -> rho_tilde(v) / v^2 as v -> 0 (k = 0 term is 1)."""
    rng = np.random.default_rng(10)
    vecs = rng.standard_normal((5, 5))
    with mp.workdps(40):
        v = mp.mpf("1e-10")
        lhs = (theory.exact_objective(vecs, v) - 1) / v ** 2
        rhs = theory.truncated_objective(vecs, v) / v ** 2
        assert_agree(lhs, rhs, 15, record)


@pytest.mark.claim("eq.minimised_conditions")
def test_truncated_minimum_random_directions_never_below(record):
    rng = np.random.default_rng(11)
    d = 5
    norms = np.sqrt(rng.chisquare(d, d))
    with mp.workdps(20):
        best = theory.truncated_objective_minimum(norms, 1)
        vecs, _ = theory.simplex_plus_update(norms)
        assert_agree(theory.truncated_objective(vecs, 1), best, 10, record)
    for _ in range(200):
        u = rng.standard_normal((d, d))
        w = norms[:, None] * u / np.linalg.norm(u, axis=1, keepdims=True)
        s = np.sum((w[:, None] + w[None]) ** 2, axis=-1)
        val = (np.sum(s) - np.trace(s)) * (2 / d) / (4 * d * (d - 1))
        assert val >= float(best) * (1 - 1e-12)


@pytest.mark.claim("lemma.equal_weights.algebra")
def test_equal_weights_identity(record):
    rng = np.random.default_rng(12)
    for m, d in [(4, 4), (7, 3), (10, 12)]:
        u = rng.standard_normal((m, d))
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        lhs = sum(np.sum((u[i] + u[j]) ** 2) for i in range(m) for j in range(m) if i != j)
        rhs = 2 * m * (m - 2) + 2 * np.sum(u.sum(axis=0) ** 2)
        record(abs(lhs - rhs) / rhs, "rel")
        assert abs(lhs - rhs) < 1e-10 * rhs


@pytest.mark.claim("eq.simpler_updates")
def test_update_converges_quickly_from_simplex(record):
    """Median pass count over 2000 chi_d draws is small; the mpmath reference
    update decreases ||sum w_i|| monotonically."""
    rng = np.random.default_rng(13)
    for d, median_max in [(6, 20), (64, 5)]:
        norms = np.sqrt(rng.chisquare(d, size=(2000, d)))
        _, passes, converged = mc.simplex_plus_vectors(norms, on_unconverged="ignore")
        med = float(np.median(passes))
        record(med, f"median passes d={d}")
        assert med <= median_max
        assert np.mean(converged) > 0.99
    with mp.workdps(20):
        _, _, res = theory.simplex_plus_update([mp.mpf(x) for x in np.sqrt(rng.chisquare(6, 6))], history=True)
        assert all(b <= a * (1 + mp.mpf(10) ** -15) for a, b in zip(res, res[1:]))


@pytest.mark.claim("fig3.splus")
def test_larger_norms_subtend_bigger_angles_d3(record):
    rng = np.random.default_rng(14)
    norms = np.sqrt(rng.chisquare(3, size=(3000, 3)))
    closes = 2 * norms.max(axis=1) < norms.sum(axis=1)  # triangle exists
    vec, _, _ = mc.simplex_plus_vectors(norms[closes], on_unconverged="ignore")
    u = vec / np.linalg.norm(vec, axis=-1, keepdims=True)
    ok = 0
    for k in range(vec.shape[0]):
        nrm = norms[closes][k]
        pairs = [(0, 1), (0, 2), (1, 2)]
        prods = [nrm[i] * nrm[j] for i, j in pairs]
        angles = [np.arccos(np.clip(u[k, i] @ u[k, j], -1, 1)) for i, j in pairs]
        ok += int(np.argmax(prods) == np.argmax(angles) and np.argmin(prods) == np.argmin(angles))
    frac = ok / vec.shape[0]
    record(1 - frac, "fraction violating")
    assert frac == 1.0


@pytest.mark.claim("footnote.moment_ratio")
@pytest.mark.parametrize("coupling", ["iid", "orthogonal", "simplex"])
def test_footnote_moment_ratio(coupling, record):
    """Exact E(w^4)/E(w^2) against Monte Carlo pairs (1 comparison each); ORF
    also against the footnote's printed expression; all ~ d."""
    d = 16
    with mp.workdps(25):
        if coupling == "iid":
            e2, e4 = theory.wij_moment_iid(1, d), theory.wij_moment_iid(2, d)
        else:
            c = 0 if coupling == "orthogonal" else mp.mpf(-1) / (d - 1)
            e2, e4 = theory.wij_moment(1, d, c), theory.wij_moment(2, d, c)
        ratio = e4 / e2
        if coupling == "orthogonal":
            h = mp.mpf(d) / 2
            assert_agree(ratio, 2 * mp.gamma(h + 2) / mp.gamma(h + 1) + 2 * mp.gamma(h + 1) / mp.gamma(h), 22)
        assert 1.5 * d < ratio < 3 * d
    W = mc.sample_weights(coupling, d, 2, rng=15, n_draws=100_000)
    s = np.sum((W[:, 0] + W[:, 1]) ** 2, axis=-1)
    est = _Est(s ** 2)
    assert_mc_agree(est, e4, record, "E w^4")
    with mp.workdps(25):  # power: the IID moment (ORF, SimRF) or the ORF moment (IID) is rejected
        other = theory.wij_moment_iid(2, d) if coupling != "iid" else theory.wij_moment(2, d, 0)
    assert not mc_agrees(est, other)
