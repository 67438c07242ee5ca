"""Mutation resistance: plausible typos injected into the central formulas are
detected by the same comparisons the suite uses (``agrees`` at the suite's
digit thresholds, ``mc_agrees`` at |z| <= 4.5, the O(1/d^2) order test).

Each test evaluates the correct form and a mutant against an independent
route: the correct one must pass and the mutant must fail."""

import numpy as np
import pytest
from mpmath import mp

import montecarlo as mc
import theory
from paper_checks._compare import agrees, mc_agrees

DIGITS = 25


def orf_series(d, v, two_k=True, gamma_shift=0):
    """eq. orf_conformity, optionally without 2^k or with Gamma(k+d+shift)."""
    h = mp.mpf(d) / 2
    return mp.gamma(h) / mp.gamma(d) * mp.fsum(
        v ** (2 * k) / ((2 ** k if two_k else 1) * mp.factorial(k)) * mp.gamma(k + d + gamma_shift) / mp.gamma(k + h)
        for k in range(300))


def simrf_series(d, v, sign=-1, g_shift=0):
    """eq. simrf_conformity with cos(theta) = sign/(d-1) and Gamma((d+p+1+g_shift)/2)."""
    c = mp.mpf(sign) / (d - 1)
    pref = mp.sqrt(mp.pi) / (mp.gamma(mp.mpf(d) / 2) * 2 ** (d - 1))
    total = mp.mpf(0)
    for k in range(120):
        inner = mp.fsum(c ** p * mp.gamma(mp.mpf(d + p) / 2) / mp.gamma(mp.mpf(d + p + 1 + g_shift) / 2)
                        / (mp.factorial(k - p) * mp.factorial(p)) for p in range(k + 1))
        total += mp.gamma(k + d) / mp.gamma(k + mp.mpf(d) / 2) * v ** (2 * k) / 2 ** k * inner
    return pref * total


@pytest.mark.parametrize("mutant", ["drop 2^k", "Gamma(k+d-1)", "Gamma(k+d+1)"])
def test_orf_conformity_mutants(mutant):
    with mp.workdps(60):
        d, v = 16, mp.mpf("1.5")
        ref = theory.conformity("orthogonal", d, v)  # 1F1 route
        assert agrees(orf_series(d, v), ref, DIGITS)
        bad = {"drop 2^k": orf_series(d, v, two_k=False),
               "Gamma(k+d-1)": orf_series(d, v, gamma_shift=-1) * (d - 1),  # renormalised at k = 0
               "Gamma(k+d+1)": orf_series(d, v, gamma_shift=1) / d}[mutant]
        assert not agrees(bad, ref, DIGITS)


@pytest.mark.parametrize("mutant", ["sign of cos theta", "Gamma((d+p+2)/2)"])
def test_simrf_conformity_mutants(mutant):
    with mp.workdps(40):
        d, v = 6, mp.mpf(1)
        ref = theory.conformity_at_angle_quad(d, v, mp.mpf(-1) / (d - 1))  # integral route
        assert agrees(simrf_series(d, v), ref, DIGITS)
        bad = simrf_series(d, v, sign=+1) if mutant == "sign of cos theta" else simrf_series(d, v, g_shift=1)
        assert not agrees(bad, ref, DIGITS)


def test_simrf_sign_mutant_caught_by_monte_carlo():
    est = mc.empirical_conformity("simplex", 6, 1.0, m=6, n_draws=100_000, rng=90)
    with mp.workdps(20):
        assert mc_agrees(est, theory.conformity_at_angle(6, 1, mp.mpf(-1) / 5))
        assert not mc_agrees(est, theory.conformity_at_angle(6, 1, mp.mpf(1) / 5))


def _mse(rho, m, xn, yn, v, pairs_factor):
    return mp.exp(-2 * xn ** 2 - 2 * yn ** 2) / m * (mp.exp(2 * v * v) - mp.exp(v * v)
                                                     + pairs_factor * (rho - mp.exp(v * v)))


def test_thm_3_2_m_instead_of_m_minus_1():
    d, m, xn, yn, v = 8, 8, mp.mpf("0.4"), mp.mpf("0.5"), mp.mpf("0.8")
    with mp.workdps(40):
        rho = theory.conformity("simplex", d, v)
        s = m * mp.exp(2 * v * v) + m * (m - 1) * rho
        brute = mp.exp(-2 * xn ** 2 - 2 * yn ** 2) * s / m ** 2 - mp.exp(-(2 * xn ** 2 + 2 * yn ** 2 - v * v))
        assert agrees(_mse(rho, m, xn, yn, v, m - 1), brute, DIGITS)
        assert not agrees(_mse(rho, m, xn, yn, v, m), brute, DIGITS)
    x, y = np.zeros(d), np.zeros(d)
    x[0] = 0.4
    y[:2] = [0.4 * np.cos(1.0), 0.4 * np.sin(1.0)]
    xn_, yn_, v_ = 0.4, 0.4, float(np.linalg.norm(x + y))
    est = mc.empirical_mse("simplex", x, y, m, 200_000, rng=91)
    with mp.workdps(20):
        rho = theory.conformity("simplex", d, v_)
        good = _mse(rho, m, mp.mpf(xn_), mp.mpf(yn_), mp.mpf(v_), m - 1)
        bad = _mse(rho, m, mp.mpf(xn_), mp.mpf(yn_), mp.mpf(v_), m)
    assert mc_agrees(est, good)
    assert not mc_agrees(est, bad)


def test_cor_4_4_dropped_2k_caught():
    with mp.workdps(40):
        d, v = 16, mp.mpf(1)
        series = theory.orthogonality_gap_series(d, v, x_norm=v / 2, y_norm=v / 2)
        good = mp.exp(-v * v) * (d - 1) / d * (mp.exp(v * v) - orf_series(d, v))
        bad = mp.exp(-v * v) * (d - 1) / d * (mp.exp(v * v) - orf_series(d, v, two_k=False))
        assert agrees(good, series, DIGITS) and good > 0
        assert not agrees(bad, series, DIGITS) and bad < 0


def test_thm_4_5_sign_mutant_caught_by_bessel_route():
    d, z = 8, mp.mpf("1.2")
    with mp.workdps(30):
        h = mp.mpf(d) / 2
        bessel = mp.quad(lambda w: theory.pdf_chi(w, 2 * d) * mp.gamma(h) * (z * w / 2) ** (1 - h)
                         * mp.besselj(h - 1, z * w), [0, 4, 8, mp.inf])
        good = mp.gamma(h) / mp.gamma(d) * mp.fsum((-z * z) ** k / (2 ** k * mp.factorial(k))
                                                    * mp.gamma(k + d) / mp.gamma(k + h) for k in range(200))
        bad = mp.gamma(h) / mp.gamma(d) * mp.fsum((z * z) ** k / (2 ** k * mp.factorial(k))
                                                   * mp.gamma(k + d) / mp.gamma(k + h) for k in range(200))
        assert agrees(good, bessel, 18)
        assert not agrees(bad, bessel, 18)


def test_cor_4_6_coefficient_mutant_caught_by_order_test():
    m, z = 2, "1"

    def converges(asym):
        with mp.workdps(40):
            scaled = [d * d * (theory.rff_mse_ratio("orthogonal", "iid", d, z, m=m) - asym(d)) for d in (256, 1024, 4096)]
        return abs(scaled[2] - scaled[1]) < 0.05 * abs(scaled[1])

    def good(d):
        return theory.rff_asymptotic_ratio(d, z, m=m)

    def half(d):  # z^4/(2d) instead of z^4/d
        return 1 - (1 - theory.rff_asymptotic_ratio(d, z, m=m)) / 2

    def wrong_m(d):  # m instead of m - 1
        return 1 - (1 - theory.rff_asymptotic_ratio(d, z, m=m)) * m / (m - 1)

    assert converges(good)
    assert not converges(half)
    assert not converges(wrong_m)


@pytest.mark.parametrize("mutant", ["Gamma(d/2-1/2)", "drop 2^d", "Gamma(d/2+1)^1"])
def test_v2_prefactor_mutants(mutant):
    d = 64
    with mp.workdps(40):
        limit = theory.mse_ratio("simplex", "iid", d, "1e-12")  # numerical limit of the exact ratio
        h = mp.mpf(d) / 2

        def form(g_top, two_d, sq):
            return 1 - mp.sqrt(mp.pi) * mp.gamma(d + 1) * mp.gamma(g_top) / (
                mp.gamma(h) * mp.gamma(h + 1) ** sq * (2 ** d if two_d else 1))

        assert agrees(form(h + mp.mpf(1) / 2, True, 2), limit, 20)
        bad = {"Gamma(d/2-1/2)": form(h - mp.mpf(1) / 2, True, 2),
               "drop 2^d": form(h + mp.mpf(1) / 2, False, 2),
               "Gamma(d/2+1)^1": form(h + mp.mpf(1) / 2, True, 1)}[mutant]
        assert not agrees(bad, limit, 20)


def test_iid_conformity_mutant():
    with mp.workdps(25):
        d, v = 5, mp.mpf("1.1")
        q = mp.quad(lambda w: theory.pdf_wij_iid(w, d) * mp.hyp0f1(mp.mpf(d) / 2, (v * w / 2) ** 2), [0, 4, mp.inf])
        assert agrees(mp.exp(v * v), q, 18)
        assert not agrees(mp.exp(v * v / 2), q, 18)
