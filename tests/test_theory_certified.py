"""theory.certified: arb enclosures contain the mpmath values; certificates decide
true statements and never certify false ones."""

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from mpmath import mp

import theory

flint = pytest.importorskip("flint")
from flint import arb  # noqa: E402

from _support import LONG, raises_budget, rel_err, small_budget  # noqa: E402
from theory import certified  # noqa: E402
from theory import certified as C  # noqa: E402
from theory.validation import ArgumentTypeError  # noqa: E402


def inside(ball, ref):
    """|mid - ref| <= rad, read at high precision."""
    old = flint.ctx.prec
    flint.ctx.prec = 400
    try:
        with mp.workdps(110):
            mid = mp.mpf(ball.mid().str(100, radius=False))
            rad = mp.mpf(ball.rad().str(20, radius=False))
            return abs(mid - ref) <= rad * (1 + mp.mpf(10) ** -10), rad
    finally:
        flint.ctx.prec = old


@pytest.mark.parametrize("coupling", ["iid", "orthogonal", "simplex"])
@pytest.mark.parametrize("d,v", [(2, "0.1"), (3, "1"), (64, "2.5"), (1024, "5")])
def test_prf_enclosures(coupling, d, v):
    with mp.workdps(60):
        ref = theory.conformity(coupling, d, v)
    ok, rad = inside(C.conformity(coupling, d, v, prec=128), ref)
    assert ok and rad < abs(ref) * mp.mpf(10) ** -30


@pytest.mark.parametrize("coupling", ["orthogonal", "simplex"])
@pytest.mark.parametrize("d,z", [(3, "1"), (8, "2.5"), (64, "5")])
def test_rff_enclosures(coupling, d, z):
    with mp.workdps(100):  # the reference must be more precise than the 256-bit ball
        ref = theory.rff_conformity(coupling, d, z)
    ok, rad = inside(C.rff_conformity(coupling, d, z, prec=256), ref)
    assert ok and rad < abs(ref) * mp.mpf(10) ** -20


def test_enclosure_excludes_a_wrong_value():
    """Power: the simplex ball does not contain the ORF value, nor the simplex value at d + 1."""
    with mp.workdps(60):
        ball = C.conformity("simplex", 16, 1)
        assert not inside(ball, theory.conformity("orthogonal", 16, 1))[0]
        assert not inside(ball, theory.conformity("simplex", 17, 1))[0]


def test_gap_brackets():
    with mp.workdps(60):
        ok, _ = inside(C.orthogonality_gap_bracket(16, "1.5"), mp.exp(mp.mpf("2.25")) - theory.conformity("orthogonal", 16, "1.5"))
        assert ok
        assert C.orthogonality_gap_bracket(16, "1.5") > 0
        zc = theory.z_crit(8)
        assert C.rff_gap_bracket(8, str(mp.nstr(zc * mp.mpf("0.9"), 30))) > 0
        assert C.rff_gap_bracket(8, str(mp.nstr(zc * mp.mpf("1.05"), 30))) < 0


def test_certify_ordering_grid():
    certs = C.certify_ordering([2, 3, 4, 6, 16, 64, 256, 1024], ["0.1", "1", "2.5", "5"])
    assert len(certs) == 32 and all(c.certified is True for c in certs)
    # v = 0: the conformities are all 1; nothing is certified (no false certificate)
    assert C.certify_ordering([8], ["0"], max_prec=256)[0].certified is None


def test_certify_rff_signs():
    certs = {(c.d, c.x): c.certified for c in C.certify_rff_sign([3, 64], ["0.25", "3"])}
    assert certs[(3, "0.25")] is False and certs[(64, "0.25")] is False  # SimRF RFF MSE proved larger
    assert certs[(3, "3")] is True  # and proved smaller in the window around z = 3 at d = 3


def test_bad_input():
    with pytest.raises(ValueError, match="coupling must be one of"):
        C.conformity("simplex_plus", 4, 1)
    with pytest.raises(ValueError, match="v must be >= 0"):
        C.conformity("simplex", 4, "-1")


@pytest.mark.parametrize("coupling,v", [("simplex", "1e300"), ("simplex", "1e160"), ("orthogonal", "1e300")])
def test_huge_v_is_a_convergence_error_not_an_overflow(coupling, v):
    """Found by ``benchmarks/bench_theory.py --domain``: v = 1e300 made the Taylor-domain check
    convert |cos theta| v^2/2 = 7.9e597 to a float and crash with OverflowError."""
    from theory.errors import ConvergenceError

    if coupling == "orthogonal":  # cos theta = 0: no Taylor series; a finite ball or the loud failure
        try:
            assert C.conformity(coupling, 64, v, prec=128, min_digits=0).is_finite()
        except ConvergenceError:
            pass
        return
    with pytest.raises(ConvergenceError, match=r"\|cos theta\| x = 7\.9365e\+(597|317)"):
        C.conformity(coupling, 64, v, prec=128)


def test_huge_integers_in_certified_messages_and_results():
    """A 4301-digit integer (beyond Python's int -> str limit) as min_digits or d is named by its size, not
    printed (issue 38).  Before: math.isfinite(min_digits) raised OverflowError; the labels and the
    Certificate's repr raised 'Exceeds the limit (4300 digits) for integer string conversion'."""
    big = 2**14286
    with pytest.raises(theory.CertificationError, match=r"fewer than 2\^14286 \(an integer of 14287 bits\) correct"):
        C.conformity("orthogonal", 8, "0.5", min_digits=big)
    (cert,) = C.certify_ordering([big], ["0.5"], max_prec=256)
    assert cert.d == big and repr(cert).startswith("Certificate(d=2^14286 (an integer of 14287 bits), x='0.5', ")
    (small,) = C.certify_ordering([8], ["0.5"])
    assert repr(small).startswith("Certificate(d=8, x='0.5', certified=True, prec=128, margins=(")


# ---------------------------------------------------------------------------
# Input handling, round 2: exact inputs of the certified mode, fractions and numpy's long floats,
# huge decimal strings, masked arrays, strings where sequences are expected, SimRFs+ arguments.
#
# References are independent of the code under test: mpmath at 400+ bits through its own exp / 1F1 (the
# certified balls are arb's), exact rationals from ``as_integer_ratio``, and Python's Decimal/Fraction.


def _arb_of(x, bits=600):
    """An mpmath mpf as an arb point (exact, via its decimal expansion at ``bits`` bits)."""
    with mpmath.mp.workprec(bits):
        return arb(mpmath.nstr(x, int(bits * 0.302) + 5))


def _contains(ball, ref, bits=600):
    """True when ``ball`` overlaps the 600-bit reference (whose own error, 2^-600, is far below the radius)."""
    old = flint.ctx.prec
    flint.ctx.prec = bits
    try:
        return ball.overlaps(_arb_of(ref, bits))
    finally:
        flint.ctx.prec = old


def test_high_precision_mpf_is_enclosed_exactly():
    """Finding A: with a reference at 600 bits the 300-bit ball of e^{v^2}, v = mpf(1)/3 at 60 digits, contains
    it.  The reported miss (-3.48e-60) was the reference's own rounding: nstr(e^{v^2}, 60) is off by up to
    5e-60; the second assert shows that this coarse reference is indeed outside the ball, the fine one inside."""
    with mpmath.mp.workdps(60):
        v = mpmath.mpf(1) / 3
        coarse = mpmath.mpf(mpmath.nstr(mpmath.exp(v * v), 60))
    with mpmath.mp.workprec(700):
        ref = mpmath.exp(v * v)  # v's exact binary value
        orf = mpmath.hyp1f1(2, 1, v * v / 2)
    ball = certified.conformity("iid", 2, v, prec=300, min_digits=0)
    assert _contains(ball, ref)
    assert not _contains(ball, coarse)  # the finding's reference: 60 digits are too few for a 300-bit ball
    assert _contains(certified.conformity("orthogonal", 2, v, prec=300, min_digits=0), orf)


@pytest.mark.skipif(not LONG, reason="numpy's longdouble is a double here")
def test_longdouble_input_is_enclosed_exactly():
    """numpy's 64-bit-mantissa longdouble: before, _to_arb used the mpf of float(x) (rounded to 53 bits), so
    the ball held e^{float(x)^2}, 1.4e-17 away from e^{x^2} (checked: the second assert held then)."""
    x = np.longdouble(1) / 3
    p, q = x.as_integer_ratio()
    with mpmath.mp.workprec(700):
        exact = mpmath.exp((mpmath.mpf(p) / q) ** 2)
        rounded = mpmath.exp(mpmath.mpf(float(x)) ** 2)
    ball = certified.conformity("iid", 2, x, prec=200, min_digits=0)
    assert _contains(ball, exact)
    assert not _contains(ball, rounded)
    ball = certified.rff_conformity("iid", 2, x, prec=200, min_digits=0)
    with mpmath.mp.workprec(700):
        assert _contains(ball, mpmath.exp(-(mpmath.mpf(p) / q) ** 2))


def test_cos_theta_domain_is_checked_on_the_exact_value():
    """'1.(40 zeros)1' rounds to 1 at the working precision; before, it was accepted as cos_theta (and a
    Fraction just above 1 too).  Exactly 1, -1 and 0.(40 nines) stay accepted."""
    above = "1." + "0" * 40 + "1"
    for bad in (above, "-" + above, Fraction(10 ** 40 + 1, 10 ** 40), Fraction(-(10 ** 40 + 1), 10 ** 40)):
        with pytest.raises(ValueError, match=r"cos_theta must lie in \[-1, 1\]"):
            certified.conformity_at_angle(2, 1, bad, min_digits=0)
    for good in ("1", "-1", "0." + "9" * 40, Fraction(1, 3), "1/3"):
        assert certified.conformity_at_angle(2, "0.5", good).is_finite()


def test_tiny_negative_fraction_is_not_a_nonnegative_v():
    """Fraction(-1, 10^400) became float -0.0 (underflow) and passed as v >= 0 (the string form was refused)."""
    for bad in (Fraction(-1, 10 ** 400), "-1e-400"):
        with pytest.raises(ValueError, match="v must be >= 0"):
            certified.conformity("iid", 2, bad, min_digits=0)
        with pytest.raises(ValueError, match="v must be >= 0"):
            theory.conformity("iid", 2, bad)


def test_strings_arb_cannot_read_name_the_argument():
    with pytest.raises(ValueError, match="v must be a decimal string that arb reads exactly"):
        certified.conformity("iid", 2, "1_0")


def test_certified_grids_and_precisions_are_checked():
    """vs = '12' iterated its characters (v = 1 and v = 2); a bad max_prec failed inside a comparison."""
    with pytest.raises(ArgumentTypeError, match="vs must be a sequence"):
        certified.certify_ordering([4], "12")
    with pytest.raises(ArgumentTypeError, match="ds must be a sequence"):
        certified.certify_ordering(4, [1])
    with pytest.raises(ValueError, match="zs must hold at least one value"):
        certified.certify_rff_sign([4], [])
    with pytest.raises(ArgumentTypeError, match="zs must not be a numpy masked array"):
        certified.certify_rff_sign([4], np.ma.masked_array([1.0]))
    with pytest.raises(TypeError, match="max_prec must be an integer >= 128"):
        certified.certify_ordering([4], [1], max_prec="x")
    with pytest.raises(ValueError, match="min_digits must be a finite real number >= 0"):
        certified.conformity("iid", 2, 1, min_digits=float("nan"))
    assert certified.conformity("iid", 2, 1, min_digits=np.int64(3)).is_finite()  # a numpy integer is a real


# ---------------------------------------------------------------------------
# Issue 22, item 1: the budget reaches every loop of theory whose trip count an argument sets.
#
# Each call below provably needs far more work than its budget allows (the trip counts are in the
# comments: 10^7 to 10^18 iterations, against a work budget of 20 000 units, about 0.2 s; issue 38 made
# the budget a count of work instead of seconds), so the expiry is certain, the same on every machine,
# and no clock is read.  Each must raise theory.errors.ConvergenceError (an mpmath.NoConvergence) naming
# the argument that makes the loop long.  Before the fix the first of them ran forever
# (``for j in range(d // 2)`` without a check).


def test_certify_ordering_over_a_long_grid():
    pytest.importorskip("flint")
    from theory import certified

    # 10^6 grid points, each three arb enclosures; the message names the grid point it reached
    named = (r"(certify_ordering at d = \d+|certified.conformity\('\w+', \d+, '0.5'\)"
             r"|certified Taylor series at d = \d+|certified 1F1 series at a = \d+)")
    with small_budget(), raises_budget(named):
        certified.certify_ordering(range(2, 10**6), ["0.5"])


# ---------------------------------------------------------------------------
# Regression tests for the findings of issue 11, one block per item, each against an
# independent computation (mpmath's own series at high precision, arb balls from
# python-flint, a dense scan, or a closed form).


def test_certified_ball_has_the_digits_asked_for():
    """conformity('simplex', 17, '40') gave [+- 5.4e348]: valid, empty."""
    ball = C.conformity("simplex", 17, "40")
    assert ball.rad() < abs(ball.mid()) / 10
    tight = C.conformity("simplex", 17, "40", min_digits=30)
    with mp.workdps(40):
        ref = theory.conformity("simplex", 17, "40")
        assert rel_err(ref, mp.mpf(tight.mid().str(40, radius=False))) < mp.mpf(10) ** -30
    assert C.conformity("simplex", 17, "40", min_digits=0, max_prec=128).rad() > flint.arb("1e348")  # valid, empty
