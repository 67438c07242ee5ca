r"""Regenerate the figures of Simplex Random Features (Reid et al., ICML 2023), and new ones.

``python -m figures`` draws every figure that one machine can compute, with
analytic curves from :mod:`theory` and Monte Carlo points from
:mod:`montecarlo` on the same axes, and writes ``NAME.png``, ``NAME.pdf``
and the plotted numbers ``NAME.json`` for each (``--out DIR``, default
``./simplex_rf_figures``; ``index.json`` lists what was written, skipped or
failed).  Every file is written under a temporary name and renamed into place,
so an interrupted run never leaves a half-written file; PDFs embed TrueType
fonts.  Options: ``--only NAME``, ``--quick``, ``--seed``, ``--dps``,
``--backend {numpy,torch}``, ``--uci-dir DIR`` (default ``$SIMPLEX_RF_UCI_DIR``,
else the copy shipped with :mod:`montecarlo.experiments`), ``--no-progress``,
``--traceback``, ``--list``; ``--help`` shows them with their defaults.  Exit
status 0 when every selected figure was written or skipped, 1 when one failed
(one line on stderr each), 2 for a bad option.

The figures (name, the paper's LaTeX label, what it shows, the function that
draws it) are listed once, in :data:`figures.registry.FIGURES`;
``python -m figures --list`` prints them.  Each says what it needs computed
(its *parts*: closed-form curves, Monte Carlo cells, the experiments' blocks
of draws) and how it is drawn from their results; the main job runs the parts
of every selected figure in one parallel sweep (numpy work on threads, the
pure-Python closed forms on worker processes, points that several curves
share computed once), then draws the figures in the worker processes and
writes their files here (``figures._sweep``); ``--n-jobs 1`` does it all in
one process, with the same numbers.

Colours, line styles, markers and labels per coupling come from each
coupling's record in :mod:`theory.registry` (through :mod:`figures.style`),
so every figure draws a coupling the same way.
"""

from .cli import main
from .registry import FIGURES, FIGURES_BY_NAME, Figure, lookup
from .style import COUPLING_STYLE

__all__ = ["COUPLING_STYLE", "FIGURES", "FIGURES_BY_NAME", "Figure", "lookup", "main"]
