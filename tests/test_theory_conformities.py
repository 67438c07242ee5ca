"""Conformities (Lemma 4.1, Lemma 4.2, Thm 4.3): every closed form against an
independent route, to >= 25 significant digits at 30 dps, on the grid of the issue."""

import itertools

import mpmath
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from mpmath import mp

import montecarlo as mc
import theory
from _support import rel_err
from paper_checks._compare import agrees, Z_CRIT
from theory import _context

DS = [2, 3, 4, 6, 16, 64, 256, 1024]
VS = ["0", "0.1", "1", "2.5", "5"]
GRID = list(itertools.product(DS, VS))
DIGITS = 25


def agree(a, b, digits=DIGITS):
    """Relative agreement to `digits` significant digits (paper_checks._compare.agrees, the one home)."""
    return agrees(a, b, digits)


def rel(a, b):
    return mp.nstr(abs(a - b) / max(abs(a), abs(b)), 3)


@pytest.mark.parametrize("d,v", GRID)
def test_orf_closed_form_vs_printed_series_and_kummer(d, v):
    with mp.workdps(30):
        closed = theory.conformity("orthogonal", d, v)  # 1F1 (mpmath)
        printed = theory.orf_conformity_series(d, v)  # eq. orf_conformity term by term
        quad = theory.conformity_at_angle_quad(d, v, 0)  # eq. theta_conformity integral at theta = pi/2
        assert agree(closed, printed), rel(closed, printed)
        assert agree(closed, quad), rel(closed, quad)
        if d % 2 == 0:
            kummer = theory.orf_conformity_kummer(d, v)  # finite Laguerre sum
            assert agree(closed, kummer), rel(closed, kummer)


@pytest.mark.parametrize("d,v", GRID)
def test_simrf_printed_double_series_vs_fast_route_vs_quadrature(d, v):
    with mp.workdps(30):
        c = mp.mpf(-1) / (d - 1)
        fast = theory.conformity("simplex", d, v)  # Taylor in cos(theta) with 1F1 derivatives
        printed = theory.simrf_conformity_series(d, v)  # eq. simrf_conformity as printed
        quad = theory.conformity_at_angle_quad(d, v, c)  # 1-D integral of 1F1
        assert agree(fast, printed), rel(fast, printed)
        assert agree(fast, quad), rel(fast, quad)


@pytest.mark.parametrize("d,v", [(2, "1"), (3, "2.5"), (6, "0.1"), (16, "1"), (64, "2.5"), (256, "1")])
def test_simrf_against_exact_moment_series(d, v):
    """The definition with exact chi_d moments uses neither Lemma 4.2 nor the
    phi integral: a fully independent route."""
    with mp.workdps(30):
        fast = theory.conformity("simplex", d, v)
        moments = theory.conformity_from_moments(d, v, mp.mpf(-1) / (d - 1))
        assert agree(fast, moments), rel(fast, moments)


@pytest.mark.parametrize("d,v", [(3, "1"), (16, "2.5"), (64, "5")])
def test_orf_and_iid_against_exact_moment_series(d, v):
    with mp.workdps(30):
        assert agree(theory.conformity("orthogonal", d, v), theory.conformity_from_moments(d, v, 0))
        # IID: E[exp(w_i.v)]^2 = exp(v^2) (Lemma 4.1) vs the moment series of 2 chi_d^2 ... via the pdf moments
        iid_moment_series = mp.fsum(
            mp.gamma(mp.mpf(d) / 2) * (mp.mpf(v) ** 2 / 4) ** k / (mp.factorial(k) * mp.gamma(k + mp.mpf(d) / 2))
            * theory.wij_moment_iid(k, d) for k in range(400))
        assert agree(theory.conformity("iid", d, v), iid_moment_series)


@pytest.mark.parametrize("d,v,c", [(3, "1", "0.4"), (5, "2", "-0.7"), (16, "1.5", "1"), (7, "3", "-1"), (2, "1", "0.9")])
def test_any_angle_routes_agree(d, v, c):
    with mp.workdps(30):
        fast = theory.conformity_at_angle(d, v, c)
        assert agree(fast, theory.theta_conformity_series(d, v, c))
        assert agree(fast, theory.conformity_at_angle_quad(d, v, c))
        assert agree(fast, theory.conformity_from_moments(d, v, c))


def test_routes_detect_a_wrong_value():
    """Power: the 25-digit comparison distinguishes SimRF from ORF and from a
    simplex angle with d off by one."""
    with mp.workdps(30):
        fast = theory.conformity("simplex", 64, 1)
        assert not agree(fast, theory.conformity("orthogonal", 64, 1))
        assert not agree(fast, theory.conformity_at_angle(64, 1, mp.mpf(-1) / 64))
        assert not agree(fast, theory.conformity_at_angle(64, "1.0000000000000000000001", mp.mpf(-1) / 63))


# ---------------------------------------------------------------------------
# precision


@pytest.mark.parametrize("func,args", [
    (theory.conformity, ("simplex", 64, "2.5")),
    (theory.conformity, ("orthogonal", 1024, "5")),
    (theory.conformity_at_angle, (16, "1", "-0.3")),
    (theory.simrf_conformity_series, (6, "1")),
    (theory.orf_conformity_series, (6, "5")),
])
def test_result_correct_to_working_precision(func, args):
    """A 40-digit result equals the 80-digit one rounded, to within 2 ulp."""
    with mp.workdps(80):
        ref = func(*args)
    with mp.workdps(40):
        got = func(*args)
        assert abs(got - ref) <= 2 * abs(ref) * mp.eps


def test_precision_is_callers_and_restored():
    before = mp.prec
    with mp.workdps(50):
        inside = mp.prec
        r = theory.conformity("simplex", 8, 1)
        assert mp.prec == inside
        # the result is rounded to the caller's precision (no extra mantissa bits)
        assert r._mpf_[1].bit_length() <= inside
    assert mp.prec == before
    with pytest.raises(ValueError):
        theory.conformity("simplex", 1, 1)
    assert mp.prec == before


def test_no_overflow_for_large_d_and_v():
    with mp.workdps(20):
        for coupling in ("iid", "orthogonal", "simplex"):
            r = theory.conformity(coupling, 4096, 20)
            assert mp.isfinite(r) and r > 1
        # log rho_IID = v^2 = 400; coupled conformities are smaller
        assert theory.conformity("simplex", 4096, 20) < theory.conformity("orthogonal", 4096, 20) < mp.exp(400)
        assert mp.isfinite(theory.conformity("simplex", 2, 20))


def test_series_raise_when_they_cannot_converge():
    with mp.workdps(20):
        with pytest.raises(mp.NoConvergence, match="max_terms"):
            theory.simrf_conformity_series(8, 5, max_terms=10)
        with pytest.raises(mp.NoConvergence, match="maxdegree"):
            theory.conformity_at_angle_quad(64, 5, "-0.5", maxdegree=2)
        with pytest.raises(ValueError, match="maxdegree must be an integer >= 2"):
            theory.conformity_at_angle_quad(64, 5, "-0.5", maxdegree=1)


# ---------------------------------------------------------------------------
# properties


@settings(max_examples=40, deadline=None)
@given(d=st.integers(2, 300), v=st.floats(1e-3, 6), c1=st.floats(-1, 1), c2=st.floats(-1, 1))
def test_conformity_increases_with_cos_theta(d, v, c1, c2):
    lo, hi = min(c1, c2), max(c1, c2)
    assume(hi - lo > 1e-6)
    with mp.workdps(20):
        assert theory.conformity_at_angle(d, v, lo) < theory.conformity_at_angle(d, v, hi)


@settings(max_examples=40, deadline=None)
@given(d=st.integers(2, 2000), v=st.floats(1e-3, 8))
def test_ordering_simplex_orthogonal_iid(d, v):
    with mp.workdps(25):
        s = theory.conformity("simplex", d, v)
        o = theory.conformity("orthogonal", d, v)
        i = theory.conformity("iid", d, v)
        assert 1 < s < o < i


# ---------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize("args,match", [
    (("orf", 4, 1), "coupling must be one of 'iid', 'orthogonal', 'simplex'"),
    (("simplex", 1, 1), "d must be an integer >= 2 for the simplex coupling, got 1"),
    (("orthogonal", 0, 1), "d must be an integer >= 1"),
    (("orthogonal", 4.0, 1), "d must be an integer"),
    (("orthogonal", True, 1), "d must be an integer"),
    (("iid", 4, -1), "v must be >= 0"),
    (("iid", 4, float("nan")), "v must be finite"),
    (("iid", 4, "abc"), "v must be a real number"),
    (("iid", 4, 1j), "v must be a real number"),
])
def test_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        theory.conformity(*args)


def test_bad_cos_theta():
    with pytest.raises(ValueError, match=r"cos_theta must lie in \[-1, 1\]"):
        theory.conformity_at_angle(4, 1, 1.5)
    with pytest.raises(ValueError, match="even"):
        theory.orf_conformity_kummer(5, 1)


def test_accepts_int_float_str_mpf_inputs():
    with mp.workdps(30):
        ref = theory.conformity("simplex", 16, mp.mpf(1) / 2)
        for v in (0.5, "0.5", mp.mpf("0.5")):
            assert theory.conformity("simplex", 16, v) == ref
        import numpy as np
        assert theory.conformity("simplex", np.int64(16), np.float64(0.5)) == ref


# ---------------------------------------------------------------------------
# Regression tests for the findings of issue 11, one block per item, each against an
# independent computation (mpmath's own series at high precision, arb balls from
# python-flint, a dense scan, or a closed form).


def mp_rff_orf(d, z, dps):
    """1F1(d; d/2; -z^2/2) by mpmath's own power series with a generous precision cap."""
    with mp.workdps(dps):
        z = mp.mpf(z)
        return mp.hyp1f1(d, mp.mpf(d) / 2, -z * z / 2, maxprec=200_000)


@pytest.mark.parametrize("dps", [15, 30, 60])
def test_rff_conformity_is_not_silently_zero(dps):
    """Was exactly 0.0 at 15 digits; the value is -8.196e-205."""
    with mp.workdps(dps):
        got = theory.rff_conformity("orthogonal", 1024, 20)
    ref = mp_rff_orf(1024, 20, dps + 30)
    assert got != 0 and rel_err(got, ref) < mp.mpf(10) ** (1 - dps)
    assert mp.nstr(ref, 5) == "-8.1964e-205"


def test_large_v_simplex_conformity_against_an_independent_quadrature():
    """conformity('simplex', 64, 1000) ran for minutes; now the quadrature route answers.
    Oracle: mpmath.quad of eq. theta_conformity in s = sin(phi), rescaled to the peak
    s* = (d - 1)/(x |c|), with mpmath's hyp1f1 at 60 extra digits."""
    d, v = 64, 1000
    with mp.workdps(20):
        got = theory.conformity("simplex", d, v)
    with mp.workdps(50):
        x = mp.mpf(v) ** 2 / 2
        c = mp.mpf(-1) / (d - 1)
        scale = (d - 1) / (x * abs(c))
        log_norm = mp.loggamma(d) - (d - 1) * mp.log(2) - 2 * mp.loggamma(mp.mpf(d) / 2)

        def f(u):  # s = scale * u, ds = scale du, weight s^(d-1) / sqrt(1 - s^2)
            s = scale * u
            return mp.exp((d - 1) * mp.log(u)) * mp.hyp1f1(d, mp.mpf(d) / 2, x * (1 + c * s)) / mp.sqrt(1 - s * s)

        integral = mp.quad(f, [0, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256])
        ref = 2 * mp.exp(log_norm + (d - 1) * mp.log(scale)) * scale * integral
    assert rel_err(got, ref) < mp.mpf(10) ** -18


@pytest.mark.parametrize("call", [
    lambda: theory.conformity("simplex", 64, 1000),
    lambda: theory.mse_ratio("simplex", "iid", 8, 1e300),
    lambda: theory.rff_conformity("simplex", 4, 100),
    lambda: theory.conformity_iid(8, "1e5000"),
    lambda: theory.simrf_conformity_series(64, 1000),
    lambda: theory.orf_conformity_series(8, 1e5),
    lambda: theory.conformity_from_moments(8, 100, -0.1),
])
def test_no_hang_answer_or_no_convergence_within_budget(call):
    """Each of these ran for minutes (200 000 terms x 10 precision retries); now each
    returns or raises mpmath.NoConvergence, and the work is bounded by a count instead of a
    clock: fewer than 50 000 budget checks (at most 11 000 are made now; the old 2 million
    terms were 125 000 checks, one per 16 terms)."""
    w0 = _context.work_count()
    try:
        value = call()
    except mpmath.libmp.NoConvergence as exc:
        assert isinstance(exc, theory.ConvergenceError)
        assert "use" in str(exc) or "budget" in str(exc) or "domain" in str(exc)
    else:
        assert mp.isfinite(value)
    assert _context.work_count() - w0 < 50_000


def test_rff_simplex_at_large_z_against_independent_quadrature():
    """rff_conformity('simplex', 4, 100) hung; oracle: mpmath.quad over phi of the closed 1F1
    form (even d = 4: M(4, 2, -t) = e^{-t} M(-2, 2, t) = e^{-t}(1 - t + t^2/6)) at 80 digits."""
    with mp.workdps(20):
        got = theory.rff_conformity("simplex", 4, 100)
    with mp.workdps(80):
        y = mp.mpf(100) ** 2 / 2
        c = mp.mpf(-1) / 3

        def m(t):
            return mp.exp(-t) * (1 - t + t * t / 6)

        scale = y * (1 + c)  # the integrand is ~ e^{-y(1 + c)} at its peak: mpmath.quad's error is absolute

        def f(phi):
            s = mp.sin(phi)
            return s ** 3 * (m(y * (1 + c * s)) + m(y * (1 - c * s))) / 2 * mp.exp(scale)

        # the integrand peaks at phi = pi/2 with width ~ 1/sqrt(y |c|)
        w = 1 / mp.sqrt(y * abs(c))
        pts = [0, mp.pi / 4] + [mp.pi / 2 - w * 2 ** k for k in range(6, -4, -1)] + [mp.pi / 2]
        ref = 2 * mp.quad(f, sorted(pts)) * mp.exp(-scale) * mp.gamma(4) / (2 ** 3 * mp.gamma(2) ** 2)
    assert rel_err(got, ref) < mp.mpf(10) ** -18


def test_simplex_rff_at_large_d_and_z_is_loud_within_the_budget():
    """Found by the accuracy suite (d = 65536, z = 67.6, 120 digits ran past 30 s; with the
    value-following remainder it takes 9 s at 30 digits, 28 s at 120, 18 s at 15): a call that
    needs more than its budget raises ConvergenceError instead of running on.  The budget, 20 000
    units of work, is far below what the call needs, so its expiry is certain; no clock is read.  At the
    same d, z = 10 returns after a handful of budget checks (17 at 30 digits)."""
    with theory.budget(work=20_000):
        with pytest.raises(theory.ConvergenceError, match="work budget of 20000 units"):
            theory.rff_conformity("simplex", 65536, "67.6")
    w0 = _context.work_count()
    with mp.workdps(30):
        inside = theory.rff_conformity("simplex", 65536, "10")
    assert _context.work_count() - w0 < 100
    assert 0 < inside < mp.mpf("1e-40")


def test_value_following_remainder_survives_an_exact_zero_of_a_term():
    """The Taylor route's value-following remainder evaluates one extra 1F1, f_{p-1}; at d = 2, z = 4
    (y = 8) f_7 = M(9, 8, -8) = e^{-8}(1 - 8/8) is exactly 0 and has no relative accuracy: the bound
    is then skipped instead of failing the call (found by the new_rff_simplex_map figure in CI).
    Checked against the quadrature route."""
    with mp.workdps(20):
        taylor = theory.rff_conformity("simplex", 2, "4")
        quad = theory.rff_conformity_at_angle_quad(2, "4", -1)
    assert abs(taylor - quad) <= mp.mpf(10) ** -18 * abs(quad)


@pytest.mark.parametrize("v,c,dps", [("43.79", "0.134", 120), ("20", "-0.7", 30), ("12", "-1", 30)])
def test_quadrature_route_at_d_1_against_the_closed_form_of_its_1f1(v, c, dps):
    """Found by the accuracy suite: at d = 1 the sine weight sin^0 is flat, the log-integrand levels off
    towards phi -> 0 instead of dropping, and the peak scan ran to u < -10^7 ('the integrand's peak
    could not be located').  Oracle: rho = (1/pi) int_0^pi M(1, 1/2, x(1 + c sin phi)) dphi with
    M(1, 1/2, t) = 1 + sqrt(pi t) e^t erf(sqrt t), by mpmath's quad (no theory code)."""
    with mp.workdps(dps):
        got = theory.conformity_at_angle(1, v, c)
    with mp.workdps(dps + 20):
        x = mp.mpf(v) ** 2 / 2
        cc = mp.mpf(c)

        def m(t):  # erf as 1 - erfc: mpmath's erf at arguments near 33 and 140 digits is 36x slower (27 s a test)
            return 1 + mp.sqrt(mp.pi * t) * mp.exp(t) * (1 - mp.erfc(mp.sqrt(t))) if t > 0 else mp.mpf(1)

        ref = 2 / mp.pi * mp.quad(lambda phi: m(x * (1 + cc * mp.sin(phi))), [0, mp.pi / 4, mp.pi / 2])
        assert abs(got / ref - 1) < mp.mpf(10) ** (1 - dps)


# ---------------------------------------------------------------------------
# Beyond the paper: simplex coupling (and any angle) for random Fourier features.


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


# ---------------------------------------------------------------------------
# The quadrature route's large-t expansion of M(d, d/2, t): where it holds, and its fixed-point sum.


@pytest.mark.parametrize("d", [1, 2, 3, 8, 33, 64, 267])
@pytest.mark.parametrize("dps", [15, 120])
def test_large_t_expansion_equals_1f1_wherever_it_is_said_to_hold(d, dps):
    """The finite sum of the large-t expansion times Gamma(d/2)/Gamma(d) e^t t^(d/2) equals mpmath's 1F1 (at 30
    more digits) at every t where ``_large_t_expansion_holds`` says so, from the smallest such t up; the fixed-point
    sum equals the same sum in mpf arithmetic at 30 more digits.  Power: for odd d, just below the smallest such t
    (at t = d for d >= 33, below which the sum is not used at all), the expansion misses 1F1 by more than the
    precision, so the criterion is not a formality."""
    from theory.conformities import _large_t_expansion_holds, _large_t_sum

    def mpf_sum(t):
        h, term, total = mp.mpf(d) / 2, mp.mpf(1), mp.mpf(1)
        for k in range(d):
            term *= (k - h) * (k + 1 - d) / ((k + 1) * t)
            total += term
        return total

    def expansion(t, total):
        h = mp.mpf(d) / 2
        return mp.exp(mp.loggamma(h) - mp.loggamma(d) + t + h * mp.log(t)) * total

    with _context.mp.workdps(dps):  # private functions: the theory's own context, as the public wrappers set it
        holds = _large_t_expansion_holds(d)
        lo = mp.mpf(d)
        while not holds(lo):
            lo *= mp.mpf("1.05")
        ts = [lo * f for f in (1, 1.3, 2, 10, 1000)]
        sums = [_large_t_sum(d, t, "test") for t in ts]
        below = lo / mp.mpf("1.05") if lo > d else None
    for t, got in zip(ts, sums):
        with mp.workdps(dps + 30):
            assert abs(got / mpf_sum(t) - 1) < mp.mpf(10) ** (-dps)
            ref = mp.hyp1f1(d, mp.mpf(d) / 2, t)
            assert abs(expansion(t, got) / ref - 1) < mp.mpf(10) ** (1 - dps), (d, t)
    if d % 2 and below is not None and below > 1:
        with mp.workdps(dps + 30):
            miss = abs(expansion(below / 2, mpf_sum(below / 2)) / mp.hyp1f1(d, mp.mpf(d) / 2, below / 2) - 1)
        assert miss > mp.mpf(10) ** (1 - dps)


def test_quadrature_route_at_large_odd_d_uses_no_1f1_series(monkeypatch):
    """Found by the accuracy suite's hypothesis example conformity_at_angle(267, 43.79, 0.134) at 120 digits
    (48 s): the large-t expansion waited for t >= d^2 = 71 289, so each of 6 822 quadrature nodes (t ~ 10^3) ran
    mpmath's 1F1 series of ~10^3 terms at 400 bits.  Its remainder is below 2^-2800 there: no node calls 1F1 now
    (2.5 s).  Counted, not timed; the value is the same to 120 digits (the accuracy suite's arb ball checks it)."""
    from theory import conformities

    calls = []
    real = conformities.hyp1f1_pos
    monkeypatch.setattr(conformities, "hyp1f1_pos", lambda *a, **k: calls.append(a) or real(*a, **k))
    with mp.workdps(120):
        got = theory.conformity_at_angle(267, "43.79", "0.134")
    assert calls == []
    with mp.workdps(30):
        ref = theory.conformity_at_angle(267, "43.79", "0.134")
        assert abs(got / ref - 1) < mp.mpf(10) ** -28
