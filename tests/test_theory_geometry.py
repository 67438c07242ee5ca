"""Tests of :mod:`theory.geometry`: the simplex transform's inputs and its work budget."""

import itertools

import numpy as np
import pytest
from mpmath import mp

import theory
from _support import raises_budget, small_budget
from theory import geometry


# ---------------------------------------------------------------------------
# Grids, budgets and input checks (third exploration run, findings 5 to 8).
#
# 5. Ragged grids were accepted: ``np.asarray([[1, 2], [3]], dtype=object)`` is a 1-D array of lists, each
#    list then mapped as a grid of its own, so ``mse_ratio("simplex", "iid", 4, [[1, 2], [3]])`` returned an
#    array of shape (2,) whose elements were arrays of shapes (2,) and (1,).  Now a ValueError naming v.
# 6. ``pnc.pair_conformity_u(kind=...)``: any kind but "prf" ("PRF", "hyperbolic", None, 1) gave the RFF value
#    (0.7694924781 at d = 3, v = 0.5, where the PRF value is 1.2712657666).  Now refused, naming kind.
# 7. The time budget applied per grid point: a 9-point grid under ``theory.budget(0.57)`` ran 2.6 s (0.38 s per
#    point).  An explicit budget now bounds the whole call; the default stays per point (documented in
#    ``theory.budget``).  Tested with a fake clock (one tick per reading), no wall clock.
# 8. pnc's pair functions refused lists (the package docstring promises grids of v, z and d); symbolic's
#    ``simplex_gram_matrix(2.7)`` used n = 2; ``geometry.simplex_apply({1: 2, 3: 4})`` used the dict's keys.


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


# ---------------------------------------------------------------------------
# Issue 22, item 1: the budget reaches every loop of theory whose trip count an argument sets.
#
# Each call below provably needs far more work than its budget allows (the trip counts are in the
# comments: 10^7 to 10^18 iterations, against a work budget of 20 000 units, about 0.2 s; issue 38 made
# the budget a count of work instead of seconds), so the expiry is certain, the same on every machine,
# and no clock is read.  Each must raise theory.errors.ConvergenceError (an mpmath.NoConvergence) naming
# the argument that makes the loop long.  Before the fix the first of them ran forever
# (``for j in range(d // 2)`` without a check).


class _Endless:
    """A 1-D sequence of 10^9 ones that is never materialised (len() and iteration only)."""

    ndim = 1

    def __len__(self):
        return 10**9

    def __iter__(self):
        return itertools.repeat(1.0, 10**9)


def test_simplex_apply_over_a_long_vector():
    with small_budget(), raises_budget(r"simplex_apply at len\(x\) = 1000000000"):
        theory.simplex_apply(_Endless())
