"""The list of figures: name, the paper's LaTeX label, and the function that draws it."""

from __future__ import annotations

from dataclasses import dataclass

from . import attention, distributions, downstream, geometry, gram, mse, optimality, winners


@dataclass(frozen=True)
class Figure:
    """One figure of the run.

    Attributes
    ----------
    name : str
        File stem of the outputs (``NAME.png``, ``NAME.pdf``, ``NAME.json``) and
        the name accepted by ``--only``.
    paper_label : str or None
        The LaTeX label in the paper (None for figures beyond the paper).
    description : str
    draw : callable
        ``draw(ctx)`` writes the files (or raises :class:`figures.downstream.Skip`).
    parts : callable, optional
        ``parts(ctx)``: what the figure needs computed (:ref:`figures._sweep <guide-figures._sweep>`), so that
        ``python -m figures`` runs every figure's cells in one parallel sweep.
    render : callable, optional
        ``render(ctx, results)``: draws and saves the figure from the results of its parts
        (``draw(ctx)`` is ``render(ctx, ctx.compute(parts(ctx)))``).  A figure without
        ``parts`` and ``render`` is drawn by ``draw`` in the main process.
    """

    name: str
    paper_label: str | None
    description: str
    draw: object
    parts: object = None
    render: object = None

    @property
    def short(self):
        """``'fig6'`` for ``'fig6_mse_ratio'`` (also accepted by ``--only``)."""
        return self.name.split("_", 1)[0] if self.name.startswith("fig") else self.name


def _no_parts(ctx):
    """The parts of a figure whose computing is all in its drawing (a few draws: Figs. 2-4)."""
    return {}


def _whole(draw):
    """``render(ctx, results)`` of a figure without parts: its ``draw(ctx)``."""
    def render(ctx, results):
        return draw(ctx)

    return render


FIGURES = (
    Figure("fig2_geometry", "fig:scheme", "geometry of IIDRFs, ORFs, SimRFs at d = 2, 3", geometry.fig2_geometry,
           _no_parts, _whole(geometry.fig2_geometry)),
    Figure("fig3_simplex_plus", "fig:splusfig-main", "SimRFs vs SimRFs+ at d = 3", geometry.fig3_simplex_plus,
           _no_parts, _whole(geometry.fig3_simplex_plus)),
    Figure("fig4_conformity", "corr_inset_main", "RF-conformity of one draw of norms, d = 6, v = 1",
           optimality.fig4_conformity, _no_parts, _whole(optimality.fig4_conformity)),
    Figure("fig5_wij_pdf", "fig:the_dists", "density of w_ij with Monte Carlo histograms",
           distributions.fig5_wij_pdf, distributions.fig5_parts, distributions.fig5_render),
    Figure("fig6_mse_ratio", "var_comp_fig", "PRF MSE ratios against v at d = 64", mse.fig6_mse_ratio,
           mse.fig6_parts, mse.fig6_render),
    Figure("fig7_frobenius", "fig:frobnorm", "Gram-matrix squared Frobenius error against m", gram.fig7_frobenius,
           gram.fig7_parts, gram.fig7_render),
    Figure("fig8_nonparametric", "nonparam_results", "nonparametric classification on the UCI data (paper protocol)",
           downstream.fig8_nonparametric, downstream.fig8_parts, downstream.fig8_render),
    Figure("fig10_sigma_search", "tunegraph", "sigma search on the UCI data", downstream.fig10_sigma_search,
           downstream.fig10_parts, downstream.fig10_render),
    Figure("new_mse_ratio_vs_d", None, "PRF MSE ratios against v for d = 4 ... 256", mse.new_mse_ratio_vs_d,
           mse.new_mse_ratio_vs_d_parts, mse.new_mse_ratio_vs_d_render),
    Figure("new_rff_mse_ratio", None, "RFF MSE ratios against z for d = 4, 16, 64", mse.new_rff_mse_ratio,
           mse.new_rff_mse_ratio_parts, mse.new_rff_mse_ratio_render),
    Figure("new_rff_simplex_map", None, "RFF MSE ratio SimRF/ORF over d and z", mse.new_rff_simplex_map,
           mse.new_rff_simplex_map_parts, mse.new_rff_simplex_map_render),
    Figure("new_attention_scan", None,
           "random-feature attention error (PRF/OPRF/SDERF x couplings x m) vs logit scale, with uniform attention",
           attention.new_attention_scan, attention.new_attention_scan_parts, attention.new_attention_scan_render),
    Figure("new_winners_map", None, "best feature kind x coupling over d and v, MSE vs SimRF-PRF",
           winners.new_winners_map, winners.new_winners_map_parts, winners.new_winners_map_render),
)

FIGURES_BY_NAME = {f.name: f for f in FIGURES}


def lookup(name):
    """The figure called ``name`` (full name, short ``figN`` form or the paper's LaTeX label).

    Raises
    ------
    ValueError
        Naming the allowed names.
    """
    if isinstance(name, str) and name:
        for f in FIGURES:
            if name in (f.name, f.short, f.paper_label):
                return f
    allowed = ", ".join(f.name for f in FIGURES)
    raise ValueError(f"unknown figure {name!r}; choose from: {allowed} "
                     "(or the short form fig2 ... fig10 without fig9, which is `python -m figures.reproduce "
                     "performer`, or the paper's LaTeX label)")
