"""Grids, budgets and input checks (third exploration run, findings 5 to 8).

5. Ragged grids were accepted: ``np.asarray([[1, 2], [3]], dtype=object)`` is a 1-D array of lists, each
   list then mapped as a grid of its own, so ``mse_ratio("simplex", "iid", 4, [[1, 2], [3]])`` returned an
   array of shape (2,) whose elements were arrays of shapes (2,) and (1,).  Now a ValueError naming v.
6. ``pnc.pair_conformity_u(kind=...)``: any kind but "prf" ("PRF", "hyperbolic", None, 1) gave the RFF value
   (0.7694924781 at d = 3, v = 0.5, where the PRF value is 1.2712657666).  Now refused, naming kind.
7. The time budget applied per grid point: a 9-point grid under ``theory.budget(0.57)`` ran 2.6 s (0.38 s per
   point).  An explicit budget now bounds the whole call; the default stays per point (documented in
   ``theory.budget``).  Tested with a fake clock (one tick per reading), no wall clock.
8. pnc's pair functions refused lists (the package docstring promises grids of v, z and d); symbolic's
   ``simplex_gram_matrix(2.7)`` used n = 2; ``geometry.simplex_apply({1: 2, 3: 4})`` used the dict's keys.
"""

import types

import mpmath
import numpy as np
import pytest
from mpmath import mp

import theory
from theory import _context, geometry, pnc, symbolic


# ---------------------------------------------------------------------------------------------------------
# 5. ragged grids


@pytest.mark.parametrize("args, name", [
    ((4, [[1, 2], [3]]), "v"),                 # returned array([array(2), array(1)])
    (([4, [5, 6]], 1.0), "d"),                 # returned [mpf, ndarray]
    ((4, [[1, 2], [3, [4]]]), "v"),            # a ragged element one level deeper
    ((4, np.array([[1, 2], [3]], dtype=object)), "v"),  # the same ragged nesting, built by the caller
], ids=["list_of_lists", "scalar_and_list", "deeper", "object_array"])
def test_ragged_grids_are_refused_naming_the_argument(args, name):
    with pytest.raises(ValueError, match=rf"^{name} must be a real number or a rectangular sequence/array"):
        theory.mse_ratio("simplex", "iid", *args)


def test_rectangular_grids_still_map_to_an_array_of_mpf():
    """Power: the rectangular grid of the same values gives an object array of mpf of the broadcast shape, each
    entry the scalar call; a 0-d array element counts as its scalar.  Reference: the iid / orthogonal ratio at
    d = 4 is independent of v to first order; the simplex / iid ratio at v = 1, d = 4 is 0.5103484092754779
    (the finding's run)."""
    out = theory.mse_ratio("simplex", "iid", 4, [[1, 2], [3, 4]])
    assert out.shape == (2, 2) and out.dtype == object
    assert all(isinstance(x, mpmath.mpf) for x in out.flat)
    for idx, v in np.ndenumerate(np.array([[1, 2], [3, 4]])):
        assert out[idx] == theory.mse_ratio("simplex", "iid", 4, int(v))
    assert abs(out[0, 0] - mpmath.mpf("0.51034840927547787")) < 1e-15
    mixed = theory.mse_ratio("simplex", "iid", 4, [np.array(1.0), 2])
    assert mixed.shape == (2,) and mixed[0] == out[0, 0] and mixed[1] == out[0, 1]
    # the caller's object array is not modified by the unwrapping of 0-d elements
    given = np.empty(2, dtype=object)
    given[0], given[1] = np.array(1.0), 2
    theory.mse_ratio("simplex", "iid", 4, given)
    assert isinstance(given[0], np.ndarray)


# ---------------------------------------------------------------------------------------------------------
# 6. pair_conformity_u's kind


def _pair_sum(d, u):
    r"""x_1 + x_2 at the uniform variable u for d = 2 (a = 1: P^{-1}(u) = -ln(1-u), Q^{-1}(u) = -ln u) and
    d = 4 (a = 2: (1 + x) e^{-x} = Q_2(x), so 1 + x = -W_{-1}(-Q/e), Lambert's W)."""
    if d == 2:
        return -mp.log(u) - mp.log1p(-u)
    return -mp.lambertw(-(1 - u) / mp.e, -1).real - mp.lambertw(-u / mp.e, -1).real - 2


def _reference(d, f):
    r""":math:`\int_0^1 f(x_1 + x_2)\,du` at 40 digits (tanh-sinh handles the endpoints' logarithms)."""
    with mp.workdps(40):
        return mp.quad(lambda u: f(_pair_sum(d, u)), [0, mp.mpf(1) / 2, 1])


@pytest.mark.parametrize("kind, exc", [("PRF", ValueError), ("hyperbolic", ValueError), (None, TypeError),
                                       (1, TypeError)])
def test_pair_conformity_u_refuses_unknown_kinds(kind, exc):
    """Each of these gave the RFF value 0.7694924781 (d = 3, v = 0.5) before."""
    with pytest.raises(exc, match=r"kind must be one of 'prf', 'rff'"):
        pnc.pair_conformity_u(3, 0.5, kind=kind)


def test_pair_conformity_u_kinds_against_the_closed_form_quantiles():
    """The two accepted kinds, over a grid of v, against the d = 2 reference (closed-form quantiles, below):
    PRF 1.2691722948 and RFF 0.7676699193 at v = 0.5 -- an old "PRF" answer (the RFF value) is 0.5 off."""
    prf, rff = pnc.pair_conformity_u(2, ["0.5", 1]), pnc.pair_conformity_u(2, ["0.5", 1], kind="rff")
    for j, v in enumerate((mpmath.mpf("0.5"), mpmath.mpf(1))):
        t = v ** 2 / 2
        assert abs(prf[j] / _reference(2, lambda s: mp.hyp0f1(1, t * s)) - 1) < 1e-14
        assert abs(rff[j] / _reference(2, lambda s: mp.hyp0f1(1, -t * s)) - 1) < 1e-14
    assert abs(prf[0] - mpmath.mpf("1.2691722948")) < 1e-10 and abs(rff[0] - mpmath.mpf("0.7676699193")) < 1e-10


# ---------------------------------------------------------------------------------------------------------
# 7. one budget for the whole grid under an explicit theory.budget (fake clock: no wall-clock assertion)


@pytest.fixture
def ticking_clock(monkeypatch):
    """theory._context's clock, replaced by one that advances one 'second' per reading: time is then the
    number of clock readings (deadlines set, budget checks made), the same on every machine."""
    now = [0.0]

    def monotonic():
        now[0] += 1.0
        return now[0]

    monkeypatch.setattr(_context, "time", types.SimpleNamespace(monotonic=monotonic))
    return now


def _hyperbolic(v):
    return theory.kernel_mse_ratio("simplex", "iid", 7, v, kind="hyperbolic")


def test_an_explicit_budget_bounds_the_whole_grid(ticking_clock):
    """The finding's call: one point of the hyperbolic ratio reads the clock 33 times (its budget checks), a
    9-point grid about 300 times.  Under budget(100) one point finishes, and before the fix so did the grid
    (each point got its own 100); now the grid raises, naming the budget."""
    with theory.budget(100):
        assert _hyperbolic(0.8) > 0  # power: a single point fits the budget
        with pytest.raises(theory.ConvergenceError, match=r"time budget of 100 s exhausted"):
            _hyperbolic([0.8] * 9)
    # the grid's deadline is gone afterwards (also after the exception)
    assert _context._state().grid_deadline is None and _context._state().deadline is None


def test_an_explicit_budget_bounds_a_grid_of_cheap_points(ticking_clock):
    """gaussian_kernel makes no budget check of its own (one clock reading per point, when its call starts):
    before the fix a grid of any length ran to its end under any budget; now each point starts only before
    the grid's deadline."""
    with theory.budget(5):
        assert len(theory.gaussian_kernel([0.5] * 3)) == 3  # power: a grid within the budget
        with pytest.raises(theory.ConvergenceError, match=r"grid of 9 points .*time budget of 5 s exhausted"):
            theory.gaussian_kernel([0.5] * 9)


def test_the_default_budget_reads_no_clock(ticking_clock):
    """Without a budget block there is no deadline at all (issue 38: the default budget counts work, per point,
    tests/test_work_budget.py): the same 9-point grid that budget(100) refuses (test above) finishes, and the
    clock is not read once."""
    out = _hyperbolic([0.8] * 9)
    assert out.shape == (9,) and len(set(out)) == 1
    assert ticking_clock[0] == 0.0
    with pytest.raises(theory.ConvergenceError, match=r"time budget of 100 s exhausted"):
        with theory.budget(100):
            _hyperbolic([0.8] * 9)


def test_an_inner_budget_sets_the_grid_deadline(ticking_clock):
    """An inner budget block sets the budget of the calls inside it (as for scalar calls): a long inner budget
    lets the grid finish, a short one inside a long one stops it."""
    with theory.budget(5):
        with theory.budget(10_000):
            assert _hyperbolic([0.8] * 9).shape == (9,)
    with theory.budget(10_000):
        with theory.budget(100):
            with pytest.raises(theory.ConvergenceError):
                _hyperbolic([0.8] * 9)


# ---------------------------------------------------------------------------------------------------------
# 8. pnc grids (independent references: the d = 2 and d = 4 pair laws in closed form)


def test_pnc_pair_functions_accept_grids():
    """pair_conformity, rff_pair_conformity, pair_conformity_u and pair_norm_product_moment refused lists for v,
    z and d (ArgumentTypeError) though hyperbolic_pair_term and the package docstring accept them.  Reference:
    E[0F1(; d/2; +-(v^2/2) s)] over the uniform variable with the closed-form quantiles of d = 2 and 4."""
    ds, vs = [2, 4], [mpmath.mpf("0.5"), mpmath.mpf(1)]
    prf = pnc.pair_conformity(ds, vs)
    rff = pnc.rff_pair_conformity(np.array(ds), z=vs[::-1])
    assert prf.shape == rff.shape == (2,)
    for j, d in enumerate(ds):
        t, tz = vs[j] ** 2 / 2, vs[::-1][j] ** 2 / 2
        ref_p = _reference(d, lambda s: mp.hyp0f1(mp.mpf(d) / 2, t * s))
        ref_r = _reference(d, lambda s: mp.hyp0f1(mp.mpf(d) / 2, -tz * s))
        assert abs(prf[j] / ref_p - 1) < 1e-14 and abs(rff[j] / ref_r - 1) < 1e-14, (d, prf[j], ref_p)
    moments = pnc.pair_norm_product_moment((2, 4))
    with mp.workdps(40):  # M = 4 E[x1 x2]; d = 2: 4 (2 - pi^2/6) = 1.42026...
        assert abs(moments[0] / (8 - 2 * mp.pi ** 2 / 3) - 1) < 1e-15
        ref4 = 4 * mp.quad(lambda u: (-mp.lambertw(-(1 - u) / mp.e, -1).real - 1)
                           * (-mp.lambertw(-u / mp.e, -1).real - 1), [0, mp.mpf(1) / 2, 1])
    assert abs(moments[1] / ref4 - 1) < 1e-14
    assert moments[1] < 16  # below d^2, the independent norms' value: the coupling is negative


@pytest.mark.parametrize("call", [
    lambda: pnc.pair_conformity(3, [[1], [1, 2]]),
    lambda: pnc.rff_pair_conformity([3, [4]], 1),
    lambda: pnc.pair_norm_product_moment([[2, 3], [4]]),
], ids=["v", "d", "moment_d"])
def test_pnc_ragged_grids_are_refused(call):
    with pytest.raises(ValueError, match=r"(v|d) must be a real number or a rectangular sequence/array"):
        call()


@pytest.mark.parametrize("n", [2.7, "3", 3.0, True])
def test_simplex_gram_matrix_refuses_non_integers(n):
    """2.7 gave the n = 2 matrix, "3" the n = 3 one (int(n))."""
    with pytest.raises(TypeError, match=r"n must be an integer >= 2"):
        symbolic.simplex_gram_matrix(n)
    with pytest.raises(ValueError, match=r"n must be an integer >= 2"):
        symbolic.simplex_gram_matrix(1)


def test_simplex_gram_matrix_bounds_n():
    """n = 10**6 started building 10^12 sympy expressions (no bound); now a ValueError naming n and the range,
    before any work; the bound itself still computes (power: the matrix at GRAM_MAX_N has its closed form's
    corner entries)."""
    import sympy as sp

    with pytest.raises(ValueError, match="n must be an integer"):  # (first: the old code computed it, about 14 s)
        symbolic.simplex_gram_matrix(symbolic.GRAM_MAX_N + 1)
    with pytest.raises(ValueError, match=rf"n must be an integer >= 2 and <= {symbolic.GRAM_MAX_N}, got 1000000"):
        symbolic.simplex_gram_matrix(10**6)
    g = symbolic.simplex_gram_matrix(24)
    assert g[0, 0] == 1 and g[0, 23] == g[22, 23] == sp.Rational(-1, 23)


def test_simplex_gram_matrix_of_an_integer():
    """Power: n = 3 (numpy's int too) gives d/(d-1) = 3/2 ... scaled: unit diagonal, -1/(n-1) off it."""
    import sympy as sp

    for n in (3, np.int64(3)):
        g = symbolic.simplex_gram_matrix(n)
        assert g == sp.Matrix(3, 3, lambda i, j: 1 if i == j else sp.Rational(-1, 2))


def test_symbolic_concrete_dimensions_refuse_floats():
    """chi2d_reduction(2.7) integrated at d = 2 (sp.Integer truncates); simrf_series_term(2.5) failed inside
    range() with a message not naming the argument."""
    with pytest.raises(TypeError, match="concrete_d must be an integer"):
        symbolic.chi2d_reduction(2.7)
    with pytest.raises(TypeError, match="kk must be an integer"):
        symbolic.simrf_series_term(2.5)


@pytest.mark.parametrize("x", [{1: 2, 3: 4}, {1.0, 2.0}, {1: 2, 3: 4}.keys()], ids=["dict", "set", "keys"])
def test_simplex_apply_refuses_mappings_and_sets(x):
    """{1: 2, 3: 4} was taken as its keys [1, 3] (giving [-1, 1])."""
    with pytest.raises(TypeError, match=r"^x must be a sequence or 1-D array"):
        geometry.simplex_apply(x)


def test_simplex_apply_of_sequences():
    """Power: a list, a range and a numpy array give S x; reference: the explicit rows of S (module
    docstring) at d = 3 applied to (0, 1, 2), at 30 digits."""
    with mp.workdps(30):
        d = 3
        b = (mp.sqrt(d) + 1) / (d - 1) ** mp.mpf(1.5)
        a = mp.sqrt(mp.mpf(d) / (d - 1))
        rows = [[(a if j == i else 0) - (b if j < d - 1 else 0) for j in range(d)] for i in range(d - 1)]
        rows.append([1 / mp.sqrt(d - 1) if j < d - 1 else 0 for j in range(d)])
        ref = [mp.fsum(r[j] * j for j in range(d)) for r in rows]
    for x in ([0, 1, 2], range(3), np.arange(3.0)):
        got = geometry.simplex_apply(x)
        assert all(abs(g - r) < 1e-15 for g, r in zip(got, ref))
