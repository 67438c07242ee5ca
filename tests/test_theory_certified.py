"""theory.certified: arb enclosures contain the mpmath values; certificates decide
true statements and never certify false ones."""

import pytest
from mpmath import mp

import theory

flint = pytest.importorskip("flint")
from theory import certified as C  # noqa: E402


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
