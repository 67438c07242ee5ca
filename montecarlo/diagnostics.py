r"""How Gaussian are the rows? KS distances and kernel-estimate biases (App. B.2).

The exact couplings keep every row marginally :math:`\mathcal N(0, I_d)`;
the fast HD-product couplings do not (the directions
:math:`\widetilde{\mathbf R}^\top s_i` take finitely many values).  These
helpers measure the gap:

* :func:`ks_marginals`: one-sample KS statistics (and p-values, valid because
  each statistic uses one row from each of n independent blocks) of
  projections :math:`w_i^\top u` on fixed unit vectors u against N(0, 1).
* :func:`ks_distance_curve`: the largest KS statistic as a function of the
  sample size; it decays like :math:`n^{-1/2}` for an exact sampler and
  plateaus at the true distance for an approximate one.
* :func:`kernel_bias`: relative bias :math:`(\mathbb E\hat K - K)/K` with its
  standard error for PRF and RFF estimates.

Measured values (numpy, seed 0; reproduced by
``python -m benchmarks.bench_montecarlo --accuracy``) are recorded in
``benchmarks/README.md``.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from ._backend import to_numpy
from theory.registry import get as get_coupling
from theory.validation import ArgumentTypeError, describe, show_int

from ._backend import namespace
from ._checks import (FAST_COUPLINGS, check_budget, check_coupling, check_data, check_dimension, check_int, check_rng,
                      check_sequence)
from .couplings import sample_weights
from .estimators import exact_kernel, kernel_estimate, pair_projections


def standard_directions(d, rng=0):
    """Named unit vectors: the first and last axes, the diagonal and one fixed random direction (O(d) memory)."""
    d = check_dimension(d)
    check_budget(4 * d, f"four direction vectors of length d = {show_int(d)}", "reduce d")
    g = np.random.default_rng(check_rng(rng)).standard_normal(d)
    first, last = np.zeros(d), np.zeros(d)
    first[0] = 1.0
    last[d - 1] = 1.0
    return {"e_1": first, f"e_{d}": last, "diagonal": np.full(d, 1.0 / np.sqrt(d)), "random": g / np.linalg.norm(g)}


def ks_marginals(coupling, d, n, rows=None, directions=None, rng=None, weights=None, **kwargs):
    r"""KS tests of row projections against N(0, 1).

    Parameters
    ----------
    coupling : str or None
        The coupling to sample (None only with ``weights``).
    d : int
    n : int
        Number of independent blocks (one sample per block and row; ignored with ``weights``).
    rows : sequence of int, optional
        Row indices within a block (default: all rows of one block, at most
        the first two and the last).
    directions : dict name -> unit vector, optional
        Default :func:`standard_directions`.
    weights : array (n, b, d), optional
        Use these blocks instead of sampling (to test other samplers).
    **kwargs
        Passed to :func:`~montecarlo.sample_weights` (xp, device, ...).

    Returns
    -------
    list of (row, direction name, KS statistic, p-value)
    """
    if weights is None or coupling is not None:
        coupling = check_coupling(coupling)
    d = check_dimension(d, coupling)
    directions = standard_directions(d) if directions is None else _check_directions(directions, d)
    if weights is not None:
        w = _check_blocks(weights, d)
        n, b = w.shape[0], w.shape[1]
    else:
        n = check_int(n, "n", 2)
        b = get_coupling(coupling).block_rows(d)
    rows = _default_rows(b) if rows is None else _check_rows(rows, b)
    check_budget(n * len(rows) * len(directions), f"{show_int(n)} blocks x {len(rows)} rows x {len(directions)} "
                 "directions "
                 "of projections", "reduce n, rows or directions")
    if weights is not None:
        projs = {name: (w @ u)[:, rows] for name, u in directions.items()}
    else:
        fast = coupling in FAST_COUPLINGS
        gen = np.random.default_rng(check_rng(rng))
        step = max(1, (1 << 20) // (b * d))  # blocks per chunk (bounded memory)
        parts = {name: [] for name in directions}
        for lo in range(0, n, step):
            k = min(step, n - lo)
            if fast:  # structured O(p log p) projections, fresh blocks per direction
                for name, u in directions.items():
                    pr = to_numpy(pair_projections(coupling, u, b, k, rng=gen, path="fast", **kwargs))
                    parts[name].append(pr[:, rows])
            else:
                w = to_numpy(sample_weights(coupling, d, d, rng=gen, n_draws=k, **kwargs))
                for name, u in directions.items():
                    parts[name].append((w @ u)[:, rows])
        projs = {name: np.concatenate(v, axis=0) for name, v in parts.items()}
    out = []
    for j, i in enumerate(rows):
        for name in directions:
            res = stats.kstest(projs[name][:, j], "norm")
            out.append((i, name, float(res.statistic), float(res.pvalue)))
    return out


def _check_directions(directions, d):
    if not isinstance(directions, dict) or not directions:
        raise ArgumentTypeError(f"directions must be a non-empty dict name -> unit vector of length {d}, got "
                                f"{describe(directions)}")
    out = {}
    for name, u in directions.items():
        u = check_data(u, namespace("numpy"), f"directions[{name!r}]", 1, d)
        norm = float(np.linalg.norm(u))
        if abs(norm - 1.0) > 1e-6:
            raise ValueError(f"directions[{name!r}] must be a unit vector, got norm {norm:.6g}")
        out[str(name)] = np.asarray(u)
    return out


def _check_blocks(weights, d):
    w = np.asarray(to_numpy(check_data(weights, namespace("numpy"), "weights", 3, d)))
    if w.shape[0] < 2:
        raise ValueError(f"weights must hold at least 2 blocks (n, b, d), got shape {w.shape}")
    return w


def _check_rows(rows, b):
    return check_sequence(rows, "rows", lambda i, name: check_int(i, name, 0, f"(a row of a block of {b})", b - 1),
                          f"row indices in [0, {b})")


def _default_rows(b):
    return sorted({0, min(1, b - 1), b - 1})


def ks_distance_curve(coupling, d, sizes=(1_000, 10_000, 100_000), rng=0):
    """Largest KS statistic over rows {0, 1, last} x :func:`standard_directions`, per sample size.

    Each size n draws n fresh blocks from the seed ``rng + n`` (``rng`` an int >= 0).
    """
    rng = check_int(rng, "rng", 0)
    sizes = check_sequence(sizes, "sizes", lambda n, name: check_int(n, name, 2), "sample sizes >= 2")
    return {int(n): max(r[2] for r in ks_marginals(coupling, d, int(n), rng=rng + int(n)))
            for n in sizes}


def kernel_bias(coupling, x, y, m, n_draws, kernel="gaussian", rng=0, **kwargs):
    r"""Relative bias of the kernel estimate, :math:`(\overline{\hat K} - K)/K`, as (value, stderr).

    ``kwargs`` go to :func:`~montecarlo.kernel_estimate` (``kind=``, ``path=``, ...)."""
    est = kernel_estimate(coupling, x, y, m, n_draws, kernel=kernel, rng=rng, **kwargs)
    k = exact_kernel(x, y, kernel)
    return (est.mean - k) / k, est.stderr / k
