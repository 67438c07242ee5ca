"""Optimised PRFs (FAVOR++) under every coupling (issue 19 item 1-2): closed forms by two routes, the optimal A,
the theorem that the pair term does not depend on A, Monte Carlo agreement with asserted power (|z| <= 4.5 each,
false alarm 6.8e-6), the correct-or-loud contract and bad input."""

import math

import numpy as np
import pytest
from mpmath import mp

import montecarlo as mc
import theory
from paper_checks._compare import Z_CRIT, agrees, point_pair
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
    smallest v, where the variance dominates the MSE)."""
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
        assert abs(mse() / quad - 1) > mp.mpf("1e-15")


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
