r"""One visual language for every figure: colours, line styles and markers per coupling.

Every figure draws a coupling with the same colour, line style and marker
(:data:`COUPLING_STYLE`), analytic curves as lines and Monte Carlo estimates
as markers with error bars, so a reader can match theory and simulation at a
glance.  Colours are the Okabe-Ito palette (distinguishable with the common
colour-vision deficiencies); line styles differ as well, so the figures also
read in greyscale.

Matplotlib runs on the Agg backend (no display needed); :func:`use_paper_style`
sets small fonts and sizes suited to a two-column paper.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from theory.registry import RECORDS  # noqa: E402

#: Line/marker properties per coupling, read from the coupling registry
#: (:mod:`theory.registry`: label and style live in each coupling's record), plus
#: ``"optimum"`` (numerically optimised geometry) and ``"exact"`` (the exact
#: kernel in the downstream figures).
COUPLING_STYLE = {
    **{rec.name: {"label": rec.label, **rec.style} for rec in RECORDS},
    "optimum": {"label": "numerically optimised", "color": "#000000", "linestyle": ":", "marker": "*"},
    "exact": {"label": "exact kernel", "color": "#555555", "linestyle": ":", "marker": "x"},
}

#: Sequential colour map for families of curves indexed by the dimension d.
DIMENSION_CMAP = "viridis"

#: Single-column and double-column figure widths in inches (ICML).
COLUMN_WIDTH = 3.25
PAGE_WIDTH = 6.75


def style(coupling):
    """Matplotlib keyword arguments (color, linestyle, label) for a coupling's analytic curve.

    Parameters
    ----------
    coupling : str
        A key of :data:`COUPLING_STYLE`.

    Returns
    -------
    dict
    """
    s = _record(coupling)
    return {"color": s["color"], "linestyle": s["linestyle"], "label": s["label"]}


def _record(coupling):
    """The style record of ``coupling``; ValueError naming the allowed keys."""
    try:
        return COUPLING_STYLE[coupling]
    except (KeyError, TypeError):
        raise ValueError(f"coupling must be one of {', '.join(COUPLING_STYLE)}, got {coupling!r}") from None


def marker_style(coupling):
    """Keyword arguments for Monte Carlo points of a coupling (``errorbar`` / ``plot``).

    Markers are hollow so the analytic curve underneath stays visible.
    """
    s = _record(coupling)
    return {"color": s["color"], "marker": s["marker"], "linestyle": "none", "markersize": 4,
            "markerfacecolor": "white", "markeredgewidth": 1.0}


def label(coupling):
    """The paper's name of a coupling (``'SimRFs'`` for ``'simplex'``)."""
    return _record(coupling)["label"]


def use_paper_style():
    """Set rcParams for paper-sized figures (small serif fonts, thin lines, tight layout, TrueType fonts in PDFs)."""
    plt.rcParams.update({
        "font.family": "serif",
        "font.size": 8,
        "axes.titlesize": 8,
        "axes.labelsize": 8,
        "legend.fontsize": 7,
        "legend.frameon": False,
        "xtick.labelsize": 7,
        "ytick.labelsize": 7,
        "lines.linewidth": 1.2,
        "axes.linewidth": 0.6,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "savefig.dpi": 200,
        "figure.constrained_layout.use": True,
        "mathtext.fontset": "cm",
        # TrueType (Type 42) fonts in PDF/PS output: selectable, searchable text that journals accept
        "pdf.fonttype": 42,
        "ps.fonttype": 42,
    })


def mc_legend_handle(n_draws=None, what="±1 s.e."):
    """A neutral legend entry explaining that hollow markers with error bars are Monte Carlo (and how many
    draws each point has, when given)."""
    from matplotlib.lines import Line2D

    draws = "" if n_draws is None else ", " + format(int(n_draws), ",").replace(",", " ") + " draws"
    return Line2D([], [], color="0.3", marker="o", linestyle="none", markersize=4, markerfacecolor="white",
                  label=f"Monte Carlo ({what}{draws})")
