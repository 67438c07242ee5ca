r"""The numerically optimised geometry of Fig. 4 (``corr_inset_main``) as library code.

For fixed norms :math:`w_1..w_m` and :math:`v`, minimise the exact conformity
objective of eq. ``simp+_obj``

.. math::
    J(\hat w) = \frac{1}{m(m-1)}\sum_{i\ne j} F(\|w_i\hat w_i + w_j\hat w_j\|^2),\qquad
    F(s) = {}_0F_1(;\tfrac d2;\tfrac{v^2 s}{4}),

over the directions :math:`\hat w_i` on the unit sphere (product of spheres),
with :math:`F'(s) = \frac{v^2}{4}\frac{1}{d/2}\,{}_0F_1(;\frac d2+1;\frac{v^2s}{4})`.
Directions are parameterised by unconstrained vectors :math:`u_i`,
:math:`\hat w_i = u_i/\|u_i\|`, and L-BFGS-B (scipy) runs from several
starts: the simplex geometry, the SimRFs+ fixed point and random directions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from ._checks import ArgumentTypeError, check_budget, check_data, check_int, check_real, check_rng, check_sequence
from ._backend import namespace
from theory.validation import describe


def pair_kernel_squared(d, v, s):
    r""":math:`F(s) = {}_0F_1(;d/2;v^2 s/4)` for squared pair norms :math:`s = w_{ij}^2` (float arrays).

    The float64 twin of :func:`theory.simplex_plus.pair_kernel` ``(d, v, w_ij)``, which takes
    :math:`w_{ij}` itself in arbitrary precision."""
    return special.hyp0f1(d / 2.0, (v * v / 4.0) * np.asarray(s, dtype=float))


def objective(vectors, v):
    """Exact conformity objective (eq. simp+_obj) of an (m, d) array of vectors (float), m >= 2."""
    w = np.asarray(check_data(vectors, namespace(), "vectors", 2, dtype=np.float64))
    v = check_real(v, "v", minimum=0.0)
    m, d = w.shape
    if m < 2:
        raise ValueError(f"vectors must hold at least 2 rows (the objective averages over pairs), got shape {w.shape}")
    check_budget(m * m * d, f"the (m, m, d) = ({m}, {m}, {d}) pair sums", "reduce m or d")
    s = np.sum((w[:, None, :] + w[None, :, :]) ** 2, axis=-1)
    f = pair_kernel_squared(d, v, s)
    return float((f.sum() - np.trace(f)) / (m * (m - 1)))


def _objective_and_grad(flat, norms, d, v):
    m = norms.shape[0]
    u = flat.reshape(m, d)
    un = np.linalg.norm(u, axis=1)
    uh = u / un[:, None]
    w = norms[:, None] * uh
    pair = w[:, None, :] + w[None, :, :]
    s = np.sum(pair * pair, axis=-1)
    h = d / 2.0
    f = special.hyp0f1(h, (v * v / 4.0) * s)
    fp = (v * v / 4.0) / h * special.hyp0f1(h + 1.0, (v * v / 4.0) * s)
    np.fill_diagonal(f, 0.0)
    np.fill_diagonal(fp, 0.0)
    val = f.sum() / (m * (m - 1))
    # d/dw_i of sum_{i != j} F(s_ij) = 4 sum_{j != i} F'(s_ij) (w_i + w_j)
    gw = 4.0 * np.einsum("ij,ijk->ik", fp, pair) / (m * (m - 1))
    # chain rule through w_i = n_i u_i / |u_i|
    gu = norms[:, None] * (gw - np.sum(gw * uh, axis=1, keepdims=True) * uh) / un[:, None]
    return val, gu.ravel()


@dataclass(frozen=True)
class OptimumResult:
    """Best geometry found: vectors (m, d), objective value, and all restart values."""

    vectors: np.ndarray
    value: float
    restarts: tuple


def optimise_directions(norms, v, d=None, starts=None, n_random=8, rng=None, tol=1e-12, maxiter=2000):
    """Minimise the exact conformity objective over directions for fixed norms.

    Parameters
    ----------
    norms : array (m,), entries > 0
    v : float >= 0
    d : int, optional
        Ambient dimension (default m).
    starts : list of (m, d) arrays, optional
        Extra starting geometries (e.g. the SimRF and SimRF+ vectors); their
        norms are reset to ``norms``.
    n_random : int
        Number of random starting geometries.
    rng : int or numpy Generator
    tol : float > 0
        L-BFGS-B ``ftol``.
    maxiter : int >= 1
        L-BFGS-B iterations per start.

    Returns
    -------
    OptimumResult

    Raises
    ------
    ValueError
        Naming the bad argument (norms not a 1-D array of >= 2 positive
        finite values, v < 0, a start of the wrong shape, ...), or an
        :class:`~montecarlo._checks.AllocationError` when the (m, m, d) pair
        sums exceed the memory budget.
    """
    norms = np.asarray(check_data(norms, namespace(), "norms", 1, dtype=np.float64))
    if norms.shape[0] < 2 or not np.all(norms > 0):
        raise ValueError(f"norms must be a 1-D array of at least 2 positive values, got {describe(norms)}")
    m = norms.shape[0]
    d = m if d is None else check_int(d, "d", 1)
    v = check_real(v, "v", minimum=0.0)
    n_random = check_int(n_random, "n_random", 0)
    tol = check_real(tol, "tol", minimum=0.0, strict_minimum=True)
    maxiter = check_int(maxiter, "maxiter", 1)
    check_budget(m * m * d * 3, f"the (m, m, d) = ({m}, {m}, {d}) pair sums of the objective", "reduce m or d")
    gen = np.random.default_rng(check_rng(rng))
    if starts is not None and not isinstance(starts, (list, tuple)):
        raise ArgumentTypeError(f"starts must be None or a list of ({m}, {d}) arrays, got {describe(starts)}")
    inits = [np.asarray(check_data(s, namespace(), f"starts[{i}]", 2, d, dtype=np.float64))
             for i, s in enumerate(starts or [])]
    for i, s in enumerate(inits):
        if s.shape[0] != m:
            raise ValueError(f"starts[{i}] must have m = {m} rows (one per norm), got shape {s.shape}")
        zero = np.flatnonzero(~np.any(s != 0, axis=1))
        if zero.size:
            raise ValueError(f"starts[{i}] has zero rows {zero.tolist()[:5]} (a start gives directions: every row "
                             "must be nonzero)")
    inits += [gen.standard_normal((m, d)) for _ in range(n_random)]
    if not inits:
        raise ValueError("need at least one start (pass starts or n_random >= 1)")
    best, values = None, []
    for u0 in inits:
        if u0.shape != (m, d):
            raise ValueError(f"each start must have shape {(m, d)}, got {u0.shape}")
        res = optimize.minimize(_objective_and_grad, u0.ravel(), args=(norms, d, v), jac=True,
                                method="L-BFGS-B", options={"maxiter": maxiter, "ftol": tol, "gtol": 1e-10})
        u = res.x.reshape(m, d)
        w = norms[:, None] * u / np.linalg.norm(u, axis=1)[:, None]
        val = objective(w, v)
        values.append(val)
        if best is None or val < best[1]:
            best = (w, val)
    return OptimumResult(vectors=best[0], value=best[1], restarts=tuple(values))


@dataclass(frozen=True)
class GapRow:
    """Optimality gaps at one (d, v) over n_draws draws of chi_d norms.

    ``excess_*``: mean of (J_geometry - J_opt) / J_opt with its standard error;
    ``share_splus``: mean of (J_SimRF+ - J_opt) / (J_SimRF - J_opt), the share of
    SimRF's distance to the optimum that SimRF+ leaves, with its standard error.
    """

    d: int
    v: float
    n_draws: int
    excess_orf: tuple
    excess_simrf: tuple
    excess_splus: tuple
    share_splus: tuple


def _mean_se(x):
    x = np.asarray(x, dtype=float)
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size))


def optimality_gaps(d, v, n_draws=50, n_random=3, rng=None):
    """How far ORF, SimRF and SimRF+ are from the numerically optimised geometry,
    in expectation over i.i.d. chi_d norms (beyond the paper's single draw of Fig. 4).

    Each draw: norms ~ chi_d (d of them), J for the orthogonal, simplex and
    SimRF+ geometries (eq. simp+_obj, :func:`objective`) and for the best of
    L-BFGS runs started at SimRF, SimRF+ and ``n_random`` random geometries.

    Returns
    -------
    GapRow
    """
    from .couplings import simplex_matrix, simplex_plus_vectors

    d = check_int(d, "d", 2)
    v = check_real(v, "v", minimum=0.0)
    n_draws = check_int(n_draws, "n_draws", 2)
    n_random = check_int(n_random, "n_random", 0)
    gen = np.random.default_rng(check_rng(rng))
    S = np.asarray(simplex_matrix(d))
    ex_o, ex_s, ex_p, share = [], [], [], []
    for _ in range(n_draws):
        norms = np.sqrt(gen.chisquare(d, d))
        simrf = norms[:, None] * S
        splus = np.asarray(simplex_plus_vectors(norms[None, :], tol=1e-13, max_passes=20_000,
                                                on_unconverged="ignore")[0][0])
        orf = norms[:, None] * np.eye(d)
        opt = optimise_directions(norms, v, starts=[simrf, splus], n_random=n_random, rng=gen).value
        jo, js, jp = objective(orf, v), objective(simrf, v), objective(splus, v)
        ex_o.append((jo - opt) / opt)
        ex_s.append((js - opt) / opt)
        ex_p.append((jp - opt) / opt)
        share.append((jp - opt) / (js - opt) if js > opt else 0.0)
    return GapRow(d, float(v), n_draws, _mean_se(ex_o), _mean_se(ex_s), _mean_se(ex_p), _mean_se(share))


def optimality_gap_table(ds=(3, 6, 16), vs=(0.5, 1.0, 2.0), n_draws=50, rng=0, progress=None):
    """:func:`optimality_gaps` on a grid; returns a list of GapRow.

    ``progress(row, done, total)``, if given, is called after each (d, v).
    """
    ds = _int_list(ds, "ds", 2)
    vs = _real_list(vs, "vs")
    gen = np.random.default_rng(check_rng(rng))
    rows, total = [], len(ds) * len(vs)
    for d in ds:
        for v in vs:
            rows.append(optimality_gaps(d, v, n_draws=n_draws, rng=gen))
            if progress is not None:
                progress(rows[-1], len(rows), total)
    return rows


def _int_list(values, name, minimum):
    return check_sequence(values, name, lambda x, n: check_int(x, n, minimum), f"integers >= {minimum}")


def _real_list(values, name):
    return check_sequence(values, name, lambda x, n: check_real(x, n, minimum=0.0), "finite reals >= 0")


def _header():
    return (f"{'d':>3} {'v':>5} {'n':>4}  {'(J_ORF-J*)/J*':>22} {'(J_SimRF-J*)/J*':>22} "
            f"{'(J_SimRF+-J*)/J*':>22} {'SimRF+ share of gap':>22}")


def _line(r):
    def f(ms):
        return f"{ms[0]:.3e} +- {ms[1]:.1e}"

    return (f"{r.d:>3} {r.v:>5.2f} {r.n_draws:>4}  {f(r.excess_orf):>22} {f(r.excess_simrf):>22} "
            f"{f(r.excess_splus):>22} {f(r.share_splus):>22}")


def format_gap_table(rows):
    """Plain-text table of :func:`optimality_gap_table` rows."""
    return "\n".join([_header()] + [_line(r) for r in rows])


def _parser():
    from theory.cli import int_arg, make_parser, real_arg

    p = make_parser("python -m montecarlo.optimum",
                    "How far ORF, SimRF and SimRF+ are from the numerically optimised geometry of Fig. 4, in "
                    "expectation over chi_d norms: one table row per (d, v), printed as it is computed.")
    p.add_argument("--d", nargs="+", type=int_arg(2), default=[3, 6, 16], metavar="D", help="dimensions (>= 2)")
    p.add_argument("--v", nargs="+", type=real_arg(0.0), default=[0.5, 1.0, 2.0], metavar="V",
                   help="values of v = |x + y| (>= 0)")
    p.add_argument("--n-draws", type=int_arg(2), default=50, help="draws of the norms per (d, v) (>= 2)")
    p.add_argument("--seed", type=int_arg(0), default=0, help="random seed (>= 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    return p


def main(argv=None):
    """``python -m montecarlo.optimum``: print the optimality-gap table; returns the exit status."""
    import sys
    import time

    from theory.cli import main_runner

    def body(argv):
        args = _parser().parse_args(argv)
        print(_header(), flush=True)
        t0 = time.perf_counter()

        def progress(row, done, total):
            print(_line(row), flush=True)
            if not args.no_progress:
                print(f"[{done}/{total}] d = {row.d}, v = {row.v:g} done, {time.perf_counter() - t0:.0f} s",
                      file=sys.stderr, flush=True)

        optimality_gap_table(args.d, args.v, n_draws=args.n_draws, rng=args.seed, progress=progress)
        return 0

    return main_runner("python -m montecarlo.optimum", body, argv)


if __name__ == "__main__":  # python -m montecarlo.optimum
    raise SystemExit(main())
