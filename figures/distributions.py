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
    rec = registry.get(coupling)
    c = rec.cos_theta(d) if rec.cos_theta is not None else None
    if c:  # a fixed non-right angle: Lemma 4.2 in double precision (the mpmath route is slow here)
        return (np.array([theory.pdf_wij_float(x, d, float(c)) for x in w]),
                "theory.pdf_wij_float (Lemma 4.2 in double precision)")
    with ctx.precision():  # the registry's pair_pdf hook: Lemma 4.1 (IID) or Lemma 4.2 at cos = 0 (chi_2d)
        return (np.array([float(theory.coupling_pdf(coupling, x, d)) for x in w]),
                f"theory.coupling_pdf({coupling!r}) (Lemma 4.1 / 4.2)")


def _cos_theta(coupling, d):
    """The coupling's fixed pair cosine as a float (None for independent directions), from its record."""
    rec = registry.get(coupling)
    return None if rec.cos_theta is None else float(rec.cos_theta(d))


def bin_probabilities(coupling, edges, d, ctx, per_bin=8):
    """Probability of each histogram bin under the analytic density (Gauss-Legendre in each bin).

    With bins narrower than a third of the density's spread, 4 nodes already
    give a relative error far below the Monte Carlo error of a bin.
    """
    x, wt = _gauss_legendre(per_bin)
    lo, hi = edges[:-1], edges[1:]
    pts = (lo[:, None] + hi[:, None]) / 2 + (hi - lo)[:, None] / 2 * x[None, :]
    vals, _ = analytic_pdf(coupling, pts.reshape(-1), d, ctx)
    return np.sum(vals.reshape(pts.shape) * wt[None, :], axis=1) * (hi - lo) / 2


def sample_wij(coupling, d, n_blocks, ctx, gen):
    """w_ij over the disjoint pairs (1,2), (3,4), ... of n_blocks sampled blocks (independent samples)."""
    w = to_numpy(mc.sample_weights(coupling, d, d, rng=gen, xp=ctx.backend, n_draws=n_blocks))
    half = (d // 2) * 2
    pairs = w[:, 0:half:2, :] + w[:, 1:half:2, :]
    return np.linalg.norm(pairs, axis=-1).reshape(-1)


def fig5_wij_pdf(ctx):
    """Fig. 5 (``fig:the_dists``): p(w_ij) for IIDRFs, ORFs and SimRFs at d = 64 and d = 4."""
    import matplotlib.pyplot as plt

    n_blocks = {64: ctx.n(4000, 400), 4: ctx.n(60000, 6000)}
    n_bins = ctx.n(40, 24)
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_WIDTH * 2, 2.2))
    panels = []
    bar = ctx.progress_bar(len(DIMENSIONS) * len(COUPLINGS), "fig5 p(w_ij)")
    for ax, d in zip(axes, DIMENSIONS):
        lo = max(0.0, np.sqrt(2 * d) - 4.5)
        hi = np.sqrt(2 * d) + (3.5 if d > 8 else 4.5)
        grid = np.linspace(lo, hi, ctx.n(121, 61))
        edges = np.linspace(lo, hi, n_bins + 1)
        centres = (edges[:-1] + edges[1:]) / 2
        width = edges[1] - edges[0]
        panel = {"d": d, "analytic": [], "monte_carlo": []}
        for coupling in COUPLINGS:
            pdf, source = analytic_pdf(coupling, grid, d, ctx)
            ax.plot(grid, pdf, **style(coupling))
            panel["analytic"].append({"coupling": coupling, "w": grid, "pdf": pdf, "source": source,
                                      "cos_theta": _cos_theta(coupling, d)})
            samples = sample_wij(coupling, d, n_blocks[d], ctx, ctx.rng(f"fig5/{coupling}/{d}"))
            n = samples.size
            counts, _ = np.histogram(samples, bins=edges)
            p = counts / n
            dens = p / width
            err = np.sqrt(p * (1 - p) / n) / width
            ax.errorbar(centres, dens, yerr=err, elinewidth=0.6, capsize=0, **marker_style(coupling))
            panel["monte_carlo"].append({
                "coupling": coupling, "edges": edges, "centres": centres, "counts": counts, "n": n,
                "outside": int(n - counts.sum()), "density": dens, "stderr": err,
                "expected_bin_probability": bin_probabilities(coupling, edges, d, ctx, per_bin=ctx.n(8, 4)),
                "source": f"montecarlo.sample_weights, {n_blocks[d]} blocks, disjoint pairs"})
            bar.update()
        ax.set_xlabel(r"$w_{ij} = \|\mathbf{w}_i + \mathbf{w}_j\|_2$")
        ax.set_ylabel(r"$p(w_{ij})$")
        ax.set_title(f"$d = {d}$")
        ax.set_xlim(lo, hi)
        ax.set_ylim(bottom=0)
        panels.append(panel)
    bar.close()
    handles, labels = axes[-1].get_legend_handles_labels()
    handles = handles[:3] + [mc_legend_handle()]
    axes[-1].legend(handles=handles, loc="upper right")
    data = {
        "name": "fig5_wij_pdf",
        "paper_label": "fig:the_dists",
        "caption": ("Density of w_ij = |w_i + w_j| for IIDRFs (eq. iid_pdf), ORFs (chi_2d) and SimRFs "
                    "(Lemma 4.2 at cos theta = -1/(d-1)), with Monte Carlo histograms (independent disjoint "
                    "pairs of sampled blocks, error bars 1 multinomial s.e.). Coupling moves mass away from "
                    "large w_ij, which lowers the RF-conformity."),
        "panels": panels,
    }
    ctx.save(fig, "fig5_wij_pdf", data)
