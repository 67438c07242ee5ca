"""Issue 22 findings in montecarlo kept as regression tests: Monte Carlo has a work limit and a time budget, and a
non-finite estimate is an error naming the cause (no silent NaN).  No wall clock is asserted: the budget test uses
a budget that has expired before the first chunk (certain expiry), and the work limit is checked before any draw."""

import math

import numpy as np
import pytest

import montecarlo as mc
from montecarlo import _checks
from montecarlo.experiments import sweeps


@pytest.mark.parametrize("call", [
    lambda n: mc.kernel_estimate("simplex", np.full(8, 0.1), np.full(8, -0.1), 8, n, rng=0),
    lambda n: mc.empirical_mse("orthogonal", np.full(8, 0.1), np.full(8, -0.1), 8, n, rng=0),
    lambda n: mc.empirical_conformity("simplex", 8, 1.0, m=8, n_draws=n, rng=0),
    lambda n: mc.empirical_pair_moments("simplex", 8, 1.0, m=8, n_draws=n, rng=0),
    lambda n: mc.gram_estimate("iid", np.ones((3, 4)) * 0.1, 4, n, rng=0),
], ids=["kernel_estimate", "empirical_mse", "empirical_conformity", "empirical_pair_moments", "gram_estimate"])
def test_n_draws_2_pow_63_is_refused_before_any_work(call):
    """n_draws = 2**63 ran forever (issue 22); now a WorkLimitError (a ValueError) naming n_draws and MAX_WORK."""
    with pytest.raises(mc.WorkLimitError, match=r"n_draws = 9223372036854775808.*MAX_WORK") as info:
        call(2**63)
    assert isinstance(info.value, ValueError)
    assert call(50) is not None  # power: the same call with a small n_draws runs


def test_the_work_limit_is_read_at_call_time(monkeypatch):
    monkeypatch.setattr(_checks, "MAX_WORK", 1000)
    with pytest.raises(mc.WorkLimitError, match="raise MAX_WORK"):
        mc.empirical_mse("iid", np.full(4, 0.1), np.full(4, 0.1), 4, 10_000, rng=0)


def test_budget_expiry_is_certain_and_loud():
    """A budget that expired before the call: BudgetExceededError before the first chunk (no timing asserted)."""
    with mc.budget(1e-9):
        t0 = 0
        while t0 < 1000:  # let the (tiny) deadline pass without sleeping: a few thousand operations
            t0 += 1
        with pytest.raises(mc.BudgetExceededError, match="budget"):
            mc.empirical_mse("simplex", np.full(8, 0.1), np.full(8, -0.1), 8, 10_000, rng=0)
    # outside the block the deadline is gone
    assert math.isfinite(mc.empirical_mse("simplex", np.full(8, 0.1), np.full(8, -0.1), 8, 100, rng=0).mean)
    with pytest.raises(ValueError, match="seconds"):
        with mc.budget(-1):
            pass


def test_nested_budgets_keep_the_earlier_deadline():
    with mc.budget(1e-9):
        with mc.budget(3600):
            with pytest.raises(mc.BudgetExceededError):
                mc.kernel_estimate("iid", np.full(4, 0.1), np.full(4, 0.1), 4, 10_000, rng=0)


def test_non_finite_conformity_names_v():
    """empirical_conformity('simplex', 8, v=1e3, ...) returned Estimate(nan, nan) (issue 22): e^{w.v} overflows."""
    with pytest.raises(ValueError, match=r"\|v\| = 1000.*v is too large"):
        mc.empirical_conformity("simplex", 8, 1e3, m=8, n_draws=200, rng=0)
    with pytest.raises(ValueError, match="v is too large"):
        mc.empirical_pair_moments("simplex", 8, 1e3, m=8, n_draws=200, rng=0)
    est = mc.empirical_conformity("simplex", 8, 1.0, m=8, n_draws=200, rng=0)  # power: a moderate v is finite
    assert math.isfinite(est.mean) and math.isfinite(est.stderr)


def test_non_finite_mse_names_the_points():
    """The softmax kernel e^{x.y} = e^1600 overflows float64: the MSE is an error naming the points' size."""
    x = np.full(4, 20.0)
    with pytest.raises(ValueError, match=r"\|x\| = 40.*too large"):
        mc.empirical_mse("iid", x, x, 4, 100, kernel="softmax", rng=0)
    assert math.isfinite(mc.empirical_mse("iid", x / 40, x / 40, 4, 100, kernel="softmax", rng=0).mean)


@pytest.mark.parametrize("coupling", ["fast_orthogonal", "fast_simplex"])
def test_fast_projection_is_refused_before_drawing(monkeypatch, coupling):
    """sample_projection of a fast coupling draws 4 p numbers per block (chi_p norms, three Rademacher
    diagonals): above the budget an AllocationError naming m and d, before any draw (at m = 10**12 numpy's
    MemoryError for 21.8 TiB before the check); one block below the limit passes (power)."""
    import warnings

    from montecarlo._checks import AllocationError

    monkeypatch.setattr("montecarlo._checks.MAX_ELEMENTS", 4 * 4 * 25_000 - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mc.FastCouplingBiasWarning)
        with pytest.raises(AllocationError, match=r"m = 100000, d = 3"):
            mc.sample_projection(coupling, 3, 100_000, rng=0)
        with pytest.raises(AllocationError, match=r"m = 1000000000000"):
            mc.sample_projection(coupling, 3, 10**12, rng=0)
        assert mc.sample_projection(coupling, 3, 99_996, rng=0).m == 99_996


def test_exact_kernel_and_gram_estimate_are_loud_outside_float64():
    """exact_kernel raises (naming x and y and the log route) where the kernel overflows float64 or falls below
    its smallest normal number (before: OverflowError from math.exp for the softmax at x.y = 2700, a silent 0
    for the Gaussian at distance 69, so diagnostics.kernel_bias divided by zero); inside, it is the value
    (power: exp(-600) and exp(600) come back to relative accuracy).  gram_estimate refuses empty X or Y
    (before: a (0, 0) mean and a NaN Frobenius error) and points whose every exact kernel value underflows
    (before: 0 / 0 = NaN with a numpy RuntimeWarning)."""
    from montecarlo import diagnostics

    big = np.full(3, 30.0)
    with pytest.raises(ValueError, match="exp.2700.*log_kernel_matrix"):
        mc.exact_kernel(big, big, "softmax")
    with pytest.raises(ValueError, match="gaussian kernel of x and y is exp.-2400"):
        mc.exact_kernel(np.full(3, 20.0), np.full(3, -20.0))
    with pytest.raises(ValueError, match="exp.-2400"):
        diagnostics.kernel_bias("simplex", np.full(3, 20.0), np.full(3, -20.0), 3, 100)
    assert math.isclose(mc.exact_kernel(np.array([20.0, 0.0]), np.array([-10.0, 0.0]), "softmax"),
                        math.exp(-200.0), rel_tol=1e-14)
    assert math.isclose(mc.exact_kernel(np.array([10.0, 0.0]), np.array([-10.0, 0.0])), math.exp(-200.0),
                        rel_tol=1e-14)
    assert math.isclose(mc.exact_kernel(np.array([30.0, 0.0]), np.array([20.0, 0.0]), "softmax"), math.exp(600.0),
                        rel_tol=1e-14)
    for kw in ({"X": np.zeros((0, 3))}, {"X": np.zeros((2, 3)), "Y": np.zeros((0, 3))}):
        name = "Y" if "Y" in kw else "X"
        with pytest.raises(ValueError, match=f"{name} must hold at least one point"):
            mc.gram_estimate("simplex", m=3, n_draws=10, **kw)
    with pytest.raises(ValueError, match="underflows to 0 in float64"):
        mc.gram_estimate("simplex", np.full((2, 3), 30.0), 3, 10, Y=np.full((2, 3), -30.0))
    assert np.isfinite(mc.gram_estimate("simplex", np.full((2, 3), 0.3), 3, 10)[1].mean)


def test_gram_estimate_frobenius_error_and_its_budget(monkeypatch):
    """gram_estimate's relative Frobenius error |K^ - K|_F / |K|_F against an independent route (one draw at a
    time with sample_weights and random_features, 3000 draws each; z within 4.5, false alarm 7e-6; power: twice
    the reference is rejected), a single point is a Gram matrix (N = 1), and the per-draw budget
    N N' 2 + (N + N') (width m) 3 + m d 3 refuses one entry above it by name and passes at it."""
    from montecarlo._checks import AllocationError

    rng = np.random.default_rng(3)
    X = rng.normal(size=(4, 3)) * 0.4
    _, frob = mc.gram_estimate("simplex", X, 3, 3000, rng=1)
    exact = np.exp(mc.features.log_kernel_matrix(X))
    errs = []
    gen = np.random.default_rng(2)
    for _ in range(3000):
        f = mc.random_features(X, mc.sample_weights("simplex", 3, 3, rng=gen))
        errs.append(np.linalg.norm(f @ f.T - exact) / np.linalg.norm(exact))
    ref, se = np.mean(errs), np.std(errs, ddof=1) / math.sqrt(len(errs))
    z = (frob.mean - ref) / math.hypot(frob.stderr, se)
    assert abs(z) <= 4.5, (frob, ref, se)
    assert abs((frob.mean - 2 * ref) / math.hypot(frob.stderr, se)) > 4.5
    one, _ = mc.gram_estimate("simplex", X[:1], 3, 2, rng=1)  # one point, the fewest draws (2)
    assert one.mean.shape == (1, 1)
    with pytest.raises(ValueError, match="n_draws"):
        mc.gram_estimate("simplex", X, 3, 1, rng=1)
    wide = rng.normal(size=(5, 3)) * 0.4  # (N, N') = (4, 5): the Gram matrix's own budget comes first
    monkeypatch.setattr("montecarlo._checks.MAX_ELEMENTS", 4 * 5 - 1)
    with pytest.raises(AllocationError, match=r"the \(N, N'\) = \(4, 5\) Gram matrix"):
        mc.gram_estimate("simplex", X, 3, 10, Y=wide, rng=1)
    per = 4 * 4 * 2 + 8 * 3 * 3 + 3 * 3 * 3
    monkeypatch.setattr("montecarlo._checks.MAX_ELEMENTS", per - 1)
    with pytest.raises(AllocationError, match="one draw of the Gram estimate"):
        mc.gram_estimate("simplex", X, 3, 10, rng=1)
    monkeypatch.setattr("montecarlo._checks.MAX_ELEMENTS", per)
    assert mc.gram_estimate("simplex", X, 3, 10, rng=1)[0].mean.shape == (4, 4)


_BIG = 2**14286  # 4301 digits: beyond Python's int -> str limit (sys.get_int_max_str_digits() = 4300)
_SHOWN = r"2\^14286 \(an integer of 14287 bits\)"


@pytest.mark.parametrize("call", [
    lambda: mc.sample_weights("orthogonal", _BIG, 8),
    lambda: mc.sample_weights("simplex", 8, _BIG),
    lambda: mc.sample_weights("iid", 8, 8, n_draws=_BIG),
    lambda: mc.sample_projection("orthogonal", 8, _BIG),
    lambda: mc.simplex_matrix(_BIG),
    lambda: mc.haar_orthogonal(_BIG, 8),
    lambda: mc.empirical_conformity("simplex", 8, 1.0, m=_BIG, n_draws=4, rng=0),
    lambda: mc.empirical_conformity("simplex", 8, 1.0, m=8, n_draws=_BIG, rng=0),
    lambda: mc.empirical_pair_moments("simplex", 8, 1.0, m=_BIG, n_draws=4, rng=0),
    lambda: mc.diagnostics.standard_directions(_BIG),
    lambda: mc.diagnostics.ks_marginals("orthogonal", 8, _BIG),
    lambda: sweeps.draw_blocks(_BIG),
    lambda: sweeps.paired_weights(("iid", "orthogonal"), 8, 8, _BIG),
], ids=["d", "m", "n_draws", "projection", "simplex_matrix", "haar", "conformity_m", "conformity_n_draws",
        "pair_moments", "directions", "ks", "draw_blocks", "paired_weights"])
def test_huge_sizes_are_named_in_the_allocation_error(call):
    """A size of 4301 digits is refused by the allocation budget with the size named by
    theory.validation.show_int (issue 38).  Before: 'Exceeds the limit (4300 digits) for integer string
    conversion' from the label (or OverflowError from the entry count formatted with :.3g)."""
    from montecarlo._checks import AllocationError, WorkLimitError

    with pytest.raises((AllocationError, WorkLimitError), match=_SHOWN):
        call()


def test_allocation_and_work_errors_format_any_count():
    """check_budget / check_work format counts beyond a float (1e308) by their size, and small ones as before."""
    from montecarlo._checks import AllocationError, WorkLimitError, check_budget, check_work

    with pytest.raises(AllocationError, match=r"would need 2\^14286 \(an integer of 14287 bits\) entries \(2\^14229 "
                                              r"\(an integer of 14230 bits\) EiB in float64\)"):
        check_budget(_BIG, "x", "y")
    with pytest.raises(WorkLimitError, match=r"would process 2\^14286 \(an integer of 14287 bits\) entries"):
        check_work(_BIG, "x", "y")
    with pytest.raises(AllocationError, match=r"would need 1e\+12 entries \(7.28 TiB in float64\)"):
        check_budget(10**12, "x", "y")
