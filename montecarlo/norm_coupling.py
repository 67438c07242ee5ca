r"""Coupling the norms as well as the directions (beyond the paper).

The norm couplings and the pair conformity they give: :ref:`guide-montecarlo.norm_coupling`
(``docs/guide/sampling.rst``).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import integrate, stats

from theory.errors import ConvergenceError
from theory.validation import show_int

from ._checks import check_budget, check_choice, check_int, check_real, check_rng, check_work
from .couplings import haar_orthogonal, simplex_first_rows, simplex_matrix
from .optimum import _int_list, _real_list, pair_kernel_squared as _pair_kernel

KINDS = ("iid", "antithetic", "stratified", "equal")
#: Level of the stratified tanh-sinh rules (steps 2^-level and 2^(1 - level)).
_STRATIFIED_LEVEL = 6


def _check_kind(kind):
    return check_choice(kind, "kind", KINDS)


def coupled_norms(d, n_blocks, kind, rng=None):
    """n_blocks blocks of d norms, each marginally chi_d, coupled within a block; array (n_blocks, d)."""
    n = check_int(n_blocks, "n_blocks", 1)
    d = check_int(d, "d", 2)
    _check_kind(kind)
    check_budget(n * d, f"(n_blocks, d) = ({show_int(n)}, {show_int(d)}) norms", "reduce n_blocks or d")
    gen = np.random.default_rng(check_rng(rng))
    if kind == "iid":
        return np.sqrt(gen.chisquare(d, (n, d)))
    u = gen.random((n, 1))
    if kind == "equal":
        uu = np.repeat(u, d, axis=1)
    elif kind == "stratified":
        uu = (u + np.arange(d)[None, :] / d) % 1.0
    else:  # antithetic
        uu = np.empty((n, d))
        half = d // 2
        base = gen.random((n, half))
        uu[:, 0:2 * half:2] = base
        uu[:, 1:2 * half:2] = 1.0 - base
        if d % 2:
            uu[:, -1] = gen.random(n)
    return stats.chi.ppf(uu, d)


def sample_norm_coupled_weights(d, m, kind, rng=None, n_draws=None):
    """Simplex blocks D S R with coupled norms: array (m, d), or (n_draws, m, d).

    m > d uses independent blocks (the last truncated), as everywhere else.  The rows of a
    truncated block (m < d, or the last block) are drawn as in the simplex sampler: the first r
    rows of D S R from the first r rows of a Haar matrix, O(d r) memory instead of O(d^2).
    """
    d = check_int(d, "d", 2)
    m = check_int(m, "m", 1)
    _check_kind(kind)
    draws = 1 if n_draws is None else check_int(n_draws, "n_draws", 1)
    gen = np.random.default_rng(check_rng(rng))
    full, r = divmod(m, d)
    check_budget(draws * m * d, f"{show_int(draws)} draws of {show_int(m)} rows in d = {show_int(d)}",
                 "reduce n_draws, m or d")
    parts = []
    if full:
        norms = coupled_norms(d, draws * full, kind, gen)
        rot = np.asarray(haar_orthogonal(draws * full, d, rng=gen))
        s = np.asarray(simplex_matrix(d))
        blocks = norms[:, :, None] * np.einsum("ij,njk->nik", s, rot)
        parts.append(blocks.reshape(draws, full * d, d))
    if r:
        norms = coupled_norms(d, draws, kind, gen)[:, :r]  # the coupled norms of the block's first r rows
        frames = np.asarray(haar_orthogonal(draws, d, rng=gen, cols=r))  # (draws, d, r)
        parts.append(simplex_first_rows(np.swapaxes(frames, 1, 2), norms, d, np))
    w = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
    return w[0] if n_draws is None else w


def conformity(d, v, kind):
    r"""Pair conformity of a simplex block with coupled norms, by quadrature (float64).

    Parameters
    ----------
    d : int >= 2
    v : float >= 0
    kind : {'iid', 'antithetic', 'stratified', 'equal'}

    Notes
    -----
    ``iid`` is the SimRF closed form :func:`theory.conformity` ('simplex')
    (checked against a double quadrature over the two norm quantiles);
    ``antithetic`` mixes the d ordered antithetic pairs (even d; d - 1 for odd
    d) with independent ones; ``stratified`` averages the d - 1 offsets
    k/d; ``equal`` is :math:`\mathbb E[F(2q(U)^2(d-2)/(d-1))]`.
    """
    d = check_int(d, "d", 2)
    v = check_real(v, "v", minimum=0.0)
    _check_kind(kind)
    value = _conformity(d, v, kind)
    if not math.isfinite(value):
        raise ValueError(f"the {kind} norm-coupled conformity at d = {d}, v = {v} overflows float64 (it grows like "
                         "e^{v^2}); use theory.conformity (mpmath) for the i.i.d. norms, or a smaller v")
    return value


def _conformity(d, v, kind):
    c = -1.0 / (d - 1)

    def q(u):
        return stats.chi.ppf(u, d)

    def pair(a, b):
        return _pair_kernel(d, v, a * a + b * b + 2 * c * a * b)

    def quad1(f, points=None):
        return _quad_checked(f, points, what=f"norm-coupled conformity ({kind}, d = {d}, v = {v})")

    def independent():
        # i.i.d. norms: the SimRF closed form (Thm 4.3); _independent_quadrature checks it
        from mpmath import mp

        import theory

        with mp.workdps(20):
            return float(theory.conformity("simplex", d, v))

    if kind == "iid":
        return independent()
    if kind == "equal":
        return quad1(lambda u: _pair_kernel(d, v, 2 * q(u) ** 2 * (1 + c)))
    if kind == "stratified":
        nodes = _de_nodes(2.0 ** -_STRATIFIED_LEVEL)[0].size
        check_budget(2 * d * nodes, f"the stratified quadrature's (d, nodes) = ({show_int(d)}, {nodes}) quantile "
                     "grids",
                     "reduce d")
        # every chi_d quantile costs about a hundred entries' work (scipy's ppf / isf): d quantile grids per offset
        check_work(100 * d * (d - 1) * nodes * 3 // 2, f"the stratified quadrature at d = {show_int(d)} (d - 1 "
                   f"offsets of d x {nodes} chi_d quantiles, two rules)", "reduce d")
        return _stratified(d, v, c, _STRATIFIED_LEVEL)
    anti = quad1(lambda u: pair(q(u), q(1.0 - u)))
    n_anti = 2 * (d // 2)  # ordered pairs inside antithetic couples
    return (n_anti * anti + (d * (d - 1) - n_anti) * independent()) / (d * (d - 1))


def _quad_checked(f, points, what, rtol=1e-9):
    """scipy quad on [0, 1] that raises instead of returning a doubtful value."""
    val, err, info, *msg = integrate.quad(f, 0.0, 1.0, points=points, limit=400, epsabs=0, epsrel=rtol,
                                          full_output=1)
    if msg or not err <= 10 * rtol * abs(val):
        raise ConvergenceError(f"{what}: quadrature did not converge (estimate {val:.6g}, error {err:.2g})")
    return val


def _de_nodes(h):
    """Tanh-sinh nodes on (0, 1): positions, their complements (accurate near 1) and weights."""
    t = np.arange(-int(3.2 / h), int(3.2 / h) + 1) * h
    s_ = np.pi / 2 * np.sinh(t)
    frac = 1.0 / (1.0 + np.exp(-2 * s_))
    cfrac = 1.0 / (1.0 + np.exp(2 * s_))
    w = h * (np.pi / 2) * np.cosh(t) / np.cosh(s_) ** 2 / 2
    return frac, cfrac, w


def _chi_quantile(lower, upper, d):
    """chi_d quantile at probability ``lower`` = 1 - ``upper``, each given accurately."""
    return np.where(lower < 0.5, stats.chi.ppf(np.minimum(lower, 0.5), d),
                    stats.chi.isf(np.minimum(upper, 0.5), d))


def _stratified(d, v, c, level=6):
    r"""Average over offsets k = 1..d-1 of :math:`\int_0^1 F(q(u), q(\{u + k/d\}))du`.

    Double-exponential (tanh-sinh) quadrature on each of the d strata, which
    absorbs the quantile's endpoint singularities (:math:`q \sim u^{1/d}` at 0,
    :math:`\sqrt{-2\log(1-u)}` at 1); tail probabilities are carried as
    complements, so no point rounds onto 0 or 1.  The rules with step h and
    2h must agree to 1e-10 relative, otherwise ConvergenceError.  Vectorised
    over strata, nodes and offsets.
    """
    def rule(h):
        frac, cfrac, w = _de_nodes(h)
        w = w / d  # weights on a stratum of width 1/d
        strata = np.arange(d)[:, None]
        a = _chi_quantile((strata + frac) / d, (d - 1 - strata + cfrac) / d, d)  # (d, n)
        total = 0.0
        for k in range(1, d):
            sk = (strata + k) % d
            b = _chi_quantile((sk + frac) / d, (d - 1 - sk + cfrac) / d, d)
            f = _pair_kernel(d, v, a * a + b * b + 2 * c * a * b)
            total += float(np.sum(f * w))
        return total / (d - 1)

    fine, coarse = rule(2.0 ** -level), rule(2.0 ** (1 - level))
    if abs(fine - coarse) > 1e-10 * abs(fine):
        raise ConvergenceError(f"stratified norm coupling: tanh-sinh rules disagree ({fine!r} vs {coarse!r}) "
                              f"at d = {d}, v = {v}; raise level")
    return fine


def _independent_quadrature(d, v, level=6):
    """The i.i.d.-norm pair conformity as a double integral over the two norm
    quantiles (product tanh-sinh rule, steps h and 2h must agree to 1e-10): an
    independent check of the closed form used by :func:`conformity`."""
    c = -1.0 / (d - 1)

    def rule(h):
        frac, cfrac, w = _de_nodes(h)
        q = _chi_quantile(frac, cfrac, d)
        a, b = q[:, None], q[None, :]
        return float(np.sum(_pair_kernel(d, v, a * a + b * b + 2 * c * a * b) * w[:, None] * w[None, :]))

    fine, coarse = rule(2.0 ** -level), rule(2.0 ** (1 - level))
    if abs(fine - coarse) > 1e-10 * abs(fine):
        raise ConvergenceError(f"independent-norm quadrature: rules disagree ({fine!r} vs {coarse!r})")
    return fine


def mse_ratio_to_simplex(d, v, kind):
    """MSE(coupled norms) / MSE(SimRF) for m = d (Thm 3.2: only the pair term changes); a ValueError where the
    MSEs overflow float64 (v above about 18)."""
    rho = conformity(d, v, kind)
    rho_s = conformity(d, v, "iid")
    with np.errstate(over="ignore", invalid="ignore"):
        diag = np.exp(v * v) * np.expm1(v * v)
        ratio = (diag + (d - 1) * (rho - np.exp(v * v))) / (diag + (d - 1) * (rho_s - np.exp(v * v)))
    if not math.isfinite(ratio):
        raise ValueError(f"the MSEs at d = {d}, v = {v} overflow float64 (they grow like e^{{2 v^2}}): use a smaller v")
    return float(ratio)


def norm_coupling_table(ds=(4, 6, 16, 64), vs=(0.25, 0.5, 1.0, 2.0), progress=None):
    """MSE ratios to SimRF (m = d) for every kind on a grid: dict (d, v, kind) -> ratio.

    ``progress(d, v, ratios, done, total)``, if given, is called after each (d, v)
    with the dict kind -> ratio of that point.
    """
    ds = _int_list(ds, "ds", 2)
    vs = _real_list(vs, "vs")
    table, total = {}, len(ds) * len(vs)
    for d in ds:
        for v in vs:
            point = {k: mse_ratio_to_simplex(d, v, k) for k in KINDS if k != "iid"}
            table.update({(d, v, k): r for k, r in point.items()})
            if progress is not None:
                progress(d, v, point, len(table) // len(point), total)
    return table


def _parser():
    from theory.cli import int_arg, make_parser, real_arg

    p = make_parser("python -m montecarlo.norm_coupling",
                    "MSE of simplex blocks with coupled chi_d norms (antithetic, stratified, equal) relative to "
                    "SimRFs (i.i.d. norms), m = d, by quadrature: one table row per (d, v), printed as computed.")
    p.add_argument("--d", nargs="+", type=int_arg(2), default=[4, 6, 16, 64], metavar="D", help="dimensions (>= 2)")
    p.add_argument("--v", nargs="+", type=real_arg(0.0), default=[0.25, 0.5, 1.0, 2.0], metavar="V",
                   help="values of v = |x + y| (>= 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    return p


def main(argv=None):
    """``python -m montecarlo.norm_coupling``: print the MSE-ratio table; returns the exit status."""
    import sys
    import time

    from theory.cli import main_runner

    def body(argv):
        args = _parser().parse_args(argv)
        print(f"{'d':>3} {'v':>5} " + " ".join(f"{k:>12}" for k in KINDS[1:]), flush=True)
        t0 = time.perf_counter()

        def progress(d, v, point, done, total):
            print(f"{d:>3} {v:>5.2f} " + " ".join(f"{point[k]:12.6f}" for k in KINDS[1:]), flush=True)
            if not args.no_progress:
                print(f"[{done}/{total}] d = {d}, v = {v:g} done, {time.perf_counter() - t0:.0f} s",
                      file=sys.stderr, flush=True)

        norm_coupling_table(args.d, args.v, progress=progress)
        return 0

    return main_runner("python -m montecarlo.norm_coupling", body, argv)


if __name__ == "__main__":  # python -m montecarlo.norm_coupling
    raise SystemExit(main())
