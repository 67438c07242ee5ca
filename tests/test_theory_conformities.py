"""Conformities (Lemma 4.1, Lemma 4.2, Thm 4.3): every closed form against an
independent route, to >= 25 significant digits at 30 dps, on the grid of the issue."""

import itertools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from mpmath import mp

import theory
from paper_checks._compare import agrees

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
