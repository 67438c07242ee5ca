"""Beyond the paper: simplex coupling (and any angle) for random Fourier features."""

import itertools

import numpy as np
import pytest
from mpmath import mp

import montecarlo as mc
import theory
from paper_checks._compare import Z_CRIT, agrees

DIGITS = 25


def close(a, b, digits=DIGITS):
    return agrees(a, b, digits)


@pytest.mark.parametrize("d,z", list(itertools.product([2, 3, 8, 64, 1024], ["0", "0.1", "1", "2.5", "5"])))
def test_even_taylor_route_vs_quadrature(d, z):
    with mp.workdps(30):
        c = mp.mpf(-1) / (d - 1)
        a = theory.rff_conformity_at_angle(d, z, c)
        assert close(a, theory.rff_conformity_at_angle_quad(d, z, c))
        assert close(a, theory.rff_conformity("simplex", d, z))


@pytest.mark.parametrize("d,z", [(3, "1"), (16, "2.5"), (64, "0.3")])
def test_orthogonal_special_case_is_thm_4_5(d, z):
    with mp.workdps(30):
        assert close(theory.rff_conformity_at_angle(d, z, 0), theory.rff_orf_conformity_series(d, z))


@pytest.mark.parametrize("d,z,c", [(3, 1.3, -0.5), (6, 0.8, 0.7), (8, 2.2, -1 / 7)])
def test_against_bessel_quadrature_over_both_densities(d, z, c):
    """E[cos(w_+ . z)] over Lemma 4.2's density at cos(theta) plus E[cos(w_- . z)]
    at -cos(theta), with the Hankel kernel Gamma(d/2)(zw/2)^{1-d/2} J_{d/2-1}(zw):
    double precision (scipy), no 1F1 anywhere."""
    from scipy import integrate, special

    def hankel(w):
        return special.gamma(d / 2) * (z * w / 2) ** (1 - d / 2) * special.jv(d / 2 - 1, z * w) if w else 1.0

    parts = [integrate.quad(lambda w: theory.pdf_wij_float(w, d, s * c) * hankel(w), 0, 30, limit=200,
                            epsabs=1e-13)[0] for s in (1, -1)]
    with mp.workdps(20):
        assert abs((parts[0] + parts[1]) / 2 - float(theory.rff_conformity_at_angle(d, z, c))) < 1e-9


@pytest.mark.parametrize("d", [2, 3, 8, 64])
def test_z_to_zero_coefficient(d):
    """rho - e^{-z^2} = b z^4 + O(z^6) with b = (d cos^2 - 1)/(2(d+2))."""
    with mp.workdps(40):
        c = mp.mpf(-1) / (d - 1)
        z = mp.mpf("1e-4")
        num = (theory.rff_conformity_at_angle(d, z, c) - mp.exp(-z * z)) / z ** 4
        assert close(num, (d * c * c - 1) / (2 * mp.mpf(d + 2)), 6)
        assert close(theory.rff_mse_ratio("simplex", "orthogonal", d, 0),
                     theory.rff_mse_ratio("simplex", "orthogonal", d, "1e-6"), 8)


def test_large_d_limit_of_small_z_ratio_is_four_thirds():
    with mp.workdps(30):
        for d in (64, 1024, 2 ** 20):
            exact = (3 + mp.mpf(d) / (d - 1)) / 3
            assert close(theory.rff_mse_ratio("simplex", "orthogonal", d, 0), exact, 25)


@pytest.mark.parametrize("d,m,z", [(4, 4, 1.0), (8, 8, 2.8), (6, 14, 1.5)])
def test_simplex_rff_mse_against_monte_carlo(d, m, z):
    """Empirical RFF MSE of sampled simplex blocks vs the closed form (3
    comparisons at |z| <= 4.5, family-wise false alarm 2e-5); the shortcut of
    App. A.5 (treating w_i - w_j like w_i + w_j, i.e. g(cos theta)) is rejected."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(d)
    x *= 0.3 / np.linalg.norm(x)
    e = rng.standard_normal(d)
    y = x + z * e / np.linalg.norm(e)
    est = mc.empirical_mse("simplex", x, y, m, 200_000, kind="rff", rng=8)
    with mp.workdps(20):
        expected = theory.rff_mse("simplex", d, z, m=m)
        zz = mp.mpf(z)
        c = mp.mpf(-1) / (d - 1)
        w = mp.mpf(theory.coupled_pairs(d, m)) / m
        # the shortcut: rho = g(cos theta), the w_i + w_j law used for w_i - w_j too (odd Taylor terms kept)
        h = mp.mpf(d) / 2
        gc = 2 * mp.quad(lambda p: mp.exp((d - 1) * mp.log(mp.sin(p)) + mp.loggamma(d) - (d - 1) * mp.log(2)
                                             - 2 * mp.loggamma(h)) * mp.hyp1f1(d, h, -zz * zz / 2 * (1 + c * mp.sin(p)),
                                                                               zeroprec=80),
                         [0, mp.pi / 4, mp.pi / 2])
        wrong = ((1 - mp.exp(-zz * zz)) ** 2 / 2 + w * (gc - mp.exp(-zz * zz))) / m
    zscore = (est.mean - float(expected)) / est.stderr
    assert abs(zscore) <= Z_CRIT, (est.mean, est.stderr, expected)
    if d == 4:
        assert abs((est.mean - float(wrong)) / est.stderr) > Z_CRIT


def test_simplex_rff_loses_to_orf_at_small_z_and_wins_in_a_window():
    """The map reported in the README: SimRF/ORF RFF MSE ratio > 1 for z -> 0 at
    every d, below 1 only in a window (e.g. d = 3, z = 3)."""
    with mp.workdps(20):
        for d in (2, 3, 8, 64, 1024):
            assert theory.rff_mse_ratio("simplex", "orthogonal", d, "0.25") > 1
        assert theory.rff_mse_ratio("simplex", "orthogonal", 3, 3) < mp.mpf("0.95")
        assert theory.rff_mse_ratio("simplex", "orthogonal", 2, 3) > 1


def test_szego_bound_used_by_the_taylor_remainder():
    """The even-d remainder of the Taylor route (and of its certified twin) uses
    |M(d+p, d/2+p, -y)| <= e^{-y/2} (Kummer + Szego's Laguerre bound, DLMF 18.14.8).  Checked
    against mpmath's 1F1 at 60 digits over d, p and y spanning the oscillating and decaying
    ranges; power: the stronger (false) bound e^{-y} fails on the same grid."""
    worst, wrong_fails = mp.mpf(0), False
    with mp.workdps(60):
        for d in (2, 4, 8, 64, 1024):
            h = mp.mpf(d) / 2
            for p in (0, 1, 2, 5):
                for y in ("0.01", "0.7", "10.3", "100.3", "1000.3", "5000.3"):  # not y = 1: M(2, 1, -1) = 0
                    yy = mp.mpf(y)
                    m = mp.hyp1f1(d + p, h + p, -yy, maxterms=10 ** 6, maxprec=40000)
                    worst = max(worst, abs(m) * mp.exp(yy / 2))
                    wrong_fails = wrong_fails or abs(m) > mp.exp(-yy)
    assert worst <= 1
    assert wrong_fails


@pytest.mark.parametrize("d,y,p", [(2, "3.5", 2), (7, "40", 4), (64, "50", 2), (64, "900", 6), (1024, "5000", 4)])
def test_recurrence_tail_bounds_the_true_tail_and_follows_its_size(d, y, p):
    """The Taylor route's value-following remainder (DLMF 13.3.7 majorant from the computed
    f_{p-1}, f_p) bounds the true tail sum_{k>p} (|c|t)^k/k! (d)_k/(d/2)_k |f_k| (computed here term
    by term at 40 digits from theory's 1F1 values, checked elsewhere, up to k = p + 40: the terms
    beyond add at most 2e-12 of it at these arguments), and stays
    within 10^4 of it, where the a-priori bound (d)_k/(d/2)_k e^{-t/2} exceeds it by up to 10^700."""
    from theory._hypergeometric import hyp1f1_neg
    from theory.conformities import _recurrence_tail

    with mp.workdps(40):
        t, h, cabs = mp.mpf(y), mp.mpf(d) / 2, mp.mpf(1) / (d - 1)

        def f(k):
            return hyp1f1_neg(mp.mpf(d + k), h + k, t, "test")

        cap = mp.exp(-t / 2) if d % 2 == 0 else mp.mpf(1)
        cf, true_tail = mp.mpf(1), mp.mpf(0)
        for k in range(p + 41):
            if k == p:
                cf_p = cf
            if k > p:
                true_tail += cf * abs(f(k))  # R_k <= 1 is used by the bound: compare with R_k = 1
            cf = cf * cabs * t / (k + 1) * (d + k) / (h + k)
        bound = _recurrence_tail(d, h, t, cabs, p, cf_p, f(p - 1), f(p), cap)
        assert true_tail <= bound <= 10 ** 4 * true_tail, (mp.nstr(true_tail, 5), mp.nstr(bound, 5))
