"""Regression tests for the findings of issue 11, one block per item, each against an
independent computation (mpmath's own series at high precision, arb balls from
python-flint, a dense scan, or a closed form)."""

import sys

import mpmath
import numpy as np
import pytest
from mpmath import mp

import theory
from theory import _context

flint = pytest.importorskip("flint")
from theory import certified as C  # noqa: E402


def rel(a, b):
    return abs(a - b) / abs(b)


def mp_rff_orf(d, z, dps):
    """1F1(d; d/2; -z^2/2) by mpmath's own power series with a generous precision cap."""
    with mp.workdps(dps):
        z = mp.mpf(z)
        return mp.hyp1f1(d, mp.mpf(d) / 2, -z * z / 2, maxprec=200_000)


# ---------------------------------------------------------------------------
# item 1: silently wrong RFF numbers at large d / z, and z_crit


@pytest.mark.parametrize("dps", [15, 30, 60])
def test_rff_conformity_is_not_silently_zero(dps):
    """Was exactly 0.0 at 15 digits; the value is -8.196e-205."""
    with mp.workdps(dps):
        got = theory.rff_conformity("orthogonal", 1024, 20)
    ref = mp_rff_orf(1024, 20, dps + 30)
    assert got != 0 and rel(got, ref) < mp.mpf(10) ** (1 - dps)
    assert mp.nstr(ref, 5) == "-8.1964e-205"


@pytest.mark.parametrize("d,z", [(512, "18.43"), (512, "25"), (512, "40"), (1024, "31"), (4096, "55"), (7, "30")])
def test_rff_gap_sign_and_digits_against_arb(d, z):
    """d = 512, z = 18.43 gave +3.05e-148 (true -1.36e-148); larger z let mpmath's
    'hypsum() failed' ValueError escape.  The arb ball fixes the sign and the digits."""
    with mp.workdps(30):
        gap = theory.rff_orthogonality_gap(d, z)
    ball = C.rff_gap_bracket(d, z, prec=256, min_digits=35)
    with mp.workdps(60):
        mid = mp.mpf(ball.mid().str(50, radius=False)) * (d - 1) / d  # gap = (m - 1)/m * bracket
        assert rel(gap, mid) < mp.mpf(10) ** -29
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
    assert rel(zc, ref) < mp.mpf(10) ** (1 - dps)
    assert zc._mpf_[3] > mp.prec or dps == 15  # the mantissa holds the caller's bits


def test_z_crit_ratio_range_for_the_readme():
    """The README's 'z_crit ~ 0.86 sqrt(d)' is loose: the ratio runs from 1.91 (d = 3) to 0.81."""
    r3 = theory.z_crit(3) / mp.sqrt(3)
    r512 = theory.z_crit(512) / mp.sqrt(512)
    assert mp.nstr(r3, 3) == "1.91" and mp.nstr(r512, 2) == "0.81"


# ---------------------------------------------------------------------------
# item 2: hangs


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
    assert rel(got, ref) < mp.mpf(10) ** -18


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


def test_huge_v_ratio_tends_to_one():
    with mp.workdps(30):
        r = theory.mse_ratio("simplex", "iid", 8, 1e300)
    assert r == 1  # 1 - O(e^{-v^2}) rounds to 1 at any precision


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
    assert rel(got, ref) < mp.mpf(10) ** -18


# ---------------------------------------------------------------------------
# item 3: tiny arguments


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
        assert rel(mse, c2 * v * v / d) < mp.mpf(10) ** -28  # MSE = e^{-v^2} C v^2 / m + O(v^4)
        rff = theory.rff_mse("orthogonal", d, tiny)
        lim = (mp.mpf(1) / 2 - (d - 1) / (2 * mp.mpf(d + 2))) * v ** 4 / d  # (1/2 + (P/m) b) z^4 / m
        assert rel(rff, lim) < mp.mpf(10) ** -28
        gap = theory.orthogonality_gap(d, tiny, x_norm=v / 2, y_norm=v / 2)
        assert rel(gap, (d - 1) / mp.mpf(d) * v ** 4 / (2 * (d + 2))) < mp.mpf(10) ** -28


# ---------------------------------------------------------------------------
# item 4: O(m/d) for O(1) arithmetic


def test_block_sizes_and_huge_m_are_constant_memory():
    sizes = theory.block_sizes(1, 10 ** 9)
    assert len(sizes) == 10 ** 9 and sizes[-1] == 1 and sys.getsizeof(sizes) < 200
    assert theory.block_sizes(3, 10) == [3, 3, 3, 1] and theory.block_sizes(3, 9) != [3, 3, 3, 1]
    with mp.workdps(30):
        v = mp.mpf("0.1")
        got = theory.prf_mse("iid", 1, v, m=10 ** 9, x_norm=v / 2, y_norm=v / 2)
        assert rel(got, mp.exp(-v * v) * mp.exp(v * v) * mp.expm1(v * v) / 10 ** 9) < mp.mpf(10) ** -28
        # a block structure with pairs: P = q d (d - 1) + r (r - 1) in closed form
        r = theory.mse_ratio("orthogonal", "iid", 7, "0.5", m=10 ** 12 + 3)
        q, rem = divmod(10 ** 12 + 3, 7)
        p_over_m = mp.mpf(q * 42 + rem * (rem - 1)) / (10 ** 12 + 3)
        excess = theory.conformity("orthogonal", 7, "0.5") - mp.exp(mp.mpf("0.25"))
        ref = 1 + p_over_m * excess / (mp.exp(mp.mpf("0.25")) * mp.expm1(mp.mpf("0.25")))
        assert rel(r, ref) < mp.mpf(10) ** -27


# ---------------------------------------------------------------------------
# item 6: one failure family


def test_one_failure_family(monkeypatch):
    with pytest.raises(theory.ConvergenceError):
        C.conformity("simplex", 17, "40", max_prec=128)
    with pytest.raises(theory.CertificationError):
        C.conformity("simplex", 17, "40", max_prec=128)
    assert issubclass(theory.CertificationError, mpmath.libmp.NoConvergence)

    def failing(*args, **kwargs):
        raise ValueError("hypsum() failed to converge to the requested 80 bits of accuracy")

    monkeypatch.setattr(_context.mp, "hyp1f1", failing)
    with pytest.raises(theory.ConvergenceError, match="mpmath could not reach"):
        theory.conformity_orthogonal(9, "0.5")  # odd d: mpmath's hyp1f1 is called


# ---------------------------------------------------------------------------
# item 7: validation


@pytest.mark.parametrize("call,kind,match", [
    (lambda: theory.rff_mse_ratio("simplex", "orthogonal", 1, "0.5"), ValueError, "d must be an integer >= 2"),
    (lambda: theory.ensemble_conformity("x", 1, 4, 5), ValueError, "rho_block must be a real number"),
    (lambda: theory.ensemble_conformity(2, 1, 0, 5), ValueError, "d must be an integer >= 1"),
    (lambda: theory.prf_mse_from_conformity(-1, "0.5", m=4, x_norm="0.3", y_norm="0.3"), ValueError,
     "rho must lie in"),
    (lambda: theory.rff_mse_from_conformity(5, "0.5", m=4), ValueError, "rho must lie in"),
    (lambda: theory.simplex_apply("123"), TypeError, "x must be a sequence or 1-D array"),
    (lambda: theory.simplex_vectors(10 ** 6), ValueError, "use simplex_apply"),
    (lambda: theory.pdf_wij_float("1", 4, 0), TypeError, "w must be a real number"),
    (lambda: theory.conformity("simplex", 8, [1, [2]]), ValueError, "v must be a real number"),
])
def test_bad_input_named(call, kind, match):
    with pytest.raises(kind, match=match):
        call()


def test_mse_from_conformity_range_is_the_variance_bound():
    """The refused rho are exactly those with a negative MSE (power of the check)."""
    with mp.workdps(30):
        v, m = mp.mpf("0.5"), 4
        lo = mp.exp(v * v) - mp.exp(v * v) * mp.expm1(v * v) / (m - 1)
        assert theory.prf_mse_from_conformity(lo, v, m=m, x_norm=v / 2, y_norm=v / 2) < mp.mpf(10) ** -25
        with pytest.raises(ValueError):
            theory.prf_mse_from_conformity(lo * (1 - mp.mpf(10) ** -6), v, m=m, x_norm=v / 2, y_norm=v / 2)


# ---------------------------------------------------------------------------
# item 8: certified balls that say nothing


def test_certified_ball_has_the_digits_asked_for():
    """conformity('simplex', 17, '40') gave [+- 5.4e348]: valid, empty."""
    ball = C.conformity("simplex", 17, "40")
    assert ball.rad() < abs(ball.mid()) / 10
    tight = C.conformity("simplex", 17, "40", min_digits=30)
    with mp.workdps(40):
        ref = theory.conformity("simplex", 17, "40")
        assert rel(ref, mp.mpf(tight.mid().str(40, radius=False))) < mp.mpf(10) ** -30
    assert C.conformity("simplex", 17, "40", min_digits=0, max_prec=128).rad() > flint.arb("1e348")  # valid, empty


# ---------------------------------------------------------------------------
# item 9: pdf_wij_float pinned to pdf_wij


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

        def m(t):
            return 1 + mp.sqrt(mp.pi * t) * mp.exp(t) * mp.erf(mp.sqrt(t)) if t > 0 else mp.mpf(1)

        ref = 2 / mp.pi * mp.quad(lambda phi: m(x * (1 + cc * mp.sin(phi))), [0, mp.pi / 4, mp.pi / 2])
        assert abs(got / ref - 1) < mp.mpf(10) ** (1 - dps)


def test_check_int_accepts_integers_and_forms_its_message_only_to_refuse(monkeypatch):
    """check_int: Python and numpy integers pass as Python ints; bool, numpy bool and floats are refused
    (TypeError naming the argument and the bound), values outside the bounds too (ValueError with the context);
    the message is formed only when refusing (the kernels' launch sizes call it dozens of times per training
    step): with its former stubbed to fail, valid calls still pass and a refusal reaches it."""
    from theory import validation as V

    assert V.check_int(3, "d", 1) == 3 and type(V.check_int(np.int64(5), "d", 1)) is int
    for bad in (True, np.bool_(True), 2.0):
        with pytest.raises(TypeError, match=r"d must be an integer >= 1, got"):
            V.check_int(bad, "d", 1)
    with pytest.raises(ValueError, match=r"^m must be an integer >= 1 and <= 4 for x, got 5 \(int\)$"):
        V.check_int(5, "m", 1, "for x", maximum=4)

    def stub(*args):
        raise AssertionError("message formed")

    monkeypatch.setattr(V, "_int_what", stub)
    assert V.check_int(7, "d", 1, maximum=9) == 7 and V.check_int(np.int32(2), "d") == 2
    with pytest.raises(AssertionError, match="message formed"):
        V.check_int(0, "d", 1)


def test_show_int_names_integers_beyond_the_str_limit():
    """theory.validation.show_int: str(n) up to 256 bits, beyond that the leading digits (or the power of two)
    and the bit length, never str(n), which Python refuses beyond 4300 digits (issue 38: d = 2^14286 in a
    message raised 'Exceeds the limit (4300 digits)').  The leading digits are checked against mpmath's own
    decimal conversion; describe() and show() of containers holding such integers do not raise either."""
    from fractions import Fraction

    from theory import validation as V

    assert V.show_int(2**256 - 1) == str(2**256 - 1) and V.show_int(np.int64(-7)) == "-7"
    assert V.show_int(2**256) == "2^256 (an integer of 257 bits)"
    assert V.show_int(-(2**14286)) == "-2^14286 (an integer of 14287 bits)"
    for n in (2**256 + 1, 3 * 2**20000, 10**5000 + 1, 7**9000, -(5**7000)):
        lead = mp.nstr(mp.mpf(abs(n)), 6, min_fixed=1, max_fixed=0, strip_zeros=False)  # e.g. '1.19408e+6021'
        sign = "-" if n < 0 else ""
        assert V.show_int(n) == f"about {sign}{lead} (an integer of {abs(n).bit_length()} bits)"
    assert V.show_int(10**300 - 1) == "about 1.00000e+300 (an integer of 997 bits)"  # (9.99999... rounds up)
    assert V.show_int(12345, 3) == "1.23e+04" and V.show_int(2**14286, 3).startswith("2^14286")
    assert V.show_int("8") == "'8'"  # (a label formed before its argument is checked shows it as it came)
    big = 2**14286
    assert V.describe(big) == "2^14286 (an integer of 14287 bits) (int)"
    assert V.describe(Fraction(big, 3)) == "2^14286 (an integer of 14287 bits) / 3 (Fraction)"
    assert V.describe([big]) == "<a list too large to print> (list)"
    with pytest.raises(ValueError, match="Exceeds the limit"):
        str(big)  # (the limit that show_int avoids: without it every message above raised this)
