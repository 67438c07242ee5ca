"""MSEs (Thm 3.2 for any m, ensembles), ratios, gaps (Cor 4.4, Thm 4.5), Cor 4.6,
z_crit and the Sec. 5.1 prefactor, each against an independent computation."""

import itertools
import math
import warnings
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from mpmath import mp

import montecarlo as mc
import theory
from _support import BIG, rel_err
from paper_checks._compare import agrees, rel_diff
from theory import _context, certified as C, conformities, mse
from theory.errors import ConvergenceError
from theory.kernels import coupled_pairs

DS = [2, 3, 4, 6, 16, 64, 256, 1024]
ZS = ["0", "0.1", "1", "2.5", "5"]


def brute_force_prf_mse(coupling, d, m, xn, yn, v, kernel="gaussian"):
    """E[K_hat^2] - K^2 summed over every ordered pair: a pair is coupled iff
    both rows lie in the same block of d consecutive rows (the ensemble
    definition), else independent; E[b_i^2] = exp(2v^2), E[b_i] = exp(v^2/2)."""
    xn, yn, v = mp.mpf(xn), mp.mpf(yn), mp.mpf(v)
    rho_c = theory.conformity(coupling, d, v)
    s = m * mp.exp(2 * v * v)
    for i in range(m):
        for j in range(m):
            if i != j:
                s += rho_c if i // d == j // d else mp.exp(v * v)
    if kernel == "gaussian":
        pref = mp.exp(-xn * xn - yn * yn)
        target = mp.exp(-(2 * xn * xn + 2 * yn * yn - v * v) / 2)  # exp(-|x - y|^2 / 2)
    else:
        pref = mp.exp(-(xn * xn + yn * yn) / 2)
        target = mp.exp((v * v - xn * xn - yn * yn) / 2)  # exp(x . y)
    return pref ** 2 * s / m ** 2 - target ** 2


@pytest.mark.parametrize("coupling,d,m,xn,yn,v", [
    ("iid", 5, 3, "0.3", "0.4", "0.5"),
    ("orthogonal", 8, 8, "0.5", "0.5", "1"),
    ("simplex", 8, 5, "0.7", "0.2", "0.6"),
    ("simplex", 4, 11, "1", "1", "1.5"),      # 2 full blocks + a truncated block of 3
    ("orthogonal", 3, 7, "0.2", "0.9", "0.8"),
    ("simplex", 2, 2, "0.1", "0.1", "0.2"),
    ("simplex", 16, 130, "0.5", "0.6", "0.9"),
])
@pytest.mark.parametrize("kernel", ["gaussian", "softmax"])
def test_prf_mse_against_pairwise_brute_force(coupling, d, m, xn, yn, v, kernel):
    with mp.workdps(60):
        ref = brute_force_prf_mse(coupling, d, m, xn, yn, v, kernel)
    with mp.workdps(30):
        got = theory.prf_mse(coupling, d, v, m=m, x_norm=xn, y_norm=yn, kernel=kernel)
        assert agrees(got, ref, 25), (got, ref)
        rho = theory.ensemble_conformity(theory.conformity(coupling, d, v), mp.exp(mp.mpf(v) ** 2), d, m) \
            if m > 1 else 0
        assert agrees(theory.prf_mse_from_conformity(rho, v, m=m, x_norm=xn, y_norm=yn, kernel=kernel), ref, 25)


def test_brute_force_detects_wrong_block_structure():
    """Power: treating all pairs as coupled (ignoring blocks) changes the MSE."""
    with mp.workdps(30):
        got = theory.prf_mse("simplex", 4, "1.5", m=11, x_norm=1, y_norm=1)
        rho_all = theory.conformity("simplex", 4, "1.5")
        wrong = theory.prf_mse_from_conformity(rho_all, "1.5", m=11, x_norm=1, y_norm=1)
        assert not agrees(got, wrong, 3)


@pytest.mark.parametrize("d,m", [(1, 1), (1, 5), (4, 4), (4, 9), (7, 20), (64, 130), (3, 2)])
def test_block_structure(d, m):
    sizes = theory.block_sizes(d, m)
    assert sum(sizes) == m and all(0 < b <= d for b in sizes) and sizes[:-1] == [d] * (len(sizes) - 1)
    pairs = sum(1 for i in range(m) for j in range(m) if i != j and i // d == j // d)
    assert theory.coupled_pairs(d, m) == pairs


def test_kernel_conversion():
    """K_gauss = K_smax exp(-|x|^2/2 - |y|^2/2) for random vectors."""
    import random
    rnd = random.Random(3)
    with mp.workdps(30):
        for _ in range(5):
            x = [mp.mpf(rnd.gauss(0, 1)) for _ in range(4)]
            y = [mp.mpf(rnd.gauss(0, 1)) for _ in range(4)]
            dist = mp.sqrt(mp.fsum((a - b) ** 2 for a, b in zip(x, y)))
            dot = mp.fsum(a * b for a, b in zip(x, y))
            xn, yn = mp.sqrt(mp.fsum(a * a for a in x)), mp.sqrt(mp.fsum(b * b for b in y))
            lhs = theory.gaussian_kernel(dist)
            rhs = theory.softmax_kernel(dot) * theory.softmax_to_gaussian_factor(xn, yn)
            assert agrees(lhs, rhs, 28)


# ---------------------------------------------------------------------------
# ratios and the Sec. 5.1 prefactor


@pytest.mark.parametrize("d", [2, 3, 8, 64, 1024])
def test_v2_prefactor_printed_vs_sine_moment_form(d):
    with mp.workdps(30):
        assert agrees(theory.simplex_v2_prefactor(d), theory.simplex_v2_prefactor_printed(d), 28)


def test_v2_prefactor_value_at_64():
    """Sec. 5.1: 'For d = 64, the SimRF v^2 prefactor evaluates to 0.0078'."""
    with mp.workdps(30):
        c = theory.simplex_v2_prefactor(64)
        assert mp.nstr(c, 2) == "0.0078"


@pytest.mark.parametrize("d,m", [(64, None), (64, 10), (64, 64), (16, 40), (5, 3), (2, 2)])
def test_v2_prefactor_is_the_small_v_limit_of_the_exact_ratio(d, m):
    """Numerical limit of the exact conformity-based ratio at v = 1e-8 (O(v^2)
    corrections ~1e-16) against the closed form."""
    with mp.workdps(40):
        r = theory.mse_ratio("simplex", "iid", d, "1e-8", m=m)
        assert agrees(r, theory.simplex_v2_prefactor(d, m=m), 14)
        assert theory.mse_ratio("simplex", "iid", d, 0, m=m) == theory.simplex_v2_prefactor(d, m=m)
        # and the orthogonal ratio tends to 1
        assert agrees(theory.mse_ratio("orthogonal", "iid", d, "1e-8", m=m), 1, 14)


@pytest.mark.parametrize("d,v", list(itertools.product([3, 16, 64], ["0.1", "1", "2.5"])))
def test_mse_ratio_is_ratio_of_mses(d, v):
    with mp.workdps(30):
        v_ = mp.mpf(v)
        a = theory.prf_mse("simplex", d, v_, m=d, x_norm=v_ / 2, y_norm=v_ / 2)
        b = theory.prf_mse("orthogonal", d, v_, m=d, x_norm=v_ / 2, y_norm=v_ / 2)
        assert agrees(theory.mse_ratio("simplex", "orthogonal", d, v), a / b, 27)
        assert theory.mse_ratio("simplex", "iid", d, v) < theory.mse_ratio("orthogonal", "iid", d, v) < 1


# ---------------------------------------------------------------------------
# orthogonality gaps


@pytest.mark.parametrize("d,v", list(itertools.product([2, 3, 16, 64, 1024], ["0.1", "1", "2.5", "5"])))
def test_prf_orthogonality_gap_three_routes_and_positive(d, v):
    with mp.workdps(30):
        v_ = mp.mpf(v)
        xn = yn = v_ / 2
        m = min(d, 7)
        gap = theory.orthogonality_gap(d, v, m=m, x_norm=xn, y_norm=yn)
        series = theory.orthogonality_gap_series(d, v, m=m, x_norm=xn, y_norm=yn)  # App. A.8 positive series
        with mp.workdps(60):  # a difference of two MSEs: spare digits for the cancellation
            diff = theory.prf_mse("iid", d, v, m=m, x_norm=xn, y_norm=yn) - theory.prf_mse("orthogonal", d, v, m=m, x_norm=xn, y_norm=yn)
        assert gap > 0
        assert agrees(gap, series, 25)
        assert agrees(gap, diff, 20)


def test_prf_gap_printed_without_2k_disagrees():
    """Power (and the erratum recorded in paper_checks): eq. prf_orth_gap in the
    main text omits the 2^k of eq. orf_conformity; that form is negative."""
    with mp.workdps(30):
        d, v, m = 16, mp.mpf(1), 16
        h = mp.mpf(d) / 2
        printed = mp.exp(v * v) - mp.gamma(h) / mp.gamma(d) * mp.nsum(
            lambda k: v ** (2 * k) / mp.factorial(k) * mp.gamma(k + d) / mp.gamma(k + h), [0, mp.inf])
        printed *= mp.exp(-2 * (v / 2) ** 2 * 2) * (m - 1) / m
        gap = theory.orthogonality_gap(d, v, m=m, x_norm=v / 2, y_norm=v / 2)
        assert printed < 0 < gap


@pytest.mark.parametrize("d,z", list(itertools.product(DS, ZS)))
def test_rff_orf_conformity_routes(d, z):
    """Thm 4.5's series as printed (alternating; cancellation controlled) vs 1F1
    vs Kummer's finite sum for even d."""
    with mp.workdps(30):
        closed = theory.rff_conformity("orthogonal", d, z)
        printed = theory.rff_orf_conformity_series(d, z)
        assert agrees(closed, printed, 25)
        if d % 2 == 0:
            with mp.workdps(120):  # the finite alternating sum cancels: evaluate it with spare digits
                z_ = mp.mpf(z)
                n = d // 2
                poly = mp.fsum(mp.rf(-n, j) / mp.rf(n, j) * (z_ * z_ / 2) ** j / mp.factorial(j)
                               for j in range(n + 1))
                kummer = mp.exp(-z_ * z_ / 2) * poly
            assert agrees(closed, kummer, 25)


@pytest.mark.parametrize("d,z", [(3, "1"), (4, "2.5"), (16, "1"), (7, "0.3")])
def test_rff_orf_conformity_against_bessel_quadrature(d, z):
    """E[cos(w_ij . z)] over the chi_2d density with the Hankel kernel
    Gamma(d/2) (zw/2)^(1-d/2) J_{d/2-1}(zw) (App. A.5) -- no 1F1 involved."""
    with mp.workdps(25):
        z_ = mp.mpf(z)
        h = mp.mpf(d) / 2

        def f(w):
            return theory.pdf_chi(w, 2 * d) * mp.gamma(h) * (z_ * w / 2) ** (1 - h) * mp.besselj(h - 1, z_ * w)

        q = mp.quad(f, [0, mp.sqrt(2 * d), 2 * mp.sqrt(2 * d), mp.inf])
        assert agrees(q, theory.rff_conformity("orthogonal", d, z), 18)


@pytest.mark.parametrize("d,m,z", [(4, 3, "0.7"), (16, 16, "1.3"), (5, 12, "2")])
def test_rff_mse_formula_by_pairs(d, m, z):
    """RFF MSE from first principles: Var(sum a_i)/m^2 with Var(a_i) =
    (1 - e^{-z^2})^2/2 and pair covariances by block membership."""
    with mp.workdps(40):
        z_ = mp.mpf(z)
        rho = theory.rff_conformity("orthogonal", d, z)
        cov = mp.fsum((rho if i // d == j // d else mp.exp(-z_ * z_)) - mp.exp(-z_ * z_)
                      for i in range(m) for j in range(m) if i != j)
        ref = (m * (1 - mp.exp(-z_ * z_)) ** 2 / 2 + cov) / m ** 2
    with mp.workdps(30):
        assert agrees(theory.rff_mse("orthogonal", d, z, m=m), ref, 25)
        assert agrees(theory.rff_mse("iid", d, z, m=m), (1 - mp.exp(-z_ * z_)) ** 2 / (2 * m), 25)


def test_rff_ratio_limit_at_zero():
    with mp.workdps(30):
        for d, m in [(64, None), (8, 3), (4, 9)]:
            lim = theory.rff_mse_ratio("orthogonal", "iid", d, 0, m=m)
            assert agrees(lim, theory.rff_mse_ratio("orthogonal", "iid", d, "1e-6", m=m), 10)
        assert agrees(theory.rff_mse_ratio("orthogonal", "iid", 64, 0), 1 - mp.mpf(63) / 66, 28)


@pytest.mark.parametrize("d", [2, 3, 4, 8, 64])
def test_rff_gap_sign_and_z_crit(d):
    with mp.workdps(30):
        zc = theory.z_crit(d)
        if d == 2:
            assert zc == mp.inf
            for z in ("0.5", "2", "5", "10"):
                y = mp.mpf(z) ** 2 / 2  # closed form for d = 2
                gap = theory.rff_orthogonality_gap(2, z, m=2)
                assert gap > 0 and agrees(gap, mp.exp(-y) * (mp.exp(-y) - 1 + y) / 2, 25)
            return
        for z in (zc / 4, zc / 2, zc * mp.mpf("0.99")):
            assert theory.rff_orthogonality_gap(d, z, m=d) > 0
        assert theory.rff_orthogonality_gap(d, zc * mp.mpf("1.001"), m=d) < 0
        assert abs(theory.rff_orthogonality_gap(d, zc, m=d)) < mp.mpf(10) ** -25


def test_z_crit_grows_with_d():
    """Sec. 4.2: z_crit(d) diverges as d -> infinity (seen here ~ sqrt(d))."""
    with mp.workdps(20):
        zs = [theory.z_crit(d) for d in (16, 64, 256)]
        assert zs[0] < zs[1] < zs[2]
        assert 0.5 < zs[2] / mp.sqrt(256) < 1


@pytest.mark.parametrize("m,z", [(2, "1"), (4, "0.5"), (3, "2")])
def test_cor_4_6_error_is_order_1_over_d_squared(m, z):
    """d^2 (exact - asymptotic) converges as d grows (fixed m), while a wrong
    1/d coefficient (half of it) leaves an error of order 1/d (power)."""
    with mp.workdps(40):
        scaled, scaled_wrong = [], []
        for d in (256, 1024, 4096):
            exact = theory.rff_mse_ratio("orthogonal", "iid", d, z, m=m)
            asym = theory.rff_asymptotic_ratio(d, z, m=m)
            scaled.append(d * d * (exact - asym))
            wrong = 1 - (1 - asym) / 2
            scaled_wrong.append(d * d * (exact - wrong))
        assert abs(scaled[2] - scaled[1]) < 0.05 * abs(scaled[1])
        assert abs(scaled_wrong[2]) > 3.5 * abs(scaled_wrong[1])


@pytest.mark.parametrize("z", ["1", "2"])
def test_cor_4_6_error_at_m_equal_d_is_order_1_over_d(z):
    """With m = d the neglected terms carry the pair weight P/m = d - 1, so the error is
    O(1/d), as rff_asymptotic_ratio's docstring states: d (exact - asymptotic) settles to a
    constant while d^2 (exact - asymptotic) grows fourfold per fourfold d."""
    with mp.workdps(40):
        by_d, by_d2 = [], []
        for d in (256, 1024, 4096):
            err = theory.rff_mse_ratio("orthogonal", "iid", d, z) - theory.rff_asymptotic_ratio(d, z)
            by_d.append(d * err)
            by_d2.append(d * d * err)
        assert abs(by_d[2] - by_d[1]) < 0.02 * abs(by_d[1])
        assert 3.5 < by_d2[2] / by_d2[1] < 4.5
        assert abs(by_d[2]) < 2


# ---------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize("call,match", [
    (lambda: theory.prf_mse("simplex", 4, 1, m=0, x_norm=1, y_norm=1), "m must be an integer >= 1"),
    (lambda: theory.prf_mse("simplex", 4, 3, m=2, x_norm=1, y_norm=1), r"v = \|\|x \+ y\|\| must lie in"),
    (lambda: theory.prf_mse("simplex", 4, 1, m=2, x_norm=1, y_norm=1, kernel="laplace"), "kernel must be one of"),
    (lambda: theory.prf_mse("simplex_plus", 4, 1, m=2, x_norm=1, y_norm=1), "coupling must be one of"),
    (lambda: theory.rff_mse("simplex_plus", 4, 1, m=2), "coupling must be one of 'iid', 'orthogonal', 'simplex'"),
    (lambda: theory.rff_mse("iid", 4, -1, m=2), "z must be >= 0"),
    (lambda: theory.mse_ratio("simplex", "iid", 1, 1), "d must be an integer >= 2 for the simplex"),
    (lambda: theory.mse_ratio("simplex", "orf", 4, 1), "baseline must be one of"),
    (lambda: theory.simplex_v2_prefactor(4, m=0), "m must be an integer >= 1"),
    (lambda: theory.z_crit(1), "d must be an integer >= 2"),
    (lambda: theory.ensemble_conformity(2, 1, 4, 1), "m must be an integer >= 2"),
    (lambda: theory.orthogonality_gap(4, 1, m=2, x_norm=0.1, y_norm=0.1), r"must lie in"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_norms_and_v_are_checked_relatively_at_every_scale():
    """Issue 38: kernel_mse('simplex', 8, 1e-30, x_norm=2.5e-31, y_norm=2.5e-31) was accepted at dps <= 15 (v twice
    the largest |x + y| = 5e-31: an absolute slack of 2^-prec), while prf_mse refused it.  One relative check
    (1e-9 of |x| + |y|) for both, at every precision; v rounded within it is still accepted (power), and so is
    v = |x| + |y| = 0."""
    for dps in (15, 30):
        with mp.workdps(dps):
            for f in (theory.kernel_mse, theory.prf_mse):
                with pytest.raises(ValueError, match=r"v = \|\|x \+ y\|\| must lie in \[.*5.0e-31\], got 1e-30"):
                    f("simplex", 8, 1e-30, x_norm=2.5e-31, y_norm=2.5e-31)
                assert f("simplex", 8, 1e-30 * (1 + 1e-10), x_norm=5e-31, y_norm=5e-31) > 0
                assert f("simplex", 8, 0, x_norm=0, y_norm=0) == 0


def test_an_empty_grid_is_refused_by_name():
    """Issue 38: kernel_mse with v=[] returned an empty array without checking d (d = 1 passed).  An empty grid
    argument is refused, naming it, as certified's and hyperbolic_ordering's grids are; a one-point grid works."""
    for call, name in ((lambda: theory.kernel_mse("simplex", 1, [], x_norm=0.1, y_norm=0.1), "v"),
                       (lambda: theory.kernel_mse("simplex", 8, np.zeros(0), x_norm=0.1, y_norm=0.1), "v"),
                       (lambda: theory.conformity("simplex", np.zeros((3, 0), dtype=int), 0.5), "d"),
                       (lambda: theory.rff_mse("orthogonal", 8, ()), "z")):
        with pytest.raises(ValueError, match=rf"^{name} must hold at least one value .*got "):
            call()
    assert theory.conformity("simplex", 8, [0.5]).shape == (1,)


# ---------------------------------------------------------------------------
# theory, third exploration round: the kind MSEs at huge d, the kernel prefactor at huge norms, the OPRF variance at
# small A, the default m of mean_conformity, the grids of hyperbolic_ordering.
#
# Every reference is independent of the code under test:
#
# * the pair terms at huge d by a term-by-term series written out here: given the norms r_i, r_j (i.i.d. chi_d) and
#   the angle c, E e^{(w_i + w_j).v} = 0F1(; d/2; v^2 S / 4), S = r_i^2 + r_j^2 + 2 c r_i r_j, so
#   rho(c) = sum_k (v^2/4)^k E[S^k] / ((d/2)_k k!) with E[S^k] from the multinomial expansion and the chi_d moments
#   E r^{2j} = 2^j (d/2)_j, E r^{2j+1} = 2^{j+1/2} (d/2 + 1/2)_j Gamma((d+1)/2)/Gamma(d/2) (the package sums 1F1s and
#   quadratures instead); the RFF pair term is the same series at v^2 -> -z^2;
# * the kernel prefactors as exp(-2c(X^2 + Y^2)) at 300 digits from the exact binary norms, times the inner factor
#   written out with mpmath's hyp1f1 / hyp0f1;
# * the OPRF moments as (1-4A)^d (1-8A)^(-d/2) e^{2(1-4A)v^2/(1-8A)} - e^{v^2} at 700 digits (600 for large v).


def _pair_series(d, t, c, symmetric):
    """sum_k (t/4)^k E[S^k] / ((d/2)_k k!), S = r_1^2 + r_2^2 + 2 c r_1 r_2 (module docstring), at the global
    precision; ``symmetric``: the average over +-c (only even powers of the cross term survive)."""
    h = mp.mpf(d) / 2
    eps = mp.mpf(10) ** (-mp.dps - 10)
    kmax = 1
    while abs(t) ** kmax / mp.factorial(kmax) > eps:
        kmax += 1
    rf = [mp.rf(h, j) for j in range(kmax + 1)]
    rf_half = [mp.rf(h + mp.mpf(1) / 2, j) for j in range(kmax + 1)]
    r2 = mp.exp(2 * (mp.loggamma(h + mp.mpf(1) / 2) - mp.loggamma(h)))  # (Gamma((d+1)/2)/Gamma(d/2))^2
    total = mp.mpf(0)
    for k in range(kmax + 1):
        moment = mp.mpf(0)  # E[S^k] / 2^k
        for e in range(k + 1):
            if symmetric and e % 2:
                continue
            cross = (2 * c) ** e / mp.factorial(e)
            for a in range(k - e + 1):
                b = k - e - a
                if e % 2 == 0:
                    pair = rf[a + e // 2] * rf[b + e // 2]
                else:
                    pair = r2 * rf_half[a + (e - 1) // 2] * rf_half[b + (e - 1) // 2]
                moment += cross * pair / (mp.factorial(a) * mp.factorial(b))
        total += (t / 2) ** k * moment / rf[k]  # (t/4)^k 2^k k! moment' / ((d/2)_k k!)
    return total


def _ratio_reference(kind, d, v, dps=250):
    """MSE_simplex / MSE_iid at m = d: (Var + (d-1)(pair - iid)) / Var, the pair term by :func:`_pair_series`."""
    with mp.workdps(dps):
        v = mp.mpf(v)
        c = -mp.mpf(1) / (d - 1)
        if kind == "prf":
            t, var = v * v, mp.exp(v * v) * mp.expm1(v * v)
            pair = _pair_series(d, t, c, False)
        else:
            t = v * v if kind == "hyperbolic" else -v * v
            var = mp.expm1(t) ** 2 / 2
            pair = _pair_series(d, t, c, True)
        excess = pair - mp.exp(t)
        return var, excess, (var + (d - 1) * excess) / var


def test_pair_series_reference_is_the_orf_1f1():
    """The series at c = 0 is the ORF conformity 1F1(d; d/2; v^2/2) (Vandermonde), at c = +-1/(d-1) sums to the
    package's value at moderate d (a check of the reference itself)."""
    with mp.workdps(50):
        assert rel_diff(_pair_series(6, mp.mpf("0.7") ** 2, 0, True), mp.hyp1f1(6, 3, mp.mpf("0.7") ** 2 / 2)) < 1e-45
        assert rel_diff(_pair_series(6, mp.mpf("0.7") ** 2, mp.mpf(-1) / 5, False),
                        theory.conformity("simplex", 6, "0.7")) < 1e-45


@pytest.mark.parametrize("kind", ["hyperbolic", "prf", "rff"])
@pytest.mark.parametrize("v", ["1e-3", "1e-6"])
def test_simplex_ratio_at_d_1e20_keeps_every_digit(kind, v):
    """The SimRF/IIDRF MSE ratio at d = m = 1e20 (about max(v^2/12, 4/d) for hyperbolic and RFFs, v^2/6 + 1/(2d)
    for PRFs) to 14 digits.  Before: hyperbolic 2.206e-5 instead of 8.3333373e-14 at v = 1e-3 (the pair excess,
    of order v^4/d, was formed without dimension_bits), and, once that was fixed, every kind lost log2(d) bits in
    Var + (d - 1) excess (relative error 3e-11 (PRF), 3e-10 (RFF), 1.2e-10 (hyperbolic) at v = 1e-3; 9.6e-4, 6.5e-5,
    2.1e-4 at v = 1e-6)."""
    d = 10 ** 20
    var, excess, ref = _ratio_reference(kind, d, v)
    got = theory.kernel_mse_ratio("simplex", "iid", d, v, kind=kind)
    assert rel_diff(got, ref) < 1e-14, (kind, v, got, ref)
    if kind == "hyperbolic":
        # the published numbers of the finding, and kernel_mse itself (x = y = v/2: prefactor e^{-v^2}, m = d)
        expected = {"1e-3": "8.33333733333492e-14", "1e-6": "4.0000083333353e-20"}[v]
        assert rel_diff(got, mp.mpf(expected)) < 1e-13
        half = mp.mpf(v) / 2
        with mp.workdps(250):
            mse_ref = mp.exp(-mp.mpf(v) ** 2) * (var + (d - 1) * excess) / d
            pair_ref = mp.exp(mp.mpf(v) ** 2) + excess
        got_mse = theory.kernel_mse("simplex", d, v, kind="hyperbolic", x_norm=half, y_norm=half)
        assert rel_diff(got_mse, mse_ref) < 1e-14
        with mp.workdps(90):  # the pair term's excess over e^{v^2} (of order v^4/d) to 20 digits
            pair = theory.hyperbolic.hyperbolic_pair_term("simplex", d, v)
            assert rel_diff(pair - mp.exp(mp.mpf(v) ** 2), excess) < 1e-20 and rel_diff(pair, pair_ref) < 1e-85


_NORMS = [(6.1e12 + 0.37, 6.1e12 - 0.21), (123456.789, 123456.2)]


def _prefactor(x, y, scale):
    return mp.exp(scale * (mp.mpf(x) ** 2 + mp.mpf(y) ** 2))


@pytest.mark.parametrize("x, y", _NORMS)
def test_prefactor_exact_in_every_function(x, y):
    """prf_mse_from_conformity, softmax_to_gaussian_factor, orthogonality_gap(_series), fixed_norm_mse and
    kernel_mse against exp(-2c(X^2 + Y^2)) times the inner factor written out, at 300 digits, d = 4, v = 1.
    Before (the argument summed at the working precision): at |x| = 6.1e12 the decimal exponents were off
    (1.0406e-32320195343240849584499649 instead of 1.4768e-...545 for the softmax MSE; 1.4926e-...249825 instead
    of 1.7782e-...249773 for the factor), at |x| = 123456.789 all five off by 4.2e-14."""
    d = 4
    with mp.workdps(300):
        e = mp.e
        orf_gap = (d - 1) * (e - mp.hyp1f1(d, mp.mpf(d) / 2, mp.mpf(1) / 2)) / d
        f = lambda t: mp.hyp0f1(mp.mpf(d) / 2, t)  # noqa: E731
        mu, second, pair = f(mp.mpf(d) / 4), f(d), f(mp.mpf(d) / 2)
        fixed_inner = ((second - mu ** 2) + (d - 1) * (pair - mu ** 2)) / d + (mu - mp.exp(mp.mpf(1) / 2)) ** 2
        refs = {
            "prf_mse_from_conformity": _prefactor(x, y, -1) * e * (e - 1),
            "kernel_mse": _prefactor(x, y, -1) * e * (e - 1),
            "softmax_to_gaussian_factor": _prefactor(x, y, -mp.mpf(1) / 2),
            "orthogonality_gap": _prefactor(x, y, -2) * orf_gap,
            "orthogonality_gap_series": _prefactor(x, y, -2) * orf_gap,
            "fixed_norm_mse": _prefactor(x, y, -2) * fixed_inner,
        }
    got = {
        "prf_mse_from_conformity": theory.prf_mse_from_conformity(mpmath.e, 1.0, m=1, x_norm=x, y_norm=y,
                                                                  kernel="softmax"),
        "kernel_mse": theory.kernel_mse("iid", d, 1.0, m=1, x_norm=x, y_norm=y, kernel="softmax"),
        "softmax_to_gaussian_factor": theory.softmax_to_gaussian_factor(x, y),
        "orthogonality_gap": theory.orthogonality_gap(d, 1.0, x_norm=x, y_norm=y),
        "orthogonality_gap_series": theory.orthogonality_gap_series(d, 1.0, x_norm=x, y_norm=y),
        "fixed_norm_mse": theory.fixed_norm.fixed_norm_mse(d, 1.0, x_norm=x, y_norm=y),
    }
    for name, ref in refs.items():
        assert rel_diff(got[name], ref) < 1e-15, (name, got[name], ref)


def test_prefactor_of_the_gaussian_prf_mse_from_conformity():
    """The Gaussian kernel (-2 in the exponent) through prf_mse_from_conformity too, m = 2 with a pair term."""
    x, y = _NORMS[1]
    with mp.workdps(300):
        e = mp.e
        ref = _prefactor(x, y, -2) * (e * (e - 1) + (mp.mpf(3) - e)) / 2
    got = theory.prf_mse_from_conformity(3, 1.0, m=2, x_norm=x, y_norm=y)
    assert rel_diff(got, ref) < 1e-15


@pytest.mark.parametrize("coupling, kw", [("orthogonal", {}), ("iid", {"kind": "hyperbolic"}), ("iid", {})])
def test_mean_conformity_default_m_needs_two(coupling, kw):
    """The default m = d = 1 is held to the documented m >= 2 (was a bare ZeroDivisionError(''))."""
    with pytest.raises(ValueError, match=r"m must be an integer >= 2.*default m = d = 1"):
        theory.mean_conformity(coupling, 1, 1.0, **kw)
    assert theory.mean_conformity(coupling, 1, 1.0, m=2, **kw) > 0  # an explicit m is fine


# ---------------------------------------------------------------------------
# Regression tests for the findings of issue 11, one block per item, each against an
# independent computation (mpmath's own series at high precision, arb balls from
# python-flint, a dense scan, or a closed form).


@pytest.mark.parametrize("d,z", [(512, "18.43"), (512, "25"), (512, "40"), (1024, "31"), (4096, "55"), (7, "30")])
def test_rff_gap_sign_and_digits_against_arb(d, z):
    """d = 512, z = 18.43 gave +3.05e-148 (true -1.36e-148); larger z let mpmath's
    'hypsum() failed' ValueError escape.  The arb ball fixes the sign and the digits."""
    with mp.workdps(30):
        gap = theory.rff_orthogonality_gap(d, z)
    ball = C.rff_gap_bracket(d, z, prec=256, min_digits=35)
    with mp.workdps(60):
        mid = mp.mpf(ball.mid().str(50, radius=False)) * (d - 1) / d  # gap = (m - 1)/m * bracket
        assert rel_err(gap, mid) < mp.mpf(10) ** -29
    assert (gap < 0) == (ball < 0)


@pytest.mark.parametrize("d,expected", [(512, "18.42801185708"), (1024, "25.92121947625")])
def test_z_crit_first_sign_change(d, expected):
    """Was 20.99 (d = 512) and 32.28 after 84 s (d = 1024): the scan at 64 bits saw 0 for the 1F1.

    The work is bounded by a count, not a clock: theory._context.work_count() counts the budget
    checks of every loop (recurrence steps, series terms, quadrature nodes); z_crit makes 420
    (d = 512) and 745 (d = 1024) of them at 30 digits."""
    w0 = _context.work_count()
    with mp.workdps(30):
        zc = theory.z_crit(d)
    assert mp.nstr(zc, 13) == expected
    assert _context.work_count() - w0 <= 4 * d
    # arb proves the sign change inside [zc (1 - 1e-25), zc (1 + 1e-25)]
    with mp.workdps(40):
        lo, hi = zc * (1 - mp.mpf(10) ** -25), zc * (1 + mp.mpf(10) ** -25)
        lo_s, hi_s = mp.nstr(lo, 40), mp.nstr(hi, 40)
    assert C.rff_gap_bracket(d, lo_s, prec=256, min_digits=1) > 0
    assert C.rff_gap_bracket(d, hi_s, prec=256, min_digits=1) < 0


@pytest.mark.parametrize("d", [3, 4, 9, 16, 33, 64, 65, 128, 129])
def test_z_crit_has_no_earlier_sign_change(d):
    """Dense scan of the gap's sign at 300 bits (mpmath's own 1F1) below z_crit: no sign change
    before it.  (Checked offline for every d in 3..129 and d = 256, 257, 512, 513.)"""
    zc = theory.z_crit(d)
    with mp.workprec(300):
        for i in range(1, 400):
            z = zc * i / 400
            y = z * z / 2
            assert mp.exp(-2 * y) - mp.hyp1f1(d, mp.mpf(d) / 2, -y, maxprec=50_000) > 0, (d, z)


def test_z_crit_scan_has_power():
    """Power: the same scan finds the sign change just above z_crit."""
    zc = theory.z_crit(64)
    with mp.workprec(300):
        y = (zc * mp.mpf("1.0001")) ** 2 / 2
        assert mp.exp(-2 * y) - mp.hyp1f1(64, 32, -y) < 0


@pytest.mark.parametrize("dps", [15, 50, 120])
def test_z_crit_at_the_callers_precision(dps):
    """z_crit scanned at 64 bits whatever the caller asked; now every digit is right."""
    with mp.workdps(dps):
        zc = theory.z_crit(256)
    with mp.workdps(dps + 30):
        ref = theory.z_crit(256)
    assert rel_err(zc, ref) < mp.mpf(10) ** (1 - dps)
    assert zc._mpf_[3] > mp.prec or dps == 15  # the mantissa holds the caller's bits


def test_z_crit_ratio_range_for_the_readme():
    """The README's 'z_crit ~ 0.86 sqrt(d)' is loose: the ratio runs from 1.91 (d = 3) to 0.81."""
    r3 = theory.z_crit(3) / mp.sqrt(3)
    r512 = theory.z_crit(512) / mp.sqrt(512)
    assert mp.nstr(r3, 3) == "1.91" and mp.nstr(r512, 2) == "0.81"


def test_huge_v_ratio_tends_to_one():
    with mp.workdps(30):
        r = theory.mse_ratio("simplex", "iid", 8, 1e300)
    assert r == 1  # 1 - O(e^{-v^2}) rounds to 1 at any precision


@pytest.mark.parametrize("tiny", ["1e-400", "1e-300", mp.mpf("1e-5000")])
def test_tiny_arguments(tiny):
    """mse_ratio(..., '1e-400') raised 'math domain error' (a float underflow); so did
    prf_mse, rff_mse, rff_mse_ratio and orthogonality_gap."""
    with mp.workdps(30):
        d = 64
        assert theory.mse_ratio("simplex", "iid", d, tiny) == theory.simplex_v2_prefactor(d)
        assert theory.rff_mse_ratio("orthogonal", "iid", d, tiny) == theory.rff_mse_ratio("orthogonal", "iid", d, 0)
        v = mp.mpf(tiny)
        c2 = theory.simplex_v2_prefactor(d)
        mse = theory.prf_mse("simplex", d, tiny, x_norm=v / 2, y_norm=v / 2)
        assert rel_err(mse, c2 * v * v / d) < mp.mpf(10) ** -28  # MSE = e^{-v^2} C v^2 / m + O(v^4)
        rff = theory.rff_mse("orthogonal", d, tiny)
        lim = (mp.mpf(1) / 2 - (d - 1) / (2 * mp.mpf(d + 2))) * v ** 4 / d  # (1/2 + (P/m) b) z^4 / m
        assert rel_err(rff, lim) < mp.mpf(10) ** -28
        gap = theory.orthogonality_gap(d, tiny, x_norm=v / 2, y_norm=v / 2)
        assert rel_err(gap, (d - 1) / mp.mpf(d) * v ** 4 / (2 * (d + 2))) < mp.mpf(10) ** -28


# ---------------------------------------------------------------------------
# Huge dimensions d (and tiny w, large z_max): the findings A-D of the huge-d exploration.
#
# Every reference is independent of the function under test: mpmath's loggamma or hyp1f1 in the
# global context at 100-200 digits (a different formula from the one theory evaluates), exact
# integers (chi moments of even order), or the closed form p(0) of Lemma 4.2 at cos theta = -1.
# Each numeric check is shown to have power: the old evaluation (the same formula at the old
# working precision, reproduced here in a few lines) fails it.


def one_minus_r1(d, dps=200):
    """1 - Gamma((d+1)/2)^2 / (Gamma(d/2) Gamma(d/2 + 1)) from loggamma at ``dps`` digits."""
    with mpmath.workdps(dps):
        h = mpmath.mpf(d) / 2
        log_r1 = 2 * mpmath.loggamma(h + mpmath.mpf(1) / 2) - mpmath.loggamma(h) - mpmath.loggamma(h + 1)
        return -mpmath.expm1(log_r1)


HUGE = [2**53, 10**12, 10**15, 10**20, 10**25, 10**30, 2**200 + 1]


@pytest.mark.parametrize("d", HUGE)
def test_simplex_v2_prefactor_and_v0_ratio_at_huge_d(d):
    """C = 1 - R_1 ~ 1/(2d) for m = d: simplex_v2_prefactor, the printed form and the v = 0 limit
    of mse_ratio('simplex', 'iid') all equal it to the working precision.

    Before: 1.4e-12 relative error at d = 1e12, 6e-4 at 1e20, 0.0 / -1.1e37 / -0.18 (every digit
    lost) from 1e25; the same formula at the old working precision fails this check (second test).
    """
    ref = one_minus_r1(d)
    assert rel_err(theory.simplex_v2_prefactor(d), ref) < 1e-14
    assert rel_err(theory.simplex_v2_prefactor_printed(d), ref) < 1e-14
    assert rel_err(theory.mse_ratio("simplex", "iid", d, 0), ref) < 1e-14
    with mpmath.workdps(40):
        ref = one_minus_r1(d)
        assert rel_err(theory.simplex_v2_prefactor(d), ref) < mpmath.mpf(10) ** -38
        assert rel_err(theory.mse_ratio("simplex", "iid", d, 0), ref) < mpmath.mpf(10) ** -38


def test_huge_d_prefactor_check_has_power():
    """The old evaluation (1 - gammaprod at the caller's precision + 24 guard bits) fails the check."""
    for d, worst in ((10**12, 1e-13), (10**20, 1e-5), (10**25, 0.5)):
        with mpmath.workprec(53 + 24):
            h = mpmath.mpf(d) / 2
            old = 1 - mpmath.gammaprod([h + mpmath.mpf(1) / 2, h + mpmath.mpf(1) / 2], [h, h + 1])
        assert not rel_err(old, one_minus_r1(d)) < worst
    assert mpmath.mpf(theory.mse_ratio("simplex", "iid", 10**30, 0)) > 0  # was -0.183


@pytest.mark.parametrize("d,m", [(10**20, 10**20 + 1), (10**20, 3 * 10**20), (10**20, 10**20 - 1), (10**30, 7)])
def test_simplex_v2_prefactor_any_m_at_huge_d(d, m):
    """C = 1 - (P/m) R_1/(d-1) for any m, against loggamma at 200 digits (m near d: C ~ 1/d)."""
    with mpmath.workdps(200):
        ref = 1 - mpmath.mpf(coupled_pairs(d, m)) / (m * (d - 1)) * (1 - one_minus_r1(d))
    assert rel_err(theory.simplex_v2_prefactor(d, m=m), ref) < 1e-14


@pytest.mark.parametrize("d", [10**12, 10**20, 10**30])
def test_orthogonality_gap_at_huge_d(d):
    """The PRF gap e^{-1} (P/m^2) (e^{v^2} - 1F1(d; d/2; v^2/2)) ~ 1/(2d) at v = 1, |x| = |y| = 1/2:
    orthogonality_gap and the positive series against mpmath's hyp1f1 at 120 digits.

    Before: 0.0 and 7.46e-21853 at d = 1e30; the old difference at 77 bits fails (second assert)."""
    with mpmath.workdps(120):
        dd = mpmath.mpf(d)
        excess = mpmath.e - mpmath.hyp1f1(dd, dd / 2, mpmath.mpf(1) / 2)
        ref = mpmath.exp(-1) * (dd - 1) / dd * excess
    for f in (theory.orthogonality_gap, theory.orthogonality_gap_series):
        assert rel_err(f(d, 1, x_norm=0.5, y_norm=0.5), ref) < 1e-13
    with mpmath.workprec(77):
        dd = mpmath.mpf(d)
        old = mpmath.e - mpmath.hyp1f1(dd, dd / 2, mpmath.mpf(1) / 2)
    assert not rel_err(old, excess) < 1e-13


def test_rff_v0_ratio_at_huge_d():
    """RFF ORF/IID at z = 0: (1/2 + (d-1) b)/(1/2), b = -1/(2(d+2)), i.e. exactly 3/(d+2)."""
    for d in (10**12, 10**30):
        ref = mpmath.mpf(3) / (d + 2)
        assert rel_err(theory.rff_mse_ratio("orthogonal", "iid", d, 0), ref) < 1e-14


@pytest.mark.parametrize("z", [0, "1e-20", "1e-10", "0.5"])
def test_rff_asymptotic_ratio_at_huge_d(z):
    """Cor 4.6's 1 - (P/m) e^{-z^2} z^4 / (d (1 - e^{-z^2})^2) at m = d, against the sinh form
    1 - (1 - 1/d) ((z^2/2) / sinh(z^2/2))^2 at 200 digits (1/d at z = 0).  Before: 0.0 at z = 0 and
    8.3e-82 at z = 1e-20 (for 1.0e-30): (d-1)/d rounded to 1; the old evaluation fails (last assert)."""
    d = 10**30
    with mpmath.workdps(200):
        y = mpmath.mpf(z) ** 2 / 2
        shape = (y / mpmath.sinh(y)) ** 2 if y else mpmath.mpf(1)
        ref = 1 - (1 - mpmath.mpf(1) / d) * shape
    assert rel_err(theory.rff_asymptotic_ratio(d, z), ref) < 1e-14
    if z in (0, "1e-20"):  # (at z = 0.5 there is nothing to cancel: the old value was right)
        with mpmath.workprec(77):
            old = 1 - mpmath.mpf(d - 1) / d * shape
        assert not rel_err(old, ref) < 1e-14


def test_huge_d_beyond_the_domain_is_loud():
    """d >= 2^16384 (the guard bits would cost minutes): ConvergenceError naming d, precision unchanged."""
    before = mpmath.mp.prec
    for call in (lambda: theory.simplex_v2_prefactor(2**16384), lambda: theory.chi_moment(1, 2**16400),
                 lambda: theory.mse_ratio("simplex", "iid", 2**16384, 0)):
        with pytest.raises(theory.ConvergenceError, match="2\\^16384"):
            call()
    assert mpmath.mp.prec == before


def gap_sign(d, z):
    """sign of e^{-z^2} - 1F1(d; d/2; -z^2/2) (mpmath at 50 digits)."""
    with mpmath.workdps(50):
        z = mpmath.mpf(z)
        return mpmath.sign(mpmath.exp(-z * z) - mpmath.hyp1f1(d, mpmath.mpf(d) / 2, -z * z / 2))


@pytest.mark.parametrize("z_max", [None, 3.0, 1e12, 1e50, "1e150", 1e200])
def test_z_crit_large_z_max(z_max):
    """Any z_max above z_crit(8) = 2.9597 gives it (no OverflowError, no numpy warnings); it is a
    sign change of the RFF gap (mpmath's hyp1f1 at 50 digits).  Before: OverflowError at 1e200,
    'zeros could not be separated; lower d' at 1e150."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z = theory.z_crit(8, z_max=z_max)
    assert abs(float(z) - 2.95968401727207) < 1e-12
    assert gap_sign(8, z * (1 - mpmath.mpf(10) ** -12)) == 1 and gap_sign(8, z * (1 + mpmath.mpf(10) ** -12)) == -1


def test_z_crit_small_z_max_names_it():
    """Below z_crit: ConvergenceError naming z_max (before: 'for z < 0' at z_max = 1e-300)."""
    for z_max, text in (("1e-300", "1.0e-300"), (2.9, "2.9"), (5e-324, "4.94066e-324")):
        with pytest.raises(theory.ConvergenceError, match=f"z_max = {text}"):
            theory.z_crit(8, z_max=z_max)
    with pytest.raises(ValueError, match="z_max must be > 0"):
        theory.z_crit(8, z_max=0)


@pytest.mark.parametrize("d", [3, 7, 8, 64])
def test_z_crit_scan_beyond_the_default_range(d):
    """The windows [Z, 2Z] beyond the default range (scanned when it holds no sign change) bracket
    the first sign change too: started at Z = 1 they find z_crit (a single uniform grid up to 1e12
    could not separate the zeros: 'lower d')."""
    from theory._context import mp as pmp

    with pmp.workprec(77):
        y_lo, y_hi = mse._zcrit_bracket(d, pmp.mpf(10) ** 12, pmp.mpf(1))
    z = float(theory.z_crit(d))
    assert math.sqrt(2 * y_lo) <= z * (1 + 1e-9) and z <= math.sqrt(2 * y_hi) * (1 + 1e-9)


def test_z_crit_refuses_d_beyond_its_cap_at_once(monkeypatch):
    """d > ZCRIT_MAX_D = 2^16: ValueError naming d and the range (issue 38).  Before: a raw MemoryError (a 16 TiB
    grid) at d = 2^40, numpy's 'Maximum allowed size exceeded' at 2^63 (d unnamed), the str-conversion limit
    at 2^14286.  The cap itself gets through to the scan (a stub stops it there: the scan at 2^16 runs minutes)."""
    assert mse.ZCRIT_MAX_D == 2**16
    for d, shown in ((2**16 + 1, "65537"), (2**40, "1099511627776"), (2**63, "9223372036854775808"),
                     (2**14286, r"2\^14286 \(an integer of 14287 bits\)")):
        with pytest.raises(ValueError, match=rf"d must be an integer >= 2 and <= 65536 \(z_crit .*got {shown} "):
            theory.z_crit(d)

    class Reached(Exception):
        pass

    def stub(d, top, default):
        raise Reached(d)

    monkeypatch.setattr(mse, "_zcrit_bracket", stub)
    with pytest.raises(Reached):
        theory.z_crit(2**16)


def test_closed_forms_at_a_4301_digit_d():
    """d = 2^14286 lies in the documented domain (d < 2^16384): the conformities equal their d -> oo limit
    e^{v^2} (the 1/d corrections are 10^-4300 away).  The PRF MSE with m = d is e^{-2(|x|^2+|y|^2)} / m times
    Var b = e^{2v^2} - e^{v^2} (IID) plus, for ORFs, (m - 1)(rho_ORF - e^{v^2}) -> -e^{v^2} v^4 / 2 (from
    (d)_k / (d/2)_k = 2^k (1 - k(k-1)/(2d) + O(1/d^2)) in 1F1(d; d/2; v^2/2)), up to O(1/d).  Before: 'Exceeds
    the limit (4300 digits) for integer string conversion' from a label formatting d (conformity, kernel_mse,
    mse_ratio, orthogonality_gap, ...)."""
    v, xn, yn = mpmath.mpf("0.5"), mpmath.mpf("0.25"), mpmath.mpf("0.25")
    for coupling in ("iid", "orthogonal", "simplex"):
        assert rel_err(theory.conformity(coupling, BIG, v), mpmath.exp(v * v)) < 1e-14
    pre, e1, e2 = mpmath.exp(-2 * (xn * xn + yn * yn)) / BIG, mpmath.exp(v * v), mpmath.exp(2 * v * v)
    iid, orf = pre * (e2 - e1), pre * (e2 - e1 - e1 * v**4 / 2)
    assert rel_err(theory.kernel_mse("iid", BIG, v, x_norm=xn, y_norm=yn), iid) < 1e-13
    assert rel_err(theory.kernel_mse("orthogonal", BIG, v, x_norm=xn, y_norm=yn), orf) < 1e-13
    assert rel_err(theory.mse_ratio("orthogonal", "iid", BIG, v), orf / iid) < 1e-13


# ---------------------------------------------------------------------------
# Tiny v within the budget (found by an exploration helper; the budgets count work since issue 38).
#
# The pair excess :math:`\rho_c - e^{v^2}` (theory.mse._prf_excess, _rff_excess) was formed with 4 log2(1/v)
# extra bits: 1.33 million at v = 1e-100000, where the first constant (pi, inside R_1 =
# conformities._sin_moment_first) alone took 7.2 s in one mpmath call that no time budget can interrupt.
# Under theory.budget(work=TINY_WORK), mse_ratio('simplex', 'iid', 64, 1e-100000) raised ConvergenceError after 7.9 s
# (10.3 s, then the value, without a budget block); the RFF ratio took 8.1 s, the hyperbolic one 8.0 s,
# rff_asymptotic_ratio(64, 1e-100000) had exp at 1.3 million bits.  Now a tiny argument takes the leading
# Taylor terms of the excess, whose remainder is bounded (theory.mse._series_excess): 0.15 s, every digit,
# also for the hyperbolic SimRF pair term; a route still left with that many bits would raise
# ConvergenceError at once (theory.mse.SMALL_ARG_MAX_BITS).  Checked structurally, not by the clock: the
# precision at which R_1 is formed is recorded and must stay below 2^14 bits (the old code formed it at 1.33
# million; with the recorder below it fails at once).
#
# References, independent of the module: R_1 from mpmath's loggamma in the global context; the v^4
# coefficient from the chi moments :math:`\mathbb E r^n = 2^{n/2}\Gamma(\frac{d+n}2)/\Gamma(\frac d2)`
# expanded by hand; the RFF limits in exact fractions; the orthogonality gap from its positive series
# (another route); the conformity by its Taylor-in-cos route at 150 digits.


TINY = "1e-100000"


#: The work these calls may take: one step at the old 1.33 million bits would cost 27 million units
#: (theory._context.precision_factor), so the old route cannot pass; the new one needs a few thousand.
TINY_WORK = 100_000


PREC_LIMIT = 2 ** 14


@pytest.fixture
def r1_precisions(monkeypatch):
    """The precisions (bits) at which R_1 is formed; one above PREC_LIMIT fails at once (the old code's
    1.33 million bits would take seconds)."""
    seen = []
    original = conformities._sin_moment_first

    def recording(d):
        seen.append(_context.mp.prec)
        if _context.mp.prec > PREC_LIMIT:
            raise RuntimeError(f"R_1 formed at {_context.mp.prec} bits")
        return original(d)

    monkeypatch.setattr(conformities, "_sin_moment_first", recording)
    return seen


def _one_minus_r1(d):
    """1 - R_1, R_1 = Gamma((d+1)/2)^2 / (Gamma(d/2) Gamma(d/2 + 1)), by loggamma at 80 digits."""
    with mp.workdps(80):
        h = mp.mpf(d) / 2
        return 1 - mp.exp(2 * mp.loggamma(h + mp.mpf(1) / 2) - mp.loggamma(h) - mp.loggamma(h + 1))


def _chi_moment(d, n):
    return mp.exp(mp.mpf(n) / 2 * mp.log(2) + mp.loggamma(mp.mpf(d + n) / 2) - mp.loggamma(mp.mpf(d) / 2))


def _es2(d, c):
    """E[s^2], s = r1^2 + r2^2 + 2c r1 r2, r1, r2 independent chi_d."""
    m1, m2, m3, m4 = (_chi_moment(d, n) for n in (1, 2, 3, 4))
    return 2 * m4 + 2 * m2 ** 2 + 8 * c * m3 * m1 + 4 * c * c * m2 ** 2


def _mpf(q):
    return mp.mpf(q.numerator) / q.denominator


@pytest.mark.parametrize("dps", [15, 50])
@pytest.mark.parametrize("baseline", ["iid", "orthogonal"])
def test_simplex_prf_ratio_at_tiny_v_is_the_limit(r1_precisions, baseline, dps):
    """At v = 1e-100000 the ratio is its v -> 0 limit 1 - R_1 (m = d; the excess of the ratio is O(v^2))."""
    with mp.workdps(dps):
        with theory.budget(work=TINY_WORK):
            r = theory.mse_ratio("simplex", baseline, 64, TINY)
        assert mp.dps == dps
    ref = _one_minus_r1(64)  # 0.00778174641445748830814670398723...
    with mp.workdps(80):
        assert abs(r - ref) <= mp.mpf(10) ** (1 - dps) * ref
    assert r1_precisions and max(r1_precisions) < PREC_LIMIT


def _rff_limit(d, coupling, baseline):
    """(1/2 + (d-1) b_c) / (1/2 + (d-1) b_b), b = (d c^2 - 1) / (2(d+2)) (0 for IID), in fractions."""
    cos = {"orthogonal": Fraction(0), "simplex": Fraction(-1, d - 1)}

    def lead(c):
        b = Fraction(0) if c == "iid" else (d * cos[c] ** 2 - 1) / (2 * (d + 2))
        return Fraction(1, 2) + (d - 1) * b

    return lead(coupling) / lead(baseline)


@pytest.mark.parametrize("coupling, baseline", [("simplex", "orthogonal"), ("simplex", "iid"), ("orthogonal", "iid")])
def test_rff_ratio_at_tiny_z_is_the_limit(r1_precisions, coupling, baseline):
    """Before: 8.1 s under budget(3), then ConvergenceError (simplex against orthogonal)."""
    with mp.workdps(30):
        with theory.budget(work=TINY_WORK):
            r = theory.rff_mse_ratio(coupling, baseline, 64, TINY)
        ref = _mpf(_rff_limit(64, coupling, baseline))  # 1.33862433862433862433862433862 (simplex / orthogonal)
        assert abs(r - ref) <= mp.mpf(10) ** -29 * ref
    assert max(r1_precisions, default=0) < PREC_LIMIT


@pytest.mark.parametrize("d", [2, 3, 5, 64, 1025])
@pytest.mark.parametrize("coupling", ["orthogonal", "simplex"])
def test_v4_coefficient_against_the_chi_moments(coupling, d):
    """e in rho - e^{v^2} = (a - 1) v^2 + e v^4 + O(v^6) against E[s^2] / (8 d (d + 2)) - 1/2 (chi moments),
    and the RFF z^4 coefficient against the mean of E[s^2] over c and -c."""
    c = Fraction(0) if coupling == "orthogonal" else Fraction(-1, d - 1)
    with mp.workdps(50):
        cc = _mpf(c)
        e_ref = _es2(d, cc) / (8 * d * (d + 2)) - mp.mpf(1) / 2
        b_ref = (_es2(d, cc) + _es2(d, -cc)) / (16 * d * (d + 2)) - mp.mpf(1) / 2
    with mp.workdps(40), _context.entered() as bits, _context.mp.workprec(bits):
        e = conformities.coupling_conformity_v4_excess(coupling, d)
        b = mse._rff_z4_coefficient(coupling, d)
        with mp.workdps(50):
            assert abs(mp.mpf(e) - e_ref) <= mp.mpf(10) ** -38 * abs(e_ref)
            assert abs(mp.mpf(b) - b_ref) <= mp.mpf(10) ** -38 * abs(b_ref)


@pytest.mark.parametrize("coupling, d", [("simplex", 64), ("orthogonal", 7), ("pnc_orthogonal", 4)])
def test_v4_coefficient_against_the_taylor_route(coupling, d):
    """(rho(v) - e^{v^2} - (a - 1) v^2) / v^4 at v^2 = 1e-10 (the conformity's own route at 45 digits) is e up to
    O(v^2); for pnc_orthogonal this checks that the PRF coefficient is the RFF one (a sign-symmetric pair)."""
    x = mp.mpf("1e-10")
    with mp.workdps(45):
        rho = theory.conformity(coupling, d, mp.sqrt(x))
        with _context.entered() as bits, _context.mp.workprec(bits + 16):
            a1 = conformities.coupling_conformity_v2_coefficient(coupling, d) - 1
            e = conformities.coupling_conformity_v4_excess(coupling, d)
        estimate = (rho - mp.exp(x) - mp.mpf(a1) * x) / x ** 2
        assert abs(estimate - mp.mpf(e)) <= 1e-8 * abs(e)


def test_simplex_prf_mse_where_the_v4_term_shows(monkeypatch):
    """At v = 3e-16 (dps 40) the series branch is taken and its v^4 term is 1.3e-31 of the value: the MSE
    against Var + (m - 1)(rho - e^{v^2}) with rho by the Taylor route at 150 digits."""
    d, v = 64, mp.mpf("3e-16")
    taken = []
    original = mse._series_excess

    def recording(*args):
        out = original(*args)
        taken.append(out is not None)
        return out

    with mp.workdps(150):
        x = v * v
        excess = theory.conformity("simplex", d, v) - mp.exp(x)
        ref = mp.exp(-2 * x) / d * (mp.exp(x) * mp.expm1(x) + (d - 1) * excess)
    monkeypatch.setattr(mse, "_series_excess", recording)
    with mp.workdps(40):
        value = theory.prf_mse("simplex", d, v, x_norm=v, y_norm=0)
    monkeypatch.undo()
    assert taken and all(taken)
    with mp.workdps(150):
        assert abs(value - ref) <= mp.mpf(10) ** -39 * ref
        # the v^4 term shows: with e_1 v^2 alone (e_1 = -R_1/(d-1)) the MSE is off by about 1e-31
        x = v * v
        first_order = mp.exp(-2 * x) / d * (mp.exp(x) * mp.expm1(x) - (1 - _one_minus_r1(d)) * x)
        assert abs(first_order - ref) > mp.mpf(10) ** -33 * ref


def test_orthogonality_gaps_at_tiny_v_against_the_positive_series(r1_precisions):
    """orthogonality_gap (the excess' series branch) against orthogonality_gap_series (App. A.8, a positive series)
    and against (m-1)/m e^{-2|x|^2} v^4 / (2(d+2)); the RFF gap against (m-1)/m z^4 / (2(d+2))."""
    d = 64
    with mp.workdps(30):
        with theory.budget(work=TINY_WORK):
            gap = theory.orthogonality_gap(d, TINY, x_norm=TINY, y_norm=0)
            series = theory.orthogonality_gap_series(d, TINY, x_norm=TINY, y_norm=0)
            rff_gap = theory.rff_orthogonality_gap(d, TINY)
        v = mp.mpf(TINY)
        lead = mp.mpf(d - 1) / d * v ** 4 / (2 * (d + 2))
        for value in (gap, series, rff_gap):
            assert abs(value - lead) <= mp.mpf(10) ** -29 * lead
        assert abs(gap - series) <= mp.mpf(10) ** -29 * series


def test_rff_asymptotic_ratio_at_tiny_z():
    """1 - (P/m)/d exactly at z = 1e-100000 (before: exp at 1.3 million bits)."""
    with mp.workdps(30):
        with theory.budget(work=TINY_WORK):
            assert theory.rff_asymptotic_ratio(64, TINY) == mp.mpf(1) / 64
            assert theory.rff_asymptotic_ratio(64, TINY, m=4) == 1 - mp.mpf(3) / 64  # P/m = m - 1 = 3
        assert mp.dps == 30


@pytest.mark.parametrize("kind", ["prf", "oprf"])
def test_other_kinds_through_the_prf_excess(r1_precisions, kind):
    """The OPRF ratio (theorem couplings: the PRF excess) and the hyperbolic orthogonal one at tiny v."""
    with mp.workdps(20), theory.budget(work=TINY_WORK):
        r = theory.kernel_mse_ratio("simplex", "iid", 64, TINY, kind=kind)
        assert abs(r - _one_minus_r1(64)) <= mp.mpf(10) ** -19 * r
        h = theory.kernel_mse_ratio("orthogonal", "iid", 64, TINY, kind="hyperbolic")
        ref = _mpf(_rff_limit(64, "orthogonal", "iid"))  # (1/2 - 63/132) / (1/2): b = -1/(2(d+2)) here too
        assert abs(h - ref) <= mp.mpf(10) ** -19 * ref
    assert max(r1_precisions) < PREC_LIMIT


def test_small_arg_bits_cap_is_loud():
    """4 log2(1/v) bits beyond SMALL_ARG_MAX_BITS + 2p raise ConvergenceError at once, naming v (before: the
    bits were granted, 1.33 million at v = 1e-100000)."""
    with _context.entered() as bits, _context.mp.workprec(bits):
        assert mse._small_arg_bits(_context.mp.mpf("1e-4000")) == 4 * 13287 + 8  # 1e-4000 < 2^-13287 (mag)
        with pytest.raises(ConvergenceError, match=r"at v = 1\.0e-100000 needs 1328776 extra bits"):
            mse._small_arg_bits(_context.mp.mpf(TINY), "the test difference")


def test_small_arg_bits_cap_is_exactly_the_documented_one():
    """The cap is SMALL_ARG_MAX_BITS + 2p at working precision p, no more, no less: at p = 100, t = 2^-k needs
    4(k - 1) + 8 bits (mpmath's mag(2^-k) = 1 - k), so k = 16433 gets its 65736 = 65536 + 200 bits and
    k = 16434 (65740) raises; at p = 200 the same t is granted (the cap grows with p)."""
    cap = mse.SMALL_ARG_MAX_BITS
    with _context.mp.workprec(100):
        assert mse._small_arg_bits(_context.mp.ldexp(1, -16433)) == cap + 200
        with pytest.raises(ConvergenceError, match=f"needs {cap + 204} extra bits"):
            mse._small_arg_bits(_context.mp.ldexp(1, -16434))
    with _context.mp.workprec(200):
        assert mse._small_arg_bits(_context.mp.ldexp(1, -16434)) == cap + 204


def test_hyperbolic_simplex_at_tiny_v_is_the_limit(r1_precisions):
    """The hyperbolic SimRF pair term (theory.hyperbolic) forms its own difference: at v = 1e-100000 its leading
    Taylor term b v^4 (theory.mse._series_excess), so the ratio is the limit, never R_1 at a million bits (it
    ran 8.0 s past budget(3) before; with the cap alone, ConvergenceError); the mp context is unchanged.  v = 0
    gives the limit (1/2 + 63 b) / (1/2)."""
    ref = _mpf(_rff_limit(64, "simplex", "iid"))
    with mp.workdps(15):
        with theory.budget(work=TINY_WORK):
            r = theory.kernel_mse_ratio("simplex", "iid", 64, TINY, kind="hyperbolic")
            assert abs(r - ref) <= mp.mpf(10) ** -14 * ref
        assert mp.dps == 15
        limit = theory.kernel_mse_ratio("simplex", "iid", 64, 0, kind="hyperbolic")
        assert abs(limit - ref) <= mp.mpf(10) ** -14 * ref
    assert max(r1_precisions, default=0) < PREC_LIMIT


@pytest.mark.parametrize("kind", ["prf", "rff"])
def test_pnc_ratio_at_tiny_v_is_the_limit(kind):
    """Before: mse_ratio('pnc_orthogonal', 'iid', 16, 1e-100000) ran 54.7 s under budget(3), then ConvergenceError;
    the ratio at v = 1e-100000 is its v = 0 limit (the small_v hook: the v^2 coefficients, (1/2 + (P/m) b) for RFFs)."""
    with mp.workdps(20), theory.budget(work=TINY_WORK):
        tiny = theory.kernel_mse_ratio("pnc_orthogonal", "iid", 16, TINY, kind=kind)
        zero = theory.kernel_mse_ratio("pnc_orthogonal", "iid", 16, 0, kind=kind)
        assert abs(tiny - zero) <= mp.mpf(10) ** -19 * zero


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


class TestKernelMse:
    """The kind hooks of theory/mse.py: RFFs are exact at z = 0; the mean conformity of two features."""

    def test_rff_mse_vanishes_at_z_zero(self):
        """cos(w.0) = 1 = K(x, x) in every draw: the RFF MSE at z = 0 is exactly 0 for every coupling and m (the
        Monte Carlo estimate has zero spread); at z = 1e-3 it is positive and O(z^4)."""
        for coupling in theory.kind_couplings("rff"):
            for m in (1, 8, 13):
                assert theory.kernel_mse(coupling, 8, 0, kind="rff", m=m) == 0
        x = np.full(8, 0.3)
        est = mc.empirical_mse("orthogonal", x, x, 8, 100, kind="rff", rng=0)
        assert est.mean < 1e-30 and est.stderr == 0  # sin^2 + cos^2 = 1 up to rounding
        with mp.workdps(20):
            small = theory.kernel_mse("orthogonal", 8, "1e-3", kind="rff")
            assert 0 < small < mp.mpf("1e-12")

    def test_mean_conformity_of_two_features(self):
        """m >= 2 (documented: the conformity averages over pairs): with m = 2 < d both features lie in one block
        and form one coupled pair, so the mean conformity is the block's pair term theory.conformity(coupling, d,
        v) for the couplings whose in-block pairs share one law (iid, orthogonal, simplex), 25 digits; m = 1 is
        refused by name."""
        with mp.workdps(30):
            for coupling in ("iid", "orthogonal", "simplex"):
                two = theory.mean_conformity(coupling, 5, "0.7", m=2)
                assert agrees(two, theory.conformity(coupling, 5, "0.7"), 25), coupling
            simplex = theory.mean_conformity("simplex", 5, "0.7", m=2)
            assert not agrees(simplex, theory.conformity("iid", 5, "0.7"), 2)  # power: another coupling's value
        with pytest.raises(ValueError, match=r"m must be an integer >= 2 \(the conformity averages over pairs"):
            theory.mean_conformity("simplex", 5, "0.7", m=1)
