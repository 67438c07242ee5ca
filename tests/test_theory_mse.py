"""MSEs (Thm 3.2 for any m, ensembles), ratios, gaps (Cor 4.4, Thm 4.5), Cor 4.6,
z_crit and the Sec. 5.1 prefactor, each against an independent computation."""

import itertools

import numpy as np
import pytest
from mpmath import mp

import theory
from paper_checks._compare import agrees

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
