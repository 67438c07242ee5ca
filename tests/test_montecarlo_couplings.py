"""Deterministic structure of the samplers: simplex geometry, Algorithm 1, blocks, shapes, errors.

These checks are exact (floating-point tolerances), not statistical, except the marginals' KS tests at the
end (their statistical design is stated there); the estimators' distributional checks are in
``test_montecarlo_estimators.py``.
"""

import math
import re
import sys

import numpy as np
import pytest
from mpmath import mp
from scipy import stats

import montecarlo as mc
import theory
from montecarlo._backend import namespace, Random
from montecarlo.diagnostics import ks_marginals, standard_directions
from paper_checks._compare import FAMILY_ALPHA, Z_CRIT

DIMS = [2, 3, 5, 16, 64]


def _unit_rows(w):
    return w / np.linalg.norm(w, axis=-1, keepdims=True)


@pytest.mark.parametrize("d", DIMS)
def test_simplex_block_cosines_and_zero_sum(d):
    """Sec. 3: rows of one simplex block subtend cos = -1/(d-1) exactly and their directions sum to 0."""
    w = mc.sample_weights("simplex", d, d, rng=d, n_draws=20)
    u = _unit_rows(w)
    gram = u @ np.swapaxes(u, -1, -2)
    off = ~np.eye(d, dtype=bool)
    assert np.max(np.abs(gram[:, off] + 1.0 / (d - 1))) < 1e-12
    assert np.max(np.abs(np.sum(u, axis=1))) < 1e-12
    # the orthogonal coupling, by contrast, has cos = 0 (same check fails for it)
    uo = _unit_rows(mc.sample_weights("orthogonal", d, d, rng=d, n_draws=20))
    go = uo @ np.swapaxes(uo, -1, -2)
    assert np.max(np.abs(go[:, off])) < 1e-12
    assert np.max(np.abs(go[:, off] + 1.0 / (d - 1))) > 0.4 / (d - 1)


@pytest.mark.parametrize("d", [2, 3, 7, 64])
def test_simplex_matrix_matches_theory_and_closed_gram(d):
    """Dense S equals theory.simplex_vectors (independent mpmath construction); S S^T closed form."""
    s = mc.simplex_matrix(d)
    with mp.workdps(30):
        ref = np.array(theory.simplex_vectors(d).tolist(), dtype=float)
    assert np.max(np.abs(s - ref)) < 1e-14
    gram = d / (d - 1) * np.eye(d) - 1.0 / (d - 1)
    assert np.max(np.abs(s @ s.T - gram)) < 1e-13
    assert np.max(np.abs(s[:, -1])) == 0.0  # all s_i lie in e_d^perp


@pytest.mark.parametrize("d", [2, 3, 10, 64])
def test_algorithm1_equals_dense_s(d):
    """App. B.1: Algorithm 1 (vectorised, any axis) equals the dense matrix S, and theory.simplex_apply."""
    rng = np.random.default_rng(d)
    x = rng.standard_normal((7, d))
    s = mc.simplex_matrix(d)
    assert np.max(np.abs(mc.simplex_apply(x) - x @ s.T)) < 1e-12
    m = rng.standard_normal((3, d, 4))
    assert np.max(np.abs(mc.simplex_apply(m, axis=-2) - s @ m)) < 1e-12
    with mp.workdps(30):
        ref = np.array([float(t) for t in theory.simplex_apply(list(x[0]))])
    assert np.max(np.abs(mc.simplex_apply(x[0]) - ref)) < 1e-12


@pytest.mark.parametrize("coupling", ["orthogonal", "simplex", "simplex_plus"])
@pytest.mark.parametrize("route", mc.HAAR_ROUTES)
def test_block_geometry_is_rotation_of_reference(coupling, route):
    """W W^T of a block equals D G D with G the reference Gram (I, S S^T, or the SimRFs+ fixed point)."""
    d = 6
    w = mc.sample_weights(coupling, d, d, rng=11, n_draws=5, haar_route=route)
    norms = np.linalg.norm(w, axis=-1)
    u = _unit_rows(w)
    gram = u @ np.swapaxes(u, -1, -2)
    if coupling == "orthogonal":
        assert np.max(np.abs(gram - np.eye(d))) < 1e-12
    elif coupling == "simplex":
        assert np.max(np.abs(gram - (d / (d - 1) * np.eye(d) - 1 / (d - 1)))) < 1e-12
    else:
        # fixed point of eq. simpler_updates_main: w_i antiparallel to sum_{j != i} w_j
        for k in range(5):
            r = w[k].sum(axis=0)[None, :] - w[k]
            cos = np.sum(r * w[k], axis=1) / (np.linalg.norm(r, axis=1) * norms[k])
            assert np.max(np.abs(cos + 1)) < 1e-9


def test_haar_routes_orthogonal():
    for route in mc.HAAR_ROUTES:
        q = mc.haar_orthogonal(4, 9, rng=1, route=route)
        assert q.shape == (4, 9, 9)
        assert np.max(np.abs(q @ np.swapaxes(q, -1, -2) - np.eye(9))) < 1e-12


def test_haar_columns_are_the_first_columns_and_refuse_bad_cols():
    """cols = c: orthonormal d x c frames on every route, with the law of a Haar matrix's first
    columns (second moment of an entry, |z| <= 4.5, with power); cols outside [1, d] is refused."""
    for route in mc.HAAR_ROUTES:
        f = mc.haar_orthogonal(3, 9, rng=1, route=route, cols=4)
        assert f.shape == (3, 9, 4)
        assert np.max(np.abs(np.swapaxes(f, -1, -2) @ f - np.eye(4))) < 1e-12
    # law: the first entry of a uniform unit vector in R^9 has E = 0 and E[x^2] = 1/9
    x = mc.haar_orthogonal(200_000, 9, rng=2, cols=1)[:, 0, 0]
    se = np.sqrt((x ** 4).mean() - (x ** 2).mean() ** 2) / np.sqrt(x.size)
    assert abs((x ** 2).mean() - 1 / 9) <= Z_CRIT * se
    assert abs((x ** 2).mean() - 1 / 8) > Z_CRIT * se  # power: the wrong dimension is rejected
    for bad in (0, 10):
        with pytest.raises(ValueError, match="cols"):
            mc.haar_orthogonal(1, 9, cols=bad)


@pytest.mark.parametrize("d", [3, 6, 16])
def test_simplex_plus_matches_theory_reference(d):
    """Vectorised SimRFs+ update equals theory.simplex_plus_update (mpmath, sequential) for the same norms."""
    rng = np.random.default_rng(100 + d)
    norms = np.sqrt(rng.chisquare(d, (2, d)))
    vec, passes, conv = mc.simplex_plus_vectors(norms, tol=1e-14)
    with mp.workdps(30):
        for k in range(2):
            ref, _ = theory.simplex_plus_update([float(t) for t in norms[k]], tol=mp.mpf("1e-25"))
            ref = np.array([[float(t) for t in row] for row in ref])
            assert np.max(np.abs(vec[k] - ref)) < 1e-11
    assert passes.shape == (2,) and np.all(passes >= 1) and np.all(conv)
    # the reference geometry is not the simplex: the same comparison against w_i s_i fails
    start = norms[0][:, None] * mc.simplex_matrix(d)
    assert np.max(np.abs(vec[0] - start)) > 1e-6


def test_simplex_plus_reports_passes_and_handles_the_cap():
    w, info = mc.sample_weights("simplex_plus", 8, 20, rng=3, return_info=True)
    assert w.shape == (20, 8)
    assert info["passes"].shape == (3,) and np.all(info["passes"] >= 1) and np.all(info["converged"])
    norms = np.sqrt(np.random.default_rng(0).chisquare(3, (4, 3)))
    with pytest.raises(mc.ConvergenceError, match="raise max_passes or tol"):
        mc.simplex_plus_vectors(norms, tol=1e-14, max_passes=2, on_unconverged="raise")
    with pytest.warns(RuntimeWarning, match="not converged"):
        vec, passes, conv = mc.simplex_plus_vectors(norms, tol=1e-14, max_passes=2)
    assert not np.all(conv) and np.all(passes[~conv] == 2)
    # unconverged blocks keep their last iterate: norms intact, and ||sum_i w_i|| (the truncated
    # objective, non-increasing under the update) below its value at the simplex start
    assert np.allclose(np.linalg.norm(vec, axis=-1), norms, rtol=1e-13)
    start = norms[:, :, None] * mc.simplex_matrix(3)[None]
    assert np.all(np.linalg.norm(vec.sum(axis=1), axis=-1) <= np.linalg.norm(start.sum(axis=1), axis=-1) + 1e-12)
    # slow case: norms close to the polygon inequality 2 max w = sum w (here 2*2 = 1 + 3 - 0.001)
    near = np.array([[1.0, 2.0, 2.999]])
    _, p_near, c_near = mc.simplex_plus_vectors(near, max_passes=20000)
    assert c_near[0] and p_near[0] > 500


@pytest.mark.parametrize("coupling", mc.COUPLINGS)
@pytest.mark.parametrize("d,m", [(4, 4), (4, 3), (4, 10), (5, 13), (16, 40)])
def test_shapes_and_block_structure(coupling, d, m):
    """m > d: independent blocks, last one truncated; in-block pairs keep the coupling's geometry."""
    w, info = mc.sample_weights(coupling, d, m, rng=2, return_info=True)
    assert w.shape == (m, d) and w.dtype == np.float64 and np.all(np.isfinite(w))
    b = info["block_rows"]
    assert b == (mc.next_power_of_two(d) if coupling in mc.FAST_COUPLINGS else d)
    if coupling in ("orthogonal", "fast_orthogonal") and b == d:
        for start in range(0, m, b):
            blk = _unit_rows(w[start:start + b])
            g = blk @ blk.T
            assert np.max(np.abs(g - np.eye(len(blk)))) < 1e-12
    if coupling == "simplex":
        for start in range(0, m, b):
            blk = _unit_rows(w[start:start + b])
            g = blk @ blk.T
            off = ~np.eye(len(blk), dtype=bool)
            assert np.max(np.abs(g[off] + 1 / (d - 1))) < 1e-12
        if m > d:  # across blocks: not coupled
            u = _unit_rows(w)
            assert np.max(np.abs(u[0] @ u[d:].T + 1 / (d - 1))) > 1e-3


def test_batch_draws_and_reproducibility():
    a = mc.sample_weights("simplex", 5, 7, rng=42, n_draws=3)
    b = mc.sample_weights("simplex", 5, 7, rng=42, n_draws=3)
    c = mc.sample_weights("simplex", 5, 7, rng=43, n_draws=3)
    assert a.shape == (3, 7, 5)
    assert np.array_equal(a, b) and not np.allclose(a, c)
    g = np.random.default_rng(5)
    x1 = mc.sample_weights("iid", 3, 3, rng=g)
    x2 = mc.sample_weights("iid", 3, 3, rng=g)
    assert not np.allclose(x1, x2)  # a Generator advances
    assert np.array_equal(x1, mc.sample_weights("iid", 3, 3, rng=np.random.default_rng(5)))


def test_fwht_is_normalised_hadamard():
    """fwht equals the recursive H of App. B.2 (built densely here) for p = 1..64, and
    scipy.linalg.hadamard / sqrt(p) up to p = 2048 (covers every radix-16 factorisation)."""
    from scipy.linalg import hadamard

    for k in range(7):
        p = 2**k
        h = np.ones((1, 1))
        for _ in range(k):
            h = np.block([[h, h], [h, -h]]) / math.sqrt(2)
        x = np.random.default_rng(k).standard_normal((3, p))
        assert np.max(np.abs(mc.fwht(x) - x @ h.T)) < 1e-12
    for k in range(7, 12):
        p = 2**k
        x = np.random.default_rng(k).standard_normal((2, 3, p))
        assert np.max(np.abs(mc.fwht(x) - x @ hadamard(p).T / math.sqrt(p))) < 1e-11
    with pytest.raises(ValueError, match="power-of-two"):
        mc.fwht(np.ones((2, 6)))


@pytest.mark.parametrize("coupling", mc.FAST_COUPLINGS)
@pytest.mark.parametrize("d", [5, 8, 33])
def test_fast_projection_matches_dense_weights(coupling, d):
    """Structured O(p log p) application equals the dense weights from the same seed (zero padding)."""
    m = 3 * d + 1
    proj = mc.sample_projection(coupling, d, m, rng=9)
    w = mc.sample_weights(coupling, d, m, rng=9)
    x = np.random.default_rng(0).standard_normal((6, d))
    assert proj.padded_d == mc.next_power_of_two(d)
    assert np.max(np.abs(proj(x) - x @ w.T)) < 1e-10
    assert np.array_equal(proj.weights, w)
    # rows of a full padded block are orthogonal in R^p with chi_p norms; the simplex variant has cos -1/(p-1)
    p = proj.padded_d
    full = mc.sample_projection(coupling, d, p, rng=9)
    rows = full.project(np.eye(d))  # (d, p): columns are the first d coordinates of the p rows
    assert rows.shape == (d, p)


def test_dtype_and_float32():
    w = mc.sample_weights("simplex", 8, 8, rng=0, dtype="float32")
    assert w.dtype == np.float32
    u = _unit_rows(w.astype(np.float64))
    off = ~np.eye(8, dtype=bool)
    assert np.max(np.abs((u @ u.T)[off] + 1 / 7)) < 1e-5


# ---------------------------------------------------------------------------
# Bad input: ValueError naming the argument


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        (("gaussian", 4, 4), {}, "coupling must be one of 'iid', 'orthogonal', 'simplex', 'simplex_plus'"),
        (("Simplex", 4, 4), {}, "coupling must be one of"),
        (("simplex", 1, 4), {}, r"d must be an integer >= 2 for the simplex coupling, got 1"),
        (("simplex_plus", 1, 4), {}, r"d must be an integer >= 2 for the simplex_plus coupling"),
        (("fast_simplex", 1, 4), {}, r"d must be an integer >= 2 for the fast_simplex coupling"),
        (("iid", 0, 4), {}, r"d must be an integer >= 1"),
        (("iid", 4.0, 4), {}, r"d must be an integer >= 1, got 4.0"),
        (("orthogonal", 4, 0), {}, r"m must be an integer >= 1, got 0"),
        (("orthogonal", 4, True), {}, r"m must be an integer >= 1"),
        (("orthogonal", 4, 4), {"rng": -1}, r"rng must be None, an int >= 0"),
        (("orthogonal", 4, 4), {"rng": 1.5}, r"rng must be None"),
        (("orthogonal", 4, 4), {"n_draws": 0}, r"n_draws must be an integer >= 1"),
        (("orthogonal", 4, 4), {"xp": "jax"}, r"xp must be one of 'numpy', 'torch', 'cupy'"),
        (("orthogonal", 4, 4), {"device": "cuda"}, r"device must be None or 'cpu' for the numpy backend"),
        (("orthogonal", 4, 4), {"dtype": "float16"}, r"dtype must be 'float32' or 'float64'"),
        (("orthogonal", 4, 4), {"haar_route": "gram_schmidt"}, r"haar_route must be one of 'qr', 'cpu_qr'"),
    ],
)
def test_sample_weights_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        mc.sample_weights(*args, **kwargs)


def test_simplex_apply_bad_input():
    with pytest.raises(ValueError, match="length >= 2"):
        mc.simplex_apply(np.ones((3, 1)))
    with pytest.raises(ValueError, match="d must be an integer >= 2 for the simplex coupling"):
        mc.simplex_matrix(1)


@pytest.mark.parametrize("p", [4, 8, 64, 2048])
def test_fwht_and_simplex_apply_near_the_largest_float(p):
    """Finite x whose transform is representable but whose unnormalised intermediate sums are not (issue 38:
    fwht(np.full(8, 1e308 / 2)) and simplex_apply(np.full(4, 1.7e308 / 4)) came back inf / NaN): the result
    is the transform of x / s scaled by s (s a power of two: exact), here against the dense scipy Hadamard
    matrix and the dense simplex matrix of montecarlo applied to x / s, to 1e-14 of the 2-norm (every entry of
    an orthogonal transform is at most |x|_2 = 1.6e308 < 1.8e308, while the sums reach 0.8 sqrt(p) |x|_2); a transform
    beyond the largest float raises ValueError naming x (np.full(8, 1e308): sqrt(8) 1e308 overflows)."""
    from scipy.linalg import hadamard

    s = 2.0**1000
    rng = np.random.default_rng(p)
    x = np.abs(rng.standard_normal((3, p)))
    x *= 1.6e308 / np.linalg.norm(x, axis=1, keepdims=True)  # |x|_2 = 1.6e308 per row, all entries > 0
    with np.errstate(over="ignore"):
        assert not np.all(np.isfinite(np.sum(x[:, :-1], axis=1)))  # (plain sums overflow)
    with np.errstate(over="raise", invalid="raise"):  # (no numpy warning escapes either)
        y = mc.fwht(x)
        ref = ((x / s) @ hadamard(p).T / math.sqrt(p)) * s
        assert np.all(np.isfinite(y)) and np.max(np.abs(y - ref)) < 1e-14 * np.linalg.norm(x / s) * s
        d = p - 1 if p > 4 else p
        xs = x[:, :d]
        z = mc.simplex_apply(xs)
        ref = ((xs / s) @ mc.simplex_matrix(d).T) * s
        assert np.all(np.isfinite(z)) and np.max(np.abs(z - ref)) < 1e-14 * np.linalg.norm(xs / s) * s
        zt = mc.simplex_apply(np.ascontiguousarray(xs.T), axis=0)  # (another summation order)
        assert np.max(np.abs(zt.T - ref)) < 1e-14 * np.linalg.norm(xs / s) * s
    for call in (lambda: mc.fwht(np.full(8, 1e308)), lambda: mc.simplex_apply(np.full(4, 1.7e308))):
        with pytest.raises(ValueError, match=r"^x is too large: the .* has entries beyond the largest float64"):
            call()


def test_fwht_near_the_largest_float32_on_torch():
    """The same for torch float32: 8 entries of 1e38 transform to sqrt(8) 1e38 (float32 max 3.4e38)."""
    torch = pytest.importorskip("torch")
    y = mc.fwht(torch.full((8,), 1e38))
    assert y.dtype == torch.float32 and abs(float(y[0]) / (math.sqrt(8) * 1e38) - 1) < 1e-6
    assert float(torch.max(torch.abs(y[1:]))) < 1e32  # (rounding only: 0 in exact arithmetic)
    with pytest.raises(ValueError, match=r"largest torch.float32"):
        mc.fwht(torch.full((8,), 3e38))


def test_docstring_examples():
    """The examples in the package and sampler docstrings run and print what they show."""
    import doctest

    import montecarlo.couplings

    for mod in (mc, montecarlo.couplings):
        res = doctest.testmod(mod)
        assert res.failed == 0 and res.attempted >= 2


# ---------------------------------------------------------------------------
# m < d: only the needed rows are drawn (issue 12 item 2)


def _peak_bytes(f):
    import tracemalloc

    tracemalloc.start()
    try:
        f()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("coupling", [c for c in mc.COUPLINGS if c != "simplex_plus"])
def test_few_rows_in_high_dimension_cost_o_m_d_memory(coupling):
    """m = 3 rows at d = 4096: numpy's traced peak is O(m d) (a full block would be 134 MB).

    Before the fix every coupling drew a whole d x d block for one row: sample_weights("iid", 10**6, 1)
    asked for 7.3 TiB."""
    d, m = 4096, 3
    peak = _peak_bytes(lambda: mc.sample_weights(coupling, d, m, rng=0))
    assert peak < 40 * m * d * 8, peak  # 4 MB; the d x d block is 134 MB
    w = mc.sample_weights(coupling, d, m, rng=0)
    assert w.shape == (m, d) and np.all(np.isfinite(w))
    assert _peak_bytes(lambda: mc.sample_weights("iid", 10**6, 1, rng=0)) < 3 * 8 * 10**6


def test_simplex_plus_in_high_dimension_is_refused_not_attempted():
    """The SimRFs+ update needs all d vectors of a block: d = 10^5 is refused before allocating 80 GB."""
    with pytest.raises(mc.AllocationError, match=r"SimRFs\+ blocks of d x d = 100000 x 100000.*reduce n_draws, m or d"):
        mc.sample_weights("simplex_plus", 10**5, 1, rng=0)
    assert issubclass(mc.AllocationError, ValueError) and issubclass(mc.AllocationError, MemoryError)


@pytest.mark.parametrize("coupling", ["orthogonal", "simplex"])
def test_partial_blocks_have_the_exact_geometry(coupling):
    """First r rows of a block (r = 5 of d = 9, and the truncated last block of m = 14): orthogonal or
    at cos -1/(d-1) to rounding, for every Haar route."""
    d = 9
    target = 0.0 if coupling == "orthogonal" else -1.0 / (d - 1)
    for route in mc.HAAR_ROUTES:
        for m in (5, 14):
            w = mc.sample_weights(coupling, d, m, rng=1, n_draws=20, haar_route=route)
            for lo, hi in ((0, min(m, d)), (d, m)):
                if hi - lo < 2:
                    continue
                u = _unit_rows(w[:, lo:hi])
                g = u @ np.swapaxes(u, 1, 2)
                off = g[:, ~np.eye(hi - lo, dtype=bool)]
                assert np.max(np.abs(off - target)) < 1e-12, (route, m, lo)


@pytest.mark.parametrize("coupling, claim", [("orthogonal", "orthogonal"), ("simplex", "simplex"),
                                             ("simplex_plus", None), ("iid", "iid")])
def test_partial_blocks_pass_the_audit(coupling, claim):
    """The distribution of the first r rows: the sampler audit (marginals, row norms, moments, norm
    independence, PRF/RFF unbiasedness, conformity against theory for the claimed coupling, exact angles)
    at m = 5 < d = 8 and m = 13 (a truncated last block).  Overall false alarm 1e-3 per audit.

    Power: the audit of the same partial rows with every row's sign correction dropped (first coordinate
    forced negative, the LAPACK bias of the module docstring) fails."""
    from montecarlo.audit import audit

    for m in (5, 13):
        rep = audit(lambda d, mm, rng: mc.sample_weights(coupling, d, mm, rng=rng), d=8, m=m, coupling=claim,
                    n_draws=1000, rng=11, alpha=1e-3)
        assert rep.passed, rep.render(verbose=True)

    def biased(d, mm, rng):
        w = mc.sample_weights(coupling, d, mm, rng=rng)
        w[:, 0] = -np.abs(w[:, 0])
        return w

    assert not audit(biased, d=8, m=5, coupling=claim, n_draws=1000, rng=11, alpha=1e-3).passed


@pytest.mark.parametrize("simplex", [False, True])
def test_fast_partial_rows_equal_the_first_rows_of_the_full_block(simplex):
    from montecarlo._backend import Random, namespace
    from montecarlo.couplings import _fast_draw, _fast_rows

    for p in (2, 8, 64):
        norms, signs = _fast_draw(p, 4, Random(p, namespace(), "cpu", np.float64))
        full = _fast_rows(simplex, norms, signs)
        for r in (1, p // 2, p - 1):
            if r >= 1:
                assert np.allclose(_fast_rows(simplex, norms, signs, r), full[:, :r], atol=1e-12)


# ---------------------------------------------------------------------------
# the fast couplings say where they are biased (issue 12 item 9)


def test_fast_couplings_warn_where_their_bias_is_measurable():
    for coupling in mc.FAST_COUPLINGS:
        with pytest.warns(mc.FastCouplingBiasWarning, match=r"at d = 16 <= 16: .*biased") as rec:
            mc.sample_weights(coupling, 16, 16, rng=0)
        assert rec[0].filename == __file__  # points at the caller, not at the library
        with pytest.warns(mc.FastCouplingBiasWarning):
            mc.sample_projection(coupling, 2, 4, rng=0)
        with pytest.warns(mc.FastCouplingBiasWarning):
            mc.kernel_estimate(coupling, np.full(4, 0.1), np.full(4, 0.2), 4, 10, rng=0)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mc.sample_weights("fast_simplex", 17, 4, rng=0)  # above the resolved range: silent
        mc.sample_weights("simplex", 4, 4, rng=0)  # exact couplings never warn
    assert mc.FAST_BIAS_RESOLVED_D == 16
    assert "RFF bias" in mc.sample_weights.__doc__ and "FastCouplingBiasWarning" in mc.sample_weights.__doc__


def test_fast_coupling_bias_at_d_4_is_resolved():
    """The documented bias is real: fast_orthogonal RFF at d = 4, |x - y| = 2 along e_1 (table: -102%,
    z = -136 at 2e5 draws) is resolved with 2e4 draws (|z| > 10), while the exact orthogonal coupling is not
    (|z| < 4.5, false alarm 7e-6)."""
    import warnings

    from montecarlo.diagnostics import kernel_bias

    x, y = np.array([1.0, 0, 0, 0]), np.array([-1.0, 0, 0, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mc.FastCouplingBiasWarning)
        b, se = kernel_bias("fast_orthogonal", x, y, 4, 20_000, kind="rff", rng=3)
    assert abs(b / se) > 10 and b < -0.3
    b, se = kernel_bias("orthogonal", x, y, 4, 20_000, kind="rff", rng=3)
    assert abs(b / se) < 4.5


# ---------------------------------------------------------------------------
# Issue 22 (hardening), montecarlo items: non-finite input to the transforms, the SimRFs+
# tolerance's dtype, and the coupling lists of montecarlo.couplings (issue 18).


couplings = sys.modules["montecarlo.couplings"]


try:
    import torch
except ImportError:  # pragma: no cover - the torch extra is optional
    torch = None


@pytest.mark.parametrize("func", [mc.fwht, mc.simplex_apply])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_transforms_refuse_non_finite_input(func, bad):
    x = np.arange(8.0)
    x[3] = bad
    with pytest.raises(ValueError, match=r"x must be finite: found 1 NaN or inf"):
        func(x)
    with pytest.raises(ValueError, match=r"x must be finite: found 4 NaN or inf"):
        func(np.full(4, np.nan))
    if torch is not None:
        with pytest.raises(ValueError, match=r"x must be finite"):
            func(torch.full((2, 4), float("nan"), dtype=torch.float64))


def test_transforms_still_compute_finite_input():
    """The same calls on finite input give the closed forms (Sylvester H_4 / 2, Algorithm 1 = dense S)."""
    x = np.array([0.5, -1.0, 2.0, 3.0])
    h = np.array([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]]) / 2.0
    assert np.allclose(mc.fwht(x), h @ x, atol=1e-15)
    assert np.allclose(mc.simplex_apply(x), mc.simplex_matrix(4) @ x, atol=1e-15)


def test_finiteness_is_checked_once_per_public_call_and_never_inside_the_samplers(monkeypatch):
    """One isfinite pass per public call; the HD-products and Algorithm 1 inside the samplers
    (arrays they built themselves) are not re-checked: counted, not timed."""
    calls = []
    real = couplings._check_finite

    def counting(arr, xp, name):
        calls.append(name)
        return real(arr, xp, name)

    monkeypatch.setattr(couplings, "_check_finite", counting)
    mc.fwht(np.ones((3, 16)))
    assert calls == ["x"]
    calls.clear()
    mc.simplex_apply(np.ones((3, 16)))
    assert calls == ["x"]
    calls.clear()
    for coupling in ("fast_orthogonal", "fast_simplex"):
        proj = mc.sample_projection(coupling, 12, 40, rng=0)
        proj.project(np.ones((5, 12)))
        mc.sample_weights(coupling, 12, 40, rng=0)
    assert calls == []


@pytest.mark.parametrize("dtype", [int, bool, complex, None, "abc", np.int32, np.complex128]
                         + ([torch.int64, torch.bool] if torch is not None else []))
def test_simplex_plus_tolerance_refuses_non_float_dtypes(dtype):
    with pytest.raises(TypeError, match=r"dtype must be a real floating dtype \(float16, float32 or float64"):
        mc.simplex_plus_tolerance(dtype)


def test_simplex_plus_tolerance_of_float_dtypes():
    assert mc.simplex_plus_tolerance(np.float64) == couplings.SIMPLEX_PLUS_TOL
    eps32 = float(np.finfo(np.float32).eps)
    for dt in ("float32", np.float32) + ((torch.float32,) if torch is not None else ()):
        assert mc.simplex_plus_tolerance(dt) == couplings.SIMPLEX_PLUS_DEFAULT_TOL_EPS * eps32


def test_documented_couplings_are_registered_and_the_parameter_list_is_the_registry():
    """The module docstring describes the samplers defined in montecarlo.couplings; every name it
    describes must be a registered coupling, and sample_weights' ``coupling`` parameter points at
    the registry instead of enumerating a set that went stale (it lacked 'pnc_orthogonal')."""
    registered = set(theory.registry.names())
    described = set(re.findall(r'``"([a-z_]+)"``', couplings.__doc__))
    assert {"iid", "orthogonal", "simplex", "simplex_plus", "fast_orthogonal", "fast_simplex"} <= described
    assert described <= registered
    param = couplings.sample_weights.__doc__.split("coupling :", 1)[1].split("\n    d :", 1)[0]
    assert "theory.registry.names()" in param
    assert not re.search(r"\{'iid'", param)  # no hand-written closed set
    # every registered coupling samples through sample_weights (pnc_orthogonal included)
    for name in registered:
        w = mc.sample_weights(name, 4, 4, rng=1)
        assert w.shape == (4, 4) and np.all(np.isfinite(w))


def test_removed_dead_helpers_stay_removed():
    """Issue 18: these private helpers had no caller anywhere in the tree."""
    import figures.style
    import theory._checks

    assert not hasattr(couplings, "_haar_rows")
    assert not hasattr(theory._checks, "round_result")
    assert not hasattr(figures.style, "theory_legend_handle")


# ---------------------------------------------------------------------------
# Issue 22 findings in montecarlo kept as regression tests: Monte Carlo has a work limit and a time budget, and a
# non-finite estimate is an error naming the cause (no silent NaN).  No wall clock is asserted: the budget test uses
# a budget that has expired before the first chunk (certain expiry), and the work limit is checked before any draw.


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


# ---------------------------------------------------------------------------
# Tests added against the surviving formula mutants of montecarlo (issue 22 item 5, docs/guide/mutation.rst).
#
# Each class is the addition to one target's mutation command (tests/mutation_targets.py): ``TestCouplings`` for
# montecarlo/couplings.py, ``TestEstimators`` for estimators.py, ``TestFeatures``, ``TestPnc``, ``TestNormCoupling``.
# Every test checks a documented property against an independent route (a closed form, the formula written out,
# a second sampler path, mpmath, the README's numbers); Monte Carlo comparisons are z-tests at
# paper_checks._compare.Z_CRIT = 4.5 (false alarm 6.8e-6 each, the family bound is stated per test) and show
# their power on a wrong alternative.  Seeds are fixed; no test reads the clock (the progress bar gets a fake one).


def _cos_rows(w):
    u = w / np.linalg.norm(w, axis=-1, keepdims=True)
    return u @ np.swapaxes(u, -1, -2)


class TestCouplings:
    """montecarlo/couplings.py: the SimRFs+ pass count, sample_projection = sample_weights, the torch paths, the
    Householder route's law, the SimRFs+ norms' domain."""

    def test_simplex_plus_start_is_the_fixed_point_in_one_pass(self):
        """The simplex start is already a fixed point of the update when d = 2 (two antiparallel vectors, any
        norms) or when the norms are equal (the regular simplex closes): exactly one pass moves nothing, so every
        block reports passes = 1 and converges even with max_passes = 1; the rows keep the simplex geometry."""
        rng = np.random.default_rng(0)
        two = np.sqrt(rng.chisquare(2, (6, 2)))
        equal = np.full((3, 5), 1.7)
        for norms in (two, equal):
            d = norms.shape[1]
            vec, passes, conv = mc.simplex_plus_vectors(norms, max_passes=1, on_unconverged="raise")
            assert np.all(passes == 1) and np.all(conv)
            assert np.allclose(np.linalg.norm(vec, axis=-1), norms, rtol=1e-14)
            off = ~np.eye(d, dtype=bool)
            assert np.allclose(_cos_rows(vec)[:, off], -1 / (d - 1), atol=1e-14)

    def test_simplex_plus_passes_never_exceed_max_passes(self):
        """Blocks are independent: a run capped at M passes converges exactly the blocks whose uncapped run needed
        <= M passes, with the same pass counts and vectors, and no block reports more than M passes.  M is chosen
        (fixed seed) so that some blocks need exactly M and some M + 1 passes."""
        norms = np.sqrt(np.random.default_rng(7).chisquare(3, (60, 3)))
        free, p_free, c_free = mc.simplex_plus_vectors(norms, tol=1e-12, max_passes=5000)
        assert np.all(c_free)
        cap = 11
        assert np.any(p_free == cap) and np.any(p_free == cap + 1)
        vec, passes, conv = mc.simplex_plus_vectors(norms, tol=1e-12, max_passes=cap, on_unconverged="ignore")
        assert np.all(passes <= cap)
        assert np.array_equal(conv, p_free <= cap)
        assert np.array_equal(passes[conv], p_free[conv]) and np.all(passes[~conv] == cap)
        assert np.array_equal(vec[conv], free[conv])

    @pytest.mark.filterwarnings("ignore::montecarlo.FastCouplingBiasWarning")
    @pytest.mark.parametrize("coupling", mc.COUPLINGS)
    def test_sample_projection_is_the_draw_of_sample_weights(self, coupling):
        """sample_projection wraps sample_weights (the fast couplings draw the same stream): for one seed its dense
        weights are the same rows, and projecting a batch equals multiplying by them (m > d: a truncated block)."""
        d, m = 5, 13
        proj = mc.sample_projection(coupling, d, m, rng=21)
        w = mc.sample_weights(coupling, d, m, rng=21)
        assert np.array_equal(proj.weights, w)
        x = np.random.default_rng(1).standard_normal((4, d))
        assert np.allclose(proj(x), x @ w.T, rtol=1e-12, atol=1e-12)
        assert not np.allclose(mc.sample_weights(coupling, d, m, rng=22), w)  # power: another seed differs

    @pytest.mark.filterwarnings("ignore::montecarlo.FastCouplingBiasWarning")
    def test_torch_fast_projection_and_simplex_plus_info(self):
        """On torch: the fast couplings' HD-product projection of a batch equals the product with the dense rows
        built by the other route (rows of D S R~), and SimRFs+ with a truncated last block reports one pass count
        per block."""
        torch = pytest.importorskip("torch")
        x = torch.tensor(np.random.default_rng(3).standard_normal((4, 5)))
        for coupling in mc.FAST_COUPLINGS:
            proj = mc.sample_projection(coupling, 5, 11, rng=4, xp="torch")
            y = proj(x)
            assert y.shape == (4, 11)
            assert torch.allclose(y, x @ proj.weights.T, rtol=1e-12, atol=1e-12)
        w, info = mc.sample_weights("simplex_plus", 4, 6, rng=5, xp="torch", return_info=True)
        assert tuple(w.shape) == (6, 4)
        assert tuple(info["passes"].shape) == (2,) and bool(info["converged"].all())

    @pytest.mark.parametrize("cols", [None, 2])
    def test_householder_route_has_the_haar_law(self, cols):
        """route='householder' (d - 1 reflections, or the first cols of them): every entry of a Haar matrix (or of
        its first columns) has E[Q_ij^2] = 1/d.  d = 4, 20000 matrices, 16 (or 8) z-tests at Z_CRIT (family
        1.1e-4).  The route's geometry tests hold for any product of reflections; this is its law.  Power: one
        uniformly random reflection I - 2uu^T (orthogonal, not Haar: E[H_11^2] = 1/2) is rejected."""
        d, n = 4, 20_000
        q = mc.haar_orthogonal(n, d, rng=3, route="householder", cols=cols)
        assert q.shape == (n, d, d if cols is None else cols)
        sq = q * q
        z = (sq.mean(axis=0) - 1 / d) / (sq.std(axis=0, ddof=1) / math.sqrt(n))
        assert np.max(np.abs(z)) < Z_CRIT, z
        u = np.random.default_rng(4).standard_normal((n, d))
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        h = np.eye(d) - 2 * u[:, :, None] * u[:, None, :]
        hs = h[:, :, :q.shape[2]] ** 2
        zh = (hs.mean(axis=0) - 1 / d) / (hs.std(axis=0, ddof=1) / math.sqrt(n))
        assert np.max(np.abs(zh)) > Z_CRIT

    def test_simplex_plus_refuses_a_zero_norm(self):
        """Documented: norms are an (n, d) array with entries > 0.  A zero or a negative norm is refused by name;
        the smallest positive double is accepted."""
        for bad in (0.0, -1.0):
            with pytest.raises(ValueError, match="norms must be > 0"):
                mc.simplex_plus_vectors(np.array([[1.0, bad, 2.0]]))
        vec, passes, conv = mc.simplex_plus_vectors(np.array([[1.0, 5e-324, 1.5]]), on_unconverged="ignore")
        assert vec.shape == (1, 3, 3)


# ---------------------------------------------------------------------------
# Marginal distribution of the rows: KS tests against N(0, 1), with power against wrong samplers.
#
# Statistical design
# ------------------
# Each KS test uses one row index from each of n independent blocks, so its
# samples are i.i.d. and scipy's p-value is valid.  Within one test function
# the comparisons are Bonferroni-corrected so that the probability of *any*
# false alarm in the function (all its parametrised cases together) is at most
# ``FAMILY_ALPHA`` = 1e-4.  Power is shown by running the same comparison on
# deliberately wrong samplers and requiring it to reject at the same threshold.
# All seeds are fixed, so the outcome is deterministic; the probabilities
# describe how unlucky the chosen seeds would have to be.




EXACT_CASES = [(c, d) for c in mc.EXACT_COUPLINGS for d in (3, 16)] + [("orthogonal", 64), ("simplex", 64)]


def _rows(d):
    return list(range(d)) if d <= 3 else [0, 1, d - 1]


def _n_tests(d):
    return len(_rows(d)) * len(standard_directions(d))


N_EXACT_TESTS = sum(_n_tests(d) for _, d in EXACT_CASES)


@pytest.mark.filterwarnings("ignore:SimRFs\\+ update")
@pytest.mark.parametrize("coupling,d", EXACT_CASES)
def test_exact_couplings_are_marginally_gaussian(coupling, d):
    """Every exact coupling: w_i . u ~ N(0, 1) for axes, the diagonal and a random u (all rows tested).

    False-alarm probability: <= 1e-4 over all cases of this function (Bonferroni).
    simplex_plus at d = 3 includes blocks stopped at the pass cap (near-degenerate norms); they are
    still exact samples (Haar-rotated), which this test also confirms.
    """
    n = 4000 if d < 64 else 1500
    res = ks_marginals(coupling, d, n, rows=_rows(d), rng=1000 + d)
    alpha = FAMILY_ALPHA / N_EXACT_TESTS
    worst = min(res, key=lambda r: r[3])
    assert worst[3] > alpha, f"{coupling} d={d}: row {worst[0]} on {worst[1]}: KS={worst[2]:.4f}, p={worst[3]:.2e}"


def _unsigned_qr_blocks(coupling, d, n, seed):
    """The common bug: Q from LAPACK QR used without the sign correction (W = D S Q^T, Performer style)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, d, d)))
    rows = np.swapaxes(q, -1, -2)
    if coupling == "simplex":
        rows = mc.simplex_apply(rows, axis=-2)
    norms = np.sqrt(rng.chisquare(d, (n, d)))
    return norms[:, :, None] * rows


def _fixed_norm_blocks(coupling, d, n, seed):
    """Correct directions but all norms sqrt(d) instead of chi_d."""
    w = mc.sample_weights(coupling, d, d, rng=seed, n_draws=n)
    return np.sqrt(d) * w / np.linalg.norm(w, axis=-1, keepdims=True)


@pytest.mark.parametrize("coupling", ["orthogonal", "simplex"])
@pytest.mark.parametrize("wrong,d", [("unsigned_qr", 3), ("unsigned_qr", 16), ("fixed_norms", 3)])
def test_wrong_samplers_fail_the_same_test(coupling, wrong, d):
    """Power: the identical KS battery at the identical threshold rejects both wrong samplers.

    Expected statistics: unsigned QR puts row 0's first coordinate always < 0 (KS ~ 0.5 on e_1
    for orthogonal); fixed norms at d = 3 make w . u uniform on [-sqrt 3, sqrt 3] (KS ~ 0.057).
    """
    n = 20000 if wrong == "fixed_norms" else 4000
    make = _unsigned_qr_blocks if wrong == "unsigned_qr" else _fixed_norm_blocks
    w = make(coupling, d, n, seed=7)
    res = ks_marginals(coupling, d, n, rows=_rows(d), weights=w)
    alpha = FAMILY_ALPHA / N_EXACT_TESTS
    assert min(r[3] for r in res) < alpha
    # and the correct sampler at the same n and seed passes
    good = ks_marginals(coupling, d, n, rows=_rows(d), rng=7)
    assert min(r[3] for r in good) > FAMILY_ALPHA / (len(good) * 6)


def test_unsigned_qr_bias_is_the_lapack_sign_convention():
    """LAPACK's Householder QR fixes Q[0, 0] < 0 (the bias the sign correction removes)."""
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((500, 5, 5)))
    assert np.all(q[:, 0, 0] < 0)
    h = mc.haar_orthogonal(500, 5, rng=0)
    frac = np.mean(h[:, 0, 0] < 0)
    assert 0.3 < frac < 0.7  # binomial(500, 1/2): |frac - 0.5| > 0.2 has probability < 1e-18


@pytest.mark.parametrize("df", [1, 2, 3, 16, 64])
def test_marsaglia_tsang_chi_sampler(df):
    """The device chi sampler (used by torch/cupy), run on numpy, is chi_df; power: chi_{df+1} is rejected.

    Two KS tests per df, 5 dfs: per-test alpha 1e-5 (family 1e-4).
    """
    rnd = Random(5 + df, namespace("numpy"), "cpu", np.float64)
    x = rnd.chi(df, (20000,), method="marsaglia_tsang")
    assert stats.kstest(x, stats.chi(df).cdf).pvalue > 1e-5
    assert stats.kstest(x, stats.chi(df + 1).cdf).pvalue < 1e-5


def test_householder_route_marginals():
    """The Householder-product Haar route gives Gaussian rows too (d = 5, all rows, 4 directions)."""
    res = ks_marginals("orthogonal", 5, 4000, rows=range(5), rng=3, haar_route="householder")
    assert min(r[3] for r in res) > FAMILY_ALPHA / len(res)
    res = ks_marginals("simplex", 5, 4000, rows=range(5), rng=4, haar_route="householder")
    assert min(r[3] for r in res) > FAMILY_ALPHA / len(res)


def test_fast_variants_are_only_approximately_gaussian():
    """App. B.2 HD-products: fast_orthogonal at d = 16 is detectably non-Gaussian (KS ~ 0.07 measured);
    fast_simplex at d = 64 is within 0.02 of N(0, 1) in KS distance.

    First check: the statistic would exceed 0.03 for an exact sampler at n = 20000 with probability
    ~ 2e-8 per test. Second: an exact sampler at n = 20000 exceeds 0.02 with probability ~ 2e-7 per
    test (12 tests).
    """
    res = ks_marginals("fast_orthogonal", 16, 20000, rows=[0, 1, 15], rng=5)
    assert max(r[2] for r in res) > 0.03
    res = ks_marginals("fast_simplex", 64, 20000, rows=[0, 1, 63], rng=6)
    assert max(r[2] for r in res) < 0.02
