"""Sec. 4 and App. A.4-A.9: densities, conformity closed forms, gaps, RFFs, Cor 4.6;
App. B: Algorithm 1 and HD-products.  Monte Carlo comparisons: |z| <= 4.5
(6.8e-6 each)."""

import numpy as np
import pytest
import sympy as sp
from mpmath import mp
from scipy import stats

import montecarlo as mc
import theory
from paper_checks._compare import agrees, assert_agree, assert_mc_agree, mc_agrees, rel_diff
from paper_checks._compare import SampleEstimate as _Est
from theory import symbolic as S


def printed_pdf_mass(a, b, d, c):
    """Integral of the printed density (eq. theta_proby_dist, double precision) over [a, b]."""
    from scipy import integrate
    return integrate.quad(lambda w: theory.pdf_wij_float(w, d, c), a, b, epsabs=0, epsrel=1e-9, limit=200)[0]


# ---------------------------------------------------------------------------
# Lemma 4.1


@pytest.mark.claim("lemma4.1")
@pytest.mark.parametrize("d", [1, 4, 64])
def test_lemma_4_1_pdf_and_conformity(d, record):
    with mp.workdps(25):
        for w in ("0.2", "1", "5"):
            assert_agree(theory.pdf_wij_iid(w, d), theory.pdf_chi(mp.mpf(w) / mp.sqrt(2), d) / mp.sqrt(2), 22, record)
        norm = mp.quad(lambda w: theory.pdf_wij_iid(w, d), [0, mp.sqrt(2 * d), mp.inf])
        assert_agree(norm, 1, 18, record)
        v = mp.mpf("1.2")
        rho = mp.quad(lambda w: theory.pdf_wij_iid(w, d) * mp.hyp0f1(mp.mpf(d) / 2, (v * w / 2) ** 2),
                      [0, mp.sqrt(2 * d), mp.sqrt(2 * d) + 10, mp.inf])
        assert_agree(rho, mp.exp(v * v), 18, record)  # eq. iidrf_conformity
        # quicker route (App. A.4): independence, rho = E[b_i]^2 with E[b_i] by quadrature over chi_d
        eb = mp.quad(lambda r: theory.pdf_chi(r, d) * mp.hyp0f1(mp.mpf(d) / 2, (v * r / 2) ** 2),
                     [0, mp.sqrt(d), mp.sqrt(d) + 10, mp.inf])
        assert_agree(eb * eb, mp.exp(v * v), 18, record)


@pytest.mark.claim("lemma4.1")
def test_lemma_4_1_monte_carlo(record):
    """1 comparison (false alarm 6.8e-6); power: the ORF conformity 1F1(d; d/2; v^2/2) is rejected."""
    est = mc.empirical_conformity("iid", 6, 1.0, m=6, n_draws=200_000, rng=41)
    assert_mc_agree(est, np.exp(1.0), record)
    with mp.workdps(20):
        assert not mc_agrees(est, theory.conformity("orthogonal", 6, 1.0))


@pytest.mark.claim("app.iid_identity")
def test_iid_identity_as_stated_and_as_needed(record):
    with mp.workdps(25):
        for zz in ("0.7", "3", "10.5"):
            z = mp.mpf(zz)
            stated = mp.quad(lambda w: w ** (2 * z - 1) * mp.exp(-w * w / 2), [0, mp.inf])
            assert_agree(stated, 2 ** (z - 1) * mp.gamma(z), 18, record)
            needed = mp.quad(lambda w: w ** (2 * z - 1) * mp.exp(-w * w / 4), [0, mp.inf])
            assert_agree(needed, 2 ** (2 * z - 1) * mp.gamma(z), 18)


# ---------------------------------------------------------------------------
# Lemma 4.2 and App. A.6


@pytest.mark.claim("lemma4.2")
@pytest.mark.parametrize("d,c", [(3, "-0.5"), (16, "simplex"), (5, "0.4")])
def test_lemma_4_2_two_integrals(d, c, record):
    with mp.workdps(25):
        c = mp.mpf(-1) / (d - 1) if c == "simplex" else mp.mpf(c)
        for w in ("0.5", "2", "6"):
            assert_agree(theory.pdf_wij(w, d, c), theory.pdf_wij_convolution(w, d, c), 20, record)


@pytest.mark.claim("lemma4.2")
def test_lemma_4_2_monte_carlo_histogram(record):
    """Chi-square test of sampled simplex pairs (d = 5) against the printed
    density integrated over 12 bins (false alarm 1e-6); a chi_2d reference
    (the ORF density) is rejected by the same test (power)."""
    d = 5
    W = mc.sample_weights("simplex", d, 2, rng=42, n_draws=60_000)
    w = np.linalg.norm(W[:, 0] + W[:, 1], axis=1)
    edges = np.quantile(w, np.linspace(0, 1, 13))
    edges[0], edges[-1] = 0.0, np.inf
    counts, _ = np.histogram(w, edges)
    c = -1 / (d - 1)
    probs = np.array([printed_pdf_mass(a, b, d, c) for a, b in zip(edges[:-1], edges[1:])])
    probs_orf = np.array([stats.chi.cdf(b, 2 * d) - stats.chi.cdf(a, 2 * d) for a, b in zip(edges[:-1], edges[1:])])
    n = w.size
    chi2 = np.sum((counts - n * probs) ** 2 / (n * probs))
    p = stats.chi2.sf(chi2, 11)
    record(p, "p-value", worst="low")
    assert abs(sum(probs) - 1) < 1e-8 and p > 1e-6
    chi2_orf = np.sum((counts - n * probs_orf) ** 2 / (n * probs_orf))
    assert stats.chi2.sf(chi2_orf, 11) < 1e-6


@pytest.mark.claim("app.polar_jacobian")
def test_polar_integral_first_line_erratum(record):
    """The first line of eq. polarintegralinproof (as printed) vs its corrected
    form vs the final (correct) line, at d = 3, cos theta = -0.5."""
    d, c = 3, mp.mpf("-0.5")
    with mp.workdps(25):
        def chi(r):
            return theory.pdf_chi(r, d)

        def first_line(w, printed):
            def f(phi):
                t = 1 + mp.sin(2 * phi) * c
                cs, sn = max(mp.cos(phi), 0), max(mp.sin(phi), 0)
                if printed:
                    return w / mp.sqrt(t) * chi(w * cs / mp.sqrt(t)) * chi(w * sn / t)
                return w / t * chi(w * cs / mp.sqrt(t)) * chi(w * sn / mp.sqrt(t))
            return mp.quad(f, [0, mp.pi / 4, mp.pi / 2])

        for w in (mp.mpf("0.8"), mp.mpf(2)):
            final = theory.pdf_wij(w, d, c)
            assert_agree(first_line(w, printed=False), final, 20, record)
            assert not agrees(first_line(w, printed=True), final, 2)


@pytest.mark.claim("eq.chi_2d")
def test_chi_2d_reduction(record):
    for concrete in (None, 3):
        assert S.chi2d_reduction(concrete)["difference"] == 0
    for name, expr in S.legendre_duplication_steps().items():
        assert S.vanishes(expr), name
    with mp.workdps(25):
        for d in (2, 7, 64):
            for w in ("1", "4", "9"):
                assert_agree(theory.pdf_wij(w, d, 0), theory.pdf_chi(w, 2 * d), 20, record)


# ---------------------------------------------------------------------------
# eq. theta_conformity, App. A.7, Thm 4.3


@pytest.mark.claim("eq.theta_conformity")
@pytest.mark.parametrize("d,v,c", [(3, "1", "0.6"), (8, "2", "-0.5"), (2, "1.5", "-1")])
def test_theta_conformity_routes(d, v, c, record):
    with mp.workdps(30):
        quad = theory.conformity_at_angle_quad(d, v, c)
        assert_agree(quad, theory.conformity_from_moments(d, v, c), 25, record)
        assert_agree(quad, theory.theta_conformity_series(d, v, c), 25, record)


@pytest.mark.claim("eq.theta_conformity")
def test_theta_conformity_monte_carlo(record):
    """Pairs at a fixed angle acos(0.5) with chi_d norms, rotated at random:
    empirical E[exp((w_i + w_j).v)] vs rho_theta (1 comparison)."""
    d, v, c, n = 6, 0.8, 0.5, 400_000
    rng = np.random.default_rng(43)
    r1, r2 = np.sqrt(rng.chisquare(d, n)), np.sqrt(rng.chisquare(d, n))
    # isotropy: project on v = |v| e_1 with a uniform direction u and a uniform orthogonal u'
    g = rng.standard_normal((n, d))
    u = g / np.linalg.norm(g, axis=1, keepdims=True)
    h = rng.standard_normal((n, d))
    h -= np.sum(h * u, axis=1, keepdims=True) * u
    up = h / np.linalg.norm(h, axis=1, keepdims=True)
    wi = r1[:, None] * u
    wj = r2[:, None] * (c * u + np.sqrt(1 - c * c) * up)
    est = _Est(np.exp(v * (wi[:, 0] + wj[:, 0])))
    with mp.workdps(20):
        assert_mc_agree(est, theory.conformity_at_angle(d, v, c), record)
        assert not mc_agrees(est, theory.conformity_at_angle(d, v, 0))


@pytest.mark.claim("app.a7.steps")
def test_appendix_a7_steps(record):
    d, v, c = 5, mp.mpf("1.3"), mp.mpf("-0.25")
    with mp.workdps(25):
        h = mp.mpf(d) / 2
        rho = theory.conformity_at_angle(d, v, c)
        # step 2: after the w integral
        step2 = mp.nsum(lambda k: v ** (2 * k) * mp.gamma(k + d) / (2 ** k * mp.factorial(k) * 2 ** (d - 2)
                                                                    * mp.gamma(h) * mp.gamma(k + h))
                        * mp.quad(lambda p: mp.sin(2 * p) ** (d - 1) * (1 + mp.sin(2 * p) * c) ** k, [0, mp.pi / 2]),
                        [0, mp.inf])
        assert_agree(step2, rho, 15, record)
        # ORF normalisation: (1/Gamma(d/2)) int sin^{d-1} = sqrt(pi)/Gamma(d/2+1/2) = 2^{d-1} Gamma(d/2)/Gamma(d)
        lhs = mp.quad(lambda p: mp.sin(p) ** (d - 1), [0, mp.pi]) / mp.gamma(h)
        assert_agree(lhs, mp.sqrt(mp.pi) / mp.gamma(h + mp.mpf(1) / 2), 20, record)
        assert_agree(lhs, 2 ** (d - 1) * mp.gamma(h) / mp.gamma(d), 20, record)
        # the sine integral identity int_0^pi sin^d = sqrt(pi) Gamma(d/2+1/2)/Gamma(d/2+1)
        for n in (3, 6, 11):
            assert_agree(mp.quad(lambda p: mp.sin(p) ** n, [0, mp.pi]),
                         mp.sqrt(mp.pi) * mp.gamma(mp.mpf(n) / 2 + mp.mpf(1) / 2) / mp.gamma(mp.mpf(n) / 2 + 1), 20)


@pytest.mark.claim("eq.binexp")
def test_binexp_integral_smaller_for_negative_cos(record):
    with mp.workdps(25):
        worst = None
        for d in (2, 3, 8, 64):
            for k in (1, 2, 5, 20):
                for c in ("-1", "-0.3", mp.mpf(-1) / (d - 1)):
                    neg = mp.quad(lambda p: mp.sin(p) ** (d - 1) * (1 + mp.sin(p) * mp.mpf(c)) ** k, [0, mp.pi / 2]) * 2
                    zero = mp.quad(lambda p: mp.sin(p) ** (d - 1), [0, mp.pi / 2]) * 2
                    assert neg < zero
                    worst = (neg / zero) if worst is None else max(worst, neg / zero)
        record(worst, "max ratio")


@pytest.mark.claim("thm4.3.orf")
@pytest.mark.parametrize("d", [2, 5, 64, 1024])
def test_orf_conformity_routes(d, record):
    with mp.workdps(30):
        for v in ("0.1", "1", "3"):
            closed = theory.conformity("orthogonal", d, v)
            assert_agree(theory.orf_conformity_series(d, v), closed, 25, record)
            if d % 2 == 0:
                assert_agree(theory.orf_conformity_kummer(d, v), closed, 25, record)
        vv = mp.mpf(2)
        q = mp.quad(lambda w: theory.pdf_chi(w, 2 * d) * mp.hyp0f1(mp.mpf(d) / 2, (vv * w / 2) ** 2),
                    [0, mp.sqrt(2 * d), mp.sqrt(2 * d) + 12, mp.inf])
        assert_agree(q, theory.conformity("orthogonal", d, vv), 20, record)


@pytest.mark.claim("thm4.3.simrf")
@pytest.mark.parametrize("d", [2, 3, 16, 256])
def test_simrf_conformity_routes(d, record):
    with mp.workdps(30):
        c = mp.mpf(-1) / (d - 1)
        for v in ("0.1", "1", "3"):
            printed = theory.simrf_conformity_series(d, v)
            assert_agree(printed, theory.conformity("simplex", d, v), 25, record)
            assert_agree(printed, theory.conformity_at_angle_quad(d, v, c), 25, record)
        if d <= 16:
            assert_agree(theory.simrf_conformity_series(d, 1), theory.conformity_from_moments(d, 1, c), 25, record)


@pytest.mark.claim("thm4.3.orf", "thm4.3.simrf")
@pytest.mark.parametrize("coupling", ["orthogonal", "simplex"])
def test_conformities_monte_carlo(coupling, record):
    est = mc.empirical_conformity(coupling, 16, 1.1, m=16, n_draws=200_000, rng=44)
    with mp.workdps(20):
        assert_mc_agree(est, theory.conformity(coupling, 16, 1.1), record)
        other = "simplex" if coupling == "orthogonal" else "orthogonal"
        assert not mc_agrees(est, theory.conformity(other, 16, 1.1))


# ---------------------------------------------------------------------------
# Cor 4.4 (erratum in the main text)


def _printed_prf_gap_bracket(d, v):
    """Main-text eq. prf_orth_gap, bracket as printed (no 2^k)."""
    h = mp.mpf(d) / 2
    return mp.exp(v * v) - mp.gamma(h) / mp.gamma(d) * mp.fsum(
        v ** (2 * k) / mp.factorial(k) * mp.gamma(k + d) / mp.gamma(k + h) for k in range(400))


@pytest.mark.claim("cor4.4")
def test_cor_4_4_corrected_positive_and_printed_wrong(record):
    with mp.workdps(30):
        for d in (2, 3, 16, 64, 1024):
            for v in ("0.05", "0.5", "1", "2.5", "5"):
                vv = mp.mpf(v)
                gap = theory.orthogonality_gap(d, v, x_norm=vv / 2, y_norm=vv / 2)
                series = theory.orthogonality_gap_series(d, v, x_norm=vv / 2, y_norm=vv / 2)
                assert gap > 0
                assert_agree(gap, series, 25, record)
                printed = mp.exp(-vv * vv) * (d - 1) / d * _printed_prf_gap_bracket(d, vv)
                if d > 1:
                    assert not agrees(printed, gap, 2)
        assert _printed_prf_gap_bracket(16, mp.mpf(1)) < 0


# ---------------------------------------------------------------------------
# Thm 4.5, App. A.5, z_crit, Cor 4.6


@pytest.mark.claim("thm4.5")
@pytest.mark.parametrize("d", [3, 8, 64])
def test_thm_4_5_routes(d, record):
    with mp.workdps(30):
        for z in ("0.3", "1", "2.5"):
            zz = mp.mpf(z)
            printed = (d - 1) / mp.mpf(d) * (mp.exp(-zz * zz) - theory.rff_orf_conformity_series(d, z))
            assert_agree(printed, theory.rff_orthogonality_gap(d, z), 22, record)
            h = mp.mpf(d) / 2
            bessel = mp.quad(lambda w: theory.pdf_chi(w, 2 * d) * mp.gamma(h) * (zz * w / 2) ** (1 - h)
                             * mp.besselj(h - 1, zz * w), [0, mp.sqrt(2 * d), 2 * mp.sqrt(2 * d), mp.inf])
            assert_agree(bessel, theory.rff_conformity("orthogonal", d, z), 18, record)


@pytest.mark.claim("thm4.5", "app.rff_mse")
@pytest.mark.parametrize("coupling", ["iid", "orthogonal"])
def test_rff_mse_monte_carlo(coupling, record):
    d, z = 8, 1.2
    rng = np.random.default_rng(45)
    x = rng.standard_normal(d)
    x *= 0.5 / np.linalg.norm(x)
    y = x.copy()
    e = rng.standard_normal(d)
    y = x + z * e / np.linalg.norm(e)
    est = mc.empirical_mse(coupling, x, y, d, 200_000, kind="rff", rng=46)
    other = "orthogonal" if coupling == "iid" else "iid"
    with mp.workdps(20):
        assert_mc_agree(est, theory.rff_mse(coupling, d, z, m=d), record)
        assert not mc_agrees(est, theory.rff_mse(other, d, z, m=d))  # power: the other coupling's MSE


@pytest.mark.claim("app.rff_mse")
def test_sum_and_difference_identically_distributed(record):
    """For IID and ORF pairs, |w_i + w_j| and |w_i - w_j| have the same law
    (two-sample KS, 2 tests at 1e-6); for simplex pairs they do not (power)."""
    for coupling, same in (("iid", True), ("orthogonal", True), ("simplex", False)):
        W = mc.sample_weights(coupling, 4, 2, rng=47, n_draws=40_000)
        p = stats.ks_2samp(np.linalg.norm(W[:20_000, 0] + W[:20_000, 1], axis=1),
                           np.linalg.norm(W[20_000:, 0] - W[20_000:, 1], axis=1)).pvalue
        if same:
            record(p, "p-value", worst="low")
            assert p > 1e-6
        else:
            assert p < 1e-6


@pytest.mark.claim("sec4.2.zcrit")
def test_z_crit(record):
    with mp.workdps(25):
        assert theory.z_crit(2) == mp.inf
        zs = {}
        for d in (3, 8, 64, 256):
            zc = theory.z_crit(d)
            zs[d] = zc
            assert theory.rff_orthogonality_gap(d, zc * mp.mpf("0.999")) > 0
            assert theory.rff_orthogonality_gap(d, zc * mp.mpf("1.001")) < 0
            for frac in ("0.1", "0.5", "0.9"):
                assert theory.rff_orthogonality_gap(d, zc * mp.mpf(frac)) > 0
        assert zs[8] < zs[64] < zs[256]
        record(zs[256] / mp.sqrt(256), "z_crit/sqrt(d) at 256")


@pytest.mark.claim("cor4.6")
def test_cor_4_6(record):
    c = S.cor46_expansion()
    printed = 1 - (S.m - 1) * sp.exp(-S.z ** 2) * S.z ** 4 / (S.d * (1 - sp.exp(-S.z ** 2)) ** 2)
    assert sp.simplify(c["mse_ratio"] - printed) == 0
    assert sp.expand(c["ratio_k"] - (1 - S.k * (S.k - 1) * S.eps / 2)) == 0
    with mp.workdps(40):
        for m, z in ((2, "1"), (5, "0.6")):
            scaled = []
            for d in (256, 1024, 4096):
                scaled.append(d * d * (theory.rff_mse_ratio("orthogonal", "iid", d, z, m=m)
                                       - theory.rff_asymptotic_ratio(d, z, m=m)))
            record(abs(scaled[2] - scaled[1]) / abs(scaled[1]), "rel change of d^2 error")
            assert abs(scaled[2] - scaled[1]) < 0.05 * abs(scaled[1])


@pytest.mark.claim("app.a9.ratio")
def test_appendix_ratio_erratum(record):
    with mp.workdps(30):
        for d, m, z in ((64, 64, "1"), (16, 8, "0.7")):
            zz = mp.mpf(z)
            e_ort = theory.rff_conformity("orthogonal", d, z)
            corrected = 1 + 2 * (m - 1) / (1 - mp.exp(-zz * zz)) ** 2 * (e_ort - mp.exp(-zz * zz))
            printed = 1 + 2 * (m - 1) / (1 + mp.exp(-zz * zz)) ** 2 * (e_ort - mp.exp(-zz * zz))
            exact = theory.rff_mse_ratio("orthogonal", "iid", d, z, m=m)
            assert_agree(corrected, exact, 25, record)
            assert not agrees(printed, exact, 2)
    expansion = S.cor46_expansion()
    assert sp.simplify(expansion["mse_ratio_printed_appendix"] - expansion["mse_ratio"]) != 0


@pytest.mark.claim("app.a9.stirling")
def test_stirling_exponent_erratum(record):
    """With exponent k + d - 1 the Stirling form approaches the Gamma ratio as d grows;
    with the printed m + d - 1 (m != k) it does not."""
    k, m = 3, 5
    with mp.workdps(30):
        for d in (10 ** 3, 10 ** 4, 10 ** 5):
            d = mp.mpf(d)
            exact = mp.gamma(k + d) * mp.gamma(d / 2) / (2 ** k * mp.gamma(k + d / 2) * mp.gamma(d))

            def form(e):
                return (mp.sqrt((k + d - 1) * (d / 2 - 1) / ((k + d / 2 - 1) * (d - 1))) / 2 ** k
                        * (k + d - 1) ** e * (d / 2 - 1) ** (d / 2 - 1)
                        / ((k + d / 2 - 1) ** (k + d / 2 - 1) * (d - 1) ** (d - 1)))
            good = rel_diff(form(k + d - 1), exact)
            assert good < 10 / d
            assert rel_diff(form(m + d - 1), exact) > 0.5
        record(good, "rel at d = 1e5")


@pytest.mark.claim("fig5.dists")
def test_tails_ordered(record):
    """Survival P(w_ij > t) at t in the upper tail, d = 8: SimRF < ORF < IID;
    Monte Carlo survival agrees (3 comparisons at t = 6)."""
    d = 8
    c = -1 / (d - 1)
    for t in (6.0, 8.0):
        s_sim = printed_pdf_mass(t, np.inf, d, c)  # eq. theta_proby_dist at the simplex angle
        s_orf = float(stats.chi.sf(t, 2 * d))  # eq. chi_2d_dist
        s_iid = float(stats.chi.sf(t / np.sqrt(2), d))  # eq. iid_pdf: w / sqrt(2) ~ chi_d
        assert s_sim < s_orf < s_iid
        if t == 6.0:
            for coupling, ref in (("simplex", s_sim), ("orthogonal", s_orf), ("iid", s_iid)):
                W = mc.sample_weights(coupling, d, 2, rng=48, n_draws=200_000)
                tail = np.linalg.norm(W[:, 0] + W[:, 1], axis=1) > t
                assert_mc_agree(_Est(tail), ref, record, coupling)
                if coupling != "iid":  # power: the next coupling's tail (ORF for SimRF, IID for ORF) is rejected
                    assert not mc_agrees(_Est(tail), s_orf if coupling == "simplex" else s_iid)
    # f(w, v) = Gamma(d/2) sum_k ... is increasing in w
    with mp.workdps(15):
        vals = [mp.hyp0f1(mp.mpf(d) / 2, (mp.mpf("0.7") * w / 2) ** 2) for w in range(0, 20)]
        assert all(b > a for a, b in zip(vals, vals[1:]))


# ---------------------------------------------------------------------------
# App. B


@pytest.mark.claim("alg1")
def test_algorithm_1(record):
    rng = np.random.default_rng(49)
    for d in (2, 3, 17, 256):
        x = rng.standard_normal((5, d))
        dense = x @ np.asarray(mc.simplex_matrix(d)).T
        fast = np.asarray(mc.simplex_apply(x))
        err = np.abs(dense - fast).max()
        record(err, "abs")
        assert err < 1e-12
    with mp.workdps(30):
        xs = [mp.mpf(t) for t in rng.standard_normal(7)]
        s = theory.simplex_vectors(7)
        dense = [mp.fsum(s[i, j] * xs[j] for j in range(7)) for i in range(7)]
        assert all(agrees(a, b, 27) for a, b in zip(theory.simplex_apply(xs), dense))


@pytest.mark.claim("appB2.hd")
def test_hd_products(record):
    from scipy.linalg import hadamard
    for p in (2, 8, 64):
        h = hadamard(p) / np.sqrt(p)
        assert np.allclose(h @ h.T, np.eye(p), atol=1e-12)
        # the recursion H_i = [[H, H], [H, -H]] / sqrt(2) and the fast transform
        x = np.random.default_rng(p).standard_normal((3, p))
        assert np.allclose(np.asarray(mc.fwht(x)), x @ h.T, atol=1e-10)
        # an HD-product block (fast ORF) has orthogonal rows
        W = np.asarray(mc.sample_weights("fast_orthogonal", p, p, rng=p))
        U = W / np.linalg.norm(W, axis=1, keepdims=True)
        err = np.abs(U @ U.T - np.eye(p)).max()
        record(err, "abs")
        assert err < 1e-12
    # fast variants: rows approximately Gaussian (record the KS distance at n = 1e4)
    curve = mc.diagnostics.ks_distance_curve("fast_simplex", 16, sizes=(10_000,), rng=3)
    record(curve[10_000], "KS distance")
    assert curve[10_000] < 0.05
