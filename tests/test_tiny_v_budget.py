"""Tiny v within the budget (found by an exploration helper; the budgets count work since issue 38).

The pair excess :math:`\\rho_c - e^{v^2}` (theory.mse._prf_excess, _rff_excess) was formed with 4 log2(1/v)
extra bits: 1.33 million at v = 1e-100000, where the first constant (pi, inside R_1 =
conformities._sin_moment_first) alone took 7.2 s in one mpmath call that no time budget can interrupt.
Under theory.budget(work=TINY_WORK), mse_ratio('simplex', 'iid', 64, 1e-100000) raised ConvergenceError after 7.9 s
(10.3 s, then the value, without a budget block); the RFF ratio took 8.1 s, the hyperbolic one 8.0 s,
rff_asymptotic_ratio(64, 1e-100000) had exp at 1.3 million bits.  Now a tiny argument takes the leading
Taylor terms of the excess, whose remainder is bounded (theory.mse._series_excess): 0.15 s, every digit,
also for the hyperbolic SimRF pair term; a route still left with that many bits would raise
ConvergenceError at once (theory.mse.SMALL_ARG_MAX_BITS).  Checked structurally, not by the clock: the
precision at which R_1 is formed is recorded and must stay below 2^14 bits (the old code formed it at 1.33
million; with the recorder below it fails at once).

References, independent of the module: R_1 from mpmath's loggamma in the global context; the v^4
coefficient from the chi moments :math:`\\mathbb E r^n = 2^{n/2}\\Gamma(\\frac{d+n}2)/\\Gamma(\\frac d2)`
expanded by hand; the RFF limits in exact fractions; the orthogonality gap from its positive series
(another route); the conformity by its Taylor-in-cos route at 150 digits.
"""

from fractions import Fraction

import pytest
from mpmath import mp

import theory
from theory import _context, conformities, mse
from theory.errors import ConvergenceError

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
