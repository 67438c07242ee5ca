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
