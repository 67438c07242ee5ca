"""Optimised PRFs (FAVOR++) under every coupling (issue 19 item 1-2): closed forms by two routes, the optimal A,
the theorem that the pair term does not depend on A, Monte Carlo agreement with asserted power (|z| <= 4.5 each,
false alarm 6.8e-6), the correct-or-loud contract and bad input."""

import math
from fractions import Fraction

import numpy as np
import pytest
from mpmath import mp

import montecarlo as mc
import theory
from _support import pnc_nodes_built, pnc_rule_builds
from paper_checks._compare import agrees, point_pair, rel_diff, Z_CRIT
from theory import _context, feature_kinds as fk
from theory._context import mp as pmp
from theory.oprf import optimal_a, second_moment
from theory.registry import MissingHookError


def test_optimal_a_minimises_the_second_moment():
    """A* is a stationary point of log E[b^2] (numerical derivative, independent of the quadratic the closed form
    solves) and a minimum (larger on both sides); the issue's printed form agrees; relative accuracy at tiny s
    (A* ~ -s/2, where the printed form cancels)."""
    with mp.workdps(30):
        for d, v in ((4, "0.3"), (64, "2"), (8, "7")):
            s = mp.mpf(v) ** 2 / d
            a = optimal_a(s)
            f = lambda x: mp.log(second_moment(d, v, x))  # noqa: E731
            assert abs(mp.diff(f, a)) < mp.mpf(10) ** -20 * (1 + abs(mp.diff(f, 0)))
            assert agrees(a, (1 - 2 * s - mp.sqrt((2 * s + 1) ** 2 + 8 * s)) / 16, 25)
            assert f(a) < f(a * (1 + mp.mpf("1e-3"))) and f(a) < f(a * (1 - mp.mpf("1e-3")))
        assert agrees(optimal_a("1e-300"), mp.mpf("-5e-301"), 25)
    assert math.isclose(mc.oprf.optimal_a(0.3), float(theory.oprf.optimal_a(0.3)), rel_tol=1e-15)
    assert math.isclose(mc.oprf.optimal_a(1e-300), -5e-301, rel_tol=1e-12)


def test_data_parameters_rule_is_the_optimal_a_on_every_backend():
    """The oprf record's ``data_parameters`` (FAVOR++'s rule, what PRFAttention uses without A) gives A*(rho)
    elementwise, equal to theory.oprf.optimal_a at 40 digits (mpmath, the independent route) on numpy, and on
    torch (float64 and float32: no read-back, the tensor's dtype); montecarlo.oprf.optimal_a of a tensor is the
    same.  Power: the rule at 2 rho differs."""
    import array_api_compat

    torch = pytest.importorskip("torch")
    rule = theory.feature_kinds.hook("oprf", "data_parameters")
    rho = np.array([0.0, 1e-12, 0.3, 2.0, 40.0])
    with mp.workdps(40):
        ref = np.array([float(optimal_a(mp.mpf(float(r)))) for r in rho])
    a_np = rule(rho, array_api_compat.array_namespace(rho))["A"]
    assert np.allclose(a_np, ref, rtol=1e-14, atol=0)
    for dtype, tol in ((torch.float64, 1e-14), (torch.float32, 1e-6)):
        t = torch.tensor(rho, dtype=dtype)
        a_t = rule(t, array_api_compat.array_namespace(t))["A"]
        assert a_t.dtype == dtype and np.allclose(a_t.numpy(), ref, rtol=tol, atol=0)
        assert torch.equal(mc.oprf.optimal_a(t), a_t)
    assert not np.allclose(rule(2 * rho[1:], np)["A"], ref[1:], rtol=1e-3)


def _pairs_written_out(X, Y):
    """The mean of |x_i + y_j|^2 / d over all pairs, formed pair by pair (float64)."""
    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    return float(np.mean(np.sum((X[:, None, :] + Y[None, :, :]) ** 2, axis=-1))) / X.shape[1]


def test_batch_pair_statistic_is_the_mean_over_unpadded_pairs():
    """batch_pair_statistic (what PRFAttention's data rule reads) per sequence, with padding, against the pairs
    written out over the unpadded rows (numpy float64 to 1e-13; torch float64 and float32 on its device and in
    its dtype); a sequence with every row padded gives 0, a row with a NaN is left out as a padded one,
    pair_statistic is the unpadded case.
    Power: ignoring one mask changes the value."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    X, Y = rng.normal(size=(2, 3, 9, 5)) + 0.3, rng.normal(size=(1, 3, 6, 5)) - 0.2  # broadcasting leads
    x_pad, y_pad = rng.random((2, 3, 9)) < 0.4, rng.random((2, 1, 6)) < 0.4
    x_pad[0, 0], y_pad[1, 0] = False, False
    x_pad[0, 0, 0] = True
    ref = np.empty((2, 3))
    for i in range(2):
        for j in range(3):
            ref[i, j] = _pairs_written_out(X[i, j][~x_pad[i, j]], Y[0, j][~y_pad[i, 0]])
    got = mc.oprf.batch_pair_statistic(X, Y, x_pad, y_pad)
    assert got.shape == (2, 3) and np.allclose(got, ref, rtol=1e-13, atol=0)
    for dtype, tol in ((torch.float64, 1e-13), (torch.float32, 1e-5)):
        t = mc.oprf.batch_pair_statistic(*(torch.tensor(a, dtype=dtype) for a in (X, Y)), torch.tensor(x_pad),
                                         torch.tensor(y_pad))
        assert t.dtype == dtype and np.allclose(t.numpy(), ref, rtol=tol, atol=0)
    assert not np.allclose(mc.oprf.batch_pair_statistic(X, Y, None, y_pad), ref, rtol=1e-3)
    assert not np.allclose(mc.oprf.batch_pair_statistic(X, Y, x_pad, None), ref, rtol=1e-3)
    every = np.ones((9,), dtype=bool)
    assert mc.oprf.batch_pair_statistic(X[0, 0], Y[0, 0], every, None) == pytest.approx(
        np.mean(np.sum(Y[0, 0] ** 2, axis=-1)) / 5, rel=1e-13)  # no query row: their moments are 0
    assert mc.oprf.batch_pair_statistic(X[0, 0], Y[0, 0], every, np.ones((6,), dtype=bool)) == 0.0  # no row
    nan = X[0, 0].copy()
    nan[3, 1] = np.nan
    one = np.zeros((9,), dtype=bool)
    one[3] = True
    assert mc.oprf.batch_pair_statistic(nan, Y[0, 0]) == pytest.approx(
        _pairs_written_out(X[0, 0][~one], Y[0, 0]), rel=1e-13)  # a non-finite row is left out, as if padded
    assert mc.oprf.pair_statistic(X[0, 0], Y[0, 0]) == pytest.approx(_pairs_written_out(X[0, 0], Y[0, 0]),
                                                                      rel=1e-13)


def _tilted_pair_term(d, v, c, a):
    r""":math:`(1-4A)^d\mathbb E[e^{2A(r_1^2+r_2^2)}{}_0F_1(;\frac d2;\frac{(1-4A)v^2}{4}\|r_1u_1+r_2u_2\|^2)]` over
    i.i.d. chi_d norms at cos(u_1, u_2) = c: the OPRF pair term computed directly (scipy, double precision)."""
    from scipy import integrate, special, stats

    chi = stats.chi(d)
    b2 = 1 - 4 * a

    def f(r2, r1):
        s = r1 * r1 + r2 * r2 + 2 * c * r1 * r2
        return chi.pdf(r1) * chi.pdf(r2) * math.exp(2 * a * (r1 * r1 + r2 * r2)) * special.hyp0f1(d / 2, b2 * v * v
                                                                                                   * s / 4)

    top = math.sqrt(d) + 10 + 2 * v
    return b2 ** d * integrate.dblquad(f, 0, top, 0, top, epsabs=0, epsrel=1e-10)[0]


@pytest.mark.parametrize("coupling,d,v,a", [("orthogonal", 3, 1.0, -0.2), ("simplex", 3, 1.0, -0.2),
                                            ("simplex", 6, 1.5, 0.05)])
def test_theorem_pair_term_does_not_depend_on_a(coupling, d, v, a):
    """The OPRF pair term computed directly (tilted norms) equals the PRF conformity (the theorem), 9 digits;
    power: without the tilt's normalisation (1-4A)^d the direct route differs."""
    c = 0.0 if coupling == "orthogonal" else -1.0 / (d - 1)
    direct = _tilted_pair_term(d, v, c, a)
    with mp.workdps(20):
        rho = theory.conformity(coupling, d, v)
        assert agrees(rho, direct, 9)
        assert not agrees(rho, direct / (1 - 4 * a) ** d, 2)
        # and so MSE_OPRF - MSE_PRF is the same for every theorem coupling
        kw = dict(x_norm=v / 2, y_norm=v / 2, m=d)
        diffs = [theory.kernel_mse(cp, d, v, kind="oprf", A=a, **kw) - theory.kernel_mse(cp, d, v, **kw)
                 for cp in theory.oprf.theorem_couplings()]
        assert all(agrees(x, diffs[0], 15) for x in diffs)


def test_pnc_pair_term_depends_on_a_and_reduces_to_pnc():
    """pnc_orthogonal: at A = 0 the OPRF pair term is the PNC conformity (second route of theory.pnc); at
    A != 0 it differs from the PRF one (the theorem does not apply: coupled norms)."""
    import theory.pnc as pnc

    with mp.workdps(20):
        assert agrees(theory.oprf.pnc_pair_term(6, "1", 0), pnc.pair_conformity_u(6, "1"), 16)
        assert not agrees(theory.oprf.pnc_pair_term(6, "1", "-0.1"), theory.conformity("pnc_orthogonal", 6, 1), 3)


def test_pnc_optimal_a_is_a_minimum():
    with mp.workdps(20):
        d, v, kw = 6, "1.2", dict(x_norm="0.6", y_norm="0.6")
        best = theory.kernel_mse("pnc_orthogonal", d, v, kind="oprf", **kw)
        a_theorem = optimal_a(mp.mpf(v) ** 2 / d)
        at_theorem = theory.kernel_mse("pnc_orthogonal", d, v, kind="oprf", A=a_theorem, **kw)
        assert best <= at_theorem
        for delta in ("0.01", "-0.01"):
            assert best < theory.kernel_mse("pnc_orthogonal", d, v, kind="oprf", A=a_theorem + mp.mpf(delta), **kw)


@pytest.mark.parametrize("d", [3, 16, 64])
def test_pnc_optimal_a_at_small_v(d):
    """Regression (issue 22, found by the mutation work): the default A=None at v = 1e-3 raised ConvergenceError
    for d = 3, 16, 64 (the derivative's quadrature nearly cancels near A = 0).  Now a value, and a minimum: below
    the MSE at the theorem's A* and at the located A moved by +-0.1%.  Second route: the located A agrees with
    the small-v series A = -(v^2/2d)(1 + nC/d)/(1 + 2nC/d) to its O(d v^2) error (measured 1.4 d v^2)."""
    from theory import oprf
    from theory.mse import _weighted_pairs

    v, kw = mp.mpf("1e-3"), dict(x_norm="5e-4", y_norm="5e-4")
    a = oprf._parameters("pnc_orthogonal", d, v, d)["A"]
    n = _weighted_pairs("pnc_orthogonal", d, d, lambda c: 1 if c == "pnc_orthogonal" else 0)
    series = oprf._pnc_small_v_a(d, v, n)
    assert abs(a / series - 1) < 2 * d * v ** 2
    assert abs(a / optimal_a(v ** 2 / d) - 1) > 0.3  # the pnc optimum is not the theorem's
    best = theory.kernel_mse("pnc_orthogonal", d, v, kind="oprf", **kw)
    assert best == theory.kernel_mse("pnc_orthogonal", d, v, kind="oprf", A=a, **kw)
    for other in (optimal_a(v ** 2 / d), a * (1 + mp.mpf("1e-3")), a * (1 - mp.mpf("1e-3"))):
        assert best < theory.kernel_mse("pnc_orthogonal", d, v, kind="oprf", A=other, **kw)


def test_pnc_optimal_a_golden_fallback_and_tiny_v(monkeypatch):
    """When the derivative's quadrature fails, a golden-section search on the MSE in a bracket around the series'
    A finds the secant's root (d = 8, v = 0.01: to the search tolerance 2^-26); power: a bracket that misses
    the minimum returns None (never an end of the bracket).  At v = 1e-30 the series' A is used (the MSE at it
    is the minimum to the working precision): the MSE is a value, equal to the PRF one to O(v^2)."""
    from theory import oprf
    from theory.errors import ConvergenceError
    from theory.mse import _weighted_pairs

    d, v = 8, mp.mpf("0.01")
    n = _weighted_pairs("pnc_orthogonal", d, d, lambda c: 1 if c == "pnc_orthogonal" else 0)
    secant = oprf._pnc_optimal_a(d, v, d, optimal_a(v ** 2 / d))

    def broken(*args, **kwargs):
        raise ConvergenceError("quadrature failed (test)")

    monkeypatch.setattr(oprf, "_pnc_pair_term_derivative", broken)
    golden = oprf._pnc_optimal_a(d, v, d, optimal_a(v ** 2 / d))
    assert abs(golden / secant - 1) < mp.mpf(2) ** -20
    tol = mp.mpf(2) ** -26
    assert oprf._pnc_golden_a(d, v, n, secant * 2, mp.mpf("0.1"), tol) is None
    tiny = theory.kernel_mse("pnc_orthogonal", 8, "1e-30", kind="oprf", x_norm="5e-31", y_norm="5e-31")
    prf = theory.kernel_mse("pnc_orthogonal", 8, "1e-30", x_norm="5e-31", y_norm="5e-31")
    assert tiny > 0 and agrees(tiny, prf, 12)


@pytest.mark.parametrize("d,v,a", [(3, "0.1", "-0.001"), (3, "1e-3", "-2e-7"), (64, "0.1", "-0.001"),
                                   (2, "1e-2", "0.001"), (5, "1e-5", "-3e-11"), (8, "1e-3", "0")])
def test_pnc_pair_excess_two_routes(monkeypatch, d, v, a):
    """The pnc OPRF pair excess by its two routes, through kernel_mse at 20 digits: the quadrature of the pair
    term minus e^{v^2} (with 4 log2(1/v) extra bits) and the small-(A, v) route (the i.i.d.-norm law's
    expectation subtracted pointwise beyond the linear part, plus the orthogonal PRF excess): equal to 1e-18.
    Power: the second route with the 0F1 tail of h + 1 instead of h is off by more than 1e-15 (1e-11 at the
    smallest v, where the variance dominates the MSE), in its mpf form and in its fixed-point form
    (``_ftilde_fixed`` at d + 2; at d = 64 the call raises ConvergenceError instead)."""
    from theory import oprf

    def mse():
        vv = mp.mpf(v)
        return theory.kernel_mse("pnc_orthogonal", d, vv, kind="oprf", A=a, x_norm=vv / 2, y_norm=vv / 2)

    with mp.workdps(20):
        assert oprf._pnc_small_excess_applies(d, mp.mpf(v), mp.mpf(a))
        small = mse()
        monkeypatch.setattr(oprf, "_pnc_small_excess_applies", lambda *args: False)
        quad = mse()
        assert abs(small / quad - 1) < mp.mpf("1e-18")
        monkeypatch.undo()
        real = oprf._tail_0f1
        monkeypatch.setattr(oprf, "_tail_0f1", lambda h, z: real(h + 1, z))
        monkeypatch.setattr(oprf, "_ftilde_fixed", lambda *args, **kw: None)  # (the mpf form of the integrand)
        assert abs(mse() / quad - 1) > mp.mpf("1e-15")
        monkeypatch.undo()
        fixed = oprf._ftilde_fixed
        monkeypatch.setattr(oprf, "_ftilde_fixed", lambda d, x, z, **kw: fixed(d + 2, x, z, **kw))
        try:
            assert abs(mse() / quad - 1) > mp.mpf("1e-15")
        except theory.ConvergenceError:  # (or loud: at d = 64 its quadrature cannot meet the tolerance)
            pass


def test_pnc_pair_derivative_two_routes_and_secant_at_30_digits():
    """The A-derivative of the pnc OPRF pair term by the small-(A, v) route equals the derivative under the
    integral (with its extra bits) and a central difference of the small-(A, v) excess, at 30 digits (run
    inside a guarded call, as the library runs them).  Regression: at 30 digits the secant for d = 64, v = 0.1
    wandered for 60 steps (g carried no bits beyond the step tolerance); now a minimum."""
    from theory import oprf
    from theory._checks import guarded
    from theory._context import mp as pmp

    @guarded()
    def routes(d, v, a):
        vv, aa = pmp.mpf(v), pmp.mpf(a)
        small = oprf._pnc_excess_small_derivative(d, vv, aa)
        with pmp.workprec(pmp.prec + oprf._small_arg_bits(vv) + 10):
            quad = oprf._pnc_pair_term_derivative(d, vv, aa)
        h = pmp.mpf("1e-12") * abs(aa)
        diff = (oprf._pnc_excess_small(d, vv, aa + h) - oprf._pnc_excess_small(d, vv, aa - h)) / (2 * h)
        return small, quad, diff

    with mp.workdps(30):
        for d, v, a in ((3, "0.1", "-0.001"), (64, "0.1", "-0.0005"), (2, "1e-2", "0.001")):
            small, quad, diff = routes(d, v, a)
            assert abs(small / quad - 1) < mp.mpf("1e-26")
            assert abs(diff / small - 1) < mp.mpf("1e-20")
        d, v, kw = 64, mp.mpf("0.1"), dict(x_norm="0.05", y_norm="0.05")
        best = theory.kernel_mse("pnc_orthogonal", d, v, kind="oprf", **kw)
        a = oprf._parameters("pnc_orthogonal", d, v, d)["A"]
        for other in (a * (1 + mp.mpf("1e-4")), a * (1 - mp.mpf("1e-4"))):
            assert best < theory.kernel_mse("pnc_orthogonal", d, v, kind="oprf", A=other, **kw)


@pytest.mark.parametrize("d", [3, 8])
def test_pnc_oprf_at_v_1e_300(d):
    """README domain: pnc_orthogonal OPRFs at v = 1e-300 (before: the pair term's quadrature needed 4000 extra
    bits and ran out of the 30 s budget).  Independent route: as v -> 0 the optimal A -> 0 and the OPRF MSE equals
    the PRF one (theory.pnc's small-v moment series) to O(v^2)."""
    with mp.workdps(15):
        kw = dict(x_norm="5e-301", y_norm="5e-301")
        oprf_mse = theory.kernel_mse("pnc_orthogonal", d, "1e-300", kind="oprf", **kw)
        prf_mse = theory.kernel_mse("pnc_orthogonal", d, "1e-300", **kw)
        assert oprf_mse > 0 and agrees(oprf_mse, prf_mse, 14)


def _points(d, seed, xn=0.5, dist=0.3):
    return point_pair(d, seed, xn, dist)


@pytest.mark.parametrize("coupling", ["iid", "orthogonal", "simplex", "pnc_orthogonal"])
@pytest.mark.parametrize("m,path", [(6, "fast"), (15, "full")])
def test_monte_carlo_agrees_with_the_closed_form(coupling, m, path):
    """Empirical MSE at A = -0.15 (far from 0, so the tilt matters) against kernel_mse(kind='oprf'); power: the
    PRF MSE of the same coupling is rejected."""
    d, a = 6, -0.15
    x, y = _points(d, 3, xn=0.6, dist=0.4)
    xn, yn, v = (float(np.linalg.norm(t)) for t in (x, y, x + y))
    est = mc.empirical_mse(coupling, x, y, m, 100_000, kind="oprf", A=a, rng=5, path=path)
    with mp.workdps(15):
        kw = dict(x_norm=xn, y_norm=yn, m=m)
        expected = float(theory.kernel_mse(coupling, d, v, kind="oprf", A=a, **kw))
        prf = float(theory.kernel_mse(coupling, d, v, **kw))
    assert abs(est.z(expected)) <= Z_CRIT, (est, expected)
    assert abs(est.z(prf)) > Z_CRIT


def test_unbiased_for_every_coupling_and_a():
    x, y = _points(8, 1)
    k = mc.exact_kernel(x, y)
    for coupling in ("iid", "orthogonal", "simplex", "simplex_plus", "pnc_orthogonal"):
        for a in (-0.3, 0.1):
            est = mc.kernel_estimate(coupling, x, y, 8, 20_000, kind="oprf", A=a, rng=2, path="full")
            assert abs(est.z(k)) <= Z_CRIT, (coupling, a, est)


def test_conformity_estimate_against_mean_conformity():
    conf = mc.empirical_conformity("pnc_orthogonal", 6, 0.9, m=6, n_draws=100_000, kind="oprf", A=-0.1, rng=4)
    with mp.workdps(15):
        expected = float(theory.mean_conformity("pnc_orthogonal", 6, 0.9, kind="oprf", A=-0.1))
        prf = float(theory.mean_conformity("pnc_orthogonal", 6, 0.9))
    assert abs(conf.z(expected)) <= Z_CRIT and abs(conf.z(prf)) > Z_CRIT


@pytest.mark.filterwarnings("ignore::montecarlo.FastCouplingBiasWarning")
@pytest.mark.parametrize("coupling", ["simplex_plus", "fast_orthogonal", "fast_simplex"])
def test_couplings_without_a_closed_form(coupling):
    with pytest.raises(MissingHookError, match="pnc_orthogonal"):
        theory.kernel_mse(coupling, 8, 1, kind="oprf", x_norm=0.5, y_norm=0.5)
    x, y = _points(8, 2)
    assert np.isfinite(mc.empirical_mse(coupling, x, y, 8, 2000, kind="oprf", rng=1).mean)


def test_domain_tiny_huge_v_and_large_d():
    """Correct or loud: tiny v (the OPRF MSE tends to the PRF one, A* -> 0), huge v, large d; the ratio at
    v = 0 is the PRF limit; a fixed A != 0 gives a nonzero MSE at v = 0 (the tilt's own variance)."""
    with mp.workdps(30):
        tiny = theory.kernel_mse("simplex", 8, "1e-300", kind="oprf", x_norm="5e-301", y_norm="5e-301")
        prf = theory.kernel_mse("simplex", 8, "1e-300", x_norm="5e-301", y_norm="5e-301")
        assert tiny > 0 and agrees(tiny, prf, 25)
        assert theory.kernel_mse_ratio("simplex", "iid", 8, 0, kind="oprf") == theory.mse_ratio("simplex", "iid", 8, 0)
        assert theory.kernel_mse("iid", 8, 0, kind="oprf", A="-0.1", x_norm=0, y_norm=0) > 0
        huge = theory.kernel_mse("orthogonal", 64, 300, kind="oprf", x_norm=150, y_norm=150)
        assert mp.isfinite(huge) and huge > 0
        big_d = theory.kernel_mse_ratio("orthogonal", "iid", 10**6, "0.5", kind="oprf")
        assert 0 < big_d < 1


def test_bad_input():
    kw = dict(x_norm=0.5, y_norm=0.5)
    with pytest.raises(ValueError, match="A must be < 1/8"):
        theory.kernel_mse("simplex", 8, 1, kind="oprf", A=0.125, **kw)
    with pytest.raises(TypeError, match="A must be a real number"):
        theory.kernel_mse("simplex", 8, 1, kind="oprf", A=True, **kw)
    with pytest.raises(TypeError, match="takes no parameters"):
        theory.kernel_mse("simplex", 8, 1, A=-0.1, **kw)
    with pytest.raises(ValueError, match="s must be >= 0"):
        optimal_a(-1)
    with pytest.raises(ValueError, match="s must be finite and >= 0"):
        mc.oprf.optimal_a(-1.0)
    with pytest.raises(ValueError, match="A must be a finite real < 1/8"):
        mc.empirical_mse("simplex", *_points(4, 0), 4, 100, kind="oprf", A=0.2)
    with pytest.raises(ValueError, match="needs A="):
        mc.random_features(np.ones((2, 4)) * 0.1, mc.sample_weights("simplex", 4, 4, rng=0), kind="oprf")


def test_feature_map_written_out_and_float32():
    """random_features(kind='oprf') against the formula; float32 stays finite with no all-zero row on unit-scale
    data at d = 64 with A* (bounded features)."""
    W = mc.sample_weights("orthogonal", 5, 7, rng=1)
    X = np.random.default_rng(2).standard_normal((4, 5)) * 0.4
    a = mc.oprf.data_optimal_a(X)
    phi = mc.random_features(X, W, kind="oprf", A=a)
    ref = (1 - 4 * a) ** (5 / 4) * np.exp(a * np.sum(W * W, axis=1)[None, :] + math.sqrt(1 - 4 * a) * X @ W.T
                                           - np.sum(X * X, axis=1)[:, None]) / math.sqrt(7)
    assert np.allclose(phi, ref, rtol=1e-13, atol=0)
    rng = np.random.default_rng(3)
    X64 = rng.standard_normal((256, 64)).astype(np.float32) / 4
    W64 = mc.sample_weights("simplex", 64, 128, rng=4, dtype=np.float32)
    a64 = mc.oprf.data_optimal_a(X64)
    f = mc.random_features(X64, W64, kind="oprf", kernel="softmax", A=a64)
    assert f.dtype == np.float32 and np.all(np.isfinite(f)) and np.all(f.max(axis=1) > 0)
    assert mc.oprf.data_optimal_a(X64) < 0


@pytest.mark.skipif(not theory.certified.available(), reason="needs python-flint")
def test_certified_mse_contains_the_value():
    with mp.workdps(30):
        for coupling in ("iid", "orthogonal", "simplex"):
            ball = theory.oprf.certified_mse(coupling, 8, "1", "-0.05", x_norm="0.5", y_norm="0.5")
            val = theory.kernel_mse(coupling, 8, "1", kind="oprf", A="-0.05", x_norm="0.5", y_norm="0.5")
            assert ball.contains(__import__("flint").arb(mp.nstr(val, 30))) or abs(
                float(ball.mid()) - float(val)) < float(ball.rad()) + 1e-28


@pytest.mark.filterwarnings("ignore::montecarlo.FastCouplingBiasWarning")
@pytest.mark.parametrize("coupling", ["fast_orthogonal", "fast_simplex"])
@pytest.mark.parametrize("path", ["fast", "full"])
def test_fast_couplings_unbiased_where_d_is_not_a_power_of_two(coupling, path):
    """The fast couplings pad d to p (the next power of two); a projection vector is the first d entries of a
    row, so its |w|^2 is the chi_p norm squared times the row's mass in those d columns, not the chi_p norm
    alone.  With the latter (the fast path before the fix) OPRF estimates at d = 24, A = -0.2 were
    (1 - 4A)^((d - p) / 2) = 0.095 times the kernel (z = -450 at 4000 draws).  Unbiased within Z_CRIT on both
    paths; power: the same estimate rejects 0.9 times the kernel (a 10% bias)."""
    d, a = 24, -0.2
    x, y = _points(d, 6, xn=0.5, dist=0.5)
    k = mc.exact_kernel(x, y)
    est = mc.kernel_estimate(coupling, x, y, d, 20_000, kind="oprf", A=a, rng=3, path=path)
    assert abs(est.z(k)) <= Z_CRIT, est
    assert abs(est.z(0.9 * k)) > Z_CRIT, est


@pytest.mark.filterwarnings("ignore::montecarlo.FastCouplingBiasWarning")
@pytest.mark.parametrize("coupling", ["fast_orthogonal", "fast_simplex"])
@pytest.mark.parametrize("d,m", [(6, 5), (6, 8), (6, 13), (6, 16), (8, 8), (8, 20), (24, 40)])
def test_fast_projection_row_norms_and_oprf_features_match_the_dense_rows(coupling, d, m):
    """A fast RandomProjection's squared row norms (no dense matrix) equal those of its dense rows, and OPRF
    features (which need them) are the same from the projection and from its dense weights.  Before the fix
    they were the chi_p norms of shape (blocks, p): a numpy broadcast error for m != p or several blocks, and
    features 60% off at d = 6 < p = 8, depending on whether ``.weights`` had been read."""
    X = np.random.default_rng(0).normal(size=(3, d)) * 0.3
    proj = mc.sample_projection(coupling, d, m, rng=1)
    sq = proj.row_sq_norms()
    feats = mc.random_features(X, proj, kind="oprf", A=-0.1)
    dense = mc.sample_projection(coupling, d, m, rng=1).weights
    assert sq.shape == (m,)
    np.testing.assert_allclose(sq, np.sum(dense * dense, axis=1), rtol=1e-12)
    np.testing.assert_allclose(feats, mc.random_features(X, dense, kind="oprf", A=-0.1), rtol=1e-12)
    if d < proj.padded_d:  # power: the chi_p norms alone are not the rows' norms
        chi = np.reshape(proj._norms ** 2, -1)[:m]
        assert not np.allclose(chi, sq, rtol=1e-3)


# ---------------------------------------------------------------------------
# theory, third exploration round: the kind MSEs at huge d, the kernel prefactor at huge norms, the OPRF variance at
# small A, the default m of mean_conformity, the grids of hyperbolic_ordering.
#
# Every reference is independent of the code under test:
#
# * the pair terms at huge d by a term-by-term series written out here: given the norms r_i, r_j (i.i.d. chi_d) and
#   the angle c, E e^{(w_i + w_j).v} = 0F1(; d/2; v^2 S / 4), S = r_i^2 + r_j^2 + 2 c r_i r_j, so
#   rho(c) = sum_k (v^2/4)^k E[S^k] / ((d/2)_k k!) with E[S^k] from the multinomial expansion and the chi_d moments
#   E r^{2j} = 2^j (d/2)_j, E r^{2j+1} = 2^{j+1/2} (d/2 + 1/2)_j Gamma((d+1)/2)/Gamma(d/2) (the package sums 1F1s and
#   quadratures instead); the RFF pair term is the same series at v^2 -> -z^2;
# * the kernel prefactors as exp(-2c(X^2 + Y^2)) at 300 digits from the exact binary norms, times the inner factor
#   written out with mpmath's hyp1f1 / hyp0f1;
# * the OPRF moments as (1-4A)^d (1-8A)^(-d/2) e^{2(1-4A)v^2/(1-8A)} - e^{v^2} at 700 digits (600 for large v).


def _oprf_second_minus_iid(d, v, a, dps=700):
    """E[b^2] - e^{v^2} written out: (1-4A)^d (1-8A)^(-d/2) e^{2(1-4A)v^2/(1-8A)} - e^{v^2}."""
    with mp.workdps(dps):
        a, v2 = mp.mpf(a), mp.mpf(v) ** 2
        return (1 - 4 * a) ** d * (1 - 8 * a) ** (-mp.mpf(d) / 2) * mp.exp(2 * (1 - 4 * a) * v2 / (1 - 8 * a)) \
            - mp.exp(v2)


def _old_log_excess(d, v2, a):
    """The replaced form: two logarithms that cancel to 8 d A^2."""
    return d * mp.log1p(-4 * a) - mp.mpf(d) / 2 * mp.log1p(-8 * a) + v2 / (1 - 8 * a)


@pytest.mark.parametrize("a", ["-1e-14", "-1e-17", "-1e-20", "-1e-25", "-1e-30", "-1e-300", "1e-20", "-0.3", "0.1"])
@pytest.mark.parametrize("v", ["0", "0.5"])
def test_oprf_variance_at_small_a(a, v):
    """kernel_mse (iid, m = 1, x = y = 1) = e^{-4} (E[b^2] - e^{v^2}) to 14 digits for every A, also A -> 0.
    Before (at v = 0, d = 4): relative error 7.7e-14 (A = -1e-14), 1.6e-10 (-1e-17), 1.4e-7 (-1e-20), 2.3e-3
    (-1e-25), and 0.0 returned at -1e-30 (the two logarithms cancel to 8 d A^2, losing log2(1/(2|A|)) bits):
    the replaced form is evaluated below at the precision _variance gave it and fails the check."""
    d = 4
    ref = _oprf_second_minus_iid(d, v, a)
    with mp.workdps(700):
        ref_mse = mp.exp(-4) * ref
    got = theory.kernel_mse("iid", d, v, kind="oprf", A=a, x_norm=1, y_norm=1, m=1)
    assert rel_diff(got, ref_mse) < 1e-14, (a, v, got, ref_mse)
    assert rel_diff(theory.oprf.second_moment(d, v, a), ref + mp.exp(mp.mpf(v) ** 2)) < 1e-14
    if v == "0" and a in ("-1e-20", "-1e-25", "-1e-30"):
        with mp.workprec(53 + 24 + 8 + 2):  # the guard bits theory.guarded and the old _variance added
            old = mp.expm1(_old_log_excess(d, mp.mpf(0), mp.mpf(a)))
        assert old == 0 or rel_diff(old, ref) > 1e-8


def test_oprf_published_cases():
    """The finding's three calls: 5.861e-61 (was 0.0), the SimRF/IID ratio 1.0 at v = 1e-300 (the A-variance
    3.2e-59 dominates the O(v^2) pair terms; was 0.1164), and 3.2e-199 at A = -1e-100 (was 1.0e-600)."""
    with mp.workdps(700):
        first = mp.exp(-4) * _oprf_second_minus_iid(4, 0, "-1e-30")
        third = mp.exp(-mp.mpf("1e-600")) * _oprf_second_minus_iid(4, "1e-300", "-1e-100")
    assert rel_diff(theory.kernel_mse("iid", 4, 0, kind="oprf", A="-1e-30", x_norm=1, y_norm=1, m=1), first) < 1e-14
    ratio = theory.kernel_mse_ratio("simplex", "iid", 4, "1e-300", kind="oprf", A="-1e-30")
    assert abs(ratio - 1) < 1e-15
    got = theory.kernel_mse("iid", 4, "1e-300", kind="oprf", A="-1e-100", x_norm="1e-300", y_norm=0, m=1)
    assert rel_diff(got, third) < 1e-14


def test_oprf_variance_at_large_v():
    """v = 2^33, A = -1/128 (exact inputs), x = y = v/2 (prefactor e^{-v^2}): the MSE is
    E[b^2] e^{-v^2} - 1 = e^{X} - 1, X = 4 log(1+1/32) - 2 log(1+1/16) + v^2/(1+1/16) ~ 6.9e19, written out at 600
    digits.  exp magnifies the rounding of X by X: with X at 8 + mag(d) guard bits kernel_mse was off by 1.1e-7
    and second_moment by 5.8e-5; X is now formed with mag(X) more bits."""
    d, v, a = 4, mp.mpf(2) ** 33, mp.mpf(-1) / 128
    with mp.workdps(600):
        x = d * mp.log(1 - 4 * a) - mp.mpf(d) / 2 * mp.log(1 - 8 * a) + 2 * (1 - 4 * a) * v ** 2 / (1 - 8 * a) - v ** 2
        ref = mp.expm1(x)
        with mp.workprec(53 + 24 + 8 + 3):
            old = mp.expm1(_old_log_excess(d, v ** 2, a))
        assert rel_diff(old, ref) > 1e-12  # the old precision fails
    got = theory.kernel_mse("iid", d, v, kind="oprf", A=a, x_norm=v / 2, y_norm=v / 2, m=1)
    assert rel_diff(got, ref) < 1e-14  # was 1.1e-7
    with mp.workdps(600):
        second = mp.exp(x + v ** 2)
    assert rel_diff(theory.oprf.second_moment(d, v, a), second) < 1e-14  # was 5.8e-5


# ---------------------------------------------------------------------------
# Issue 38, item 2 and finding D: the fast closed forms of pnc_orthogonal (theory._antithetic) and their error
# control, against implementations that share none of their code.
#
# Oracles: mpmath's incomplete gamma function (``mpmath.gammainc``, independent of the fixed-point series and
# of the partner steps of theory._antithetic) for every node of a rule; mpmath's hyp0f1 / expm1 for the
# fixed-point series of the integrands; the closed antithetic partner of d = 2 (x2 = -ln(1 - e^{-x1})) and
# d = 4 (Lambert W) with mpmath's own quadrature for the pair expectations at 55 digits (where the Laguerre
# tail's extrapolated error estimate had let a value 2^-155 off through at 183 bits, d = 8, v = 3); values of
# the previous implementation (mpmath's gammainc and tanh-sinh quadrature, commit 53441d0) for the d = 1024 RFF
# MSE of finding D.  No timing: work is bounded by theory._context's work counters.


def test_oprf_tails_against_mpmath():
    """The fixed-point tails of theory.oprf (e^x - 1 - x, 0F1(; h; z) - 1 - z/h) against mpmath at 600 bits (the
    differences lose up to 200 bits at 1e-40), to 2^-(p - 4) relatively; power: the tail of h + 1 for that of h
    is off."""
    from theory import oprf

    with _context.entered():
        pmp.prec = 120
        for x in ("0.4999", "0.3", "1e-5", "1e-40", "-1e-40", "-0.2", "-0.4999"):
            xx = pmp.mpf(x)
            with pmp.workprec(600):
                ref = pmp.expm1(xx) - xx
            assert abs(oprf._tail_exp(xx) / ref - 1) < pmp.mpf(2) ** -116
        for h2 in (2, 3, 8, 1025):
            h = pmp.mpf(h2) / 2
            for z in ("0.4999", "0.01", "1e-30"):
                zz = pmp.mpf(z)
                with pmp.workprec(600):
                    ref = pmp.hyp0f1(h, zz) - 1 - zz / h
                got = oprf._tail_0f1(h, zz)
                assert abs(got / ref - 1) < pmp.mpf(2) ** -116
                assert abs(oprf._tail_0f1(h + 1, zz) / ref - 1) > pmp.mpf(2) ** -20


@pytest.mark.parametrize("prec", [77, 160])
def test_oprf_tail_pair_against_mpmath(prec):
    """The two 0F1 tails of one loop (_tail_0f1_pair: at h and h + 1, the pnc derivative's integrand) against
    mpmath's hyp0f1 - 1 - z/h at 600 bits, to 2^-(p - 4) relatively at 77 and 160 bits (15 and 40 digits plus
    guards), z from 1e-30 to 3 (the fixed-point loop below 1/2, the two calls above); power: the pair's second
    value is off from the tail at h + 1/2 and at h."""
    from theory import oprf

    with _context.entered():
        pmp.prec = prec
        for h2 in (2, 3, 8, 65, 1025):
            h = pmp.mpf(h2) / 2
            for z in ("1e-30", "1e-8", "0.01", "0.3", "0.4999", "0.5", "3"):
                zz = pmp.mpf(z)
                got = oprf._tail_0f1_pair(h, zz)
                with pmp.workprec(600):
                    refs = [pmp.hyp0f1(h + k, zz) - 1 - zz / (h + k) for k in (0, 1)]
                    wrong = [pmp.hyp0f1(h + k, zz) - 1 - zz / (h + k) for k in (pmp.mpf(1) / 2, 0)]
                for w in wrong:
                    assert abs(w / got[1] - 1) > pmp.mpf(2) ** -20
                for g, r in zip(got, refs):
                    assert abs(g / r - 1) < pmp.mpf(2) ** (4 - prec), (h2, z)


# ---------------------------------------------------------------------------
# Edges of theory.oprf: the optimal A at large s (relative accuracy, no ZeroDivisionError) and the OPRF MSE at
# very large v (a correct value, or a loud ConvergenceError within the time budget).
#
# References are independent of the closed form under test: the optimal A is located by mpmath.findroot on the
# derivative of the per-dimension log second moment at three times the digits; the i.i.d. MSE is
# expm1(L)/m written out at 600 digits from that A (x = y = v/2, so the prefactor e^{-v^2} cancels e^{v^2}; v a
# power of two, so every input is exact).


def _reference_a(s, dps):
    """Root of d/dA [log(1-4A) - log(1-8A)/2 + s/(1-8A)] = -4/(1-4A) + 4/(1-8A) + 8s/(1-8A)^2
    = 16A/((1-4A)(1-8A)) + 8s/(1-8A)^2 (the second form: no cancellation near A = 0) by findroot."""
    with mp.workdps(dps):
        s = mp.mpf(s)
        return mp.findroot(lambda a: 16 * a / ((1 - 4 * a) * (1 - 8 * a)) + 8 * s / (1 - 8 * a) ** 2,
                           -s / 4 if s > 1 else -s / 2)


def _old_optimal_a(s):
    """The form replaced on 2026-11-27: -s / (16 A+), A+ = ((1 - 2s) + sqrt((2s+1)^2 + 8s)) / 16 (cancels at
    large s)."""
    s = mp.mpf(s)
    big = ((1 - 2 * s) + mp.sqrt((2 * s + 1) ** 2 + 8 * s)) / 16
    return -s / (16 * big)


@pytest.mark.parametrize("s", ["1e10", "1e12", "1e100", "1e300", "1e600", "0.5", "0.4999999", "0.5000001", "3",
                               "1e-300"])
@pytest.mark.parametrize("dps", [15, 40])
def test_optimal_a_has_relative_accuracy_at_every_s(s, dps):
    """optimal_a agrees with the findroot reference to dps - 1 digits for s from 1e-300 to 1e600 (both branches of
    the evaluation and its switch at s = 1/2).  Power: the replaced form, evaluated at the same working precision
    (53 + 24 guard bits for 15 digits), is off by 5e-13 at s = 1e12 (2.2e-14 at 1e10), more than the 1e-14
    asserted, and raises ZeroDivisionError from s = 1e100 at either precision."""
    ref = _reference_a(s, 3 * dps + 20)
    with mp.workdps(dps):
        got = optimal_a(s)
        assert got <= 0
        assert agrees(got, ref, dps - 1), (s, got, ref)
    if dps == 15 and s in ("1e10", "1e12"):
        with mp.workprec(53 + 24):  # 15 digits plus the guard bits theory.guarded adds
            assert rel_diff(_old_optimal_a(s), ref) > mp.mpf(10) ** -(dps - 1)
    if s in ("1e100", "1e300", "1e600"):
        with mp.workdps(dps + 8), pytest.raises(ZeroDivisionError):
            _old_optimal_a(s)


def test_optimal_a_at_large_s_is_minus_s_over_4():
    """A* = -(sqrt((2s+1)^2 + 8s) + 2s - 1)/16 = -s/4 - 1/8 + O(1/s) (expansion of the square root): at s = 1e12
    the exact value is -250000000000.125 (the float the old form returned, -250000000000.0, is off by 5e-13)."""
    with mp.workdps(30):
        assert agrees(optimal_a(10 ** 12), mp.mpf("-250000000000.125"), 20)
        assert not agrees(mp.mpf(-250000000000.0), mp.mpf("-250000000000.125"), 13)


def _reference_iid_mse(d, v, m):
    """i.i.d. OPRF MSE at x = y = v/2 (Gaussian kernel): e^{-v^2} e^{v^2} expm1(L)/m = expm1(L)/m,
    L = d log(1-4A) - (d/2) log(1-8A) + v^2/(1-8A) at the findroot A, 600 digits."""
    with mp.workdps(600):
        v = mp.mpf(v)
        a = _reference_a(v ** 2 / d, 600)
        big_l = d * mp.log(1 - 4 * a) - mp.mpf(d) / 2 * mp.log(1 - 8 * a) + v ** 2 / (1 - 8 * a)
        return mp.expm1(big_l) / m


@pytest.mark.parametrize("exponent", [20, 43, 100, 332, 996])
def test_iid_oprf_mse_at_very_large_v(exponent):
    """kernel_mse(kind='oprf', A = A*) at v = 2^exponent (1e6 ... 6.7e299; v = 1e13 is 2^43) agrees with the
    written-out reference to 13 digits at the default precision.  Power: before the fix these calls raised
    ZeroDivisionError (the default A went through the cancelling form); a wrong A (the reference's A times
    1 + 1e-6) moves the MSE by more than 1e-13 (checked at 2^43)."""
    d, m = 2, 2
    v = mp.mpf(2) ** exponent
    x = v / 2
    ref = _reference_iid_mse(d, v, m)
    with mp.workdps(15):
        got = theory.kernel_mse("iid", d, v, kind="oprf", x_norm=x, y_norm=x, m=m)
        assert agrees(got, ref, 13), (exponent, got, ref)
        if exponent == 43:
            wrong = theory.kernel_mse("iid", d, v, kind="oprf", x_norm=x, y_norm=x, m=m,
                                      A=_reference_a(v ** 2 / d, 60) * (1 + mp.mpf("1e-6")))
            assert not agrees(wrong, ref, 13)


def test_theorem_couplings_at_very_large_v_return_values():
    """kernel_mse_ratio(simplex, iid, 2, '1e13', kind='oprf') of the report and the orthogonal coupling: values in
    (0, 1] (a coupling does not raise the MSE here) instead of ZeroDivisionError; the simplex MSE at v = 2^332
    (about 1e100) is positive and at most the i.i.d. one."""
    with mp.workdps(15):
        for coupling in ("simplex", "orthogonal"):
            r = theory.kernel_mse_ratio(coupling, "iid", 2, "1e13", kind="oprf")
            assert 0 < r <= 1
        v = mp.mpf(2) ** 332
        iid = theory.kernel_mse("iid", 2, v, kind="oprf", x_norm=v / 2, y_norm=v / 2)
        simplex = theory.kernel_mse("simplex", 2, v, kind="oprf", x_norm=v / 2, y_norm=v / 2)
        assert 0 < simplex <= iid


def test_pnc_at_very_large_v_is_loud_within_the_budget():
    """pnc_orthogonal (the optimal A by a secant search on quadratures) at v = 1e13: ConvergenceError (an
    mpmath.NoConvergence) within a work budget, not ZeroDivisionError (what the first step, A* of the theorem,
    raised before the fix); mp.dps unchanged."""
    import mpmath

    before = mpmath.mp.dps
    with theory.budget(work=200_000), pytest.raises(mpmath.libmp.NoConvergence):
        theory.kernel_mse("pnc_orthogonal", 2, "1e13", kind="oprf", x_norm="5e12", y_norm="5e12")
    assert mpmath.mp.dps == before


@pytest.mark.parametrize("v", [1.2345678901234e5, 1.2345678901234e13, 3.3e100])
def test_positive_kinds_prefactor_is_exact_at_large_norms(v):
    """kernel_mse of PRFs at x = y = v/2 (not dyadic) against the written-out i.i.d. MSE (e^{v^2} - 1)/m at 100
    digits (Gaussian kernel, c = 1: e^{2 v^2 - 2(|x|^2 + |y|^2)} - K^2 with K = 1).  The prefactor's argument
    -2c(|x|^2 + |y|^2) was summed at working precision: exp magnified that rounding by |x|^2 (relative error
    2.2e-14 at v = 1.2e5, the decimal exponent off by 85 at 1.2e13); now it is formed exactly."""
    with mp.workdps(100):
        vv = mp.mpf(v)
        ref = (mp.exp(vv * vv) - 1) / 4
    for dps in (15, 40):
        with mp.workdps(dps):
            got = theory.kernel_mse("iid", 4, v, x_norm=v / 2, y_norm=v / 2)
        assert abs(got / ref - 1) < mp.mpf(10) ** (2 - dps), (dps, got, ref)


# ---------------------------------------------------------------------------
# Tests added against the surviving formula mutants of the feature-kind code (issue 22 item 5,
# docs/guide/mutation.rst).
#
# Each class is the addition to one target's mutation command (tests/mutation_targets.py): ``TestRegistry``
# (theory/feature_kinds.py), ``TestHyperbolicMap`` (montecarlo/hyperbolic.py), ``TestOprfMap``
# (montecarlo/oprf.py), ``TestHyperbolicTheory`` (theory/hyperbolic.py), ``TestOprfTheory`` (theory/oprf.py),
# ``TestKernelMse`` (the kind hooks of theory/mse.py).  Each test compares two independent computations (a formula
# written out here, brute force over pairs, numerical differentiation, another route to the same limit, a
# certified ball) and shows its power on a wrong alternative where one exists.


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


@pytest.mark.parametrize("d,v", [(3, "0.25"), (8, "1"), (64, "1")])
def test_pnc_optimal_a_takes_at_most_three_derivative_quadratures(monkeypatch, d, v):
    """Issue 38 item 2 (speed without a clock): the secant for the pnc OPRF optimum starts at the double-precision
    model's root with a Newton step on the model's slope and checks each step before evaluating the derivative
    there, so it takes 2-3 quadratures of the differentiated pair term at 15 digits (4 before: a point next to the
    root, and an evaluation after the last step).  The A it returns is a stationary point of the MSE (the
    derivative's quadrature at A, at 30 digits, is below 1e-6 of its value at the theorem's A*).  Power: the
    secant from A* without the model (the fallback) takes more."""
    from theory import oprf

    calls = []
    for name in ("_pnc_pair_term_derivative", "_pnc_pair_term_derivatives"):
        real = getattr(oprf, name)
        monkeypatch.setattr(oprf, name, lambda *args, _real=real, **kw: calls.append(args[2]) or _real(*args, **kw))
    vv = mp.mpf(v)
    with mp.workdps(15):
        a = oprf._parameters("pnc_orthogonal", d, vv, d)["A"]
    assert 1 <= len(calls) <= 3
    calls.clear()
    monkeypatch.setattr(oprf, "_pnc_float_a", lambda *args, **kw: None)
    with mp.workdps(15):
        a_star_start = oprf._parameters("pnc_orthogonal", d, vv, d)["A"]
    assert len(calls) > 3
    assert abs(a / a_star_start - 1) < mp.mpf(2) ** -30


def test_tail_0f1_keeps_relative_accuracy_at_large_h():
    """0F1(;h;z) - 1 - z/h at z >= 1/2 (the pnc OPRF excess integrand): 1 + z/h cancels against 0F1 by up to
    log2(8h(h+1)) bits, which the evaluation now carries (4 guard bits before: relative error 1e-12 at h = 512,
    z = 0.7, 53 bits).  Reference: mpmath at 300 bits.  Power: the same reference refutes the value with its
    last 12 bits changed."""
    from theory import oprf

    for h in ("1.5", "32", "512"):
        for z in ("0.5", "0.7", "3"):
            with mp.workprec(300):
                ref = mp.hyp0f1(mp.mpf(h), mp.mpf(z)) - 1 - mp.mpf(z) / mp.mpf(h)
            with mp.workprec(53):
                got = oprf._tail_0f1(mp.mpf(h), mp.mpf(z))
            with mp.workprec(300):
                assert abs(got / ref - 1) < mp.mpf(2) ** -50, (h, z)
                assert abs(got * (1 + mp.mpf(2) ** -41) / ref - 1) > mp.mpf(2) ** -50


@pytest.mark.parametrize("d,v", [(5, "3"), (1024, "1e-4")])
def test_pnc_optimum_and_excess_share_one_rule(monkeypatch, d, v):
    """At 30 digits the OPRF MSE under pnc_orthogonal (the optimal A's secant, then the pair excess at the optimum)
    builds the pnc rule once, at the excess's precision tier (before: the secant's derivatives built it a
    tier lower and the excess built it again); power: without the preparation (_pnc_rule_at_the_excess_tier a
    no-op) two tiers are built."""
    from theory import oprf

    def call():
        with mp.workdps(30):
            theory.kernel_mse("pnc_orthogonal", d, v, kind="oprf", x_norm=mp.mpf(v) / 2, y_norm=mp.mpf(v) / 2)

    tiers, builds = pnc_rule_builds(monkeypatch, call)
    assert len(tiers) == 1 and builds == 1, (tiers, builds)
    monkeypatch.setattr(oprf, "_pnc_rule_at_the_excess_tier", lambda *args: None)
    tiers, builds = pnc_rule_builds(monkeypatch, call)
    assert len(tiers) == 2 and builds == 2, (tiers, builds)


@pytest.mark.parametrize("d,v", [(8, "1"), (3, "0.25")])
def test_pnc_optimum_builds_only_the_excess_rungs(monkeypatch, d, v):
    """At 30 digits the optimum's derivative quadratures start each piece at the rung the pair excess will use
    (theory.oprf._pnc_rule_at_the_excess_tier's bits as ``start``), so that the whole call builds no more nodes
    than the excess at the optimum alone (148 at d = 8, v = 1: before, 210, a third of them in rungs only the
    derivatives used); power: with ``start`` ignored (the derivatives' first rungs from their own, lower goal)
    more are built."""
    import theory.pnc as pnc
    from theory import _antithetic, oprf

    def call():
        with mp.workdps(30):
            theory.kernel_mse("pnc_orthogonal", d, v, kind="oprf", x_norm=mp.mpf(v) / 2, y_norm=mp.mpf(v) / 2)

    with mp.workdps(30):
        with _context.entered() as bits:
            pmp.prec = bits + 24
            vv = pmp.mpf(v)
            a = oprf._parameters("pnc_orthogonal", d, vv, d)["A"]

            def excess():
                oprf._pnc_rule_at_the_excess_tier(d, vv, a)
                oprf._pair_excess("pnc_orthogonal", d, vv, a)

            alone = pnc_nodes_built(monkeypatch, excess)
    full = pnc_nodes_built(monkeypatch, call)
    assert full <= alone, (full, alone)
    real = _antithetic.expect
    monkeypatch.setattr(pnc, "expect", lambda *args, start=None, **kw: real(*args, **kw))
    without = pnc_nodes_built(monkeypatch, call)
    assert without > full, (full, without)


@pytest.mark.parametrize("d,v", [(5, "1"), (5, "1e-4"), (2, "3")])
def test_pnc_optimal_a_to_the_working_precision(d, v):
    """The pnc optimum A at 30 digits agrees with the one at 45 digits to 1e-18 (the secant stops at a step of
    2^(-p/2), p = 127 bits, with quadratic convergence behind it).  Before: the double-precision model's slope was
    computed with its 0F1 parameter h overwritten by the difference step (one closure variable for both), 1e4-1e6
    times too steep, so the secant's first Newton step was tiny and accepted the model's root: A was off by 2e-16
    at d = 5, v = 1 (and the MSE up to 5e-27: test_pnc_oprf_mse_at_30_digits_against_45)."""
    from theory import oprf

    got = {}
    for dps in (30, 45):
        with mp.workdps(dps):
            with _context.entered() as bits:
                pmp.prec = bits + 24
                got[dps] = oprf._parameters("pnc_orthogonal", d, pmp.mpf(v), d)["A"]
    with pmp.workprec(200):
        assert abs(got[30] / got[45] - 1) < pmp.mpf("1e-18"), (got[30], got[45])


@pytest.mark.parametrize("d", [2, 5, 64])
def test_pnc_float_model_slope_is_the_linearised_one_at_small_v(d):
    """The double-precision model's slope of the MSE's A-derivative at v = 1e-4 equals the linearisation
    16d + 32nC (n the coupled pairs per feature, C the pair's covariance by the working-precision quadrature)
    to 1 %; it was -6.7e5 (d = 2) and -1.1e7 (d = 5) with the overwritten 0F1 parameter."""
    from theory import oprf

    with _context.entered():
        pmp.prec = 77
        vv = pmp.mpf("1e-4")
        n_pnc = oprf._weighted_pairs("pnc_orthogonal", d, d, lambda c: 1 if c == "pnc_orthogonal" else 0)
        root, slope = oprf._pnc_float_a(d, vv, n_pnc, oprf._optimal_a(vv * vv / d))
        expected = 16 * d + 32 * n_pnc * oprf._pnc_pair_covariance(d)
        assert abs(slope / expected - 1) < 0.01, (slope, expected)


@pytest.mark.parametrize("d,v", [(64, "0.25"), (256, "0.25")])
def test_pnc_oprf_mse_at_30_digits_against_45(d, v):
    """The OPRF MSE under pnc_orthogonal with its optimal A at 30 digits agrees with the 45-digit value to 1e-30
    (measured: 4e-32); with the model slope's overwritten 0F1 parameter (the secant stopping at the model's root)
    it was 3.7e-29 (d = 64) and 5.0e-27 (d = 256) off: 26 correct digits of 30."""
    def mse(dps):
        with mp.workdps(dps):
            vv = mp.mpf(v)
            return theory.kernel_mse("pnc_orthogonal", d, vv, kind="oprf", x_norm=vv / 2, y_norm=vv / 2)

    low, high = mse(30), mse(45)
    with mp.workdps(60):
        assert abs(low / high - 1) < mp.mpf("1e-30"), (low, high)


@pytest.mark.parametrize("d,v,newton", [(5, "1", True), (2, "3", True), (8, "0.25", True), (256, "1e-4", False)])
def test_pnc_secant_from_the_float_model_takes_two_derivatives(monkeypatch, d, v, newton):
    """At 30 digits the search for the pnc optimum starts at the float64 model's root.  On the large route (v >=
    about 1e-3) the first quadrature's 0F1 sums also give the second A-derivative (a memoised second pass), and the
    Newton step with that exact slope is accepted by the model's curvature (NEWTON_SAFETY x |g''/2g'| step^2 within
    the tolerance): one quadrature of g.  On the small route (and with the Newton step declined: the model's
    curvature withheld, the power check) the model's-slope step is the secant's second point and the second
    quadrature verifies it: two.  A model off by a few per cent (its linear part's coefficient -16Ad/(1 + 4A)
    instead of /(1 - 4A)) or with a wrong slope takes more (or, with the slope 1e4-1e6 too steep as before,
    stopped after one without converging)."""
    from theory import oprf

    def count(curvature=True):
        calls, seconds = [], []
        for name in ("_pnc_pair_term_derivative", "_pnc_excess_small_derivative", "_pnc_pair_term_derivatives"):
            real = getattr(oprf, name)
            monkeypatch.setattr(oprf, name, lambda *args, _real=real, **kw: calls.append(1) or _real(*args, **kw))
        real_slopes = oprf._pair_term_slopes

        def slopes(*args):
            first, second = real_slopes(*args)
            return first, lambda s: seconds.append(1) or second(s)

        monkeypatch.setattr(oprf, "_pair_term_slopes", slopes)
        real_model = oprf._pnc_float_a
        if not curvature:
            monkeypatch.setattr(oprf, "_pnc_float_a", lambda *args, **kw: (
                lambda r: None if r is None else (r[0], r[1], None))(real_model(*args, **kw)))
        with mp.workdps(30):
            with _context.entered() as bits:
                pmp.prec = bits + 24
                a = oprf._parameters("pnc_orthogonal", d, pmp.mpf(v), d)["A"]
        monkeypatch.undo()
        return len(calls), bool(seconds), a

    calls, second, a = count()
    assert (calls, second) == ((1, True) if newton else (2, False)), (calls, second)
    calls, second, b = count(curvature=False)
    assert (calls, second) == (2, False), (calls, second)
    with mp.workprec(200):
        assert abs(a / b - 1) < mp.mpf(2) ** -60, (a, b)


def test_small_route_integrand_in_fixed_point_against_its_mpf_route(monkeypatch):
    """The pnc small-route integrand and its A-derivative's parts (theory.oprf._ftilde_fixed: (e^x-1-x)F +
    (1+x)(F-1-z/h) + xz/h, and P = 4((t_e + x)F + t_z + z/h), Q = t_e(1/h + f_1) + (1 + x)f_1 + x/h, in fixed point)
    against the same expressions in mpf arithmetic at 60 more bits, d = 2 .. 65536, 60-250 bits, both signs of x:
    |x|, z from 2^-60 to 1/2 (at a common power-of-two scale: the scale carries 2 log2(d) bits for the terms mu^2
    over d^2/2; without them the error at d = 1024 was 114 units) and, one of them above 1/2, up to 64
    (_ftilde_fixed_large: e^x - 1 - x and F - 1 - z/h as differences; without its 2 log2(d) bits the error at
    d = 65536 was 1156 units): within 2^-8 units of 2^-p of the largest of their terms (measured 1e-4 and 2e-6);
    None beyond 2^12 (the mpf route then).  Power: with the 0F1 parameter off by one in d (a mutant of the
    formula) each set misses by far."""
    import random

    from theory import oprf

    rng = random.Random(3)
    small, large = [], []
    for prec in (60, 100, 160, 250):
        for _ in range(60):
            d = rng.choice([2, 3, 5, 8, 64, 257, 1024, 65536])
            x = (-1 if rng.random() < 0.8 else 1) * 2.0 ** rng.uniform(-60, -1.5) * rng.random()
            z = 2.0 ** rng.uniform(-60, -1.5) * rng.random()
            small.append((prec, d, x, z))
            d = rng.choice([2, 3, 5, 8, 64, 257, 1024, 65536])
            big, tiny = 2.0 ** rng.uniform(-1, 6), 2.0 ** rng.uniform(-60, 6) * rng.random()
            x, z = (big, tiny) if rng.random() < 0.5 else (tiny, big)
            large.append((prec, d, x * (-1 if rng.random() < 0.8 else 1), z))

    def worst(cases):
        out = 0
        with _context.entered():
            for prec, d, x, z in cases:
                pmp.prec = prec
                xm, zm, h = pmp.mpf(x), pmp.mpf(z), pmp.mpf(d) / 2
                got = oprf._ftilde_fixed(d, xm, zm, derivative=True)
                assert got[0] == oprf._ftilde_fixed(d, xm, zm)
                with pmp.workprec(prec + 60):
                    tz, tz1 = oprf._tail_0f1_pair(h, zm)
                    te, zh, x1 = oprf._tail_exp(xm), zm / h, 1 + xm
                    big_f, f1 = 1 + zh + tz, (tz1 + zm / (h + 1)) / h
                    for terms, value in (((te * big_f, x1 * tz, xm * zh), got[0]),
                                         ((4 * (te + xm) * big_f, 4 * tz, 4 * zh), got[1]),
                                         ((te * (1 / h + f1), x1 * f1, xm / h), got[2])):
                        big = max(abs(t) for t in terms)
                        out = max(out, abs(value - pmp.fsum(terms)) / big * pmp.mpf(2) ** prec)
        return out

    assert worst(small) < pmp.mpf(2) ** -8
    assert worst(large) < pmp.mpf(2) ** -8
    with _context.entered():
        pmp.prec = 100
        assert oprf._ftilde_fixed(8, pmp.mpf(2) ** 13, pmp.mpf("0.01")) is None
        assert oprf._ftilde_fixed(8, pmp.mpf("-0.01"), pmp.mpf(2) ** 12 * 3, derivative=True) is None
        assert oprf._ftilde_fixed(8, pmp.mpf(-4000), pmp.mpf(4000), derivative=True) is not None
    real = oprf._ftilde_fixed

    def mutant(d, x, z, **kw):
        return real(d + 1, x, z, **kw)

    monkeypatch.setattr(oprf, "_ftilde_fixed", mutant)
    assert worst(small) > 1000
    assert worst(large) > 1000


def test_large_route_integrands_in_fixed_point_against_mpmath(monkeypatch):
    """The pnc pair term's integrand e^(c + 4As) 0F1(;h;ts) and its A-derivative e^(c + 4As)((4s - c0)F0 - c1 s F1)
    (theory.oprf._pair_term_integrand: the exponent in fixed point, theory._antithetic.exp_affine; the 0F1 sums
    and the bracket in fixed point) against mpmath's exp and hyp0f1 at 60 more bits from the same A, v, s: 160
    points, d = 2 .. 1024, v = 2^-12 .. 3, s = 2^-20 d .. 16 d, 60-250 bits, within 32 units of 2^-p of the value
    (of the bracket's larger term for the derivative) (measured 10.5: the roundings of t, ts and c at p bits;
    the mpf expressions they replaced measured 99).  Power: with the 0F1 parameter h + 1/2 (a mutant of the
    formula) both miss by far."""
    import random

    from theory import _antithetic, oprf

    rng = random.Random(7)
    cases = []
    for prec in (60, 100, 160, 250):
        for _ in range(40):
            d = rng.choice([2, 3, 5, 8, 64, 257, 1024])
            v = 2.0 ** rng.uniform(-12, 1.6)
            a = -rng.uniform(0, 0.6) * v * v / d * (1 if rng.random() < 0.8 else -0.1)
            cases.append((prec, d, v, a, d * 2.0 ** rng.uniform(-20, 4)))

    def worst():
        out = [0, 0]
        with _context.entered():
            for prec, d, v, a, s in cases:
                pmp.prec = prec
                vv, aa, ss = pmp.mpf(v), pmp.mpf(a), pmp.mpf(s)
                got = [oprf._pair_term_integrand(d, vv, aa, derivative=k)(ss) for k in (False, True)]
                with pmp.workprec(prec + 60):
                    h, t = pmp.mpf(d) / 2, (1 - 4 * aa) * vv ** 2 / 2
                    base = pmp.exp(d * pmp.log1p(-4 * aa) + 4 * aa * ss)
                    f0, f1 = pmp.hyp0f1(h, t * ss), pmp.hyp0f1(h + 1, t * ss)
                    terms = ((4 * ss - 4 * d / (1 - 4 * aa)) * f0, 2 * vv ** 2 / h * ss * f1)
                    out[0] = max(out[0], abs(got[0] / (base * f0) - 1) * pmp.mpf(2) ** prec)
                    out[1] = max(out[1], abs(got[1] - base * (terms[0] - terms[1])) / (
                        base * max(abs(x) for x in terms)) * pmp.mpf(2) ** prec)
        return out

    assert max(worst()) < 32
    real_pair, real_one = _antithetic.hyp0f1_pair_fixed, _antithetic._hyp0f1_positive
    monkeypatch.setattr(oprf, "hyp0f1_pair_fixed", lambda b2, zt, extra=0: real_pair(b2 + 1, zt, extra))
    monkeypatch.setattr(_antithetic, "_hyp0f1_positive", lambda b2, zt, k0, raw=False: real_one(b2 + 1, zt, k0, raw))
    assert min(worst()) > 1000


@pytest.mark.parametrize("d", [8, 1024])
def test_pnc_small_excess_measures_its_loss(monkeypatch, d):
    """The small-(A, v) pnc pair excess (theory.oprf._pnc_excess_small) starts at log2(d) + 16 extra bits
    (_small_excess_bits; its difference loses log2(d) .. log2(d) + 1, measured) and redoes itself with the loss +
    16 where the loss exceeds its bits less 12: with 4 bits to start (a deliberately short start) it takes a second
    try and returns the same value to the working precision; with that start and one try allowed it raises
    ConvergenceError naming the cancellation (power: the check is live)."""
    import theory.pnc as pnc
    from theory import oprf
    from theory.errors import ConvergenceError

    calls = []
    expect = pnc._expect_over_lower_half

    def counted(*args, **kw):
        calls.append(pmp.prec)
        return expect(*args, **kw)

    monkeypatch.setattr(pnc, "_expect_over_lower_half", counted)
    with mp.workdps(30):
        with _context.entered() as bits:
            pmp.prec = bits + 24
            vv = pmp.mpf("1e-4")
            a = oprf._optimal_a(vv * vv / d)
            good = oprf._pnc_excess_small(d, vv, a)
            assert len(calls) == 1
            monkeypatch.setattr(oprf, "_small_excess_bits", lambda d: 4)
            calls.clear()
            again = oprf._pnc_excess_small(d, vv, a)
            assert len(calls) == 2 and calls[1] > calls[0], calls
            assert abs(again / good - 1) < pmp.mpf(2) ** (8 - pmp.prec)
            monkeypatch.setattr(oprf, "SMALL_EXCESS_TRIES", 1)
            with pytest.raises(ConvergenceError, match="cancels"):
                oprf._pnc_excess_small(d, vv, a)


def test_pair_term_second_derivative_against_mpmath(monkeypatch):
    """The pair term's integrand's A-derivatives from one set of 0F1 sums (theory.oprf._pair_term_slopes, for the
    Newton step of the pnc optimum; the first is _pair_term_integrand's, checked by
    test_large_route_integrands_in_fixed_point_against_mpmath): the second within 128 units of 2^-p of mpmath's
    numerical second derivative of e^(d ln(1-4A) + 4As) 0F1(;h;(1-4A)v^2 s/2) at 80 more bits (90 points, d = 2 .. 1024, v = 2^-10 .. 3, 80-200 bits; measured 50: F2 from the contiguous
    relation loses log2(h(h+1)/(ts)) bits).  Power: with the 0F1 parameter h + 1/2 (a mutant of the formula) it
    misses by far."""
    import random

    from theory import oprf

    rng = random.Random(11)
    cases = []
    for prec in (80, 130, 200):
        for _ in range(30):
            d = rng.choice([2, 3, 5, 8, 64, 257, 1024])
            v = 2.0 ** rng.uniform(-10, 1.6)
            cases.append((prec, d, v, -rng.uniform(0, 0.6) * v * v / d, d * 2.0 ** rng.uniform(-6, 3)))

    def worst():
        out = 0
        with _context.entered():
            for prec, d, v, a, s in cases:
                pmp.prec = prec
                vv, aa, ss = pmp.mpf(v), pmp.mpf(a), pmp.mpf(s)
                g2 = oprf._pair_term_slopes(d, vv, aa)[1](ss)
                with pmp.workprec(prec + 80):
                    h = pmp.mpf(d) / 2

                    def f(A):
                        z = (1 - 4 * A) * vv ** 2 / 2 * ss
                        return pmp.exp(d * pmp.log1p(-4 * A) + 4 * A * ss) * pmp.hyp0f1(h, z)

                    out = max(out, abs(g2 / pmp.diff(f, aa, 2) - 1) * pmp.mpf(2) ** prec)
        return out

    assert worst() < 128
    real = oprf.hyp0f1_pair_fixed
    monkeypatch.setattr(oprf, "hyp0f1_pair_fixed", lambda b2, zt, extra=0: real(b2 + 1, zt, extra))
    assert worst() > 1000
