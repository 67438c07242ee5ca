"""Huge dimensions d (and tiny w, large z_max): the findings A-D of the huge-d exploration.

Every reference is independent of the function under test: mpmath's loggamma or hyp1f1 in the
global context at 100-200 digits (a different formula from the one theory evaluates), exact
integers (chi moments of even order), or the closed form p(0) of Lemma 4.2 at cos theta = -1.
Each numeric check is shown to have power: the old evaluation (the same formula at the old
working precision, reproduced here in a few lines) fails it.
"""

import math
import warnings

import mpmath
import pytest

import theory
from theory import mse
from theory.kernels import coupled_pairs


def rel(a, b):
    return abs(mpmath.mpf(a) / mpmath.mpf(b) - 1)


def one_minus_r1(d, dps=200):
    """1 - Gamma((d+1)/2)^2 / (Gamma(d/2) Gamma(d/2 + 1)) from loggamma at ``dps`` digits."""
    with mpmath.workdps(dps):
        h = mpmath.mpf(d) / 2
        log_r1 = 2 * mpmath.loggamma(h + mpmath.mpf(1) / 2) - mpmath.loggamma(h) - mpmath.loggamma(h + 1)
        return -mpmath.expm1(log_r1)


HUGE = [2**53, 10**12, 10**15, 10**20, 10**25, 10**30, 2**200 + 1]


# ---------------------------------------------------------------------------
# A: 1 - R_1 and rho - e^{v^2} at huge d


@pytest.mark.parametrize("d", HUGE)
def test_simplex_v2_prefactor_and_v0_ratio_at_huge_d(d):
    """C = 1 - R_1 ~ 1/(2d) for m = d: simplex_v2_prefactor, the printed form and the v = 0 limit
    of mse_ratio('simplex', 'iid') all equal it to the working precision.

    Before: 1.4e-12 relative error at d = 1e12, 6e-4 at 1e20, 0.0 / -1.1e37 / -0.18 (every digit
    lost) from 1e25; the same formula at the old working precision fails this check (second test).
    """
    ref = one_minus_r1(d)
    assert rel(theory.simplex_v2_prefactor(d), ref) < 1e-14
    assert rel(theory.simplex_v2_prefactor_printed(d), ref) < 1e-14
    assert rel(theory.mse_ratio("simplex", "iid", d, 0), ref) < 1e-14
    with mpmath.workdps(40):
        ref = one_minus_r1(d)
        assert rel(theory.simplex_v2_prefactor(d), ref) < mpmath.mpf(10) ** -38
        assert rel(theory.mse_ratio("simplex", "iid", d, 0), ref) < mpmath.mpf(10) ** -38


def test_huge_d_prefactor_check_has_power():
    """The old evaluation (1 - gammaprod at the caller's precision + 24 guard bits) fails the check."""
    for d, worst in ((10**12, 1e-13), (10**20, 1e-5), (10**25, 0.5)):
        with mpmath.workprec(53 + 24):
            h = mpmath.mpf(d) / 2
            old = 1 - mpmath.gammaprod([h + mpmath.mpf(1) / 2, h + mpmath.mpf(1) / 2], [h, h + 1])
        assert not rel(old, one_minus_r1(d)) < worst
    assert mpmath.mpf(theory.mse_ratio("simplex", "iid", 10**30, 0)) > 0  # was -0.183


@pytest.mark.parametrize("d,m", [(10**20, 10**20 + 1), (10**20, 3 * 10**20), (10**20, 10**20 - 1), (10**30, 7)])
def test_simplex_v2_prefactor_any_m_at_huge_d(d, m):
    """C = 1 - (P/m) R_1/(d-1) for any m, against loggamma at 200 digits (m near d: C ~ 1/d)."""
    with mpmath.workdps(200):
        ref = 1 - mpmath.mpf(coupled_pairs(d, m)) / (m * (d - 1)) * (1 - one_minus_r1(d))
    assert rel(theory.simplex_v2_prefactor(d, m=m), ref) < 1e-14


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
        assert rel(f(d, 1, x_norm=0.5, y_norm=0.5), ref) < 1e-13
    with mpmath.workprec(77):
        dd = mpmath.mpf(d)
        old = mpmath.e - mpmath.hyp1f1(dd, dd / 2, mpmath.mpf(1) / 2)
    assert not rel(old, excess) < 1e-13


def test_rff_v0_ratio_at_huge_d():
    """RFF ORF/IID at z = 0: (1/2 + (d-1) b)/(1/2), b = -1/(2(d+2)), i.e. exactly 3/(d+2)."""
    for d in (10**12, 10**30):
        ref = mpmath.mpf(3) / (d + 2)
        assert rel(theory.rff_mse_ratio("orthogonal", "iid", d, 0), ref) < 1e-14


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
    assert rel(theory.rff_asymptotic_ratio(d, z), ref) < 1e-14
    if z in (0, "1e-20"):  # (at z = 0.5 there is nothing to cancel: the old value was right)
        with mpmath.workprec(77):
            old = 1 - mpmath.mpf(d - 1) / d * shape
        assert not rel(old, ref) < 1e-14


def test_huge_d_beyond_the_domain_is_loud():
    """d >= 2^16384 (the guard bits would cost minutes): ConvergenceError naming d, precision unchanged."""
    before = mpmath.mp.prec
    for call in (lambda: theory.simplex_v2_prefactor(2**16384), lambda: theory.chi_moment(1, 2**16400),
                 lambda: theory.mse_ratio("simplex", "iid", 2**16384, 0)):
        with pytest.raises(theory.ConvergenceError, match="2\\^16384"):
            call()
    assert mpmath.mp.prec == before


# ---------------------------------------------------------------------------
# B: chi_moment and wij_moment beyond 2^77


@pytest.mark.parametrize("k", [10**30, 2**80 + 1, 2**200 + 3])
def test_chi_moment_at_huge_k(k):
    """E chi_k^{1/2} = 2^{1/4} Gamma((k + 1/2)/2)/Gamma(k/2) ~ k^{1/4}, from loggamma at 100 digits;
    even orders are exact integers (E chi^2 = k, E chi^4 = k (k + 2)).

    Before: 2^(1/4) = 1.189 for every k > 2^77 ((k + n)/2 rounded to k/2); the old evaluation
    at 77 bits fails (second test)."""
    with mpmath.workdps(100):
        kk = mpmath.mpf(k)
        ref = mpmath.exp(mpmath.log(2) / 4 + mpmath.loggamma((kk + mpmath.mpf(1) / 2) / 2) - mpmath.loggamma(kk / 2))
    assert rel(theory.chi_moment(0.5, k), ref) < 1e-14
    assert rel(theory.chi_moment(2, k), k) < 1e-14
    assert rel(theory.chi_moment(4, k), k * (k + 2)) < 1e-14


def test_chi_moment_check_has_power():
    with mpmath.workprec(77):
        k = mpmath.mpf(10**30)
        old = 2 ** mpmath.mpf(0.25) * mpmath.gammaprod([(k + mpmath.mpf(1) / 2) / 2], [k / 2])
    assert not rel(old, mpmath.mpf(10) ** 7.5) < 1e-3


@pytest.mark.parametrize("d", [10**30, 2**80 + 1])
def test_wij_moment_at_huge_d(d):
    """E (r_i - r_j)^2 = 2d - 2 (E chi_d)^2 = 1 + O(1/d) at cos theta = -1 (loggamma at 200 digits);
    E (r_i^2 + r_j^2)^2 = 2d(d+2) + 2d^2 at cos theta = 0 (exact).  Before: 2.0e30 for 1.0."""
    with mpmath.workdps(200):
        h = mpmath.mpf(d) / 2
        mean2 = 2 * mpmath.exp(2 * (mpmath.loggamma(h + mpmath.mpf(1) / 2) - mpmath.loggamma(h)))
        ref = 2 * d - 2 * mean2
    assert rel(theory.wij_moment(1, d, -1), ref) < 1e-14
    with mpmath.workdps(200):
        assert abs(ref - 1) < mpmath.mpf(1) / d  # the reference itself: 1 - 1/(4d) + ...
    assert rel(theory.wij_moment(2, d, 0), 2 * d * (d + 2) + 2 * d * d) < 1e-14


# ---------------------------------------------------------------------------
# C: pdf_wij_float at w -> 0, cos theta = -1


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
# D: z_crit with large (or tiny) z_max


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


# ---------------------------------------------------------------------------
# E: integers beyond Python's int -> str limit (4300 digits) in messages (issue 38)

BIG = 2**14286  # 4301 digits: str(BIG) raises ValueError (sys.get_int_max_str_digits() = 4300)


def test_closed_forms_at_a_4301_digit_d():
    """d = 2^14286 lies in the documented domain (d < 2^16384): the conformities equal their d -> oo limit
    e^{v^2} (the 1/d corrections are 10^-4300 away).  The PRF MSE with m = d is e^{-2(|x|^2+|y|^2)} / m times
    Var b = e^{2v^2} - e^{v^2} (IID) plus, for ORFs, (m - 1)(rho_ORF - e^{v^2}) -> -e^{v^2} v^4 / 2 (from
    (d)_k / (d/2)_k = 2^k (1 - k(k-1)/(2d) + O(1/d^2)) in 1F1(d; d/2; v^2/2)), up to O(1/d).  Before: 'Exceeds
    the limit (4300 digits) for integer string conversion' from a label formatting d (conformity, kernel_mse,
    mse_ratio, orthogonality_gap, ...)."""
    v, xn, yn = mpmath.mpf("0.5"), mpmath.mpf("0.25"), mpmath.mpf("0.25")
    for coupling in ("iid", "orthogonal", "simplex"):
        assert rel(theory.conformity(coupling, BIG, v), mpmath.exp(v * v)) < 1e-14
    pre, e1, e2 = mpmath.exp(-2 * (xn * xn + yn * yn)) / BIG, mpmath.exp(v * v), mpmath.exp(2 * v * v)
    iid, orf = pre * (e2 - e1), pre * (e2 - e1 - e1 * v**4 / 2)
    assert rel(theory.kernel_mse("iid", BIG, v, x_norm=xn, y_norm=yn), iid) < 1e-13
    assert rel(theory.kernel_mse("orthogonal", BIG, v, x_norm=xn, y_norm=yn), orf) < 1e-13
    assert rel(theory.mse_ratio("orthogonal", "iid", BIG, v), orf / iid) < 1e-13


@pytest.mark.parametrize("call,kind,shown", [
    (lambda: theory.orf_conformity_kummer(BIG + 1, 0.5), ValueError,
     r"got about 3\.26978e\+4300 \(an integer of 14287"),
    (lambda: theory.simplex_vectors(BIG), ValueError, r"d\^2 = 2\^28572 .*got 2\^14286 \(an integer of 14287 bits\)"),
    (lambda: theory.pdf_wij_float(0.5, BIG, 0), ValueError, r"d must be an integer >= 1 and <= 4503599627370496"),
    (lambda: theory.prf_mse_from_conformity(-1, 0.5, m=BIG, x_norm=0.25, y_norm=0.25), ValueError,
     r"for m = 2\^14286 \(an integer of 14287 bits\) PRF features"),
    (lambda: theory.conformity_iid(2, -BIG), ValueError, r"got -2\^14286 \(an integer of 14287 bits\) \(int\)"),
], ids=["kummer", "simplex_vectors", "pdf_wij_float", "mse_from_conformity", "describe"])
def test_huge_integers_are_named_in_messages(call, kind, shown):
    """The error names the huge argument by its size (theory.validation.show_int) instead of failing to print
    it.  Before: the str-conversion ValueError (pdf_wij_float: OverflowError, d unnamed)."""
    with pytest.raises(kind, match=shown):
        call()
