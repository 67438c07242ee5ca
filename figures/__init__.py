r"""Regenerate the figures of Simplex Random Features (Reid et al., ICML 2023), and new ones.

``python -m figures`` draws every figure that one machine can compute, with
analytic curves from :mod:`theory` and Monte Carlo points from
:mod:`montecarlo` on the same axes, and writes ``NAME.png``, ``NAME.pdf``
and the plotted numbers ``NAME.json`` for each (``--out DIR``, default
``./simplex_rf_figures``; ``index.json`` lists what was written or skipped).
Options: ``--only NAME``, ``--quick``, ``--seed``, ``--dps``,
``--backend {numpy,torch}``, ``--uci-dir DIR`` (or ``$SIMPLEX_RF_UCI_DIR``),
``--no-progress``, ``--list``.

==========================  ===================  ===========================================
name                        paper label          module
==========================  ===================  ===========================================
``fig2_geometry``           ``fig:scheme``       :mod:`figures.geometry`
``fig3_simplex_plus``       ``fig:splusfig-main``  :mod:`figures.geometry`
``fig4_conformity``         ``corr_inset_main``  :mod:`figures.optimality`
``fig5_wij_pdf``            ``fig:the_dists``    :mod:`figures.distributions`
``fig6_mse_ratio``          ``var_comp_fig``     :mod:`figures.mse`
``fig7_frobenius``          ``fig:frobnorm``     :mod:`figures.gram`
``fig8_nonparametric``      ``nonparam_results`` :mod:`figures.downstream` (UCI data)
``fig10_sigma_search``      ``tunegraph``        :mod:`figures.downstream` (UCI data)
``new_mse_ratio_vs_d``      (new)                :mod:`figures.mse`
``new_rff_mse_ratio``       (new)                :mod:`figures.mse`
==========================  ===================  ===========================================

Colours, line styles and markers per coupling are defined once in
:mod:`figures.style` and used by every figure.
"""

from .cli import main
from .registry import FIGURES, FIGURES_BY_NAME, Figure, lookup
from .style import COUPLING_STYLE

__all__ = ["COUPLING_STYLE", "FIGURES", "FIGURES_BY_NAME", "Figure", "lookup", "main"]
