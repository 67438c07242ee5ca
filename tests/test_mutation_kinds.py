"""Tests added against the surviving formula mutants of the feature-kind code (issue 22 item 5,
docs/guide/mutation.rst).

Each class is the addition to one target's mutation command (tests/mutation_targets.py): ``TestRegistry``
(theory/feature_kinds.py), ``TestHyperbolicMap`` (montecarlo/hyperbolic.py), ``TestOprfMap``
(montecarlo/oprf.py), ``TestHyperbolicTheory`` (theory/hyperbolic.py), ``TestOprfTheory`` (theory/oprf.py),
``TestKernelMse`` (the kind hooks of theory/mse.py).  Each test compares two independent computations (a formula
written out here, brute force over pairs, numerical differentiation, another route to the same limit, a
certified ball) and shows its power on a wrong alternative where one exists.
"""

import math

import numpy as np
import pytest
from mpmath import mp

import montecarlo as mc
import theory
from paper_checks._compare import agrees
from theory import feature_kinds as fk


class TestRegistry:
    """theory/feature_kinds.py: each record's width and kernels are what its map produces and estimates."""

    @pytest.mark.parametrize("kind", fk.names())
    def test_record_width_is_the_map_width(self, kind):
        """width * m features per batch row, for every kind (the map's output shape, not the record, decides)."""
        rec = fk.get(kind)
        X = np.random.default_rng(0).standard_normal((3, 4)) * 0.3
        W = mc.sample_weights("orthogonal", 4, 5, rng=1)
        params = {"A": {"A": -0.1}, "a": {"a": np.full(4, -0.1)}}.get((rec.parameters or ("",))[0], {})
        assert mc.random_features(X, W, kind=kind, kernel=rec.kernels[0], **params).shape == (3, rec.width * 5)


class TestHyperbolicMap:
    """montecarlo/hyperbolic.py: the statistic log cosh without overflow."""

    def test_log_cosh_statistic_against_mpmath(self):
        """The hook's log cosh(p) against mpmath at p = 0, 1e-8, 0.3, -2, 30, -800 (where cosh overflows float64),
        to 4 ulps of max(1, |log cosh p|), so e^stat = cosh(p) to that relative accuracy (what the estimator uses);
        power: log(e^p + e^-p) without the 1/2 is rejected."""
        stat = fk.hook("hyperbolic", "statistic")
        p = np.array([0.0, 1e-8, 0.3, -2.0, 30.0, -800.0])
        got = stat(p.copy(), np)
        with mp.workdps(30):
            ref = [mp.log(mp.cosh(mp.mpf(t))) for t in p]
        assert np.all(np.isfinite(got))
        for g, r in zip(got, ref):  # a few ulps of max(1, |log cosh|): e^stat / cosh - 1 within 1e-15 |log cosh|
            assert abs(g - float(r)) <= 4e-16 * max(1.0, abs(float(r))), (g, r)
        assert abs(float(got[2]) - float(ref[2] + mp.log(2))) > 0.1


class TestOprfMap:
    """montecarlo/oprf.py: FAVOR++'s data A against the pairs it averages over; A* of a number or an array."""

    @pytest.mark.parametrize("n_x,n_y", [(1, 3), (4, 2), (3, None)])
    def test_data_optimal_a_against_the_pairs(self, n_x, n_y):
        """A*(s) with s the mean of |x_i + y_j|^2 / d over every pair (brute force here, one row allowed), through
        theory.oprf.optimal_a at 30 digits: 1e-12 relative; power: s from |x_i|^2 + |y_j|^2 alone differs."""
        rng = np.random.default_rng(n_x)
        X = rng.standard_normal((n_x, 5)) * 0.4 + 0.2
        Y = None if n_y is None else rng.standard_normal((n_y, 5)) * 0.3 - 0.1
        Yr = X if Y is None else Y
        sums = X[:, None, :] + Yr[None, :, :]
        s = np.mean(np.sum(sums * sums, axis=-1)) / 5
        with mp.workdps(30):
            ref = float(theory.oprf.optimal_a(s))
            wrong = float(theory.oprf.optimal_a(np.mean(np.sum(X * X, 1)) / 5 + np.mean(np.sum(Yr * Yr, 1)) / 5))
        got = mc.oprf.data_optimal_a(X, Y)
        assert math.isclose(got, ref, rel_tol=1e-12)
        assert not math.isclose(got, wrong, rel_tol=1e-3)
        assert math.isclose(mc.oprf.pair_statistic(X, Y), s, rel_tol=1e-13)  # the statistic itself


    def test_data_optimal_a_refuses_empty_batches_by_name(self):
        """No rows in X or Y: a ValueError that says so (not a NaN mean reported as a bad s)."""
        empty, full = np.zeros((0, 3)), np.ones((2, 3))
        for X, Y in ((empty, None), (full, empty), (empty, full)):
            with pytest.raises(ValueError, match="X and Y must hold at least one row each"):
                mc.oprf.data_optimal_a(X, Y)

    def test_log_feature_map_takes_a_as_a_number_or_an_array(self):
        """The OPRF log-feature hook with A as a Python float, a 1-element array and one A per row (an (N, 1)
        array) gives the formula written out: sqrt(1-4A) w.x + A|w|^2 - |x|^2 - log(m)/2 + (d/4) log(1-4A)."""
        rng = np.random.default_rng(4)
        X, W = rng.standard_normal((3, 5)) * 0.3, mc.sample_weights("orthogonal", 5, 6, rng=5)
        w_sq = np.sum(W * W, axis=1)
        a_rows = np.array([[-0.2], [-0.05], [0.1]])

        def formula(a):
            return (np.sqrt(1 - 4 * a) * (X @ W.T) + a * w_sq[None, :] - np.sum(X * X, axis=1)[:, None]
                    - 0.5 * math.log(6) + 1.25 * np.log1p(-4 * a))

        hook = fk.hook("oprf", "log_features")
        for a in (-0.2, np.array([-0.2]), a_rows):
            got = hook(X @ W.T, np.sum(X * X, axis=1)[:, None], 6, 1.0, np, w_sq=w_sq, d=5, A=a)
            assert np.allclose(got, formula(a), rtol=1e-13, atol=1e-13)
        assert not np.allclose(formula(a_rows), formula(-0.2))  # power: the rows' A matter
        # a number is checked, also a numpy scalar (0-d: not one A per row); an array of A is not (no read-back)
        for bad in (0.2, np.float64(0.2), np.array(0.2)):
            with pytest.raises(ValueError, match="A"):
                hook(X @ W.T, np.sum(X * X, axis=1)[:, None], 6, 1.0, np, w_sq=w_sq, d=5, A=bad)

    def test_optimal_a_of_a_number_and_of_an_array(self):
        """montecarlo.oprf.optimal_a takes s as a float or an array (its docstring): a number (Python or numpy
        scalar, or a 0-d array) gives a Python float, an array an array of its shape, each entry theory.oprf's
        optimal_a (30 digits) to 1e-14 relative, s = 0 included (A* = 0)."""
        s = np.array([0.0, 1e-12, 0.3, 5.0])
        with mp.workdps(30):
            ref = [float(theory.oprf.optimal_a(mp.mpf(float(t)))) for t in s]
        for one in (0.3, np.float64(0.3), np.array(0.3)):
            got = mc.oprf.optimal_a(one)
            assert type(got) is float and math.isclose(got, ref[2], rel_tol=1e-14)
        for arr, want in ((s, ref), (s.reshape(2, 2), ref), (s[2:3], ref[2:3])):
            got = mc.oprf.optimal_a(arr)
            assert isinstance(got, np.ndarray) and got.shape == arr.shape
            assert np.allclose(got.ravel(), want, rtol=1e-14, atol=0)


class TestHyperbolicTheory:
    """theory/hyperbolic.py: the certified ordering doubles its precision and stops at the first decision."""

    @pytest.mark.skipif(not theory.certified.available(), reason="needs python-flint")
    def test_certified_ordering_doubles_the_precision(self):
        """Documented: 'The precision doubles from prec to max_prec while the balls overlap'.  At d = 8,
        v = 0.01, starting at 32 bits the balls overlap (undecided when capped at 32) and one doubling decides
        (certified at 64 bits, the first power-of-two multiple); at v = 1 the first precision decides, and at
        d = 2, v = 20 a wide (valid) enclosure decides at once."""
        from theory.hyperbolic import hyperbolic_ordering

        (capped,) = hyperbolic_ordering([8], ["0.01"], prec=32, max_prec=32)
        assert capped.certified is None and capped.prec == 32
        (cert,) = hyperbolic_ordering([8], ["0.01"], prec=32)
        assert cert.certified is True and cert.prec == 64
        (easy,) = hyperbolic_ordering([8], ["1"], prec=32)
        assert easy.certified is True and easy.prec == 32
        # a valid but wide enclosure decides too: at d = 2, v = 20 the simplex pair term's ball has fewer than one
        # correct digit at 16 bits (and at 256), yet it lies above the orthogonal one
        (wide,) = hyperbolic_ordering([2], ["20"], prec=16)
        assert wide.certified is True and wide.prec == 16


class TestOprfTheory:
    """theory/oprf.py: A up to 1/8, the pnc optimum located, small v, the certified ball for both kernels."""

    def test_a_up_to_one_eighth_against_the_written_formula(self):
        """A in [1/16, 1/8) is in the domain: the iid OPRF MSE (m = 1) at A = 0.1 equals
        P^2 ((1-4A)^d (1-8A)^{-d/2} e^{2(1-4A)v^2/(1-8A)} - e^{v^2}) written out (the module's second-moment
        formula; the code evaluates the expm1 form), 25 digits; 1/8 itself is refused."""
        d, v, xn, yn, a = 4, mp.mpf("0.8"), mp.mpf("0.5"), mp.mpf("0.4"), mp.mpf("0.1")
        with mp.workdps(40):
            second = (1 - 4 * a) ** d * (1 - 8 * a) ** (-mp.mpf(d) / 2) * mp.exp(2 * (1 - 4 * a) * v * v / (1 - 8 * a))
            ref = mp.exp(-2 * (xn * xn + yn * yn)) * (second - mp.exp(v * v))
            got = theory.kernel_mse("iid", d, v, kind="oprf", A=a, x_norm=xn, y_norm=yn, m=1)
            assert agrees(got, ref, 25)
            assert not agrees(got, theory.kernel_mse("iid", d, v, x_norm=xn, y_norm=yn, m=1), 2)  # power: PRF
            with pytest.raises(ValueError, match="A must be < 1/8"):
                theory.oprf.check_a(mp.mpf(1) / 8)
            assert theory.oprf.check_a("0.124") < mp.mpf(1) / 8

    def test_pnc_optimal_a_is_stationary(self):
        """A=None gives pnc_orthogonal its own optimum: the numerical derivative of its MSE in A (a central
        difference of kernel_mse, an independent route to the secant search on the closed-form derivative) is
        below 1e-4 of its value at the theorem couplings' A*(v^2/d) (measured 5e-9 and 1e-8), at (d, v) = (6, 1)
        and (4, 0.3), where a secant step leaves the domain A < 1/8 and is pulled back (measured c = 0.247);
        power: a secant stopped after one step (A = -0.092 instead of -0.0957 at (6, 1)) gives 0.11."""
        with mp.workdps(20):
            for d, v in ((6, mp.mpf(1)), (4, mp.mpf("0.3"))):
                a_opt = fk.hook("oprf", "parameters")("pnc_orthogonal", d, v, d)["A"]

                def mse(a, d=d, v=v):
                    return theory.kernel_mse("pnc_orthogonal", d, v, kind="oprf", A=a, x_norm=v / 2, y_norm=v / 2)

                def slope(a, mse=mse, h=mp.mpf("1e-5")):  # central difference: error O(h^2) ~ 1e-10 of the scale
                    return abs(mse(a + h) - mse(a - h)) / (2 * h)

                a_theorem = theory.oprf.optimal_a(v * v / d)
                assert slope(a_opt) < mp.mpf(10) ** -4 * slope(a_theorem), (d, v, a_opt)
                assert mse(a_opt) < mse(a_theorem)

    def test_pnc_oprf_at_tiny_v_keeps_its_digits(self):
        """The pnc pair excess is O(v^2) against e^{v^2} ~ 1, so small v needs extra bits.  At A = 0 the OPRF is
        the PRF: the pnc/orthogonal OPRF MSE ratio (pair term by theory.oprf's tilted quadrature) equals the PRF
        ratio (theory.pnc's route) to 15 digits at v = 1e-4 and 1e-8 (they first differ in the 10th digit
        without the extra bits); at A = -0.1 the ratio at v = 1e-8 equals its v = 0 value (the small_v hook: the
        variance and the pair excess at v = 0 exactly) to 12 digits."""
        with mp.workdps(20):
            for v in ("1e-4", "1e-8"):
                oprf = theory.kernel_mse_ratio("pnc_orthogonal", "orthogonal", 6, v, kind="oprf", A=0)
                assert agrees(oprf, theory.kernel_mse_ratio("pnc_orthogonal", "orthogonal", 6, v), 15), v
            tilted = theory.kernel_mse_ratio("pnc_orthogonal", "orthogonal", 6, "1e-8", kind="oprf", A="-0.1")
            limit = theory.kernel_mse_ratio("pnc_orthogonal", "orthogonal", 6, 0, kind="oprf", A="-0.1")
            assert agrees(tilted, limit, 12)
            assert not agrees(tilted, theory.kernel_mse_ratio("pnc_orthogonal", "orthogonal", 6, 0), 2)  # power

    @pytest.mark.skipif(not theory.certified.available(), reason="needs python-flint")
    def test_certified_ball_for_both_kernels_and_large_a(self):
        """The certified OPRF MSE ball contains kernel_mse (mpmath, the expm1 form) for the softmax kernel and at
        A = 0.1 in [1/16, 1/8); power: the Gaussian value is outside the softmax ball."""
        from flint import arb, ctx

        def point(value):  # a 40-digit mpf as a (nearly exact) ball
            with ctx.workprec(200):
                return arb(mp.nstr(value, 40))

        with mp.workdps(40):
            for kernel, a in (("softmax", "-0.05"), ("gaussian", "0.1")):
                ball = theory.oprf.certified_mse("simplex", 8, "1", a, x_norm="0.5", y_norm="0.5", kernel=kernel)
                val = theory.kernel_mse("simplex", 8, "1", kind="oprf", A=a, x_norm="0.5", y_norm="0.5", kernel=kernel)
                assert ball.contains(point(val)), (kernel, ball, val)
                assert float(ball.rad()) < 1e-25 * float(abs(ball.mid()))
            gauss = theory.kernel_mse("simplex", 8, "1", kind="oprf", A="-0.05", x_norm="0.5", y_norm="0.5")
            soft = theory.oprf.certified_mse("simplex", 8, "1", "-0.05", x_norm="0.5", y_norm="0.5", kernel="softmax")
            assert not soft.contains(point(gauss))


class TestKernelMse:
    """The kind hooks of theory/mse.py: RFFs are exact at z = 0; the mean conformity of two features."""

    def test_rff_mse_vanishes_at_z_zero(self):
        """cos(w.0) = 1 = K(x, x) in every draw: the RFF MSE at z = 0 is exactly 0 for every coupling and m (the
        Monte Carlo estimate has zero spread); at z = 1e-3 it is positive and O(z^4)."""
        for coupling in theory.kind_couplings("rff"):
            for m in (1, 8, 13):
                assert theory.kernel_mse(coupling, 8, 0, kind="rff", m=m) == 0
        x = np.full(8, 0.3)
        est = mc.empirical_mse("orthogonal", x, x, 8, 100, kind="rff", rng=0)
        assert est.mean < 1e-30 and est.stderr == 0  # sin^2 + cos^2 = 1 up to rounding
        with mp.workdps(20):
            small = theory.kernel_mse("orthogonal", 8, "1e-3", kind="rff")
            assert 0 < small < mp.mpf("1e-12")

    def test_mean_conformity_of_two_features(self):
        """m >= 2 (documented: the conformity averages over pairs): with m = 2 < d both features lie in one block
        and form one coupled pair, so the mean conformity is the block's pair term theory.conformity(coupling, d,
        v) for the couplings whose in-block pairs share one law (iid, orthogonal, simplex), 25 digits; m = 1 is
        refused by name."""
        with mp.workdps(30):
            for coupling in ("iid", "orthogonal", "simplex"):
                two = theory.mean_conformity(coupling, 5, "0.7", m=2)
                assert agrees(two, theory.conformity(coupling, 5, "0.7"), 25), coupling
            simplex = theory.mean_conformity("simplex", 5, "0.7", m=2)
            assert not agrees(simplex, theory.conformity("iid", 5, "0.7"), 2)  # power: another coupling's value
        with pytest.raises(ValueError, match=r"m must be an integer >= 2 \(the conformity averages over pairs"):
            theory.mean_conformity("simplex", 5, "0.7", m=1)
