r"""Fig. 7 (``fig:frobnorm``): Gram-matrix error against the number of random features.

The setting, common random numbers and the analytic curve: :ref:`guide-figures.gram`
(``docs/guide/experiments.rst``).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.polynomial import chebyshev

import montecarlo as mc
from montecarlo.experiments.runtime import z_score
import theory

from ._context import to_numpy
from ._sweep import Cell
from .style import COLUMN_WIDTH, label, marker_style, style

COUPLINGS = ("iid", "orthogonal", "simplex")
N_POINTS, DIM, SIGMA = 64, 64, 0.1
#: Numbers of random features.
FEATURES = (8, 16, 32, 64, 128, 256, 512)


def conformity_excess_interpolant(coupling, d, vmin, vmax, ctx, degree=40):
    r"""Chebyshev interpolant of :math:`\rho_c(v) - e^{v^2}` on [vmin, vmax] from :func:`theory.conformity`."""
    return _interpolant(vmin, vmax, degree, _excess_values(coupling, d, _nodes(vmin, vmax, degree), ctx.dps))


def _nodes(vmin, vmax, degree):
    """The points at which ``Chebyshev.interpolate(f, degree, domain=[vmin, vmax])`` evaluates f."""
    seen = []

    def record(x):
        seen.append(np.array(x, dtype=float))
        return np.zeros_like(x)

    chebyshev.Chebyshev.interpolate(record, degree, domain=[vmin, vmax])
    return seen[0]


def _excess_values(coupling, d, vs, dps):
    r""":math:`\rho_c(v) - \rho_{\mathrm{IID}}(v)` at each v (a unit of the figures' sweep)."""
    from mpmath import mp

    with mp.workdps(dps):
        return np.array([float(theory.conformity(coupling, d, v) - theory.conformity("iid", d, v)) for v in vs])


def _interpolant(vmin, vmax, degree, values):
    """The Chebyshev interpolant whose values at :func:`_nodes` are ``values``."""
    nodes = _nodes(vmin, vmax, degree)

    def f(x):
        assert np.array_equal(np.asarray(x, dtype=float), nodes)
        return values

    return chebyshev.Chebyshev.interpolate(f, degree, domain=[vmin, vmax])


def _pair_geometry(X):
    a, b = np.triu_indices(X.shape[0])
    norms = np.linalg.norm(X, axis=1)
    v = np.linalg.norm(X[a] + X[b], axis=1)
    return a, b, norms, v, (v.min() * 0.999, v.max() * 1.001)


def pair_terms(X, ctx, excess=None):
    """Per-pair ingredients of E F for a <= b: indices, norms, v, A and B per coupling (``excess``: the
    conformity excess at the interpolation nodes per coupling, when already computed)."""
    a, b, norms, v, span = _pair_geometry(X)
    pref = np.exp(-2 * (norms[a] ** 2 + norms[b] ** 2))
    A = pref * np.exp(v * v) * np.expm1(v * v)
    B = {"iid": np.zeros_like(v)}
    for c in ("orthogonal", "simplex"):
        if excess is None:
            interp = conformity_excess_interpolant(c, X.shape[1], *span, ctx)
        else:
            interp = _interpolant(*span, INTERPOLATION_DEGREE, excess[c])
        B[c] = pref * interp(v)
    return {"a": a, "b": b, "v": v, "A": A, "B": B}


#: Degree of the Chebyshev interpolant of the conformity excess (41 nodes per coupling).
INTERPOLATION_DEGREE = 40


def expected_frobenius(terms, coupling, d, m):
    r""":math:`\mathbb E F(m)` from the per-pair terms (off-diagonal pairs counted twice)."""
    weight = np.where(terms["a"] == terms["b"], 1.0, 2.0)
    p = theory.coupled_pairs(d, m)
    return float(np.sum(weight * (terms["A"] + (p / m) * terms["B"][coupling])) / m)


def frobenius_draws(coupling, X, m, n_draws, ctx, gen, chunk_elements=1 << 22):
    """Squared Frobenius errors F of n_draws independent Gram estimates (numpy array (n_draws,)).

    The weights are drawn on the run's backend (:func:`montecarlo.sample_weights`)
    in chunks of bounded memory; F per draw is
    :func:`montecarlo.experiments.gram_errors` (the paper's statistic).
    """
    from montecarlo.experiments import gram_errors  # imported here: only Fig. 7 needs the experiments package

    d = X.shape[1]
    per = max(1, chunk_elements // (m * d))
    out, done = [], 0
    while done < n_draws:
        k = min(per, n_draws - done)
        W = to_numpy(mc.sample_weights(coupling, d, m, rng=gen, xp=ctx.backend, n_draws=k))
        out.append(np.atleast_1d(gram_errors(X, W)))
        done += k
    return np.concatenate(out)


def _paired_monte_carlo(X, n_draws, gen):
    """The numpy route of Fig. 7's Monte Carlo (a unit of the figures' sweep): paired draws through
    :func:`montecarlo.experiments.frobenius_curve`."""
    from montecarlo.experiments import frobenius_curve

    res = frobenius_curve(X, COUPLINGS, FEATURES, n_draws, rng=gen, paired=True, n_jobs=1)
    root = math.sqrt(n_draws)
    per = {c: (res.mean[c], res.stderr[c] * root, res.stderr[c]) for c in COUPLINGS}
    return per, {p: (res.diff_mean[p], res.diff_stderr[p]) for p in res.diff_mean}, True


def _backend_draws(coupling, X, m, n_draws, backend, gen):
    """:func:`frobenius_draws` on ``backend`` (a unit of the figures' sweep)."""
    from types import SimpleNamespace

    return frobenius_draws(coupling, X, m, n_draws, SimpleNamespace(backend=backend), gen)


def tail_check(ctx, m_values=(8, 256), n_draws=20_000, seed=424242, n_boot=20_000, z=-3.66):
    """Chance or bias?  Fig. 7's couplings at ``m_values`` with ``n_draws`` paired draws (the figure's data X,
    seeds independent of the figure's), against :math:`\\mathbb E F`: per (m, coupling) the mean, its z over
    the n_draws, the skewness of F, and from a bootstrap of 300-draw means (the main job's effort) the
    probability that such a mean's z is <= ``z`` and that it lies below 0.95 E F (:ref:`guide-figures.gram`)."""
    from scipy import stats

    from montecarlo.experiments.gram import exact_gram, frobenius_unit
    from montecarlo.experiments.sweeps import draw_blocks, unit_seed

    X = _data(ctx)
    terms = pair_terms(X, ctx)
    K = exact_gram(X)
    gen = np.random.default_rng(seed)
    out = []
    for m in m_values:
        F = np.concatenate([frobenius_unit(X, K, COUPLINGS, m, n, unit_seed(seed, m, k), True, "prf", {}, "gaussian", None)
                            for k, n in draw_blocks(n_draws)], axis=1)
        idx = gen.integers(0, F.shape[1], size=(n_boot, 300))
        for i, cp in enumerate(COUPLINGS):
            ef, f = expected_frobenius(terms, cp, DIM, m), F[i]
            se = f.std(ddof=1) / math.sqrt(f.size)
            sub = f[idx]
            z300 = (sub.mean(1) - ef) / (sub.std(1, ddof=1) / math.sqrt(300))
            out.append({"m": m, "coupling": cp, "expected_F": ef, "mean_F": float(f.mean()), "stderr_F": float(se),
                        "z": float((f.mean() - ef) / se), "skewness": float(stats.skew(f)),
                        "p_z300_below": float(np.mean(z300 <= z)),
                        "p_mean300_below_0.95": float(np.mean(sub.mean(1) <= 0.95 * ef))})
    return out


def _data(ctx):
    return ctx.rng("fig7/data").normal(0.0, SIGMA, size=(N_POINTS, DIM))


def fig7_parts(ctx):
    """The conformity excess at the interpolation nodes of each coupling and the Monte Carlo draws (paired on
    numpy; per coupling and m on another backend)."""
    X = _data(ctx)
    n_draws = ctx.n(300, 30)
    span = _pair_geometry(X)[-1]
    nodes = _nodes(*span, INTERPOLATION_DEGREE)
    parts = {("excess", c): Cell(_excess_values, (c, DIM, nodes, ctx.dps), cost=0.5) for c in ("orthogonal", "simplex")}
    if ctx.backend == "numpy":
        parts["mc"] = Cell(_paired_monte_carlo, (X, n_draws, ctx.rng("fig7/paired")), cost=0.01 * n_draws,
                           threads=True)
    else:
        for m in FEATURES:
            for c in COUPLINGS:
                parts["draws", c, m] = Cell(_backend_draws, (c, X, m, n_draws, ctx.backend, ctx.rng(f"fig7/{c}/{m}")),
                                            cost=3e-5 * n_draws * m, threads=True)
    return parts


def _monte_carlo(ctx, res, n_draws):
    """{coupling: (means, stds, stderrs)} over FEATURES, the paired differences {(a, b): (means, stderrs)},
    and whether the draws were paired (module docs), from the results of :func:`fig7_parts`."""
    if "mc" in res:
        return res["mc"]
    draws = {c: [res["draws", c, m] for m in FEATURES] for c in COUPLINGS}
    per = {c: (np.array([F.mean() for F in draws[c]]), np.array([F.std(ddof=1) for F in draws[c]]),
               np.array([F.std(ddof=1) / math.sqrt(F.size) for F in draws[c]])) for c in COUPLINGS}
    diffs = {}
    for j, a in enumerate(COUPLINGS):
        for b in COUPLINGS[:j]:
            d = [Fa - Fb for Fa, Fb in zip(draws[a], draws[b])]
            diffs[a, b] = (np.array([x.mean() for x in d]), np.array([x.std(ddof=1) / math.sqrt(x.size) for x in d]))
    return per, diffs, False


def fig7_frobenius(ctx):
    """Fig. 7 (``fig:frobnorm``): squared Frobenius Gram error against m, N = d = 64, sigma = 0.1."""
    fig7_render(ctx, ctx.compute(fig7_parts(ctx), "fig7 Gram"))


def fig7_render(ctx, res):
    """Draw and save Fig. 7 from the results of :func:`fig7_parts`."""
    import matplotlib.pyplot as plt

    X = _data(ctx)
    terms = pair_terms(X, ctx, {c: res["excess", c] for c in ("orthogonal", "simplex")})
    n_draws = ctx.n(300, 30)
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.4))
    analytic, mcs = [], []
    per, diffs, paired = _monte_carlo(ctx, res, n_draws)
    for c in COUPLINGS:
        expect = [expected_frobenius(terms, c, DIM, m) for m in FEATURES]
        analytic.append({"coupling": c, "m": FEATURES, "expected_F": expect,
                         "source": "sum of theory MSEs (Thm 3.2), conformity from theory.conformity"})
        means, stds, ses = per[c]
        mcs.append({"coupling": c, "m": FEATURES, "mean_F": means, "std_F": stds, "stderr_F": ses,
                    "n_draws": n_draws})
        st = style(c)
        mean, se = np.array(means), np.array(ses)
        ax.fill_between(FEATURES, np.maximum(mean - se, mean * 0.05), mean + se, color=st["color"], alpha=0.25, lw=0)
        ax.plot(FEATURES, expect, **st)
        ax.plot(FEATURES, means, **{**marker_style(c), "markersize": 4.5})
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("number of random features $m$")
    ax.set_ylabel(r"$\sum_{a,b}(K_{ab} - \widehat{K}_{ab})^2$")
    ax.set_title(fr"Gram matrix, $N = d = {DIM}$, $\sigma = {SIGMA}$")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], **{**style(c), "label": f"{label(c)}, closed form"}) for c in COUPLINGS]
    handles += [Line2D([], [], **{**marker_style(c), "label": f"{label(c)}, Monte Carlo"}) for c in COUPLINGS]
    handles.append(Line2D([], [], color="0.6", lw=4, alpha=0.5, label=f"band: ±1 s.e. ({n_draws} draws)"))
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=7)
    ax.set_xticks(FEATURES)
    ax.set_xticklabels([str(m) for m in FEATURES])
    data = {
        "name": "fig7_frobenius",
        "paper_label": "fig:frobnorm",
        "caption": ("Squared Frobenius error sum_ab (K_ab - Khat_ab)^2 of the PRF Gram-matrix estimate "
                    f"(the paper's statistic; not the relative norm) for N = {N_POINTS} points "
                    f"x ~ N(0, {SIGMA}^2 I_{DIM}), against the number of features m: Monte Carlo mean over "
                    f"{n_draws} draws (markers) with a band of one standard deviation of that mean (standard error; "
                    "the per-draw standard deviation is in std_F), and the exact "
                    "expectation (lines; sum of Thm 3.2 MSEs over pairs, independent blocks for m > d). "
                    + ("Common random numbers across couplings (shared chi_d norms and Gaussian blocks); "
                       "paired differences of F " if paired else
                       "Independent draws per coupling; unpaired differences of F (standard errors of independent "
                       "means) ")
                    + "with standard errors and z in 'differences' (z null where the standard error is 0). "
                    "F is heavy-tailed (skewness 15-120), so a mean of a few hundred draws usually falls below its "
                    "expectation and its z is not normal: low points are chance, not bias (20 000 further draws at "
                    "m = 8 and 256 agree with the lines within 1.5 %, |z| <= 1.3; a 300-draw z <= -3.66 has "
                    "probability 0.6-2 % there; figures.gram.tail_check)."),
        "statistic": "squared Frobenius norm sum_ab (K_ab - Khat_ab)^2",
        "N": N_POINTS, "d": DIM, "sigma": SIGMA,
        "X": X,
        "pairs": {"a": terms["a"], "b": terms["b"], "v": terms["v"], "A": terms["A"],
                  "B": {c: terms["B"][c] for c in ("orthogonal", "simplex")}},
        "analytic": analytic,
        "monte_carlo": mcs,
        "paired": paired,
        "differences": {f"{a} - {b}": {"m": FEATURES, "mean_F": mean, "stderr_F": se, "z": z_score(mean, se)}
                        for (a, b), (mean, se) in diffs.items()},
    }
    ctx.save(fig, "fig7_frobenius", data)
