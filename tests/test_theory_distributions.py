"""Lemmas 4.1 and 4.2: densities of w_ij = ||w_i + w_j|| against independent routes."""

import re

import mpmath
import numpy as np
import pytest
from mpmath import mp

import theory
from _support import raises_budget, rel_err, small_budget
from paper_checks._compare import agrees, rel_diff


@pytest.mark.parametrize("d,c,w", [
    (2, -1, "0.01"), (2, -1, "1"), (2, "-0.9", "0.5"), (3, "-0.5", "1"), (3, "-0.5", "10"),
    (64, "simplex", "10"), (64, "simplex", "1"), (16, 0, "3"), (4, 1, "3"), (5, "0.3", "0.5"),
])
def test_lemma_4_2_pdf_against_change_of_variables(d, c, w):
    """The printed polar-angle integral (eq. theta_proby_dist) against a direct
    change of variables in (w_i, w_j) -- two different one-dimensional integrals."""
    with mp.workdps(25):
        if c == "simplex":
            c = mp.mpf(-1) / (d - 1)
        a = theory.pdf_wij(w, d, c)
        b = theory.pdf_wij_convolution(w, d, c)
        assert agrees(a, b, 20), (a, b)


@pytest.mark.parametrize("d", [2, 3, 16, 64])
@pytest.mark.parametrize("w", ["0.5", "2", "10"])
def test_orthogonal_pdf_reduces_to_chi_2d(d, w):
    """App. A.6: at theta = pi/2 the density is chi with 2d degrees of freedom."""
    with mp.workdps(25):
        assert agrees(theory.pdf_wij(w, d, 0), theory.pdf_chi(w, 2 * d), 20)


def test_reduction_check_has_power():
    with mp.workdps(25):
        assert not agrees(theory.pdf_wij(2, 16, 0), theory.pdf_chi(2, 31), 5)
        assert not agrees(theory.pdf_wij(2, 16, "-0.0666"), theory.pdf_chi(2, 32), 5)


@pytest.mark.parametrize("d", [1, 2, 5, 64])
@pytest.mark.parametrize("w", ["0.3", "1", "7"])
def test_iid_pdf_is_scaled_chi(d, w):
    """Lemma 4.1: w_i + w_j ~ N(0, 2 I), so w_ij / sqrt(2) ~ chi_d."""
    with mp.workdps(30):
        expected = theory.pdf_chi(mp.mpf(w) / mp.sqrt(2), d) / mp.sqrt(2)
        assert agrees(theory.pdf_wij_iid(w, d), expected, 28)


@pytest.mark.parametrize("d", [1, 3, 64])
def test_iid_pdf_normalised_with_exact_moments(d):
    with mp.workdps(20):
        for n in (0, 1, 2):
            q = mp.quad(lambda w: w ** (2 * n) * theory.pdf_wij_iid(w, d), [0, mp.sqrt(2 * d), mp.inf])
            assert agrees(q, theory.wij_moment_iid(n, d), 15)


@pytest.mark.slow
def test_lemma_4_2_pdf_normalised_with_exact_moments():
    """Normalisation and the first two even moments of the printed density,
    by Gauss-Legendre quadrature over w, against the multinomial moments."""
    d, c = 3, mp.mpf("-0.5")
    with mp.workdps(12):
        top = 12  # p(12) < 1e-30: the truncated tail is negligible at 6 digits
        t, wt = np.polynomial.legendre.leggauss(48)
        pts = [(top * (float(ti) + 1) / 2, top * float(wi) / 2) for ti, wi in zip(t, wt)]
        vals = [(mp.mpf(x), mp.mpf(wgt), theory.pdf_wij(x, d, c)) for x, wgt in pts]
        for n in (0, 1, 2):
            q = mp.fsum(wgt * x ** (2 * n) * p for x, wgt, p in vals)
            assert agrees(q, theory.wij_moment(n, d, c), 6), (n, q)


@pytest.mark.parametrize("d", [2, 3, 7, 64])
@pytest.mark.parametrize("c", ["-1", "-0.4", "0", "0.6"])
def test_second_moment_closed_form(d, c):
    """E[w_ij^2] = 2d + 2c E[chi_d]^2 (independent norms)."""
    with mp.workdps(30):
        mu1 = mp.sqrt(2) * mp.gamma(mp.mpf(d + 1) / 2) / mp.gamma(mp.mpf(d) / 2)
        assert agrees(theory.wij_moment(1, d, c), 2 * d + 2 * mp.mpf(c) * mu1 ** 2, 28)
        assert theory.wij_moment(0, d, c) == 1


@pytest.mark.parametrize("d", [2, 5, 64])
def test_footnote_fourth_to_second_moment_orthogonal(d):
    """Footnote of Sec. 3.2: E(w^4)/E(w^2) = 2 G(d/2+2)/G(d/2+1) + 2 G(d/2+1)/G(d/2) = 2d + 2."""
    with mp.workdps(30):
        ratio = theory.wij_moment(2, d, 0) / theory.wij_moment(1, d, 0)
        h = mp.mpf(d) / 2
        printed = 2 * mp.gamma(h + 2) / mp.gamma(h + 1) + 2 * mp.gamma(h + 1) / mp.gamma(h)
        assert agrees(ratio, printed, 28)
        assert agrees(ratio, mp.mpf(2 * d + 2), 28)


def test_simplex_pdf_at_zero_for_d_2():
    """d = 2 simplex: w_ij = |w_i - w_j|, density at 0 is 2 int p_chi^2 = sqrt(pi)/2."""
    with mp.workdps(25):
        assert agrees(theory.pdf_wij(0, 2, -1), mp.sqrt(mp.pi) / 2, 24)
        assert agrees(theory.pdf_wij("1e-8", 2, -1), mp.sqrt(mp.pi) / 2, 7)
        assert theory.pdf_wij(0, 5, 0) == 0


def test_coupling_pdf_dispatch_and_bad_input():
    with mp.workdps(20):
        assert theory.coupling_pdf("iid", 1, 4) == theory.pdf_wij_iid(1, 4)
        assert agrees(theory.coupling_pdf("simplex", 1, 4), theory.pdf_wij(1, 4, mp.mpf(-1) / 3), 18)
    with pytest.raises(ValueError, match="w must be >= 0"):
        theory.pdf_wij(-1, 4, 0)
    with pytest.raises(ValueError, match="cos_theta must lie in"):
        theory.pdf_wij(1, 4, -2)
    with pytest.raises(ValueError, match="coupling must be one of"):
        theory.coupling_pdf("simplex_plus", 1, 4)
    with pytest.raises(ValueError, match="d must be an integer >= 2 for the simplex coupling"):
        theory.coupling_pdf("simplex", 1, 1)


# ---------------------------------------------------------------------------
# Issue 22, item 1: the budget reaches every loop of theory whose trip count an argument sets.
#
# Each call below provably needs far more work than its budget allows (the trip counts are in the
# comments: 10^7 to 10^18 iterations, against a work budget of 20 000 units, about 0.2 s; issue 38 made
# the budget a count of work instead of seconds), so the expiry is certain, the same on every machine,
# and no clock is read.  Each must raise theory.errors.ConvergenceError (an mpmath.NoConvergence) naming
# the argument that makes the loop long.  Before the fix the first of them ran forever
# (``for j in range(d // 2)`` without a check).


def test_wij_moment_double_sum():
    # n^2/2 = 5e9 terms
    with small_budget(), raises_budget(r"wij_moment at n = 100000"):
        theory.wij_moment(10**5, 8, "-0.1")


# ---------------------------------------------------------------------------
# Issue 22, item 3: the pair densities at d = 2**63, at cos_theta = -1, and at large w.
#
# pdf_wij (Lemma 4.2) broke its integral at a fixed partition: at cos_theta = -1 and d >= 10^5 the
# peak (width 1/(2 sqrt d) in log delta) fell between breakpoints and the value was silently wrong
# (1.107 instead of 0.798 at d = 10^5, w = 0.01); at d = 2**63 the log-integrand, of size d, lost 63
# bits and the call raised a ConvergenceError that named neither d nor cos_theta.  pdf_chi (the
# closed form at cos_theta = 0) lost log2(k) bits the same way (0.2% off at k = 2**64), and the
# convolution route missed its peak at d >= 1024, cos_theta = -1 (0.98 instead of 0.259).
#
# Oracles: at cos_theta = -1, w_ij = |w_i - w_j| and p(w) = 2 int chi_d(r) chi_d(r + w) dr,
# computed here with mpmath alone around the analytic peak r (r + w) = d - 1; at cos_theta = 0 the
# chi_2d density, whose value at its mode tends to 1/sqrt(pi) (the normal limit, error O(1/d));
# the convolution route (theory.pdf_wij_convolution) elsewhere.


def pdf_minus_one(w, d, dps):
    """p(w) at cos_theta = -1 by mpmath alone: 2 int_0^inf chi_d(r) chi_d(r + w) dr, broken around the
    peak r0 (r0 (r0 + w) = d - 1) on its scale sigma (the integrand is log-concave)."""
    with mp.workdps(dps + 20 + len(str(d))):
        w = mp.mpf(w)
        lognorm = -(mp.mpf(d) / 2 - 1) * mp.log(2) - mp.loggamma(mp.mpf(d) / 2)

        def logf(r):
            return (d - 1) * (mp.log(r) + mp.log(r + w)) - (r * r + (r + w) ** 2) / 2 + 2 * lognorm

        r0 = 2 * (d - 1) / (w + mp.sqrt(w * w + 4 * (d - 1)))
        sig = 1 / mp.sqrt((d - 1) * (1 / r0 ** 2 + 1 / (r0 + w) ** 2) + 2)
        peak = logf(r0)
        pts = sorted({mp.mpf(0)} | {r0 + k * sig for k in range(-60, 61, 2) if r0 + k * sig > 0})
        val = mp.quad(lambda r: mp.exp(logf(r) - peak) if r > 0 else mp.mpf(0), pts + [pts[-1] * 2 + 10])
        return 2 * mp.exp(peak) * val


@pytest.mark.parametrize("d,w", [(1024, "1e-10"), (10**5, "0.01"), (10**5, "1.5"), (10**8, "1"), (10**8, "10"),
                                 (2**63, "1e-10"), (2**63, "1")])
def test_pdf_at_cos_minus_one_against_the_convolution_oracle(d, w):
    with mp.workdps(20):
        got = theory.pdf_wij(w, d, -1)
    ref = pdf_minus_one(w, d, 20)
    with mp.workdps(20):
        assert abs(got / ref - 1) < mp.mpf(10) ** -18
    # power: the normal limit 2 phi(w) of |w_i - w_j| is close but not equal at d = 10^5
    if d == 10**5:
        with mp.workdps(20):
            ww = mp.mpf(w)
            assert abs(2 * mp.npdf(ww) / ref - 1) > mp.mpf(10) ** -8


def test_pdf_at_cos_zero_and_d_2_to_the_63_against_the_closed_form():
    """cos_theta = 0: Lemma 4.2 reduces to the chi_2d density (eq. chi_2d_dist); at its mode both tend to
    1/sqrt(pi) with an O(1/d) = 1e-19 error, so both are checked against that limit too."""
    d = 2**63
    w = 2**32  # the mode of chi_{2^64} is sqrt(2^64 - 1), 1.2e-10 away
    with mp.workdps(15):
        lemma = theory.pdf_wij(w, d, 0)
        closed = theory.pdf_chi(w, 2 * d)
        orth = theory.coupling_pdf("orthogonal", w, d)
        limit = 1 / mp.sqrt(mp.pi)
        for value in (lemma, closed, orth):
            assert abs(value / limit - 1) < mp.mpf(10) ** -14
    # power: the old pdf_chi, without the log2(k) extra bits, was 2e-3 off here
    assert abs(mp.mpf("0.565348739610614") / limit - 1) > 1e-3


@pytest.mark.slow
def test_simplex_pdf_at_d_2_to_the_63_against_the_convolution_route():
    d = 2**63
    w = 2**32
    with mp.workdps(15), theory.budget(work=40_000_000):  # a generous budget: the oracle takes 10-25 s
        got = theory.coupling_pdf("simplex", w, d)
        ref = theory.pdf_wij_convolution(w, d, mp.mpf(-1) / (d - 1))
        assert abs(got / ref - 1) < mp.mpf(10) ** -13


@pytest.mark.parametrize("w,c", [("1e10", 1), ("1e10", -1), ("1e3", "-0.5"), ("30", "0.3"), ("1e-300", "-1")])
def test_large_and_tiny_w_against_the_convolution_route(w, c):
    """Large w puts the mass at phi ~ d / w^2 (10^-19 at w = 1e10), which the fixed partition could not
    resolve; w = 1e-300 at cos_theta = -1 puts it at delta ~ 1e-300."""
    with mp.workdps(20), theory.budget(work=40_000_000):  # generous: the convolution takes up to 15 s at w = 1e10
        got = theory.pdf_wij(w, 8, c)
        ref = theory.pdf_wij_convolution(w, 8, c)
        assert got > 0 and abs(got / ref - 1) < mp.mpf(10) ** -18


def test_convolution_route_at_cos_minus_one_and_large_d_against_the_oracle():
    with mp.workdps(20):
        got = theory.pdf_wij_convolution("1.5", 10**5, -1)
    ref = pdf_minus_one("1.5", 10**5, 20)
    with mp.workdps(20):
        assert abs(got / ref - 1) < mp.mpf(10) ** -18


def test_errors_name_the_arguments_and_the_reachable_range():
    """w = 1e300 needs 2000-bit arithmetic (5 to 30 s); a budget of 20 000 units of work (at 2000 bits, a few
    dozen steps) certainly runs out, and the message says which arguments and what the reachable domain is."""
    with theory.budget(work=20_000), pytest.raises(theory.ConvergenceError) as info:
        theory.pdf_wij("1e300", 2**63, "-0.5")
    msg = str(info.value)
    assert "w = 1.0e+300, d = 9223372036854775808, cos_theta = -0.5" in msg
    assert "reachable domain within the default budget is w <= 1.0e+100" in msg
    assert isinstance(info.value, mpmath.libmp.NoConvergence)


# ---------------------------------------------------------------------------
# Regression tests for the findings of issue 11, one block per item, each against an
# independent computation (mpmath's own series at high precision, arb balls from
# python-flint, a dense scan, or a closed form).


PDF_POINTS = [(d, c, w) for d in (2, 3, 16, 64, 256)
              for c in (-1, "simplex", 0, 0.5, 1)
              for w in (1e-3, 0.3, 1.0, "mode", "tail")]


def _pdf_args(d, c, w):
    c = -1 / (d - 1) if c == "simplex" else c
    w = {"mode": np.sqrt(2 * d), "tail": 3 * np.sqrt(2 * d)}.get(w, w)
    return float(w), d, float(c)


@pytest.mark.parametrize("d,c,w", PDF_POINTS[::3])
def test_pdf_wij_float_pinned(d, c, w):
    w, d, c = _pdf_args(d, c, w)
    exact = theory.pdf_wij(w, d, c)
    if exact < 1e-280:
        return
    assert abs(theory.pdf_wij_float(w, d, c) / float(exact) - 1) < 1e-9


def test_pdf_wij_float_pin_has_power():
    """The mutation of the issue (one integration limit doubled) and the old fixed partition
    (which missed the peak at d = 256, cos = -1, w = 0.01: 3.7e-74 for 0.798) fail the pin."""
    from scipy import integrate, special

    w, d, c = 1.0, 16, -1 / 15
    exact = float(theory.pdf_wij(w, d, c))
    logpref = (2 * d - 1) * np.log(w) - (d - 2) * np.log(2) - 2 * special.gammaln(d / 2)

    def f(delta):
        s2, t = np.cos(2 * delta), (1 + c) - 2 * c * np.sin(delta) ** 2
        return np.exp(logpref + (d - 1) * np.log(s2 / 2) - w * w / (2 * t) - d * np.log(t)) if s2 > 0 else 0.0

    mutant = 2 * integrate.quad(f, 0, np.pi / 8)[0]  # an integration limit halved
    assert abs(mutant / exact - 1) > 1e-9
    assert abs(theory.pdf_wij_float(0.01, 256, -1) / float(theory.pdf_wij(0.01, 256, -1)) - 1) < 1e-9


# ---------------------------------------------------------------------------
# Huge dimensions d (and tiny w, large z_max): the findings A-D of the huge-d exploration.
#
# Every reference is independent of the function under test: mpmath's loggamma or hyp1f1 in the
# global context at 100-200 digits (a different formula from the one theory evaluates), exact
# integers (chi moments of even order), or the closed form p(0) of Lemma 4.2 at cos theta = -1.
# Each numeric check is shown to have power: the old evaluation (the same formula at the old
# working precision, reproduced here in a few lines) fails it.


@pytest.mark.parametrize("k", [10**30, 2**80 + 1, 2**200 + 3])
def test_chi_moment_at_huge_k(k):
    """E chi_k^{1/2} = 2^{1/4} Gamma((k + 1/2)/2)/Gamma(k/2) ~ k^{1/4}, from loggamma at 100 digits;
    even orders are exact integers (E chi^2 = k, E chi^4 = k (k + 2)).

    Before: 2^(1/4) = 1.189 for every k > 2^77 ((k + n)/2 rounded to k/2); the old evaluation
    at 77 bits fails (second test)."""
    with mpmath.workdps(100):
        kk = mpmath.mpf(k)
        ref = mpmath.exp(mpmath.log(2) / 4 + mpmath.loggamma((kk + mpmath.mpf(1) / 2) / 2) - mpmath.loggamma(kk / 2))
    assert rel_err(theory.chi_moment(0.5, k), ref) < 1e-14
    assert rel_err(theory.chi_moment(2, k), k) < 1e-14
    assert rel_err(theory.chi_moment(4, k), k * (k + 2)) < 1e-14


def test_chi_moment_check_has_power():
    with mpmath.workprec(77):
        k = mpmath.mpf(10**30)
        old = 2 ** mpmath.mpf(0.25) * mpmath.gammaprod([(k + mpmath.mpf(1) / 2) / 2], [k / 2])
    assert not rel_err(old, mpmath.mpf(10) ** 7.5) < 1e-3


@pytest.mark.parametrize("d", [10**30, 2**80 + 1])
def test_wij_moment_at_huge_d(d):
    """E (r_i - r_j)^2 = 2d - 2 (E chi_d)^2 = 1 + O(1/d) at cos theta = -1 (loggamma at 200 digits);
    E (r_i^2 + r_j^2)^2 = 2d(d+2) + 2d^2 at cos theta = 0 (exact).  Before: 2.0e30 for 1.0."""
    with mpmath.workdps(200):
        h = mpmath.mpf(d) / 2
        mean2 = 2 * mpmath.exp(2 * (mpmath.loggamma(h + mpmath.mpf(1) / 2) - mpmath.loggamma(h)))
        ref = 2 * d - 2 * mean2
    assert rel_err(theory.wij_moment(1, d, -1), ref) < 1e-14
    with mpmath.workdps(200):
        assert abs(ref - 1) < mpmath.mpf(1) / d  # the reference itself: 1 - 1/(4d) + ...
    assert rel_err(theory.wij_moment(2, d, 0), 2 * d * (d + 2) + 2 * d * d) < 1e-14


def p0_closed_form(d):
    """p(0) = Gamma(d - 1/2) / (2^{d-2} Gamma(d/2)^2) at cos theta = -1 (Lemma 4.2's limit)."""
    with mpmath.workdps(40):
        half = mpmath.mpf(d) / 2
        return float(mpmath.gamma(d - mpmath.mpf(1) / 2) / (mpmath.mpf(2) ** (d - 2) * mpmath.gamma(half) ** 2))


@pytest.mark.parametrize("d", [2, 3, 16, 256])
@pytest.mark.parametrize("w", [1e-20, 1e-100, 1e-140, 1e-300])
def test_pdf_wij_float_tiny_w_at_cos_minus_one(d, w):
    """At cos theta = -1 the density tends to p(0) (O(1): 0.886 at d = 2, 0.846 at d = 3); for
    w <= 1e-20 it equals p(0) to double precision.  Before: -1.05e-23 (w = 1e-20, d = 2), 0.0
    (w = 1e-300), ConvergenceError (w = 1e-100, d = 2; w = 1e-20, d = 3): all fail this check."""
    val = theory.pdf_wij_float(w, d, -1)
    assert abs(val / p0_closed_form(d) - 1) < 1e-9


@pytest.mark.parametrize("w,d,c", [(1e-7, 3, -1), (1e-10, 16, -1), (1e-20, 3, -1 + 2**-53),
                                   (1e-5, 2, -1 + 1e-15), (1e-8, 16, -1 + 1e-12), (1e-300, 1, 0),
                                   (1e-100, 2, -0.3), (3e-13, 64, -1)])
def test_pdf_wij_float_small_w_against_pdf_wij(w, d, c):
    """Small w near and away from cos theta = -1 (peaks at delta ~ max(w/(2 sqrt d), sqrt(1 + c)))
    against the arbitrary-precision route (a different quadrature in mpmath)."""
    exact = theory.pdf_wij(w, d, c)
    assert abs(theory.pdf_wij_float(w, d, c) / float(exact) - 1) < 1e-9


# ---------------------------------------------------------------------------
# Tests added against the surviving formula mutants of the OPRF (FAVOR++) closed forms of theory/oprf.py and of
# theory.distributions.dimension_bits (group ``oprf_theory`` of tests/mutation_targets.py, docs/guide/mutation.rst).
#
# Each class is the addition to one target's mutation command: ``TestOptimalA`` (``oprf_a``: optimal_a and the A=None
# dispatch), ``TestOprfMse`` (``oprf_var``: the pieces of the OPRF kernel MSE and the certified ball),
# ``TestDimensionBits`` (``dim_bits``).  References are independent of the code under test: a Beta function (the
# norm-coupled pair at d = 2 in closed form), asymptotic expansions at d ~ 1.2e4932 whose corrections are far below
# the working precision, a central difference of the MSE in A, the theorem (the pair excess of iid, orthogonal and
# simplex vanishes at v = 0 for every A).  Each test states the value the surviving mutant gives.


class TestDimensionBits:
    """theory.distributions.dimension_bits: the domain d < 2^D_MAX_BITS = 2^16384 up to its last integer, and
    the error beyond it naming the size."""

    def test_the_last_dimension_of_the_domain(self):
        """d = 2^16384 - 1 (about 1.19e4932, 16384 bits: the largest d of the documented domain) returns values,
        each against its asymptotic form, whose relative correction O(1/d) is far below the working precision:
        E chi_d^{1/2} = 2^{1/4} Gamma((d + 1/2)/2)/Gamma(d/2) = d^{1/4} (1 + O(1/d)) (Gamma(x + a)/Gamma(x) =
        x^a (1 + a(a-1)/(2x) + ...)); the SimRF prefactor C = 1 - R_1 = 1/(2d) (1 + O(1/d)) (R_1 = Gamma(h + 1/2)^2
        / (h Gamma(h)^2) = 1 - 1/(4h) + O(h^-2), h = d/2); Cor 4.6's RFF ratio at z = 0 is 1/d exactly.  The mutant
        ``n > D_MAX_BITS -> n >= D_MAX_BITS`` refused all of 2^16383 <= d < 2^16384 (ConvergenceError)."""
        d = 2**16384 - 1
        before = mpmath.mp.prec
        with mp.workprec(16384 + 100):  # d exact
            dd = mp.mpf(d)
            refs = (mp.root(dd, 4), 1 / (2 * dd), 1 / dd)
        got = (theory.chi_moment(0.5, d), theory.simplex_v2_prefactor(d), theory.rff_asymptotic_ratio(d, 0))
        for g, r in zip(got, refs):
            assert rel_diff(g, r) < 1e-14, (g, r)
        assert mpmath.mp.prec == before

    @pytest.mark.parametrize("d,lead", [(2**16384, 16384), (2**16400 + 12345, 16400), (3 * 2**20000, 20001)],
                             ids=["2^16384", "2^16400+12345", "3*2^20000"])
    def test_beyond_the_domain_names_the_size(self, d, lead):
        """ConvergenceError for d >= 2^16384, naming d's leading power of two and its bit length (d = 2^16384:
        '2^16384... has 16385 bits').  The mutants of ``2^{n - 1}`` (n + 1, n - 2) named 2^16386 or 2^16383 for
        d = 2^16384 and still matched the existing check's pattern '2^16384' (the domain 'd < 2^16384' is in the
        same message)."""
        text = re.escape(f"d (or k) = 2^{lead}... has {lead + 1} bits; the reachable domain is d < 2^16384")
        for call in (lambda: theory.simplex_v2_prefactor(d), lambda: theory.chi_moment(1, d)):
            with pytest.raises(theory.ConvergenceError, match=text):
                call()
