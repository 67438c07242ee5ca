"""Simplex geometry (eq. simplex_vectors, Algorithm 1) and SimRFs+ (Sec. 3.2)."""

import random

import pytest
from mpmath import mp

import theory


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
