"""Tests added against the surviving formula mutants of the OPRF (FAVOR++) closed forms of theory/oprf.py and of
theory.distributions.dimension_bits (group ``oprf_theory`` of tests/mutation_targets.py, docs/guide/mutation.rst).

Each class is the addition to one target's mutation command: ``TestOptimalA`` (``oprf_a``: optimal_a and the A=None
dispatch), ``TestOprfMse`` (``oprf_var``: the pieces of the OPRF kernel MSE and the certified ball),
``TestDimensionBits`` (``dim_bits``).  References are independent of the code under test: a Beta function (the
norm-coupled pair at d = 2 in closed form), asymptotic expansions at d ~ 1.2e4932 whose corrections are far below
the working precision, a central difference of the MSE in A, the theorem (the pair excess of iid, orthogonal and
simplex vanishes at v = 0 for every A).  Each test states the value the surviving mutant gives.
"""

import re
from fractions import Fraction

import mpmath
import pytest
from mpmath import mp

import theory
from paper_checks._compare import agrees, rel_diff
from theory import feature_kinds as fk


class TestOptimalA:
    """theory/oprf.py ``_parameters``: which couplings get the theorem's A* and which their own optimum."""

    def test_pnc_optimum_at_v_one_is_its_own(self):
        """pnc_orthogonal at v = 1 (d = m = 4, x = y = 1/2): the A that A=None uses is a stationary point of the
        MSE in A (a central difference of kernel_mse at explicit A, independent of the secant search on the
        closed-form derivative: slope 6.7e-10 against 0.29 at the theorem's A* = A*(v^2/d) = -0.0976), and
        kernel_mse with A=None is 2.8% below the MSE at the theorem's A*.  The mutant ``vv == 0 -> vv == 1`` of
        the dispatch gave pnc_orthogonal the theorem's A* at v = 1 exactly (slope 0.29, the MSE 2.8% higher)."""
        d, v = 4, mp.mpf(1)
        with mp.workdps(20):
            a_opt = fk.hook("oprf", "parameters")("pnc_orthogonal", d, v, d)["A"]
            a_theorem = theory.oprf.optimal_a(v * v / d)

            def mse(a=None):
                kw = {} if a is None else {"A": a}
                return theory.kernel_mse("pnc_orthogonal", d, v, kind="oprf", x_norm="0.5", y_norm="0.5", **kw)

            def slope(a, h=mp.mpf("1e-5")):  # error O(h^2) ~ 1e-10 of the scale
                return abs(mse(a + h) - mse(a - h)) / (2 * h)

            assert slope(a_opt) < mp.mpf(10) ** -4 * slope(a_theorem), (a_opt, a_theorem)
            assert agrees(mse(), mse(a_opt), 15)  # A=None is that A
            assert mse() < mse(a_theorem) * (1 - mp.mpf("0.01"))


class TestOprfMse:
    """theory/oprf.py: the v -> 0 values of the OPRF MSE at A != 0 (hook ``small_v``); the certified ball: its
    domain A < 1/8, A as a Fraction, a valid ball however wide."""

    @pytest.mark.parametrize("a", ["-0.1", "0.05", "-1e-3"])
    def test_ratio_at_v_zero_with_a_tilt(self, a):
        """At v = 0 and A != 0 the OPRF MSE does not vanish (the tilt's own variance), and kernel_mse_ratio returns
        the ratio of the values at v = 0 (``small_v``).

        Theorem couplings (simplex, orthogonal against iid, d = 5): the pair excess rho_c(0) - e^0 = 0 for every
        A (the theorem), so the ratio is 1 exactly.  pnc_orthogonal against orthogonal at d = m = 2 (one coupled
        pair, antithetic norms): for chi_2, F(r) = 1 - e^{-r^2/2}, so r_1^2 = -2 log(1 - u), r_2^2 = -2 log u
        (u uniform) and :math:`\\mathbb E e^{2A(r_1^2 + r_2^2)} = \\int_0^1 (u(1-u))^{-4A}du = B(1-4A, 1-4A)`:
        the ratio is 1 + ((1-4A)^2 B(1-4A, 1-4A) - 1)/((1-4A)^2/(1-8A) - 1) (reference at 60 digits; 0.1041 at
        A = -0.1), not theory.pnc's quadrature.  The mutant ``zero = mp.mpf(0) -> mp.mpf(1)`` of ``_small_v``
        returned the ratio at v = 1 instead (simplex 0.201 and pnc 1.044 at A = -0.1, checked below)."""
        with mp.workdps(60):
            aa = mp.mpf(a)
            b2 = (1 - 4 * aa) ** 2
            ref = 1 + (b2 * mp.beta(1 - 4 * aa, 1 - 4 * aa) - 1) / (b2 / (1 - 8 * aa) - 1)
        with mp.workdps(30):
            for coupling in ("simplex", "orthogonal"):
                assert theory.kernel_mse_ratio(coupling, "iid", 5, 0, kind="oprf", A=a) == 1, coupling
            got = theory.kernel_mse_ratio("pnc_orthogonal", "orthogonal", 2, 0, kind="oprf", A=a)
            assert agrees(got, ref, 28), (got, ref)
            # power: the values at v = 1 (what the mutant returned) differ
            assert not agrees(theory.kernel_mse_ratio("simplex", "iid", 5, 1, kind="oprf", A=a), 1, 2)
            assert not agrees(theory.kernel_mse_ratio("pnc_orthogonal", "orthogonal", 2, 1, kind="oprf", A=a),
                              ref, 2)

    @pytest.mark.skipif(not theory.certified.available(), reason="needs python-flint")
    @pytest.mark.parametrize("kernel", ["gaussian", "softmax"])
    def test_certified_mse_refuses_a_from_one_eighth(self, kernel):
        """certified_mse takes A < 1/8 only (E[b^2] has the factor (1-8A)^{-d/2}), as kernel_mse does: ValueError
        naming A for 1/8 (string, float, Fraction), 0.2 and 1; A = 0.124 gives a ball that contains kernel_mse.
        The mutant ``a < one / 8 -> a < one * 8`` accepted A up to 8 (and returned a ball for them)."""
        kw = dict(x_norm="0.5", y_norm="0.5", kernel=kernel)
        for a in ("0.125", 0.125, Fraction(1, 8), "0.2", 1):
            with pytest.raises(ValueError, match="A must be < 1/8"):
                theory.oprf.certified_mse("simplex", 4, "0.5", a, **kw)
        from flint import arb, ctx

        with mp.workdps(40):
            ball = theory.oprf.certified_mse("simplex", 4, "0.5", "0.124", **kw)
            val = theory.kernel_mse("simplex", 4, "0.5", kind="oprf", A="0.124", **kw)
        with ctx.workprec(200):
            assert ball.contains(arb(mp.nstr(val, 40))), (ball, val)

    @pytest.mark.skipif(not theory.certified.available(), reason="needs python-flint")
    def test_certified_mse_takes_a_as_a_fraction(self):
        """A given as a Fraction is the exact rational: the ball for Fraction(-1, 10) and Fraction(1, 16) contains
        kernel_mse at A = -1/10 and 1/16 (mpmath at 40 digits, the expm1 form) and is narrow.  The mutant
        ``arb(numerator) / denominator -> * denominator`` of ``_arb_real`` read -1/10 as -10 (a ball about another
        MSE)."""
        from flint import arb, ctx

        kw = dict(x_norm="0.3", y_norm="0.4")
        for a in (Fraction(-1, 10), Fraction(1, 16)):
            with mp.workdps(40):
                ball = theory.oprf.certified_mse("simplex", 6, "0.7", a, **kw)
                val = theory.kernel_mse("simplex", 6, "0.7", kind="oprf", A=mp.mpf(a.numerator) / a.denominator, **kw)
            with ctx.workprec(200):
                assert ball.contains(arb(mp.nstr(val, 40))), (a, ball, val)
            assert float(ball.rad()) < 1e-25 * float(abs(ball.mid()))

    @pytest.mark.skipif(not theory.certified.available(), reason="needs python-flint")
    def test_certified_ball_is_returned_however_wide(self):
        """certified_mse returns a valid ball at the precision asked for, however wide the pair term's ball is
        there (its documented errors are ImportError and MissingHookError only): simplex, d = 8, v = 100 at
        prec = 16 gives [+/- 1.2e2412], which contains kernel_mse's 9.8167e2411 (mpmath, 45 digits); at the
        default 128 bits the ball has 34 digits.  The mutants ``min_digits 0 -> 1`` (of the pair term's
        certified.conformity) asked that ball for a correct digit and raised CertificationError (none at 16 ... 256
        bits)."""
        from flint import arb, ctx

        kw = dict(x_norm="50", y_norm="50")
        with mp.workdps(45):
            val = theory.kernel_mse("simplex", 8, "100", kind="oprf", A="-0.1", **kw)
        wide = theory.oprf.certified_mse("simplex", 8, "100", "-0.1", prec=16, **kw)
        narrow = theory.oprf.certified_mse("simplex", 8, "100", "-0.1", **kw)
        with ctx.workprec(200):
            point = arb(mp.nstr(val, 45))
            assert wide.contains(point) and narrow.contains(point), (wide, narrow, val)
        assert narrow.rel_accuracy_bits() >= 100 and wide.rel_accuracy_bits() <= 0


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
