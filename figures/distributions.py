r"""Fig. 5 (``fig:the_dists``): the density of :math:`w_{ij} = \|w_i + w_j\|` per coupling.

Analytic curves: eq. ``iid_pdf`` (Lemma 4.1, :func:`theory.pdf_wij_iid`) for
IIDRFs; :math:`\chi_{2d}` (:func:`theory.pdf_chi`, the exact reduction of
Lemma 4.2 at :math:`\cos\theta = 0`) for ORFs; Lemma 4.2 at
:math:`\cos\theta = -1/(d-1)` for SimRFs, evaluated in double precision by
:func:`theory.pdf_wij_float` (the mpmath route :func:`theory.pdf_wij` costs
~0.3 s per point; the tests compare the two at plotted points).

Monte Carlo: histograms of :math:`w_{ij}` over disjoint pairs (1, 2), (3, 4),
... of blocks drawn by :func:`montecarlo.sample_weights`.  For the coupled
schemes :math:`w_{ij}^2 = w_i^2 + w_j^2 + 2w_iw_j\cos\theta` depends only on
the two (independent) norms, and IID rows are independent, so disjoint pairs
give independent samples and the bin counts are multinomial: the error bar
of a bin is :math:`\sqrt{n p(1-p)}/(n h)` with the observed p.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

import montecarlo as mc
import theory
from theory import registry

from ._context import to_numpy
from ._sweep import Cell
from .style import COLUMN_WIDTH, marker_style, mc_legend_handle, style

COUPLINGS = ("iid", "orthogonal", "simplex")
#: Dimensions of the two panels.
DIMENSIONS = (64, 4)


@lru_cache(maxsize=8)
def _gauss_legendre(n):
    """Gauss-Legendre nodes and weights on [-1, 1] (cached: the eigenvalue solve is not free)."""
    return np.polynomial.legendre.leggauss(n)


def analytic_pdf(coupling, w, d, ctx):
    """Density of w_ij on the grid ``w`` (floats) for one coupling, from :mod:`theory` (or Lemma 4.2 in float).

    Returns
    -------
    values : ndarray
    source : str
        Which function produced the curve.
    """
    return _pdf(coupling, w, d, ctx.dps)


def _pdf(coupling, w, d, dps):
    """:func:`analytic_pdf` at ``dps`` digits (a unit of the figures' sweep)."""
    rec = registry.get(coupling)
    c = rec.cos_theta(d) if rec.cos_theta is not None else None
    if c:  # a fixed non-right angle: Lemma 4.2 in double precision (the mpmath route is slow here)
        return (np.array([theory.pdf_wij_float(x, d, float(c)) for x in w]),
                "theory.pdf_wij_float (Lemma 4.2 in double precision)")
    from mpmath import mp

    with mp.workdps(dps):  # the registry's pair_pdf hook: Lemma 4.1 (IID) or Lemma 4.2 at cos = 0 (chi_2d)
        return (np.array([float(theory.coupling_pdf(coupling, x, d)) for x in w]),
                f"theory.coupling_pdf({coupling!r}) (Lemma 4.1 / 4.2)")


def _cos_theta(coupling, d):
    """The coupling's fixed pair cosine as a float (None for independent directions), from its record."""
    rec = registry.get(coupling)
    return None if rec.cos_theta is None else float(rec.cos_theta(d))


def _bin_nodes(edges, per_bin):
    """Gauss-Legendre nodes (n_bins, per_bin) in each bin and the weights (per_bin,)."""
    x, wt = _gauss_legendre(per_bin)
    lo, hi = edges[:-1], edges[1:]
    return (lo[:, None] + hi[:, None]) / 2 + (hi - lo)[:, None] / 2 * x[None, :], wt


def _bin_sums(vals, edges, wt):
    return np.sum(vals.reshape(len(edges) - 1, -1) * wt[None, :], axis=1) * np.diff(edges) / 2


def bin_probabilities(coupling, edges, d, ctx, per_bin=8):
    """Probability of each histogram bin under the analytic density (Gauss-Legendre in each bin).

    With bins narrower than a third of the density's spread, 4 nodes already
    give a relative error far below the Monte Carlo error of a bin.
    """
    pts, wt = _bin_nodes(edges, per_bin)
    vals, _ = analytic_pdf(coupling, pts.reshape(-1), d, ctx)
    return _bin_sums(vals, edges, wt)


def sample_wij(coupling, d, n_blocks, ctx, gen):
    """w_ij over the disjoint pairs (1,2), (3,4), ... of n_blocks sampled blocks (independent samples)."""
    return _sample_wij(coupling, d, n_blocks, ctx.backend, gen)


def _sample_wij(coupling, d, n_blocks, backend, gen):
    w = to_numpy(mc.sample_weights(coupling, d, d, rng=gen, xp=backend, n_draws=n_blocks))
    half = (d // 2) * 2
    pairs = w[:, 0:half:2, :] + w[:, 1:half:2, :]
    return np.linalg.norm(pairs, axis=-1).reshape(-1)


def _histogram(coupling, d, n_blocks, edges, backend, gen):
    """Bin counts of w_ij over n_blocks sampled blocks (a unit of the figures' sweep): (counts, n)."""
    samples = _sample_wij(coupling, d, n_blocks, backend, gen)
    counts, _ = np.histogram(samples, bins=edges)
    return counts, samples.size


def _layout(ctx, d):
    """The grid of the curve, the histogram's edges and the draws of one panel."""
    n_blocks = {64: ctx.n(4000, 400), 4: ctx.n(60000, 6000)}[d]
    lo = max(0.0, np.sqrt(2 * d) - 4.5)
    hi = np.sqrt(2 * d) + (3.5 if d > 8 else 4.5)
    return np.linspace(lo, hi, ctx.n(121, 61)), np.linspace(lo, hi, ctx.n(40, 24) + 1), n_blocks


#: Gauss-Legendre nodes per histogram bin of the expected bin probabilities (bins narrower than a third of the
#: density's spread: 4 nodes leave an error far below a bin's Monte Carlo error, bin_probabilities).
BIN_NODES = 4
#: Points of the analytic density per unit of the sweep (Lemma 4.2 in double precision costs ~10 ms a point).
PDF_CHUNK = 64


def fig5_parts(ctx):
    """The analytic densities on each panel's grid and at the bins' quadrature nodes (in chunks), and each
    coupling's histogram."""
    parts = {}
    for d in DIMENSIONS:
        grid, edges, n_blocks = _layout(ctx, d)
        nodes, _ = _bin_nodes(edges, BIN_NODES)
        pts = np.concatenate([grid, nodes.reshape(-1)])
        for coupling in COUPLINGS:
            chunk = PDF_CHUNK if _cos_theta(coupling, d) else len(pts)
            for k, lo in enumerate(range(0, len(pts), chunk)):
                parts["pdf", coupling, d, k] = Cell(_pdf, (coupling, pts[lo:lo + chunk], d, ctx.dps),
                                                    cost=0.01 * min(chunk, len(pts) - lo))
            parts["mc", coupling, d] = Cell(_histogram, (coupling, d, n_blocks, edges, ctx.backend,
                                                         ctx.rng(f"fig5/{coupling}/{d}")), cost=n_blocks * d * 2e-6,
                                             threads=True)
    return parts


def fig5_wij_pdf(ctx):
    """Fig. 5 (``fig:the_dists``): p(w_ij) for IIDRFs, ORFs and SimRFs at d = 64 and d = 4."""
    fig5_render(ctx, ctx.compute(fig5_parts(ctx), "fig5 p(w_ij)"))


def fig5_render(ctx, res):
    """Draw and save Fig. 5 from the results of :func:`fig5_parts`."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_WIDTH * 2, 2.2))
    panels = []
    for ax, d in zip(axes, DIMENSIONS):
        grid, edges, n_blocks = _layout(ctx, d)
        lo, hi = grid[0], grid[-1]
        centres = (edges[:-1] + edges[1:]) / 2
        width = edges[1] - edges[0]
        _, wt = _bin_nodes(edges, BIN_NODES)
        panel = {"d": d, "analytic": [], "monte_carlo": []}
        for coupling in COUPLINGS:
            chunks = sorted((k[3], v) for k, v in res.items() if k[:3] == ("pdf", coupling, d))
            values = np.concatenate([v[0] for _, v in chunks])
            source = chunks[0][1][1]
            pdf, node_values = values[:len(grid)], values[len(grid):]
            st = style(coupling)
            st["label"] = f"{st['label']}, closed form"
            ax.plot(grid, pdf, **st)
            panel["analytic"].append({"coupling": coupling, "w": grid, "pdf": pdf, "source": source,
                                      "cos_theta": _cos_theta(coupling, d)})
            counts, n = res["mc", coupling, d]
            p = counts / n
            dens = p / width
            err = np.sqrt(p * (1 - p) / n) / width
            ax.errorbar(centres, dens, yerr=err, elinewidth=0.6, capsize=0, **marker_style(coupling))
            panel["monte_carlo"].append({
                "coupling": coupling, "edges": edges, "centres": centres, "counts": counts, "n": n,
                "outside": int(n - counts.sum()), "density": dens, "stderr": err,
                "expected_bin_probability": _bin_sums(node_values, edges, wt),
                "source": f"montecarlo.sample_weights, {n_blocks} blocks, disjoint pairs"})
        ax.set_xlabel(r"$w_{ij} = \|\mathbf{w}_i + \mathbf{w}_j\|_2$")
        ax.set_ylabel(r"$p(w_{ij})$")
        ax.set_title(f"$d = {d}$")
        ax.set_xlim(lo, hi)
        ax.set_ylim(bottom=0)
        panels.append(panel)
    handles, labels = axes[-1].get_legend_handles_labels()
    handles = handles[:3] + [mc_legend_handle(what="histogram, ±1 s.e.")]
    axes[-1].legend(handles=handles, loc="upper right")
    data = {
        "name": "fig5_wij_pdf",
        "paper_label": "fig:the_dists",
        "caption": ("Density of w_ij = |w_i + w_j| for IIDRFs (eq. iid_pdf), ORFs (chi_2d) and SimRFs "
                    "(Lemma 4.2 at cos theta = -1/(d-1)) as lines, with Monte Carlo histograms as markers "
                    "(independent disjoint pairs of sampled blocks, error bars 1 multinomial s.e.). Coupling moves "
                    "mass away from large w_ij, which lowers the RF-conformity."),
        "panels": panels,
    }
    ctx.save(fig, "fig5_wij_pdf", data)
