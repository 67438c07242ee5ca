"""Simplex geometry (eq. simplex_vectors, Algorithm 1) and SimRFs+ (Sec. 3.2)."""

import random

import mpmath
import numpy as np
import pytest
from mpmath import mp

import theory
from _support import SMALL, small_budget
from theory import simplex_plus as sp


def close(a, b, digits):
    return abs(a - b) <= max(abs(a), abs(b), mp.mpf(10) ** (-digits)) * mp.mpf(10) ** (-digits)


def norm(u):
    return mp.sqrt(mp.fsum(t * t for t in u))


@pytest.mark.parametrize("d", [2, 3, 5, 16])
def test_simplex_vectors_unit_equiangular_closed(d):
    with mp.workdps(30):
        s = theory.simplex_vectors(d)
        rows = [[s[i, j] for j in range(d)] for i in range(d)]
        gram = theory.simplex_gram(d)
        for i in range(d):
            assert close(norm(rows[i]), 1, 28)
            for j in range(d):
                dot = mp.fsum(a * b for a, b in zip(rows[i], rows[j]))
                assert close(dot, gram[i, j], 28)
                if i != j:
                    assert close(dot, mp.mpf(-1) / (d - 1), 28)
        for k in range(d):
            assert abs(mp.fsum(rows[i][k] for i in range(d))) < mp.mpf(10) ** -28


@pytest.mark.parametrize("d", [2, 3, 7, 64])
def test_algorithm_1_equals_dense_S(d):
    rnd = random.Random(d)
    with mp.workdps(30):
        x = [mp.mpf(rnd.gauss(0, 1)) for _ in range(d)]
        s = theory.simplex_vectors(d)
        dense = [mp.fsum(s[i, j] * x[j] for j in range(d)) for i in range(d)]
        fast = theory.simplex_apply(x)
        assert all(close(a, b, 27) for a, b in zip(fast, dense))
    with pytest.raises(ValueError, match="len\\(x\\) must be an integer >= 2"):
        theory.simplex_apply([1.0])


def _bessel_f(d, v, w):
    """Gamma(nu+1) (z/2)^-nu I_nu(z), nu = d/2 - 1, z = v w: the 0F1 of eq. simp+_obj."""
    nu = mp.mpf(d) / 2 - 1
    zz = v * w
    if zz == 0:
        return mp.mpf(1)
    return mp.gamma(nu + 1) * (zz / 2) ** (-nu) * mp.besseli(nu, zz)


@pytest.mark.parametrize("d,v", [(3, "0.5"), (6, "1"), (16, "2")])
def test_exact_objective_against_bessel(d, v):
    rnd = random.Random(11)
    with mp.workdps(30):
        vecs = [[mp.mpf(rnd.gauss(0, 1)) for _ in range(d)] for _ in range(d)]
        v_ = mp.mpf(v)
        ref = mp.fsum(_bessel_f(d, v_, norm([a + b for a, b in zip(vecs[i], vecs[j])]))
                      for i in range(d) for j in range(d) if i != j) / (d * (d - 1))
        assert close(theory.exact_objective(vecs, v), ref, 26)


def test_equal_norms_simplex_attains_lemma_bound():
    """Lemma A.2: for equal norms w the conformity is at least f(2w^2 (m-2)/(m-1))
    with equality for the simplex; random geometries are worse."""
    d, w, v = 6, mp.mpf("2.3"), mp.mpf("0.8")
    rnd = random.Random(5)
    with mp.workdps(30):
        s = theory.simplex_vectors(d)
        simplex = [[w * s[i, j] for j in range(d)] for i in range(d)]
        bound = _bessel_f(d, v, mp.sqrt(2 * w * w * (d - 2) / (d - 1)))
        assert close(theory.exact_objective(simplex, v), bound, 26)
        for _ in range(5):
            vecs = []
            for _ in range(d):
                u = [mp.mpf(rnd.gauss(0, 1)) for _ in range(d)]
                n = norm(u)
                vecs.append([w * t / n for t in u])
            assert theory.exact_objective(vecs, v) > bound


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_update_reaches_closed_form_minimum_of_truncated_objective(seed):
    rnd = random.Random(seed)
    d = 6
    with mp.workdps(30):
        norms = [mp.sqrt(mp.mpf(sum(rnd.gauss(0, 1) ** 2 for _ in range(d)))) for _ in range(d)]
        vecs, passes = theory.simplex_plus_update(norms)
        assert passes >= 2
        # fixed point of eq. simpler_updates_main: each vector anti-parallel to the others' resultant
        total = [mp.fsum(v[k] for v in vecs) for k in range(d)]
        for w, vec in zip(norms, vecs):
            assert close(norm(vec), w, 25)
            r = [t - a for t, a in zip(total, vec)]
            cos = mp.fsum(a * b for a, b in zip(r, vec)) / (norm(r) * norm(vec))
            assert close(cos, -1, 12)
        got = theory.truncated_objective(vecs, 1)
        assert close(got, theory.truncated_objective_minimum(norms, 1), 12)
        # and it is below the simplex geometry's truncated objective (power)
        s = theory.simplex_vectors(d)
        simplex = [[w * s[i, j] for j in range(d)] for i, w in enumerate(norms)]
        assert theory.truncated_objective(simplex, 1) > got * (1 + mp.mpf(10) ** -6)


def test_update_when_one_norm_dominates():
    """If one norm exceeds the sum of the others, the minimum of ||sum w_i|| is
    w_max - sum of the others (all others anti-aligned with it)."""
    norms = [mp.mpf(10), mp.mpf(1), mp.mpf(2), mp.mpf("1.5")]
    with mp.workdps(30):
        vecs, _ = theory.simplex_plus_update(norms)
        resultant = norm([mp.fsum(v[k] for v in vecs) for k in range(4)])
        assert close(resultant, mp.mpf("5.5"), 12)
        assert close(theory.truncated_objective(vecs, 2), theory.truncated_objective_minimum(norms, 2), 12)


def test_update_is_monotone_and_fixed_point_for_equal_norms():
    with mp.workdps(30):
        vecs, passes = theory.simplex_plus_update([mp.mpf(3)] * 5)
        s = theory.simplex_vectors(5)
        assert passes == 1
        assert all(close(vecs[i][j], 3 * s[i, j], 25) for i in range(5) for j in range(5))
        rnd = random.Random(9)
        norms = [mp.mpf(rnd.uniform(1, 3)) for _ in range(5)]
        _, passes, resultants = theory.simplex_plus_update(norms, history=True)
        assert len(resultants) == passes + 1 and passes > 1
        # each update cannot increase ||sum_i w_i|| (module docstring), so neither can a pass
        assert all(b <= a * (1 + mp.mpf(10) ** -25) for a, b in zip(resultants, resultants[1:]))
        assert resultants[-1] < mp.mpf(10) ** -10 < resultants[0]


def test_update_bad_input():
    with pytest.raises(ValueError, match="norms must hold at least 2 positive values"):
        theory.simplex_plus_update([1.0])
    with pytest.raises(ValueError, match="directions must have 3 rows"):
        theory.simplex_plus_update([1, 2, 3], directions=[[1, 0, 0], [0, 1, 0]])
    with pytest.raises(mp.NoConvergence, match="max_passes"):
        theory.simplex_plus_update([1, 2, 3, 2.5], max_passes=1, tol=1e-30)


# ---------------------------------------------------------------------------
# Input handling, round 2: exact inputs of the certified mode, fractions and numpy's long floats,
# huge decimal strings, masked arrays, strings where sequences are expected, SimRFs+ arguments.
#
# References are independent of the code under test: mpmath at 400+ bits through its own exp / 1F1 (the
# certified balls are arb's), exact rationals from ``as_integer_ratio``, and Python's Decimal/Fraction.


def test_string_norms_are_refused():
    """'12' was iterated as the norms 1 and 2 (simplex_plus_update returned vectors, the minimum 0.25)."""
    for call in (lambda: sp.simplex_plus_update("12"), lambda: sp.truncated_objective_minimum("12", 1),
                 lambda: sp.truncated_objective_minimum({1: 0, 2: 0}, 1), lambda: sp.simplex_plus_update(3)):
        with pytest.raises(TypeError, match="norms must be"):
            call()
    with pytest.raises(TypeError, match="norms must not be a numpy masked array"):
        sp.truncated_objective_minimum(np.ma.masked_array([1.0, 2.0], [0, 1]), 1)
    with pytest.raises(ValueError, match=r"norms\[1\] must be >= 0, got -1"):
        sp.truncated_objective_minimum([1, -1], 1)
    with pytest.raises(TypeError, match=r"norms\[0\] must be a real number"):
        sp.simplex_plus_update([True, 2])
    # the closed form, from the docstring's formula by hand: m = 2, d = 2, w = (1, 2), v = 1:
    # Gamma(1)/Gamma(2) / (4*2*1) * (0 + 2*max(0, 4 - 3)^2) = 1/4
    assert sp.truncated_objective_minimum(np.array([1.0, 2.0]), 1) == mpmath.mpf(1) / 4


def test_history_must_be_a_bool():
    with pytest.raises(TypeError, match="history must be True or False, got 'no'"):
        sp.simplex_plus_update([1, 2], history="no")
    _, _, hist = sp.simplex_plus_update([1, 2], directions=[[1, 0], [0, 1]], history=np.bool_(True))
    assert abs(hist[-1] - 1) < mpmath.mpf(10) ** -12  # |w_1 - w_2| = 1 at the fixed point


def test_vectors_errors_name_the_entry():
    """[[True, 0], [0, 1]] raised 'vectors must be a 2-D array-like of reals', not naming the bool."""
    with pytest.raises(TypeError, match=r"vectors\[0\]\[0\] must be a real number .* got True \(bool\)"):
        sp.exact_objective([[True, 0], [0, 1]], 1)
    with pytest.raises(ValueError, match=r"vectors\[1\]\[1\] must be finite"):
        sp.exact_objective([[1, 0], [0, float("nan")]], 1)
    for bad in ("12", ["12", "34"], np.ma.masked_array([[1.0, 2.0], [3.0, 4.0]]), 5, [1, 2]):
        with pytest.raises(TypeError, match="vectors"):
            sp.exact_objective(bad, 1)
    with pytest.raises(TypeError, match="directions"):
        sp.simplex_plus_update([1, 2], directions=["10", "01"])


# ---------------------------------------------------------------------------
# Issue 22, item 1: the budget reaches every loop of theory whose trip count an argument sets.
#
# Each call below provably needs far more work than its budget allows (the trip counts are in the
# comments: 10^7 to 10^18 iterations, against a work budget of 20 000 units, about 0.2 s; issue 38 made
# the budget a count of work instead of seconds), so the expiry is certain, the same on every machine,
# and no clock is read.  Each must raise theory.errors.ConvergenceError (an mpmath.NoConvergence) naming
# the argument that makes the loop long.  Before the fix the first of them ran forever
# (``for j in range(d // 2)`` without a check).


def test_simplex_plus_objective_over_many_vectors():
    # m (m - 1) = 4e6 pair norms (each a 0F1 series) for m = 2000 vectors
    vectors = [[1.0, float(i)] for i in range(2000)]
    with small_budget(), pytest.raises(theory.ConvergenceError, match=rf"work budget of {SMALL} units exhausted"):
        theory.exact_objective(vectors, 1)
